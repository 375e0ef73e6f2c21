#include "transformer.h"

#include "base/system_memory.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/transformer_layer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace sparqlab::model {

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
    /// The module at a dotted path below this one ("router.layer"), each part a new child.
    std::shared_ptr<NodeImpl> path(const std::string& dotted) {
        const size_t dot = dotted.find('.');
        const auto first = child(dotted.substr(0, dot));
        return dot == std::string::npos ? first : first->path(dotted.substr(dot + 1));
    }
};

using Layer = CausalLMImpl::Layer;

/// The checkpoint names of a block's norms for each placement (nullptr: the placement has none).
struct NormNames {
    const char *norm1, *postAttn, *norm2, *postFfn;
};

NormNames normNames(NormPlacement p) {
    switch (p) {
    case NormPlacement::Pre:
    case NormPlacement::NormedResidual:
        return {"input_layernorm", nullptr, "post_attention_layernorm", nullptr};
    case NormPlacement::Sandwich:
        return {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                "post_feedforward_layernorm"};
    case NormPlacement::SandwichGlm4:
        return {"input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm",
                "post_mlp_layernorm"};
    case NormPlacement::Post:
        return {nullptr, "post_attention_layernorm", nullptr, "post_feedforward_layernorm"};
    case NormPlacement::Parallel:
        return {"input_layernorm", nullptr, nullptr, nullptr};
    case NormPlacement::Single:
        return {"norm", nullptr, nullptr, nullptr};
    case NormPlacement::SharedBlock: // (registerSharedBlockLayers names the rest)
        return {"input_layernorm", nullptr, nullptr, nullptr};
    case NormPlacement::PostAttentionPreLinear: // (resolved per layer by ModelConfig::normsOf)
        break;
    }
    return {};
}

/// A block's norms under the names of its placement (Llama layout).
void registerNorms(NodeImpl& n, const ModelConfig& c, int64_t layer, Layer& L) {
    const int64_t h = c.hiddenSize;
    const NormNames names = normNames(c.normsOf(layer));
    auto w = [&](const char* name, at::Tensor& into) {
        if (name)
            into = n.child(name)->param("weight", {h});
    };
    w(c.mixerNormName.empty() ? names.norm1 : c.mixerNormName.c_str(), L.norm1W);
    w(names.postAttn, L.postAttnW);
    w(c.mlpNormName.empty() ? names.norm2 : c.mlpNormName.c_str(), L.norm2W);
    w(names.postFfn, L.postFfnW);
}

/// DeepSeek-V4's self_attn (transformer_layer.h names the tensors): q from its latent, the one
/// key-value projection, the grouped output, the sinks; a compressed layer's compressor and a CSA
/// layer's indexer under compressor.
void registerCompressedAttention(NodeImpl& a, const ModelConfig& c, int64_t layer, Layer& L) {
    const CompressedAttentionSpec& s = c.compressed;
    const int64_t h = c.hiddenSize, D = c.headDim, H = c.nHeads, G = s.outGroups;
    L.qAW = a.child("q_a_proj")->param("weight", {s.qLoraRank, h});
    L.qANormW = a.child("q_a_norm")->param("weight", {s.qLoraRank});
    L.qBW = a.child("q_b_proj")->param("weight", {H * D, s.qLoraRank});
    L.kW = a.child("kv_proj")->param("weight", {D, h});
    L.kNormW = a.child("kv_norm")->param("weight", {D});
    L.oAW = a.child("o_a_proj")->param("weight", {G * s.outRank, H * D / G});
    L.oW = a.child("o_b_proj")->param("weight", {h, G * s.outRank});
    L.sinks = a.param("sinks", {H});
    const int64_t rate = s.rateOf(layer);
    if (rate == 0)
        return;
    // The pool's projections: two series on a CSA layer (this window's and the next's share).
    auto pool = [&](NodeImpl& n, int64_t width, int64_t series, at::Tensor& kv, at::Tensor& gate,
                    at::Tensor& bias, at::Tensor& norm) {
        kv = n.child("kv_proj")->param("weight", {series * width, h});
        gate = n.child("gate_proj")->param("weight", {series * width, h});
        bias = n.param("position_bias", {rate, series * width});
        norm = n.child("kv_norm")->param("weight", {width});
    };
    auto cmp = a.child("compressor");
    const int64_t series = s.indexed(layer) ? 2 : 1;
    pool(*cmp, D, series, L.cmpKvW, L.cmpGateW, L.cmpBias, L.cmpNormW);
    if (!s.indexed(layer))
        return;
    auto ix = cmp->child("indexer");
    pool(*ix, s.indexDim, 2, L.idxCmpKvW, L.idxCmpGateW, L.idxCmpBias, L.idxCmpNormW);
    L.idxQW = ix->child("q_b_proj")->param("weight", {s.indexHeads * s.indexDim, s.qLoraRank});
    L.idxWeightsW = (s.scorerModule ? *ix->child("scorer") : *ix)
                        .child("weights_proj")
                        ->param("weight", {s.indexHeads, h});
}

