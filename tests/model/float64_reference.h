#pragma once
// What the float64 reference tests of transformers 5.x's model families share
// (test_model_families, test_model_families_2026, test_model_minimax_m3,
// test_model_granite_hybrid, test_model_nemotron_h, test_model_falcon_h1, test_model_lfm2,
// test_model_jamba): a small model's weights drawn and written as a checkpoint (and its experts
// packed), RMSNorm, RoPE, Llama attention, Mamba-2's and Mamba-1's recurrences, the outputs a
// reference forward returns, random token ids, and a hybrid model's logits, captures and
// generation against its reference.

#include "test_support.h"

#include "capture/capture_file.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "model/transformer_layer.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sparqlab::test::f64 {

using Weights = std::map<std::string, at::Tensor>; // float64
using json = nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Draws every parameter of the config's model: linear weights N(0, 1/fan_in) (q and k ×2, o
/// and down ×2), 3-D experts N(0, 1/fan_in), embeddings N(0, 0.1²) (`embedStd`), norm gains
/// 1 + N(0, 0.1²) (q/k norms 2 + …), biases N(0, 0.1²); `adjust`, where given, may change any
/// of them by name. Writes config.json and the safetensors into `dir`; returns the weights in
/// float64.
inline Weights makeModel(const QString& dir, const json& config, uint64_t seed,
                         double embedStd = 0.1,
                         const std::function<void(const std::string&, at::Tensor&)>& adjust = {}) {
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
        else if (has("embed_tokens") || has("embeddings"))
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
        if (adjust)
            adjust(n, t);
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

/// YaRN (truncated ramp), transformers' _compute_yarn_parameters.
inline at::Tensor yarnInv(double theta, int64_t d, double factor, double original, double fast,
                          double slow) {
    auto corr = [&](double rot) {
        return d * std::log(original / (rot * 2 * M_PI)) / (2 * std::log(theta));
    };
    const double lo = std::max(std::floor(corr(fast)), 0.0);
    double hi = std::min(std::ceil(corr(slow)), static_cast<double>(d - 1));
    if (lo == hi)
        hi += 0.001;
    const at::Tensor ramp = ((at::arange(d / 2, at::kDouble) - lo) / (hi - lo)).clamp(0, 1);
    const at::Tensor extra = defaultInv(theta, d), inter = extra / factor;
    const at::Tensor keep = 1 - ramp;
    return inter * (1 - keep) + extra * keep;
}

struct RefOut {
    at::Tensor logits;
    std::vector<at::Tensor> q, k, v;
    std::vector<at::Tensor> probs; ///< referenceM3: each layer's attention [H, T, T]
    /// referenceM3: each sparse layer's block scores [Hi, T, blocks] (−inf: after the query)
    std::map<int64_t, at::Tensor> blockScores;
    std::vector<at::Tensor> masks; ///< referenceM3: each layer's keys attended [H, T, T]
    /// referenceV4: each compressed layer's entries [C, D], each CSA layer's indexer scores
    /// [T, C] (−inf: an entry the query does not see yet), and each layer's attention output
    /// [H, T, D] before the rotation is undone (the keys are the values).
    std::map<int64_t, at::Tensor> entries, entryScores;
    std::vector<at::Tensor> attention;
};

/// The depthwise causal convolution of x [T, C] with weight [C, 1, K] written out tap by tap:
/// out[t] = bias + Σ_j w[:, 0, j]·x[t − (K − 1) + j], zero before the first token.
inline at::Tensor causalConvRef(const at::Tensor& x, const at::Tensor& cw, const at::Tensor& bias) {
    const int64_t T = x.size(0), K = cw.size(2);
    at::Tensor co = at::zeros({T, x.size(1)}, x.options());
    if (bias.defined())
        co = co + bias;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t - (K - 1) + j;
            if (s >= 0)
                co[t] += cw.select(2, j).select(1, 0) * x[s];
        }
    return co;
}

/// A Mamba-2 layer's shape for mamba2Ref (model_config.h's LinearSpec in its own terms).
struct Mamba2Shape {
    int64_t heads = 0, headDim = 0, groups = 1, state = 0, kernel = 4;
    bool convBias = true, projBias = false, outBias = false; ///< in_proj's, out_proj's
    double dtMin = 0, dtMax = kInf;                          ///< the time step's clamp
    int64_t normGroups = 1; ///< the gated RMSNorm's groups, each normalised alone
    double eps = 1e-6;
    /// in_proj's output [z | x | B | C | dt] × these, part by part (Falcon-H1's µP vector).
    std::array<double, 5> scale{1, 1, 1, 1, 1};
    /// norm(y·SiLU(z))·w ("before"), norm(y)·w·SiLU(z) ("after") or y·SiLU(z) ("none").
    std::string gate = "before";
};

