// Qwen 2 and 2.5 (Qwen2ForCausalLM): the Llama block with q, k, v biases; a window only with
// use_sliding_window.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

/// Qwen2Config's defaults (Qwen 3 shares them, with head_dim 128).
LlamaDefaults qwenDefaults() {
    const LlamaDefaults d{.vocab = 151936, .intermediate = 22016, .maxPositions = 32768};
    return d;
}

/// Qwen 2 and 3's window, only with use_sliding_window: on the layers transformers 5.x's
/// layer_types call sliding (5.x writes them into every config it saves: by default the layers
/// from max_window_layers on), else, in a 4.x config, on every layer (HF 4.51's mask helper).
void readQwenWindow(const ConfigKeys& t, ModelConfig& c) {
    if (!t.boolean("use_sliding_window", false))
        return;
    if (!t.has("layer_types")) {
        readUniformWindow(t, c, 4096);
        return;
    }
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "full_attention");
    readLayerKinds(t, c, kinds, {"full_attention", "sliding_attention"});
    windowSlidingLayers(t, c, kinds, 4096);
}

namespace {

void parseQwen2(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = qwenDefaults();
    d.qkvBias = true;
    readLlamaCore(t, c, d);
    readQwenWindow(t, c);
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen2) {
    return {.name = "qwen2",
            .label = "Qwen 2",
            .examples = "Qwen 2, Qwen 2.5",
            .architectures = {"Qwen2ForCausalLM"},
            .parse = parseQwen2};
}