/// mHC's mapping `name` (attn_hc, ffn_hc) of a DeepSeek-V4 block.
void registerHyper(NodeImpl& n, const ModelConfig& c, const char* name, at::Tensor& fn,
                   at::Tensor& base, at::Tensor& scale) {
    const int64_t k = c.hyper.streams, mix = (2 + k) * k;
    auto m = n.child(name);
    fn = m->param("fn", {mix, k * c.hiddenSize});
    base = m->param("base", {mix});
    scale = m->param("scale", {3});
}

/// self_attn: q, k, v, o (fused qkv_proj for Phi-3; MLA's low-rank projections), their
/// biases, the q/k norms and gpt-oss's sinks.
void registerAttention(NodeImpl& a, const ModelConfig& c, int64_t layer, Layer& L) {
    if (c.compressed.active()) {
        registerCompressedAttention(a, c, layer, L);
        return;
    }
    const int64_t h = c.hiddenSize, in = c.attentionInput(), Dv = c.valueDim();
    const int64_t q = c.nHeads * c.headDim, kv = c.nKvHeads * c.headDim, vw = c.nKvHeads * Dv;
    if (c.mla.kvLoraRank > 0) {
        const MlaSpec& m = c.mla;
        if (m.qLoraRank > 0) {
            auto qa = a.child("q_a_proj");
            L.qAW = qa->param("weight", {m.qLoraRank, h});
            if (c.qkvBias)
                L.qAB = qa->param("bias", {m.qLoraRank});
            L.qANormW = a.child("q_a_layernorm")->param("weight", {m.qLoraRank});
            L.qBW = a.child("q_b_proj")->param("weight", {q, m.qLoraRank});
        } else {
            L.qW = a.child("q_proj")->param("weight", {q, h});
        }
        if (c.indexer.on(layer) && !c.indexer.blocks() && !c.indexer.reuses(layer)) {
            // DSA's indexer: the query from the q latent
            const IndexerSpec& ix = c.indexer;
            auto in = a.child("indexer");
            L.idxQW = in->child("wq_b")->param("weight", {ix.heads * ix.dim, m.qLoraRank});
            L.idxKW = in->child("wk")->param("weight", {ix.dim, h});
            auto kn = in->child("k_norm");
            L.idxKNormW = kn->param("weight", {ix.dim});
            L.idxKNormB = kn->param("bias", {ix.dim});
            L.idxWeightsW = in->child("weights_proj")->param("weight", {ix.heads, h});
        }
        auto kva = a.child("kv_a_proj_with_mqa");
        L.kvAW = kva->param("weight", {m.kvLoraRank + m.ropeDim, h});
        if (c.qkvBias)
            L.kvAB = kva->param("bias", {m.kvLoraRank + m.ropeDim});
        L.kvANormW = a.child("kv_a_layernorm")->param("weight", {m.kvLoraRank});
        L.kvBW = a.child("kv_b_proj")->param("weight", {c.nHeads * (m.nopeDim + Dv), m.kvLoraRank});
    } else if (c.fusedQkv) {
        L.qkvW = a.child("qkv_proj")->param("weight", {q + kv + vw, in});
    } else {
        auto qp = a.child("q_proj"), kp = a.child("k_proj"), vp = a.child("v_proj");
        L.qW =
            qp->param("weight", {c.gatedAttention ? 2 * q : q, in}); // gated: [q | gate] per head
        L.kW = kp->param("weight", {kv, in});
        L.vW = vp->param("weight", {vw, in});
        if (c.qkvBias) {
            L.qB = qp->param("bias", {c.gatedAttention ? 2 * q : q}); // gated: the gate's too
            L.kB = kp->param("bias", {kv});
            L.vB = vp->param("bias", {vw});
        }
    }
    auto op = a.child(c.attnOutName);
    L.oW = op->param("weight", {h, c.nHeads * Dv});
    if (c.outBias)
        L.oB = op->param("bias", {h});
    if (c.qkNorm == QkNorm::PerHead) {
        L.qNormW = a.child(c.qNormName)->param("weight", {c.headDim});
        L.kNormW = a.child(c.kNormName)->param("weight", {c.headDim});
    } else if (c.qkNorm == QkNorm::Whole) {
        L.qNormW = a.child("q_norm")->param("weight", {q});
        L.kNormW = a.child("k_norm")->param("weight", {kv});
    }
    if (c.sinks)
        L.sinks = a.param("sinks", {c.nHeads});
    if (c.indexer.blocks() && c.indexer.on(layer)) { // MiniMax-M3's indexer, beside q, k and v
        const IndexerSpec& ix = c.indexer;
        L.idxQW = a.child("index_q_proj")->param("weight", {ix.heads * ix.dim, h});
        L.idxKW = a.child("index_k_proj")->param("weight", {ix.dim, h});
        L.idxQNormW = a.child("index_q_norm")->param("weight", {ix.dim});
        L.idxKNormW = a.child("index_k_norm")->param("weight", {ix.dim});
    }
}