/// A Mamba-2 layer (weights under `p`: in_proj, conv1d, dt_bias, A_log, D, norm, out_proj) on
/// h [T, hidden] as the recurrence it computes: per token t and head, S ← exp(dt·A)·S + dt·B_t ⊗
/// x_t, y_t = C_t·S + D·x_t, dt = softplus(dt + dt_bias) clamped; the causal convolution written
/// out tap by tap, then SiLU; y·SiLU(z) normalised over each norm group.
inline at::Tensor mamba2Ref(const Mamba2Shape& m, const Weights& w, const std::string& p,
                            const at::Tensor& h) {
    const int64_t T = h.size(0), H = m.heads, P = m.headDim, G = m.groups, N = m.state;
    const int64_t I = H * P, conv = I + 2 * G * N;
    auto W = [&](const std::string& n) { return w.at(p + n); };
    at::Tensor proj = at::linear(h, W("in_proj.weight"));
    if (m.projBias)
        proj = proj + W("in_proj.bias");
    const int64_t ends[] = {0, I, 2 * I, 2 * I + G * N, 2 * I + 2 * G * N, proj.size(1)};
    for (size_t part = 0; part < 5; ++part)
        proj.narrow(1, ends[part], ends[part + 1] - ends[part]).mul_(m.scale[part]);
    const at::Tensor z = proj.narrow(1, 0, I), xbc = proj.narrow(1, I, conv);
    at::Tensor dt = proj.narrow(1, I + conv, H);
    const at::Tensor co = at::silu(
        causalConvRef(xbc, W("conv1d.weight"), m.convBias ? W("conv1d.bias") : at::Tensor()));
    const at::Tensor xs = co.narrow(1, 0, I).view({T, H, P});
    const at::Tensor Bm = co.narrow(1, I, G * N).view({T, G, N}).repeat_interleave(H / G, 1);
    const at::Tensor Cm =
        co.narrow(1, I + G * N, G * N).view({T, G, N}).repeat_interleave(H / G, 1);
    dt = at::softplus(dt + W("dt_bias")).clamp(m.dtMin, m.dtMax);
    const at::Tensor A = -W("A_log").exp(), D = W("D");
    at::Tensor S = at::zeros({H, N, P}, h.scalar_type()); // (float64, or float32 to measure)
    at::Tensor y = at::zeros({T, H, P}, h.scalar_type());
    for (int64_t t = 0; t < T; ++t) {
        const at::Tensor d = dt[t].view({H, 1, 1});
        S = (d * A.view({H, 1, 1})).exp() * S + d * Bm[t].unsqueeze(-1) * xs[t].unsqueeze(1);
        y[t] = (Cm[t].unsqueeze(-1) * S).sum(1) + D.unsqueeze(-1) * xs[t];
    }
    at::Tensor gated = y.reshape({T, I});
    if (m.gate != "after")
        gated = gated * at::silu(z);
    if (m.gate != "none") {
        const at::Tensor g = gated.view({T, m.normGroups, -1});
        gated = W("norm.weight") * (g * at::rsqrt(g.pow(2).mean(-1, true) + m.eps)).view({T, I});
    }
    if (m.gate == "after")
        gated = gated * at::silu(z);
    at::Tensor out = at::linear(gated, W("out_proj.weight"));
    if (m.outBias)
        out = out + W("out_proj.bias");
    return out;
}

/// Causal softmax attention of q [H, T, D] over k and v [KV, T, ·] (KV head j read by query heads
/// j·H/KV … (j + 1)·H/KV − 1), the scores × `scale`: [H, T, Dv].
inline at::Tensor causalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale) {
    const int64_t H = q.size(0), KV = k.size(0), T = q.size(1);
    const at::Tensor s = (at::matmul(q, k.repeat_interleave(H / KV, 0).transpose(1, 2)) * scale)
                             .masked_fill(at::ones({T, T}, at::kBool).triu(1), -kInf);
    return at::matmul(at::softmax(s, -1), v.repeat_interleave(H / KV, 0));
}

