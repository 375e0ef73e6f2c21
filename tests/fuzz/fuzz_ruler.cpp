// libFuzzer target: RULER's generators (analysis/ruler.h) on any haystack text, any task and
// length: the first two bytes choose the task and the length (its T_gen + 1 … + 2,048), the rest
// is the haystack and, after a NUL, the word list (a built-in one when too short). Every sample
// must keep the budget; the metrics take the bytes as a prediction.
#include "analysis/ruler.h"
#include "fuzz_common.h"

#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    namespace r = sparqlab::analysis::ruler;
    if (size < 2)
        return 0;
    const std::vector<r::TaskDef>& tasks = r::tasks();
    const r::TaskDef& t = tasks[data[0] % tasks.size()];
    const int64_t L = t.tokensToGenerate + 1 + static_cast<int64_t>(data[1]) * 8;
    const std::string rest(reinterpret_cast<const char*>(data) + 2, size - 2);
    const size_t nul = rest.find('\0');
    const std::string haystack = rest.substr(0, nul);
    std::string words = nul == std::string::npos ? std::string() : rest.substr(nul + 1);
    for (int i = 0; i < 200; ++i) // enough words whatever the input holds
        words += "\nw" + std::string(1, static_cast<char>('a' + i % 26)) +
                 std::string(1, static_cast<char>('a' + i / 26)) + "x";
    r::Resources res;
    try {
        res = r::makeResources(haystack, words, "fuzz");
    } catch (const std::invalid_argument&) {
        return 0;
    }
    const r::CountTokens count = [](const std::string& s) {
        return static_cast<int64_t>(s.size() + 3) / 4;
    };
    try {
        for (const r::Sample& s : r::generate(t, L, 2, size, res, count))
            if (s.length > L || s.outputs.empty())
                __builtin_trap(); // the budget is the generator's contract
    } catch (const std::invalid_argument&) {
    }
    (void)r::stringMatchAll(rest, {haystack.substr(0, 8), "a"});
    (void)r::stringMatchPart(rest, {words.substr(0, 4)});
    return 0;
}