/// A linear-attention layer: Gated DeltaNet under linear_attn (Qwen3-Next's fused projections,
/// Qwen3.5's split ones or OLMo Hybrid's separate ones), Kimi Delta Attention under self_attn,
/// Mamba-2 under mamba (or Nemotron-H's mixer), LFM2's short convolution under conv, Mamba-1 under
/// mamba (Jamba), MiniMax-01's lightning attention under self_attn; `layer` is its index (the
/// lightning decay's).
void registerLinear(NodeImpl& a, const ModelConfig& c, LayerKind kind, int64_t layer,
                    LinearWeights& w) {
    const LinearSpec& s = c.linear;
    const int64_t h = c.hiddenSize, qk = s.keyHeads * s.keyDim, vv = s.valueHeads * s.valueDim;
    w.layer = layer;
    if (kind == LayerKind::Lightning) { // per head [q | k | v], the gate, the norm over them all
        w.qkvW = a.child("qkv_proj")->param("weight", {3 * vv, h});
        w.zW = a.child("output_gate")->param("weight", {vv, h});
        w.outW = a.child("out_proj")->param("weight", {h, vv});
        w.normW = a.child("norm")->param("weight", {vv});
        return;
    }
    const int64_t K = s.convKernel, Hv = s.valueHeads;
    if (kind == LayerKind::ShortConv) { // LFM2: in_proj [B | C | x], conv over B·x, out_proj
        auto in = a.child("in_proj"), conv = a.child("conv"), out = a.child("out_proj");
        w.inW = in->param("weight", {3 * h, h});
        w.convW = conv->param("weight", {h, 1, K});
        w.outW = out->param("weight", {h, h});
        if (s.convBias) {
            w.inB = in->param("bias", {3 * h});
            w.convB = conv->param("bias", {h});
            w.outB = out->param("bias", {h});
        }
        return;
    }
    if (kind == LayerKind::Mamba1) { // in_proj [x | z], conv over x, x_proj [dt | B | C], dt_proj
        const int64_t I = s.valueDim, N = s.keyDim, R = s.dtRank;
        auto in = a.child("in_proj"), conv = a.child("conv1d"), out = a.child("out_proj");
        auto dtProj = a.child("dt_proj");
        w.inW = in->param("weight", {2 * I, h});
        w.convW = conv->param("weight", {I, 1, K});
        if (s.convBias)
            w.convB = conv->param("bias", {I});
        w.xProjW = a.child("x_proj")->param("weight", {R + 2 * N, I});
        w.dtProjW = dtProj->param("weight", {I, R});
        w.dtProjB = dtProj->param("bias", {I});
        w.aLog = a.param("A_log", {I, N});
        w.d = a.param("D", {I});
        if (s.innerNorms) {
            w.dtNormW = a.child("dt_layernorm")->param("weight", {R});
            w.bNormW = a.child("b_layernorm")->param("weight", {N});
            w.cNormW = a.child("c_layernorm")->param("weight", {N});
        }
        w.outW = out->param("weight", {h, I});
        if (s.projBias) {
            w.inB = in->param("bias", {2 * I});
            w.outB = out->param("bias", {h});
        }
        return;
    }
    if (isMamba2Kind(kind)) { // in_proj [z | x B C | dt], conv over [x | B | C]
        auto in = a.child("in_proj"), conv = a.child("conv1d"), out = a.child("out_proj");
        w.inW = in->param("weight", {2 * vv + 2 * qk + Hv, h});
        w.convW = conv->param("weight", {vv + 2 * qk, 1, K});
        if (s.convBias)
            w.convB = conv->param("bias", {vv + 2 * qk});
        w.dtBias = a.param("dt_bias", {Hv});
        w.aLog = a.param("A_log", {Hv});
        w.d = a.param("D", {Hv});
        if (s.gate != Mamba2Gate::NoNorm)
            w.normW = a.child("norm")->param("weight", {vv});
        w.outW = out->param("weight", {h, vv});
        if (s.projBias)
            w.inB = in->param("bias", {2 * vv + 2 * qk + Hv});
        if (s.outBias)
            w.outB = out->param("bias", {h});
        return;
    }
    // q, k and v, and their convolutions: one each, or one over [q | k | v].
    auto qkvApart = [&] {
        w.qW = a.child("q_proj")->param("weight", {qk, h});
        w.kW = a.child("k_proj")->param("weight", {qk, h});
        w.vW = a.child("v_proj")->param("weight", {vv, h});
    };
    auto convs = [&](bool apart) {
        if (!apart) {
            w.convW = a.child("conv1d")->param("weight", {2 * qk + vv, 1, K});
            return;
        }
        w.qConvW = a.child("q_conv1d")->param("weight", {qk, 1, K});
        w.kConvW = a.child("k_conv1d")->param("weight", {qk, 1, K});
        w.vConvW = a.child("v_conv1d")->param("weight", {vv, 1, K});
    };
    if (kind == LayerKind::GatedDeltaNet) {
        const bool olmo = s.projections == GdnProjections::Separate;
        if (olmo) {
            qkvApart();
            w.zW = a.child("g_proj")->param("weight", {vv, h});
            w.bW = a.child("b_proj")->param("weight", {Hv, h});
            w.aW = a.child("a_proj")->param("weight", {Hv, h});
        } else if (s.projections == GdnProjections::Flat) {
            w.qkvW = a.child("in_proj_qkv")->param("weight", {2 * qk + vv, h});
            w.zW = a.child("in_proj_z")->param("weight", {vv, h});
            w.bW = a.child("in_proj_b")->param("weight", {Hv, h});
            w.aW = a.child("in_proj_a")->param("weight", {Hv, h});
        } else {
            w.qkvzW = a.child("in_proj_qkvz")->param("weight", {2 * qk + 2 * vv, h});
            w.baW = a.child("in_proj_ba")->param("weight", {2 * Hv, h});
        }
        convs(s.separateConvs);
        w.aLog = a.param("A_log", {Hv});
        w.dtBias = a.param("dt_bias", {Hv});
        w.normW = a.child(olmo ? "o_norm" : "norm")->param("weight", {s.valueDim});
        w.outW = a.child(olmo ? "o_proj" : "out_proj")->param("weight", {h, vv});
        return;
    }
    qkvApart();
    convs(/*apart=*/true);
    w.aLog = a.param("A_log", {1, 1, Hv, 1});
    w.dtBias = a.param("dt_bias", {qk});
    w.fAW = a.child("f_a_proj")->param("weight", {s.valueDim, h});
    w.fBW = a.child("f_b_proj")->param("weight", {qk, s.valueDim});
    w.bW = a.child("b_proj")->param("weight", {Hv, h});
    w.gAW = a.child("g_a_proj")->param("weight", {s.valueDim, h});
    w.gBW = a.child("g_b_proj")->param("weight", {vv, s.valueDim});
    w.normW = a.child("o_norm")->param("weight", {s.valueDim});
    w.outW = a.child("o_proj")->param("weight", {h, vv});
}

