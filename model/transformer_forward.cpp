// The transformer's forward pass (transformer.h): embeddings, each block's norms, attention
// (q, K, V by the family's recipe, the KV cache, any method of the attention library), MLP or
// mixture of experts, and the head, as the Hugging Face modelling code computes them.

#include "transformer.h"

#include "attention/cuda/step.h"
#include "attention/select.h"
#include "model/input_error.h"
#include "model/rope.h"
#include "model/transformer_layer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace sparqlab::model {

namespace {

namespace cuda = attention::cuda;

/// Whether the fused kernels of a decode step (attention/cuda/step.h) take x: on a GPU, in a
/// storage dtype they have, in a build that has them.
bool fusable(const at::Tensor& x) {
    const at::ScalarType t = x.scalar_type();
    if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16)
        return false;
    // The kernels record no gradient: where one is being recorded, libtorch's operations run.
    if (at::GradMode::is_enabled() && x.requires_grad())
        return false;
    // (Tests: a replacement, the kernels' host emulation, takes host tensors instead.)
    return cuda::stepOpsForTesting() ? x.is_cpu() : x.is_cuda() && cuda::stepOpsBuilt();
}
/// The fused operations: this build's on a GPU, or the tests' replacement on the host.
cuda::StepOps ops() {
    const cuda::StepOps* test = cuda::stepOpsForTesting();
    return test ? *test : cuda::stepOps();
}
/// Where they launch: libtorch's current stream (a capture's while a step is recorded as CUDA
/// graphs); the host emulation takes none.
void* opStream() {
    return cuda::stepOpsForTesting() ? nullptr : DecodeGraphs::currentStream();
}
/// Whether t goes with x into a fused operation: fusable, of x's dtype and device.
bool fusesWith(const at::Tensor& t, const at::Tensor& x) {
    return fusable(t) && t.scalar_type() == x.scalar_type() && t.device() == x.device();
}
/// Whether the fused RMSNorm takes x with weight w (and a residual a, where defined).
bool fusedNormTakes(const at::Tensor& x, const at::Tensor& w, const at::Tensor& a = {}) {
    return fusable(x) && x.dim() >= 1 && x.numel() > 0 && w.defined() && w.dim() == 1 &&
           w.size(0) == x.size(-1) && fusesWith(w, x) &&
           (!a.defined() || (a.sizes() == x.sizes() && fusesWith(a, x)));
}
/// Whether t's data starts on a 16-byte boundary (the gemv kernel's loads).
bool aligned16(const at::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}
/// Whether the gemv kernel takes weight w (and bias b, where defined) for x.
bool gemvTakes(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return w.dim() == 2 && w.size(1) == x.size(-1) && fusesWith(w, x) && w.is_contiguous() &&
           aligned16(w) &&
           (!b.defined() ||
            (b.dim() == 1 && b.size(0) == w.size(0) && fusesWith(b, x) && b.is_contiguous()));
}
/// The products at::linear(x, wᵢ, bᵢ) of one x; with siluMul (two of equal width) the one
/// output silu(x·w₀ᵀ + b₀)·(x·w₁ᵀ + b₁), HF's act(gate_proj(x)) * up_proj(x). On a GPU at one to
/// four rows of x, one launch of the decode step's gemv kernel (step.h) for all of them where it
/// takes the shapes (SPARQLAB_CUDA_GEMV=0: libtorch's operations always, to compare).
std::vector<at::Tensor> projectAll(const at::Tensor& x,
                                   const std::vector<std::pair<at::Tensor, at::Tensor>>& wb,
                                   bool siluMul = false) {
    static const bool gemvOn = [] {
        const char* e = std::getenv("SPARQLAB_CUDA_GEMV");
        return !(e && std::string(e) == "0");
    }();
    const int64_t K = x.dim() >= 1 ? x.size(-1) : 0;
    const int64_t rows = K > 0 ? x.numel() / K : 0;
    bool takes = gemvOn && rows >= 1 && rows <= cuda::kGemvRows && K % 8 == 0 && fusable(x) &&
                 !wb.empty() && wb.size() <= 3 &&
                 (!siluMul || (wb.size() == 2 && wb[0].first.size(0) == wb[1].first.size(0)));
    for (const auto& [w, b] : wb)
        takes = takes && gemvTakes(x, w, b);
    const at::Tensor xc = takes ? x.contiguous() : at::Tensor();
    if (!takes || !aligned16(xc)) {
        std::vector<at::Tensor> out;
        for (const auto& [w, b] : wb)
            out.push_back(at::linear(x, w, b));
        if (siluMul)
            return {at::silu(out[0]) * out[1]};
        return out;
    }
    cuda::GemvStep p;
    p.storage = cuda::storageOf(x.scalar_type());
    p.x = xc.data_ptr();
    p.rows = rows;
    p.K = K;
    p.outputs = static_cast<int>(wb.size());
    p.siluMul = siluMul;
    std::vector<at::Tensor> out;
    std::vector<int64_t> sizes = x.sizes().vec(); // x's, the last the output's width
    for (size_t o = 0; o < wb.size(); ++o) {
        const auto& [w, b] = wb[o];
        sizes.back() = w.size(0);
        at::Tensor y = siluMul && o == 1 ? at::Tensor() : at::empty(sizes, x.options());
        p.out[o] = {w.data_ptr(), b.defined() ? b.data_ptr() : nullptr,
                    y.defined() ? y.data_ptr() : nullptr, w.size(0)};
        if (y.defined())
            out.push_back(y);
    }
    ops().gemv(p, opStream());
    return out;
}
/// at::linear(x, w, b), through projectAll.
at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
    return projectAll(x, {{w, b}})[0];
}

