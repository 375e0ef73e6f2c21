#pragma once
/// \file commands.h
/// The subcommands of sparqlab-cli and the options they share (CONTRACTS.md §2).

#include "args.h"

#include "attention/attention.h"

#include "base/job.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace sparqlab::cli {

/// One subcommand. `run` is empty while the subcommand is not available in this build.
struct Command {
    const char* name;
    const char* usage;
    const char* summary;
    std::function<int(const std::vector<std::string>&)> run;
};

/// Every subcommand, in the order --help lists them: the one home of their usage lines
/// (CONTRACTS.md §2 gives the rules they share and what their outputs hold).
const std::vector<Command>& commands();
const Command* findCommand(const std::string& name);

/// The ATTN options shared by generate, bpc, attend (and the GUI).
extern const std::set<std::string> kAttnValued;
extern const std::set<std::string> kAttnFlags;

/// Builds the attention configuration of --method from the ATTN options (UsageError on bad
/// values), with a note on stderr for each option given that it does not take
/// (noteIgnoredOptions).
attention::AttentionConfig attentionConfig(const Args& args);
/// The default r (32) above a small model's head dimension `headDim`: all its components. An r
/// the user gives above it stays an error (validateFor). Returns the note to say after the run
/// (an error stays one line), or "".
std::string fitDefaultR(const Args& args, attention::AttentionConfig& config, int64_t headDim);
/// Each method's configuration from the ATTN options but --method: its own defaults
/// (applyDefaults), then the options given, and the calibration file of its own option (each
/// file read once). Checks the values at once (UsageError); `args` must outlive the function.
std::function<attention::AttentionConfig(attention::Method)> attentionConfigs(const Args& args);
/// --methods M,M,…: one configuration per method (attentionConfigs; UsageError naming an
/// unknown method), and a note for each option none of them takes.
std::vector<attention::AttentionConfig> methodList(const Args& args, const std::string& list);
/// One line on stderr for each ATTN parameter option given that none of `methods` takes
/// ("note: --r does not apply to quest (it takes --k --local --page-size); ignored"): a run
/// goes on, as a sweep over methods with the same options would want, but a user who meant
/// the option to change something is told it did not.
void noteIgnoredOptions(const Args& args, const std::vector<attention::Method>& methods);

/// Writes a command's JSON result to `path` (atomically, base/atomic_file.h), or to stdout
/// where `path` is "-"; returns the stream for the command's summary line: stderr where stdout
/// holds the JSON, else stdout.
std::FILE* writeJsonResult(const std::string& path, const std::string& json);

/// A progress bar on stderr with the time left, drawn only when stderr is a terminal.
class ProgressBar {
public:
    explicit ProgressBar(std::string label);
    ~ProgressBar();
    void update(int64_t done, int64_t total);
    /// A Job reporting to this bar (base/job.h); the bar must outlive it.
    base::Job job();

private:
    std::string m_label;
    bool m_tty;
    int m_lastPercent = -1;
    std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};

// Subcommand entry points.
int runAttend(const std::vector<std::string>& argv);
int runStats(const std::vector<std::string>& argv);
int runFigures(const std::vector<std::string>& argv);
int runInfo(const std::vector<std::string>& argv);
int runSession(const std::vector<std::string>& argv);
int runTokenize(const std::vector<std::string>& argv);
int runDetokenize(const std::vector<std::string>& argv);
int runLogits(const std::vector<std::string>& argv);
int runGenerate(const std::vector<std::string>& argv);
int runCapture(const std::vector<std::string>& argv);
int runBpc(const std::vector<std::string>& argv);
int runHeads(const std::vector<std::string>& argv);
int runCalibrate(const std::vector<std::string>& argv);
int runMethods(const std::vector<std::string>& argv);
int runFamilies(const std::vector<std::string>& argv);
int runTasks(const std::vector<std::string>& argv);
int runChatTemplate(const std::vector<std::string>& argv);
int runInitModel(const std::vector<std::string>& argv);
int runTrainDemo(const std::vector<std::string>& argv);
int runBench(const std::vector<std::string>& argv);
int runBenchGenerate(const std::vector<std::string>& argv);
int runEval(const std::vector<std::string>& argv);
int runOverlap(const std::vector<std::string>& argv);
int runTraffic(const std::vector<std::string>& argv);

} // namespace sparqlab::cli