/// The dense MLP: gate, up (fused gate_up_proj for Phi-3 and GLM-4; no gate for Nemotron-H)
/// and down.
void registerMlp(NodeImpl& m, const ModelConfig& c, Layer& L) {
    const int64_t h = c.hiddenSize, f = c.intermediateSize;
    if (!c.gatedMlp) {
        auto up = m.child("up_proj");
        L.upW = up->param("weight", {f, h});
        if (c.mlpBias)
            L.upB = up->param("bias", {f});
    } else if (c.fusedGateUp) {
        L.gateUpW = m.child(c.gateUpName)->param("weight", {2 * f, h});
    } else {
        auto gp = m.child(c.gateName), up = m.child(c.upName);
        L.gateW = gp->param("weight", {f, h});
        L.upW = up->param("weight", {f, h});
        if (c.mlpBias) {
            L.gateB = gp->param("bias", {f});
            L.upB = up->param("bias", {f});
        }
    }
    auto dp = m.child(c.downName);
    L.downW = dp->param("weight", {h, f});
    if (c.mlpBias)
        L.downB = dp->param("bias", {h});
}

/// An MLP of width f under `m` ({gate,up,down}_proj or Mixtral's w1, w3, w2; without `gated`,
/// up_proj and down_proj, with biases where `bias`).
Expert registerExpert(NodeImpl& m, int64_t h, int64_t f, bool mixtral, bool gated = true,
                      bool bias = false) {
    Expert e;
    if (gated)
        e.gate = m.child(mixtral ? "w1" : "gate_proj")->param("weight", {f, h});
    auto up = m.child(mixtral ? "w3" : "up_proj"), down = m.child(mixtral ? "w2" : "down_proj");
    e.up = up->param("weight", {f, h});
    e.down = down->param("weight", {h, f});
    if (bias) {
        e.upB = up->param("bias", {f});
        e.downB = down->param("bias", {h});
    }
    return e;
}

/// A sparse layer: the router, the experts in the checkpoint's layout, the shared expert.
/// `hashed`: its router holds a table of experts per token id instead of a correction bias.
void registerMoe(NodeImpl& m, const ModelConfig& c, MoeWeights& w, bool hashed) {
    const MoeSpec& s = c.moe;
    const int64_t h = c.hiddenSize, E = s.experts, I = s.intermediate;
    const int64_t in = s.latent > 0 ? s.latent : h; // the experts' width in and out
    const auto router = m.path(s.routerName);       // (GraniteMoe's "router.layer")
    w.routerW = router->param("weight", {E, h});
    if (s.routerBias)
        w.routerB = router->param("bias", {E});
    if (hashed)
        w.tid2eid = router->param("tid2eid", {c.vocabSize, s.topK});
    else if (s.scoreCorrection)
        w.scoreBias = (s.scoreCorrectionBeside ? m : *router).param(s.scoreBiasName, {E});
    if (s.layout == ExpertLayout::ParallelExperts) {
        w.gateUp = m.child("input_linear")->param("weight", {E, 2 * I, h});
        w.down = m.child("output_linear")->param("weight", {E, h, I});
        return;
    }
    if (s.latent > 0) { // Nemotron-H: the experts in a latent of their own
        auto fc1 = m.child("fc1_latent_proj"), fc2 = m.child("fc2_latent_proj");
        w.latentInW = fc1->param("weight", {in, h});
        w.latentOutW = fc2->param("weight", {h, in});
        if (c.mlpBias) {
            w.latentInB = fc1->param("bias", {in});
            w.latentOutB = fc2->param("bias", {h});
        }
    }
    auto experts = m.child("experts");
    if (s.layout == ExpertLayout::FusedRows && !c.gatedMlp) { // Nemotron-H: up, down
        w.gateUp = experts->param("up_proj", {E, I, in});
        w.down = experts->param("down_proj", {E, in, I});
    } else if (s.layout == ExpertLayout::FusedRows) {
        w.gateUp = experts->param("gate_up_proj", {E, 2 * I, h});
        w.down = experts->param("down_proj", {E, h, I});
    } else if (s.layout == ExpertLayout::FusedInterleaved ||
               s.layout == ExpertLayout::FusedHalves) {
        w.gateUp = experts->param("gate_up_proj", {E, h, 2 * I});
        w.down = experts->param("down_proj", {E, I, h});
        if (s.layout == ExpertLayout::FusedInterleaved) {
            w.gateUpB = experts->param("gate_up_proj_bias", {E, 2 * I});
            w.downB = experts->param("down_proj_bias", {E, h});
        }
    } else {
        for (int64_t e = 0; e < E; ++e)
            w.experts.push_back(registerExpert(*experts->child(std::to_string(e)), in, I,
                                               s.layout == ExpertLayout::Mixtral, c.gatedMlp));
    }
    if (s.sharedIntermediate > 0)
        w.shared =
            registerExpert(*m.child(s.sharedName), h, s.sharedIntermediate, false, c.gatedMlp,
                           /*bias=*/!c.gatedMlp && c.mlpBias); // (Nemotron-H's shared MLP)
    if (s.sharedGate)
        w.sharedGateW = m.child("shared_expert_gate")->param("weight", {1, h});
}