/// {x + a, RMSNorm(x + a)} (a undefined: {x, RMSNorm(x)}) in one kernel, as rmsNorm() and HF's
/// residual add compute them.
std::pair<at::Tensor, at::Tensor> fusedRmsNorm(const at::Tensor& x, const at::Tensor& a,
                                               const at::Tensor& w, double eps) {
    const at::Tensor xc = x.contiguous(), wc = w.contiguous();
    const at::Tensor ac = a.defined() ? a.contiguous() : at::Tensor();
    const at::Tensor sum = a.defined() ? at::empty_like(xc) : xc;
    const at::Tensor y = at::empty_like(xc);
    cuda::RmsNormStep p;
    p.storage = cuda::storageOf(x.scalar_type());
    p.x = xc.data_ptr();
    p.residual = a.defined() ? ac.data_ptr() : nullptr;
    p.sum = a.defined() ? sum.data_ptr() : nullptr;
    p.w = wc.data_ptr();
    p.y = y.data_ptr();
    p.width = x.size(-1);
    p.rows = xc.numel() / p.width;
    p.eps = static_cast<float>(eps);
    ops().rmsNorm(p, opStream());
    return {sum, y};
}

} // namespace

at::Tensor timesFloat(const at::Tensor& t, double s) {
    if (s == 1.0)
        return t;
    const at::ScalarType d = t.scalar_type();
    return d == at::kBFloat16 || d == at::kHalf ? (t.to(at::kFloat) * s).to(d) : t * s;
}

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps, bool plusOne,
                   bool weightInFloat) {
    if (!plusOne && !weightInFloat && fusedNormTakes(x, w))
        return fusedRmsNorm(x, {}, w, eps).second;
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor n = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    if (plusOne)
        return (n * (1.0 + w.to(at::kFloat))).to(x.scalar_type());
    if (weightInFloat)
        return (w.to(at::kFloat) * n).to(x.scalar_type());
    return w * n.to(x.scalar_type());
}

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

