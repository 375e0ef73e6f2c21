// Qwen 3 (Qwen3ForCausalLM): the Llama block with RMSNorm on each head's q and k before RoPE
// and head_dim 128 by default.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

LlamaDefaults qwenDefaults(); // qwen2.cpp

/// Qwen 3's attention after the Llama core (Qwen3-MoE's too): RMSNorm on each head's q and k,
/// the optional uniform window, RoPE scaling.
void readQwen3Attention(const ConfigKeys& t, ModelConfig& c) {
    c.qkNorm = QkNorm::PerHead;
    if (t.boolean("use_sliding_window", false))
        readUniformWindow(t, c, 4096);
    readRopeScaling(t, c);
}

namespace {

void parseQwen3(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = qwenDefaults();
    d.headDim = 128;
    readLlamaCore(t, c, d);
    readQwen3Attention(t, c);
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
