// Mistral (MistralForCausalLM): the Llama block with grouped KV heads and one sliding window for
// every layer (4,096 unless the config says otherwise; null: none).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

/// MistralConfig's keys (also the language model of Mistral Small 3.1 and 3.2, mistral3.cpp).
void parseMistralText(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.intermediate = 14336, .kvHeads = 8, .maxPositions = 4096 * 32};
    readLlamaCore(t, c, d);
    readUniformWindow(t, c, 4096);
    readRopeScaling(t, c);
}

} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(mistral) {
    return {.name = "mistral",
            .label = "Mistral",
            .examples = "Mistral 7B",
            .architectures = {"MistralForCausalLM"},
            .parse = sparqlab::model::parseMistralText};
}
