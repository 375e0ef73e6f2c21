// Llama (LlamaForCausalLM: Llama 2/3, TinyLlama, SmolLM): the Llama-style block as HF's
// LlamaConfig reads it, with linear or llama3 RoPE scaling.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseLlama(const ConfigKeys& t, ModelConfig& c) {
    readLlamaCore(t, c, LlamaDefaults{});
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(llama) {
    return {.name = "llama",
            .label = "Llama",
            .examples = "Llama 2 and 3, TinyLlama, SmolLM",
            .architectures = {"LlamaForCausalLM"},
            .parse = parseLlama};
}
