// GLM-4, GLM-4.5, Granite, Mixtral, MiniMax-M2, MiniMax-M3, OLMo 3 and Llama 4 (text) against a
// reference forward written here in float64, line by line from transformers 5.x's modelling code
// (Glm4ForCausalLM, Glm4MoeForCausalLM, GraniteForCausalLM, MixtralForCausalLM,
// MiniMaxM2ForCausalLM, MiniMaxM3VLForCausalLM, Olmo3ForCausalLM, Llama4ForCausalLM; eager
// attention and experts):
// partial interleaved RoPE and four norms, partial rotate-half RoPE with per-head q/k norms and
// DeepSeek's group-limited sigmoid router, the four multipliers, experts with a softmax router
// under a sliding window, q/k norms over the whole projections with rotary_dim and a sigmoid
// router whose correction bias sits beside it, a RoPE per layer type with YaRN, chunked and NoPE
// layers with temperature tuning, the L2 q/k norm, a sigmoid top-1 router scaling the expert's
// input and a shared expert; MiniMax-M3's block indexer, one selection per group of query heads,
// with (1 + w) norms and SwiGLU-OAI, and its block scores in a capture under the indexer method.
// Small models with peaked attention whose weights the test draws; the config files are the v5
// form (rope_parameters), and each is read in its v4 form too.

#include "test_support.h"

#include "attention/causal.h"
#include "attention/method_spec.h"
#include "capture/capture_file.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>
#include <torch/types.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

using namespace sparqlab;

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

