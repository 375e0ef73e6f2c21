// Qwen3-VL (Qwen3VLForConditionalGeneration): the language model of the vision-language folder,
// Qwen 3's decoder (RMSNorm on each head's q and k) read from text_config, its weights under
// model.language_model. Its multimodal RoPE (mrope_section, interleaved over time, height and
// width) gives every frequency the same position when the three axes agree, as they do for text
// alone: Qwen 3's RoPE. No sliding window (Qwen3VLTextConfig has none).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

LlamaDefaults qwenDefaults(); // qwen2.cpp

/// Qwen3-VL's text model (and Qwen3-VL-MoE's): Qwen 3's attention and RoPE; the RoPE base's
/// default is Qwen3VLTextConfig's, 5,000,000 in transformers 4.x and 500,000 (default_theta) in
/// 5.x, whose configs are those with rope_parameters.
void readQwen3VlTextCore(const ConfigKeys& t, ModelConfig& c, LlamaDefaults d) {
    d.ropeTheta = t.has("rope_parameters") ? 500000.0 : 5000000.0;
    readLlamaCore(t, c, d);
    c.qkNorm = QkNorm::PerHead;
    readRopeScaling(t, c);
}

namespace {

void parseQwen3VlText(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = qwenDefaults();
    d.headDim = 128;
    d.maxPositions = 128000;
    readQwen3VlTextCore(t, c, d);
}

void parseQwen3Vl(const ConfigKeys& k, ModelConfig& c) {
    readTextConfigFolder(k, c, parseQwen3VlText);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen3_vl) {
    return {.name = "qwen3_vl",
            .label = "Qwen3-VL",
            .examples = "Qwen3-VL 2B to 32B (dense; the language model of its VL folders)",
            .architectures = {"Qwen3VLForConditionalGeneration"},
            .parse = parseQwen3Vl};
}
