// Mistral (MistralForCausalLM): the Llama block with grouped KV heads and one sliding window for
// every layer (4,096 unless the config says otherwise; null: none).

#include "capture/family_common.h"
#include "capture/model_family.h"

namespace sparqlab::capture {
namespace {

void parseMistral(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.intermediate = 14336;
    d.kvHeads = 8;
    d.maxPositions = 4096 * 32;
    readLlamaCore(t, c, d);
    readUniformWindow(t, c, 4096);
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::capture

SPARQLAB_MODEL_FAMILY(mistral) {
    ModelFamily f;
    f.name = "mistral";
    f.label = "Mistral";
    f.examples = "Mistral 7B";
    f.architectures = {"MistralForCausalLM"};
    f.parse = parseMistral;
    return f;
}
