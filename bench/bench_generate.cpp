// End-to-end decoding speed of a model with dense and with SparQ attention at long context
// (issue 8): one dense prefill of S tokens into preallocated decode caches, then N greedy
// steps with each method, replayed from the same prefill. Prints one JSON object.
//
//   bench_generate MODEL CONTEXT [NEW_TOKENS] [R] [K]

#include "attention/runtime_info.h"
#include "capture/model.h"

#include <ATen/ATen.h>
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

using namespace sparqlab;

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: bench_generate MODEL CONTEXT [NEW_TOKENS] [R] [K]\n");
        return 2;
    }
    attention::restartWithPassiveOpenMP(argv);
    attention::initRuntime();
    try {
        const auto model = capture::Model::open(argv[1]);
        const int64_t S = std::stoll(argv[2]);
        const int64_t N = argc > 3 ? std::stoll(argv[3]) : 16;
        attention::AttentionConfig sparq;
        sparq.method = attention::Method::Sparq;
        sparq.r = argc > 4 ? std::stoll(argv[4]) : 32;
        sparq.k = argc > 5 ? std::stoll(argv[5]) : 128;
        const int64_t V = model->config().vocabSize;
        if (S + N > model->config().maxPositions)
            throw std::runtime_error("context + new tokens exceed the model's " +
                                     std::to_string(model->config().maxPositions) + " positions");
        torch::NoGradGuard noGrad;
        at::manual_seed(0);
        const at::Tensor idsT = at::randint(V, {S}, at::kLong);
        const std::vector<int64_t> prompt(idsT.data_ptr<int64_t>(), idsT.data_ptr<int64_t>() + S);
        capture::KVCache cache;
        cache.capacity = S + N;
        auto t0 = std::chrono::steady_clock::now();
        // The prefill is dense; the decode caches keep both K layouts for SparQ.
        cache.dimensionMajor = true;
        at::Tensor logits = model->prefill(prompt, cache, {});
        const double prefillS =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const int64_t first = logits[0][logits.size(1) - 1].argmax().item<int64_t>();

        auto decode = [&](const attention::AttentionConfig& attn) {
            cache.truncate(S);
            int64_t next = first;
            const auto t = std::chrono::steady_clock::now();
            for (int64_t i = 0; i < N; ++i) {
                const at::Tensor l =
                    model->net()->forward(at::tensor({next}, at::kLong).unsqueeze(0), &cache, attn);
                next = l[0][0].argmax().item<int64_t>();
            }
            return static_cast<double>(N) /
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
        };
        attention::AttentionConfig dense;
        decode(dense); // warm-up (pages, workspaces)
        const double denseTps = decode(dense);
        const double sparqTps = decode(sparq);
        int64_t params = 0;
        for (const at::Tensor& p : model->net()->parameters())
            params += p.numel();
        std::printf("{\"context\":%lld,\"new_tokens\":%lld,\"parameters\":%lld,\"prefill_s\":%.2f,"
                    "\"dense_tokens_per_s\":%.3f,\"sparq_tokens_per_s\":%.3f,\"speedup\":%.3f,"
                    "\"r\":%lld,\"k\":%lld}\n",
                    static_cast<long long>(S), static_cast<long long>(N),
                    static_cast<long long>(params), prefillS, denseTps, sparqTps,
                    sparqTps / denseTps, static_cast<long long>(sparq.r),
                    static_cast<long long>(sparq.k));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
