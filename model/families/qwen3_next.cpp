// Qwen3-Next (Qwen3NextForCausalLM): a hybrid of Gated DeltaNet layers (linear attention with a
// recurrent state, one decay per head) and gated full attention (q_proj gives per head [q |
// gate], the output × σ(gate); RMSNorm on each head's q and k; RoPE on partial_rotary_factor of
// each head), every layer a mixture of experts with a gated shared expert, and (1 + w) RMSNorms
// (docs/learned-sparse-and-hybrid.md).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>

namespace sparqlab::model {

/// The hybrid's layer kinds from layer_types ("linear_attention" → `linear`, "full_attention";
/// the legacy "mamba" and "attention" as transformers 5 remaps them), by default every
/// `interval`-th layer full (full_attention_interval).
void readHybridLayerKinds(const ConfigKeys& t, ModelConfig& c, LayerKind linear, int64_t interval) {
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers));
    for (int64_t l = 0; l < c.nLayers; ++l)
        kinds[static_cast<size_t>(l)] =
            (l + 1) % interval == 0 ? "full_attention" : "linear_attention";
    readLayerKinds(t, c, kinds, {"linear_attention", "full_attention"},
                   {{"attention", "full_attention"}, {"mamba", "linear_attention"}});
    c.layerKinds.clear();
    for (const std::string& k : kinds)
        c.layerKinds.push_back(k == "full_attention" ? LayerKind::Attention : linear);
    if (std::none_of(c.layerKinds.begin(), c.layerKinds.end(),
                     [](LayerKind k) { return k == LayerKind::Attention; }))
        t.fail("layer_types", "must name at least one \"full_attention\" layer");
}

/// Qwen3-Next's and Qwen3.5's shared keys: the gated attention, partial RoPE, the (1 + w)
/// norms and the Gated DeltaNet's shape.
void readQwen3NextCore(const ConfigKeys& t, ModelConfig& c) {
    c.normPlusOne = true;
    c.qkNorm = QkNorm::PerHead;
    c.gatedAttention = true;
    readPartialRotary(t, c, 0.25);
    readRopeScaling(t, c); // v5 repeats partial_rotary_factor inside rope_parameters
    LinearSpec& s = c.linear;
    s.convKernel = t.integer("linear_conv_kernel_dim", 4, 1, 64);
    s.keyDim = t.integer("linear_key_head_dim", 128);
    s.valueDim = t.integer("linear_value_head_dim", 128);
    s.keyHeads = t.integer("linear_num_key_heads", 16);
    s.valueHeads = t.integer("linear_num_value_heads", 32);
    if (s.valueHeads % s.keyHeads != 0)
        t.fail("linear_num_value_heads",
               "must be a multiple of linear_num_key_heads (" + std::to_string(s.keyHeads) + ")");
    readHybridLayerKinds(t, c, LayerKind::GatedDeltaNet, t.integer("full_attention_interval", 4));
}

namespace {

void parseQwen3Next(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 151936,
                          .hidden = 2048,
                          .intermediate = 5632,
                          .layers = 48,
                          .heads = 16,
                          .kvHeads = 2,
                          .headDim = 256,
                          .maxPositions = 32768};
    readLlamaCore(t, c, d);
    readQwen3NextCore(t, c);
    MoeSpec& m = c.moe;
    m.experts = t.integer("num_experts", 512, /*min=*/0);
    m.topK = t.integer("num_experts_per_tok", 10);
    m.intermediate = t.integer("moe_intermediate_size", 512);
    m.normTopK = t.boolean("norm_topk_prob", true);
    m.sharedIntermediate = t.integer("shared_expert_intermediate_size", 512, /*min=*/0);
    m.sharedName = "shared_expert";
    m.sharedGate = true;
    const int64_t step = t.integer("decoder_sparse_step", 1);
    const std::vector<int64_t> dense = readLayerIndices(t, c, "mlp_only_layers");
    for (int64_t l = 0; l < c.nLayers; ++l)
        m.layers.push_back(std::find(dense.begin(), dense.end(), l) == dense.end() &&
                           m.experts > 0 && (l + 1) % step == 0);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen3_next) {
    return {.name = "qwen3_next",
            .label = "Qwen3-Next",
            .examples = "Qwen3-Next-80B-A3B (Gated DeltaNet hybrid, MoE)",
            .architectures = {"Qwen3NextForCausalLM"},
            .parse = parseQwen3Next};
}
