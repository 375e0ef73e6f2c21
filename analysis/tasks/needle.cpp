// A passkey in a haystack (paper Fig. A4): the key at depths of haystacks of several lengths;
// scored by whether the output contains it.

#include "analysis/eval_task_spec.h"
#include "analysis/eval_text.h"

#include <algorithm>
#include <random>
#include <sstream>

namespace sparqlab::analysis {
namespace {

using namespace evaltext;

std::vector<EvalExample> needleExamples(const std::u32string& text, const std::string& path,
                                        const EvalDataOptions& o) {
    const double cpt = charsPerToken(text, o);
    const std::string question = "\nWhat is the pass key? The pass key is";
    const int64_t reserve = 8 + tokensOf(question, o, cpt) + 40; // the needle and the answer
    std::vector<int64_t> lengths = o.haystackTokens;
    if (lengths.empty()) {
        const int64_t full = std::max<int64_t>(16, o.contextTokens - reserve);
        lengths = {full / 4, full / 2, 3 * full / 4, full};
    }
    std::mt19937_64 rng(o.seed ^ 0x4EEDULL);
    std::vector<EvalExample> out;
    for (int64_t L : lengths) {
        const size_t chars = static_cast<size_t>(std::max(1.0, static_cast<double>(L) * cpt));
        if (text.size() < chars)
            throw EvalDataError(path + ": too short for a haystack of " + std::to_string(L) +
                                " tokens (" + std::to_string(chars) + " characters)");
        const size_t start = static_cast<size_t>(rng() % (text.size() - chars + 1));
        std::u32string hay = text.substr(start, chars);
        // Trim to the length in tokens (the tokenizer decides).
        while (hay.size() > 16 && tokensOf(toUtf8(hay), o, cpt) > L)
            hay.resize(hay.size() * 95 / 100);
        for (double d : o.depths) {
            const std::string key = std::to_string(10000 + rng() % 90000);
            const std::string needle =
                " The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
            // At a sentence end at or after the depth (the start and the end exactly).
            size_t at =
                static_cast<size_t>(std::clamp(d, 0.0, 1.0) * static_cast<double>(hay.size()));
            if (at > 0 && at < hay.size()) {
                size_t dot = at;
                while (dot < hay.size() && hay[dot] != '.')
                    ++dot;
                at = dot < hay.size() ? dot + 1 : hay.size();
            }
            EvalExample e;
            std::ostringstream id;
            id << "L" << L << "-d" << d;
            e.id = id.str();
            e.prompt = toUtf8(hay.substr(0, at)) + needle + toUtf8(hay.substr(at)) + question;
            e.answers = {key};
            e.maxNewTokens = tokensOf(" " + key, o, cpt) + 4;
            e.depth = d;
            e.haystackTokens = L;
            out.push_back(std::move(e));
        }
    }
    return fitting(std::move(out), o, cpt);
}

std::vector<EvalExample> readNeedle(const std::string& raw, const std::string& path,
                                    const EvalDataOptions& o) {
    return needleExamples(toU32(raw), path, o);
}

double scoreNeedle(const std::string& output, const EvalExample& ex) {
    return needleFound(output, ex.answers.front()) ? 1.0 : 0.0;
}

nlohmann::json needleFields(const EvalExample& ex) {
    return {{"depth", ex.depth}, {"haystack_tokens", ex.haystackTokens}};
}

} // namespace
} // namespace sparqlab::analysis

SPARQLAB_EVAL_TASK(needle) {
    return {.id = EvalTask::Needle,
            .name = "needle",
            .label = "Needle",
            .summary =
                "a passkey at several depths of haystacks of several lengths (paper Fig. A4)",
            .metric = "needle_found",
            .metricLabel = "needle found",
            .data = "any plain-text (UTF-8) file, the haystack",
            .shippedData = "eval/sotu-2010-2011.txt",
            .keepOrder = true,
            .depthMap = true,
            .read = readNeedle,
            .score = scoreNeedle,
            .lineFields = needleFields};
}