/// A Mamba (Mamba-1) layer's shape for mamba1Ref (Jamba's: the inner width I, the state N, the
/// time step's rank R).
struct Mamba1Shape {
    int64_t inner = 0, state = 16, rank = 0;
    bool convBias = true, projBias = false;
    double eps = 1e-6; ///< the dt, B and C norms'
};

/// A Mamba-1 layer with Jamba's norms (weights under `p`: in_proj, conv1d, x_proj, dt_proj,
/// A_log [I, N], D, dt_layernorm, b_layernorm, c_layernorm, out_proj) on h [T, hidden] as the
/// recurrence it computes: [x | z] = in_proj(h); u = SiLU(conv(x)); [dt | B | C] = x_proj(u),
/// each normalised; δ = softplus(dt_proj(dt)); per channel i and state dimension n,
/// S ← exp(δ_i·A_in)·S + δ_i·B_n·u_i, y_i = Σ_n S_in·C_n + D_i·u_i; out_proj(y·SiLU(z)).
inline at::Tensor mamba1Ref(const Mamba1Shape& m, const Weights& w, const std::string& p,
                            const at::Tensor& h) {
    const int64_t T = h.size(0), I = m.inner, N = m.state, R = m.rank;
    auto W = [&](const std::string& n) { return w.at(p + n); };
    at::Tensor proj = at::linear(h, W("in_proj.weight"));
    if (m.projBias)
        proj = proj + W("in_proj.bias");
    const at::Tensor z = proj.narrow(1, I, I);
    const at::Tensor u = at::silu(causalConvRef(proj.narrow(1, 0, I), W("conv1d.weight"),
                                                m.convBias ? W("conv1d.bias") : at::Tensor()));
    const at::Tensor params = at::linear(u, W("x_proj.weight"));
    const at::Tensor dt = rmsNorm(params.narrow(1, 0, R), W("dt_layernorm.weight"), m.eps);
    const at::Tensor Bm = rmsNorm(params.narrow(1, R, N), W("b_layernorm.weight"), m.eps);
    const at::Tensor Cm = rmsNorm(params.narrow(1, R + N, N), W("c_layernorm.weight"), m.eps);
    const at::Tensor delta = at::softplus(at::linear(dt, W("dt_proj.weight"), W("dt_proj.bias")));
    const at::Tensor A = -W("A_log").exp(), D = W("D");
    at::Tensor S = at::zeros({I, N}, at::kDouble);
    at::Tensor y = at::zeros({T, I}, at::kDouble);
    for (int64_t t = 0; t < T; ++t) {
        const at::Tensor d = delta[t].unsqueeze(-1); // [I, 1]
        S = (d * A).exp() * S + d * Bm[t].unsqueeze(0) * u[t].unsqueeze(-1);
        y[t] = at::matmul(S, Cm[t]) + D * u[t];
    }
    at::Tensor out = at::linear(y * at::silu(z), W("out_proj.weight"));
    if (m.projBias)
        out = out + W("out_proj.bias");
    return out;
}

/// A Llama attention layer (weights under `a`: q_proj, k_proj, v_proj, o_proj, biased where
/// attention_bias says) on h [T, hidden], with RoPE on the first `rot` dims of each head (0: none)
/// and the scores scaled by `scale`; q, k and v appended to `out`.
inline at::Tensor attentionRef(const json& c, const Weights& w, const std::string& a,
                               const at::Tensor& h, int64_t rot, double scale, RefOut& out) {
    const int64_t T = h.size(0), H = c["num_attention_heads"];
    const int64_t KV =
        c["num_key_value_heads"].is_null() ? H : c["num_key_value_heads"].get<int64_t>();
    const int64_t D = c["hidden_size"].get<int64_t>() / H;
    const bool bias = c.value("attention_bias", false);
    auto proj = [&](const std::string& n, const at::Tensor& in) {
        const at::Tensor y = at::linear(in, w.at(a + n + ".weight"));
        return bias ? y + w.at(a + n + ".bias") : y;
    };
    at::Tensor q = proj("q_proj", h).view({T, H, D}).transpose(0, 1);
    at::Tensor k = proj("k_proj", h).view({T, KV, D}).transpose(0, 1);
    const at::Tensor v = proj("v_proj", h).view({T, KV, D}).transpose(0, 1);
    if (rot > 0) {
        const at::Tensor inv = defaultInv(c.value("rope_theta", 10000.0), rot);
        q = rope(q, inv, rot, true);
        k = rope(k, inv, rot, true);
    }
    out.q.push_back(q);
    out.k.push_back(k);
    out.v.push_back(v);
    const at::Tensor o = causalAttention(q, k, v, scale);
    return proj("o_proj", o.transpose(0, 1).reshape({T, H * D}));
}

