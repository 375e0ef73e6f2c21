// bench_expert_keeper: how many MXFP4 experts a run decodes with the keeper of model/
// expert_keeper.h, against the fewest any rule could (Belady's: drop the expert needed again
// latest) and none kept, on routings drawn for a model's shape; and what one decode costs: a
// last line with the time of one gpt-oss-20b expert (gate_up [5760, 2880] and down [2880, 2880]
// from random blocks) decoded into bfloat16 by Checkpoint::loadExpert, the median of 5.
// Usage: bench_expert_keeper [LAYERS=24 EXPERTS=32 TOP_K=4 PROMPTS=3 TOKENS=200 STEPS=64]
// (gpt-oss-20b's shape by default). Prints one JSON line per routing skew and budget: a
// forward call of n tokens reaches, in each layer, the experts its tokens pick, each token K
// distinct ones with probability ∝ 1/rank^skew (skew 0: uniform), the ranks shuffled per layer.

#include "model/expert_keeper.h"
#include "model/safetensors.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace {

/// The experts reached, in order: each call's layers in turn, each layer's experts ascending.
std::vector<int64_t> routing(int L, int E, int K, int prompts, int tokens, int steps, double skew,
                             unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<double> w(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e)
        w[static_cast<size_t>(e)] = 1.0 / std::pow(e + 1, skew);
    std::discrete_distribution<int> pick(w.begin(), w.end());
    std::vector<std::vector<int>> rank(static_cast<size_t>(L), std::vector<int>(E));
    for (auto& r : rank) {
        std::iota(r.begin(), r.end(), 0);
        std::shuffle(r.begin(), r.end(), rng);
    }
    std::vector<int64_t> out;
    auto call = [&](int n) {
        for (int l = 0; l < L; ++l) {
            std::set<int> reached;
            for (int t = 0; t < n; ++t) {
                std::set<int> one;
                while (static_cast<int>(one.size()) < K)
                    one.insert(rank[static_cast<size_t>(l)][static_cast<size_t>(pick(rng))]);
                reached.insert(one.begin(), one.end());
            }
            for (int e : reached)
                out.push_back(int64_t{l} * E + e);
        }
    };
    for (int p = 0; p < prompts; ++p) {
        call(tokens);
        for (int s = 0; s < steps; ++s)
            call(1);
    }
    return out;
}

/// Decodes under the keeper (every expert one unit of memory).
int64_t keeperDecodes(const std::vector<int64_t>& trace, int64_t budget) {
    sparqlab::model::ExpertKeeper k(budget);
    for (int64_t id : trace)
        if (!k.reach(id))
            k.admit(id, 1);
    return k.reaches() - k.hits();
}

/// The fewest decodes any rule could give: Belady's, dropping the held expert needed latest.
int64_t fewestDecodes(const std::vector<int64_t>& trace, int64_t budget) {
    const size_t n = trace.size();
    std::vector<size_t> next(n);
    std::vector<size_t> seen(static_cast<size_t>(*std::max_element(trace.begin(), trace.end())) + 1,
                             n);
    for (size_t i = n; i-- > 0;) {
        next[i] = seen[static_cast<size_t>(trace[i])];
        seen[static_cast<size_t>(trace[i])] = i;
    }
    std::set<std::pair<size_t, int64_t>> held; // (next use, id)
    std::vector<size_t> heldNext(seen.size(), 0);
    std::vector<char> isHeld(seen.size(), 0);
    int64_t decodes = 0;
    for (size_t i = 0; i < n; ++i) {
        const auto id = static_cast<size_t>(trace[i]);
        if (isHeld[id]) {
            held.erase({heldNext[id], trace[i]});
        } else {
            ++decodes;
            if (budget == 0)
                continue;
            if (static_cast<int64_t>(held.size()) == budget) {
                const auto latest = std::prev(held.end());
                if (latest->first < next[i]) // this one is needed later still: not kept
                    continue;
                isHeld[static_cast<size_t>(latest->second)] = 0;
                held.erase(latest);
            }
            isHeld[id] = 1;
        }
        heldNext[id] = next[i];
        held.insert({next[i], trace[i]});
    }
    return decodes;
}

/// Milliseconds to decode one expert of gpt-oss-20b's gate_up and down into bfloat16 (median of
/// 5, after one decode that maps the file in).
std::pair<double, double> decodeMs() {
    namespace fs = std::filesystem;
    const std::string file =
        (fs::temp_directory_path() / "bench_expert_keeper.safetensors").string();
    at::manual_seed(0);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& [name, rows] :
         {std::pair<std::string, int64_t>{"gate_up_proj", 5760}, {"down_proj", 2880}}) {
        tensors.emplace_back("experts." + name + "_blocks",
                             at::randint(0, 256, {1, rows, 90, 16}, at::kByte));
        tensors.emplace_back("experts." + name + "_scales",
                             at::randint(120, 130, {1, rows, 90}, at::kByte));
    }
    tensors.emplace_back("norm.weight", at::ones({4}, at::kBFloat16));
    sparqlab::model::writeSafetensors(file, tensors);
    const auto ck = sparqlab::model::Checkpoint::openFile(file);
    auto median = [&](const std::string& name) {
        ck.loadExpert(name, 0, at::kBFloat16);
        std::vector<double> ms;
        for (int i = 0; i < 5; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            ck.loadExpert(name, 0, at::kBFloat16);
            ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count());
        }
        std::sort(ms.begin(), ms.end());
        return ms[2];
    };
    const std::pair<double, double> out{median("experts.gate_up_proj"),
                                        median("experts.down_proj")};
    fs::remove(file);
    return out;
}

} // namespace

int main(int argc, char** argv) {
    auto arg = [&](int i, int d) { return argc > i ? std::atoi(argv[i]) : d; };
    const int L = arg(1, 24), E = arg(2, 32), K = arg(3, 4), prompts = arg(4, 3),
              tokens = arg(5, 200), steps = arg(6, 64);
    if (L < 1 || E < 1 || K < 1 || K > E || prompts < 1 || tokens < 1 || steps < 0) {
        std::fprintf(stderr, "usage: bench_expert_keeper [LAYERS EXPERTS TOP_K PROMPTS TOKENS "
                             "STEPS], 1 ≤ TOP_K ≤ EXPERTS\n");
        return 2;
    }
    for (const double skew : {0.0, 1.0})
        for (const double share : {0.25, 0.5, 0.75}) {
            const std::vector<int64_t> trace = routing(L, E, K, prompts, tokens, steps, skew, 7);
            const auto budget = static_cast<int64_t>(share * L * E);
            std::printf("{\"layers\": %d, \"experts\": %d, \"top_k\": %d, \"skew\": %g, "
                        "\"budget_share\": %g, \"reaches\": %zu, \"decodes_keeper\": %lld, "
                        "\"decodes_fewest\": %lld}\n",
                        L, E, K, skew, share, trace.size(),
                        static_cast<long long>(keeperDecodes(trace, budget)),
                        static_cast<long long>(fewestDecodes(trace, budget)));
        }
    try {
        const auto [gateUp, down] = decodeMs();
        std::printf("{\"decode\": \"gpt-oss-20b expert, bfloat16\", \"threads\": %d, "
                    "\"gate_up_ms\": %.1f, \"down_ms\": %.1f}\n",
                    at::get_num_threads(), gateUp, down);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
