#pragma once
// What the float64 reference tests of transformers 5.x's model families share
// (test_model_families, test_model_families_2026, test_model_minimax_m3,
// test_model_granite_hybrid): a small model's weights drawn and written as a checkpoint, RMSNorm,
// RoPE, the outputs a reference forward returns, random token ids.

#include "test_support.h"

#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QDir>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace sparqlab::test::f64 {

using Weights = std::map<std::string, at::Tensor>; // float64
using json = nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Draws every parameter of the config's model: linear weights N(0, 1/fan_in) (q and k ×2, o
/// and down ×2), 3-D experts N(0, 1/fan_in), embeddings N(0, 0.1²) (`embedStd`), norm gains
/// 1 + N(0, 0.1²) (q/k norms 2 + …), biases N(0, 0.1²). Writes config.json and the safetensors
/// into `dir`; returns the weights in float64.
inline Weights makeModel(const QString& dir, const json& config, uint64_t seed,
                         double embedStd = 0.1) {
    QDir().mkpath(dir);
    sparqlab::test::writeFile(dir + "/config.json", QByteArray::fromStdString(config.dump(1)));
    const model::CausalLMImpl shell(model::readModelConfig((dir + "/config.json").toStdString()));
    auto gen = at::detail::createCPUGenerator(seed);
    Weights w;
    std::vector<std::pair<std::string, at::Tensor>> list;
    for (const auto& p : shell.named_parameters()) {
        const std::string& n = p.key();
        at::Tensor t = at::empty(p.value().sizes(), at::kFloat);
        auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
        if (has("norm"))
            t.normal_(has("q_norm") || has("k_norm") ? 2.0 : 1.0, 0.1, gen);
        else if (has("embed_tokens"))
            t.normal_(0.0, embedStd, gen);
        else if (t.dim() == 1) // biases
            t.normal_(0.0, 0.1, gen);
        else {
            const int64_t fanIn = t.dim() == 3 ? t.size(1) : t.size(-1);
            double g = 1.0;
            if (has("q_proj") || has("k_proj") || has("o_proj") || has("down_proj") || has(".w2"))
                g = 2.0;
            t.normal_(0.0, g / std::sqrt(static_cast<double>(fanIn)), gen);
        }
        w[n] = t.to(at::kDouble);
        list.emplace_back(n, t);
    }
    model::writeSafetensors((dir + "/model.safetensors").toStdString(), list);
    return w;
}

/// RMSNorm over the last axis: x̂·w, or x̂·(1 + w) (`plusOne`: the Gemma family, Qwen3-Next,
/// MiniMax-M3), x̂ = x / sqrt(mean(x²) + eps).
inline at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps,
                          bool plusOne = false) {
    const at::Tensor n = x * at::rsqrt(x.pow(2).mean(-1, true) + eps);
    return plusOne ? n * (1.0 + w) : w * n;
}

/// 1 / θ^(2i/d) for i < d/2.
inline at::Tensor defaultInv(double theta, int64_t d) {
    return 1.0 / at::pow(theta, at::arange(0, d, 2, at::kDouble) / static_cast<double>(d));
}

/// RoPE on x [H, T, D] over the first `rot` dims: pairs (i, i + rot/2) (`half`) or (2i, 2i+1).
inline at::Tensor rope(const at::Tensor& x, const at::Tensor& inv, int64_t rot, bool half,
                       double factor = 1.0) {
    const int64_t T = x.size(1);
    at::Tensor out = x.clone();
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < rot / 2; ++i) {
            const double a = t * inv[i].item<double>();
            const double c = std::cos(a) * factor, s = std::sin(a) * factor;
            const int64_t p = half ? i : 2 * i, q = half ? i + rot / 2 : 2 * i + 1;
            const at::Tensor xp = x.select(1, t).select(-1, p), xq = x.select(1, t).select(-1, q);
            out.select(1, t).select(-1, p).copy_(xp * c - xq * s);
            out.select(1, t).select(-1, q).copy_(xq * c + xp * s);
        }
    return out;
}

struct RefOut {
    at::Tensor logits;
    std::vector<at::Tensor> q, k, v;
    std::vector<at::Tensor> probs; ///< referenceM3: each layer's attention [H, T, T]
    /// referenceM3: each sparse layer's block scores [Hi, T, blocks] (−inf: after the query)
    std::map<int64_t, at::Tensor> blockScores;
    std::vector<at::Tensor> masks; ///< referenceM3: each layer's keys attended [H, T, T]
};

inline std::vector<int64_t> randomIds(int64_t n, int64_t vocab, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const at::Tensor t = at::randint(vocab, {n}, gen, at::kLong);
    return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

} // namespace sparqlab::test::f64
