#pragma once
// The float64 reference of DeepSeek-V4 (DeepseekV4ForCausalLM, transformers'
// modeling_deepseek_v4.py) and its small test model, shared by test_model_deepseek_v4 (the model)
// and test_deepseek_v4_entries (its captures' entries in the lab, attend, stats and overlap).

#include "float64_reference.h"

#include <ATen/ATen.h>
#include <QString>

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace sparqlab::test::v4 {

using namespace sparqlab::test::f64;

/// The reference's parts, each what transformers does, so that a test can show that it matters.
struct Knobs {
    bool compressed = true;  ///< the compressed entries beside the window
    bool indexer = true;     ///< CSA: the indexer's top k (false: every ready entry)
    bool clamp = true;       ///< the routed experts' swiglu_limit
    bool sinks = true;       ///< the sink per head
    bool undoRope = true;    ///< the output's rotation undone
    bool hashRouting = true; ///< the hash layers route by their table (false: by the router)
    bool sinkhorn = true;    ///< comb made doubly stochastic (false: the softmax alone)
};

/// Interleaved RoPE of x [..., T, W] on its last `rot` dims, row t at position pos[t], by
/// `sign`·angle (−1: the rotation undone).
inline at::Tensor ropeTailRef(const at::Tensor& x, const at::Tensor& inv,
                              const std::vector<double>& pos, int64_t rot, double sign = 1.0) {
    const int64_t W = x.size(-1), T = x.size(-2);
    at::Tensor out = x.clone();
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < rot / 2; ++i) {
            const double a = sign * pos[static_cast<size_t>(t)] * inv[i].item<double>();
            const int64_t p = W - rot + 2 * i, q = p + 1;
            const at::Tensor xp = x.select(-2, t).select(-1, p), xq = x.select(-2, t).select(-1, q);
            out.select(-2, t).select(-1, p).copy_(xp * std::cos(a) - xq * std::sin(a));
            out.select(-2, t).select(-1, q).copy_(xq * std::cos(a) + xp * std::sin(a));
        }
    return out;
}

inline std::vector<double> positions(int64_t n, int64_t stride = 1) {
    std::vector<double> p;
    for (int64_t i = 0; i < n; ++i)
        p.push_back(static_cast<double>(i * stride));
    return p;
}

/// The compressor's entries of x [T, h] (weights under `p`): for window w of `rate` positions,
/// per channel softmax over the pool's (gate + position_bias[j]) weighing kv; with two series the
/// pool is window w − 1's first W channels and window w's last W (none before window 0); then
/// kv_norm and RoPE at w·rate.
inline at::Tensor compressRef(const Weights& w, const std::string& p, const at::Tensor& x,
                              int64_t rate, int64_t series, int64_t W, const at::Tensor& inv,
                              int64_t rot, double eps) {
    const int64_t T = x.size(0), C = T / rate;
    const at::Tensor kv = at::linear(x, w.at(p + "kv_proj.weight"));
    const at::Tensor bias = w.at(p + "position_bias");
    at::Tensor gate = at::linear(x, w.at(p + "gate_proj.weight"));
    for (int64_t t = 0; t < T; ++t)
        gate[t] += bias[t % rate];
    at::Tensor out = at::zeros({C, W}, x.options());
    for (int64_t c = 0; c < C; ++c) {
        std::vector<at::Tensor> ks, gs;
        for (int64_t j = 0; j < rate; ++j) {
            const int64_t own = c * rate + j, prev = (c - 1) * rate + j;
            if (series == 2 && c > 0) {
                ks.push_back(kv[prev].narrow(0, 0, W));
                gs.push_back(gate[prev].narrow(0, 0, W));
            }
            ks.push_back(kv[own].narrow(0, (series - 1) * W, W));
            gs.push_back(gate[own].narrow(0, (series - 1) * W, W));
        }
        const at::Tensor k = at::stack(ks), g = at::softmax(at::stack(gs), 0);
        out[c] = (k * g).sum(0);
    }
    return ropeTailRef(rmsNorm(out, w.at(p + "kv_norm.weight"), eps), inv, positions(C, rate), rot);
}

