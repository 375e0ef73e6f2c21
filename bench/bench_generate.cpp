// End-to-end decoding speed of a model with dense and with sparse attention at long context
// (issues 8 and 26): one dense prefill of S tokens into preallocated decode caches, then N
// greedy steps with each method (the decode engine, attention/decode/engine.h), replayed from the
// same prefill. Loki and Double Sparsity are calibrated on the first 1,024 prompt tokens.
// Prints one JSON object.
//
//   bench_generate MODEL CONTEXT [NEW_TOKENS] [R] [K] [METHODS] [PAGE_SIZE] [P]
//
// METHODS: a comma list of the engine's methods (default sparq).

#include "analysis/calibrate_run.h"
#include "attention/method_table.h"
#include "attention/runtime_info.h"
#include "model/model.h"

#include <ATen/ATen.h>
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

using namespace sparqlab;

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: bench_generate MODEL CONTEXT [NEW_TOKENS] [R] [K] [METHODS] "
                             "[PAGE_SIZE] [P]\n");
        return 2;
    }
    attention::restartWithPassiveOpenMP(argv);
    attention::initRuntime();
    try {
        const auto model = model::Model::open(argv[1]);
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
        model::KVCache cache;
        cache.capacity = S + N;
        auto t0 = std::chrono::steady_clock::now();
        // The prefill is dense; the decode caches keep both K layouts for SparQ.
        cache.dimensionMajor = true;
        at::Tensor logits = model->prefill(prompt, cache, {});
        const double prefillS =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const int64_t first = logits[0][logits.size(1) - 1].argmax().item<int64_t>();

        attention::Method last = attention::Method::Dense;
        auto decode = [&](const attention::AttentionConfig& attn) {
            cache.truncate(S);
            if (attn.method != last) // no other method's pages or projection to keep up
                for (const auto& f : cache.fast)
                    if (f)
                        f->dropExtras();
            last = attn.method;
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
        // Each method of the list with the same r and k (Quest's page size, the top-p mass).
        std::vector<attention::AttentionConfig> methods;
        std::stringstream list(argc > 6 ? argv[6] : "sparq");
        std::map<attention::Method, std::shared_ptr<const attention::Calibration>> calibrations;
        for (std::string name; std::getline(list, name, ',');) {
            const attention::MethodInfo* mi = attention::findMethod(name);
            if (!mi || !mi->fastDecode)
                throw std::runtime_error("'" + name + "' is not a method of the decode engine");
            attention::AttentionConfig c = sparq;
            c.method = mi->id;
            c.pageSize = argc > 7 ? std::stoll(argv[7]) : 16;
            c.p = argc > 8 ? std::stod(argv[8]) : 0.9;
            if (mi->calibrated) {
                auto& cal = calibrations[mi->id];
                if (!cal) { // on the prompt's first tokens
                    const std::vector<int64_t> head(prompt.begin(),
                                                    prompt.begin() + std::min<int64_t>(S, 1024));
                    cal = analysis::calibrateOnTokens(*model, head, mi->id);
                }
                c.calibration = cal;
            }
            methods.push_back(c);
        }
        std::ostringstream per;
        double sparqTps = 0;
        for (size_t i = 0; i < methods.size(); ++i) {
            decode(methods[i]); // warm-up: Quest's pages, Loki's projection, workspaces
            const double tps = decode(methods[i]);
            if (methods[i].method == attention::Method::Sparq)
                sparqTps = tps;
            char buf[160];
            std::snprintf(buf, sizeof buf,
                          "%s{\"method\":\"%s\",\"tokens_per_s\":%.3f,\"speedup\":%.3f}",
                          i ? "," : "", attention::methodName(methods[i].method).c_str(), tps,
                          tps / denseTps);
            per << buf;
        }
        int64_t params = 0;
        for (const at::Tensor& p : model->net()->parameters())
            params += p.numel();
        std::printf("{\"context\":%lld,\"new_tokens\":%lld,\"parameters\":%lld,\"prefill_s\":%.2f,"
                    "\"dense_tokens_per_s\":%.3f,\"sparq_tokens_per_s\":%.3f,\"speedup\":%.3f,"
                    "\"r\":%lld,\"k\":%lld,\"methods\":[%s]}\n",
                    static_cast<long long>(S), static_cast<long long>(N),
                    static_cast<long long>(params), prefillS, denseTps, sparqTps,
                    sparqTps / denseTps, static_cast<long long>(sparq.r),
                    static_cast<long long>(sparq.k), per.str().c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
