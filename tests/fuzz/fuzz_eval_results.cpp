// libFuzzer target: an eval results file (JSON lines, CONTRACTS.md §8) parsed, summarised and
// turned into the trade-off figures and the Table 2 layout, as `figures --eval` does.
#include "analysis/eval_figures.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    namespace a = sparqlab::analysis;
    try {
        const auto records =
            a::parseEvalJsonl(std::string(reinterpret_cast<const char*>(data), size), "r.jsonl");
        (void)a::evalFigures(records);
        (void)a::evalTableCsv(records);
        (void)a::evalTableMarkdown(records);
    } catch (const a::EvalFileError&) {
    }
    return 0;
}