/// The model's shape as the reference reads it.
struct V4 {
    int64_t h, H, D, rot, n, window, qlr, G, orank, Hi, Di, topK, E, k;
    double eps, hcEps, scale, limit;
    int64_t iters;
    std::vector<std::string> kinds, mlpKinds;
    int64_t csaRate, hcaRate;
    at::Tensor mainInv, compressInv;
};

inline V4 shapeOf(const json& c) {
    V4 v;
    v.h = c["hidden_size"];
    v.H = c["num_attention_heads"];
    v.D = c["head_dim"];
    v.rot = static_cast<int64_t>(v.D * c["partial_rotary_factor"].get<double>());
    v.n = c["hc_mult"];
    v.window = c["sliding_window"];
    v.qlr = c["q_lora_rank"];
    v.G = c["o_groups"];
    v.orank = c["o_lora_rank"];
    v.Hi = c["index_n_heads"];
    v.Di = c["index_head_dim"];
    v.topK = c["index_topk"];
    v.E = c["n_routed_experts"];
    v.k = c["num_experts_per_tok"];
    v.eps = c["rms_norm_eps"];
    v.hcEps = c["hc_eps"];
    v.iters = c["hc_sinkhorn_iters"];
    v.scale = c["routed_scaling_factor"];
    v.limit = c["swiglu_limit"];
    v.kinds = c["layer_types"].get<std::vector<std::string>>();
    v.mlpKinds = c["mlp_layer_types"].get<std::vector<std::string>>();
    v.csaRate = c["compress_rates"]["compressed_sparse_attention"];
    v.hcaRate = c["compress_rates"]["heavily_compressed_attention"];
    const json& r = c["rope_parameters"];
    v.mainInv = defaultInv(r["main"]["rope_theta"].get<double>(), v.rot);
    const json& cp = r["compress"];
    v.compressInv = cp.value("rope_type", "default") == "yarn"
                        ? yarnInv(cp["rope_theta"].get<double>(), v.rot, cp["factor"].get<double>(),
                                  cp["original_max_position_embeddings"].get<double>(),
                                  cp.value("beta_fast", 32.0), cp.value("beta_slow", 1.0))
                        : defaultInv(cp["rope_theta"].get<double>(), v.rot);
    return v;
}

/// DeepseekV4HyperConnection on the streams X [T, n, h]: pre, post and comb from the streams
/// flattened and RMS-normalised; comb's softmax made doubly stochastic by Sinkhorn-Knopp.
struct Mix {
    at::Tensor post, comb, collapsed;
};
inline Mix hyperRef(const V4& v, const Weights& w, const std::string& p, const at::Tensor& X,
                    const Knobs& knobs) {
    const int64_t T = X.size(0), n = v.n;
    const at::Tensor flat = X.reshape({T, n * v.h});
    const at::Tensor mix =
        at::linear(flat * at::rsqrt(flat.pow(2).mean(-1, true) + v.eps), w.at(p + "fn"));
    const at::Tensor b = w.at(p + "base"), s = w.at(p + "scale");
    const at::Tensor pre = at::sigmoid(mix.narrow(1, 0, n) * s[0] + b.narrow(0, 0, n)) + v.hcEps;
    Mix m;
    m.post = 2 * at::sigmoid(mix.narrow(1, n, n) * s[1] + b.narrow(0, n, n));
    at::Tensor comb = at::softmax(mix.narrow(1, 2 * n, n * n).view({T, n, n}) * s[2] +
                                      b.narrow(0, 2 * n, n * n).view({n, n}),
                                  -1) +
                      v.hcEps;
    if (knobs.sinkhorn) {
        comb = comb / (comb.sum(1, true) + v.hcEps);
        for (int64_t i = 1; i < v.iters; ++i) {
            comb = comb / (comb.sum(2, true) + v.hcEps);
            comb = comb / (comb.sum(1, true) + v.hcEps);
        }
    }
    m.comb = comb;
    m.collapsed = (pre.unsqueeze(-1) * X).sum(1);
    return m;
}

/// X after a sublayer's output f [T, h]: X'[t, k] = post[t, k]·f[t] + Σ_j comb[t, j, k]·X[t, j].
inline at::Tensor combineRef(const Mix& m, const at::Tensor& X, const at::Tensor& f) {
    return m.post.unsqueeze(-1) * f.unsqueeze(1) + at::matmul(m.comb.transpose(1, 2), X);
}