namespace {

using Weights = std::map<std::string, at::Tensor>; // float64
using json = nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Draws every parameter of the config's model: linear weights N(0, 1/fan_in) (q and k ×2, o
/// and down ×2), 3-D experts N(0, 1/fan_in), embeddings N(0, 0.1²) (`embedStd`), norm gains
/// 1 + N(0, 0.1²) (q/k norms 2 + …), biases N(0, 0.1²). Writes config.json and the safetensors
/// into `dir`; returns the weights in float64.
Weights makeModel(const QString& dir, const json& config, uint64_t seed, double embedStd = 0.1) {
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

// ---- the reference, float64 -----------------------------------------------------------------

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
    return w * (x * at::rsqrt(x.pow(2).mean(-1, true) + eps));
}

/// 1 / θ^(2i/d) for i < d/2.
at::Tensor defaultInv(double theta, int64_t d) {
    return 1.0 / at::pow(theta, at::arange(0, d, 2, at::kDouble) / static_cast<double>(d));
}

/// YaRN (truncated ramp), transformers' _compute_yarn_parameters.
at::Tensor yarnInv(double theta, int64_t d, double factor, double original, double fast,
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

/// RoPE on x [H, T, D] over the first `rot` dims: pairs (i, i + rot/2) (`half`) or (2i, 2i+1).
at::Tensor rope(const at::Tensor& x, const at::Tensor& inv, int64_t rot, bool half,
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

/// Causal attention of q [H, T, D] over k, v [KV, T, D]; key j visible from i when j ≤ i, and
/// i − j < window (window > 0), and j / chunk = i / chunk (chunk > 0). Returns [T, H·D].
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                  int64_t window = 0, int64_t chunk = 0) {
    const int64_t H = q.size(0), T = q.size(1), g = H / k.size(0);
    const at::Tensor K = k.repeat_interleave(g, 0), V = v.repeat_interleave(g, 0);
    at::Tensor z = at::matmul(q, K.transpose(1, 2)) * scale;
    for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
            bool seen = j <= i;
            if (window > 0)
                seen = seen && i - j < window;
            if (chunk > 0)
                seen = seen && j / chunk == i / chunk;
            if (!seen)
                z.select(1, i).select(-1, j).fill_(-kInf);
        }
    return at::matmul(at::softmax(z, -1), V).transpose(0, 1).reshape({T, -1});
}

at::Tensor gated(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up,
                 const at::Tensor& down) {
    return at::linear(at::silu(at::linear(x, gate)) * at::linear(x, up), down);
}

struct RefOut {
    at::Tensor logits;
    std::vector<at::Tensor> q, k, v;
    std::vector<at::Tensor> probs; ///< referenceM3: each layer's attention [H, T, T]
    /// referenceM3: each sparse layer's block scores [Hi, T, blocks] (−inf: after the query)
    std::map<int64_t, at::Tensor> blockScores;
};

/// The model's forward pass on ids, by architecture.
RefOut reference(const std::string& arch, const json& c, const Weights& w,
                 const std::vector<int64_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), L = c["num_hidden_layers"],
                  H = c["num_attention_heads"], KV = c["num_key_value_heads"];
    const int64_t hidden = c["hidden_size"];
    const int64_t D = c.value("head_dim", hidden / H);
    const double eps = c.value("rms_norm_eps", 1e-6);
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    if (arch == "granite")
        x = x * c["embedding_multiplier"].get<double>();
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const std::string a = p + "self_attn.";
        auto norm = [&](const at::Tensor& t, const std::string& n) {
            return rmsNorm(t, W(p + n + ".weight"), eps);
        };
        const at::Tensor in = arch == "olmo3" ? x : norm(x, "input_layernorm");
        at::Tensor q = at::linear(in, W(a + "q_proj.weight"));
        at::Tensor k = at::linear(in, W(a + "k_proj.weight"));
        at::Tensor v = at::linear(in, W(a + "v_proj.weight"));
        if (arch == "glm4" || arch == "glm4_moe") {
            q = q + W(a + "q_proj.bias");
            k = k + W(a + "k_proj.bias");
            v = v + W(a + "v_proj.bias");
        }
        if (arch == "olmo3" || arch == "minimax_m2") { // the whole projection, before the split
            q = rmsNorm(q, W(a + "q_norm.weight"), eps);
            k = rmsNorm(k, W(a + "k_norm.weight"), eps);
        }
        q = q.view({T, H, D}).transpose(0, 1);
        k = k.view({T, KV, D}).transpose(0, 1);
        v = v.view({T, KV, D}).transpose(0, 1);
        if (arch == "glm4_moe") { // per head, before RoPE
            q = rmsNorm(q, W(a + "q_norm.weight"), eps);
            k = rmsNorm(k, W(a + "k_norm.weight"), eps);
        }
        double scale = 1.0 / std::sqrt(static_cast<double>(D));
        int64_t window = 0, chunk = 0;
        const json& rp = c["rope_parameters"];
        if (arch == "glm4") { // the first half of each head, pairs (2i, 2i + 1)
            const int64_t rot = D / 2;
            const at::Tensor inv = defaultInv(rp["rope_theta"], rot);
            q = rope(q, inv, rot, false);
            k = rope(k, inv, rot, false);
        } else if (arch == "glm4_moe") { // the first half of each head, pairs (i, i + D/4)
            const int64_t rot = D / 2;
            const at::Tensor inv = defaultInv(rp["rope_theta"], rot);
            q = rope(q, inv, rot, true);
            k = rope(k, inv, rot, true);
        } else if (arch == "minimax_m2") { // the first rotary_dim of each head, rotate-half
            const int64_t rot = c["rotary_dim"];
            const at::Tensor inv = defaultInv(rp["rope_theta"], rot);
            q = rope(q, inv, rot, true);
            k = rope(k, inv, rot, true);
        } else if (arch == "granite" || arch == "mixtral") {
            const at::Tensor inv = defaultInv(rp["rope_theta"], D);
            q = rope(q, inv, D, true);
            k = rope(k, inv, D, true);
            if (arch == "granite")
                scale = c["attention_multiplier"];
            else
                window = c["sliding_window"];
        } else if (arch == "olmo3") {
            const bool sliding = c["layer_types"][l] == "sliding_attention";
            const json& r = rp[sliding ? "sliding_attention" : "full_attention"];
            const at::Tensor inv = sliding ? defaultInv(r["rope_theta"], D)
                                           : yarnInv(r["rope_theta"], D, r["factor"],
                                                     r["original_max_position_embeddings"], 32, 1);
            const double f = sliding ? 1.0 : r["attention_factor"].get<double>();
            q = rope(q, inv, D, true, f);
            k = rope(k, inv, D, true, f);
            window = sliding ? c["sliding_window"].get<int64_t>() : 0;
        } else {                               // llama4_text
            if (c["no_rope_layers"][l] == 1) { // complex RoPE, then the L2 norm, chunked
                const at::Tensor inv = defaultInv(rp["rope_theta"], D);
                q = rope(q, inv, D, false);
                k = rope(k, inv, D, false);
                auto l2 = [&](const at::Tensor& t) {
                    return t * at::rsqrt(t.pow(2).mean(-1, true) + eps);
                };
                q = l2(q);
                k = l2(k);
                chunk = c["attention_chunk_size"];
            } else { // NoPE: temperature tuning
                const double fs = c["floor_scale"], as = c["attn_scale"];
                const at::Tensor pos = at::arange(T, at::kDouble);
                const at::Tensor t = at::log(at::floor((pos + 1) / fs) + 1) * as + 1;
                q = q * t.view({1, T, 1});
            }
        }
        out.q.push_back(q);
        out.k.push_back(k);
        out.v.push_back(v);
        const at::Tensor o =
            at::linear(attend(q, k, v, scale, window, chunk), W(a + "o_proj.weight"));
        // The feed-forward part.
        // y + each token's experts idx [T, k] weighted wts [T, k], gated MLPs under `m`experts.e.
        auto routed = [&](at::Tensor y, const at::Tensor& h, const at::Tensor& idx,
                          const at::Tensor& wts, const std::string& m, bool mixtralNames) {
            const char* gate = mixtralNames ? "w1.weight" : "gate_proj.weight";
            const char* up = mixtralNames ? "w3.weight" : "up_proj.weight";
            const char* down = mixtralNames ? "w2.weight" : "down_proj.weight";
            for (int64_t t = 0; t < h.size(0); ++t)
                for (int64_t j = 0; j < idx.size(1); ++j) {
                    const std::string e =
                        m + "experts." + std::to_string(idx[t][j].item<int64_t>()) + ".";
                    y[t] += wts[t][j] * gated(h[t], W(e + gate), W(e + up), W(e + down));
                }
            return y;
        };
        auto mlpOf = [&](const at::Tensor& h) -> at::Tensor {
            if (arch == "glm4") {
                const auto gu = at::linear(h, W(p + "mlp.gate_up_proj.weight")).chunk(2, -1);
                return at::linear(gu[1] * at::silu(gu[0]), W(p + "mlp.down_proj.weight"));
            }
            if (arch == "mixtral") {
                const std::string m = p + "block_sparse_moe.";
                const at::Tensor probs = at::softmax(at::linear(h, W(m + "gate.weight")), -1);
                const auto [top, idx] = probs.topk(c["num_experts_per_tok"].get<int64_t>(), -1);
                return routed(at::zeros_like(h), h, idx, top / top.sum(-1, true), m, true);
            }
            if (arch == "minimax_m2") {
                // MiniMaxM2TopKRouter: σ; the top k of σ + the correction bias; σ of those,
                // renormalised.
                const std::string m = p + "block_sparse_moe.";
                const at::Tensor s = at::sigmoid(at::linear(h, W(m + "gate.weight")));
                const at::Tensor idx =
                    std::get<1>((s + W(m + "e_score_correction_bias"))
                                    .topk(c["num_experts_per_tok"].get<int64_t>(), -1));
                const at::Tensor wts = s.gather(1, idx) / s.gather(1, idx).sum(-1, true);
                return routed(at::zeros_like(h), h, idx, wts, m, true);
            }
            if (arch == "glm4_moe" && l >= c["first_k_dense_replace"].get<int64_t>()) {
                // Glm4MoeMoE.route_tokens_to_experts: σ, + the correction bias for the choice,
                // a group's score its top two, the top groups, the top k of their experts
                // (the others 0), the weights σ renormalised × routed_scaling_factor.
                const std::string m = p + "mlp.";
                const int64_t E = c["n_routed_experts"], G = c["n_group"];
                const at::Tensor s = at::sigmoid(at::linear(h, W(m + "gate.weight")));
                const at::Tensor choice = s + W(m + "gate.e_score_correction_bias");
                const at::Tensor groups =
                    std::get<0>(choice.view({-1, G, E / G}).topk(2, -1)).sum(-1);
                const at::Tensor keep = at::zeros_like(groups).scatter_(
                    1, std::get<1>(groups.topk(c["topk_group"].get<int64_t>(), -1)), 1.0);
                const at::Tensor mask =
                    keep.unsqueeze(-1).expand({-1, G, E / G}).reshape({-1, E}).to(at::kBool);
                const at::Tensor idx =
                    std::get<1>(choice.masked_fill(mask.logical_not(), 0.0)
                                    .topk(c["num_experts_per_tok"].get<int64_t>(), -1));
                at::Tensor wts = s.gather(1, idx);
                wts = wts / (wts.sum(-1, true) + 1e-20) * c["routed_scaling_factor"].get<double>();
                const at::Tensor shared = gated(h, W(m + "shared_experts.gate_proj.weight"),
                                                W(m + "shared_experts.up_proj.weight"),
                                                W(m + "shared_experts.down_proj.weight"));
                return routed(shared, h, idx, wts, m, false);
            }
            if (arch == "llama4_text" && (l % 2 == 1)) { // the MoE layers (step 2)
                const std::string m = p + "feed_forward.";
                const at::Tensor logits = at::linear(h, W(m + "router.weight"));
                const auto [top, idx] = logits.topk(1, -1);
                at::Tensor y = gated(h, W(m + "shared_expert.gate_proj.weight"),
                                     W(m + "shared_expert.up_proj.weight"),
                                     W(m + "shared_expert.down_proj.weight"));
                const at::Tensor gu = W(m + "experts.gate_up_proj"); // [E, h, 2I]
                const at::Tensor dn = W(m + "experts.down_proj");    // [E, I, h]
                const int64_t I = dn.size(1);
                for (int64_t t = 0; t < h.size(0); ++t) {
                    const int64_t e = idx[t][0].item<int64_t>();
                    const at::Tensor xe = h[t] * at::sigmoid(top[t][0]); // the expert's input
                    const at::Tensor z = at::matmul(xe, gu[e]);
                    y[t] += at::matmul(z.narrow(0, I, I) * at::silu(z.narrow(0, 0, I)), dn[e]);
                }
                return y;
            }
            const std::string m = p + (arch == "llama4_text" ? "feed_forward." : "mlp.");
            return gated(h, W(m + "gate_proj.weight"), W(m + "up_proj.weight"),
                         W(m + "down_proj.weight"));
        };
        if (arch == "glm4") {
            x = x + norm(o, "post_self_attn_layernorm");
            x = x + norm(mlpOf(norm(x, "post_attention_layernorm")), "post_mlp_layernorm");
        } else if (arch == "olmo3") {
            x = x + norm(o, "post_attention_layernorm");
            x = x + norm(mlpOf(x), "post_feedforward_layernorm");
        } else if (arch == "granite") {
            const double r = c["residual_multiplier"];
            x = x + o * r;
            x = x + mlpOf(norm(x, "post_attention_layernorm")) * r;
        } else {
            x = x + o;
            x = x + mlpOf(norm(x, "post_attention_layernorm"));
        }
    }
    x = rmsNorm(x, W("model.norm.weight"), eps);
    out.logits = at::linear(x, W("lm_head.weight"));
    if (arch == "granite")
        out.logits = out.logits / c["logits_scaling"].get<double>();
    return out;
}

