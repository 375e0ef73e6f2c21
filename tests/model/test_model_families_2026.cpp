// GLM-4, GLM-4.5, Granite, Mixtral, MiniMax-M2, OLMo 3, EXAONE 4.0 and Llama 4 (text) against a
// reference forward written here in float64, line by line from transformers 5.x's modelling code
// (Glm4ForCausalLM, Glm4MoeForCausalLM, GraniteForCausalLM, MixtralForCausalLM,
// MiniMaxM2ForCausalLM, Olmo3ForCausalLM, Exaone4ForCausalLM, Llama4ForCausalLM; eager attention
// and experts):
// partial interleaved RoPE and four norms, partial rotate-half RoPE with per-head q/k norms and
// DeepSeek's group-limited sigmoid router, the four multipliers, experts with a softmax router
// under a sliding window, q/k norms over the whole projections with rotary_dim and a sigmoid
// router whose correction bias sits beside it, a RoPE per layer type with YaRN, chunked and NoPE
// layers with temperature tuning, the L2 q/k norm, a sigmoid top-1 router scaling the expert's
// input and a shared expert (MiniMax-M3: test_model_minimax_m3). Small models with peaked attention
// whose weights the test draws; the config files are the v5 form (rope_parameters), and each is
// read in its v4 form too.

#include "float64_reference.h"
#include "test_support.h"

#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>
#include <torch/types.h>

#include <nlohmann/json.hpp>

#include <cmath>

using namespace sparqlab;
using namespace sparqlab::test::f64;

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