/// A low-rank adapter {down [r, in], up [out, r]} under `list`'s slot `slot` (Sequential's 0, 1).
std::array<at::Tensor, 2> registerAdapter(NodeImpl& list, int64_t slot, int64_t in, int64_t out,
                                          int64_t r) {
    auto a = list.child(std::to_string(slot));
    return {a->child("0")->param("weight", {r, in}), a->child("1")->param("weight", {out, r})};
}

/// Zamba2's layers (NormPlacement::SharedBlock) under `layers`: each Mamba-2 layer's
/// input_layernorm and mamba; each hybrid layer's mamba_decoder (the same two), its linear, and
/// the shared block it runs. Block b is stored once, under shared_transformer of the first
/// hybrid layer that runs it (as the published checkpoints hold it), with the adapters of every
/// hybrid layer that runs it in the slots of their hybrid positions.
void registerSharedBlockLayers(NodeImpl& layers, const ModelConfig& c,
                               std::vector<std::shared_ptr<Layer>>& out) {
    const int64_t h = c.hiddenSize, in = c.attentionInput(), f = c.intermediateSize;
    const int64_t r = c.shared.adapterRank, blocks = c.shared.blocks;
    const std::vector<int64_t> hybrid = c.attentionLayers();
    const auto positions = static_cast<int64_t>(hybrid.size());
    std::vector<std::shared_ptr<Layer>> source(static_cast<size_t>(blocks));
    struct Adapters {
        std::array<at::Tensor, 2> q, k, v, gateUp;
    };
    std::vector<Adapters> adapters(hybrid.size()); // each hybrid position's, in its block's lists
    for (int64_t i = 0, j = 0; i < c.nLayers; ++i) {
        auto n = layers.child(std::to_string(i));
        auto L = std::make_shared<Layer>();
        const bool isHybrid = c.isAttention(i);
        auto mamba = isHybrid ? n->child("mamba_decoder") : n;
        L->norm1W = mamba->child("input_layernorm")->param("weight", {h});
        L->linear = std::make_shared<LinearWeights>();
        registerLinear(*mamba->child("mamba"), c, LayerKind::Mamba2, i, *L->linear);
        out.push_back(L);
        if (!isHybrid)
            continue;
        L->linkW = n->child("linear")->param("weight", {h, h});
        const int64_t b = j % blocks;
        std::shared_ptr<Layer>& src = source[static_cast<size_t>(b)];
        if (!src) { // the block's first hybrid layer holds it
            src = L;
            auto st = n->child("shared_transformer");
            L->blockNormW = st->child("input_layernorm")->param("weight", {in});
            L->norm2W = st->child("pre_ff_layernorm")->param("weight", {h});
            auto attn = st->child("self_attn");
            registerAttention(*attn, c, i, *L);
            auto ff = st->child("feed_forward");
            L->gateUpW = ff->child("gate_up_proj")->param("weight", {2 * f, h});
            L->downW = ff->child("down_proj")->param("weight", {h, f});
            auto gateUpList = ff->child("gate_up_proj_adapter_list");
            std::shared_ptr<NodeImpl> qList, kList, vList;
            if (c.shared.attentionAdapters) {
                qList = attn->child("linear_q_adapter_list");
                kList = attn->child("linear_k_adapter_list");
                vList = attn->child("linear_v_adapter_list");
            }
            for (int64_t p = b; p < positions; p += blocks) {
                Adapters& a = adapters[static_cast<size_t>(p)];
                a.gateUp = registerAdapter(*gateUpList, p, h, 2 * f, r);
                if (c.shared.attentionAdapters) {
                    a.q = registerAdapter(*qList, p, in, in, r);
                    a.k = registerAdapter(*kList, p, in, in, r);
                    a.v = registerAdapter(*vList, p, in, in, r);
                }
            }
        }
        for (at::Tensor Layer::*t : {&Layer::blockNormW, &Layer::norm2W, &Layer::qW, &Layer::kW,
                                     &Layer::vW, &Layer::oW, &Layer::gateUpW, &Layer::downW})
            (*L).*t = (*src).*t; // (one tensor: loading sets its data once for every layer)
        const Adapters& a = adapters[static_cast<size_t>(j)];
        L->gateUpAdapter = a.gateUp;
        L->qAdapter = a.q;
        L->kAdapter = a.k;
        L->vAdapter = a.v;
        ++j;
    }
}