at::Tensor CausalLMImpl::norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
    const ModelConfig& c = m_config;
    if (c.layout != Layout::Llama)
        return at::layer_norm(x, {x.size(-1)}, w, b, c.normEps);
    if (c.layerNorm) { // Cohere: mean-centred, weight only, in float32
        const at::Tensor xf = x.to(at::kFloat);
        const at::Tensor mean = xf.mean(-1, /*keepdim=*/true);
        const at::Tensor var = (xf - mean).pow(2).mean(-1, /*keepdim=*/true);
        return (w.to(at::kFloat) * ((xf - mean) * at::rsqrt(var + c.normEps))).to(x.scalar_type());
    }
    return rmsNorm(x, w, c.normEps, c.normPlusOne, c.normWeightInFloat);
}

std::pair<at::Tensor, at::Tensor> CausalLMImpl::addNorm(const at::Tensor& x, const at::Tensor& a,
                                                        const at::Tensor& w,
                                                        const at::Tensor& b) const {
    const ModelConfig& c = m_config;
    if (c.layout == Layout::Llama && !c.layerNorm && !c.normPlusOne && !c.normWeightInFloat &&
        !b.defined() && fusedNormTakes(x, w, a))
        return fusedRmsNorm(x, a, w, c.normEps);
    const at::Tensor h = x + a;
    return {h, norm(h, w, b)};
}

at::Tensor CausalLMImpl::ropeInverseFrequencies(int64_t index) const {
    if (!m_config.usesRope(index) || !m_rope.invFreq.defined())
        return {};
    const RopeSpec& spec = m_config.ropeOf(index);
    return (&spec == &m_config.localRope ? m_localRope : m_rope).invFreq;
}

const RopeAngles& CausalLMImpl::layerAngles(int64_t firstPos, int64_t T, int64_t layer) const {
    const RopeSpec& spec = m_config.ropeOf(layer);
    const Rope& r = &spec == &m_config.localRope ? m_localRope : m_rope;
    // longrope: the long factors once this call reaches past the original context (HF decides
    // per forward call from its largest position), cos and sin scaled by the attention factor.
    const bool longFactors = r.longInvFreq.defined() && firstPos + T > spec.originalMax;
    return angles(longFactors ? r.longInvFreq : r.invFreq, firstPos, T, spec.attentionFactor);
}

void CausalLMImpl::ropeQK(at::Tensor& q, at::Tensor& k, int64_t firstPos, int64_t layer) const {
    const int64_t T = q.size(2), D = q.size(-1), rot = m_config.rotaryDim;
    const RopeAngles& a = layerAngles(firstPos, T, layer);
    // (Angles on another device than q, which the tables' living with the weights rules out,
    // go to libtorch's operations, which say so.)
    if (m_config.ropeLayout == RopeLayout::Half && fusable(q) && fusesWith(k, q) && q.dim() == 4 &&
        k.dim() == 4 && a.cos.device() == q.device() && k.size(0) == q.size(0) && k.size(2) == T &&
        k.size(3) == D && q.stride(3) == 1 && k.stride(3) == 1 && rot % 2 == 0 && rot > 0 &&
        rot <= D) {
        ropeHalfTables(a, q.scalar_type());
        at::Tensor qo = at::empty({q.size(0), q.size(1), T, D}, q.options());
        at::Tensor ko = at::empty({k.size(0), k.size(1), T, D}, k.options());
        cuda::RopeStep p;
        p.storage = cuda::storageOf(q.scalar_type());
        p.a = {q.data_ptr(), qo.data_ptr(), q.size(1), q.stride(0), q.stride(1), q.stride(2)};
        p.b = {k.data_ptr(), ko.data_ptr(), k.size(1), k.stride(0), k.stride(1), k.stride(2)};
        p.cos = a.halfCos.data_ptr();
        p.sin = a.halfSin.data_ptr();
        p.B = q.size(0);
        p.T = T;
        p.D = D;
        p.rot = rot;
        ops().rope(p, opStream());
        q = qo;
        k = ko;
        return;
    }
    q = applyRope(q, a, rot, m_config.ropeLayout);
    k = applyRope(k, a, rot, m_config.ropeLayout);
}

