// Bamba (BambaForCausalLM: IBM's Bamba 9B v1 and v2): Granite 4.0's Mamba-2 layers (the gate
// before one norm over the whole width) and Llama attention with RoPE on half of each head at the
// layers attn_layer_indices names, each layer a pre-norm block with a SwiGLU MLP; no multipliers,
// no experts (docs/learned-sparse-and-hybrid.md §9).

#include "model/family_common.h"
#include "model/model_family.h"

#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

void parseBamba(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 128000;
    d.intermediate = 14336;
    d.kvHeads = 8;
    d.maxPositions = 262144;
    d.normEps = 1e-5;
    readJambaBlockCore(t, c, d);
    readMambaKeys(t, c, t.integer("mamba_expand", 2) * c.hiddenSize, "mamba_expand × hidden_size");
    c.linear.outBias = c.linear.projBias; // (out_proj's bias is mamba_proj_bias too)
    // BambaConfig's layers_block_type: "attention" where attn_layer_indices holds the layer.
    const std::vector<bool> attention =
        !t.has("attn_layer_indices") ? std::vector<bool>(static_cast<size_t>(c.nLayers), false)
                                     : listedLayers(t, "attn_layer_indices", c.nLayers);
    for (const bool a : attention)
        c.layerKinds.push_back(a ? LayerKind::Attention : LayerKind::Mamba2);
    if (c.linearLayerCount() == 0) // (every layer attention: no hybrid)
        c.layerKinds.clear();
    if (c.attentionLayers().empty())
        t.fail("attn_layer_indices",
               "must name at least one attention layer (the layers SparQ Lab captures)");
    // BambaConfig sets partial_rotary_factor to 0.5 whatever the config says (v5's
    // rope_parameters may name another, which readRopeScaling reads): half of each head rotates,
    // as the models were trained and transformers 4.x computes them. transformers 5's default
    // RoPE ignores the factor and rotates the whole head (docs/learned-sparse-and-hybrid.md §9).
    c.rotaryDim = c.headDim / 2;
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(bamba) {
    return {.name = "bamba",
            .label = "Bamba",
            .examples = "Bamba 9B v1 and v2 (Mamba-2 layers and attention with RoPE on half of "
                        "each head)",
            .architectures = {"BambaForCausalLM"},
            .parse = parseBamba};
}
