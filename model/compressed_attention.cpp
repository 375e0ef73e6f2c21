// DeepSeek-V4's attention and residual streams (transformer.h), as transformers 5.x's
// modeling_deepseek_v4.py computes them (docs/learned-sparse-and-hybrid.md §17): a sliding
// window over one key-value head per position, the compressed entries of a compressed layer
// beside it (every one on an HCA layer, the lightning indexer's top k on a CSA layer), a sink per
// head, RoPE undone on the output, the grouped output projection; another attention method
// choosing among the window's keys and every entry seen, in the indexer's place; and
// manifold-constrained hyper-connections around the attention and the experts.

#include "transformer.h"

#include "attention/method_table.h"
#include "model/input_error.h"
#include "model/rope.h"
#include "model/transformer_layer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace sparqlab::model {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// x [..., T, W] rotated on its last `rot` dimensions in interleaved pairs by angles [T, rot / 2]
/// (the other dimensions first, untouched), or by the opposite angles (`inverse`: the rotation
/// undone, as the output's is).
at::Tensor ropeTail(const at::Tensor& x, const RopeAngles& a, int64_t rot, bool inverse = false) {
    const int64_t W = x.size(-1);
    const RopeAngles b{a.cos, inverse ? a.sin.neg() : a.sin, {}, {}};
    const at::Tensor tail = applyRope(x.narrow(-1, W - rot, rot), b, rot, RopeLayout::Interleaved);
    return at::cat({x.narrow(-1, 0, W - rot), tail}, -1);
}

/// DeepseekV4UnweightedRMSNorm: x · rsqrt(mean(x²) + eps), the root in float32, cast to x's dtype
/// before it multiplies.
at::Tensor unweightedRms(const at::Tensor& x, double eps) {
    return x * at::rsqrt(x.to(at::kFloat).square().mean(-1, /*keepdim=*/true) + eps)
                   .to(x.scalar_type());
}

/// A pool's own weights: position_bias [rate, r·W] and kv_norm [W] (its projections are made
/// before, once per position).
struct PoolWeights {
    const at::Tensor &bias, &norm;
};

/// Entries [w0, w1) pooled from every position's projections kv, gate [B, S, r·W] (S ≥ w1·rate):
/// per channel a softmax over the pool's gate + position_bias, in float32, weighing kv; with two
/// series (r = 2, CSA) the pool is the previous window's first series and this window's second
/// (entry 0's previous window weighs nothing). Then kv_norm, and RoPE at position w·rate.
at::Tensor poolEntries(const at::Tensor& kv, const at::Tensor& gate, const PoolWeights& p,
                       int64_t rate, int64_t w0, int64_t w1, double eps, const at::Tensor& invFreq,
                       double factor, int64_t rot) {
    const int64_t B = kv.size(0), W = p.norm.size(0), series = kv.size(-1) / W, n = w1 - w0;
    const at::Tensor k = kv.narrow(1, w0 * rate, n * rate).view({B, n, rate, series * W});
    const at::Tensor g = gate.narrow(1, w0 * rate, n * rate).view({B, n, rate, series * W}) +
                         p.bias.to(gate.scalar_type());
    at::Tensor pk = k, pg = g;
    if (series == 2) {
        // The first series of windows w0 − 1 … w1 − 2 (the gate with its bias, as transformers
        // keeps it), before this window's second.
        at::Tensor prevK, prevG;
        if (w0 > 0) {
            prevK = kv.narrow(1, (w0 - 1) * rate, n * rate).view({B, n, rate, 2 * W});
            prevG = gate.narrow(1, (w0 - 1) * rate, n * rate).view({B, n, rate, 2 * W}) +
                    p.bias.to(gate.scalar_type());
        } else {
            prevK =
                at::cat({at::zeros({B, 1, rate, 2 * W}, k.options()), k.narrow(1, 0, n - 1)}, 1);
            prevG = at::cat(
                {at::full({B, 1, rate, 2 * W}, kNegInf, g.options()), g.narrow(1, 0, n - 1)}, 1);
        }
        pk = at::cat({prevK.narrow(-1, 0, W), k.narrow(-1, W, W)}, 2); // [B, n, 2·rate, W]
        pg = at::cat({prevG.narrow(-1, 0, W), g.narrow(-1, W, W)}, 2);
    }
    const at::Tensor weights = at::softmax(pg, 2, at::kFloat).to(pk.scalar_type());
    const at::Tensor pooled = rmsNorm((pk * weights).sum(2), p.norm, eps, false, false);
    const at::Tensor pos =
        (at::arange(w0, w1, invFreq.options().dtype(at::kLong)) * rate).to(at::kFloat);
    const at::Tensor freqs = at::outer(pos, invFreq);
    RopeAngles a{freqs.cos(), freqs.sin(), {}, {}};
    if (factor != 1.0) {
        a.cos = a.cos * factor;
        a.sin = a.sin * factor;
    }
    return ropeTail(pooled, a, rot);
}