/// The bytes of decoded MXFP4 experts kept at once: SPARQLAB_EXPERT_CACHE_MB where set (a
/// number of MiB, fractions too), else half the memory available once the other weights are
/// loaded.
int64_t expertDecodeBudget() {
    if (const char* mb = std::getenv("SPARQLAB_EXPERT_CACHE_MB"); mb && *mb) {
        // (from_chars: a point whatever the locale, where atof would read "0.5" as 0 in de_DE)
        double v = 0;
        std::from_chars(mb, mb + std::strlen(mb), v);
        return static_cast<int64_t>(std::clamp(v, 0.0, 1e12) * double(1 << 20));
    }
    const int64_t avail = base::availableMemoryBytes();
    return avail > 0 ? avail / 2 : int64_t{1} << 40;
}

} // namespace

CausalLMImpl::CausalLMImpl(const ModelConfig& c) : m_config(c) {
    const int64_t h = c.hiddenSize, f = c.intermediateSize, V = c.vocabSize;
    if (c.layout == Layout::Llama) {
        // Gemma 3's vision-language folders hold the text model under language_model.
        std::shared_ptr<NodeImpl> base;
        if (!c.weightPrefix.empty())
            base = register_module(c.weightPrefix.substr(0, c.weightPrefix.size() - 1),
                                   std::make_shared<NodeImpl>());
        auto top = [&](const std::string& name) {
            return base ? base->child(name) : register_module(name, std::make_shared<NodeImpl>());
        };
        // The decoder's module: "model", "model.language_model" (Qwen3.5's VL folders) or
        // "backbone" (Nemotron-H as published).
        const size_t dot = c.bodyModule.find('.');
        std::shared_ptr<NodeImpl> model = top(c.bodyModule.substr(0, dot));
        if (dot != std::string::npos)
            model = model->path(c.bodyModule.substr(dot + 1));
        m_embed = model->child(c.embedName)->param("weight", {V, h});
        auto layers = model->child("layers");
        if (c.norms == NormPlacement::SharedBlock)
            registerSharedBlockLayers(*layers, c, m_layers);
        for (int64_t i = 0; i < c.nLayers && c.norms != NormPlacement::SharedBlock; ++i) {
            auto n = layers->child(std::to_string(i));
            auto L = std::make_shared<Layer>();
            registerNorms(*n, c, i, *L);
            if (c.hyper.streams > 0) { // DeepSeek-V4
                registerHyper(*n, c, "attn_hc", L->attnHcFn, L->attnHcBase, L->attnHcScale);
                registerHyper(*n, c, "ffn_hc", L->ffnHcFn, L->ffnHcBase, L->ffnHcScale);
            }
            const LayerKind kind = c.kindOf(i);
            if (hasAttentionKind(kind))
                registerAttention(*n->child(c.attentionModule()), c, i, *L);
            if (isLinearKind(kind)) { // (Falcon-H1: beside the attention)
                L->linear = std::make_shared<LinearWeights>();
                registerLinear(*n->child(!c.mixerModule.empty()             ? c.mixerModule
                                         : kind == LayerKind::GatedDeltaNet ? "linear_attn"
                                         : isMamba2Kind(kind) || kind == LayerKind::Mamba1 ? "mamba"
                                         : kind == LayerKind::ShortConv                    ? "conv"
                                                                        : "self_attn"),
                               c, kind, i, *L->linear);
            }
            const bool sparse = c.moe.sparse(i) && c.hasMlp(i);
            if (sparse)
                registerMoe(*n->child(c.moe.module), c, L->moe, c.moe.hashed(i));
            if (c.hasMlp(i) && (!sparse || c.moe.denseBeside))
                registerMlp(*n->child(c.mlpModule), c, *L);
            m_layers.push_back(L);
        }
        m_finalNormW = model->child(c.finalNormName)->param("weight", {h});
        if (c.hyper.streams > 0) { // DeepSeek-V4: the streams' last collapse
            const int64_t k = c.hyper.streams;
            auto hc = model->child("hc_head");
            m_hcHeadFn = hc->param("hc_fn", {k, k * h});
            m_hcHeadBase = hc->param("hc_base", {k});
            m_hcHeadScale = hc->param("hc_scale", {1});
        }
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

    // RoPE inverse frequencies, computed as HF does in float32: the global layers' and, where
    // they differ (Gemma 3, OLMo 3), the sliding layers'; longrope's long factors beside its
    // short ones.
    if (c.rotaryDim > 0 && c.layout != Layout::GPT2) {
        m_rope.invFreq = model::ropeInverseFrequencies(c.rope, c.rotaryDim);
        if (c.rope.scaling == "longrope")
            m_rope.longInvFreq =
                model::ropeInverseFrequencies(c.rope, c.rotaryDim, /*longFactors=*/true);
        if (!c.layerLocalRope.empty())
            m_localRope.invFreq = model::ropeInverseFrequencies(c.localRope, c.rotaryDim);
    }
}

void CausalLMImpl::loadWeights(const Checkpoint& checkpoint, at::ScalarType dtype,
                               const std::function<void(int64_t, int64_t)>& progress,
                               bool mapStored, at::Device device) {
    torch::NoGradGuard noGrad;
    // gpt-oss's MXFP4 experts are decoded as tokens reach them (ExpertDecoder), not here.
    const ModelConfig& c = m_config;
    std::set<std::string> lazy;
    for (int64_t i = 0; i < c.nLayers; ++i)
        if (decodesExpertsLazily(c, checkpoint, i, device))
            for (const char* n : {"gate_up_proj", "down_proj"})
                lazy.insert(c.layerPrefix(i) + c.moe.module + ".experts." + n);
    const auto packed = [&](const std::string& name) { return lazy.count(name) > 0; };
    int64_t total = 0, done = 0; // (the bytes loaded here, for the progress)
    for (const auto& p : named_parameters())
        if (!packed(p.key()))
            total += p.value().numel() * static_cast<int64_t>(at::elementSize(dtype));
    for (auto& p : named_parameters()) {
        const std::vector<int64_t> shape = p.value().sizes().vec();
        if (packed(p.key())) {
            if (checkpoint.shapeOf(p.key()) != shape)
                throw CheckpointError(checkpoint.fileOf(p.key()) + ": MXFP4 tensor '" + p.key() +
                                      "' does not have the shape the config needs");
            p.value().set_data(at::empty({0}, at::TensorOptions().dtype(dtype).device(device)));
            continue;
        }
        // The routers' correction biases stay float32, as transformers keeps them
        // (_keep_in_fp32_modules_strict): rounded to bf16 they would flip near-tied experts.
        const std::string& key = p.key();
        const std::string& bias = m_config.moe.scoreBiasName;
        auto endsWith = [&](const std::string& tail) {
            return key.size() > tail.size() &&
                   key.compare(key.size() - tail.size(), tail.size(), tail) == 0;
        };
        // So do DeepSeek-V4's mHC mappings (attn_hc, ffn_hc, hc_head), and a hash layer's table
        // of expert ids, which bf16 would not hold exactly past 256.
        const bool hyper =
            m_config.hyper.streams > 0 &&
            (key.find("_hc.") != std::string::npos || key.find("hc_head.") != std::string::npos);
        const bool keepFloat = (m_config.moe.scoreCorrection && endsWith(bias) &&
                                key[key.size() - bias.size() - 1] == '.') ||
                               hyper || endsWith(".tid2eid");
        const at::ScalarType want = keepFloat ? at::kFloat : dtype;
        const std::string stored = checkpoint.dtypeOf(p.key());
        const bool same = mapStored && floatScalarType(stored) == want;
        at::Tensor t =
            same ? checkpoint.map(p.key(), shape) : checkpoint.load(p.key(), want, shape);
        // A routed expert is checked when a token first reaches it (moeForward), so that a
        // mapped MoE checkpoint's untouched experts are never read.
        const bool expert = p.key().find(".experts.") != std::string::npos;
        bool finite = true; // checked in slices: a whole-tensor mask would cost 25% more memory
        const at::Tensor flat = t.view(-1);
        for (int64_t i = 0; !expert && finite && i < flat.numel(); i += int64_t{1} << 22)
            finite = at::isfinite(flat.slice(0, i, i + (int64_t{1} << 22))).all().item<bool>();
        if (!finite)
            throw CheckpointError(checkpoint.fileOf(p.key()) + ": tensor '" + p.key() +
                                  "' holds NaN or infinite values");
        if (endsWith(".tid2eid")) { // expert ids: whole numbers below the experts' count
            const at::Tensor ids = t.to(at::kDouble);
            if (!at::equal(ids, ids.floor()) || ids.lt(0).any().item<bool>() ||
                ids.ge(static_cast<double>(c.moe.experts)).any().item<bool>())
                throw CheckpointError(checkpoint.fileOf(p.key()) + ": tensor '" + p.key() +
                                      "' must hold expert ids in 0.." +
                                      std::to_string(c.moe.experts - 1));
        }
        p.value().set_data(device == t.device() ? t : t.to(device));
        done += t.numel() * static_cast<int64_t>(at::elementSize(dtype));
        if (progress)
            progress(done, total);
    }
    for (Rope* r : {&m_rope, &m_localRope})
        for (at::Tensor* t : {&r->invFreq, &r->longInvFreq})
            if (t->defined() && t->device() != device)
                *t = t->to(device);
    // The sparse layers' experts, each named by its first tensor for the lazy check's message;
    // MXFP4 ones decoded by one decoder, within a budget of the memory left once the rest is
    // loaded (SPARQLAB_EXPERT_CACHE_MB sets it).
    std::shared_ptr<ExpertDecoder> decoder;
    for (int64_t i = 0; i < static_cast<int64_t>(m_layers.size()); ++i) {
        if (!c.moe.sparse(i))
            continue;
        MoeWeights& w = m_layers[static_cast<size_t>(i)]->moe;
        const std::string base = c.layerPrefix(i) + c.moe.module + ".experts.";
        if (decodesExpertsLazily(c, checkpoint, i, device)) {
            if (!decoder) {
                decoder = std::make_shared<ExpertDecoder>();
                decoder->checkpoint = std::make_shared<const Checkpoint>(checkpoint);
                decoder->dtype = dtype;
                decoder->device = device;
                decoder->keeper = ExpertKeeper(expertDecodeBudget());
            }
            w.decoder = decoder;
            w.decoderSlot = static_cast<int64_t>(decoder->layers.size());
            decoder->layers.push_back(&w);
            w.gateUpName = base + "gate_up_proj";
            w.downName = base + "down_proj";
            w.decodedGateUp.assign(static_cast<size_t>(c.moe.experts), at::Tensor());
            w.decodedDown.assign(static_cast<size_t>(c.moe.experts), at::Tensor());
        }
        const bool fused = w.gateUp.defined();
        const std::string fusedName = c.moe.layout == ExpertLayout::ParallelExperts
                                          ? c.layerPrefix(i) + c.moe.module + ".input_linear.weight"
                                      : c.gatedMlp ? base + "gate_up_proj"
                                                   : base + "up_proj";
        w.checked.assign(static_cast<size_t>(c.moe.experts), 0);
        w.names.clear();
        for (int64_t e = 0; e < c.moe.experts; ++e)
            w.names.push_back(fused ? fusedName + "[" + std::to_string(e) + "]"
                                    : base + std::to_string(e) + "." +
                                          (c.moe.layout == ExpertLayout::Mixtral ? "w1"
                                           : c.gatedMlp                          ? "gate_proj"
                                                                                 : "up_proj") +
                                          ".weight");
        w.file = checkpoint.fileOf(fused ? fusedName : w.names.front());
    }
}

bool decodesExpertsLazily(const ModelConfig& c, const Checkpoint& checkpoint, int64_t layer,
                          at::Device device) {
    if (!device.is_cpu() || c.moe.layout != ExpertLayout::FusedInterleaved || !c.moe.sparse(layer))
        return false; // (a GPU decodes them all as the model opens)
    const std::string base = c.layerPrefix(layer) + c.moe.module + ".experts.";
    for (const char* n : {"gate_up_proj", "down_proj"})
        if (!checkpoint.has(base + n) || checkpoint.dtypeOf(base + n) != "MXFP4")
            return false;
    return true;
}

void CausalLMImpl::checkShapes(const Checkpoint& ck, const std::string& configPath) const {
    const ModelConfig& c = m_config;
    if (c.layout != Layout::Llama || c.nLayers < 1)
        return;
    const std::vector<int64_t> attentionLayers = c.attentionLayers();
    if (attentionLayers.empty())
        return;
    const std::string attn = c.layerPrefix(attentionLayers.front()) + c.attentionModule() + ".";
    const std::string q = c.fusedQkv ? attn + "qkv_proj.weight" : attn + "q_proj.weight";
    const std::string k = attn + "k_proj.weight";
    if (!ck.has(q))
        return; // the load names the missing tensor
    const std::vector<int64_t> qs = ck.shapeOf(q);
    const int64_t want = c.fusedQkv         ? (c.nHeads + 2 * c.nKvHeads) * c.headDim
                         : c.gatedAttention ? 2 * c.nHeads * c.headDim // [q | gate] per head
                                            : c.nHeads * c.headDim;
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
        auto endsWith = [&](const std::string& tail) {
            return name.size() >= tail.size() &&
                   name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
        };
        // The linear layers' gated norms have a plain weight whatever the block norms do.
        const bool plainGatedNorm = endsWith("linear_attn.norm.weight") ||
                                    endsWith("self_attn.o_norm.weight") ||
                                    endsWith("mamba.norm.weight") || endsWith("mixer.norm.weight");
        if (endsWith(".tid2eid")) { // a hash layer's table: k distinct experts per token id
            const int64_t E = m_config.moe.experts, k = t.size(1),
                          stride = std::max<int64_t>(1, E / k);
            t.copy_((at::arange(t.size(0), at::kLong).unsqueeze(1) +
                     at::arange(k, at::kLong).unsqueeze(0) * stride)
                        .remainder(E));
        } else if (endsWith("_hc.scale") || endsWith("hc_head.hc_scale")) { // mHC: as HF, ones
            t.fill_(1.0);
        } else if (endsWith("_hc.base") || endsWith("hc_head.hc_base") ||
                   endsWith("position_bias")) { // HF: zeros
            t.fill_(0.0);
        } else if (endsWith("A_log")) { // HF: A ~ U(1, 16), decays exp(−A·softplus(·))
            t.uniform_(1.0, 16.0, gen).log_();
        } else if (endsWith("dt_bias") || endsWith("mamba.D") || endsWith("mixer.D")) { // ones
            t.fill_(1.0);
        } else if (endsWith("conv1d.weight")) { // the convolution's fan-in is its width
            t.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(t.size(-1))), gen);
        } else if (plainGatedNorm) {
            t.fill_(1.0);
        } else if (isNormOrBias) { // (1 + w) norms start at w = 0
            t.fill_(name.find("bias") != std::string::npos || m_config.normPlusOne ? 0.0 : 1.0);
        } else {
            t.normal_(0.0, kStd, gen);
        }
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

} // namespace sparqlab::model