const RopeAngles& CausalLMImpl::angles(const at::Tensor& invFreq, int64_t firstPos, int64_t T,
                                       double factor) const {
    const AnglesKey key{invFreq.unsafeGetTensorImpl(), factor, firstPos, T};
    auto it = m_angles.find(key);
    if (it == m_angles.end())
        it = m_angles.emplace(key, ropeAngles(invFreq, firstPos, T, factor)).first;
    return it->second;
}

at::Tensor CausalLMImpl::embed(const at::Tensor& ids, int64_t firstPos) {
    at::Tensor x = at::embedding(m_embed, ids);
    if (m_config.embedScale > 0 && m_config.embedScaleInDtype) // Gemma: a tensor of x's dtype
        x = x * at::scalar_tensor(m_config.embedScale, x.options());
    else if (m_config.embedScale > 0) // Granite, Falcon-H1: a Python float, not rounded
        x = timesFloat(x, m_config.embedScale);
    if (m_config.layout == Layout::GPT2) {
        const at::Tensor pos = at::arange(firstPos, firstPos + ids.size(1), ids.options());
        x = x + at::embedding(m_positions, pos).unsqueeze(0);
    }
    return x;
}

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
        if (m_rope.invFreq.defined() && c.usesRope(index)) { // Kimi's MLA: NoPE
            const RopeAngles& a = angles(m_rope.invFreq, firstPos, T, c.rope.attentionFactor);
            qRot = applyRope(qRot, a, m.ropeDim, c.ropeLayout);
            kRot = applyRope(kRot, a, m.ropeDim, c.ropeLayout);
        }
        q = at::cat({q.narrow(-1, 0, m.nopeDim), qRot}, -1);
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
    if (m_rope.invFreq.defined() && c.usesRope(index)) {
        ropeQK(q, k, firstPos, index);
        if (c.qkL2Norm) { // Llama 4: after RoPE, on its RoPE layers
            q = l2Norm(q, c.normEps);
            k = l2Norm(k, c.normEps);
        }
    } else if (c.attnTemperatureScale > 0) {
        // Llama 4's NoPE layers: q ×= 1 + scale·log1p(⌊(pos + 1) / floor⌋), absolute positions.
        const at::Tensor pos = at::arange(firstPos, firstPos + T, q.options().dtype(at::kFloat));
        const at::Tensor t =
            at::log1p(at::floor((pos + 1.0) / c.attnTemperatureFloor)) * c.attnTemperatureScale +
            1.0;
        q = (q * t.view({1, 1, T, 1})).to(q.scalar_type());
    }
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

at::Tensor CausalLMImpl::mlp(int64_t index, const at::Tensor& x) {
    Layer& L = *m_layers[static_cast<size_t>(index)];
    const ModelConfig& c = m_config;
    if (!L.moe.routerW.defined())
        return denseMlp(L, x);
    const at::Tensor experts = moeForward(c, L.moe, x);
    // GraniteMoeHybrid: the experts' output + the shared MLP's (the dense MLP)
    return c.moe.denseBeside ? experts + denseMlp(L, x) : experts;
}

