// A block's attention (transformer.h): q, K and V by the family's recipe (fused or separate
// projections, MLA's latents, per-head or whole-projection norms, RoPE or none), the KV cache,
// DSA's and MiniMax-M3's selected keys or any method of the attention library, and the output
// projection, as the Hugging Face modelling code computes them. The rest of the forward pass is
// in transformer_forward.cpp.

#include "transformer.h"

#include "attention/select.h"
#include "model/input_error.h"
#include "model/rope.h"
#include "model/transformer_layer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace sparqlab::model {

namespace {

/// Llama 4's L2 norm of q and k: x·rsqrt(mean(x²) + eps) in float32, no weight.
at::Tensor l2Norm(const at::Tensor& x, double eps) {
    const at::Tensor xf = x.to(at::kFloat);
    return (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
}

/// Eager attention over the keys `selected` marks (DSA: [B, T, S], causal and in the indexer's
/// top k; MiniMax-M3: [B, G, T, S], one selection for each group of Hq / G query heads):
/// softmax(q·Kᵀ·scale) over them, × V. q [B, Hq, T, D], K [B, Hkv, S, D], V [B, Hkv, S, Dv];
/// float32 scores as HF's eager kernel. Returns float32 [B, Hq, T, Dv]. Where `state` observes
/// (a prefill before a stateful method takes over), the probabilities are what it observes, as
/// the dense path's are: the queries sit at positions firstPos….
at::Tensor maskedAttention(const at::Tensor& q, const at::Tensor& K, const at::Tensor& V,
                           const at::Tensor& selected, const attention::AttentionConfig& cfg,
                           int64_t firstPos, attention::CausalState* state) {
    const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
    const int64_t Hkv = K.size(1), S = K.size(2), Dv = V.size(3), g = Hq / Hkv;
    const double scale = cfg.scale ? *cfg.scale : 1.0 / std::sqrt(static_cast<double>(D));
    const at::Tensor Kt = K.to(at::kFloat).transpose(-1, -2); // [B, Hkv, D, S]
    const at::Tensor Vf = V.to(at::kFloat);
    at::Tensor out = at::empty({B, Hq, T, Dv}, q.options().dtype(at::kFloat));
    const bool observe = state && state->observe;
    at::Tensor probs = observe ? at::empty({B, Hq, T, S}, out.options()) : at::Tensor();
    // A few query rows at a time, each KV head's g query heads together against its own keys
    // (query head h reads KV head h / g): the scores of every row at once would be B·Hq·T·S.
    const int64_t per =
        std::max<int64_t>(1, kMaskedAttentionScores / std::max<int64_t>(1, B * Hq * S));
    for (int64_t t0 = 0; t0 < T; t0 += per) {
        const int64_t n = std::min(per, T - t0);
        const at::Tensor qc = q.narrow(2, t0, n).to(at::kFloat).reshape({B, Hkv, g * n, D});
        at::Tensor logits = (at::matmul(qc, Kt) * scale).view({B, Hq, n, S});
        const at::Tensor rows = selected.narrow(-2, t0, n);
        const at::Tensor keep =
            rows.dim() == 3 ? rows.unsqueeze(1) : rows.repeat_interleave(Hq / rows.size(1), 1);
        const at::Tensor p = at::softmax(
            logits.masked_fill_(keep.logical_not(), -std::numeric_limits<float>::infinity()), -1);
        out.narrow(2, t0, n).copy_(at::matmul(p.view({B, Hkv, g * n, S}), Vf).view({B, Hq, n, Dv}));
        if (observe)
            probs.narrow(2, t0, n).copy_(p);
    }
    if (observe)
        attention::observeCausal(q, K, V, firstPos, probs, *state);
    return out;
}

} // namespace

void CausalLMImpl::projections(int64_t index, const at::Tensor& x, int64_t firstPos, at::Tensor& q,
                               at::Tensor& k, at::Tensor& v, at::Tensor* gate,
                               at::Tensor* qLatent) const {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const ModelConfig& c = m_config;
    const int64_t B = x.size(0), T = x.size(1), D = c.headDim, Dv = c.valueDim();
    if (c.mla.kvLoraRank > 0) {
        // MLA (DeepSeek-V3): q from its low-rank projection, per head [nope | rope]; one latent
        // per position gives each head's [k_nope | v], and one rotary key all heads share.
        const MlaSpec& m = c.mla;
        constexpr double kLatentEps = 1e-6; // q_a_layernorm, kv_a_layernorm: RMSNorm's default
        if (L.qAW.defined()) {
            const at::Tensor latent =
                rmsNorm(project(x, L.qAW, L.qAB), L.qANormW, kLatentEps, false, false);
            if (qLatent) // DSA's indexer reads it too
                *qLatent = latent;
            q = project(latent, L.qBW);
        } else {
            q = project(x, L.qW);
        }
        q = q.view({B, T, c.nHeads, D}).transpose(1, 2);
        const at::Tensor ckv = project(x, L.kvAW, L.kvAB); // [B, T, kv_lora + rope]
        const at::Tensor kv =
            project(rmsNorm(ckv.narrow(-1, 0, m.kvLoraRank), L.kvANormW, kLatentEps, false, false),
                    L.kvBW)
                .view({B, T, c.nHeads, m.nopeDim + Dv})
                .transpose(1, 2);
        at::Tensor qRot = q.narrow(-1, m.nopeDim, m.ropeDim);
        at::Tensor kRot = ckv.narrow(-1, m.kvLoraRank, m.ropeDim).view({B, 1, T, m.ropeDim});
        const bool rotated = m_rope.invFreq.defined() && c.usesRope(index); // (Kimi's: NoPE)
        if (rotated) {
            const RopeAngles& a = angles(m_rope.invFreq, firstPos, T, c.rope.attentionFactor);
            qRot = applyRope(qRot, a, m.ropeDim, c.ropeLayout);
            kRot = applyRope(kRot, a, m.ropeDim, c.ropeLayout);
        }
        q = at::cat({q.narrow(-1, 0, m.nopeDim), qRot}, -1);
        if (!rotated || c.attnTemperatureEveryLayer) // (Mistral 4: after RoPE, the whole q)
            q = tempered(q, firstPos);
        k = at::cat({kv.narrow(-1, 0, m.nopeDim), kRot.expand({B, c.nHeads, T, m.ropeDim})}, -1);
        v = kv.narrow(-1, m.nopeDim, Dv);
        return;
    }
    if (c.layout == Layout::Llama) {
        if (L.qkvW.defined()) { // Phi-3: rows q, k, v
            const at::Tensor qkv = project(x, L.qkvW);
            q = qkv.narrow(-1, 0, c.nHeads * D);
            k = qkv.narrow(-1, c.nHeads * D, c.nKvHeads * D);
            v = qkv.narrow(-1, (c.nHeads + c.nKvHeads) * D, c.nKvHeads * Dv);
        } else {
            const std::vector<at::Tensor> qkv =
                projectAll(x, {{L.qW, L.qB}, {L.kW, L.kB}, {L.vW, L.vB}});
            q = qkv[0];
            k = qkv[1];
            v = qkv[2];
        }
        if (L.qAdapter[0].defined()) { // Zamba2: this hybrid layer's own low-rank adapters
            q = q + project(project(x, L.qAdapter[0]), L.qAdapter[1]);
            k = k + project(project(x, L.kAdapter[0]), L.kAdapter[1]);
            v = v + project(project(x, L.vAdapter[0]), L.vAdapter[1]);
        }
        if (c.gatedAttention) { // Qwen3-Next: per head [q | gate]
            const at::Tensor qg = q.view({B, T, c.nHeads, 2 * D});
            if (gate)
                *gate = qg.narrow(-1, D, D).reshape({B, T, c.nHeads * D});
            q = qg.narrow(-1, 0, D);
        }
        if (c.qkNorm == QkNorm::Whole) { // OLMo 2/3: over the whole projection
            q = norm(q, L.qNormW, {});
            k = norm(k, L.kNormW, {});
        }
        k = timesFloat(k, c.mup.key); // Falcon-H1: before RoPE (the cache holds scaled keys)
        q = q.reshape({B, T, c.nHeads, D});
        k = k.reshape({B, T, c.nKvHeads, D});
        if (c.qkNorm == QkNorm::PerHead) { // Qwen 3, Gemma 3: each head, before RoPE
            q = norm(q, L.qNormW, {});
            k = norm(k, L.kNormW, {});
        }
        q = q.transpose(1, 2);
        k = k.transpose(1, 2);
        v = v.reshape({B, T, c.nKvHeads, Dv}).transpose(1, 2);
    } else if (c.layout == Layout::GPTNeoX) {
        // Fused output laid out per head as [H, 3, D].
        const at::Tensor qkv = project(x, L.qkvW, L.qkvB).view({B, T, c.nHeads, 3 * D});
        q = qkv.narrow(-1, 0, D).transpose(1, 2);
        k = qkv.narrow(-1, D, D).transpose(1, 2);
        v = qkv.narrow(-1, 2 * D, D).transpose(1, 2);
    } else { // GPT-2: [q | k | v], each hidden wide
        const at::Tensor qkv = at::addmm(L.qkvB, x.reshape({B * T, c.hiddenSize}), L.qkvW)
                                   .view({B, T, 3, c.nHeads, D});
        q = qkv.select(2, 0).transpose(1, 2);
        k = qkv.select(2, 1).transpose(1, 2);
        v = qkv.select(2, 2).transpose(1, 2);
    }
    const bool rotated = m_rope.invFreq.defined() && c.usesRope(index);
    if (rotated) {
        ropeQK(q, k, firstPos, index);
        if (c.qkL2Norm) { // Llama 4: after RoPE, on its RoPE layers
            q = l2Norm(q, c.normEps);
            k = l2Norm(k, c.normEps);
        }
    }
    if (!rotated || c.attnTemperatureEveryLayer)
        q = tempered(q, firstPos);
}

at::Tensor CausalLMImpl::tempered(const at::Tensor& q, int64_t firstPos) const {
    // q ×= 1 + scale·log1p(⌊(pos + shift) / floor⌋), absolute positions (Llama 4's NoPE layers;
    // Mistral 4's every layer)
    const ModelConfig& c = m_config;
    if (c.attnTemperatureScale <= 0)
        return q;
    const int64_t T = q.size(2);
    const at::Tensor pos = at::arange(firstPos, firstPos + T, q.options().dtype(at::kFloat));
    const at::Tensor t =
        at::log1p(at::floor((pos + c.attnTemperatureShift) / c.attnTemperatureFloor)) *
            c.attnTemperatureScale +
        1.0;
    if (c.attnTemperatureEveryLayer) // Mistral: the scale cast to q's dtype first
        return q * t.to(q.scalar_type()).view({1, 1, T, 1});
    return (q * t.view({1, 1, T, 1})).to(q.scalar_type()); // Llama 4: the float32 product
}

at::Tensor CausalLMImpl::attention(int64_t index, const at::Tensor& x, KVCache* cache,
                                   int64_t firstPos, const attention::AttentionConfig& attn,
                                   const CaptureHook& hook) {
    at::Tensor q, k, v, gate, qLatent;
    projections(index, x, firstPos, q, k, v, &gate, &qLatent);
    if (m_recording) // a step recorded as CUDA graphs: the attention runs between two of them
        m_recording->cut(q, k, v);
    at::Tensor y = attend(index, x, qLatent, q, k, v, cache, firstPos, attn, hook);
    y = m_recording ? m_recording->resume(y, x.scalar_type()) : y.to(x.scalar_type());
    return attentionOutput(index, y, gate);
}

at::Tensor CausalLMImpl::attend(int64_t index, const at::Tensor& x, const at::Tensor& qLatent,
                                const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                KVCache* cache, int64_t firstPos,
                                const attention::AttentionConfig& attn, const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const ModelConfig& c = m_config;
    const int64_t B = q.size(0), T = q.size(2), Dv = c.valueDim();
    at::Tensor K = k.contiguous(), V = v.contiguous();
    attention::CausalState* state = nullptr;
    attention::DecodeCache* fast = nullptr;
    if (cache) {
        const size_t i = static_cast<size_t>(index);
        if (cache->k.size() < m_layers.size()) {
            cache->k.resize(m_layers.size());
            cache->v.resize(m_layers.size());
        }
        if (cache->state.size() < m_layers.size()) { // also after a caller cleared the states
            cache->state.resize(m_layers.size());
            for (attention::CausalState& st : cache->state) {
                st.observe = cache->observe;
                st.observeConfig = cache->observeConfig;
            }
        }
        const at::ScalarType st = K.scalar_type();
        const bool fastStorage = st == at::kFloat || st == at::kHalf || st == at::kBFloat16;
        // The preallocated cache holds keys and values of one head dimension (not MLA's).
        if (cache->capacity > 0 && fastStorage && !K.requires_grad() && Dv == c.headDim) {
            if (cache->fast.size() < m_layers.size())
                cache->fast.resize(m_layers.size());
            if (!cache->fast[i])
                cache->fast[i] = std::make_shared<attention::DecodeCache>(
                    B, c.nKvHeads, c.headDim, cache->capacity, st,
                    cache->dimensionMajor || attention::decodeNeedsDimensionMajor(attn),
                    K.device());
            fast = cache->fast[i].get();
            fast->append(K, V);
            K = fast->keys();
            V = fast->values();
        } else if (cache->capacity > 0 && !K.requires_grad()) {
            // Keys and values of their own widths (MLA) written in place into buffers of the
            // capacity: a step appends one position instead of copying the whole cache.
            if (cache->kStore.size() < m_layers.size()) {
                cache->kStore.resize(m_layers.size());
                cache->vStore.resize(m_layers.size());
            }
            at::Tensor &ks = cache->kStore[i], &vs = cache->vStore[i];
            const int64_t len = cache->k[i].defined() ? cache->k[i].size(2) : 0;
            if (len + T > cache->capacity)
                throw InputError("the KV cache holds " + std::to_string(cache->capacity) +
                                 " positions, not " + std::to_string(len + T));
            if (!ks.defined()) {
                ks = at::empty({B, K.size(1), cache->capacity, K.size(3)}, K.options());
                vs = at::empty({B, V.size(1), cache->capacity, V.size(3)}, V.options());
            }
            ks.narrow(2, len, T).copy_(K);
            vs.narrow(2, len, T).copy_(V);
            K = cache->k[i] = ks.narrow(2, 0, len + T);
            V = cache->v[i] = vs.narrow(2, 0, len + T);
        } else {
            if (cache->k[i].defined()) {
                K = at::cat({cache->k[i], K}, 2);
                V = at::cat({cache->v[i], V}, 2);
            }
            cache->k[i] = K;
            cache->v[i] = V;
        }
        state = &cache->state[i];
    }
    attention::AttentionConfig cfg = layerAttention(index, attn);
    // The indexer method on a layer without an indexer (MiniMax-M3's full-attention layers): the
    // layer as trained, every causal key.
    if (cfg.method == attention::Method::Indexer && c.indexer.active() && !c.indexer.on(index))
        cfg.method = attention::Method::Dense;
    if (hook)
        hook(index, q, K, V);
    // DSA: the model's own indexer picks the keys for its own (dense) attention, the indexer
    // method at its own k; any other method takes the indexer's place. A layer reusing the previous
    // one's selection (GLM-5) takes it. MiniMax-M3: each indexer head picks blocks of keys for its
    // group of query heads, for the model's own attention.
    at::Tensor selection;
    if (c.indexer.on(index)) {
        at::Tensor uncached; // this call's keys alone
        at::Tensor& keys = cache ? cache->indexKeys(index, m_layers.size()) : uncached;
        if (c.indexer.blocks()) {
            const RopeAngles* a = m_rope.invFreq.defined() && c.usesRope(index)
                                      ? &layerAngles(firstPos, T, index)
                                      : nullptr;
            // The indexer method at k keys: the top ⌈k / block⌉ blocks. Another method takes the
            // selection's place: every block, which computes none (the keys are still cached).
            const int64_t top = cfg.method == attention::Method::Indexer
                                    ? attention::blocksForKeys(cfg.k, c.indexer.blockSize)
                                : cfg.method == attention::Method::Dense
                                    ? c.indexer.topK
                                    : std::numeric_limits<int64_t>::max();
            at::Tensor blockScores; // for the trace and a capture
            selection = blockIndexerSelect(c, L, x, a, firstPos, keys, top,
                                           m_trace || m_indexerHook ? &blockScores : nullptr);
            // Every causal key kept (a prompt within the top blocks): plain attention, by any
            // engine (the decode kernels, H2O's observation).
            if (!selection.defined() && cfg.method == attention::Method::Indexer)
                cfg.method = attention::Method::Dense;
            if (m_trace) {
                m_trace(index, "idx_block_scores", blockScores);
                if (selection.defined())
                    m_trace(index, "idx_selected", selection);
            }
            if (m_indexerHook)
                m_indexerHook(index, blockScores);
        } else if (c.indexer.reuses(index) && m_lastSelection.defined()) {
            selection = m_lastSelection;
            if (m_trace) // GLM-5's shared layer: the selection it takes
                m_trace(index, "idx_selected", selection);
        } else {
            selection = indexerSelect(
                c, L, x, qLatent, c.usesRope(index) ? m_rope.invFreq : at::Tensor(), firstPos, keys,
                cfg.method == attention::Method::Indexer ? cfg.k : c.indexer.topK, &m_lastScores);
            if (m_trace) {
                m_trace(index, "idx_scores", m_lastScores);
                m_trace(index, "idx_selected", selection);
            }
        }
        if (!c.indexer.blocks()) {
            m_lastSelection = selection;
            if (m_indexerHook)
                m_indexerHook(index, m_lastScores);
        }
    }
    // The model's own selection: dense (the model as trained) or the indexer method at its k.
    if (selection.defined() &&
        (cfg.method == attention::Method::Dense || cfg.method == attention::Method::Indexer))
        return maskedAttention(q, K, V, selection, cfg, firstPos, state);
    // The decode engine for one query (a stateful method keeps its state in the causal path:
    // RocketKV's second stage runs over what its first stage kept there).
    if (fast && T == 1 && attention::decodeSupports(cfg) &&
        !attention::methodInfo(cfg.method).stateful &&
        (!attention::decodeNeedsDimensionMajor(cfg) || fast->dimensionMajor())) {
        if (!cache->engine)
            cache->engine = std::make_shared<attention::DecodeAttention>();
        attention::prepareDecodeCache(*fast, cfg); // Quest's pages, Loki's projection
        return cache->engine->run(q.select(2, 0), *fast, cfg).unsqueeze(2);
    }
    return attention::attendCausal(q, K, V, firstPos, cfg, state);
}

at::Tensor CausalLMImpl::attentionOutput(int64_t index, const at::Tensor& y,
                                         const at::Tensor& gate) const {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const ModelConfig& c = m_config;
    const int64_t B = y.size(0), T = y.size(2);
    at::Tensor merged = y.transpose(1, 2).reshape({B, T, c.nHeads * c.valueDim()});
    if (gate.defined()) // gated attention: × σ(gate) before o_proj
        merged = merged * at::sigmoid(gate);
    if (c.layout == Layout::GPT2)
        return at::addmm(L.oB, merged.reshape({B * T, -1}), L.oW).view({B, T, c.hiddenSize});
    return project(merged, L.oW, L.oB);
}

attention::AttentionConfig
CausalLMImpl::layerAttention(int64_t index, const attention::AttentionConfig& base) const {
    attention::AttentionConfig cfg = base;
    const ModelConfig& c = m_config;
    const double defaultScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    if (std::abs(c.attnScale - defaultScale) > 1e-12 * defaultScale)
        cfg.scale = c.attnScale;
    cfg.softcap = c.attnSoftcap;
    cfg.layer = index; // which layer of a calibration (Loki's basis, Double Sparsity's channels)
    if (index >= 0 && index < static_cast<int64_t>(c.layerWindow.size()))
        cfg.slidingWindow = c.layerWindow[static_cast<size_t>(index)];
    cfg.chunk = c.chunkOf(index);
    if (index >= 0 && index < static_cast<int64_t>(m_layers.size()) &&
        m_layers[static_cast<size_t>(index)]->sinks.defined())
        cfg.sinks = m_layers[static_cast<size_t>(index)]->sinks.detach().to(at::kFloat);
    // The RoPE as a plain rotate-half rotation of the whole head (Expected Attention's future
    // rotation, ShadowKV's pre-RoPE keys), where it is one.
    if (index >= 0 && index < c.nLayers && c.mla.kvLoraRank == 0 &&
        c.ropeLayout == RopeLayout::Half && c.rotaryDim == c.headDim &&
        c.ropeOf(index).attentionFactor == 1.0) {
        const at::Tensor f = ropeInverseFrequencies(index);
        const Rope& r = &c.ropeOf(index) == &c.localRope ? m_localRope : m_rope;
        if (f.defined() && !r.longInvFreq.defined()) {
            // Converted once, not at every layer of every step.
            if (!r.invFreqDouble.defined() || r.invFreqDouble.device() != f.device())
                r.invFreqDouble = f.to(at::kDouble);
            cfg.ropeInvFreq = r.invFreqDouble;
        }
    }
    return cfg;
}

} // namespace sparqlab::model
