#pragma once
/// \file eval_task_spec.h
/// What an eval task unit registers (analysis/tasks/, one file per task): its name, metric and
/// how its figures show it, the reader of its data and the scorer of a generation. `eval`, its
/// results, `figures --eval`, the Trade-offs tab and the docs find every task through
/// evalTaskSpec()/evalTaskSpecs(); docs/adding-an-eval-task.md walks through writing one.
///
/// Threading: specs are immutable after registration; every hook is reentrant.

#include "analysis/eval_task_table.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace sparqlab::analysis {

/// Everything an eval task unit registers.
struct EvalTaskSpec {
    EvalTask id = EvalTask::Repetition;
    const char* name = nullptr;        ///< the --task name, the results' "task"
    const char* label = nullptr;       ///< shown in the GUI
    const char* summary = nullptr;     ///< one line: what it measures and where it comes from
    const char* metric = nullptr;      ///< the results' "metric" (CONTRACTS.md §8)
    const char* metricLabel = nullptr; ///< the metric on a figure's axis
    int digits = 3;                    ///< decimals of the metric in tables
    const char* data = nullptr;        ///< the data files it reads, for --help and the GUI
    /// Data the project ships for it, under resources/ (empty: none): what the Trade-offs tab
    /// runs on out of the box.
    const char* shippedData = "";
    bool higherIsBetter = true;
    /// Scored teacher-forced (bits per character of EvalExample::text), not by a generation.
    bool teacherForced = false;
    /// Examples keep the data's order (no shuffle before --limit).
    bool keepOrder = false;
    /// Its figures add a depth × length map per method (the needle).
    bool depthMap = false;
    /// The examples of the data's text (`path` names it in errors; EvalDataError).
    std::vector<EvalExample> (*read)(const std::string& text, const std::string& path,
                                     const EvalDataOptions& o) = nullptr;
    /// One generation's value of the metric (generation tasks).
    double (*score)(const std::string& output, const EvalExample& ex) = nullptr;
    /// Extra fields of the example's results lines (the needle's depth and haystack length).
    nlohmann::json (*lineFields)(const EvalExample& ex) = nullptr;
};

/// The spec of `t`; every EvalTask has one.
const EvalTaskSpec& evalTaskSpec(EvalTask t);
/// Every registered task, in the order of `enum class EvalTask`.
const std::vector<const EvalTaskSpec*>& evalTaskSpecs();
/// The task named `name` (the results' "task"); null if none.
const EvalTaskSpec* findEvalTask(const std::string& name);
/// The task table as Markdown (the README's; `sparqlab-cli tasks --markdown`).
std::string evalTasksMarkdown();

} // namespace sparqlab::analysis

/// Registers a task unit: `SPARQLAB_EVAL_TASK(squad) { EvalTaskSpec s; …; return s; }` at file
/// scope defines sparqlab::analysis::tasks::squad(), which the generated registry
/// (analysis/CMakeLists.txt, task_registry.inc) calls.
#define SPARQLAB_EVAL_TASK(unit)                                                                   \
    namespace sparqlab::analysis::tasks {                                                          \
    EvalTaskSpec unit();                                                                           \
    }                                                                                              \
    ::sparqlab::analysis::EvalTaskSpec sparqlab::analysis::tasks::unit()