at::Tensor CausalLMImpl::denseMlp(const Layer& L, const at::Tensor& x) const {
    const ModelConfig& c = m_config;
    if (L.gateUpW.defined()) { // Phi-3, GLM-4, GraniteMoeHybrid: rows gate, up
        const at::Tensor gu = project(x, L.gateUpW);
        const int64_t f = c.intermediateSize;
        return project(gatedUnit(c, gu.narrow(-1, 0, f), gu.narrow(-1, f, f)), L.downW, L.downB);
    }
    if (c.layout == Layout::Llama && !c.gatedMlp) // Nemotron-H: down(act(up(x)))
        return project(activate(c, project(x, L.upW, L.upB)), L.downW, L.downB);
    if (c.layout == Layout::Llama) { // gate and up in one launch; SiLU and the product too
        const double gs = c.mup.gate, ds = c.mup.down; // Falcon-H1: act(gate·gs)·up, down·ds
        const bool silu = c.hiddenAct == "silu" && c.swigluLimit <= 0 && gs == 1.0;
        const std::vector<at::Tensor> gu =
            projectAll(x, {{L.gateW, L.gateB}, {L.upW, L.upB}}, silu);
        return timesFloat(
            project(silu ? gu[0] : gatedUnit(c, timesFloat(gu[0], gs), gu[1]), L.downW, L.downB),
            ds);
    }
    if (c.layout == Layout::GPTNeoX)
        return project(activate(c, project(x, L.upW, L.upB)), L.downW, L.downB);
    const auto sizes = x.sizes().vec();
    const at::Tensor h = activate(c, at::addmm(L.upB, x.reshape({-1, sizes.back()}), L.upW));
    return at::addmm(L.downB, h, L.downW).view(sizes);
}

at::Tensor CausalLMImpl::mixer(int64_t index, const at::Tensor& x, KVCache* cache, int64_t firstPos,
                               const attention::AttentionConfig& attn, const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const LayerKind kind = m_config.kindOf(index);
    if (!L.linear)
        return attention(index, x, cache, firstPos, attn, hook);
    const MupMultipliers& m = m_config.mup;
    LinearState* state = cache ? &cache->linearState(index, m_layers.size()) : nullptr;
    std::map<std::string, at::Tensor> trace;
    at::Tensor y = linearAttentionForward(m_config, *L.linear, kind, timesFloat(x, m.mambaIn),
                                          state, m_trace ? &trace : nullptr);
    for (const auto& [name, t] : trace)
        m_trace(index, "lin_" + name, t);
    if (kind == LayerKind::AttentionMamba2) // Falcon-H1: Mamba-2·m + attention·m', summed
        y = timesFloat(y, m.mambaOut) +
            timesFloat(attention(index, timesFloat(x, m.attnIn), cache, firstPos, attn, hook),
                       m.attnOut);
    return y;
}