/// `have` (the entries pooled so far, undefined: none) extended to the windows complete in
/// kv's S positions.
at::Tensor extendEntries(const at::Tensor& have, const at::Tensor& kv, const at::Tensor& gate,
                         const PoolWeights& p, int64_t rate, double eps, const at::Tensor& invFreq,
                         double factor, int64_t rot) {
    const int64_t w0 = have.defined() ? have.size(1) : 0, w1 = kv.size(1) / rate;
    if (w1 <= w0)
        return have.defined() ? have : at::empty({kv.size(0), 0, p.norm.size(0)}, kv.options());
    const at::Tensor fresh = poolEntries(kv, gate, p, rate, w0, w1, eps, invFreq, factor, rot);
    return have.defined() && w0 > 0 ? at::cat({have, fresh}, 1) : fresh;
}

/// The layer's compressor state in the cache, made on first use (or a call's own, uncached).
CompressorState& compressorState(KVCache& cache, int64_t layer, size_t layers, int64_t rate) {
    if (cache.compressors.size() < layers)
        cache.compressors.resize(layers);
    auto& s = cache.compressors[static_cast<size_t>(layer)];
    if (!s) {
        s = std::make_shared<CompressorState>();
        s->rate = rate;
    }
    return *s;
}

/// A CSA layer's lightning indexer for T queries (q latent qr [B, T, q_lora], x [B, T, h]) over
/// its entries [B, C, Di]: Σ_h w_h·ReLU(q_h·k)·Di^-½ in float32, w = weights_proj(x)·Hi^-½, q
/// rotated at the queries' positions (`ang`); of the entries `ready` [T, C] marks, the top
/// index_topk. Returns them [B, T, C] bool; with `scoresOut`, the scores too [B, T, C] float32
/// (−inf where an entry is not ready). A few query rows at a time.
at::Tensor indexerPicks(const at::Tensor& qr, const at::Tensor& x, const CausalLMImpl::Layer& L,
                        const CompressedAttentionSpec& s, const at::Tensor& entries,
                        const RopeAngles& ang, int64_t rot, const at::Tensor& ready,
                        at::Tensor* scoresOut = nullptr) {
    const int64_t B = x.size(0), T = x.size(1), Hi = s.indexHeads, Di = s.indexDim;
    const int64_t C = entries.size(1);
    const at::Tensor q = ropeTail(project(qr, L.idxQW).view({B, T, Hi, Di}).transpose(1, 2), ang,
                                  rot)
                             .to(at::kFloat); // [B, Hi, T, Di]
    const at::Tensor w =
        (project(x, L.idxWeightsW).to(at::kFloat) * std::pow(static_cast<double>(Hi), -0.5))
            .transpose(1, 2)
            .unsqueeze(-1);                                                    // [B, Hi, T, 1]
    const at::Tensor kt = entries.to(at::kFloat).transpose(1, 2).unsqueeze(1); // [B, 1, Di, C]
    const double scale = std::pow(static_cast<double>(Di), -0.5);
    const int64_t top = std::min(s.indexTopK, C);
    at::Tensor picks = at::zeros({B, T, C}, x.options().dtype(at::kBool));
    if (scoresOut)
        *scoresOut = at::empty({B, T, C}, x.options().dtype(at::kFloat));
    const int64_t per =
        std::max<int64_t>(1, kMaskedAttentionScores / std::max<int64_t>(1, B * Hi * C));
    for (int64_t t0 = 0; t0 < T; t0 += per) {
        const int64_t n = std::min(per, T - t0);
        const at::Tensor scores =
            (at::relu(at::matmul(q.narrow(2, t0, n), kt)) * scale * w.narrow(2, t0, n))
                .sum(1)
                .masked_fill(ready.narrow(0, t0, n).logical_not().unsqueeze(0), kNegInf);
        if (scoresOut)
            scoresOut->narrow(1, t0, n).copy_(scores);
        // (Picks among unready entries, where fewer than k are ready, stay unseen.)
        picks.narrow(1, t0, n).scatter_(-1, std::get<1>(scores.topk(top, -1)), true);
    }
    return picks.logical_and(ready.unsqueeze(0));
}

