#pragma once
/// \file commands.h
/// The subcommands of sparqlab-cli and the options they share (CONTRACTS.md §2).

#include "args.h"

#include "attention/attention.h"

#include "base/job.h"

#include <chrono>
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

/// Every subcommand of CONTRACTS.md §2, in the order --help lists them.
const std::vector<Command>& commands();
const Command* findCommand(const std::string& name);

/// The ATTN options shared by generate, bpc, attend (and the GUI).
extern const std::set<std::string> kAttnValued;
extern const std::set<std::string> kAttnFlags;

/// Builds the attention configuration from the ATTN options (UsageError on bad values).
attention::AttentionConfig attentionConfig(const Args& args);
/// --methods M,M,…: one configuration per method, with the ATTN options for their other
/// parameters (UsageError naming an unknown method).
std::vector<attention::AttentionConfig> methodList(const Args& args, const std::string& list);

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
