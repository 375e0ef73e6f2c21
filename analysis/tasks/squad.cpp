// SQuAD (paper App. G.1): 1-shot, the question's paragraph among 7 confusion contexts;
// scored by exact match as the paper's harness normalises it.

#include "analysis/eval_task_spec.h"
#include "analysis/eval_text.h"

#include <algorithm>
#include <random>

namespace sparqlab::analysis {
namespace {

using namespace evaltext;

std::string underscoresToSpaces(std::string s) {
    std::replace(s.begin(), s.end(), '_', ' ');
    return s;
}

std::string shortest(const std::vector<std::string>& v) {
    return *std::min_element(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
        return utf8Length(a) < utf8Length(b);
    });
}

std::vector<EvalExample> squadExamples(const std::string& raw, const std::string& path,
                                       const EvalDataOptions& o) {
    const std::vector<SquadRow> rows = squadRows(raw, path);
    if (rows.empty())
        throw EvalDataError(path + ": no answerable questions");
    std::mt19937_64 rng(o.seed ^ 0x5D1ADULL);
    auto formatContext = [](const SquadRow& r) {
        return "Title: " + underscoresToSpaces(r.title) + ". Background: " + r.context;
    };
    std::set<std::string> contextSet;
    std::map<std::string, std::vector<size_t>> byContext;
    for (size_t i = 0; i < rows.size(); ++i) {
        contextSet.insert(formatContext(rows[i]));
        byContext[rows[i].context].push_back(i);
    }
    const std::vector<std::string> contexts(contextSet.begin(), contextSet.end());
    const double cpt = charsPerToken(toU32(rows.front().context), o);
    std::vector<EvalExample> out;
    for (size_t i = 0; i < rows.size(); ++i) {
        const SquadRow& row = rows[i];
        std::vector<std::string> parts{formatContext(row)};
        for (int64_t c = 0; c < o.confusionContexts; ++c)
            parts.push_back(contexts[rng() % contexts.size()]);
        std::shuffle(parts.begin(), parts.end(), rng);
        std::string full;
        for (const std::string& p : parts)
            full += p + "\n";
        full += "From what you've just read about " + underscoresToSpaces(row.title) +
                ", please answer the following questions.";
        // Shots: other questions on the same context first, then any.
        std::vector<size_t> same;
        for (size_t j : byContext[row.context])
            if (rows[j].id != row.id)
                same.push_back(j);
        std::shuffle(same.begin(), same.end(), rng);
        for (int64_t s = 0; s < o.shots + 1; ++s) {
            const size_t j = rng() % rows.size();
            if (rows[j].id != row.id)
                same.push_back(j);
        }
        std::string prompt;
        for (int64_t s = 0; s < o.shots && s < static_cast<int64_t>(same.size()); ++s) {
            const SquadRow& ex = rows[same[static_cast<size_t>(s)]];
            prompt += "Question: " + ex.question + "\nAnswer: " + shortest(ex.answers) + "\n";
        }
        prompt += "Question: " + row.question + "\nAnswer:";
        EvalExample e;
        e.id = row.id;
        e.prompt = full + "\n" + prompt;
        e.answers = row.answers;
        e.maxNewTokens = answerTokens(row.answers, o, cpt);
        out.push_back(std::move(e));
    }
    return fitting(std::move(out), o, cpt);
}

std::vector<EvalExample> readSquad(const std::string& raw, const std::string& path,
                                   const EvalDataOptions& o) {
    return squadExamples(raw, path, o);
}

} // namespace
} // namespace sparqlab::analysis

SPARQLAB_EVAL_TASK(squad) {
    return {
        .id = EvalTask::Squad,
        .name = "squad",
        .label = "SQuAD",
        .summary = "1-shot questions on a paragraph among 7 confusion contexts, exact match (paper "
                   "App. G.1)",
        .metric = "exact_match",
        .metricLabel = "exact match",
        .data = "SQuAD v1.1 JSON, or JSONL rows {id, title, context, question, answers: {text}}",
        .read = readSquad,
        .score = qaExactMatchScore};
}