/// DeepseekV4Attention of layer l on x [T, h] (after input_layernorm).
inline at::Tensor attentionRef(const V4& v, const Weights& w, int64_t l, const at::Tensor& x,
                               RefOut& out, const Knobs& knobs) {
    const std::string a = "model.layers." + std::to_string(l) + ".self_attn.";
    auto W = [&](const std::string& n) { return w.at(a + n); };
    const int64_t T = x.size(0), H = v.H, D = v.D;
    const std::string kind = v.kinds[static_cast<size_t>(l)];
    const bool csa = kind == "compressed_sparse_attention";
    const bool hca = kind == "heavily_compressed_attention";
    const at::Tensor& inv = csa || hca ? v.compressInv : v.mainInv;
    const std::vector<double> pos = positions(T);
    const at::Tensor qr = rmsNorm(at::linear(x, W("q_a_proj.weight")), W("q_a_norm.weight"), v.eps);
    at::Tensor q = at::linear(qr, W("q_b_proj.weight")).view({T, H, D}).transpose(0, 1);
    q = ropeTailRef(q * at::rsqrt(q.pow(2).mean(-1, true) + v.eps), inv, pos, v.rot);
    const at::Tensor kv = ropeTailRef(
        rmsNorm(at::linear(x, W("kv_proj.weight")), W("kv_norm.weight"), v.eps), inv, pos, v.rot);
    out.q.push_back(q);
    out.k.push_back(kv.unsqueeze(0));
    out.v.push_back(kv.unsqueeze(0));
    at::Tensor keys = kv;
    at::Tensor mask = at::zeros({T, T}, x.options());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < T; ++j)
            if (j > t || t - j >= v.window)
                mask[t][j] = -kInf;
    if ((csa || hca) && knobs.compressed) {
        const int64_t rate = csa ? v.csaRate : v.hcaRate;
        const at::Tensor E =
            compressRef(w, a + "compressor.", x, rate, csa ? 2 : 1, D, v.compressInv, v.rot, v.eps);
        const int64_t C = E.size(0);
        out.entries[l] = E;
        at::Tensor cm = at::full({T, C}, -kInf, x.options());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t e = 0; e < C && e < (t + 1) / rate; ++e)
                cm[t][e] = 0;
        if (csa && knobs.indexer && C > 0) {
            const std::string ix = a + "compressor.indexer.";
            const at::Tensor Ei = compressRef(w, ix, x, rate, 2, v.Di, v.compressInv, v.rot, v.eps);
            const at::Tensor qi = ropeTailRef(
                at::linear(qr, w.at(ix + "q_b_proj.weight")).view({T, v.Hi, v.Di}).transpose(0, 1),
                v.compressInv, pos, v.rot); // [Hi, T, Di]
            const std::string wp = w.count(ix + "scorer.weights_proj.weight")
                                       ? ix + "scorer.weights_proj.weight"
                                       : ix + "weights_proj.weight";
            const at::Tensor wts = at::linear(x, w.at(wp)) / std::sqrt(double(v.Hi)); // [T, Hi]
            const at::Tensor scores =
                (at::relu(at::matmul(qi, Ei.t())) / std::sqrt(double(v.Di)) * wts.t().unsqueeze(-1))
                    .sum(0); // [T, C]
            out.entryScores[l] = scores.masked_fill(cm.isinf(), -kInf);
            cm.fill_(-kInf);
            for (int64_t t = 0; t < T; ++t) {
                const int64_t ready = std::min(C, (t + 1) / rate);
                if (ready == 0)
                    continue;
                const at::Tensor top =
                    std::get<1>(scores[t].narrow(0, 0, ready).topk(std::min(v.topK, ready)));
                for (int64_t i = 0; i < top.size(0); ++i)
                    cm[t][top[i].item<int64_t>()] = 0;
            }
        }
        keys = at::cat({kv, E}, 0);
        mask = at::cat({mask, cm}, 1);
    }
    at::Tensor logits = at::matmul(q, keys.t()) / std::sqrt(double(D)) + mask; // [H, T, N]
    const int64_t N = keys.size(0);
    at::Tensor p;
    if (knobs.sinks) {
        const at::Tensor sink = W("sinks").view({H, 1, 1}).expand({H, T, 1});
        p = at::softmax(at::cat({logits, sink}, -1), -1).narrow(-1, 0, N);
    } else {
        p = at::softmax(logits, -1);
    }
    at::Tensor o = at::matmul(p, keys); // [H, T, D]
    out.attention.push_back(o);
    if (knobs.undoRope)
        o = ropeTailRef(o, inv, pos, v.rot, -1.0);
    const int64_t in = H * D / v.G;
    const at::Tensor flat = o.transpose(0, 1).reshape({T, v.G, in});
    const at::Tensor wa = W("o_a_proj.weight").view({v.G, v.orank, in});
    std::vector<at::Tensor> groups;
    for (int64_t g = 0; g < v.G; ++g)
        groups.push_back(at::matmul(flat.select(1, g), wa[g].t()));
    return at::linear(at::cat(groups, 1), W("o_b_proj.weight"));
}

