// DeepSeek-V4 (DeepseekV4ForCausalLM, transformers' modeling_deepseek_v4.py) against a reference
// forward written here in float64 from transformers' code: mHC's streams and Sinkhorn-Knopp
// mixing, the attention of one shared key-value head over a sliding window with a sink per head,
// the compressed entries of HCA layers (every ready one) and CSA layers (two overlapping series,
// the lightning indexer's top k), RoPE on each head's tail undone on the output, the grouped
// output projection, and experts routed by sqrt(softplus) or by a table of token ids. Logits,
// captured q and keys in one pass and in chunks, greedy steps through the compressors' state, a
// rewound cache, what each part changes, the older checkpoint names, bad configs and tables
// (docs/learned-sparse-and-hybrid.md §17).

#include "float64_reference.h"
#include "test_support.h"

#include "analysis/attend_run.h"
#include "analysis/compressed_keys.h"
#include "analysis/decode_traffic.h"
#include "analysis/lab.h"
#include "analysis/lab_map.h"
#include "analysis/selection_overlap.h"
#include "analysis/stats_run.h"
#include "attention/method_table.h"
#include "capture/capture_file.h"
#include "capture/h5.h"
#include "model/input_error.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

using namespace sparqlab;
using namespace sparqlab::test::f64;

namespace {

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
at::Tensor ropeTailRef(const at::Tensor& x, const at::Tensor& inv, const std::vector<double>& pos,
                       int64_t rot, double sign = 1.0) {
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

std::vector<double> positions(int64_t n, int64_t stride = 1) {
    std::vector<double> p;
    for (int64_t i = 0; i < n; ++i)
        p.push_back(static_cast<double>(i * stride));
    return p;
}

/// The compressor's entries of x [T, h] (weights under `p`): for window w of `rate` positions,
/// per channel softmax over the pool's (gate + position_bias[j]) weighing kv; with two series the
/// pool is window w − 1's first W channels and window w's last W (none before window 0); then
/// kv_norm and RoPE at w·rate.
at::Tensor compressRef(const Weights& w, const std::string& p, const at::Tensor& x, int64_t rate,
                       int64_t series, int64_t W, const at::Tensor& inv, int64_t rot, double eps) {
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

V4 shapeOf(const json& c) {
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
Mix hyperRef(const V4& v, const Weights& w, const std::string& p, const at::Tensor& X,
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
at::Tensor combineRef(const Mix& m, const at::Tensor& X, const at::Tensor& f) {
    return m.post.unsqueeze(-1) * f.unsqueeze(1) + at::matmul(m.comb.transpose(1, 2), X);
}

/// DeepseekV4Attention of layer l on x [T, h] (after input_layernorm).
at::Tensor attentionRef(const V4& v, const Weights& w, int64_t l, const at::Tensor& x, RefOut& out,
                        const Knobs& knobs) {
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
at::Tensor moeRef(const V4& v, const Weights& w, int64_t l, const at::Tensor& x,
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
RefOut referenceV4(const json& c, const Weights& w, const std::vector<int64_t>& ids,
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
json smallConfig() {
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
Weights makeV4(const QString& dir, const json& config, uint64_t seed,
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

double tolerance(const json& c, const Weights& w) {
    return roundingTolerance(w, [&](const Weights& v, const std::vector<int64_t>& ids) {
        return referenceV4(c, v, ids);
    });
}

} // namespace

class TestModelDeepseekV4 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    /// Logits, every layer's q and keys in one pass and in chunks of 5 (the compressors' windows
    /// completed across chunks), greedy steps through the cache, against the float64 reference.
    void followsTransformers() {
        const QString dir = m_dir.filePath(QStringLiteral("v4"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 11);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("deepseek_v4"));
        followsReference(
            *model, [&](const std::vector<int64_t>& ids) { return referenceV4(c, w, ids); },
            QStringLiteral("deepseek_v4"), 12, tolerance(c, w));
    }

    /// Each part the reference follows changes these logits by far more than the tolerance: the
    /// compressed entries, the indexer's choice, the clamp, the sinks, the output's rotation
    /// undone, the hash tables and Sinkhorn-Knopp's steps.
    void everyPartBites() {
        const QString dir = m_dir.filePath(QStringLiteral("parts"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 21);
        const std::vector<int64_t> ids = randomIds(37, 101, 3);
        const at::Tensor exact = referenceV4(c, w, ids).logits;
        const std::vector<std::pair<const char*, Knobs>> parts = {
            {"compressed entries", Knobs{.compressed = false}},
            {"indexer", Knobs{.indexer = false}},
            {"clamp", Knobs{.clamp = false}},
            {"sinks", Knobs{.sinks = false}},
            {"undone rotation", Knobs{.undoRope = false}},
            {"hash routing", Knobs{.hashRouting = false}},
            {"sinkhorn", Knobs{.sinkhorn = false}}};
        for (const auto& [name, k] : parts) {
            const double d = largestDifference(referenceV4(c, w, ids, k).logits, exact);
            QVERIFY2(
                d > 1e-2,
                qPrintable(
                    QStringLiteral("%1 changes the logits by %2").arg(QLatin1String(name)).arg(d)));
        }
    }

    /// A cache rewound to an earlier position (the lab's replays) continues as a fresh one: the
    /// compressors' entries of the windows past it are dropped and pooled again.
    void rewoundCacheContinues() {
        const QString dir = m_dir.filePath(QStringLiteral("rewind"));
        makeV4(dir, smallConfig(), 31);
        auto model = model::Model::open(dir.toStdString());
        torch::NoGradGuard noGrad;
        const std::vector<int64_t> a = randomIds(30, 101, 5), b = randomIds(13, 101, 6);
        auto ids = [](const std::vector<int64_t>& v, int64_t from, int64_t to) {
            return at::tensor(std::vector<int64_t>(v.begin() + from, v.begin() + to), at::kLong)
                .unsqueeze(0);
        };
        model::KVCache cache;
        model->net()->forward(ids(a, 0, 30), &cache);
        cache.truncate(17);
        QCOMPARE(cache.length(), int64_t{17});
        const at::Tensor resumed = model->net()->forward(ids(b, 0, 13), &cache);
        std::vector<int64_t> joined(a.begin(), a.begin() + 17);
        joined.insert(joined.end(), b.begin(), b.end());
        const at::Tensor fresh = model->net()->forward(ids(joined, 0, 30), nullptr);
        SPARQLAB_VERIFY_CLOSE(resumed, fresh.narrow(1, 17, 13), 1e-4,
                              QStringLiteral("deepseek_v4, rewound"));
    }

    /// The first releases' names (the indexer's weights_proj beside q_b_proj, not under scorer)
    /// open to the same model; a hash table with an id past the experts is refused naming it.
    void checkpointForms() {
        const QString dir = m_dir.filePath(QStringLiteral("forms"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 41);
        auto scorer = model::Model::open(dir.toStdString());
        QVERIFY(scorer->config().compressed.scorerModule);
        auto rewrite = [&](const QString& to,
                           const std::function<void(std::string&, at::Tensor&)>& f) {
            QVERIFY(QDir().mkpath(to));
            test::writeFile(to + "/config.json", QByteArray::fromStdString(c.dump(1)));
            std::vector<std::pair<std::string, at::Tensor>> list;
            for (const auto& [n, t] : w) {
                std::string name = n;
                at::Tensor v = t.to(at::kFloat);
                f(name, v);
                list.emplace_back(name, v);
            }
            model::writeSafetensors((to + "/model.safetensors").toStdString(), list);
        };
        const QString old = m_dir.filePath(QStringLiteral("forms-old"));
        rewrite(old, [](std::string& n, at::Tensor&) {
            const size_t at = n.find("scorer.");
            if (at != std::string::npos)
                n.erase(at, 7);
        });
        auto first = model::Model::open(old.toStdString());
        QVERIFY(!first->config().compressed.scorerModule);
        const std::vector<int64_t> ids = randomIds(25, 101, 7);
        QVERIFY(at::equal(first->logits(ids), scorer->logits(ids)));
        // The tables as transformers saves them, int64 (and int32) safetensors.
        for (const at::ScalarType t : {at::kLong, at::kInt}) {
            const QString ints = m_dir.filePath(QStringLiteral("forms-int%1").arg(int(t)));
            rewrite(ints, [t](std::string& n, at::Tensor& v) {
                if (n.find(".tid2eid") != std::string::npos)
                    v = v.to(t);
            });
            QVERIFY(at::equal(model::Model::open(ints.toStdString())->logits(ids),
                              scorer->logits(ids)));
        }
        const QString bad = m_dir.filePath(QStringLiteral("forms-bad"));
        rewrite(bad, [](std::string& n, at::Tensor& t) {
            if (n == "model.layers.2.mlp.gate.tid2eid")
                t[7][1] = 6; // (6 experts: ids 0..5)
        });
        try {
            model::Model::open(bad.toStdString());
            QFAIL("opened a hash table with an expert id past the experts");
        } catch (const model::CheckpointError& e) {
            const std::string what = e.what();
            QVERIFY2(what.find("model.layers.2.mlp.gate.tid2eid") != std::string::npos &&
                         what.find("0..5") != std::string::npos &&
                         what.find('\n') == std::string::npos,
                     e.what());
        }
    }

    /// What the model says of itself: its parts from the config, DeepseekV4Config's defaults and
    /// its older keys, the parameter count, a capture's keys, and a method it cannot take.
    void whatTheModelSays() {
        const QString dir = m_dir.filePath(QStringLiteral("info"));
        const Weights w = makeV4(dir, smallConfig(), 51);
        auto model = model::Model::open(dir.toStdString());
        int64_t parameters = 0;
        for (const auto& [n, t] : w)
            parameters += t.numel();
        QCOMPARE(model->config().parameterCount(), parameters);
        const model::ModelConfig& mc = model->config();
        QCOMPARE(mc.compressed.layerRate, (std::vector<int64_t>{8, 4, 0, 4, 8}));
        QCOMPARE(mc.compressed.layerIndexed, (std::vector<bool>{false, true, false, true, false}));
        QCOMPARE(mc.layerLocalRope, (std::vector<bool>{false, false, true, false, false}));
        QCOMPARE(mc.moe.hashLayers, (std::vector<bool>{true, false, true, false, false}));
        QCOMPARE(mc.rotaryDim, int64_t{8});
        QCOMPARE(mc.rope.scaling, std::string("yarn"));
        QCOMPARE(mc.attentionLayers().size(), size_t{5});
        const model::CaptureExample e = model->capture(randomIds(12, 101, 2), true);
        QCOMPARE(e.k.sizes(), (std::vector<int64_t>{5, 1, 12, 16}));
        QVERIFY(at::equal(e.k, e.v)); // the key is the value
        // DeepseekV4Config's defaults (DeepSeek-V4-Flash): 43 layers, two HCA then CSA and HCA
        // in turn, the first three hash layers, YaRN's attention factor 1 on the compress RoPE.
        const json flash = {{"architectures", {"DeepseekV4ForCausalLM"}},
                            {"rope_theta", 10000},
                            {"compress_rope_theta", 160000},
                            {"rope_scaling",
                             {{"type", "yarn"},
                              {"factor", 16},
                              {"original_max_position_embeddings", 65536},
                              {"beta_fast", 32},
                              {"beta_slow", 1}}}};
        const model::ModelConfig d = model::parseModelConfig(flash.dump(), "c.json");
        QCOMPARE(d.nLayers, int64_t{43});
        QCOMPARE(d.compressed.layerRate[0], int64_t{128});
        QCOMPARE(d.compressed.layerRate[1], int64_t{128});
        QCOMPARE(d.compressed.layerRate[2], int64_t{128});
        QCOMPARE(d.compressed.layerRate[3], int64_t{4});
        QCOMPARE(d.moe.hashLayers[2], true);
        QCOMPARE(d.moe.hashLayers[3], false);
        QCOMPARE(d.rotaryDim, int64_t{64});
        QCOMPARE(d.rope.theta, 160000.0);
        QCOMPARE(d.rope.factor, 16.0);
        QCOMPARE(d.rope.attentionFactor, 1.0);
        QCOMPARE(d.localRope.theta, 10000.0);
        QVERIFY(d.localRope.scaling.empty());
        QCOMPARE(d.nKvHeads, int64_t{1});
        QCOMPARE(d.layerWindow[5], int64_t{128});
        QCOMPARE(d.moe.topK, int64_t{6});
        const int64_t hcMult = d.hyper.streams; // (hc_mult)
        QCOMPARE(hcMult, int64_t{4});
        // The first releases' keys: compress_ratios, num_hash_layers, qk_rope_head_dim.
        json older = flash;
        older["num_hidden_layers"] = 4;
        older["compress_ratios"] = {0, 4, 128, 4};
        older["num_hash_layers"] = 1;
        older["qk_rope_head_dim"] = 32;
        const model::ModelConfig o = model::parseModelConfig(older.dump(), "c.json");
        QCOMPARE(o.compressed.layerRate, (std::vector<int64_t>{0, 4, 128, 4}));
        QCOMPARE(o.moe.hashLayers, (std::vector<bool>{true, false, false, false}));
        QCOMPARE(o.rotaryDim, int64_t{32});
        // intermediate_size is moe_intermediate_size's alias (transformers' attribute_map).
        json alias = flash;
        alias["intermediate_size"] = 96;
        QCOMPARE(model::parseModelConfig(alias.dump(), "c.json").moe.intermediate, int64_t{96});
        alias["moe_intermediate_size"] = 80;
        QCOMPARE(model::parseModelConfig(alias.dump(), "c.json").moe.intermediate, int64_t{80});
        QCOMPARE(d.moe.intermediate, int64_t{2048});
        // A method that needs the keys to be positions is refused with one line.
        for (const attention::Method m : {attention::Method::H2O, attention::Method::Indexer}) {
            try {
                model->generate(randomIds(10, 101, 3), 2, attention::defaultConfig(m), false);
                QFAIL("ran a position-bound method on DeepSeek-V4's compressed entries");
            } catch (const model::InputError& err) {
                const std::string why = err.what();
                QVERIFY2(why.find("needs the keys to be positions") != std::string::npos &&
                             why.find('\n') == std::string::npos,
                         err.what());
            }
        }
    }

    /// Another method chooses among the window's keys and every entry a query sees, in the
    /// indexer's place (as on a DSA model): the oracle keeping them all is the reference without
    /// the indexer; SparQ at a small k is not; greedy steps through the cache follow the whole
    /// sequence's logits; traffic counts the model's own reads and refuses a method's.
    void methodsChooseAmongEntries() {
        const QString dir = m_dir.filePath(QStringLiteral("methods"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 71);
        auto model = model::Model::open(dir.toStdString());
        const std::vector<int64_t> ids = randomIds(27, 101, 5);
        attention::AttentionConfig all = attention::defaultConfig(attention::Method::Oracle);
        all.k = 1000;
        const at::Tensor everyEntry = model->logits(ids, all).to(at::kDouble);
        const at::Tensor own = referenceV4(c, w, ids).logits;
        const double tol = tolerance(c, w);
        SPARQLAB_VERIFY_CLOSE(everyEntry, referenceV4(c, w, ids, Knobs{.indexer = false}).logits,
                              tol, QStringLiteral("the oracle over every key seen"));
        QVERIFY(largestDifference(everyEntry, own) > 1e-2); // not the model's own
        attention::AttentionConfig sparq = attention::defaultConfig(attention::Method::Sparq);
        sparq.r = 4;
        sparq.k = 5;
        const at::Tensor sparse = model->logits(ids, sparq);
        QVERIFY(at::isfinite(sparse).all().item<bool>());
        QVERIFY(largestDifference(sparse.to(at::kDouble), everyEntry) > 1e-2);
        // Greedy steps through the cache (one query at a time) take the tokens the whole
        // sequence's logits choose: a prefill and its steps attend alike.
        const model::Generation g = model->generate(ids, 4, sparq, false);
        std::vector<int64_t> seq = ids;
        seq.insert(seq.end(), g.newIds.begin(), g.newIds.end());
        const at::Tensor whole = model->logits(seq, sparq);
        for (size_t i = 0; i < g.newIds.size(); ++i) {
            const at::Tensor row = whole[static_cast<int64_t>(ids.size() + i) - 1];
            const auto top = row.topk(2);
            const double gap = (std::get<0>(top)[0] - std::get<0>(top)[1]).item<double>();
            if (gap > 1e-3) // a near tie may go either way
                QCOMPARE(g.newIds[i], std::get<1>(top)[0].item<int64_t>());
        }
        // traffic at 64 positions: the model's own reads (per layer the window's 6 keys and one
        // written; an HCA layer's 8 entries; a CSA layer's 16 indexer entries of 8 dims and the 3
        // entries it picks); a method's it does not count (its key is its value).
        const model::ModelConfig& mc = model->config();
        const analysis::DecodeTraffic dense = analysis::decodeTraffic(mc, 64, {}, 2.0, 1, 2.0);
        QCOMPARE(dense.attentionCache, 16.0 * (5 * 7 + 8 + 8 + 3 + 3) + 2 * 8 * 16);
        QCOMPARE(dense.indexerKeys, 2.0 * 8 * 16);
        try {
            analysis::decodeTraffic(mc, 64, sparq, 2.0, 1, 2.0);
            QFAIL("traffic counted SparQ over DeepSeek-V4's keys by formulas of a key and a value");
        } catch (const attention::AttentionError& err) {
            QVERIFY2(std::string(err.what()).find("give --method dense") != std::string::npos,
                     err.what());
        }
    }

    /// A capture holds every compressed layer's entries and every CSA layer's indexer scores
    /// (format version 6), in one pass and in chunks of 5, as the reference pools and scores
    /// them. Written and read back, a layer's entries, its window's positions and the indexer's
    /// choice give the model's attention output (compressed_keys.h); `overlap` runs on it.
    void entriesInACapture() {
        const QString dir = m_dir.filePath(QStringLiteral("entries"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 61);
        auto model = model::Model::open(dir.toStdString());
        const int64_t S = 29;
        const std::vector<int64_t> ids = randomIds(S, 101, 7);
        const RefOut ref = referenceV4(c, w, ids);
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.layerCompressRate, (std::vector<int64_t>{8, 4, 0, 4, 8}));
        QCOMPARE(info.layerEntryIndexed, (std::vector<int64_t>{0, 1, 0, 1, 0}));
        QCOMPARE(info.entryTopK, int64_t{3});
        QCOMPARE(info.formatVersion(), int64_t{6});
        QCOMPARE(info.entryOffset(5, S), int64_t{3 + 7 + 0 + 7 + 3}); // ⌊29 / 8⌋, ⌊29 / 4⌋
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        const model::CaptureExample chunked =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/5);
        for (const model::CaptureExample* x : {&e, &chunked}) {
            QCOMPARE(x->entries.sizes().vec(), (std::vector<int64_t>{20, 16}));
            QCOMPARE(x->entryScores.sizes().vec(), (std::vector<int64_t>{S, 20}));
            for (const int64_t l : {0, 1, 3, 4}) {
                const int64_t at0 = info.entryOffset(l, S), C = info.entryCount(l, S);
                SPARQLAB_VERIFY_CLOSE(x->entries.narrow(0, at0, C), ref.entries.at(l), 1e-4,
                                      QStringLiteral("entries, layer %1").arg(l));
                const at::Tensor scores = x->entryScores.narrow(1, at0, C);
                if (!info.entryIndexed(l)) { // HCA: no indexer
                    QVERIFY(at::isnan(scores).all().item<bool>());
                    continue;
                }
                const at::Tensor want = ref.entryScores.at(l), seen = at::isfinite(want);
                QVERIFY(at::isnan(scores).equal(seen.logical_not()));
                const at::Tensor kept = want.masked_select(seen);
                SPARQLAB_VERIFY_CLOSE(scores.masked_select(seen), kept,
                                      2e-5 * kept.abs().max().item<double>(),
                                      QStringLiteral("indexer scores, layer %1").arg(l));
            }
        }
        const std::string path = m_dir.filePath(QStringLiteral("v4.h5")).toStdString();
        capture::CaptureWriter writer(path, info);
        writer.add(e);
        writer.finish();
        const capture::CaptureReader reader(path);
        QCOMPARE(reader.info().layerCompressRate, info.layerCompressRate);
        QCOMPARE(reader.info().layerEntryIndexed, info.layerEntryIndexed);
        QCOMPARE(reader.info().entryTopK, int64_t{3});
        const model::CaptureExample back = reader.read(0);
        QVERIFY(at::equal(back.entries, e.entries));
        QVERIFY(at::allclose(back.entryScores, e.entryScores, 0, 0, /*equal_nan=*/true));
        for (int64_t l = 0; l < 5; ++l) {
            const model::CaptureExample ex = reader.readLayer(0, l);
            QCOMPARE(ex.entries.size(0), info.entryCount(l, S));
            const analysis::CompressedKeys ck = analysis::compressedKeys(reader.info(), ex, l, S);
            attention::AttentionInputs in;
            in.q = ck.q;
            in.k = in.v = ck.keys;
            in.valid = ck.model;
            const attention::AttentionConfig dense =
                analysis::compressedConfig(reader.info(), l, {});
            const at::Tensor& want = ref.attention[static_cast<size_t>(l)];
            SPARQLAB_VERIFY_CLOSE(
                attention::attendSteps(in, dense).y[0], want, 1e-4,
                QStringLiteral("the model's attention from the capture, layer %1").arg(l));
            // The indexer's choice matters: every entry a query sees is not the model's.
            in.valid = ck.visible;
            const double off = largestDifference(attention::attendSteps(in, dense).y[0], want);
            QVERIFY2(
                info.entryIndexed(l) == (off > 1e-3),
                qPrintable(
                    QStringLiteral("layer %1: every entry seen is off by %2").arg(l).arg(off)));
        }
        // The lab keeps them: its capture gives them back, and its view at an earlier query what
        // a capture of that prefix holds, which a session or an export writes.
        const auto lab = analysis::LabCapture::from(e, info);
        const model::CaptureExample whole = lab->toExample();
        QVERIFY(at::equal(whole.entries, e.entries));
        QVERIFY(at::allclose(whole.entryScores, e.entryScores, 0, 0, /*equal_nan=*/true));
        const model::CaptureExample prefix = lab->atPosition(20)->toExample();
        const model::CaptureExample fresh =
            model->capture(std::vector<int64_t>(ids.begin(), ids.begin() + 21), true);
        QCOMPARE(prefix.entries.sizes().vec(), (std::vector<int64_t>{2 + 5 + 5 + 2, 16}));
        SPARQLAB_VERIFY_CLOSE(prefix.entries, fresh.entries, 1e-5,
                              QStringLiteral("the entries of the first 21 positions"));
        const at::Tensor seen = at::isfinite(fresh.entryScores);
        QVERIFY(at::isfinite(prefix.entryScores).equal(seen));
        SPARQLAB_VERIFY_CLOSE(prefix.entryScores.masked_select(seen),
                              fresh.entryScores.masked_select(seen), 1e-4,
                              QStringLiteral("the indexer scores of the first 21 queries"));
        capture::CaptureWriter again(m_dir.filePath(QStringLiteral("v4-prefix.h5")).toStdString(),
                                     info);
        again.add(prefix);
        again.finish();
        // overlap on the capture: at a k of every key a query sees, the oracle is dense
        // attention, keeps the model's set and, on a CSA layer, differs from the model's output.
        analysis::OverlapOptions o;
        o.capturePath = path;
        o.methods = {attention::defaultConfig(attention::Method::Oracle),
                     attention::defaultConfig(attention::Method::Sparq)};
        o.ks = {4, 64};
        o.queries = 6;
        const analysis::OverlapResult r = analysis::runOverlap(o);
        QVERIFY(r.hasIndexer);
        QCOMPARE(r.indexTopK, int64_t{3});
        QCOMPARE(r.rows.size(), size_t{5 * 2 * 2});
        std::set<int64_t> layersSeen;
        for (const analysis::OverlapRow& row : r.rows) {
            const QString what = QStringLiteral("layer %1, %2 at %3")
                                     .arg(row.layer)
                                     .arg(QString::fromStdString(row.method))
                                     .arg(row.k);
            layersSeen.insert(row.layer);
            QCOMPARE(row.compressRate, info.layerCompressRate[static_cast<size_t>(row.layer)]);
            // The last query (position 28) sees ⌊29 / rate⌋ entries and the window's 6 keys.
            const int64_t entries = info.entryCount(row.layer, S);
            QCOMPARE(row.entriesSeen, entries);
            QCOMPARE(row.hasIndexer, info.entryIndexed(row.layer));
            QVERIFY2(row.k == std::min<int64_t>(row.k == 4 ? 4 : 64, entries + 6),
                     qPrintable(what));
            if (row.method == "oracle" && row.k == entries + 6) {
                QVERIFY2(row.relErrorDense < 1e-5, qPrintable(what));
                QVERIFY2(std::abs(row.topkRecall - 1) < 1e-9, qPrintable(what));
                if (row.hasIndexer) {
                    QVERIFY2(std::abs(row.indexerOverlap - 1) < 1e-9, qPrintable(what));
                    QVERIFY2(row.relErrorModel > 1e-4, qPrintable(what));
                }
            }
            if (row.k == 4) // fewer keys than seen: an error of its own
                QVERIFY2(row.relErrorDense > 1e-4 && row.mass < 1, qPrintable(what));
        }
        QCOMPARE(layersSeen.size(), size_t{5});
        // attend over the same keys: at the last 6 queries its steps' errors are overlap's, each
        // step's keys are among the ones its query sees, and the result file says how many of
        // a layer's keys are entries; a key is its value, so the transfers leave those layers
        // out (dense's reads of layer 2's window alone remain).
        analysis::AttendRunOptions ao;
        ao.capturePath = path;
        ao.outPath = m_dir.filePath(QStringLiteral("v4-attend.h5")).toStdString();
        ao.config = o.methods[1]; // SparQ
        ao.config.k = 4;
        ao.config.r = 16; // (overlap's r of 32, at most the head dimension)
        const analysis::AttendSummary as = analysis::runAttend(ao);
        QCOMPARE(as.uncountedLayers, int64_t{4});
        QCOMPARE(as.steps, S); // layer 2's
        const h5::Group g = h5::File::openRead(ao.outPath).root().group("examples").group("0000");
        const at::Tensor entries = g.read("entries"), rel = g.read("rel_error"),
                         idx = g.read("indices");
        const int64_t window = c["sliding_window"];
        for (int64_t l = 0; l < 5; ++l) {
            const int64_t C = info.entryCount(l, S), rate = info.compressRate(l);
            QCOMPARE(entries[l].item<int64_t>(), C);
            if (rate == 0)
                continue;
            int compared = 0;
            for (const analysis::OverlapRow& row : r.rows)
                if (row.layer == l && row.k == 4 && row.method == "sparq") {
                    QVERIFY2(std::abs(rel[l].narrow(1, S - 6, 6).mean().item<double>() -
                                      row.relErrorDense) < 1e-5,
                             qPrintable(QStringLiteral("layer %1").arg(l)));
                    ++compared;
                }
            QCOMPARE(compared, 1);
            const at::Tensor key = idx[l];                                 // [Hq, T, W]
            const at::Tensor p = at::arange(S, at::kLong).view({1, S, 1}); // query positions
            const at::Tensor seen = key.lt(p.add(1).div(rate, "floor"))
                                        .logical_or(key.ge(C)
                                                        .logical_and(key.sub(C).le(p))
                                                        .logical_and(p.sub(key.sub(C)).lt(window)));
            QVERIFY(seen.logical_or(key.lt(0)).all().item<bool>());
            QCOMPARE(key.ge(0).sum(-1).min().item<int64_t>(), int64_t{1});
        }
        // stats scores the last query against the same keys: its coverage is the lab's, and
        // the oracle keeping every key seen recalls all of them; only layer 2's reads count.
        analysis::StatsOptions so = analysis::statsDefaultsFor(reader.info());
        so.capturePath = path;
        so.coverageK = 5;
        attention::AttentionConfig every = o.methods[0]; // the oracle
        so.recall = {every};
        so.recall[0].k = S + 64;
        const analysis::StatsResult sr = analysis::runStats(so);
        QCOMPARE(sr.entryLayers, int64_t{4});
        QVERIFY(sr.recall[0].skipped.empty());
        QCOMPARE(sr.recall[0].counted, int64_t{1});
        // A method that needs positions runs on layer 2 alone, its other rows NaN.
        so.recall = {attention::defaultConfig(attention::Method::H2O)};
        const analysis::StatsResult byH2o = analysis::runStats(so);
        QVERIFY2(byH2o.recall[0].skipped.empty(), byH2o.recall[0].skipped.c_str());
        QVERIFY(byH2o.recall[0].notOnEntries.rfind("h2o needs the keys to be positions", 0) == 0);
        QCOMPARE(byH2o.recall[0].runs, int64_t{1});
        for (int64_t l = 0; l < 5; ++l)
            QCOMPARE(at::isnan(byH2o.recall[0].perHead[l]).all().item<bool>(), l != 2);
        for (int64_t l = 0; l < 5; ++l) {
            SPARQLAB_VERIFY_CLOSE(sr.coverage[l].to(at::kFloat), lab->coverageAt(l, 5), 1e-5,
                                  QStringLiteral("coverage at 5, layer %1").arg(l));
            SPARQLAB_VERIFY_CLOSE(sr.recall[0].perHead[l], at::ones({lab->heads()}, at::kDouble),
                                  1e-9, QStringLiteral("the oracle's recall, layer %1").arg(l));
        }
    }

    /// The lab scores the decode-step query of a compressed layer against its entries and the
    /// window's positions (the head view's keys: entries first): dense attention over every key
    /// it sees, the model's own choice among them, whose output is the float64 reference's, and
    /// any method that does not need positions among the keys seen. A layer of the window alone
    /// is as before; the query × key map refuses a compressed layer with one line.
    void theLabScoresTheEntries() {
        const QString dir = m_dir.filePath(QStringLiteral("lab"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 67);
        auto model = model::Model::open(dir.toStdString());
        const int64_t S = 29, window = c["sliding_window"];
        const std::vector<int64_t> ids = randomIds(S, 101, 9);
        const RefOut ref = referenceV4(c, w, ids);
        const model::CaptureInfo info = model->captureInfo();
        const auto lab = analysis::LabCapture::from(model->capture(ids, true), info);
        attention::AttentionConfig all = attention::defaultConfig(attention::Method::Oracle);
        all.k = S + 64; // every key seen
        attention::AttentionConfig sparq = attention::defaultConfig(attention::Method::Sparq);
        sparq.r = 4;
        sparq.k = 3;
        for (int64_t l = 0; l < 5; ++l) {
            const int64_t rate = info.compressRate(l), C = info.entryCount(l, S);
            QCOMPARE(lab->compressedLayer(l), rate > 0);
            const auto cache = lab->layerCache(l);
            for (int64_t head = 0; head < lab->heads(); ++head) {
                const QString what = QStringLiteral("layer %1, head %2").arg(l).arg(head);
                const analysis::HeadState h = analysis::headState(*lab, l, head, all);
                QCOMPARE(h.entries, C);
                QCOMPARE(h.entryRate, rate);
                QCOMPARE(static_cast<int64_t>(h.exact.size()), C + S);
                // The keys the last query (position 28) sees: every entry (⌊29 / rate⌋ are
                // complete), the window's positions; s is 0 elsewhere and sums with the sink to 1.
                double sum = h.sinkShare;
                for (int64_t j = 0; j < C + S; ++j) {
                    const bool seen = j < C || j >= C + S - window;
                    QVERIFY2(seen || h.exact[static_cast<size_t>(j)] == 0, qPrintable(what));
                    sum += h.exact[static_cast<size_t>(j)];
                }
                QVERIFY2(std::abs(sum - 1) < 1e-5, qPrintable(what));
                // Every key seen kept: dense attention, each of them chosen.
                QCOMPARE(h.count, C + window);
                QVERIFY2(h.outputError < 1e-5, qPrintable(what));
                if (rate == 0) {
                    QVERIFY(h.modelChosen.empty());
                    QVERIFY(h.denseTransfer > 0);
                    continue;
                }
                QCOMPARE(h.transfer, 0.0); // (not counted: the key is its value)
                QCOMPARE(h.keysSeen, C + window);
                // The model's own: the indexer's top 3 entries on a CSA layer, every one on an
                // HCA layer, and the window; its output is the reference's attention.
                const int64_t picks = info.entryIndexed(l) ? std::min<int64_t>(3, C) : C;
                QCOMPARE(static_cast<int64_t>(h.modelChosen.size()), picks + window);
                QVERIFY(std::all_of(h.modelChosen.begin(), h.modelChosen.end(),
                                    [&](int64_t j) { return j < C || j >= C + S - window; }));
                SPARQLAB_VERIFY_CLOSE(cache->modelY[0][head],
                                      ref.attention[static_cast<size_t>(l)][head][S - 1], 1e-4,
                                      QStringLiteral("the model's own output, ") + what);
                QVERIFY2((h.modelError > 1e-3) == static_cast<bool>(info.entryIndexed(l)),
                         qPrintable(what));
                QCOMPARE(h.modelError, h.denseModelError); // (every key kept: dense's output)
                // SparQ at k = 3 chooses among the keys seen, and differs from dense.
                const analysis::HeadState sp = analysis::headState(*lab, l, head, sparq);
                QCOMPARE(sp.count, int64_t{3});
                QVERIFY(std::all_of(sp.chosen.begin(), sp.chosen.end(),
                                    [&](int64_t j) { return j < C || j >= C + S - window; }));
                QVERIFY2(sp.outputError > 1e-4, qPrintable(what));
                QCOMPARE(sp.approx.size(), h.exact.size());
            }
        }
        // A method that needs positions is refused on a compressed layer, with one line, as is
        // the query × key map.
        const auto says = [](const auto& run) {
            try {
                run();
            } catch (const attention::AttentionError& e) {
                return std::string(e.what());
            }
            return std::string("(nothing thrown)");
        };
        const attention::AttentionConfig h2o = attention::defaultConfig(attention::Method::H2O);
        const std::string refused = says([&] { analysis::headState(*lab, 1, 0, h2o); });
        QVERIFY2(refused.rfind("h2o needs the keys to be positions", 0) == 0 &&
                     refused.find('\n') == std::string::npos,
                 refused.c_str());
        QVERIFY(analysis::headState(*lab, 2, 0, h2o).count > 0); // the window's layer takes it
        const std::string noMap = says([&] { analysis::queryKeyMap(*lab, 1, 0, h2o); });
        QVERIFY2(noMap.rfind("h2o needs the keys to be positions", 0) == 0, noMap.c_str());
        QCOMPARE(analysis::queryKeyMap(*lab, 2, 0, all).keys, S);
        // The query × key map of a compressed layer: its last row is the head view's weights
        // over positions (an entry where it pools), its earlier rows see fewer entries.
        for (const int64_t l : {0, 1}) {
            const analysis::QueryKeyMap map = analysis::queryKeyMap(*lab, l, 1, sparq, 8);
            QCOMPARE(map.entryRate, info.compressRate(l));
            QCOMPARE(map.keyBin, int64_t{1});
            QCOMPARE(map.rows(), int64_t{8});
            const analysis::HeadState h = analysis::headState(*lab, l, 1, sparq);
            const std::vector<float> last(map.exact.end() - S, map.exact.end());
            const std::vector<float> want = h.byPosition(h.exact);
            for (int64_t p = 0; p < S; ++p)
                QVERIFY2(std::abs(last[static_cast<size_t>(p)] - want[static_cast<size_t>(p)]) <
                             1e-6,
                         qPrintable(QStringLiteral("layer %1, position %2").arg(l).arg(p)));
            QCOMPARE(map.count.back(), h.count);
            // Row 0 (position 21) sees ⌊22 / rate⌋ entries: no weight past the last one's
            // positions but the window's.
            const std::vector<float> first(map.exact.begin(), map.exact.begin() + S);
            const int64_t pooled = 22 / info.compressRate(l) * info.compressRate(l);
            for (int64_t p = pooled; p < 22 - window; ++p)
                QCOMPARE(first[static_cast<size_t>(p)], 0.0f);
        }
        // The overview over the same keys: every key seen kept is dense attention everywhere;
        // with a method that needs positions, the compressed layers' cells of its measures are
        // empty and the rest stay.
        const analysis::Overview o = analysis::overview(*lab, all);
        for (const float e : o.grids.at(analysis::Measure::OutputError))
            QVERIFY(e < 1e-5);
        const analysis::Overview byH2o = analysis::overview(*lab, h2o);
        const int64_t Hq = lab->heads();
        for (int64_t l = 0; l < 5; ++l) {
            const float e = byH2o.grids.at(analysis::Measure::OutputError)[l * Hq];
            QCOMPARE(std::isnan(e), lab->compressedLayer(l));
            QVERIFY(std::isfinite(byH2o.grids.at(analysis::Measure::KMass90)[l * Hq]));
        }
        // A local window of 8 keys is the last 8 the query sees (entries among them where the
        // window of positions is shorter); Step 1's axis is the keys, entries first.
        attention::AttentionConfig local = sparq;
        local.k = 12;
        local.local = 8;
        for (const int64_t l : {0, 1}) {
            const analysis::HeadState h = analysis::headState(*lab, l, 0, local);
            int64_t seenAfter = 0;
            for (int64_t j = h.localFrom; j < static_cast<int64_t>(h.exact.size()); ++j)
                seenAfter += j < h.entries || j >= h.entries + S - window;
            QCOMPARE(seenAfter, int64_t{8});
            QVERIFY(h.localFrom < h.entries); // (the window holds 6 positions: 2 entries too)
        }
        const analysis::HeadState quest =
            analysis::headState(*lab, 1, 0, attention::defaultConfig(attention::Method::Quest));
        QVERIFY2(quest.stepOne.xLabel.rfind("key, the 7 entries first", 0) == 0,
                 quest.stepOne.xLabel.c_str());
        // Across layers: a compressed layer has its mass over its keys and no overlap with a
        // neighbour's set; a method that needs positions has no mass there.
        const analysis::LayerReuse reuse = analysis::layerReuse(*lab, h2o);
        QCOMPARE(reuse.entryLayers, (std::vector<int64_t>{0, 1, 3, 4}));
        for (size_t l = 0; l < 5; ++l) {
            QVERIFY(std::isnan(reuse.series[1].overlap[l])); // (no two neighbours of positions)
            QVERIFY(std::isfinite(reuse.series[0].mass[l])); // the exact top-k's
            QCOMPARE(std::isnan(reuse.series[1].mass[l]), l != 2);
        }
        // At an earlier query, the entries complete by then.
        const auto earlier = lab->atPosition(20);
        QCOMPARE(analysis::headState(*earlier, 1, 0, all).entries, info.entryCount(1, 21));
    }

    /// Configs that DeepseekV4Config refuses, or that SparQ Lab cannot follow: one line naming
    /// the key.
    void badDeepseekV4Configs() {
        verifyBadConfigs(
            smallConfig(), "deepseek_v4/config.json",
            {
                {[](json& c) { c["layer_types"][2] = "full_attention"; }, "layer_types"},
                {[](json& c) { c["layer_types"].erase(0); }, "layer_types"},
                {[](json& c) { c["mlp_layer_types"][1] = "dense"; }, "mlp_layer_types"},
                {[](json& c) { c["o_groups"] = 3; }, "o_groups"},
                {[](json& c) { c["index_head_dim"] = 4; }, "index_head_dim"},
                {[](json& c) { c["scoring_func"] = "softmax"; }, "scoring_func"},
                {[](json& c) { c["swiglu_limit"] = 0; }, "swiglu_limit"},
                {[](json& c) { c["num_experts_per_tok"] = 7; }, "num_experts_per_tok"},
                {[](json& c) { c["partial_rotary_factor"] = 0.03; }, "partial_rotary_factor"},
                {[](json& c) { c["rope_parameters"]["compress"]["rope_type"] = "linear"; },
                 "rope_parameters.compress.rope_type"},
                {[](json& c) { c["rope_parameters"].erase("main"); }, "rope_parameters.main"},
                {[](json& c) { c["compress_rates"]["compressed_sparse_attention"] = 0; },
                 "compress_rates.compressed_sparse_attention"},
                {[](json& c) {
                     c.erase("layer_types");
                     c["compress_ratios"] = {0, 4, 128, 4, 8};
                 },
                 "compress_ratios"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelDeepseekV4)
#include "test_model_deepseek_v4.moc"
