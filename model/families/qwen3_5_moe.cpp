// Qwen3.5-MoE (Qwen3_5MoeForCausalLM, and the language model of
// Qwen3_5MoeForConditionalGeneration folders): Qwen3.5's hybrid of Gated DeltaNet and gated
// attention with a mixture of experts in every layer, as Qwen3-Next's (softmax over the experts,
// the top k always renormalised, a shared expert gated by σ), its experts packed as transformers
// 5 saves them (docs/learned-sparse-and-hybrid.md).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readQwen35TextCore(const ConfigKeys& t, ModelConfig& c,
                        const LlamaDefaults& d); // qwen3_5.cpp

namespace {

void parseQwen35MoeText(const ConfigKeys& t, ModelConfig& c) {
    // Qwen3_5MoeTextConfig has no intermediate_size: no layer is dense.
    readQwen35TextCore(t, c,
                       {.vocab = 248320,
                        .hidden = 2048,
                        .intermediate = 512,
                        .layers = 40,
                        .heads = 16,
                        .kvHeads = 2,
                        .headDim = 256,
                        .maxPositions = 32768});
    MoeSpec& m = c.moe;
    m.experts = t.integer("num_experts", 256);
    m.topK = t.integer("num_experts_per_tok", 8);
    m.intermediate = t.integer("moe_intermediate_size", 512);
    m.normTopK = true; // the router renormalises whatever norm_topk_prob says
    m.sharedIntermediate = t.integer("shared_expert_intermediate_size", 512, /*min=*/0);
    m.sharedName = "shared_expert";
    m.sharedGate = true;
    m.layout = ExpertLayout::FusedRows; // or one module per expert, where the checkpoint has them
    m.layers.assign(static_cast<size_t>(c.nLayers), true);
}

void parseQwen35Moe(const ConfigKeys& k, ModelConfig& c) {
    readTextConfigFolder(k, c, parseQwen35MoeText);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen3_5_moe) {
    return {.name = "qwen3_5_moe",
            .label = "Qwen3.5-MoE",
            .examples = "Qwen3.5-35B-A3B, Qwen3.5-122B-A10B, Qwen3.5-397B-A17B (Gated DeltaNet "
                        "hybrid, MoE; the language model of its VL folders)",
            .architectures = {"Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"},
            .parse = parseQwen35Moe};
}
