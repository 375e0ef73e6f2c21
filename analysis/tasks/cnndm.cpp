// CNN/DailyMail (paper App. G.1): summarise the article; ROUGE-L F against the highlights.

#include "analysis/eval_task_spec.h"
#include "analysis/eval_text.h"

namespace sparqlab::analysis {
namespace {

using namespace evaltext;

std::vector<EvalExample> cnndmExamples(const std::string& raw, const std::string& path,
                                       const EvalDataOptions& o) {
    const auto rows = jsonLines(raw, path);
    const double cpt = charsPerTokenOfFirst(rows, "article", path, o);
    const int64_t maxChars = scaledChars(8000, 128 + 8, cpt, o);
    const int64_t minChars = maxChars / 2;
    std::vector<EvalExample> out;
    for (const auto& [line, j] : rows) {
        const std::string where = path + " line " + std::to_string(line);
        const std::string article = stringField(j, "article", where);
        const std::string highlights = stringField(j, "highlights", where);
        const int64_t n = utf8Length(article);
        if (n < minChars || n > maxChars)
            continue;
        EvalExample e;
        e.id = j.contains("id") && j["id"].is_string() ? j["id"].get<std::string>()
                                                       : "line " + std::to_string(line);
        e.prompt = "Article: " + article + "\nSummary:";
        e.reference = highlights;
        e.maxNewTokens = std::min<int64_t>(128, std::max<int64_t>(1, tokensOf(highlights, o, cpt)));
        out.push_back(std::move(e));
    }
    return fitting(std::move(out), o, cpt);
}

std::vector<EvalExample> readCnndm(const std::string& raw, const std::string& path,
                                   const EvalDataOptions& o) {
    return cnndmExamples(raw, path, o);
}

double scoreCnndm(const std::string& output, const EvalExample& ex) {
    return rougeLF(ex.reference, output);
}

} // namespace
} // namespace sparqlab::analysis

SPARQLAB_EVAL_TASK(cnndm) {
    return {.id = EvalTask::CnnDm,
            .name = "cnndm",
            .label = "CNN/DailyMail",
            .summary =
                "summaries of news articles, ROUGE-L F against the highlights (paper App. G.1)",
            .metric = "rouge_l_f",
            .metricLabel = "ROUGE-L F",
            .data = "JSONL of {article, highlights[, id]}",
            .read = readCnndm,
            .score = scoreCnndm};
}
