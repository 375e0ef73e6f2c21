// Kimi Linear (KimiLinearForCausalLM): a hybrid of Kimi Delta Attention layers (linear
// attention with one decay per key channel, low-rank decay and output-gate projections) and MLA
// without RoPE (mla_use_nope), DeepSeek-style experts with a sigmoid router
// (docs/learned-sparse-and-hybrid.md).

#include "model/family_common.h"
#include "model/model_family.h"

#include <cmath>

namespace sparqlab::model {

namespace {

void parseKimiLinear(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 163840,
                          .hidden = 4096,
                          .intermediate = 11008,
                          .layers = 32,
                          .heads = 32,
                          .maxPositions = 4096};
    readLlamaCore(t, c, d);
    MlaSpec& a = c.mla;
    a.qLoraRank = t.isNull("q_lora_rank") ? 0 : t.integer("q_lora_rank", 0, /*min=*/0);
    a.kvLoraRank = t.integer("kv_lora_rank", 512);
    a.nopeDim = t.integer("qk_nope_head_dim", 128);
    a.ropeDim = t.integer("qk_rope_head_dim", 64);
    c.vHeadDim = t.integer("v_head_dim", 128);
    c.headDim = a.nopeDim + a.ropeDim;
    c.nKvHeads = c.nHeads; // MLA: every head its own key
    // HF's Kimi MLA never rotates (mla_use_nope is not read): its "rope" dimensions are the raw
    // tail of kv_a_proj_with_mqa, shared by every head.
    c.rotaryDim = 0;
    c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    // The KDA layers: linear_attn_config's kda_layers (1-based) or layer_types.
    LinearSpec& s = c.linear;
    std::vector<int64_t> kda;
    if (t.has("linear_attn_config") && t.raw("linear_attn_config").is_object()) {
        const ConfigKeys l = t.nested("linear_attn_config");
        s.keyHeads = s.valueHeads = l.integer("num_heads", 32);
        s.keyDim = s.valueDim = l.integer("head_dim", 128);
        s.convKernel = l.integer("short_conv_kernel_size", 4, 1, 64);
        if (l.has("kda_layers")) {
            for (int64_t n : l.ids("kda_layers")) {
                if (n < 1 || n > c.nLayers)
                    l.fail("kda_layers", "must hold layer numbers 1.." + std::to_string(c.nLayers));
                kda.push_back(n - 1);
            }
        }
    } else {
        t.fail("linear_attn_config", "is missing (the KDA layers' heads, head_dim and layers)");
    }
    c.layerKinds.assign(static_cast<size_t>(c.nLayers), LayerKind::Attention);
    for (int64_t l : kda)
        c.layerKinds[static_cast<size_t>(l)] = LayerKind::KimiDelta;
    if (t.has("layer_types")) {
        std::vector<std::string> kinds(static_cast<size_t>(c.nLayers));
        for (int64_t l = 0; l < c.nLayers; ++l)
            kinds[static_cast<size_t>(l)] =
                c.isAttention(l) ? "full_attention" : "linear_attention";
        const std::vector<std::string> fromKda = kinds;
        readLayerKinds(t, c, kinds, {"linear_attention", "full_attention"});
        if (kinds != fromKda)
            t.fail("layer_types", "contradicts linear_attn_config.kda_layers");
    }
    if (c.attentionLayers().empty())
        t.fail("linear_attn_config", "must leave at least one full attention layer");
    MoeSpec& m = c.moe;
    m.experts = t.integer("num_experts", 256, /*min=*/0);
    m.topK = t.integer("num_experts_per_token", 8);
    m.intermediate = t.integer("moe_intermediate_size", 1024);
    m.router = MoeRouter::SigmoidGroups;
    m.scoreCorrection = true;
    m.normTopK = t.boolean("moe_renormalize", true);
    m.routedScale = t.number("routed_scaling_factor", 2.446);
    m.groups = t.integer("num_expert_group", 1);
    m.topKGroups = t.integer("topk_group", 1);
    m.layout = ExpertLayout::Mixtral;
    m.module = "block_sparse_moe";
    m.sharedIntermediate = m.intermediate * t.integer("num_shared_experts", 1, /*min=*/0);
    if (m.experts > 0 && (m.experts % m.groups != 0 || m.experts / m.groups < 2))
        t.fail("num_expert_group", "must divide num_experts into groups of at least 2");
    if (m.topKGroups > m.groups)
        t.fail("topk_group", "must be at most num_expert_group");
    // Sparse layers: mlp_layer_types, else all but the first first_k_dense_replace (HF reads
    // neither moe_layer_freq nor moe_router_activation_func: the router is always a sigmoid).
    const int64_t firstDense = t.integer("first_k_dense_replace", 1, /*min=*/0);
    for (int64_t l = 0; l < c.nLayers; ++l)
        m.layers.push_back(m.experts > 0 && l >= firstDense);
    readMlpLayerTypes(t, c);
    c.mlpModule = "block_sparse_moe"; // the dense layers' MLP lives there too
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(kimi_linear) {
    return {.name = "kimi_linear",
            .label = "Kimi Linear",
            .examples = "Kimi-Linear-48B-A3B (Kimi Delta Attention hybrid, MLA, MoE)",
            .architectures = {"KimiLinearForCausalLM"},
            .parse = parseKimiLinear};
}