/// A SwiGLU MLP in Llama's names under `p` (gate_proj, up_proj, down_proj) on x:
/// down(SiLU(gate·x) · up·x).
inline at::Tensor swigluRef(const Weights& w, const std::string& p, const at::Tensor& x) {
    return at::linear(at::silu(at::linear(x, w.at(p + "gate_proj.weight"))) *
                          at::linear(x, w.at(p + "up_proj.weight")),
                      w.at(p + "down_proj.weight"));
}

/// The logits of Jamba's block (Jamba, Bamba): final_layernorm, then lm_head, or the embedding
/// where tie_word_embeddings says.
inline at::Tensor jambaLogitsRef(const json& c, const Weights& w, const at::Tensor& x, double eps) {
    const bool tied = c.value("tie_word_embeddings", false);
    return at::linear(rmsNorm(x, w.at("model.final_layernorm.weight"), eps),
                      w.at(tied ? "model.embed_tokens.weight" : "lm_head.weight"));
}

/// Rewrites the checkpoint in `dir` (weights `w`, experts one module each: experts.E.<gate>,
/// <up>, <down>) with the experts packed as transformers 5 saves them: gate_up_proj [E, 2I, h]
/// rows [gate | up], down_proj [E, h, I].
inline void writePackedExperts(const QString& dir, const Weights& w, const std::string& gate,
                               const std::string& up, const std::string& down) {
    std::vector<std::pair<std::string, at::Tensor>> list;
    std::map<std::string, std::vector<at::Tensor>> parts; // "<layer>.experts." + part → [E]
    for (const auto& [n, t] : w) {
        const size_t at = n.find(".experts.");
        if (at == std::string::npos) {
            list.emplace_back(n, t.to(at::kFloat));
            continue;
        }
        const std::string rest = n.substr(at + 9); // "E.gate_proj.weight"
        const int64_t e = std::stoll(rest.substr(0, rest.find('.')));
        const std::string tail = rest.substr(rest.find('.') + 1);
        auto& into = parts[n.substr(0, at) + ".experts." + tail.substr(0, tail.find('.'))];
        if (static_cast<int64_t>(into.size()) <= e)
            into.resize(static_cast<size_t>(e + 1));
        into[static_cast<size_t>(e)] = t.to(at::kFloat);
    }
    for (const auto& [key, ds] : parts) {
        if (key.size() < down.size() || key.compare(key.size() - down.size(), down.size(), down))
            continue;
        const std::string layer = key.substr(0, key.size() - down.size());
        std::vector<at::Tensor> rows;
        for (size_t e = 0; e < ds.size(); ++e)
            rows.push_back(at::cat({parts.at(layer + gate)[e], parts.at(layer + up)[e]}, 0));
        list.emplace_back(layer + "gate_up_proj", at::stack(rows));
        list.emplace_back(layer + "down_proj", at::stack(ds));
    }
    QFile::remove(dir + "/model.safetensors");
    model::writeSafetensors((dir + "/model.safetensors").toStdString(), list);
}