namespace {

// ---- the reference, float64 -----------------------------------------------------------------

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
        const bool postNorms = arch == "olmo3" || arch == "exaone4"; // (Olmo2DecoderLayer)
        const at::Tensor in = postNorms ? x : norm(x, "input_layernorm");
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
        if (arch == "glm4_moe" || arch == "exaone4") { // per head, before RoPE
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
        } else if (arch == "exaone4") { // a window: RoPE on the sliding layers only (global NoPE)
            const bool sliding = c["layer_types"][l] == "sliding_attention";
            if (sliding || c["sliding_window"].is_null()) {
                const at::Tensor inv = defaultInv(rp["rope_theta"], D);
                q = rope(q, inv, D, true);
                k = rope(k, inv, D, true);
            }
            window = sliding ? c["sliding_window"].get<int64_t>() : 0;
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
        } else if (postNorms) {
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
    if (arch == "exaone4") { // EXAONE 4.0 32B's pattern in small: LLLG, a window of 6
        json c = base("Exaone4ForCausalLM", "exaone4", 4);
        c["sliding_window"] = 6;
        c["sliding_window_pattern"] = 4;
        c["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                            "full_attention"};
        c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
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
        for (const char* a : {"glm4", "glm4_moe", "granite", "mixtral", "minimax_m2", "olmo3",
                              "exaone4", "llama4_text"})
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
        if (a == "exaone4") { // the pattern as a number, as EXAONE's letters, and by default
            json pattern = config;
            pattern.erase("layer_types");
            sameModel(QStringLiteral("pattern"), pattern);
            pattern["sliding_window_pattern"] = "LLLG";
            sameModel(QStringLiteral("letters"), pattern);
            pattern.erase("sliding_window_pattern");
            sameModel(QStringLiteral("default-pattern"), pattern);
        }
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

    /// EXAONE 4.0 without a window (the 1.2B's sliding_window null): every layer full, every one
    /// with RoPE; with one, the full layers are NoPE (what a capture records); bad patterns are
    /// one line naming the key.
    void exaone4WindowAndNoPE() {
        json c = configOf("exaone4");
        const model::ModelConfig windowed = model::parseModelConfig(c.dump(), "c.json");
        QCOMPARE(windowed.nopeLayers(), (std::vector<int64_t>{3}));
        QCOMPARE(windowed.layerWindow, (std::vector<int64_t>{6, 6, 6, 0}));
        QVERIFY(windowed.qkNorm == model::QkNorm::PerHead);
        json biased = c; // (Exaone4Attention's projections have no bias, whatever the key says)
        biased["attention_bias"] = true;
        const model::ModelConfig unbiased = model::parseModelConfig(biased.dump(), "c.json");
        QVERIFY(!unbiased.qkvBias && !unbiased.outBias);
        c["sliding_window"] = nullptr;
        c["layer_types"] = std::vector<std::string>(4, "full_attention");
        const QString dir = m_dir.filePath(QStringLiteral("exaone4-global"));
        const Weights w = makeModel(dir, c, 19);
        auto model = model::Model::open(dir.toStdString());
        QVERIFY(model->config().nopeLayers().empty());
        QVERIFY(model->config().layerWindow.empty());
        const std::vector<int64_t> ids = randomIds(20, 97, 6);
        VERIFY_CLOSE(model->logits(ids), reference("exaone4", c, w, ids).logits, 1e-4,
                     QStringLiteral("exaone4 without a window"));
        c.erase("layer_types"); // (transformers divides by a zero pattern here; every layer full)
        QVERIFY(model::parseModelConfig(c.dump(), "c.json").nopeLayers().empty());
        json bad = configOf("exaone4");
        bad.erase("layer_types");
        // EXAONE's letters over 6 layers: LLLG, then L and the last layer full (LLLGLG); the
        // number 4 gives LLLGLL, as Exaone4Config's formula does.
        bad["num_hidden_layers"] = 6;
        bad["sliding_window_pattern"] = "LLLG";
        QCOMPARE(model::parseModelConfig(bad.dump(), "c.json").nopeLayers(),
                 (std::vector<int64_t>{3, 5}));
        bad["sliding_window_pattern"] = 4;
        QCOMPARE(model::parseModelConfig(bad.dump(), "c.json").nopeLayers(),
                 (std::vector<int64_t>{3}));
        bad["num_hidden_layers"] = 4;
        verifyBadConfigs(
            bad, "exaone4/config.json",
            {{[](json& j) { j["sliding_window"] = 0; }, "sliding_window"},
             {[](json& j) { j["sliding_window_pattern"] = "LLX"; }, "sliding_window_pattern"},
             {[](json& j) { j["sliding_window_pattern"] = 0; }, "sliding_window_pattern"},
             {[](json& j) { j["sliding_window_pattern"] = ""; }, "sliding_window_pattern"}});
    }

    /// GLM-4.7-Flash is DeepSeek-V3's block (Glm4MoeLiteAttention is DeepseekV3Attention, its
    /// experts routed as DeepSeek-V3's): a drawn model read as glm4_moe_lite computes exactly
    /// what the same weights read as deepseek_v3 compute (test_model_hf3 checks those against
    /// transformers). Which layers are dense is mlp_layer_types, not first_k_dense_replace;
    /// Glm4MoeLiteConfig's defaults; a bad list is one line naming the key.
    void glm47FlashIsDeepseekV3() {
        json lite = {{"architectures", {"Glm4MoeLiteForCausalLM"}},
                     {"model_type", "glm4_moe_lite"},
                     {"vocab_size", 97},
                     {"hidden_size", 64},
                     {"intermediate_size", 96},
                     {"moe_intermediate_size", 32},
                     {"num_hidden_layers", 3},
                     {"num_attention_heads", 4},
                     {"num_key_value_heads", 4},
                     {"q_lora_rank", 32},
                     {"kv_lora_rank", 16},
                     {"qk_nope_head_dim", 16},
                     {"qk_rope_head_dim", 8},
                     {"v_head_dim", 12},
                     {"n_routed_experts", 8},
                     {"num_experts_per_tok", 2},
                     {"n_group", 2},
                     {"topk_group", 1},
                     {"n_shared_experts", 1},
                     {"routed_scaling_factor", 1.8},
                     {"mlp_layer_types", {"dense", "sparse", "sparse"}},
                     {"first_k_dense_replace", 2}, // (not a key of this class: not read)
                     {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}},
                     {"rms_norm_eps", 1e-5},
                     {"max_position_embeddings", 256},
                     {"tie_word_embeddings", false},
                     {"dtype", "float32"}};
        const QString dir = m_dir.filePath(QStringLiteral("glm47-flash"));
        makeModel(dir, lite, 23);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("glm4_moe_lite"));
        QCOMPARE(model->config().moe.layers, (std::vector<bool>{false, true, true}));
        json v3 = lite;
        v3["architectures"] = {"DeepseekV3ForCausalLM"};
        v3["model_type"] = "deepseek_v3";
        v3["first_k_dense_replace"] = 1;
        v3.erase("mlp_layer_types");
        const QString as = m_dir.filePath(QStringLiteral("glm47-flash-as-v3"));
        QVERIFY(QDir().mkpath(as));
        test::writeFile(as + "/config.json", QByteArray::fromStdString(v3.dump(1)));
        QVERIFY(QFile::link(dir + "/model.safetensors", as + "/model.safetensors"));
        const std::vector<int64_t> ids = randomIds(30, 97, 8);
        QVERIFY(at::equal(model->logits(ids), model::Model::open(as.toStdString())->logits(ids)));
        // A dense layer after a sparse one, which first_k_dense_replace cannot say.
        lite["mlp_layer_types"] = {"dense", "sparse", "dense"};
        QCOMPARE(model::parseModelConfig(lite.dump(), "c.json").moe.layers,
                 (std::vector<bool>{false, true, false}));
        const model::ModelConfig d = model::parseModelConfig(
            json{{"architectures", {"Glm4MoeLiteForCausalLM"}}}.dump(), "c.json");
        QCOMPARE(d.nLayers, int64_t{47});
        QCOMPARE(d.headDim, int64_t{256}); // 192 + 64
        QCOMPARE(d.valueDim(), int64_t{256});
        QCOMPARE(d.rotaryDim, int64_t{64});
        QCOMPARE(d.mla.qLoraRank, int64_t{768});
        QCOMPARE(d.mla.kvLoraRank, int64_t{512});
        QCOMPARE(d.moe.experts, int64_t{64});
        QCOMPARE(d.moe.topK, int64_t{4});
        QCOMPARE(d.moe.routedScale, 1.8);
        QCOMPARE(d.vocabSize, int64_t{154880});
        QVERIFY(!d.moe.layers[0] && d.moe.layers[1] && d.moe.layers[46]);
        verifyBadConfigs(lite, "glm4_moe_lite/config.json",
                         {{[](json& j) {
                               j["mlp_layer_types"] = {"dense", "sparse"};
                           },
                           "mlp_layer_types"},
                          {[](json& j) { j["mlp_layer_types"][1] = "moe"; }, "mlp_layer_types"}});
    }
};

QTEST_GUILESS_MAIN(TestModelFamilies2026)
#include "test_model_families_2026.moc"
