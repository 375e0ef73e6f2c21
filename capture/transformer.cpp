#include "transformer.h"

#include "capture/safetensors.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>

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

/// RoPE inverse frequencies of `rope` over `rot` dimensions, as HF computes them in float32;
/// for longrope the short factors (`longFactors` false) or the long ones.
at::Tensor inverseFrequencies(const RopeSpec& rope, int64_t rot, bool longFactors = false) {
    const at::Tensor exponent =
        at::arange(0, rot, 2, at::kLong).to(at::kFloat) / static_cast<double>(rot);
    at::Tensor invFreq = 1.0 / at::pow(at::scalar_tensor(rope.theta, at::kFloat), exponent);
    if (rope.scaling == "llama3") {
        const double lowWavelen = static_cast<double>(rope.originalMax) / rope.lowFreqFactor;
        const double highWavelen = static_cast<double>(rope.originalMax) / rope.highFreqFactor;
        const at::Tensor wavelen = 2 * M_PI / invFreq;
        const at::Tensor scaled = invFreq / rope.factor;
        const at::Tensor smooth =
            (static_cast<double>(rope.originalMax) / wavelen - rope.lowFreqFactor) /
            (rope.highFreqFactor - rope.lowFreqFactor);
        const at::Tensor mid = (1 - smooth) * scaled + smooth * invFreq;
        invFreq = at::where(wavelen.lt(highWavelen), invFreq,
                            at::where(wavelen.gt(lowWavelen), scaled, mid));
    } else if (rope.scaling == "linear") {
        invFreq = invFreq / rope.factor;
    } else if (rope.scaling == "longrope") {
        // 1 / (ext_factors · base^(2i/dim))
        const at::Tensor ext =
            at::tensor(longFactors ? rope.longFactor : rope.shortFactor, at::kDouble)
                .to(at::kFloat);
        invFreq = 1.0 / (ext * at::pow(at::scalar_tensor(rope.theta, at::kFloat), exponent));
    }
    return invFreq;
}

} // namespace

/// The tensors of one block. Fused projections (GPT-NeoX, GPT-2) use `qkv`.
struct CausalLMImpl::Layer {
    at::Tensor norm1W, norm1B, norm2W, norm2B; ///< before attention and before the MLP
    at::Tensor postAttnW, postFfnW;            ///< after attention / the MLP (Gemma 2/3, OLMo 2)
    at::Tensor qW, qB, kW, kB, vW, vB, qkvW, qkvB, oW, oB;
    at::Tensor qNormW, kNormW; ///< Qwen 3, Gemma 3 (per head), OLMo 2 (whole projection)
    at::Tensor gateW, gateB, upW, upB, downW, downB, gateUpW;
};

