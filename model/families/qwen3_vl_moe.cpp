// Qwen3-VL-MoE (Qwen3VLMoeForConditionalGeneration: Qwen3-VL-30B-A3B, 235B-A22B): Qwen3-VL's
// language model with Qwen3-MoE's experts, its router always renormalising the top k
// (Qwen3VLMoeTextTopKRouter ignores norm_topk_prob). The hub's checkpoints pack each layer's
// experts as experts.gate_up_proj [E, h, 2I] (columns [gate | up]) and experts.down_proj
// [E, I, h], which transformers 5 transposes as it loads them: read as they are.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

LlamaDefaults qwenDefaults();                                                   // qwen2.cpp
void readQwen3VlTextCore(const ConfigKeys& t, ModelConfig& c, LlamaDefaults d); // qwen3_vl.cpp
void readQwen3MoeExperts(const ConfigKeys& t, ModelConfig& c);                  // qwen3_moe.cpp

namespace {

void parseQwen3VlMoeText(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = qwenDefaults(); // Qwen3VLMoeTextConfig's
    d.hidden = 2048;
    d.intermediate = 5632;
    d.layers = 24;
    d.heads = 16;
    d.kvHeads = 16;
    d.maxPositions = 128000;
    readQwen3VlTextCore(t, c, d);
    readQwen3MoeExperts(t, c);
    c.moe.normTopK = true;
    c.moe.layout = ExpertLayout::FusedHalves;
}

void parseQwen3VlMoe(const ConfigKeys& k, ModelConfig& c) {
    readTextConfigFolder(k, c, parseQwen3VlMoeText);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen3_vl_moe) {
    return {.name = "qwen3_vl_moe",
            .label = "Qwen3-VL-MoE",
            .examples = "Qwen3-VL-30B-A3B, Qwen3-VL-235B-A22B (MoE; the language model of its VL "
                        "folders)",
            .architectures = {"Qwen3VLMoeForConditionalGeneration"},
            .parse = parseQwen3VlMoe};
}
