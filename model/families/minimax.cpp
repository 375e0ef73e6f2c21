// MiniMax-01 (MiniMaxForCausalLM: MiniMax-Text-01 and MiniMax-M1 as their -hf folders, and the
// original MiniMaxText01ForCausalLM and MiniMaxM1ForCausalLM folders, which name the same
// weights): lightning attention, a linear attention with a fixed decay per head, on most layers
// and softmax attention with RoPE on the rest, each layer's residual the normed input weighted by
// α and β, Mixtral's experts on every layer (docs/learned-sparse-and-hybrid.md §14).

#include "model/family_common.h"
#include "model/model_family.h"

#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

/// A residual weight from transformers' key `name`, else the original config's `legacy`.
double residualFactor(const ConfigKeys& t, const std::string& name, const std::string& legacy) {
    return t.number(name, t.number(legacy, 1.0));
}

void parseMiniMax(const ConfigKeys& t, ModelConfig& c) {
    readLlamaCore(t, c, mixtralDefaults());
    if (t.isNull("num_key_value_heads")) // (MiniMaxConfig: as many as the query heads)
        c.nKvHeads = c.nHeads;
    c.qkvBias = c.outBias = c.mlpBias = false; // (MixtralAttention's projections have none)
    // transformers' class, or MiniMax's own code (its folders: MiniMaxText01ForCausalLM,
    // MiniMaxM1ForCausalLM), whose defaults differ where a key is missing.
    const bool transformers = c.architectureName == "MiniMaxForCausalLM";
    // Which layers are softmax attention: transformers' layer_types, else the original config's
    // attn_type_list (1: softmax, 0: lightning), else the class's default: MiniMaxConfig's every
    // other layer from the first, MiniMax's code every layer softmax.
    std::vector<std::string> kinds;
    for (int64_t l = 0; l < c.nLayers; ++l)
        kinds.emplace_back(!transformers || l % 2 == 0 ? "full_attention" : "linear_attention");
    if (t.has("layer_types")) {
        readLayerKinds(t, c, kinds, {"full_attention", "linear_attention"});
    } else if (t.has("attn_type_list")) {
        const std::vector<bool> full =
            readLayerFlags(t, c, "attn_type_list", std::vector<bool>(kinds.size(), true));
        for (size_t l = 0; l < full.size(); ++l)
            kinds[l] = full[l] ? "full_attention" : "linear_attention";
    }
    for (const std::string& k : kinds)
        c.layerKinds.push_back(k == "full_attention" ? LayerKind::Attention : LayerKind::Lightning);
    if (c.attentionLayers().empty())
        t.fail(t.has("layer_types") ? "layer_types" : "attn_type_list",
               "names no softmax-attention layer (they are what SparQ Lab captures)");
    // The lightning layers in LinearSpec's terms: as many heads of keys and values as the
    // attention's, head_dim each, no convolution; the prefill's blocks of block_size tokens.
    LinearSpec& s = c.linear;
    s.keyHeads = s.valueHeads = c.nHeads;
    s.keyDim = s.valueDim = c.headDim;
    s.convKernel = 1;
    s.chunk = t.integer("block_size", 256);
    if (c.linearLayerCount() == 0) // (softmax attention on every layer: no hybrid)
        c.layerKinds.clear();
    // sliding_window, where set, windows every softmax layer (the class's one mask).
    std::vector<std::string> windowed;
    for (const std::string& k : kinds)
        windowed.push_back(k == "full_attention" ? "sliding_attention" : k);
    windowSlidingLayers(t, c, windowed, 0);
    readMiniMaxRotaryDim(t, c, c.headDim); // MiniMax-Text-01: rotary_dim 64 of 128
    readRopeScaling(t, c);
    // The block: n = norm(x), α·n + β·f(n) for the mixer, then for the experts. transformers
    // always takes the normed input; MiniMax's code does where postnorm says so (every released
    // config), else α·x + β·f(n).
    c.norms = NormPlacement::NormedResidual;
    ResidualFactors& r = c.residual;
    r.fromNormed = transformers || t.boolean("postnorm", false);
    r.attnAlpha = residualFactor(t, "full_attn_alpha_factor", "layernorm_full_attention_alpha");
    r.attnBeta = residualFactor(t, "full_attn_beta_factor", "layernorm_full_attention_beta");
    r.linearAlpha =
        residualFactor(t, "linear_attn_alpha_factor", "layernorm_linear_attention_alpha");
    r.linearBeta = residualFactor(t, "linear_attn_beta_factor", "layernorm_linear_attention_beta");
    r.mlpAlpha = residualFactor(t, "mlp_alpha_factor", "layernorm_mlp_alpha");
    r.mlpBeta = residualFactor(t, "mlp_beta_factor", "layernorm_mlp_beta");
    // Mixtral's experts on every layer: softmax in float32, the top k renormalised.
    if (t.integer("shared_intermediate_size", 0, /*min=*/0) != 0)
        t.fail("shared_intermediate_size", "must be 0: transformers' MiniMax has no shared expert");
    readMixtralMoe(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(minimax) {
    return {
        .name = "minimax",
        .label = "MiniMax-01",
        .examples = "MiniMax-Text-01, MiniMax-M1 40k and 80k (lightning attention hybrid, MoE)",
        .architectures = {"MiniMaxForCausalLM", "MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM"},
        .parse = parseMiniMax};
}
