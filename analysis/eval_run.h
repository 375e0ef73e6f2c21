#pragma once
/// \file eval_run.h
/// `sparqlab-cli eval` (CONTRACTS.md §8): the paper's task-level study on one model — every
/// example of a task under every method and parameter set of a grid, one JSON line each with
/// the metric, the example's length and its compression ratio (SPARQ.md §5, METHODS.md §10).
/// Lines are appended to `<out>.partial` as they are computed and the file is renamed to
/// `<out>` at the end; `resume` continues a partial (or complete) file, skipping the lines it
/// holds, so a killed run loses at most the example in flight. `shard i/n` takes every n-th
/// example from the i-th, so n jobs together cover the study and their files concatenate.
///
/// Generation tasks run as the paper's harness does: the prompt is prefilled once with dense
/// attention and each method continues from it (the last prompt position and every generated
/// one use the method; model::PromptPrefill). `bpc` is teacher-forced with the method at
/// every position, exactly as `sparqlab-cli bpc`.
///
/// Threading: call from one thread; progress and cancel are polled from it.

#include "analysis/eval_task_table.h"
#include "attention/attention.h"
#include "base/job.h"
#include "text/chat_template.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::model {
class Model;
struct ModelConfig;
} // namespace sparqlab::model

namespace sparqlab::analysis {

/// One method with one parameter set.
struct EvalPoint {
    attention::AttentionConfig config;
    std::string params; ///< the JSON object of its parameters (compact, keys in table order)
};

/// The grid of `methods`: each method's default from the method table (MethodInfo::evalGrid:
/// the paper's Table G1), k scaled to the model's context where the paper's would exceed it
/// (× min(1, context / 2,048)), r clamped to the head dimension; `overrides` (a parameter's
/// values, as the command line gives them) replace the defaults of every method taking that
/// parameter, and `local` ("k/4", a number, or empty for the defaults) sets the local window
/// of every method with one. `base` gives everything else (calibration files, τ, GQA rule).
/// Duplicates are dropped. Throws attention::AttentionError for a bad value.
std::vector<EvalPoint>
evalGrid(const std::vector<attention::Method>& methods,
         const std::map<attention::Param, std::vector<std::string>>& overrides,
         const std::string& local, int64_t headDim, int64_t contextTokens,
         const attention::AttentionConfig& base = {});

/// The parameters of a configuration as the JSON object of an eval line: each parameter the
/// method takes, under its attribute name (k and local as in effect).
std::string evalParamsJson(const attention::AttentionConfig& config);

/// The compression ratio of one decode step of `model` over S positions: the method's share of
/// the attention layers' cache traffic as `traffic` counts it (decodeTraffic's methodRatio: each
/// layer at the keys its query sees, as dense where k covers them; on DeepSeek-V4 against the
/// model's own reads); 1 for dense.
double stepCompression(const model::ModelConfig& model, const attention::AttentionConfig& config,
                       int64_t S);

struct EvalOptions {
    EvalTask task = EvalTask::Repetition;
    std::string dataPath;
    std::string outPath;
    std::vector<EvalPoint> points;
    EvalDataOptions data; ///< contextTokens and countTokens are filled from the model
    int64_t limit = -1;   ///< examples after shuffling (< 0: all)
    uint64_t seed = 0;    ///< the shuffle and the examples' own randomness
    bool resume = false;
    int64_t shardIndex = 0, shardCount = 1;
    bool densePrefill = true; ///< false: the method attends over the prompt too
    /// When set, each prompt is a user turn (after `system`'s when not empty) of this chat
    /// template with the generation prompt, tokenized as apply_chat_template does; the
    /// template's own tokens come off the context the data may fill. Teacher-forced tasks
    /// (bpc) score the text as it is.
    std::shared_ptr<const text::ChatTemplate> chat;
    std::string system;
    /// Each line carries the decode-attention speed-up over dense that the decode engine
    /// measures for the model's shape at the example's length (RULER's L, else the prompt's
    /// tokens) on this machine: "speedup" (the median ratio), "speedup_low"/"speedup_high"
    /// (from the quartiles: dense's first over the method's third and the reverse), "speed_device".
    /// Methods the engine does not run carry none. Measured once per length.
    bool measureSpeed = false;
    std::string speedDevice = "cpu";
    std::string modelName; ///< "model" of each line: evalModelName()
    std::string createdBy; ///< "created_by" of each line
    /// Progress after each example (examples done, examples in this shard); cancel between
    /// lines (base/job.h).
    base::Job job;
    /// One line per calibrated method and example without a calibration file.
    std::function<void(const std::string& message)> note;
};

struct EvalSummary {
    int64_t examples = 0; ///< in this shard
    int64_t lines = 0;    ///< written by this run
    int64_t skipped = 0;  ///< already in the file (resume)
    int64_t dropped = 0;  ///< examples of the data that do not fit the context
    std::string outPath;
};

/// The name a study's lines give its model ("model"): "demo", or the model folder's name; the
/// command line and the lab write the same, so that either resumes the other's file.
std::string evalModelName(const model::Model& model);

/// Runs the study. Throws EvalDataError (data), attention::AttentionError (parameters),
/// std::runtime_error naming the output file, Cancelled (the partial file stays for resume).
EvalSummary runEval(model::Model& model, const EvalOptions& options);

/// The ids the model reads for a prompt: as it is (with the tokenizer's special tokens), or as a
/// user turn of `options.chat` with its generation prompt; an answer prefix (RULER's) follows,
/// after the template's assistant header when there is one.
std::vector<int64_t> evalPromptIds(const text::Tokenizer& tok, const EvalOptions& options,
                                   const std::string& prompt, const std::string& answerPrefix);
/// The examples the study would run, after shuffling, limit and shard (for the GUI and tests).
std::vector<EvalExample> evalExamples(model::Model& model, const EvalOptions& options,
                                      int64_t* dropped = nullptr);

} // namespace sparqlab::analysis
