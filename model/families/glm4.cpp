// GLM-4 (Glm4ForCausalLM): four norms per block (before and after attention and the MLP), q, k,
// v biases, a fused gate_up projection, and RoPE on the first partial_rotary_factor of each
// head with interleaved pairs.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseGlm4(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 151552,
                          .hidden = 4096,
                          .intermediate = 13696,
                          .layers = 40,
                          .heads = 32,
                          .kvHeads = 2,
                          .headDim = 128,
                          .maxPositions = 131072,
                          .normEps = 1.5625e-07,
                          .attentionBias = true};
    readLlamaCore(t, c, d);
    c.outBias = false; // o_proj has none whatever attention_bias says
    readPartialRotary(t, c, 0.5);
    c.ropeLayout = RopeLayout::Interleaved;
    c.norms = NormPlacement::SandwichGlm4;
    c.fusedGateUp = true;
    readRopeScaling(t, c); // v5 repeats partial_rotary_factor inside rope_parameters
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(glm4) {
    return {.name = "glm4",
            .label = "GLM-4",
            .examples = "GLM-4-9B-0414, GLM-Z1",
            .architectures = {"Glm4ForCausalLM"},
            .parse = parseGlm4};
}