// ---- MiniMax-M3 (MiniMaxM3VLForCausalLM, modular_minimax_m3_vl.py), float64 ----------------

/// Gemma's RMSNorm: x̂·(1 + w).
at::Tensor gemmaNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
    return (x * at::rsqrt(x.pow(2).mean(-1, true) + eps)) * (1 + w);
}

/// SwiGLU-OAI, gate and up in halves: (clamp(up, ±L) + 1)·g·σ(α·g), g = min(gate, L).
at::Tensor swigluOai(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up,
                     const at::Tensor& down, double limit, double alpha) {
    const at::Tensor g = at::linear(x, gate).clamp_max(limit);
    const at::Tensor u = at::linear(x, up).clamp(-limit, limit);
    return at::linear((u + 1) * (g * at::sigmoid(g * alpha)), down);
}

/// MiniMaxM3VLIndexer.forward and build_block_mask: per indexer head g, query s and key t, the
/// score q_g·k; a block's score the largest of its causal keys'; the query's own last `local`
/// blocks scored +inf; the top min(topk, blocks) blocks with a causal key kept. Returns the
/// mask [Hi, T, T] (kept and causal) and, in `blockScores`, the scores before the +inf.
at::Tensor m3BlockMask(const at::Tensor& iq, const at::Tensor& ik, int64_t block, int64_t topk,
                       int64_t local, at::Tensor& blockScores) {
    const int64_t Hi = iq.size(0), T = iq.size(1), nb = (T + block - 1) / block;
    at::Tensor z = at::matmul(iq, ik.transpose(1, 2)).expand({Hi, T, T}).clone();
    for (int64_t s = 0; s < T; ++s)
        for (int64_t t = s + 1; t < T; ++t)
            z.select(1, s).select(-1, t).fill_(-kInf);
    at::Tensor scores = at::full({Hi, T, nb}, -kInf, at::kDouble);
    for (int64_t t = 0; t < T; ++t) {
        at::Tensor b = scores.select(-1, t / block);
        b.copy_(at::maximum(b, z.select(-1, t)));
    }
    blockScores = scores.clone();
    for (int64_t s = 0; s < T; ++s)
        for (int64_t j = 0; j < local; ++j)
            scores.select(1, s).select(-1, std::max<int64_t>(s / block - j, 0)).fill_(kInf);
    const auto [top, idx] = scores.topk(std::min(topk, nb), -1);
    at::Tensor mask = at::zeros({Hi, T, T}, at::kBool);
    for (int64_t g = 0; g < Hi; ++g)
        for (int64_t s = 0; s < T; ++s)
            for (int64_t j = 0; j < top.size(-1); ++j) {
                if (top[g][s][j].item<double>() == -kInf)
                    continue;
                const int64_t b = idx[g][s][j].item<int64_t>();
                for (int64_t t = b * block; t < std::min((b + 1) * block, s + 1); ++t)
                    mask[g][s][t] = true;
            }
    return mask;
}

