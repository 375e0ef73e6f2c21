// Bits per character (paper App. G, WikiText-style): the text teacher-forced through the
// model in windows of its context.

#include "analysis/eval_task_spec.h"
#include "analysis/eval_text.h"

#include <filesystem>

namespace sparqlab::analysis {
namespace {

using namespace evaltext;

std::vector<EvalExample> bpcExamples(const std::string& raw, const std::string& path) {
    std::vector<EvalExample> out;
    // JSONL of {"text"} when every non-empty line is such an object; else one plain text.
    bool jsonl = !raw.empty() && raw.find_first_not_of(" \t\r\n") != std::string::npos &&
                 raw[raw.find_first_not_of(" \t\r\n")] == '{';
    if (jsonl) {
        for (const auto& [line, j] : jsonLines(raw, path)) {
            EvalExample e;
            e.id = "line " + std::to_string(line);
            e.text = stringField(j, "text", path + " line " + std::to_string(line));
            if (!e.text.empty())
                out.push_back(std::move(e));
        }
        return out;
    }
    EvalExample e;
    e.id = std::filesystem::path(path).filename().string();
    e.text = raw;
    out.push_back(std::move(e));
    return out;
}

std::vector<EvalExample> readBpc(const std::string& raw, const std::string& path,
                                 const EvalDataOptions&) {
    return bpcExamples(raw, path);
}

} // namespace
} // namespace sparqlab::analysis

SPARQLAB_EVAL_TASK(bpc) {
    return {.id = EvalTask::Bpc,
            .name = "bpc",
            .label = "Bits per character",
            .summary =
                "the text teacher-forced through the model: bits per character (paper App. G)",
            .metric = "bpc",
            .metricLabel = "bits per character",
            .data = "a plain-text file (one example) or JSONL of {\"text\": …} (one per line)",
            .shippedData = "eval/sotu-2010-2011.txt",
            .higherIsBetter = false,
            .teacherForced = true,
            .keepOrder = true,
            .read = readBpc};
}