inline std::vector<int64_t> randomIds(int64_t n, int64_t vocab, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const at::Tensor t = at::randint(vocab, {n}, gen, at::kLong);
    return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

/// The model drawn from `config` into `dir` counts as many parameters as its checkpoint holds.
inline void verifyParameterCount(const QString& dir, const json& config, uint64_t seed) {
    const Weights w = makeModel(dir, config, seed);
    int64_t parameters = 0;
    for (const auto& [n, t] : w)
        parameters += t.numel();
    QCOMPARE(model::Model::open(dir.toStdString())->config().parameterCount(), parameters);
}

/// A capture of 12 random ids by `model` (vocabulary of 101), written to `file`, reads back with
/// its layer kinds.
inline void verifyCaptureKeepsKinds(model::Model& model, const std::string& file) {
    const model::CaptureInfo info = model.captureInfo();
    capture::CaptureWriter writer(file, info);
    writer.add(model.capture(randomIds(12, 101, 2), /*allQueries=*/true));
    writer.finish();
    QCOMPARE(capture::CaptureReader(file).info().layerKinds, info.layerKinds);
}

/// An `adjust` for makeModel that draws the routers' correction biases wide (N(−0.6, 0.8²)), every
/// tensor whose name holds `name`, so that they change which experts are chosen.
inline std::function<void(const std::string&, at::Tensor&)> wideBias(const std::string& name) {
    return [name](const std::string& n, at::Tensor& t) {
        if (n.find(name) != std::string::npos)
            t.mul_(8.0).sub_(0.6);
    };
}

/// In a bf16 checkpoint (the weights `w` rounded, into `dir`, which holds config.json) the
/// router's correction bias `bias` stays float32 as transformers keeps it: stored with values bf16
/// cannot hold, it loads unrounded, while the router's weight `router` is bf16. Returns the model.
inline std::unique_ptr<model::Model> verifyBiasStaysFloat32(const QString& dir, const Weights& w,
                                                            const std::string& bias,
                                                            const std::string& router) {
    std::vector<std::pair<std::string, at::Tensor>> list;
    const at::Tensor fine = at::arange(w.at(bias).size(0), at::kFloat) * 1e-4f + 0.1f;
    for (const auto& [n, t] : w)
        list.emplace_back(n, n == bias ? fine : t.to(at::kBFloat16));
    QFile::remove(dir + "/model.safetensors");
    model::writeSafetensors((dir + "/model.safetensors").toStdString(), list);
    model::ModelOpenOptions o;
    o.compute = model::ComputeDtype::Stored;
    auto m = model::Model::open(dir.toStdString(), o);
    const auto weights = m->net()->named_parameters();
    [&] {
        QCOMPARE(m->computeDtype(), at::kBFloat16);
        QCOMPARE(weights[bias].scalar_type(), at::kFloat);
        QVERIFY(at::equal(weights[bias], fine));
        QCOMPARE(weights[router].scalar_type(), at::kBFloat16);
    }();
    return m;
}

/// The rows routing `r` sends to expert e, in token order: the tokens [n] and the weight of each
/// [n, 1] (n = 0: none), as transformers' eager experts gather them.
struct ExpertRows {
    at::Tensor tokens, weights;
};
inline ExpertRows routedTo(const model::MoeRouting& r, int64_t e) {
    std::vector<int64_t> tokens, slots;
    const int64_t N = r.experts.size(0), K = r.experts.size(1);
    for (int64_t t = 0; t < N; ++t)
        for (int64_t j = 0; j < K; ++j)
            if (r.experts[t][j].item<int64_t>() == e) {
                tokens.push_back(t);
                slots.push_back(t * K + j);
            }
    return {at::tensor(tokens, at::kLong),
            r.weights.reshape(-1).index_select(0, at::tensor(slots, at::kLong)).unsqueeze(-1)};
}

/// The largest |a − b| (how much a config key changes a reference's logits).
inline double largestDifference(const at::Tensor& a, const at::Tensor& b) {
    return (a - b).abs().max().item<double>();
}

/// Each bad config (`base` changed by a case's mutation) is refused with one line that names the
/// file `path` and the case's key.
using BadConfig = std::pair<std::function<void(json&)>, std::string>;
inline void verifyBadConfigs(const json& base, const std::string& path,
                             const std::vector<BadConfig>& cases) {
    for (const auto& [mutate, key] : cases) {
        json c = base;
        mutate(c);
        try {
            model::parseModelConfig(c.dump(), path);
            QFAIL(qPrintable(QStringLiteral("accepted a bad %1").arg(QString::fromStdString(key))));
        } catch (const model::ConfigError& e) {
            const std::string what = e.what();
            QVERIFY2(what.find(path) != std::string::npos &&
                         what.find("'" + key + "'") != std::string::npos &&
                         what.find('\n') == std::string::npos,
                     e.what());
        }
    }
}

/// A Mamba-2 config's time_step_limit changes its reference `ref`'s logits (config, weights, ids
/// → RefOut) on a model drawn into `dir`: the clamp bites, so a reference check sees it.
inline void verifyTheClampBites(
    const QString& dir, const json& config, uint64_t seed,
    const std::function<RefOut(const json&, const Weights&, const std::vector<int64_t>&)>& ref) {
    const Weights w = makeModel(dir, config, seed);
    json unclamped = config;
    unclamped.erase("time_step_limit");
    const std::vector<int64_t> ids = randomIds(20, 101, 3);
    const double bite =
        largestDifference(ref(unclamped, w, ids).logits, ref(config, w, ids).logits);
    QVERIFY2(bite > 1e-3,
             qPrintable(QStringLiteral("the clamp changes the logits by %1").arg(bite)));
}

/// The tolerance for a model drawn as `w` against its float64 reference `ref` (weights, ids →
/// RefOut, vocabulary of 101): 10⁻⁴, or 4 × how far the reference itself moves in float32 (its
/// weights and arithmetic rounded, on 37 random ids: its logits and its q, k and v) where that is
/// more. A drawn hybrid can pass
/// float32 rounding from layer to layer with gains of several: a float32 model can be no closer
/// to the float64 reference than the reference is to itself in float32.
inline double
roundingTolerance(const Weights& w,
                  const std::function<RefOut(const Weights&, const std::vector<int64_t>&)>& ref) {
    Weights f;
    for (const auto& [n, t] : w)
        f[n] = t.to(at::kFloat);
    const std::vector<int64_t> ids = randomIds(37, 101, 99);
    const RefOut single = ref(f, ids), exact = ref(w, ids);
    double noise = largestDifference(single.logits.to(at::kDouble), exact.logits);
    for (size_t l = 0; l < exact.q.size(); ++l) // (and the captured q, k and v)
        for (const auto& [a, b] : {std::pair{single.q[l], exact.q[l]},
                                   {single.k[l], exact.k[l]},
                                   {single.v[l], exact.v[l]}})
            noise = std::max(noise, largestDifference(a.to(at::kDouble), b));
    qInfo("float32 reference: %.2g from the float64 one", noise);
    return std::max(1e-4, 4 * noise);
}

/// A hybrid model against its reference forward `ref` (ids → RefOut, vocabulary of 101): the
/// logits of 37 random ids (`seed`; chunks of 16, 16 and 5 where a scan takes 16); the attention
/// layers' q, k and v captured in one pass and in chunks of 5 queries (the states carried from
/// chunk to chunk); and 9 greedy steps after a prefill of 21 tokens (more than a chunk), each step
/// continuing the convolution's last inputs and the scan's state. Each within tol·(1 + |expected|).
inline void followsReference(model::Model& model,
                             const std::function<RefOut(const std::vector<int64_t>&)>& ref,
                             const QString& name, uint64_t seed, double tol = 1e-4) {
    const std::vector<int64_t> ids = randomIds(37, 101, seed);
    const RefOut r = ref(ids);
    SPARQLAB_VERIFY_CLOSE_REL(model.logits(ids), r.logits, tol, tol, name + " logits");
    const model::CaptureExample e = model.capture(ids, /*allQueries=*/true);
    const model::CaptureExample chunked =
        model.capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/5);
    QCOMPARE(e.q.size(0), static_cast<int64_t>(r.q.size()));
    for (const model::CaptureExample* c : {&e, &chunked})
        for (size_t i = 0; i < r.q.size(); ++i) {
            const QString where =
                name +
                QStringLiteral(" attention layer %1%2 ").arg(i).arg(c == &e ? "" : ", chunked");
            const auto l = static_cast<int64_t>(i);
            SPARQLAB_VERIFY_CLOSE_REL(c->q[l], r.q[i], tol, tol, where + "q");
            SPARQLAB_VERIFY_CLOSE_REL(c->k[l], r.k[i], tol, tol, where + "k");
            SPARQLAB_VERIFY_CLOSE_REL(c->v[l], r.v[i], tol, tol, where + "v");
        }
    const std::vector<int64_t> head(ids.begin(), ids.begin() + 21);
    const model::Generation gen = model.generate(head, 9, {}, /*stopAtEos=*/false);
    std::vector<int64_t> seq = head;
    seq.insert(seq.end(), gen.newIds.begin(), gen.newIds.end());
    const RefOut chain = ref(seq);
    QCOMPARE(gen.stepLogits.size(), size_t{9});
    for (size_t i = 0; i < gen.stepLogits.size(); ++i)
        SPARQLAB_VERIFY_CLOSE_REL(gen.stepLogits[i], chain.logits[20 + static_cast<int64_t>(i)],
                                  tol, tol, name + QStringLiteral(" generation step %1").arg(i));
}

} // namespace sparqlab::test::f64