/// DeepseekV4SparseMoeBlock of layer l on x [T, h]: sqrt(softplus(router)) scores, the top k by
/// score + correction bias (a hash layer: tid2eid's row of each id), renormalised × scale; each
/// expert silu(min(gate, L))·clamp(up, ±L) then down; the shared expert unclamped.
inline at::Tensor moeRef(const V4& v, const Weights& w, int64_t l, const at::Tensor& x,
                         const std::vector<int64_t>& ids, const Knobs& knobs) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    const int64_t T = x.size(0), I = w.at(p + "experts.down_proj").size(2);
    const at::Tensor s = at::sqrt(at::softplus(at::linear(x, w.at(p + "gate.weight"))));
    const bool hash = v.mlpKinds[static_cast<size_t>(l)] == "hash_moe";
    at::Tensor idx;
    if (hash && knobs.hashRouting)
        idx = w.at(p + "gate.tid2eid").index_select(0, at::tensor(ids, at::kLong)).to(at::kLong);
    else
        idx = std::get<1>((hash ? s : s + w.at(p + "gate.e_score_correction_bias")).topk(v.k, -1));
    at::Tensor wt = s.gather(1, idx);
    wt = wt / (wt.sum(-1, true) + 1e-20) * v.scale;
    at::Tensor out = at::zeros_like(x);
    const at::Tensor gu = w.at(p + "experts.gate_up_proj"), dn = w.at(p + "experts.down_proj");
    const double L = knobs.clamp ? v.limit : kInf;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < v.k; ++j) {
            const int64_t e = idx[t][j].item<int64_t>();
            const at::Tensor hgu = at::matmul(gu[e], x[t]);
            const at::Tensor u =
                at::silu(hgu.narrow(0, 0, I).clamp_max(L)) * hgu.narrow(0, I, I).clamp(-L, L);
            out[t] += wt[t][j] * at::matmul(dn[e], u);
        }
    return out + swigluRef(w, p + "shared_experts.", x);
}