at::Tensor CausalLMImpl::block(int64_t index, const at::Tensor& xIn, at::Tensor& pending,
                               KVCache* cache, int64_t firstPos,
                               const attention::AttentionConfig& attn, const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const bool plainPre = m_config.norms == NormPlacement::Pre && !m_config.parallelResidual &&
                          m_config.residualScale == 1.0;
    // The previous block's MLP output, added here: with this block's first norm in one fused
    // operation where the norms allow it (the same sums and roundings as adding it first).
    at::Tensor x = xIn, n1;
    if (pending.defined()) {
        if (plainPre)
            std::tie(x, n1) = addNorm(xIn, pending, L.norm1W, L.norm1B);
        else
            x = xIn + pending;
        pending = at::Tensor();
    }
    switch (m_config.norms) {
    case NormPlacement::Sandwich: // Gemma 2/3, GLM-4: x + post(f(pre(x))), attention and MLP
    case NormPlacement::SandwichGlm4: {
        const at::Tensor h =
            x + norm(attention(index, norm(x, L.norm1W, {}), cache, firstPos, attn, hook),
                     L.postAttnW, {});
        return h + norm(mlp(index, norm(h, L.norm2W, {})), L.postFfnW, {});
    }
    case NormPlacement::Post: { // OLMo 2/3: x + norm(f(x))
        const at::Tensor h =
            x + norm(attention(index, x, cache, firstPos, attn, hook), L.postAttnW, {});
        return h + norm(mlp(index, h), L.postFfnW, {});
    }
    case NormPlacement::Parallel: { // Cohere 2: x + attn(n(x)) + mlp(n(x)) on one norm
        const at::Tensor n = norm(x, L.norm1W, {});
        const at::Tensor a = attention(index, n, cache, firstPos, attn, hook);
        return x + a + mlp(index, n);
    }
    case NormPlacement::Single: { // Nemotron-H: x + f(norm(x)), f the mixer or the MLP
        const at::Tensor n = norm(x, L.norm1W, {});
        return x + (m_config.kindOf(index) == LayerKind::Mlp
                        ? mlp(index, n)
                        : mixer(index, n, cache, firstPos, attn, hook));
    }
    case NormPlacement::NormedResidual: { // MiniMax-01: α·n + β·f(n), n the normed input
        const ResidualFactors& r = m_config.residual; // (or α·x + β·f(n): postnorm false)
        const bool linear = m_config.isLinear(index);
        const at::Tensor n = norm(x, L.norm1W, {});
        const at::Tensor h =
            timesFloat(r.fromNormed ? n : x, linear ? r.linearAlpha : r.attnAlpha) +
            timesFloat(mixer(index, n, cache, firstPos, attn, hook),
                       linear ? r.linearBeta : r.attnBeta);
        const at::Tensor n2 = norm(h, L.norm2W, {});
        return timesFloat(r.fromNormed ? n2 : h, r.mlpAlpha) +
               timesFloat(mlp(index, n2), r.mlpBeta);
    }
    case NormPlacement::Pre:
        break;
    }
    const at::Tensor a =
        mixer(index, n1.defined() ? n1 : norm(x, L.norm1W, L.norm1B), cache, firstPos, attn, hook);
    if (m_config.parallelResidual) // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
        return x + a + mlp(index, norm(x, L.norm2W, L.norm2B));
    const double rs = m_config.residualScale; // Granite: x + m·f(…)
    if (rs != 1.0) {
        const at::Tensor h = x + timesFloat(a, rs);
        return h + timesFloat(mlp(index, norm(h, L.norm2W, L.norm2B)), rs);
    }
    const auto [h, n] = addNorm(x, a, L.norm2W, L.norm2B);
    if (!m_trace) { // the residual add left to the next block's norm (or the final one)
        pending = mlp(index, n);
        return h;
    }
    return h + mlp(index, n);
}

at::Tensor CausalLMImpl::forward(const at::Tensor& idsIn, KVCache* cache,
                                 const attention::AttentionConfig& attn, const CaptureHook& hook,
                                 bool lastLogitsOnly) {
    if (idsIn.dim() != 2)
        throw InputError("token ids must be [batch, length]");
    const int64_t firstPos = cache ? cache->length() : 0;
    const int64_t T = idsIn.size(1);
    if (firstPos + T > m_config.maxPositions)
        throw InputError("the sequence (" + std::to_string(firstPos + T) +
                         " tokens) is longer than the model's context of " +
                         std::to_string(m_config.maxPositions) +
                         " positions (max_position_embeddings)");
    // Ids on the host are checked; ids on the device are a decode step's own argmax (checking
    // them would wait for the device at every step).
    if (idsIn.numel() > 0 && idsIn.device().is_cpu() &&
        (idsIn.min().item<int64_t>() < 0 || idsIn.max().item<int64_t>() >= m_config.vocabSize))
        throw InputError("token ids must lie in 0.." + std::to_string(m_config.vocabSize - 1));
    const at::Tensor ids = idsIn.to(device()); // where the weights are
    DecodeGraphs* graphs = graphsFor(ids, cache, hook, attn);
    if (graphs && graphs->recorded()) { // a replay: the attention of each layer between graphs
        writeAngles(*graphs, firstPos);
        return graphs->replay(
            ids, [&](int64_t i, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                return attend(i, {}, {}, q, k, v, cache, firstPos, attn, {});
            });
    }
    m_angles.clear();
    if (graphs) {
        graphs->abandon({});
        recordAngles(*graphs, firstPos); // before the capture: they are the graphs' inputs
    }
    at::Tensor logits;
    try {
        m_recording = graphs;
        const struct Unset { // m_recording ends with this call, however it ends
            DecodeGraphs*& recording;
            ~Unset() { recording = nullptr; }
        } unset{m_recording};
        at::Tensor x = embed(graphs ? graphs->begin(ids) : ids, firstPos);
        if (m_trace)
            m_trace(0, "embed", x);
        at::Tensor pending; // a block's MLP output not yet added to x (block())
        m_lastSelection = m_lastScores = at::Tensor();
        for (int64_t i = 0; i < static_cast<int64_t>(m_layers.size()); ++i) {
            if (m_trace)
                m_trace(i, "mixer_in",
                        m_layers[static_cast<size_t>(i)]->norm1W.defined()
                            ? norm(x, m_layers[static_cast<size_t>(i)]->norm1W, {})
                            : x);
            x = block(i, x, pending, cache, firstPos, attn, hook);
            if (m_trace)
                m_trace(i, "layer_out", x);
        }
        logits = head(x, pending, lastLogitsOnly);
        if (graphs)
            logits = graphs->end(logits);
    } catch (const InputError&) {
        if (graphs)
            graphs->abandon({});
        throw;
    } catch (const std::exception& e) {
        if (!graphs)
            throw;
        // Recording failed (an operation a capture cannot hold): the layers that appended to the
        // cache are rewound, and this step and every later one run eagerly.
        graphs->abandon(std::string("recording a decode step as CUDA graphs failed: ") + e.what());
        m_angles.clear();
        cache->truncate(firstPos);
        return forward(idsIn, cache, attn, hook, lastLogitsOnly);
    } catch (...) {
        if (graphs)
            graphs->abandon("recording a decode step as CUDA graphs failed");
        throw;
    }
    m_lastSelection = m_lastScores = at::Tensor();
    m_angles.clear();
    return logits.to(at::kFloat);
}

