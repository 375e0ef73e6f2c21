// GLM-4.5, GLM-4.6 and GLM-4.7 (Glm4MoeForCausalLM): the Llama block with q, k, v biases
// (attention_bias; o_proj has none), RMSNorm on each head's q and k with use_qk_norm, RoPE on the
// first partial_rotary_factor of each head (rotate-half), dense first layers, then DeepSeek-V3's
// mixture of experts (a sigmoid router with a correction bias, groups, shared experts).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseGlm4Moe(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 151552,
                          .hidden = 4096,
                          .intermediate = 10944,
                          .layers = 46,
                          .heads = 96,
                          .kvHeads = 8,
                          .maxPositions = 131072,
                          .normEps = 1e-5};
    readLlamaCore(t, c, d);
    c.outBias = false; // o_proj has none whatever attention_bias says
    if (t.boolean("use_qk_norm", false))
        c.qkNorm = QkNorm::PerHead;
    readPartialRotary(t, c, 0.5);
    readRopeScaling(t, c); // v5 repeats partial_rotary_factor inside rope_parameters
    readDeepseekMoe(t, c,
                    {.experts = 128,
                     .topK = 8,
                     .intermediate = 1408,
                     .groups = 1,
                     .topKGroups = 1,
                     .firstDense = 1,
                     .routedScale = 1.0});
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(glm4_moe) {
    return {.name = "glm4_moe",
            .label = "GLM-4.5",
            .examples = "GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7 (MoE)",
            .architectures = {"Glm4MoeForCausalLM"},
            .parse = parseGlm4Moe};
}
