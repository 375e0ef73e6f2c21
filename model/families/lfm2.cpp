// LFM2 (Lfm2ForCausalLM: Liquid AI's LFM2 350M to 2.6B and LFM2.5): gated short convolutions
// (in_proj [B | C | x], C·conv(B·x), out_proj) and attention with per-head q and k norms, each
// layer a pre-norm block with a SwiGLU MLP whose width LFM2 adjusts from block_ff_dim
// (docs/learned-sparse-and-hybrid.md §12).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>
#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

/// Lfm2MLP's width: with block_auto_adjust_ff_dim, two thirds of intermediate_size (rounded
/// down), then × block_ffn_dim_multiplier (rounded down) and rounded up to block_multiple_of
/// where a multiplier is given (null: neither).
int64_t mlpWidth(const ConfigKeys& t, int64_t ff) {
    if (!t.boolean("block_auto_adjust_ff_dim", true))
        return ff;
    int64_t f = static_cast<int64_t>(2.0 * static_cast<double>(ff) / 3.0);
    if (t.isNull("block_ffn_dim_multiplier"))
        return f;
    const double m = t.number("block_ffn_dim_multiplier", 1.0);
    const int64_t multiple = t.integer("block_multiple_of", 256);
    f = static_cast<int64_t>(m * static_cast<double>(f));
    f = multiple * ((f + multiple - 1) / multiple);
    if (f < 1)
        t.fail("block_ffn_dim_multiplier", "leaves the MLP no width");
    return f;
}

} // namespace

/// What LFM2 and LFM2-MoE share, after readLlamaCore: norm_eps, tie_embedding, SiLU, the names
/// of the norms, the attention's parts and the MLP's w1, w3, w2, the layers' kinds and the short
/// convolution's shape, RoPE.
void readLfm2Layers(const ConfigKeys& t, ModelConfig& c) {
    c.normEps = t.number("norm_eps", 1e-5);
    if (!(c.normEps >= 0))
        t.fail("norm_eps", "must be a number at or above 0");
    if (t.has("tie_embedding")) // (LFM2's own name, which transformers pops over the HF one)
        c.tieEmbeddings = t.boolean("tie_embedding", true);
    c.hiddenAct = "silu"; // (Lfm2MLP's F.silu, whatever hidden_act says)
    c.qkvBias = c.outBias = false;
    c.mlpBias = false;
    c.qkNorm = QkNorm::PerHead;
    c.qNormName = "q_layernorm";
    c.kNormName = "k_layernorm";
    c.attnOutName = "out_proj";
    c.mlpModule = "feed_forward";
    c.gateName = "w1";
    c.upName = "w3";
    c.downName = "w2";
    c.mixerNormName = "operator_norm";
    c.mlpNormName = "ffn_norm";
    c.finalNormName = "embedding_norm";
    // The layers: layer_types, else full_attn_idxs (the rest "conv"), else all attention.
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "full_attention");
    if (!t.has("layer_types") && t.has("full_attn_idxs") && !t.isNull("full_attn_idxs")) {
        const std::vector<bool> attention = listedLayers(t, "full_attn_idxs", c.nLayers);
        for (size_t l = 0; l < kinds.size(); ++l)
            kinds[l] = attention[l] ? "full_attention" : "conv";
    }
    readLayerKinds(t, c, kinds, {"full_attention", "conv"});
    if (std::find(kinds.begin(), kinds.end(), "conv") != kinds.end())
        for (const std::string& k : kinds)
            c.layerKinds.push_back(k == "conv" ? LayerKind::ShortConv : LayerKind::Attention);
    const std::string key = t.has("layer_types") ? "layer_types" : "full_attn_idxs";
    if (c.attentionLayers().empty())
        t.fail(key, "must name at least one attention layer (the layers SparQ Lab captures)");
    // The short convolution in LinearSpec's terms: no keys, one value head of the hidden width,
    // so that its state is the convolution's last conv_L_cache − 1 inputs.
    LinearSpec& s = c.linear;
    s.keyHeads = s.keyDim = 0;
    s.valueHeads = 1;
    s.valueDim = c.hiddenSize;
    s.convKernel = t.integer("conv_L_cache", 3, 1, 64);
    s.convBias = t.boolean("conv_bias", false);
    readRopeScaling(t, c);
}

namespace {

void parseLfm2(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 65536;
    d.hidden = 2560;
    d.intermediate = 12288;
    d.kvHeads = 8;
    d.maxPositions = 128000;
    d.ropeTheta = 1e6;
    d.tieEmbeddings = true;
    readLlamaCore(t, c, d);
    if (t.has("block_ff_dim")) // (LFM2's own name, which transformers pops over the HF one)
        c.intermediateSize = t.integer("block_ff_dim", 12288);
    c.intermediateSize = mlpWidth(t, c.intermediateSize);
    readLfm2Layers(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(lfm2) {
    return {.name = "lfm2",
            .label = "LFM2",
            .examples = "LFM2 350M to 2.6B, LFM2.5 (gated short convolutions and attention with "
                        "q and k norms)",
            .architectures = {"Lfm2ForCausalLM"},
            .parse = parseLfm2};
}
