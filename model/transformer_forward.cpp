// The transformer's forward pass (transformer.h): embeddings, each block's norms and residuals,
// its mixer (attention: transformer_attention.cpp; a linear-attention or Mamba layer:
// linear_attention.cpp), MLP or mixture of experts (moe.cpp), the head, the decode step's fused
// kernels and CUDA graphs, and the KV cache, as the Hugging Face modelling code computes them.

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
} // namespace

std::vector<at::Tensor> projectAll(const at::Tensor& x,
                                   const std::vector<std::pair<at::Tensor, at::Tensor>>& wb,
                                   bool siluMul) {
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
at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return projectAll(x, {{w, b}})[0];
}

namespace {

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

at::Tensor CausalLMImpl::mlp(int64_t index, const at::Tensor& x) {
    Layer& L = *m_layers[static_cast<size_t>(index)];
    const ModelConfig& c = m_config;
    if (!L.moe.routerW.defined())
        return denseMlp(L, x);
    const at::Tensor experts = moeForward(c, L.moe, x, m_ids);
    // GraniteMoeHybrid: the experts' output + the shared MLP's (the dense MLP)
    return c.moe.denseBeside ? experts + denseMlp(L, x) : experts;
}

at::Tensor CausalLMImpl::denseMlp(const Layer& L, const at::Tensor& x) const {
    const ModelConfig& c = m_config;
    if (L.gateUpW.defined()) { // Phi-3, GLM-4, GraniteMoeHybrid: rows gate, up
        at::Tensor gu = project(x, L.gateUpW);
        if (L.gateUpAdapter[0].defined()) // Zamba2: the hybrid layer's own adapter
            gu = gu + project(project(x, L.gateUpAdapter[0]), L.gateUpAdapter[1]);
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
    if (kind == LayerKind::AttentionMamba2 && m_config.norms != NormPlacement::SharedBlock)
        // Falcon-H1: Mamba-2·m + attention·m', summed (Zamba2's block runs apart: block())
        y = timesFloat(y, m.mambaOut) +
            timesFloat(attention(index, timesFloat(x, m.attnIn), cache, firstPos, attn, hook),
                       m.attnOut);
    return y;
}

at::Tensor CausalLMImpl::block(int64_t index, const at::Tensor& xIn, at::Tensor& pending,
                               KVCache* cache, int64_t firstPos,
                               const attention::AttentionConfig& attn, const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const NormPlacement norms = m_config.normsOf(index);
    const bool plainPre =
        norms == NormPlacement::Pre && !m_config.parallelResidual && m_config.residualScale == 1.0;
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
    switch (norms) {
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
    case NormPlacement::SharedBlock: { // Zamba2: x + mamba(norm(x + t))
        if (!m_config.isAttention(index))
            return x + mixer(index, norm(x, L.norm1W, {}), cache, firstPos, attn, hook);
        // t: the shared block, no residual of its own, on [x | the token embeddings]
        const at::Tensor a = attention(index, norm(at::cat({x, m_embedded}, -1), L.blockNormW, {}),
                                       cache, firstPos, attn, hook);
        const at::Tensor t = project(mlp(index, norm(a, L.norm2W, {})), L.linkW);
        return x + mixer(index, norm(x + t, L.norm1W, {}), cache, firstPos, attn, hook);
    }
    case NormPlacement::Pre:
    case NormPlacement::PostAttentionPreLinear: // (normsOf gives Pre or Post)
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
        m_embedded = m_config.shared.blocks > 0 ? x : at::Tensor();
        if (m_trace)
            m_trace(0, "embed", x);
        at::Tensor pending; // a block's MLP output not yet added to x (block())
        m_lastSelection = m_lastScores = at::Tensor();
        m_ids = ids;
        if (m_config.hyper.streams > 0) { // DeepSeek-V4: the residual as n streams
            at::Tensor X = x.unsqueeze(2)
                               .expand({x.size(0), x.size(1), m_config.hyper.streams, x.size(2)})
                               .contiguous();
            for (int64_t i = 0; i < static_cast<int64_t>(m_layers.size()); ++i) {
                X = hyperBlock(i, X, cache, firstPos, attn, hook);
                if (m_trace)
                    m_trace(i, "layer_out", X);
            }
            x = hyperHead(X);
        }
        for (int64_t i = 0;
             i < static_cast<int64_t>(m_layers.size()) && m_config.hyper.streams == 0; ++i) {
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
    m_lastSelection = m_lastScores = m_embedded = m_ids = at::Tensor();
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
    for (auto& st : compressors) // (the entries of windows that end past n go)
        if (st && st->kv.defined() && st->kv.size(1) > n) {
            for (at::Tensor* t : {&st->kv, &st->gate, &st->idxKv, &st->idxGate})
                if (t->defined())
                    *t = t->narrow(1, 0, n);
            for (at::Tensor* t : {&st->entries, &st->idxEntries})
                if (t->defined() && t->size(1) > n / st->rate)
                    *t = t->narrow(1, 0, n / st->rate);
        }
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