/// The text model's forward pass on ids (weights under the hub's names, no prefix).
RefOut referenceM3(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), L = c["num_hidden_layers"],
                  H = c["num_attention_heads"], KV = c["num_key_value_heads"], D = c["head_dim"];
    const int64_t Hi = c["index_n_heads"], Di = c["index_head_dim"], rot = c["rotary_dim"];
    const double eps = c["rms_norm_eps"], limit = c["swiglu_limit"], alpha = c["swiglu_alpha"];
    auto W = [&](const std::string& n) { return w.at(n); };
    const at::Tensor inv = defaultInv(c["rope_parameters"]["rope_theta"], rot);
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.";
        const at::Tensor h = gemmaNorm(x, W(p + "input_layernorm.weight"), eps);
        at::Tensor q = gemmaNorm(at::linear(h, W(a + "q_proj.weight")).view({T, H, D}),
                                 W(a + "q_norm.weight"), eps)
                           .transpose(0, 1);
        at::Tensor k = gemmaNorm(at::linear(h, W(a + "k_proj.weight")).view({T, KV, D}),
                                 W(a + "k_norm.weight"), eps)
                           .transpose(0, 1);
        const at::Tensor v = at::linear(h, W(a + "v_proj.weight")).view({T, KV, D}).transpose(0, 1);
        q = rope(q, inv, rot, true);
        k = rope(k, inv, rot, true);
        out.q.push_back(q);
        out.k.push_back(k);
        out.v.push_back(v);
        at::Tensor z = at::matmul(q, k.repeat_interleave(H / KV, 0).transpose(1, 2)) /
                       std::sqrt(static_cast<double>(D));
        at::Tensor seen = at::ones({T, T}, at::kBool).tril().expand({H, T, T});
        if (c["layer_types"][l] == "minimax_m3_sparse") {
            const at::Tensor iq =
                rope(gemmaNorm(at::linear(h, W(a + "index_q_proj.weight")).view({T, Hi, Di}),
                               W(a + "index_q_norm.weight"), eps)
                         .transpose(0, 1),
                     inv, rot, true);
            const at::Tensor ik =
                rope(gemmaNorm(at::linear(h, W(a + "index_k_proj.weight")).view({T, 1, Di}),
                               W(a + "index_k_norm.weight"), eps)
                         .transpose(0, 1),
                     inv, rot, true);
            seen = m3BlockMask(iq, ik, c["index_block_size"], c["index_topk_blocks"],
                               c["index_local_blocks"], out.blockScores[l])
                       .repeat_interleave(H / Hi, 0);
        }
        z = z.masked_fill(seen.logical_not(), -kInf);
        out.probs.push_back(at::softmax(z, -1));
        const at::Tensor attn = at::matmul(out.probs.back(), v.repeat_interleave(H / KV, 0));
        x = x + at::linear(attn.transpose(0, 1).reshape({T, H * D}), W(a + "o_proj.weight"));
        const at::Tensor h2 = gemmaNorm(x, W(p + "post_attention_layernorm.weight"), eps);
        if (c["mlp_layer_types"][l] == "dense") {
            x = x + swigluOai(h2, W(p + "mlp.gate_proj.weight"), W(p + "mlp.up_proj.weight"),
                              W(p + "mlp.down_proj.weight"), limit, alpha);
            continue;
        }
        // MiniMaxM3VLTopKRouter: σ, the top k of σ + the correction bias, σ of those
        // renormalised; Laguna's block: Σ w·expert(x) × routed_scaling_factor + shared(x).
        const std::string m = p + "block_sparse_moe.";
        const at::Tensor sg = at::sigmoid(at::linear(h2, W(m + "gate.weight")));
        const at::Tensor idx = std::get<1>((sg + W(m + "e_score_correction_bias"))
                                               .topk(c["num_experts_per_tok"].get<int64_t>(), -1));
        const at::Tensor wts = sg.gather(1, idx) / sg.gather(1, idx).sum(-1, true);
        at::Tensor y = at::zeros_like(h2);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < idx.size(1); ++j) {
                const std::string e =
                    m + "experts." + std::to_string(idx[t][j].item<int64_t>()) + ".";
                y[t] += wts[t][j] * swigluOai(h2[t], W(e + "w1.weight"), W(e + "w3.weight"),
                                              W(e + "w2.weight"), limit, alpha);
            }
        const std::string sh = m + "shared_experts.";
        x = x + y * c["routed_scaling_factor"].get<double>() +
            swigluOai(h2, W(sh + "gate_proj.weight"), W(sh + "up_proj.weight"),
                      W(sh + "down_proj.weight"), limit, alpha);
    }
    x = gemmaNorm(x, W("model.norm.weight"), eps);
    out.logits = at::linear(x, W("lm_head.weight"));
    return out;
}

/// MiniMax-M3's text config as transformers 5.x names its keys: 3 layers (the first dense with
/// plain attention, then two sparse ones with the block indexer), 4 indexer heads each selecting
/// for 2 of the 8 query heads (which share 2 KV heads 4 by 4), blocks of 4 keys, the top 3 (the
/// query's own and the one before among them) of up to 6, a SwiGLU clamp that bites.
json m3Config() {
    return {{"architectures", {"MiniMaxM3VLForCausalLM"}},
            {"model_type", "minimax_m3_vl_text"},
            {"vocab_size", 97},
            {"hidden_size", 64},
            {"intermediate_size", 32},
            {"dense_intermediate_size", 48},
            {"shared_intermediate_size", 24},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 2},
            {"head_dim", 16},
            {"rotary_dim", 8},
            {"max_position_embeddings", 256},
            {"rms_norm_eps", 1e-6},
            {"num_local_experts", 8},
            {"num_experts_per_tok", 2},
            {"routed_scaling_factor", 2.0},
            {"swiglu_alpha", 1.702},
            {"swiglu_limit", 1.5},
            {"hidden_act", "swigluoai"},
            {"mlp_layer_types", {"dense", "sparse", "sparse"}},
            {"layer_types", {"full_attention", "minimax_m3_sparse", "minimax_m3_sparse"}},
            {"index_n_heads", 4},
            {"index_head_dim", 16},
            {"index_block_size", 4},
            {"index_topk_blocks", 3},
            {"index_local_blocks", 2},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5000000.0}}},
            {"dtype", "float32"},
            {"tie_word_embeddings", false}};
}

