#include "transformer.h"

#include "capture/safetensors.h"

#include <ATen/ATen.h>

#include <cmath>

namespace sparqlab::capture {

namespace {

/// A module that only holds named parameters and named children, so that parameter names
/// come out as the Hugging Face state-dict names ("model.layers.0.self_attn.q_proj.weight").
class NodeImpl : public torch::nn::Module {
public:
    at::Tensor param(const std::string& name, std::vector<int64_t> shape) {
        // Allocated but not touched: loading replaces the data, so peak memory stays ~1×.
        return register_parameter(name, at::empty(shape));
    }
    std::shared_ptr<NodeImpl> child(const std::string& name) {
        return register_module(name, std::make_shared<NodeImpl>());
    }
};

bool isLlamaFamily(Architecture a) {
    return a == Architecture::Llama || a == Architecture::Mistral || a == Architecture::Qwen2 ||
           a == Architecture::Gemma;
}

} // namespace

/// The tensors of one block. Fused projections (GPT-NeoX, GPT-2) use `qkv`.
struct CausalLMImpl::Layer {
    at::Tensor norm1W, norm1B, norm2W, norm2B;
    at::Tensor qW, qB, kW, kB, vW, vB, qkvW, qkvB, oW, oB;
    at::Tensor gateW, gateB, upW, upB, downW, downB;
};

CausalLMImpl::CausalLMImpl(const ModelConfig& c) : m_config(c) {
    const int64_t h = c.hiddenSize, q = c.nHeads * c.headDim, kv = c.nKvHeads * c.headDim;
    const int64_t f = c.intermediateSize, V = c.vocabSize;
    if (isLlamaFamily(c.arch)) {
        auto model = register_module("model", std::make_shared<NodeImpl>());
        m_embed = model->child("embed_tokens")->param("weight", {V, h});
        auto layers = model->child("layers");
        for (int64_t i = 0; i < c.nLayers; ++i) {
            auto n = layers->child(std::to_string(i));
            auto L = std::make_shared<Layer>();
            L->norm1W = n->child("input_layernorm")->param("weight", {h});
            L->norm2W = n->child("post_attention_layernorm")->param("weight", {h});
            auto a = n->child("self_attn");
            auto qp = a->child("q_proj"), kp = a->child("k_proj"), vp = a->child("v_proj"),
                 op = a->child("o_proj");
            L->qW = qp->param("weight", {q, h});
            L->kW = kp->param("weight", {kv, h});
            L->vW = vp->param("weight", {kv, h});
            L->oW = op->param("weight", {h, q});
            if (c.qkvBias) {
                L->qB = qp->param("bias", {q});
                L->kB = kp->param("bias", {kv});
                L->vB = vp->param("bias", {kv});
            }
            if (c.outBias)
                L->oB = op->param("bias", {h});
            auto m = n->child("mlp");
            auto gp = m->child("gate_proj"), up = m->child("up_proj"), dp = m->child("down_proj");
            L->gateW = gp->param("weight", {f, h});
            L->upW = up->param("weight", {f, h});
            L->downW = dp->param("weight", {h, f});
            if (c.mlpBias) {
                L->gateB = gp->param("bias", {f});
                L->upB = up->param("bias", {f});
                L->downB = dp->param("bias", {h});
            }
            m_layers.push_back(L);
        }
        m_finalNormW = model->child("norm")->param("weight", {h});
        if (!c.tieEmbeddings)
            m_lmHead =
                register_module("lm_head", std::make_shared<NodeImpl>())->param("weight", {V, h});
    } else if (c.arch == Architecture::GPTNeoX) {
        auto model = register_module("gpt_neox", std::make_shared<NodeImpl>());
        m_embed = model->child("embed_in")->param("weight", {V, h});
        auto layers = model->child("layers");
        for (int64_t i = 0; i < c.nLayers; ++i) {
            auto n = layers->child(std::to_string(i));
            auto L = std::make_shared<Layer>();
            auto n1 = n->child("input_layernorm"), n2 = n->child("post_attention_layernorm");
            L->norm1W = n1->param("weight", {h});
            L->norm1B = n1->param("bias", {h});
            L->norm2W = n2->param("weight", {h});
            L->norm2B = n2->param("bias", {h});
            auto a = n->child("attention");
            auto qkv = a->child("query_key_value"), d = a->child("dense");
            L->qkvW = qkv->param("weight", {3 * h, h});
            L->oW = d->param("weight", {h, h});
            if (c.qkvBias) {
                L->qkvB = qkv->param("bias", {3 * h});
                L->oB = d->param("bias", {h});
            }
            auto m = n->child("mlp");
            auto up = m->child("dense_h_to_4h"), down = m->child("dense_4h_to_h");
            L->upW = up->param("weight", {f, h});
            L->upB = up->param("bias", {f});
            L->downW = down->param("weight", {h, f});
            L->downB = down->param("bias", {h});
            m_layers.push_back(L);
        }
        auto fn = model->child("final_layer_norm");
        m_finalNormW = fn->param("weight", {h});
        m_finalNormB = fn->param("bias", {h});
        if (!c.tieEmbeddings)
            m_lmHead =
                register_module("embed_out", std::make_shared<NodeImpl>())->param("weight", {V, h});
    } else { // GPT-2: Conv1D weights are [in, out]
        auto model = register_module("transformer", std::make_shared<NodeImpl>());
        m_embed = model->child("wte")->param("weight", {V, h});
        m_positions = model->child("wpe")->param("weight", {c.maxPositions, h});
        auto layers = model->child("h");
        for (int64_t i = 0; i < c.nLayers; ++i) {
            auto n = layers->child(std::to_string(i));
            auto L = std::make_shared<Layer>();
            auto n1 = n->child("ln_1"), n2 = n->child("ln_2");
            L->norm1W = n1->param("weight", {h});
            L->norm1B = n1->param("bias", {h});
            L->norm2W = n2->param("weight", {h});
            L->norm2B = n2->param("bias", {h});
            auto a = n->child("attn");
            auto ca = a->child("c_attn"), cp = a->child("c_proj");
            L->qkvW = ca->param("weight", {h, 3 * h});
            L->qkvB = ca->param("bias", {3 * h});
            L->oW = cp->param("weight", {h, h});
            L->oB = cp->param("bias", {h});
            auto m = n->child("mlp");
            auto fc = m->child("c_fc"), pr = m->child("c_proj");
            L->upW = fc->param("weight", {h, f});
            L->upB = fc->param("bias", {f});
            L->downW = pr->param("weight", {f, h});
            L->downB = pr->param("bias", {h});
            m_layers.push_back(L);
        }
        auto lf = model->child("ln_f");
        m_finalNormW = lf->param("weight", {h});
        m_finalNormB = lf->param("bias", {h});
        if (!c.tieEmbeddings)
            m_lmHead =
                register_module("lm_head", std::make_shared<NodeImpl>())->param("weight", {V, h});
    }

    // RoPE inverse frequencies, computed as HF does in float32 (rotate_half layout).
    if (c.rotaryDim > 0 && c.arch != Architecture::GPT2) {
        const int64_t rot = c.rotaryDim;
        at::Tensor exponent =
            at::arange(0, rot, 2, at::kLong).to(at::kFloat) / static_cast<double>(rot);
        m_invFreq = 1.0 / at::pow(at::scalar_tensor(c.ropeTheta, at::kFloat), exponent);
        if (c.ropeScalingType == "llama3") {
            const double lowWavelen = c.ropeOriginalMax / c.ropeLowFreqFactor;
            const double highWavelen = c.ropeOriginalMax / c.ropeHighFreqFactor;
            const at::Tensor wavelen = 2 * M_PI / m_invFreq;
            const at::Tensor scaled = m_invFreq / c.ropeFactor;
            const at::Tensor smooth = (c.ropeOriginalMax / wavelen - c.ropeLowFreqFactor) /
                                      (c.ropeHighFreqFactor - c.ropeLowFreqFactor);
            const at::Tensor mid = (1 - smooth) * scaled + smooth * m_invFreq;
            m_invFreq = at::where(wavelen.lt(highWavelen), m_invFreq,
                                  at::where(wavelen.gt(lowWavelen), scaled, mid));
        } else if (c.ropeScalingType == "linear") {
            m_invFreq = m_invFreq / c.ropeFactor;
        }
    }
}

void CausalLMImpl::loadWeights(const Checkpoint& checkpoint, at::ScalarType dtype) {
    torch::NoGradGuard noGrad;
    for (auto& p : named_parameters()) {
        at::Tensor t = checkpoint.load(p.key(), dtype, p.value().sizes().vec());
        bool finite = true; // checked in slices: a whole-tensor mask would cost 25% more memory
        const at::Tensor flat = t.view(-1);
        for (int64_t i = 0; finite && i < flat.numel(); i += int64_t{1} << 22)
            finite = at::isfinite(flat.slice(0, i, i + (int64_t{1} << 22))).all().item<bool>();
        if (!finite)
            throw CheckpointError(checkpoint.fileOf(p.key()) + ": tensor '" + p.key() +
                                  "' holds NaN or infinite values");
        p.value().set_data(t);
    }
}

void CausalLMImpl::initWeights(uint64_t seed) {
    torch::NoGradGuard noGrad;
    auto gen = at::detail::createCPUGenerator(seed);
    constexpr double kStd = 0.02; // HF initializer_range
    for (auto& p : named_parameters()) {
        at::Tensor t = at::empty(p.value().sizes(), at::kFloat);
        const std::string& name = p.key();
        const bool isNormOrBias =
            name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos ||
            (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
        if (isNormOrBias)
            t.fill_(name.find("bias") != std::string::npos || m_config.arch == Architecture::Gemma
                        ? 0.0
                        : 1.0);
        else
            t.normal_(0.0, kStd, gen);
        p.value().set_data(t);
    }
}

at::Tensor CausalLMImpl::norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
    if (!isLlamaFamily(m_config.arch))
        return at::layer_norm(x, {m_config.hiddenSize}, w, b, m_config.normEps);
    // RMSNorm in float32 (HF LlamaRMSNorm); Gemma scales by (1 + w).
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor n = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + m_config.normEps);
    if (m_config.arch == Architecture::Gemma)
        return (n * (1.0 + w.to(at::kFloat))).to(x.scalar_type());
    return w * n.to(x.scalar_type());
}

