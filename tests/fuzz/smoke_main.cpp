// The fuzz targets without libFuzzer, for CTest (CI's smoke fuzz): every input of the target's
// seed corpus, then mutations of them (bit flips, byte changes, insertions, deletions,
// duplications, splices and boundary numbers) for a given time, with a fixed seed so that a
// run can be repeated. Built with the sanitizers (preset asan), a finding aborts the process
// and fails the test; the input that did it is in the file named at the start.
//
//   smoke_fuzz_T CORPUS_DIR SECONDS [SEED]
//
// scripts/fuzz.sh (libFuzzer, coverage-guided) stays the long run.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

using Bytes = std::vector<uint8_t>;
constexpr size_t kMaxLen = 65536;

Bytes readFile(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// One random change of `b`, drawing from `corpus` for splices.
void mutate(Bytes& b, const std::vector<Bytes>& corpus, std::mt19937_64& rng) {
    auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
    static const char* const kTokens[] = {"0",
                                          "-1",
                                          "1e308",
                                          "9.04e82",
                                          "18446744073709551616",
                                          "NaN",
                                          "null",
                                          "[",
                                          "{",
                                          "}}",
                                          "{{",
                                          "{%",
                                          "%}",
                                          "\"",
                                          "\\",
                                          "\xff",
                                          "true",
                                          "1e-9",
                                          "[]",
                                          "{}",
                                          "-9223372036854775809"};
    switch (rng() % 8) {
    case 0: // flip a bit
        if (!b.empty())
            b[pick(b.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
    case 1: // a random byte
        if (!b.empty())
            b[pick(b.size())] = static_cast<uint8_t>(rng());
        break;
    case 2: { // insert random bytes
        const size_t at = pick(b.size() + 1), n = 1 + pick(8);
        Bytes ins(n);
        for (uint8_t& x : ins)
            x = static_cast<uint8_t>(rng());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
    }
    case 3: { // delete a range
        if (b.empty())
            break;
        const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(64, b.size() - at));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + n)));
        break;
    }
    case 4: { // duplicate a range
        if (b.empty())
            break;
        const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(256, b.size() - at));
        const Bytes part(b.begin() + static_cast<std::ptrdiff_t>(at),
                         b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + n)));
        const size_t to = pick(b.size() + 1);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(to), part.begin(), part.end());
        break;
    }
    case 5: { // splice: the head of this one, the tail of another
        const Bytes& o = corpus[pick(corpus.size())];
        if (o.empty())
            break;
        const size_t cut = pick(b.size() + 1), from = pick(o.size());
        b.resize(cut);
        b.insert(b.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
        break;
    }
    case 6: { // a boundary value or a syntax token
        const std::string t = kTokens[pick(std::size(kTokens))];
        const size_t at = pick(b.size() + 1);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), t.begin(), t.end());
        break;
    }
    default: { // overwrite a digit run with a huge number
        const std::string t = rng() % 2 ? "99999999999999999999" : "1e300";
        for (size_t tries = 0; tries < 16 && !b.empty(); ++tries) {
            const size_t at = pick(b.size());
            if (b[at] >= '0' && b[at] <= '9') {
                size_t end = at;
                while (end < b.size() && b[end] >= '0' && b[end] <= '9')
                    ++end;
                b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                        b.begin() + static_cast<std::ptrdiff_t>(end));
                b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), t.begin(), t.end());
                break;
            }
        }
    }
    }
    if (b.size() > kMaxLen)
        b.resize(kMaxLen);
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR SECONDS [SEED]\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    const std::filesystem::path dir = argv[1];
    const double seconds = std::atof(argv[2]);
    const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.is_regular_file())
            files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<Bytes> corpus;
    for (const auto& f : files)
        corpus.push_back(readFile(f));
    if (corpus.empty())
        corpus.emplace_back();
    // Each input is written here before it runs: after a crash it is the reproducer.
    const std::string last = (std::filesystem::temp_directory_path() /
                              (std::filesystem::path(argv[0]).filename().string() + "-" +
                               std::to_string(::getpid()) + "-last-input"))
                                 .string();
    std::printf("smoke fuzz: %zu seed inputs from %s, %g s of mutations (seed %llu); a crash "
                "leaves its input in %s\n",
                corpus.size(), dir.c_str(), seconds, static_cast<unsigned long long>(seed),
                last.c_str());
    std::fflush(stdout);
    auto run = [&](const Bytes& b) {
        {
            std::ofstream out(last, std::ios::binary | std::ios::trunc);
            out.write(reinterpret_cast<const char*>(b.data()),
                      static_cast<std::streamsize>(b.size()));
        }
        LLVMFuzzerTestOneInput(b.data(), b.size());
    };
    for (const Bytes& b : corpus)
        run(b);
    std::mt19937_64 rng(seed);
    const auto start = std::chrono::steady_clock::now();
    uint64_t runs = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           seconds) {
        Bytes b = corpus[rng() % corpus.size()];
        const int n = 1 + static_cast<int>(rng() % 6);
        for (int i = 0; i < n; ++i)
            mutate(b, corpus, rng);
        run(b);
        ++runs;
    }
    std::remove(last.c_str());
    std::printf("smoke fuzz: %zu seed inputs and %llu mutated inputs, no finding\n", corpus.size(),
                static_cast<unsigned long long>(runs));
    return 0;
}