std::vector<int64_t> randomIds(int64_t n, int64_t vocab, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const at::Tensor t = at::randint(vocab, {n}, gen, at::kLong);
    return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

/// The common small shape: 4 query and 2 KV heads of 16 dims, hidden 64, vocabulary 97.
json base(const char* arch, const char* type, int64_t layers) {
    return {{"architectures", {arch}},
            {"model_type", type},
            {"vocab_size", 97},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"num_hidden_layers", layers},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 16},
            {"max_position_embeddings", 256},
            {"rms_norm_eps", 1e-5},
            {"dtype", "float32"},
            {"tie_word_embeddings", false}};
}

json configOf(const std::string& arch) {
    if (arch == "glm4") {
        json c = base("Glm4ForCausalLM", "glm4", 2);
        c["partial_rotary_factor"] = 0.5;
        c["attention_bias"] = true;
        c["rope_parameters"] = {
            {"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
        return c;
    }
    if (arch == "glm4_moe") { // GLM-4.5's form: q, k, v biases, q/k norms, a dense layer first
        json c = base("Glm4MoeForCausalLM", "glm4_moe", 3);
        c["attention_bias"] = true;
        c["use_qk_norm"] = true;
        c["partial_rotary_factor"] = 0.5;
        c["moe_intermediate_size"] = 32;
        c["n_routed_experts"] = 8;
        c["num_experts_per_tok"] = 2;
        c["n_shared_experts"] = 1;
        c["n_group"] = 2;
        c["topk_group"] = 1;
        c["first_k_dense_replace"] = 1;
        c["routed_scaling_factor"] = 2.5;
        c["norm_topk_prob"] = true;
        c["num_nextn_predict_layers"] = 1;
        c["rope_parameters"] = {
            {"rope_type", "default"}, {"rope_theta", 1000000.0}, {"partial_rotary_factor", 0.5}};
        return c;
    }
    if (arch == "granite") {
        json c = base("GraniteForCausalLM", "granite", 2);
        c.erase("head_dim");
        c["embedding_multiplier"] = 12.0;
        c["attention_multiplier"] = 0.125;
        c["residual_multiplier"] = 0.22;
        c["logits_scaling"] = 8.0;
        c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
        return c;
    }
    if (arch == "mixtral") {
        json c = base("MixtralForCausalLM", "mixtral", 2);
        c["intermediate_size"] = 32;
        c["num_local_experts"] = 4;
        c["num_experts_per_tok"] = 2;
        c["sliding_window"] = 6;
        c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
        return c;
    }
    if (arch == "minimax_m2") { // the hub's keys: rotary_dim, not partial_rotary_factor
        json c = base("MiniMaxM2ForCausalLM", "minimax_m2", 2);
        c["intermediate_size"] = 32;
        c["num_local_experts"] = 8;
        c["num_experts_per_tok"] = 2;
        c["rotary_dim"] = 8;
        c["use_qk_norm"] = true;
        c["qk_norm_type"] = "per_layer";
        c["scoring_func"] = "sigmoid";
        c["use_routing_bias"] = true;
        c["shared_intermediate_size"] = 0;
        c["attn_type_list"] = {1, 1};
        c["use_mtp"] = true;
        c["num_mtp_modules"] = 3;
        c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000000.0}};
        return c;
    }
    if (arch == "olmo3") {
        json c = base("Olmo3ForCausalLM", "olmo3", 4);
        c["sliding_window"] = 6;
        c["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                            "full_attention"};
        c["rope_parameters"] = {
            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 500000.0}}},
            {"full_attention",
             {{"rope_type", "yarn"},
              {"rope_theta", 500000.0},
              {"factor", 8.0},
              {"attention_factor", 1.2079},
              {"original_max_position_embeddings", 64},
              {"beta_fast", 32.0},
              {"beta_slow", 1.0},
              // Ignored here: transformers 5.x reads truncate beside the layer types only.
              {"truncate", false}}}};
        return c;
    }
    json c = base("Llama4ForCausalLM", "llama4_text", 4); // llama4_text
    c["intermediate_size"] = 32;
    c["intermediate_size_mlp"] = 96;
    c["num_local_experts"] = 4;
    c["num_experts_per_tok"] = 1;
    c["interleave_moe_layer_step"] = 2;
    c["no_rope_layers"] = {1, 1, 1, 0};
    c["attention_chunk_size"] = 6;
    c["attn_temperature_tuning"] = true;
    c["floor_scale"] = 4;
    c["attn_scale"] = 0.1;
    c["use_qk_norm"] = true;
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
    return c;
}

/// The checkpoint `w` (float64) in float32 with its routed experts packed as transformers 5 holds
/// them: experts.gate_up_proj [E, 2I, h] with rows [gate | up], experts.down_proj [E, h, I].
/// Mixtral's block (block_sparse_moe, experts w1, w3, w2) takes transformers 5's own names, mlp.
std::vector<std::pair<std::string, at::Tensor>> packedExperts(const Weights& w,
                                                              const json& config) {
    std::vector<std::pair<std::string, at::Tensor>> packed;
    const std::string mixtralBlock = ".block_sparse_moe.";
    for (const auto& [n, t] : w) {
        if (n.find(".experts.") != std::string::npos)
            continue;
        std::string out = n;
        if (const size_t at = out.find(mixtralBlock); at != std::string::npos)
            out.replace(at, mixtralBlock.size(), ".mlp.");
        packed.emplace_back(out, t.to(at::kFloat));
    }
    const int64_t layers = config["num_hidden_layers"];
    const int64_t experts = config.contains("n_routed_experts") ? config["n_routed_experts"]
                                                                : config["num_local_experts"];
    for (int64_t l = 0; l < layers; ++l)
        for (const bool mixtral : {false, true}) {
            const std::string layer = "model.layers." + std::to_string(l) + ".";
            const std::string in = layer + (mixtral ? "block_sparse_moe" : "mlp") + ".experts.";
            const char* gate = mixtral ? "w1.weight" : "gate_proj.weight";
            if (!w.count(in + "0." + gate))
                continue;
            std::vector<at::Tensor> gateUp, down;
            for (int64_t x = 0; x < experts; ++x) {
                const std::string n = in + std::to_string(x) + ".";
                gateUp.push_back(at::cat(
                    {w.at(n + gate), w.at(n + (mixtral ? "w3.weight" : "up_proj.weight"))}));
                down.push_back(w.at(n + (mixtral ? "w2.weight" : "down_proj.weight")));
            }
            packed.emplace_back(layer + "mlp.experts.gate_up_proj",
                                at::stack(gateUp).to(at::kFloat));
            packed.emplace_back(layer + "mlp.experts.down_proj", at::stack(down).to(at::kFloat));
        }
    return packed;
}

