// libFuzzer target: an evaluation data file read as every task of the table reads it (SQuAD and
// TriviaQA JSON, CNN/DailyMail and bpc JSON lines, plain text for repetition, the needle and
// RULER's generators, SQuAD 2.0 / HotpotQA JSON for RULER's qa_1 / qa_2), and the metrics applied
// to its bytes as model output.
#include "analysis/eval_task_spec.h"
#include "fuzz_common.h"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    namespace a = sparqlab::analysis;
    const std::string text(reinterpret_cast<const char*>(data), size);
    a::EvalDataOptions o;
    o.contextTokens = 512;
    o.countTokens = [](const std::string& s) { return (a::utf8Length(s) + 3) / 4; };
    o.haystackTokens = {64, 160}; // RULER: 160 is above every task's tokens to generate
    o.contextChars = 300;
    for (const a::EvalTaskSpec* t : a::evalTaskSpecs()) { // every task of the table
        try {
            (void)a::evalExamplesFromText(t->id, text, "data", o);
        } catch (const a::EvalDataError&) {
        }
    }
    // The metrics take any text a model may produce.
    (void)a::qaExactMatch(text, {text, "a"});
    (void)a::rougeLF(text, "the reference");
    (void)a::matchLengthChars(text, " some reference");
    (void)a::porterStem(text.substr(0, 64));
    return 0;
}
