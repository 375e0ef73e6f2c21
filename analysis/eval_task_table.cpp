// The eval task table (eval_task_spec.h), built from the units of analysis/tasks/ (the generated
// task_registry.inc), and the names and readers every caller uses through it.

#include "eval_task_spec.h"
#include "eval_text.h"

#include "base/unit_table.h"

#include <algorithm>
#include <stdexcept>

#include "task_registry.inc" // each unit's function and kAll, the list of them

namespace sparqlab::analysis {

namespace {

void finish(std::vector<EvalTaskSpec>& all) {
    for (const EvalTaskSpec& s : all)
        if (!s.name || !s.label || !s.summary || !s.metric || !s.metricLabel || !s.data ||
            !s.read || (!s.teacherForced && !s.score))
            throw std::logic_error(std::string("the eval task registry: unit '") +
                                   (s.name ? s.name : "?") + "' leaves a field unset");
    std::sort(all.begin(), all.end(), [](const EvalTaskSpec& a, const EvalTaskSpec& b) {
        return static_cast<int>(a.id) < static_cast<int>(b.id);
    });
    for (size_t i = 0; i < all.size(); ++i)
        if (static_cast<size_t>(all[i].id) != i)
            throw std::logic_error("the eval task registry: task " + std::to_string(i) +
                                   " of the enum has no unit, or two");
}

} // namespace

const std::vector<const EvalTaskSpec*>& evalTaskSpecs() {
    return base::unitTable(tasks::kAll, finish);
}

const EvalTaskSpec& evalTaskSpec(EvalTask t) {
    return *evalTaskSpecs().at(static_cast<size_t>(t));
}

const EvalTaskSpec* findEvalTask(const std::string& name) {
    for (const EvalTaskSpec* s : evalTaskSpecs())
        if (name == s->name)
            return s;
    return nullptr;
}

std::string evalTasksMarkdown() {
    std::string s = "| `--task` | what it measures | metric | data |\n| --- | --- | --- | --- |\n";
    for (const EvalTaskSpec* t : evalTaskSpecs())
        s += std::string("| `") + t->name + "` | " + t->summary + " | `" + t->metric + "` (" +
             (t->higherIsBetter ? "higher" : "lower") + " is better) | " + t->data + " |\n";
    return s;
}

const char* evalTaskName(EvalTask t) {
    return evalTaskSpec(t).name;
}

std::string evalTaskNames() {
    std::string s;
    for (const EvalTaskSpec* t : evalTaskSpecs())
        s += (s.empty() ? "" : ", ") + std::string(t->name);
    return s;
}

EvalTask parseEvalTask(const std::string& name) {
    if (const EvalTaskSpec* s = findEvalTask(name))
        return s->id;
    throw std::invalid_argument("unknown task '" + name + "' (" + evalTaskNames() + ")");
}

const char* evalMetric(EvalTask t) {
    return evalTaskSpec(t).metric;
}

bool higherIsBetter(EvalTask t) {
    return evalTaskSpec(t).higherIsBetter;
}

std::vector<EvalExample> evalExamplesFromText(EvalTask task, const std::string& raw,
                                              const std::string& path, const EvalDataOptions& o) {
    return evalTaskSpec(task).read(raw, path, o);
}

std::vector<EvalExample> loadEvalExamples(EvalTask task, const std::string& path,
                                          const EvalDataOptions& o) {
    return evalExamplesFromText(task, evaltext::readAll(path), path, o);
}

} // namespace sparqlab::analysis