at::Tensor CausalLMImpl::head(at::Tensor x, at::Tensor pending, bool lastLogitsOnly) const {
    if (lastLogitsOnly) {
        x = x.narrow(1, x.size(1) - 1, 1);
        if (pending.defined())
            pending = pending.narrow(1, pending.size(1) - 1, 1);
    }
    x = pending.defined() ? addNorm(x, pending, m_finalNormW, m_finalNormB).second
                          : norm(x, m_finalNormW, m_finalNormB);
    at::Tensor logits = project(x, m_lmHead.defined() ? m_lmHead : m_embed);
    // Cohere's logit_scale, Granite's 1 / logits_scaling, Falcon-H1's lm_head_multiplier
    logits = timesFloat(logits, m_config.logitScale);
    if (m_config.finalSoftcap > 0) // Gemma 2: cap·tanh(logits / cap)
        logits = at::tanh(logits / m_config.finalSoftcap) * m_config.finalSoftcap;
    return logits;
}

bool CausalLMImpl::graphable() const {
    const ModelConfig& c = m_config;
    if (c.layout == Layout::GPT2 || m_positions.defined() || c.mla.kvLoraRank > 0 ||
        c.indexer.active() || c.attnTemperatureScale > 0)
        return false;
    for (const auto& L : m_layers)
        if (L->linear || L->moe.routerW.defined())
            return false;
    return true;
}

DecodeGraphs* CausalLMImpl::graphsFor(const at::Tensor& ids, KVCache* cache,
                                      const CaptureHook& hook,
                                      const attention::AttentionConfig& attn) {
    // The cache must copy what it keeps (capacity: the decode caches, or buffers written in
    // place), not hold the graphs' own q, k and v, which the next replay overwrites; and nothing
    // may keep them for observation (observe: the stateful methods' state after dense steps).
    if (!cache || !cache->cudaGraphs || cache->capacity <= 0 || cache->observe ||
        !DecodeGraphs::available() || ids.size(1) != 1 || !device().is_cuda() || hook || m_trace ||
        m_indexerHook || at::GradMode::is_enabled() || !graphable())
        return nullptr;
    if (!cache->graphs)
        cache->graphs = std::make_shared<DecodeGraphs>();
    DecodeGraphs& g = *cache->graphs;
    if (!g.failure().empty())
        return nullptr;
    if (g.recorded() && g.batch() == ids.size(0))
        return &g;
    // A recording: not in a step of a stateful method, whose state a failed recording could not
    // rewind (a later step records).
    if (attention::methodInfo(attn.method).stateful)
        return nullptr;
    return &g;
}

