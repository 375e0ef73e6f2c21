#pragma once
/// \file eval_task_table.h
/// The tasks of the paper's evaluation (App. G) as data and metrics, with no model: reading a
/// task's data file into examples (the prompt the model reads and what its output is scored
/// against) and scoring an output. The prompt formats and metrics follow the paper's harness
/// (G.1 and its code): SQuAD 1-shot with 7 confusion contexts, TriviaQA open-book 0-shot,
/// CNN/DailyMail summaries scored by ROUGE-L F (stemmed), text repetition scored by the
/// characters reproduced, WikiText-style bits per character, and a passkey needle (Fig. A4).
///
/// Threading: reentrant.

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::analysis {

/// The methods of the paper's trade-off curves (Fig. 1, A1–A3: dense, SparQ, H2O, LM-∞, FlexGen
/// and the oracle), as --methods lists them: what `eval` and the Trade-offs tab run by default.
inline constexpr const char* kPaperMethods = "dense,sparq,h2o,lminf,flexgen,oracle";

/// A task's data file that cannot be used; the message names the file (and line or entry).
class EvalDataError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class EvalTask {
    Repetition,
    Bpc,
    Squad,
    TriviaQA,
    CnnDm,
    Needle,
    // RULER's synthetic tasks (analysis/ruler.h, LONGCONTEXT.md)
    RulerNiahSingle1,
    RulerNiahSingle2,
    RulerNiahSingle3,
    RulerNiahMultikey1,
    RulerNiahMultikey2,
    RulerNiahMultikey3,
    RulerNiahMultivalue,
    RulerNiahMultiquery,
    RulerVt,
    RulerCwe,
    RulerFwe,
    RulerQa1, // with the user's SQuAD 2.0 file
    RulerQa2, // with the user's HotpotQA file
    Lambada,
};

/// "repetition", "bpc", "squad", "triviaqa", "cnndm", "needle".
const char* evalTaskName(EvalTask t);
/// Throws std::invalid_argument naming the choices.
EvalTask parseEvalTask(const std::string& name);
std::string evalTaskNames();
/// What `value` is for a task (CONTRACTS.md §8): repetition_chars, bpc, exact_match,
/// rouge_l_f, needle_found.
const char* evalMetric(EvalTask t);
/// Whether larger values are better (all but bpc).
bool higherIsBetter(EvalTask t);

/// One example of a task.
struct EvalExample {
    std::string id;     ///< stable across runs (the data's own id, or a position in the text)
    std::string prompt; ///< what the model reads (generation tasks)
    std::string text;   ///< bpc: the text scored
    std::vector<std::string> answers; ///< squad, triviaqa: accepted answers; needle: the key
    std::string reference;            ///< repetition: the continuation; cnndm: the highlights
    int64_t maxNewTokens = 0;         ///< a cap on generated tokens (0: from the reference)
    double depth = -1;                ///< needle: where the needle sits (0 = start, 1 = end)
    int64_t haystackTokens = 0;       ///< needle: the haystack's target length; RULER: L
    /// RULER: what follows the prompt after the chat wrapper (the assistant turn's prefill); the
    /// model continues after it.
    std::string answerPrefix;
};

/// How examples are built, scaled to the model (the paper's lengths assume contexts of
/// 2k–8k tokens and examples of 1k–2k tokens).
struct EvalDataOptions {
    int64_t contextTokens = 2048; ///< the model's context
    /// Tokens of a string (no special tokens), to size examples to the context.
    std::function<int64_t(const std::string&)> countTokens;
    uint64_t seed = 0;
    // repetition (App. G: contexts of 6,000 characters, prompts of 128, references of 256)
    int64_t contextChars = 0; ///< 0: 6,000 scaled to the model's context
    int64_t promptChars = 128;
    int64_t referenceChars = 256;
    // squad
    int64_t confusionContexts = 7;
    int64_t shots = 1;
    // needle
    std::vector<double> depths{0.0, 0.25, 0.5, 0.75, 1.0};
    std::vector<int64_t> haystackTokens; ///< empty: ¼, ½, ¾ and all of the context
    // RULER: haystackTokens are the lengths L (empty: the model's context; longer ones than the
    // context are left out), `samples` per task and length, the word list.
    int64_t samples = 20;
    /// Tokens a chat template adds around a prompt (contextTokens is what is left beside them):
    /// RULER counts them inside its length L, as it counts the whole prompt it sends.
    int64_t wrapperTokens = 0;
    std::string wordsPath = "/usr/share/dict/american-english";
};

/// Reads the examples of a task (in the data's order; the caller shuffles). Throws
/// EvalDataError naming the file. Formats:
///  - repetition, needle: any plain-text (UTF-8) file;
///  - bpc: a plain-text file (one example) or JSONL of {"text": …} (one per line);
///  - squad: SQuAD v1.1 JSON ({"data": [{"title", "paragraphs": [{"context", "qas": […]}]}]})
///    or JSONL rows {"id", "title", "context", "question", "answers": {"text": […]}};
///  - triviaqa: TriviaQA rc JSON ({"Data": […]}) or JSON/JSONL rows as Hugging Face's
///    trivia_qa (question, question_id, answer.aliases, search_results.search_context or
///    entity_pages.wiki_context); the original's evidence files are read from
///    <dir>/../evidence/{web,wikipedia}/ when a row names them;
///  - cnndm: JSONL of {"article", "highlights"[, "id"]}.
std::vector<EvalExample> loadEvalExamples(EvalTask task, const std::string& path,
                                          const EvalDataOptions& options);

/// The examples of already-read text (what loadEvalExamples does after reading a file);
/// `path` only names the source in errors.
std::vector<EvalExample> evalExamplesFromText(EvalTask task, const std::string& text,
                                              const std::string& path,
                                              const EvalDataOptions& options);

// ---- metrics ----

/// QA exact match as the paper's harness scores it: both lower-cased, leading spaces, quotes,
/// underscores, dots and commas stripped with one leading "the ", "a " or "an ", trailing
/// ones stripped; the output must start with a (non-empty) answer.
bool qaExactMatch(const std::string& output, const std::vector<std::string>& answers);
/// An example's score under qaExactMatch against its answers: 1 or 0 (SQuAD's and TriviaQA's).
double qaExactMatchScore(const std::string& output, const EvalExample& example);

/// ROUGE-L F-measure of `candidate` against `reference`, as rouge_score computes it with
/// use_stemmer=True: lower-cased, split on non-alphanumerics, tokens longer than 3 characters
/// Porter-stemmed; F = 2PR/(P+R) from the longest common subsequence (0 if either is empty).
double rougeLF(const std::string& reference, const std::string& candidate);
/// The tokens rougeLF compares.
std::vector<std::string> rougeTokens(const std::string& text);
/// The Porter stemmer (NLTK's default mode, which rouge_score uses) of one lower-case word.
std::string porterStem(const std::string& word);

/// Characters (code points) the generation reproduces of the reference before the first
/// difference, leading whitespace of both ignored; a generation that stops early without a
/// difference counts the whole reference (the paper's harness).
int64_t matchLengthChars(const std::string& generation, const std::string& reference);

/// Whether the output contains the needle's key.
bool needleFound(const std::string& output, const std::string& key);

/// Code points of UTF-8 text.
int64_t utf8Length(const std::string& s);

} // namespace sparqlab::analysis
