// Ministral 3 (Ministral3ForCausalLM, and the language model of its
// Mistral3ForConditionalGeneration folders; Mistral Medium 3.5 too): Mistral's block with YaRN, and
// every layer's q scaled by its position after RoPE, 1 + β·log(1 + ⌊pos /
// original_max_position_embeddings⌋) (llama_4_scaling_beta; docs/sinks-chunks-nope-mla.md).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

namespace {

/// rope_parameters' (or rope_scaling's) llama_4_scaling_beta over its
/// original_max_position_embeddings: every layer's q × 1 + β·log(1 + ⌊pos / original⌋) after
/// RoPE, positions from 0. None where the object gives no β (transformers fails there; no
/// released model omits it).
void readLlama4Scaling(const ConfigKeys& r, ModelConfig& c) {
    if (!r.has("llama_4_scaling_beta"))
        return;
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
    c.attnTemperatureShift = 0;
    c.attnTemperatureEveryLayer = true;
}

} // namespace

void readMistralRope(const ConfigKeys& t, ModelConfig& c, const json& defaults,
                     const std::string& owner) {
    for (const char* key : {"rope_parameters", "rope_scaling"})
        if (t.has(key) && t.raw(key).is_object()) {
            readRopeScaling(t, c);
            readLlama4Scaling(t.nested(key), c);
            return;
        }
    const json own = {{"rope_parameters", defaults}};
    const ConfigKeys k(own, owner);
    c.rope.theta = defaults.value("rope_theta", c.rope.theta);
    readRopeScaling(k, c);
    readLlama4Scaling(k.nested("rope_parameters"), c);
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
    readMistralRope(t, c,
                    {{"rope_type", "yarn"},
                     {"rope_theta", 1e6},
                     {"factor", 16.0},
                     {"original_max_position_embeddings", 16384},
                     {"beta_fast", 32.0},
                     {"beta_slow", 1.0},
                     {"mscale_all_dim", 1.0},
                     {"mscale", 1.0},
                     {"llama_4_scaling_beta", 0.1}},
                    "Ministral3Config");
}

} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(ministral3) {
    return {.name = "ministral3",
            .label = "Ministral 3",
            .examples = "Ministral 3 3B, 8B and 14B, Mistral Medium 3.5 (position-scaled queries)",
            .architectures = {"Ministral3ForCausalLM"},
            .parse = sparqlab::model::parseMinistral3Text};
}