at::Tensor CausalLMImpl::rope(const at::Tensor& x, int64_t firstPos) const {
    // x [B, H, T, D]; rotate_half on the first rotaryDim dims (dim i pairs with i + rot/2).
    const int64_t T = x.size(2), rot = m_config.rotaryDim;
    const at::Tensor pos = at::arange(firstPos, firstPos + T, at::kLong).to(at::kFloat);
    const at::Tensor freqs = at::outer(pos, m_invFreq);
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    const at::Tensor cos = emb.cos().to(x.scalar_type()), sin = emb.sin().to(x.scalar_type());
    const at::Tensor xr = x.narrow(-1, 0, rot);
    const at::Tensor rotated =
        at::cat({xr.narrow(-1, rot / 2, rot / 2).neg(), xr.narrow(-1, 0, rot / 2)}, -1);
    const at::Tensor out = xr * cos + rotated * sin;
    if (rot == x.size(-1))
        return out;
    return at::cat({out, x.narrow(-1, rot, x.size(-1) - rot)}, -1);
}

at::Tensor CausalLMImpl::embed(const at::Tensor& ids, int64_t firstPos) {
    at::Tensor x = at::embedding(m_embed, ids);
    if (m_config.arch == Architecture::Gemma) // HF: sqrt(hidden) rounded to the hidden dtype
        x = x * static_cast<float>(std::sqrt(static_cast<double>(m_config.hiddenSize)));
    if (m_config.arch == Architecture::GPT2) {
        const at::Tensor pos = at::arange(firstPos, firstPos + ids.size(1), at::kLong);
        x = x + at::embedding(m_positions, pos).unsqueeze(0);
    }
    return x;
}

