// libFuzzer target: benchmark JSON (lines or an array) as `figures --bench` reads it, and the
// figures made from what parses.
#include "analysis/bench_figures.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto records = sparqlab::analysis::parseBenchJson(
            std::string(reinterpret_cast<const char*>(data), size), "bench.jsonl");
        (void)sparqlab::analysis::benchFigures(records);
    } catch (const std::exception&) {
    }
    return 0;
}