/// t extended by `more` along positions (dim 1).
at::Tensor appended(const at::Tensor& t, const at::Tensor& more) {
    return t.defined() ? at::cat({t, more}, 1) : more;
}

} // namespace

at::Tensor CausalLMImpl::compressedAttention(int64_t index, const at::Tensor& x, KVCache* cache,
                                             int64_t firstPos,
                                             const attention::AttentionConfig& attn,
                                             const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const ModelConfig& c = m_config;
    const CompressedAttentionSpec& s = c.compressed;
    // Another method chooses among the window's keys and every entry the query sees, in the
    // indexer's place (as on a DSA model); one that needs positions cannot.
    const bool method = attn.method != attention::Method::Dense;
    if (const std::string why = attention::positionFreeProblem(attn.method); !why.empty())
        throw InputError(why);
    const int64_t B = x.size(0), T = x.size(1), H = c.nHeads, D = c.headDim, rot = c.rotaryDim;
    const double eps = c.normEps;
    const RopeAngles& ang = layerAngles(firstPos, T, index); // main (sliding) or compress
    // q from its latent, each head RMS-normalised; the one key-value head; RoPE on the tails.
    const at::Tensor qr = rmsNorm(project(x, L.qAW), L.qANormW, eps, false, false);
    at::Tensor q = project(qr, L.qBW).view({B, T, H, D}).transpose(1, 2);
    q = ropeTail(unweightedRms(q, eps), ang, rot);
    at::Tensor kv = rmsNorm(project(x, L.kW), L.kNormW, eps, false, false).view({B, 1, T, D});
    kv = ropeTail(kv, ang, rot);
    at::Tensor K = kv;
    if (cache) {
        const size_t i = static_cast<size_t>(index);
        if (cache->k.size() < m_layers.size()) {
            cache->k.resize(m_layers.size());
            cache->v.resize(m_layers.size());
        }
        K = cache->k[i].defined() ? at::cat({cache->k[i], kv}, 2) : kv;
        cache->k[i] = cache->v[i] = K; // the key is the value
    }
    if (hook) // the positions' keys (the compressed entries: m_compressedHook)
        hook(index, q, K, K);
    const int64_t S = K.size(2);
    const auto longs = x.options().dtype(at::kLong);
    const at::Tensor qPos = at::arange(firstPos, firstPos + T, longs).unsqueeze(1); // [T, 1]
    const at::Tensor keyPos = at::arange(S, longs).unsqueeze(0);                    // [1, S]
    const int64_t window = c.layerWindow[static_cast<size_t>(index)];
    // The window: keys at or before the query, fewer than `window` positions back.
    const at::Tensor inWindow =
        keyPos.le(qPos).logical_and(qPos.sub(keyPos).lt(window)).unsqueeze(0).expand({B, T, S});
    at::Tensor keys = K;         // [B, 1, (C +) S, D]: the entries (older first), then K
    at::Tensor keep = inWindow;  // the model's own: the window and the entries it attends
    at::Tensor valid = inWindow; // another method's: the window and every entry seen
    const int64_t rate = s.rateOf(index);
    if (rate > 0) {
        CompressorState uncached;
        CompressorState& st =
            cache ? compressorState(*cache, index, m_layers.size(), rate) : uncached;
        const at::Tensor& invFreq = m_rope.invFreq; // the compress RoPE
        const double factor = c.rope.attentionFactor;
        st.kv = appended(st.kv, project(x, L.cmpKvW));
        st.gate = appended(st.gate, project(x, L.cmpGateW));
        st.entries = extendEntries(st.entries, st.kv, st.gate, {L.cmpBias, L.cmpNormW}, rate, eps,
                                   invFreq, factor, rot);
        const int64_t C = st.entries.size(1);
        // An entry pools positions up to (w + 1)·rate − 1: query p sees entries w < (p + 1) / rate.
        const at::Tensor ready =
            at::arange(C, longs).unsqueeze(0).lt((qPos + 1).div(rate, "floor")); // [T, C]
        at::Tensor seen = ready.unsqueeze(0).expand({B, T, C});
        at::Tensor scores; // the indexer's, for a capture
        if (s.indexed(index)) {
            // The lightning indexer on entries of its own: Σ_h w_h·ReLU(q_h·k)·Di^-½, the top k
            // of the ready ones.
            st.idxKv = appended(st.idxKv, project(x, L.idxCmpKvW));
            st.idxGate = appended(st.idxGate, project(x, L.idxCmpGateW));
            st.idxEntries =
                extendEntries(st.idxEntries, st.idxKv, st.idxGate, {L.idxCmpBias, L.idxCmpNormW},
                              rate, eps, invFreq, factor, rot);
            if (C > 0 && (!method || m_compressedHook)) // (a method chooses in its place)
                seen =
                    indexerPicks(qr, x, L, s, st.idxEntries, angles(invFreq, firstPos, T, factor),
                                 rot, ready, m_compressedHook ? &scores : nullptr);
            else if (m_compressedHook)
                scores = at::empty({B, T, 0}, x.options().dtype(at::kFloat));
        }
        if (m_compressedHook)
            m_compressedHook(index, st.entries, scores);
        keys = at::cat({st.entries.unsqueeze(1), K}, 2);
        keep = at::cat({seen, inWindow}, -1);
        valid = at::cat({ready.unsqueeze(0).expand({B, T, C}), inWindow}, -1);
    }
    at::Tensor y = at::empty({B, H, T, D}, x.options().dtype(at::kFloat));
    const at::Tensor sinks = L.sinks.to(at::kFloat);
    const double scale = std::pow(static_cast<double>(D), -0.5);
    if (method) {
        // The method over the entries (older first) and the window's keys, each query a decode
        // step with those valid, the head's sink in every softmax; a few query rows at a time.
        attention::AttentionConfig mc = attn;
        mc.scale = scale;
        mc.sinks = sinks;
        mc.slidingWindow = mc.chunk = 0; // the window is in `valid`
        mc.softcap = 0;
        mc.ropeInvFreq = at::Tensor(); // entries are not rotated by a position's angle
        mc.layer = index;
        attention::AttendOptions ao;
        ao.diagnostics = false;
        const int64_t N = keys.size(2);
        const int64_t per =
            std::max<int64_t>(1, kMaskedAttentionScores / std::max<int64_t>(1, B * H * N));
        for (int64_t t0 = 0; t0 < T; t0 += per) {
            const int64_t n = std::min(per, T - t0);
            attention::AttentionInputs in;
            in.q = q.narrow(2, t0, n);
            in.k = in.v = keys;
            in.valid = valid.narrow(1, t0, n);
            y.narrow(2, t0, n).copy_(attention::attendSteps(in, mc, ao).y);
        }
    } else {
        // softmax over [q·keys · D^-½ | the head's sink], in float32, the sink's share dropped;
        // the key is the value. A few query rows at a time.
        const int64_t N = keys.size(2);
        const at::Tensor kf = keys.to(at::kFloat), kt = kf.transpose(-1, -2);
        const int64_t per =
            std::max<int64_t>(1, kMaskedAttentionScores / std::max<int64_t>(1, B * H * N));
        for (int64_t t0 = 0; t0 < T; t0 += per) {
            const int64_t n = std::min(per, T - t0);
            const at::Tensor logits =
                (at::matmul(q.narrow(2, t0, n).to(at::kFloat), kt) * scale)
                    .masked_fill(keep.narrow(1, t0, n).logical_not().unsqueeze(1), kNegInf);
            const at::Tensor p =
                at::softmax(at::cat({logits, sinks.view({1, H, 1, 1}).expand({B, H, n, 1})}, -1),
                            -1)
                    .narrow(-1, 0, N);
            y.narrow(2, t0, n).copy_(at::matmul(p, kf));
        }
    }
    // The value's rotation undone at the query's position; then each group of heads to its
    // rank, the groups mixed to the hidden width.
    y = ropeTail(y.to(x.scalar_type()), ang, rot, /*inverse=*/true);
    const int64_t G = s.outGroups, in = H * D / G;
    const at::Tensor grouped = y.transpose(1, 2).reshape({B * T, G, in}).transpose(0, 1);
    const at::Tensor w = L.oAW.view({G, s.outRank, in}).transpose(1, 2); // [G, in, rank]
    const at::Tensor mid = at::bmm(grouped, w).transpose(0, 1).reshape({B, T, G * s.outRank});
    return project(mid, L.oW);
}