void CausalLMImpl::recordAngles(DecodeGraphs& g, int64_t firstPos) const {
    for (int64_t i = 0; i < static_cast<int64_t>(m_layers.size()); ++i) {
        if (!m_rope.invFreq.defined() || !m_config.usesRope(i))
            continue;
        const RopeAngles& a = layerAngles(firstPos, 1, i);
        ropeHalfTables(a, dtype()); // the rotate-half tables too, as the layers take them
        const bool known = std::any_of(g.angles.begin(), g.angles.end(),
                                       [&](const auto& e) { return e.second.cos.is_same(a.cos); });
        if (!known)
            g.angles.emplace_back(i, a);
    }
}

void CausalLMImpl::writeAngles(DecodeGraphs& g, int64_t firstPos) const {
    m_angles.clear();
    for (auto& [layer, table] : g.angles) {
        const RopeAngles& a = layerAngles(firstPos, 1, layer);
        table.cos.copy_(a.cos);
        table.sin.copy_(a.sin);
        if (table.halfCos.defined()) {
            ropeHalfTables(a, table.halfCos.scalar_type());
            table.halfCos.copy_(a.halfCos);
            table.halfSin.copy_(a.halfSin);
        }
    }
    m_angles.clear();
}

at::Tensor& KVCache::indexKeys(int64_t layer, size_t layers) {
    if (indexerKeys.size() < layers)
        indexerKeys.resize(layers);
    return indexerKeys[static_cast<size_t>(layer)];
}

LinearState& KVCache::linearState(int64_t layer, size_t layers) {
    if (linear.size() < layers)
        linear.resize(layers);
    if (!linear[static_cast<size_t>(layer)])
        linear[static_cast<size_t>(layer)] = std::make_shared<LinearState>();
    return *linear[static_cast<size_t>(layer)];
}

int64_t KVCache::length() const {
    for (const auto& f : fast)
        if (f)
            return f->length();
    for (const at::Tensor& t : k)
        if (t.defined())
            return t.size(2);
    return 0;
}

namespace {

/// A deep copy of linear layers' states (a null stays null).
std::vector<std::shared_ptr<LinearState>>
copyStates(const std::vector<std::shared_ptr<LinearState>>& states) {
    std::vector<std::shared_ptr<LinearState>> out;
    for (const auto& s : states) {
        std::shared_ptr<LinearState> c;
        if (s) {
            c = std::make_shared<LinearState>();
            if (s->recurrent.defined())
                c->recurrent = s->recurrent.clone();
            if (s->conv.defined())
                c->conv = s->conv.clone();
        }
        out.push_back(c);
    }
    return out;
}

} // namespace

std::vector<std::shared_ptr<LinearState>> KVCache::copyLinear() const {
    return copyStates(linear);
}

void KVCache::truncate(int64_t n, const std::vector<std::shared_ptr<LinearState>>* linearAtN) {
    if (linearAtN) {
        linear = copyStates(*linearAtN); // a copy: the saved one serves the next rewind too
    } else if (n < length() && !linear.empty()) {
        throw InputError(
            "a linear-attention layer's recurrent state cannot be rewound to an earlier position");
    }
    for (auto& t : indexerKeys)
        if (t.defined() && t.size(1) > n)
            t = t.narrow(1, 0, n);
    for (auto& f : fast)
        if (f)
            f->truncate(n);
    for (size_t i = 0; i < k.size(); ++i)
        if (k[i].defined() && k[i].size(2) > n) {
            k[i] = k[i].narrow(2, 0, n);
            v[i] = v[i].narrow(2, 0, n);
        }
}

} // namespace sparqlab::model
