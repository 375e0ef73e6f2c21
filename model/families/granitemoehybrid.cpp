// Granite 4.0 (GraniteMoeHybridForCausalLM): Granite's four multipliers on a hybrid of Mamba-2
// layers and attention layers (NoPE unless position_embedding_type is "rope", the scale
// attention_multiplier), each layer's MLP a shared MLP (input_linear rows [gate | up],
// output_linear) plus, with num_local_experts > 0, experts packed as GraniteMoe's
// ParallelExperts behind a top-k router softmaxed in float32 (docs/learned-sparse-and-hybrid.md
// §9).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>
#include <string>

namespace sparqlab::model {

void readGraniteMultipliers(const ConfigKeys& t, ModelConfig& c); // granite.cpp

namespace {

void parseGraniteMoeHybrid(const ConfigKeys& t, ModelConfig& c) {
    readLlamaCore(t, c, LlamaDefaults{});
    readGraniteMultipliers(t, c);
    // Every layer's shared MLP is the dense MLP; intermediate_size is each expert's width.
    const int64_t expertWidth = c.intermediateSize;
    c.intermediateSize = t.integer("shared_intermediate_size", 1024);
    c.fusedGateUp = true;
    c.mlpBias = false; // (the shared MLP has none, whatever mlp_bias says)
    c.mlpModule = "shared_mlp";
    c.gateUpName = "input_linear";
    c.downName = "output_linear";
    MoeSpec& m = c.moe;
    m.experts = t.integer("num_local_experts", 8, /*min=*/0);
    if (m.experts > 0) {
        m.topK = t.integer("num_experts_per_tok", 2, 1, m.experts);
        m.intermediate = expertWidth;
        m.router = MoeRouter::TopKSoftmax;
        m.routerFloat32 = true;
        m.layout = ExpertLayout::ParallelExperts;
        m.module = "block_sparse_moe";
        m.routerName = "router.layer";
        m.denseBeside = true;
        m.layers.assign(static_cast<size_t>(c.nLayers), true);
    }
    readMambaKeys(t, c, t.integer("mamba_expand", 2) * c.hiddenSize, "mamba_expand × hidden_size");
    c.linear.outBias = c.linear.projBias; // (out_proj's bias is mamba_proj_bias too)
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "mamba");
    // layers_block_type is transformers' alias of layer_types (attribute_map), set after it and
    // so winning where a config gives both.
    const std::string key = t.has("layers_block_type") ? "layers_block_type" : "layer_types";
    readLayerKinds(t, c, kinds, {"mamba", "attention"}, {}, key);
    c.layerKinds.clear();
    if (std::find(kinds.begin(), kinds.end(), "mamba") != kinds.end()) // else no hybrid (Micro)
        for (const std::string& k : kinds)
            c.layerKinds.push_back(k == "attention" ? LayerKind::Attention : LayerKind::Mamba2);
    if (c.attentionLayers().empty())
        t.fail(key, "must name at least one \"attention\" layer (the layers SparQ Lab captures)");
    // HF builds a rotary embedding only for "rope"; any other value (null, "nope") is NoPE.
    const bool rope = t.string("position_embedding_type", "") == "rope";
    c.layerNoRope.assign(static_cast<size_t>(c.nLayers), !rope);
    if (rope) // (HF reads the RoPE keys only then)
        readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(granitemoehybrid) {
    return {.name = "granitemoehybrid",
            .label = "Granite 4.0",
            .examples = "Granite 4.0-H Tiny, Small, Micro (Mamba-2 layers, NoPE attention, MoE); "
                        "Granite 4.0 Micro",
            .architectures = {"GraniteMoeHybridForCausalLM"},
            .parse = parseGraniteMoeHybrid};
}