namespace {

/// mHC's mapping of the streams X [B, T, n, h] (transformers' DeepseekV4HyperConnection): from
/// the streams flattened and RMS-normalised in float32, the weights that collapse them into the
/// sublayer's input (pre, σ + eps), place its output in each stream (post, 2σ) and mix them (comb,
/// a softmax made doubly stochastic by Sinkhorn-Knopp).
struct HyperMix {
    at::Tensor post, comb, collapsed;
};
HyperMix hyperMix(const ModelConfig& c, const at::Tensor& X, const at::Tensor& fn,
                  const at::Tensor& base, const at::Tensor& scale) {
    const int64_t n = c.hyper.streams;
    const double eps = c.hyper.eps;
    const at::Tensor flat = X.flatten(2).to(at::kFloat);
    const at::Tensor mix = at::linear(
        flat * at::rsqrt(flat.square().mean(-1, /*keepdim=*/true) + c.normEps), fn.to(at::kFloat));
    const at::Tensor b = base.to(at::kFloat), sc = scale.to(at::kFloat);
    const at::Tensor pre = at::sigmoid(mix.narrow(-1, 0, n) * sc[0] + b.narrow(0, 0, n)) + eps;
    HyperMix m;
    m.post = 2 * at::sigmoid(mix.narrow(-1, n, n) * sc[1] + b.narrow(0, n, n));
    const std::vector<int64_t> square = [&] {
        std::vector<int64_t> v = mix.sizes().vec();
        v.back() = n;
        v.push_back(n);
        return v;
    }();
    at::Tensor comb = at::softmax(mix.narrow(-1, 2 * n, n * n).reshape(square) * sc[2] +
                                      b.narrow(0, 2 * n, n * n).view({n, n}),
                                  -1) +
                      eps;
    comb = comb / (comb.sum(-2, /*keepdim=*/true) + eps);
    for (int64_t i = 1; i < c.hyper.sinkhornIters; ++i) {
        comb = comb / (comb.sum(-1, /*keepdim=*/true) + eps);
        comb = comb / (comb.sum(-2, /*keepdim=*/true) + eps);
    }
    m.comb = comb;
    m.collapsed = (pre.unsqueeze(-1) * X).sum(2).to(X.scalar_type());
    return m;
}

/// The streams after a sublayer's output f [B, T, h]: post·f in each stream plus the streams
/// mixed by combᵀ, in X's dtype.
at::Tensor hyperCombine(const HyperMix& m, const at::Tensor& X, const at::Tensor& f) {
    const at::ScalarType dt = X.scalar_type();
    return m.post.to(dt).unsqueeze(-1) * f.unsqueeze(-2) +
           at::matmul(m.comb.to(dt).transpose(-1, -2), X);
}

} // namespace

