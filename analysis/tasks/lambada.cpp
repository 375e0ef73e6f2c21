// LAMBADA (Paperno et al., 2016): a passage whose last word can only be guessed from the whole
// passage, not from its last sentence; the model continues the passage without that word and
// scores 1 where it writes it. Read as EleutherAI's lm-evaluation-harness reads lambada_openai:
// the context is the text up to its last space, the target the word after it; the greedy
// continuation must be that word (the harness compares tokens; here the continuation, its
// leading spaces aside, begins with the word and no letter or digit follows it).

#include "analysis/eval_task_spec.h"
#include "analysis/eval_text.h"

namespace sparqlab::analysis {
namespace {

using namespace evaltext;

bool isWordChar(char32_t c) {
    return (c >= U'0' && c <= U'9') || (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z') ||
           (c >= 0xC0 && c != 0xD7 && c != 0xF7 && !isSpace(c));
}

std::vector<EvalExample> readLambada(const std::string& raw, const std::string& path,
                                     const EvalDataOptions& o) {
    const auto rows = jsonLines(raw, path);
    const double cpt = charsPerTokenOfFirst(rows, "text", path, o);
    std::vector<EvalExample> out;
    for (const auto& [line, j] : rows) {
        const std::string where = path + " line " + std::to_string(line);
        const std::string text = stringField(j, "text", where);
        const size_t space = text.rfind(' '); // (Python's text.rsplit(" ", 1))
        if (space == std::string::npos || space == 0 || space + 1 == text.size())
            throw EvalDataError(where + ": 'text' needs a passage, a space and its last word");
        EvalExample e;
        e.id = "line " + std::to_string(line);
        e.prompt = text.substr(0, space);
        e.answers = {text.substr(space + 1)};
        // the word and one more token, to see where the word ends
        e.maxNewTokens = tokensOf(" " + e.answers[0], o, cpt) + 1;
        out.push_back(std::move(e));
    }
    return fitting(std::move(out), o, cpt);
}

double scoreLambada(const std::string& output, const EvalExample& ex) {
    const std::u32string out = toU32(output), word = toU32(ex.answers.at(0));
    size_t i = 0;
    while (i < out.size() && out[i] == U' ')
        ++i;
    if (out.compare(i, word.size(), word) != 0)
        return 0.0;
    const size_t end = i + word.size();
    return end < out.size() && isWordChar(out[end]) ? 0.0 : 1.0;
}

} // namespace
} // namespace sparqlab::analysis

SPARQLAB_EVAL_TASK(lambada) {
    return {.id = EvalTask::Lambada,
            .name = "lambada",
            .label = "LAMBADA",
            .summary = "the last word of a passage, which only the whole passage gives away; "
                       "greedy accuracy (Paperno et al. 2016, lm-eval's lambada_openai)",
            .metric = "accuracy",
            .metricLabel = "accuracy",
            .data = "JSONL of {\"text\": …} (lambada_openai's rows)",
            .read = readLambada,
            .score = scoreLambada};
}