/// The v4 form of a v5 config: rope_theta and rope_scaling beside it, torch_dtype.
json v4Form(json c) {
    json r = c["rope_parameters"];
    c.erase("rope_parameters");
    if (r.contains("full_attention")) { // per layer type: the sliding layers' is plain
        r = r["full_attention"];
        r.erase("truncate"); // (which the nested form ignores)
    }
    c["rope_theta"] = r["rope_theta"];
    r.erase("rope_theta");
    r.erase("partial_rotary_factor");
    if (r.value("rope_type", "default") == "default")
        c["rope_scaling"] = nullptr;
    else
        c["rope_scaling"] = r;
    c["torch_dtype"] = c["dtype"];
    c.erase("dtype");
    if (c.contains("attn_temperature_tuning")) // Llama 4: 4.x's default, a number
        c["attn_temperature_tuning"] = 4;
    return c;
}

} // namespace

class TestModelFamilies2026 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    void followsTransformers_data() {
        QTest::addColumn<QString>("arch");
        for (const char* a :
             {"glm4", "glm4_moe", "granite", "mixtral", "minimax_m2", "olmo3", "llama4_text"})
            QTest::newRow(a) << QString::fromLatin1(a);
    }

    void followsTransformers() {
        QFETCH(QString, arch);
        const std::string a = arch.toStdString();
        const json config = configOf(a);
        const QString dir = m_dir.filePath(arch);
        const Weights w = makeModel(dir, config, 17, a == "granite" ? 0.05 : 0.1);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, a);
        const std::vector<int64_t> ids = randomIds(20, 97, 5);
        const RefOut ref = reference(a, config, w, ids);
        VERIFY_CLOSE(model->logits(ids), ref.logits, 1e-4, arch + " logits");
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        for (int64_t l = 0; l < model->config().nLayers; ++l) {
            const QString where = arch + QStringLiteral(" layer %1 ").arg(l);
            VERIFY_CLOSE(e.q[l], ref.q[static_cast<size_t>(l)], 1e-4, where + "q");
            VERIFY_CLOSE(e.k[l], ref.k[static_cast<size_t>(l)], 1e-4, where + "k");
            VERIFY_CLOSE(e.v[l], ref.v[static_cast<size_t>(l)], 1e-4, where + "v");
        }
        // Greedy decoding with the cache from 7 tokens crosses windows and chunks of 6.
        const std::vector<int64_t> head(ids.begin(), ids.begin() + 7);
        const model::Generation gen = model->generate(head, 10, {}, /*stopAtEos=*/false);
        std::vector<int64_t> seq = head;
        seq.insert(seq.end(), gen.newIds.begin(), gen.newIds.end());
        const RefOut chain = reference(a, config, w, seq);
        for (size_t i = 0; i < gen.stepLogits.size(); ++i)
            VERIFY_CLOSE(gen.stepLogits[i], chain.logits[6 + static_cast<int64_t>(i)], 1e-4,
                         arch + QStringLiteral(" generation step %1").arg(i));
        // The same checkpoint under another form of its config gives the same model: the v4
        // form, and for Mixtral num_experts (MixtralConfig's attribute_map name of the count).
        const auto sameModel = [&](const QString& form, const json& c) {
            const QString d = m_dir.filePath(arch + QStringLiteral("-") + form);
            QDir().mkpath(d);
            QVERIFY(sparqlab::test::writeFile(d + "/config.json",
                                              QByteArray::fromStdString(c.dump(1))));
            QVERIFY(QFile::copy(dir + "/model.safetensors", d + "/model.safetensors"));
            QVERIFY2(model::Model::open(d.toStdString())->logits(ids).equal(model->logits(ids)),
                     qPrintable(arch + " from its " + form + " config"));
        };
        sameModel(QStringLiteral("v4"), v4Form(config));
        if (a == "mixtral") {
            json alias = config;
            alias["num_experts"] = alias["num_local_experts"];
            alias.erase("num_local_experts");
            sameModel(QStringLiteral("num_experts"), alias);
        }
        if (a == "minimax_m2") { // partial_rotary_factor, where given, wins over rotary_dim
            json top = config;
            top["rotary_dim"] = 4;
            top["partial_rotary_factor"] = 0.5;
            sameModel(QStringLiteral("factor"), top);
            json nested = config;
            nested["rotary_dim"] = 12;
            nested["rope_parameters"]["partial_rotary_factor"] = 0.5;
            sameModel(QStringLiteral("nested-factor"), nested);
            // use_routing_bias false: no correction bias in the checkpoint, the plain top k of σ,
            // as the reference gives it with the bias 0.
            json plain = config;
            plain["use_routing_bias"] = false;
            Weights zero = w;
            std::vector<std::pair<std::string, at::Tensor>> kept;
            for (auto& [n, t] : zero)
                if (n.find("e_score_correction_bias") != std::string::npos)
                    t = at::zeros_like(t);
                else
                    kept.emplace_back(n, t.to(at::kFloat));
            const QString d = m_dir.filePath(arch + QStringLiteral("-no-bias"));
            QDir().mkpath(d);
            QVERIFY(sparqlab::test::writeFile(d + "/config.json",
                                              QByteArray::fromStdString(plain.dump(1))));
            model::writeSafetensors((d + "/model.safetensors").toStdString(), kept);
            VERIFY_CLOSE(model::Model::open(d.toStdString())->logits(ids),
                         reference(a, config, zero, ids).logits, 1e-4, arch + " without a bias");
        }
        // The routed experts packed as transformers 5 holds them (glm4_moe's in its packed
        // form; Mixtral's and MiniMax-M2's as save_pretrained writes them with
        // save_original_format false, under mlp).
        if (a == "glm4_moe" || a == "mixtral" || a == "minimax_m2") {
            const QString d = m_dir.filePath(arch + QStringLiteral("-packed"));
            QDir().mkpath(d);
            QVERIFY(sparqlab::test::writeFile(d + "/config.json",
                                              QByteArray::fromStdString(config.dump(1))));
            model::writeSafetensors((d + "/model.safetensors").toStdString(),
                                    packedExperts(w, config));
            auto m = model::Model::open(d.toStdString());
            QCOMPARE(m->config().moe.layout, model::ExpertLayout::FusedRows);
            QCOMPARE(m->config().moe.module, std::string("mlp"));
            VERIFY_CLOSE(m->logits(ids), ref.logits, 1e-4, arch + " logits, packed experts");
        }
    }

    /// MiniMax-M3: logits, every layer's q, k and v, and greedy steps through the cache (the
    /// indexer's keys cached beside K and V) against the float64 reference; the hub's config
    /// (sparse_attention_config, moe_layer_freq) and its vision-language folder give the same
    /// model.
    void miniMaxM3FollowsTransformers() {
        const json config = m3Config();
        const QString dir = m_dir.filePath(QStringLiteral("minimax_m3"));
        const Weights w = makeModel(dir, config, 23);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("minimax_m3_vl"));
        QVERIFY(model->config().indexer.blocks());
        // 22 positions: 6 blocks, the last one partial.
        const std::vector<int64_t> ids = randomIds(22, 97, 5);
        const RefOut ref = referenceM3(config, w, ids);
        // The selection bites: keeping every block gives other logits.
        json all = config;
        all["index_topk_blocks"] = 6;
        const double bite =
            (referenceM3(all, w, ids).logits - ref.logits).abs().max().item<double>();
        QVERIFY2(bite > 1e-2, qPrintable(QStringLiteral("the selection changes the logits by "
                                                        "only %1")
                                             .arg(bite)));
        VERIFY_CLOSE(model->logits(ids), ref.logits, 1e-4, "MiniMax-M3 logits");
        // The indexer method at k keys keeps ⌈k / 4⌉ blocks: 3 (k = 9, 12) is the model's own
        // selection, 6 (k = 24) every block; the dense first layer stays dense.
        attention::AttentionConfig byIndexer;
        byIndexer.method = attention::Method::Indexer;
        for (const int64_t k : {9, 12}) {
            byIndexer.k = k;
            VERIFY_CLOSE(model->logits(ids, byIndexer), ref.logits, 1e-4,
                         QStringLiteral("MiniMax-M3, the indexer method at k = %1").arg(k));
        }
        byIndexer.k = 24;
        VERIFY_CLOSE(model->logits(ids, byIndexer), referenceM3(all, w, ids).logits, 1e-4,
                     "MiniMax-M3, the indexer method keeping every block");
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        // In one pass, and in chunks of 5 queries against the keys so far (the indexer's keys
        // cached between them, chunks that start inside a block).
        const model::CaptureExample chunked =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/5);
        for (const model::CaptureExample* c : {&e, &chunked})
            for (int64_t l = 0; l < 3; ++l) {
                const QString where =
                    QStringLiteral("MiniMax-M3 layer %1%2 ").arg(l).arg(c == &e ? "" : ", chunked");
                VERIFY_CLOSE(c->q[l], ref.q[static_cast<size_t>(l)], 1e-4, where + "q");
                VERIFY_CLOSE(c->k[l], ref.k[static_cast<size_t>(l)], 1e-4, where + "k");
                VERIFY_CLOSE(c->v[l], ref.v[static_cast<size_t>(l)], 1e-4, where + "v");
            }
        // Greedy decoding with the cache from 7 tokens: the steps cross blocks of 4.
        const std::vector<int64_t> head(ids.begin(), ids.begin() + 7);
        const model::Generation gen = model->generate(head, 10, {}, /*stopAtEos=*/false);
        std::vector<int64_t> seq = head;
        seq.insert(seq.end(), gen.newIds.begin(), gen.newIds.end());
        const RefOut chain = referenceM3(config, w, seq);
        for (size_t i = 0; i < gen.stepLogits.size(); ++i)
            VERIFY_CLOSE(gen.stepLogits[i], chain.logits[6 + static_cast<int64_t>(i)], 1e-4,
                         QStringLiteral("MiniMax-M3 generation step %1").arg(i));
        // A dense prefill leaves H2O the attention the model paid (SPARQ.md §4.4.1: summed over
        // the queries, averaged over a KV head's query heads): on the sparse layers, that of its
        // own selection. The prefill observes all but the last token.
        const std::vector<int64_t> head21(ids.begin(), ids.end() - 1);
        const RefOut headRef = referenceM3(config, w, head21);
        const auto prefill = model->prefillDense(ids, 8);
        for (int64_t l = 0; l < 3; ++l) {
            const at::Tensor acc = prefill->prefillStates()[static_cast<size_t>(l)]
                                       .methods.at(attention::Method::H2O)
                                       ->tensors()
                                       .at("acc");
            const int64_t T = static_cast<int64_t>(head21.size());
            const at::Tensor want = headRef.probs[static_cast<size_t>(l)]
                                        .view({2, 4, T, T})
                                        .mean(1)
                                        .sum(1)
                                        .unsqueeze(0);
            VERIFY_CLOSE(acc.narrow(-1, 0, T), want, 1e-4,
                         QStringLiteral("MiniMax-M3 H2O's accumulated attention, layer %1").arg(l));
        }
        // The hub's keys: the indexer's and the sparse layers' in sparse_attention_config, the
        // MLPs' in moe_layer_freq.
        json hub = config;
        for (const char* k : {"layer_types", "mlp_layer_types", "index_n_heads", "index_head_dim",
                              "index_block_size", "index_topk_blocks", "index_local_blocks"})
            hub.erase(k);
        hub["moe_layer_freq"] = {0, 1, 1};
        hub["sparse_attention_config"] = {{"sparse_attention_freq", {0, 1, 1}},
                                          {"sparse_num_index_heads", 4},
                                          {"sparse_index_dim", 16},
                                          {"sparse_block_size", 4},
                                          {"sparse_topk_blocks", 3},
                                          {"sparse_local_block", 2},
                                          {"sparse_init_block", 0}};
        hub["index_topk_blocks"] = 6; // the nested key wins (MiniMaxM3VLTextConfig)
        const QString hubDir = m_dir.filePath(QStringLiteral("minimax_m3-hub"));
        QDir().mkpath(hubDir);
        QVERIFY(sparqlab::test::writeFile(hubDir + "/config.json",
                                          QByteArray::fromStdString(hub.dump(1))));
        QVERIFY(QFile::copy(dir + "/model.safetensors", hubDir + "/model.safetensors"));
        QVERIFY(model::Model::open(hubDir.toStdString())->logits(ids).equal(model->logits(ids)));
        // The vision-language folder: the text config in text_config (the hub bundles it as
        // minimax_m2's), the weights under language_model., a vision tower not read.
        json text = config;
        text.erase("architectures");
        text["model_type"] = "minimax_m2";
        const json vl{{"architectures", {"MiniMaxM3VLForConditionalGeneration"}},
                      {"model_type", "minimax_m3_vl"},
                      {"text_config", text},
                      {"vision_config", {{"hidden_size", 32}}}};
        const QString vlDir = m_dir.filePath(QStringLiteral("minimax_m3-vl"));
        QDir().mkpath(vlDir);
        QVERIFY(sparqlab::test::writeFile(vlDir + "/config.json",
                                          QByteArray::fromStdString(vl.dump(1))));
        std::vector<std::pair<std::string, at::Tensor>> prefixed;
        for (const auto& [n, t] : w)
            prefixed.emplace_back("language_model." + n, t.to(at::kFloat));
        prefixed.emplace_back("vision_tower.patch_embedding.weight", at::zeros({4, 4}));
        model::writeSafetensors((vlDir + "/model.safetensors").toStdString(), prefixed);
        QVERIFY(model::Model::open(vlDir.toStdString())->logits(ids).equal(model->logits(ids)));
    }

    /// MiniMax-M3 in a capture (docs/learned-sparse-and-hybrid.md §8): each sparse layer's block
    /// scores per indexer head are the reference's, NaN after the query and on the full-attention
    /// layer, in one pass or in chunks of 5; a version 5 file keeps them; the indexer method on the
    /// capture at the model's 3 blocks is the reference's attention on every layer; at k = 4 (one
    /// block, fewer than the 2 local ones) each query keeps its own block only.
    void miniMaxM3InACapture() {
        const json config = m3Config();
        const QString dir = m_dir.filePath(QStringLiteral("minimax_m3-capture"));
        const Weights w = makeModel(dir, config, 23);
        auto model = model::Model::open(dir.toStdString());
        const std::vector<int64_t> ids = randomIds(22, 97, 5);
        const RefOut ref = referenceM3(config, w, ids);
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.indexBlockSize, int64_t{4});
        QCOMPARE(info.indexLocalBlocks, int64_t{2});
        QCOMPARE(info.indexTopKeys(), int64_t{12});
        QCOMPARE(info.layerIndexed, (std::vector<int64_t>{0, 1, 1}));
        QCOMPARE(info.formatVersion(), int64_t{5});
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        const model::CaptureExample chunked =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/5);
        QCOMPARE(e.indexScores.sizes().vec(), (std::vector<int64_t>{3, 4, 22, 6}));
        QVERIFY(at::isnan(e.indexScores[0]).all().item<bool>()); // full attention: no indexer
        for (const model::CaptureExample* c : {&e, &chunked})
            for (const int64_t l : {1, 2}) {
                const at::Tensor want = ref.blockScores.at(l), seen = at::isfinite(want);
                QVERIFY(at::isnan(c->indexScores[l]).equal(seen.logical_not()));
                // Within 2e-5 of the largest score (about 50; float32 through the layers).
                const at::Tensor kept = want.masked_select(seen);
                VERIFY_CLOSE(c->indexScores[l].masked_select(seen), kept,
                             2e-5 * kept.abs().max().item<double>(),
                             QStringLiteral("block scores, layer %1").arg(l));
            }
        const std::string path = m_dir.filePath(QStringLiteral("m3.h5")).toStdString();
        capture::CaptureWriter writer(path, info);
        writer.add(e);
        writer.finish();
        const capture::CaptureReader reader(path);
        QCOMPARE(reader.info().layerIndexed, info.layerIndexed);
        QVERIFY(at::allclose(reader.read(0).indexScores, e.indexScores, 0, 0, /*nan=*/true));
        QVERIFY(at::allclose(reader.readLayer(0, 2).indexScores[0], e.indexScores[2], 0, 0, true));
        // The indexer method over the captured q, K and V of each layer, every query a step.
        auto run = [&](int64_t l, int64_t k) {
            attention::AttentionConfig c;
            c.method = attention::Method::Indexer;
            c.k = k;
            attention::CausalInputs in;
            in.q = e.q[l].unsqueeze(0);
            in.k = e.k[l].unsqueeze(0);
            in.v = e.v[l].unsqueeze(0);
            for (int64_t t = 0; t < 22; ++t)
                in.positions.push_back(t);
            in.extra["index_scores"] = e.indexScoresByPosition(l);
            return attention::runCausal(in, info.layerConfig(l, c));
        };
        for (int64_t l = 0; l < 3; ++l) {
            const at::Tensor want =
                at::matmul(ref.probs[static_cast<size_t>(l)],
                           ref.v[static_cast<size_t>(l)].repeat_interleave(4, 0));
            VERIFY_CLOSE(run(l, 12).y[0], want, 1e-4,
                         QStringLiteral("the indexer method on the capture, layer %1").arg(l));
        }
        const at::Tensor own = at::arange(22, at::kLong).remainder(4) + 1; // keys of its block
        QVERIFY(run(2, 4).count[0].equal(own.expand({8, 22})));
    }
};

QTEST_GUILESS_MAIN(TestModelFamilies2026)
#include "test_model_families_2026.moc"