CausalLMImpl::CausalLMImpl(const ModelConfig& c) : m_config(c) {
    const int64_t h = c.hiddenSize, q = c.nHeads * c.headDim, kv = c.nKvHeads * c.headDim;
    const int64_t f = c.intermediateSize, V = c.vocabSize;
    if (c.layout == Layout::Llama) {
        // Gemma 3's vision-language folders hold the text model under language_model.
        std::shared_ptr<NodeImpl> base;
        if (!c.weightPrefix.empty())
            base = register_module(c.weightPrefix.substr(0, c.weightPrefix.size() - 1),
                                   std::make_shared<NodeImpl>());
        auto top = [&](const std::string& name) {
            return base ? base->child(name) : register_module(name, std::make_shared<NodeImpl>());
        };
        auto model = top("model");
        m_embed = model->child("embed_tokens")->param("weight", {V, h});
        auto layers = model->child("layers");
        for (int64_t i = 0; i < c.nLayers; ++i) {
            auto n = layers->child(std::to_string(i));
            auto L = std::make_shared<Layer>();
            if (c.norms != NormPlacement::Post)
                L->norm1W = n->child("input_layernorm")->param("weight", {h});
            if (c.norms == NormPlacement::Pre) {
                L->norm2W = n->child("post_attention_layernorm")->param("weight", {h});
            } else {
                L->postAttnW = n->child("post_attention_layernorm")->param("weight", {h});
                if (c.norms == NormPlacement::Sandwich)
                    L->norm2W = n->child("pre_feedforward_layernorm")->param("weight", {h});
                L->postFfnW = n->child("post_feedforward_layernorm")->param("weight", {h});
            }
            auto a = n->child("self_attn");
            if (c.fusedQkv) {
                L->qkvW = a->child("qkv_proj")->param("weight", {q + 2 * kv, h});
            } else {
                auto qp = a->child("q_proj"), kp = a->child("k_proj"), vp = a->child("v_proj");
                L->qW = qp->param("weight", {q, h});
                L->kW = kp->param("weight", {kv, h});
                L->vW = vp->param("weight", {kv, h});
                if (c.qkvBias) {
                    L->qB = qp->param("bias", {q});
                    L->kB = kp->param("bias", {kv});
                    L->vB = vp->param("bias", {kv});
                }
            }
            auto op = a->child("o_proj");
            L->oW = op->param("weight", {h, q});
            if (c.outBias)
                L->oB = op->param("bias", {h});
            if (c.qkNorm == QkNorm::PerHead) {
                L->qNormW = a->child("q_norm")->param("weight", {c.headDim});
                L->kNormW = a->child("k_norm")->param("weight", {c.headDim});
            } else if (c.qkNorm == QkNorm::Whole) {
                L->qNormW = a->child("q_norm")->param("weight", {q});
                L->kNormW = a->child("k_norm")->param("weight", {kv});
            }
            auto m = n->child("mlp");
            if (c.fusedGateUp) {
                L->gateUpW = m->child("gate_up_proj")->param("weight", {2 * f, h});
            } else {
                auto gp = m->child("gate_proj"), up = m->child("up_proj");
                L->gateW = gp->param("weight", {f, h});
                L->upW = up->param("weight", {f, h});
                if (c.mlpBias) {
                    L->gateB = gp->param("bias", {f});
                    L->upB = up->param("bias", {f});
                }
            }
            auto dp = m->child("down_proj");
            L->downW = dp->param("weight", {h, f});
            if (c.mlpBias)
                L->downB = dp->param("bias", {h});
            m_layers.push_back(L);
        }
        m_finalNormW = model->child("norm")->param("weight", {h});
        if (!c.tieEmbeddings)
            m_lmHead = top("lm_head")->param("weight", {V, h});
    } else if (c.layout == Layout::GPTNeoX) {
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

    // RoPE inverse frequencies, computed as HF does in float32 (rotate_half layout): the
    // global layers' and, where they differ (Gemma 3), the sliding layers'; longrope's long
    // factors beside its short ones.
    if (c.rotaryDim > 0 && c.layout != Layout::GPT2) {
        m_rope.invFreq = inverseFrequencies(c.rope, c.rotaryDim);
        if (c.rope.scaling == "longrope")
            m_rope.longInvFreq = inverseFrequencies(c.rope, c.rotaryDim, /*longFactors=*/true);
        if (!c.layerLocalRope.empty())
            m_localRope.invFreq = inverseFrequencies(c.localRope, c.rotaryDim);
    }
}

void CausalLMImpl::loadWeights(const Checkpoint& checkpoint, at::ScalarType dtype,
                               const std::function<void(int64_t, int64_t)>& progress,
                               bool mapStored) {
    torch::NoGradGuard noGrad;
    int64_t total = 0, done = 0;
    for (const auto& p : named_parameters())
        total += p.value().numel() * static_cast<int64_t>(at::elementSize(dtype));
    for (auto& p : named_parameters()) {
        const std::vector<int64_t> shape = p.value().sizes().vec();
        const std::string stored = checkpoint.dtypeOf(p.key());
        const bool same = mapStored && ((dtype == at::kFloat && stored == "F32") ||
                                        (dtype == at::kBFloat16 && stored == "BF16") ||
                                        (dtype == at::kHalf && stored == "F16"));
        at::Tensor t =
            same ? checkpoint.map(p.key(), shape) : checkpoint.load(p.key(), dtype, shape);
        bool finite = true; // checked in slices: a whole-tensor mask would cost 25% more memory
        const at::Tensor flat = t.view(-1);
        for (int64_t i = 0; finite && i < flat.numel(); i += int64_t{1} << 22)
            finite = at::isfinite(flat.slice(0, i, i + (int64_t{1} << 22))).all().item<bool>();
        if (!finite)
            throw CheckpointError(checkpoint.fileOf(p.key()) + ": tensor '" + p.key() +
                                  "' holds NaN or infinite values");
        p.value().set_data(t);
        done += t.numel() * static_cast<int64_t>(at::elementSize(dtype));
        if (progress)
            progress(done, total);
    }
}

void CausalLMImpl::checkShapes(const Checkpoint& ck, const std::string& configPath) const {
    const ModelConfig& c = m_config;
    if (c.layout != Layout::Llama || c.nLayers < 1)
        return;
    const std::string attn = c.weightPrefix + "model.layers.0.self_attn.";
    const std::string q = c.fusedQkv ? attn + "qkv_proj.weight" : attn + "q_proj.weight";
    const std::string k = attn + "k_proj.weight";
    if (!ck.has(q))
        return; // the load names the missing tensor
    const std::vector<int64_t> qs = ck.shapeOf(q);
    const int64_t want =
        c.fusedQkv ? (c.nHeads + 2 * c.nKvHeads) * c.headDim : c.nHeads * c.headDim;
    if (qs.size() == 2 && qs[0] != want)
        throw ConfigError(configPath + ": key 'head_dim' (" + std::to_string(c.headDim) +
                          ") × 'num_attention_heads' (" + std::to_string(c.nHeads) + ")" +
                          (c.fusedQkv ? " with 'num_key_value_heads'" : "") + " gives " +
                          std::to_string(want) + " rows, but " + q + " in " + ck.fileOf(q) +
                          " has " + std::to_string(qs[0]));
    if (!c.fusedQkv && ck.has(k)) {
        const std::vector<int64_t> ks = ck.shapeOf(k);
        if (ks.size() == 2 && ks[0] != c.nKvHeads * c.headDim)
            throw ConfigError(configPath + ": key 'num_key_value_heads' (" +
                              std::to_string(c.nKvHeads) + ") × 'head_dim' (" +
                              std::to_string(c.headDim) + ") gives " +
                              std::to_string(c.nKvHeads * c.headDim) + " rows, but " + k + " in " +
                              ck.fileOf(k) + " has " + std::to_string(ks[0]));
    }
}

void CausalLMImpl::initialValues(
    uint64_t seed, const std::function<void(const std::string&, const at::Tensor&)>& fn) const {
    torch::NoGradGuard noGrad;
    auto gen = at::detail::createCPUGenerator(seed);
    constexpr double kStd = 0.02; // HF initializer_range
    for (const auto& p : named_parameters()) {
        at::Tensor t = at::empty(p.value().sizes(), at::kFloat);
        const std::string& name = p.key();
        const bool isNormOrBias =
            name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos ||
            (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
        if (isNormOrBias) // (1 + w) norms start at w = 0
            t.fill_(name.find("bias") != std::string::npos || m_config.normPlusOne ? 0.0 : 1.0);
        else
            t.normal_(0.0, kStd, gen);
        fn(name, t);
    }
}

void CausalLMImpl::initWeights(uint64_t seed) {
    torch::NoGradGuard noGrad;
    std::map<std::string, at::Tensor> values;
    initialValues(seed, [&](const std::string& name, const at::Tensor& t) { values[name] = t; });
    for (auto& p : named_parameters())
        p.value().set_data(values.at(p.key()));
}

at::Tensor CausalLMImpl::norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
    if (m_config.layout != Layout::Llama)
        return at::layer_norm(x, {x.size(-1)}, w, b, m_config.normEps);
    // RMSNorm over the last axis in float32 (HF LlamaRMSNorm, also OLMo 2's: cast, then w·);
    // the Gemma family scales by (1 + w) in float32 before casting back.
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor n = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + m_config.normEps);
    if (m_config.normPlusOne)
        return (n * (1.0 + w.to(at::kFloat))).to(x.scalar_type());
    return w * n.to(x.scalar_type());
}

