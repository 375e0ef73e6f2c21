// Qwen 3 (Qwen3ForCausalLM): the Llama block with RMSNorm on each head's q and k before RoPE
// and head_dim 128 by default.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

LlamaDefaults qwenDefaults();                             // qwen2.cpp
void readQwenWindow(const ConfigKeys& t, ModelConfig& c); // qwen2.cpp

namespace {

void parseQwen3(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = qwenDefaults();
    d.headDim = 128;
    readLlamaCore(t, c, d);
    c.qkNorm = QkNorm::PerHead;
    readQwenWindow(t, c);
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen3) {
    return {.name = "qwen3",
            .label = "Qwen 3",
            .examples = "Qwen 3 (dense)",
            .architectures = {"Qwen3ForCausalLM"},
            .parse = parseQwen3};
}