/// DeepseekV4ForCausalLM.forward on ids.
inline RefOut referenceV4(const json& c, const Weights& w, const std::vector<int64_t>& ids,
                          const Knobs& knobs = {}) {
    const V4 v = shapeOf(c);
    const int64_t T = static_cast<int64_t>(ids.size());
    const at::Tensor x0 =
        at::embedding(w.at("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    at::Tensor X = x0.unsqueeze(1).expand({T, v.n, v.h}).contiguous();
    RefOut out;
    for (int64_t l = 0; l < static_cast<int64_t>(v.kinds.size()); ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const Mix a = hyperRef(v, w, p + "attn_hc.", X, knobs);
        X = combineRef(a, X,
                       attentionRef(v, w, l,
                                    rmsNorm(a.collapsed, w.at(p + "input_layernorm.weight"), v.eps),
                                    out, knobs));
        const Mix f = hyperRef(v, w, p + "ffn_hc.", X, knobs);
        X = combineRef(
            f, X,
            moeRef(v, w, l,
                   rmsNorm(f.collapsed, w.at(p + "post_attention_layernorm.weight"), v.eps), ids,
                   knobs));
    }
    const at::Tensor flat = X.reshape({T, v.n * v.h});
    const at::Tensor pre =
        at::sigmoid(at::linear(flat * at::rsqrt(flat.pow(2).mean(-1, true) + v.eps),
                               w.at("model.hc_head.hc_fn")) *
                        w.at("model.hc_head.hc_scale") +
                    w.at("model.hc_head.hc_base")) +
        v.hcEps;
    const at::Tensor y = (pre.unsqueeze(-1) * X).sum(1);
    out.logits = at::linear(rmsNorm(y, w.at("model.norm.weight"), v.eps), w.at("lm_head.weight"));
    return out;
}

/// DeepSeek-V4 in small: 5 layers (HCA, CSA, sliding, CSA, HCA), 4 heads of 16 over one
/// key-value head, RoPE on the last 8 dims of each head, a window of 6, entries of 4 (CSA) and 8
/// (HCA) positions, an indexer of 16 heads of 8 keeping 3 entries, 3 streams, 6 experts of 10
/// (2 a token, the first and third layers by a table), a clamp at 1 that bites. (An entry whose
/// every indexer head's ReLU is 0 scores exactly 0, and ties at 0 are broken as each topk breaks
/// them: 16 heads make them rare enough that these seeds meet none at the top k's edge.)
inline json smallConfig() {
    return {{"architectures", {"DeepseekV4ForCausalLM"}},
            {"model_type", "deepseek_v4"},
            {"vocab_size", 101},
            {"hidden_size", 32},
            {"moe_intermediate_size", 10},
            {"num_hidden_layers", 5},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 1},
            {"head_dim", 16},
            {"q_lora_rank", 12},
            {"o_groups", 2},
            {"o_lora_rank", 6},
            {"partial_rotary_factor", 0.5},
            {"sliding_window", 6},
            {"layer_types",
             {"heavily_compressed_attention", "compressed_sparse_attention", "sliding_attention",
              "compressed_sparse_attention", "heavily_compressed_attention"}},
            {"compress_rates",
             {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 8}}},
            {"index_n_heads", 16},
            {"index_head_dim", 8},
            {"index_topk", 3},
            {"hc_mult", 3},
            {"hc_sinkhorn_iters", 5},
            {"hc_eps", 1e-6},
            {"n_routed_experts", 6},
            {"num_experts_per_tok", 2},
            {"mlp_layer_types", {"hash_moe", "moe", "hash_moe", "moe", "moe"}},
            {"routed_scaling_factor", 1.5},
            {"swiglu_limit", 1.0},
            {"scoring_func", "sqrtsoftplus"},
            {"rope_parameters",
             {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
              {"compress",
               {{"rope_type", "yarn"},
                {"rope_theta", 1000.0},
                {"factor", 4.0},
                {"original_max_position_embeddings", 64},
                {"attention_factor", 1.0}}}}},
            {"rms_norm_eps", 1e-6},
            {"max_position_embeddings", 512},
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

/// Draws the model of `config` into `dir`: hash tables of distinct experts per id, mHC's scales
/// near 1 (so that the streams mix unevenly), sinks of N(0, 1).
inline Weights makeV4(const QString& dir, const json& config, uint64_t seed,
                      const std::function<void(const std::string&, at::Tensor&)>& more = {}) {
    auto gen = at::detail::createCPUGenerator(seed + 1000);
    return makeModel(dir, config, seed, 0.5, [&](const std::string& n, at::Tensor& t) {
        auto ends = [&](const std::string& tail) {
            return n.size() >= tail.size() &&
                   n.compare(n.size() - tail.size(), tail.size(), tail) == 0;
        };
        if (ends(".tid2eid")) {
            const int64_t E = config["n_routed_experts"];
            for (int64_t r = 0; r < t.size(0); ++r)
                t[r].copy_(at::randperm(E, gen, at::kLong).narrow(0, 0, t.size(1)));
        } else if (ends("_hc.scale") || ends("hc_head.hc_scale")) {
            t.normal_(1.0, 0.3, gen);
        } else if (ends("self_attn.sinks")) {
            t.normal_(0.0, 1.0, gen);
        } else if (ends("_hc.fn") || ends("hc_head.hc_fn")) {
            t.mul_(3.0);
        }
        if (more)
            more(n, t);
    });
}

inline double tolerance(const json& c, const Weights& w) {
    return roundingTolerance(w, [&](const Weights& v, const std::vector<int64_t>& ids) {
        return referenceV4(c, v, ids);
    });
}

} // namespace sparqlab::test::v4