at::Tensor CausalLMImpl::attention(int64_t index, const at::Tensor& x, KVCache* cache,
                                   int64_t firstPos, const attention::AttentionConfig& attn,
                                   const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const ModelConfig& c = m_config;
    const int64_t B = x.size(0), T = x.size(1), D = c.headDim;
    at::Tensor q, k, v;
    if (isLlamaFamily(c.arch)) {
        q = at::linear(x, L.qW, L.qB).view({B, T, c.nHeads, D}).transpose(1, 2);
        k = at::linear(x, L.kW, L.kB).view({B, T, c.nKvHeads, D}).transpose(1, 2);
        v = at::linear(x, L.vW, L.vB).view({B, T, c.nKvHeads, D}).transpose(1, 2);
    } else if (c.arch == Architecture::GPTNeoX) {
        // Fused output laid out per head as [H, 3, D].
        const at::Tensor qkv = at::linear(x, L.qkvW, L.qkvB).view({B, T, c.nHeads, 3 * D});
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
    if (m_invFreq.defined()) {
        q = rope(q, firstPos);
        k = rope(k, firstPos);
    }
    at::Tensor K = k.contiguous(), V = v.contiguous();
    attention::CausalState* state = nullptr;
    attention::DecodeCache* fast = nullptr;
    if (cache) {
        const size_t i = static_cast<size_t>(index);
        if (cache->k.size() < m_layers.size()) {
            cache->k.resize(m_layers.size());
            cache->v.resize(m_layers.size());
            cache->state.resize(m_layers.size());
        }
        const at::ScalarType st = K.scalar_type();
        const bool fastStorage = st == at::kFloat || st == at::kHalf || st == at::kBFloat16;
        if (cache->capacity > 0 && fastStorage && K.device().is_cpu() && !K.requires_grad()) {
            if (cache->fast.size() < m_layers.size())
                cache->fast.resize(m_layers.size());
            if (!cache->fast[i])
                cache->fast[i] = std::make_shared<attention::DecodeCache>(
                    B, c.nKvHeads, D, cache->capacity, st,
                    cache->dimensionMajor || attn.method == attention::Method::Sparq);
            fast = cache->fast[i].get();
            fast->append(K, V);
            K = fast->keys();
            V = fast->values();
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
    const attention::AttentionConfig cfg = layerAttention(index, attn);
    if (hook)
        hook(index, q, K, V);
    at::Tensor y;
    if (fast && T == 1 && attention::decodeSupports(cfg) &&
        (cfg.method == attention::Method::Dense || fast->dimensionMajor())) {
        if (!cache->engine)
            cache->engine = std::make_shared<attention::DecodeAttention>();
        y = cache->engine->run(q.select(2, 0), *fast, cfg).unsqueeze(2).to(x.scalar_type());
    } else {
        y = attention::attendCausal(q, K, V, firstPos, cfg, state).to(x.scalar_type());
    }
    const at::Tensor merged = y.transpose(1, 2).reshape({B, T, c.nHeads * D});
    if (c.arch == Architecture::GPT2)
        return at::addmm(L.oB, merged.reshape({B * T, -1}), L.oW).view({B, T, c.hiddenSize});
    return at::linear(merged, L.oW, L.oB);
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
    return cfg;
}

at::Tensor CausalLMImpl::mlp(int64_t index, const at::Tensor& x) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const std::string& act = m_config.hiddenAct;
    auto activate = [&act](const at::Tensor& t) {
        if (act == "silu")
            return at::silu(t);
        if (act == "gelu")
            return at::gelu(t);
        return at::gelu(t, "tanh"); // gelu_new, gelu_pytorch_tanh
    };
    if (isLlamaFamily(m_config.arch))
        return at::linear(activate(at::linear(x, L.gateW, L.gateB)) * at::linear(x, L.upW, L.upB),
                          L.downW, L.downB);
    if (m_config.arch == Architecture::GPTNeoX)
        return at::linear(activate(at::linear(x, L.upW, L.upB)), L.downW, L.downB);
    const auto sizes = x.sizes().vec();
    const at::Tensor h = activate(at::addmm(L.upB, x.reshape({-1, sizes.back()}), L.upW));
    return at::addmm(L.downB, h, L.downW).view(sizes);
}

at::Tensor CausalLMImpl::block(int64_t index, const at::Tensor& x, KVCache* cache, int64_t firstPos,
                               const attention::AttentionConfig& attn, const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    const at::Tensor a = attention(index, norm(x, L.norm1W, L.norm1B), cache, firstPos, attn, hook);
    if (m_config.parallelResidual) // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
        return x + a + mlp(index, norm(x, L.norm2W, L.norm2B));
    const at::Tensor h = x + a;
    return h + mlp(index, norm(h, L.norm2W, L.norm2B));
}

at::Tensor CausalLMImpl::forward(const at::Tensor& ids, KVCache* cache,
                                 const attention::AttentionConfig& attn, const CaptureHook& hook) {
    if (ids.dim() != 2)
        throw attention::AttentionError("token ids must be [batch, length]");
    const int64_t firstPos = cache ? cache->length() : 0;
    const int64_t T = ids.size(1);
    if (firstPos + T > m_config.maxPositions)
        throw attention::AttentionError("the sequence (" + std::to_string(firstPos + T) +
                                        " tokens) is longer than the model's context of " +
                                        std::to_string(m_config.maxPositions) +
                                        " positions (max_position_embeddings)");
    if (ids.numel() > 0 &&
        (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= m_config.vocabSize))
        throw attention::AttentionError("token ids must lie in 0.." +
                                        std::to_string(m_config.vocabSize - 1));
    at::Tensor x = embed(ids, firstPos);
    for (int64_t i = 0; i < static_cast<int64_t>(m_layers.size()); ++i)
        x = block(i, x, cache, firstPos, attn, hook);
    x = norm(x, m_finalNormW, m_finalNormB);
    return at::linear(x, m_lmHead.defined() ? m_lmHead : m_embed).to(at::kFloat);
}

void KVCache::truncate(int64_t n) {
    for (auto& f : fast)
        if (f)
            f->truncate(n);
}

} // namespace sparqlab::capture
