#pragma once
/// \file ruler.h
/// RULER's synthetic long-context tasks (LONGCONTEXT.md, from NVIDIA/RULER at c3f5e3b, "HEAD"):
/// the eight needle-in-a-haystack tasks, variable tracking, common and frequent words
/// extraction, generated for a target token length with the evaluated model's tokenizer, and
/// RULER's two metrics. The essay haystack is the text the user gives (the project ships
/// public-domain State of the Union addresses), the word lists come from a plain word list
/// (Debian's wamerican): the results are RULER-style, not comparable to published RULER numbers.
///
/// Deviations, stated: keys of the word type are two list words joined by "-" (no adjective /
/// noun lists); a distractor key equal to a queried key and repeated variable names are redrawn;
/// the sentence splitter is rule-based; the VT one-shot example is at most min(500, L/4) tokens.
///
/// Threading: reentrant.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sparqlab::analysis::ruler {

enum class Kind { Niah, VariableTracking, CommonWords, FrequentWords };

/// The needle tasks' settings (LONGCONTEXT.md §3).
struct NiahSettings {
    const char* haystack = "essay"; ///< "essay", "noise" or "needle"
    const char* key = "words";      ///< "words" or "uuids"
    const char* value = "numbers";  ///< "numbers", "uuids"
    int keys = 1, values = 1, queries = 1;
};

/// One generated RULER task.
struct TaskDef {
    const char* name = "";
    Kind kind = Kind::Niah;
    NiahSettings niah;
    int64_t tokensToGenerate = 128; ///< T_gen: reserved in the budget and the generation cap
};

/// The generated tasks (qa_1 and qa_2 read the user's SQuAD / HotpotQA files: generateQa).
const std::vector<TaskDef>& tasks();
/// All 13 of RULER's task names in RULER's order (the generated ones, then qa_1, qa_2).
const std::vector<std::string>& taskNames();
/// The generated task named `name`; null if none.
const TaskDef* findTask(const std::string& name);

/// What the generators draw from.
struct Resources {
    std::vector<std::string> essayWords; ///< the haystack text split on whitespace
    std::vector<std::string> words;      ///< distinct lower-case words, sorted
};
/// The resources of a haystack text and a word list's text (one word a line; the lower-case
/// alphabetic ones of 3 to 12 letters are kept). Throws std::invalid_argument when either is
/// empty, naming `where`.
Resources makeResources(const std::string& haystack, const std::string& wordList,
                        const std::string& where);

/// One sample: the prompt without the answer prefix (the prefix follows the chat wrapper, as a
/// prefill of the assistant turn), the prefix, the gold strings and the budget used.
struct Sample {
    std::string input;
    std::string answerPrefix;
    std::vector<std::string> outputs;
    int64_t length = 0; ///< tokens of input + prefix, plus T_gen
};

/// Tokens of a string with the evaluated model's tokenizer, no special tokens.
using CountTokens = std::function<int64_t(const std::string&)>;

/// `n` samples of task `t` for a budget of L tokens: every sample's tokens + T_gen ≤ L, grown
/// to the largest haystack that fits (RULER's binary search). Deterministic for a seed.
/// Throws std::invalid_argument when even the smallest haystack does not fit.
std::vector<Sample> generate(const TaskDef& t, int64_t L, int64_t n, uint64_t seed,
                             const Resources& r, const CountTokens& count);

/// qa_1 / qa_2's documents and questions (LONGCONTEXT.md §7), read by the eval layer from the
/// user's SQuAD 2.0 or HotpotQA file.
struct QaData {
    std::vector<std::string> docs; ///< distinct documents, sorted (code-point order)
    struct Question {
        std::string query;
        std::vector<size_t> gold;         ///< indices into docs: the question's own document(s)
        std::vector<size_t> more;         ///< SQuAD: the article's other paragraphs
        std::vector<std::string> outputs; ///< the gold answers (duplicates kept)
    };
    std::vector<Question> questions; ///< in file order; sample i asks question i
};
constexpr int64_t kQaTokensToGenerate = 32;

/// `n` qa samples for a budget of L tokens: as many documents as fit (steps of 10), the gold
/// document(s) among the article's others and random ones in a fixed shuffle, numbered
/// "Document i:". Deterministic for a seed. Throws std::invalid_argument naming `name`.
std::vector<Sample> generateQa(const QaData& d, const std::string& name, int64_t L, int64_t n,
                               uint64_t seed, const CountTokens& count);

/// RULER's post-processing of a prediction: trimmed, control characters as line breaks,
/// trimmed again.
std::string postprocess(const std::string& prediction);
/// string_match_all: the fraction of the gold strings the prediction contains (lower case).
double stringMatchAll(const std::string& prediction, const std::vector<std::string>& refs);
/// string_match_part: 1 if any gold string is contained, else 0.
double stringMatchPart(const std::string& prediction, const std::vector<std::string>& refs);

} // namespace sparqlab::analysis::ruler