at::Tensor CausalLMImpl::hyperBlock(int64_t index, const at::Tensor& X, KVCache* cache,
                                    int64_t firstPos, const attention::AttentionConfig& attn,
                                    const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const HyperMix a = hyperMix(m_config, X, L.attnHcFn, L.attnHcBase, L.attnHcScale);
    const at::Tensor h = hyperCombine(
        a, X,
        compressedAttention(index, norm(a.collapsed, L.norm1W, {}), cache, firstPos, attn, hook));
    const HyperMix f = hyperMix(m_config, h, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale);
    return hyperCombine(f, h, mlp(index, norm(f.collapsed, L.norm2W, {})));
}

at::Tensor CausalLMImpl::hyperHead(const at::Tensor& X) const {
    // hc_head: the streams weighed by σ(fn(norm(X))·scale + base) + eps, summed.
    const at::Tensor flat = X.flatten(2).to(at::kFloat);
    const at::Tensor mixes =
        at::linear(flat * at::rsqrt(flat.square().mean(-1, /*keepdim=*/true) + m_config.normEps),
                   m_hcHeadFn.to(at::kFloat));
    const at::Tensor pre =
        at::sigmoid(mixes * m_hcHeadScale.to(at::kFloat) + m_hcHeadBase.to(at::kFloat)) +
        m_config.hyper.eps;
    return (pre.unsqueeze(-1) * X).sum(2).to(X.scalar_type());
}

} // namespace sparqlab::model
