// Ministral 3 (Ministral3ForCausalLM, and the language model of its
// Mistral3ForConditionalGeneration folders; Mistral Medium 3.5 too): Mistral's block with YaRN, and
// every layer's q scaled by its position after RoPE, 1 + β·log(1 + ⌊pos /
// original_max_position_embeddings⌋) (llama_4_scaling_beta; docs/sinks-chunks-nope-mla.md).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readLlama4Scaling(const ConfigKeys& t, ModelConfig& c) {
    if (!t.has("rope_parameters") || !t.raw("rope_parameters").is_object())
        return;
    const ConfigKeys r = t.nested("rope_parameters");
    if (!r.has("llama_4_scaling_beta"))
        return; // (transformers fails on a missing β; no released model omits it)
    const double beta = r.number("llama_4_scaling_beta", 0);
    if (!(beta >= 0))
        r.fail("llama_4_scaling_beta", "must be a number at or above 0");
    if (!r.has("original_max_position_embeddings"))
        r.fail("original_max_position_embeddings",
               "is missing (llama_4_scaling_beta scales q by position over it)");
    c.attnTemperatureScale = beta;
    c.attnTemperatureFloor = r.number("original_max_position_embeddings", 0);
    if (!(c.attnTemperatureFloor > 0))
        r.fail("original_max_position_embeddings", "must be positive");
    c.attnTemperatureShift = 0; // positions from 0
    c.attnTemperatureEveryLayer = true;
}

void parseMinistral3Text(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 131072,
                          .intermediate = 14336,
                          .layers = 34,
                          .kvHeads = 8,
                          .headDim = 128,
                          .maxPositions = 262144,
                          .normEps = 1e-5,
                          .ropeTheta = 1e6};
    readLlamaCore(t, c, d);
    readUniformWindow(t, c, 0); // (sliding_window: none unless given)
    if (t.has("rope_parameters")) {
        readRopeScaling(t, c);
        readLlama4Scaling(t, c);
        return;
    }
    // Ministral3Config's own rope_parameters where a config gives none.
    const json defaults = {{"rope_parameters",
                            {{"rope_type", "yarn"},
                             {"rope_theta", 1e6},
                             {"factor", 16.0},
                             {"original_max_position_embeddings", 16384},
                             {"beta_fast", 32.0},
                             {"beta_slow", 1.0},
                             {"mscale_all_dim", 1.0},
                             {"mscale", 1.0},
                             {"llama_4_scaling_beta", 0.1}}}};
    const ConfigKeys own(defaults, "Ministral3Config");
    c.rope.theta = 1e6;
    readRopeScaling(own, c);
    readLlama4Scaling(own, c);
}

} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(ministral3) {
    return {.name = "ministral3",
            .label = "Ministral 3",
            .examples = "Ministral 3 3B, 8B and 14B, Mistral Medium 3.5 (position-scaled queries)",
            .architectures = {"Ministral3ForCausalLM"},
            .parse = sparqlab::model::parseMinistral3Text};
}