at::Tensor CausalLMImpl::rope(const at::Tensor& x, int64_t firstPos, int64_t layer) const {
    // x [B, H, T, D]; rotate_half on the first rotaryDim dims (dim i pairs with i + rot/2).
    const int64_t T = x.size(2), rot = m_config.rotaryDim;
    const RopeSpec& spec = m_config.ropeOf(layer);
    const Rope& r = &spec == &m_config.localRope ? m_localRope : m_rope;
    // longrope: the long factors once this call reaches past the original context (HF decides
    // per forward call from its largest position), cos and sin scaled by the attention factor.
    const bool longFactors = r.longInvFreq.defined() && firstPos + T > spec.originalMax;
    const at::Tensor pos = at::arange(firstPos, firstPos + T, at::kLong).to(at::kFloat);
    const at::Tensor freqs = at::outer(pos, longFactors ? r.longInvFreq : r.invFreq);
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    at::Tensor cos = emb.cos(), sin = emb.sin();
    if (spec.scaling == "longrope") {
        cos = cos * spec.attentionFactor;
        sin = sin * spec.attentionFactor;
    }
    cos = cos.to(x.scalar_type());
    sin = sin.to(x.scalar_type());
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
    if (m_config.embedScale > 0) // HF: sqrt(hidden) as a scalar of the hidden dtype
        x = x * at::scalar_tensor(m_config.embedScale, x.options());
    if (m_config.layout == Layout::GPT2) {
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
    if (c.layout == Layout::Llama) {
        if (L.qkvW.defined()) { // Phi-3: rows q, k, v
            const at::Tensor qkv = at::linear(x, L.qkvW);
            q = qkv.narrow(-1, 0, c.nHeads * D);
            k = qkv.narrow(-1, c.nHeads * D, c.nKvHeads * D);
            v = qkv.narrow(-1, (c.nHeads + c.nKvHeads) * D, c.nKvHeads * D);
        } else {
            q = at::linear(x, L.qW, L.qB);
            k = at::linear(x, L.kW, L.kB);
            v = at::linear(x, L.vW, L.vB);
        }
        if (c.qkNorm == QkNorm::Whole) { // OLMo 2: over the whole projection
            q = norm(q, L.qNormW, {});
            k = norm(k, L.kNormW, {});
        }
        q = q.reshape({B, T, c.nHeads, D});
        k = k.reshape({B, T, c.nKvHeads, D});
        if (c.qkNorm == QkNorm::PerHead) { // Qwen 3, Gemma 3: each head, before RoPE
            q = norm(q, L.qNormW, {});
            k = norm(k, L.kNormW, {});
        }
        q = q.transpose(1, 2);
        k = k.transpose(1, 2);
        v = v.reshape({B, T, c.nKvHeads, D}).transpose(1, 2);
    } else if (c.layout == Layout::GPTNeoX) {
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
    if (m_rope.invFreq.defined()) {
        q = rope(q, firstPos, index);
        k = rope(k, firstPos, index);
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
            for (attention::CausalState& st : cache->state) {
                st.observe = cache->observe;
                st.observeConfig = cache->observeConfig;
            }
        }
        const at::ScalarType st = K.scalar_type();
        const bool fastStorage = st == at::kFloat || st == at::kHalf || st == at::kBFloat16;
        if (cache->capacity > 0 && fastStorage && K.device().is_cpu() && !K.requires_grad()) {
            if (cache->fast.size() < m_layers.size())
                cache->fast.resize(m_layers.size());
            if (!cache->fast[i])
                cache->fast[i] = std::make_shared<attention::DecodeCache>(
                    B, c.nKvHeads, D, cache->capacity, st,
                    cache->dimensionMajor || attention::decodeNeedsDimensionMajor(attn));
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
        (!attention::decodeNeedsDimensionMajor(cfg) || fast->dimensionMajor())) {
        if (!cache->engine)
            cache->engine = std::make_shared<attention::DecodeAttention>();
        attention::prepareDecodeCache(*fast, cfg); // Quest's pages, Loki's projection
        y = cache->engine->run(q.select(2, 0), *fast, cfg).unsqueeze(2).to(x.scalar_type());
    } else {
        y = attention::attendCausal(q, K, V, firstPos, cfg, state).to(x.scalar_type());
    }
    const at::Tensor merged = y.transpose(1, 2).reshape({B, T, c.nHeads * D});
    if (c.layout == Layout::GPT2)
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
    if (L.gateUpW.defined()) { // Phi-3: rows gate, up
        const at::Tensor gu = at::linear(x, L.gateUpW);
        const int64_t f = m_config.intermediateSize;
        return at::linear(gu.narrow(-1, f, f) * activate(gu.narrow(-1, 0, f)), L.downW, L.downB);
    }
    if (m_config.layout == Layout::Llama)
        return at::linear(activate(at::linear(x, L.gateW, L.gateB)) * at::linear(x, L.upW, L.upB),
                          L.downW, L.downB);
    if (m_config.layout == Layout::GPTNeoX)
        return at::linear(activate(at::linear(x, L.upW, L.upB)), L.downW, L.downB);
    const auto sizes = x.sizes().vec();
    const at::Tensor h = activate(at::addmm(L.upB, x.reshape({-1, sizes.back()}), L.upW));
    return at::addmm(L.downB, h, L.downW).view(sizes);
}

at::Tensor CausalLMImpl::block(int64_t index, const at::Tensor& x, KVCache* cache, int64_t firstPos,
                               const attention::AttentionConfig& attn, const CaptureHook& hook) {
    const Layer& L = *m_layers[static_cast<size_t>(index)];
    switch (m_config.norms) {
    case NormPlacement::Sandwich: { // Gemma 2/3: x + post(f(pre(x))), attention and MLP
        const at::Tensor h =
            x + norm(attention(index, norm(x, L.norm1W, {}), cache, firstPos, attn, hook),
                     L.postAttnW, {});
        return h + norm(mlp(index, norm(h, L.norm2W, {})), L.postFfnW, {});
    }
    case NormPlacement::Post: { // OLMo 2: x + norm(f(x))
        const at::Tensor h =
            x + norm(attention(index, x, cache, firstPos, attn, hook), L.postAttnW, {});
        return h + norm(mlp(index, h), L.postFfnW, {});
    }
    case NormPlacement::Pre:
        break;
    }
    const at::Tensor a = attention(index, norm(x, L.norm1W, L.norm1B), cache, firstPos, attn, hook);
    if (m_config.parallelResidual) // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
        return x + a + mlp(index, norm(x, L.norm2W, L.norm2B));
    const at::Tensor h = x + a;
    return h + mlp(index, norm(h, L.norm2W, L.norm2B));
}

at::Tensor CausalLMImpl::forward(const at::Tensor& ids, KVCache* cache,
                                 const attention::AttentionConfig& attn, const CaptureHook& hook,
                                 bool lastLogitsOnly) {
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
    if (lastLogitsOnly)
        x = x.narrow(1, x.size(1) - 1, 1);
    x = norm(x, m_finalNormW, m_finalNormB);
    at::Tensor logits = at::linear(x, m_lmHead.defined() ? m_lmHead : m_embed);
    if (m_config.finalSoftcap > 0) // Gemma 2: cap·tanh(logits / cap)
        logits = at::tanh(logits / m_config.finalSoftcap) * m_config.finalSoftcap;
    return logits.to(at::kFloat);
}

void KVCache::truncate(int64_t n) {
    for (auto& f : fast)
        if (f)
            f->truncate(n);
    for (size_t i = 0; i < k.size(); ++i)
        if (k[i].defined() && k[i].size(2) > n) {
            k[i] = k[i].narrow(2, 0, n);
            v[i] = v[i].narrow(2, 0, n);
        }
}

} // namespace sparqlab::capture
