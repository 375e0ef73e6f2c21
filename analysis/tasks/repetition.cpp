// Text repetition (paper App. G): a context, then its first characters again as the prompt;
// scored by the characters the generation reproduces of the continuation.

#include "analysis/eval_task_spec.h"
#include "analysis/eval_text.h"

#include <cmath>

namespace sparqlab::analysis {
namespace {

using namespace evaltext;

/// Matches of `(.{length,}?)(?=\s|$)` over s from 0: [start, end) spans.
std::vector<std::pair<size_t, size_t>> splitOnWhitespace(const std::u32string& s, size_t length) {
    std::vector<std::pair<size_t, size_t>> out;
    size_t i = 0;
    while (i + length <= s.size()) {
        size_t end = i + length;
        while (end < s.size() && !isSpace(s[end]))
            ++end;
        out.emplace_back(i, end);
        i = end;
        if (end == i && end >= s.size())
            break;
    }
    return out;
}

std::vector<EvalExample> repetitionExamples(const std::u32string& text, const EvalDataOptions& o) {
    const double cpt = charsPerToken(text, o);
    const int64_t refTokensCap = 128;
    const int64_t promptTokens =
        static_cast<int64_t>(std::ceil(1.25 * static_cast<double>(o.promptChars) / cpt)) + 2;
    const size_t contextChars = static_cast<size_t>(
        o.contextChars > 0 ? o.contextChars
                           : scaledChars(6000, refTokensCap + promptTokens + 8, cpt, o));
    const size_t P = static_cast<size_t>(std::max<int64_t>(1, o.promptChars));
    const size_t R = static_cast<size_t>(std::max<int64_t>(2, o.referenceChars));
    std::vector<EvalExample> out;
    for (const auto& [c0, c1] : splitOnWhitespace(text, contextChars)) {
        const std::u32string context = text.substr(c0, c1 - c0);
        // (.{P,}?)(\s.{R−1,}?)(?=\s|$): a prompt of ≥ P characters up to a space, then a
        // reference starting at that space, ≥ R characters, up to the next space.
        size_t i = 0;
        while (i < context.size()) {
            size_t p = i + P;
            while (p < context.size() && !isSpace(context[p]))
                ++p;
            if (p >= context.size())
                break;
            size_t r = p + R;
            if (r > context.size())
                break;
            while (r < context.size() && !isSpace(context[r]))
                ++r;
            EvalExample e;
            e.id = std::to_string(c0 + i);
            e.prompt = toUtf8(context) + "\n" + toUtf8(context.substr(i, p - i));
            e.reference = toUtf8(context.substr(p, r - p));
            e.maxNewTokens = std::min(refTokensCap, tokensOf(e.reference, o, cpt));
            out.push_back(std::move(e));
            i = r;
        }
    }
    return fitting(std::move(out), o, cpt);
}

std::vector<EvalExample> readRepetition(const std::string& raw, const std::string& path,
                                        const EvalDataOptions& o) {
    const std::u32string text = toU32(raw);
    if (text.size() < 64)
        throw EvalDataError(path + ": too short for the repetition task (" +
                            std::to_string(text.size()) + " characters)");
    return repetitionExamples(text, o);
}

double scoreRepetition(const std::string& output, const EvalExample& ex) {
    return static_cast<double>(matchLengthChars(output, ex.reference));
}

} // namespace
} // namespace sparqlab::analysis

SPARQLAB_EVAL_TASK(repetition) {
    return {.id = EvalTask::Repetition,
            .name = "repetition",
            .label = "Repetition",
            .summary =
                "a context, then its first characters again: how much of the continuation the "
                "model reproduces (paper App. G)",
            .metric = "repetition_chars",
            .metricLabel = "characters repeated",
            .digits = 1,
            .data = "any plain-text (UTF-8) file",
            .shippedData = "eval/sotu-2010-2011.txt",
            .read = readRepetition,
            .score = scoreRepetition};
}
