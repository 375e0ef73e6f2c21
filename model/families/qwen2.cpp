// Qwen 2 and 2.5 (Qwen2ForCausalLM): the Llama block with q, k, v biases; a window over every
// layer only with use_sliding_window.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

/// Qwen2Config's defaults (Qwen 3 shares them, with head_dim 128).
LlamaDefaults qwenDefaults() {
    const LlamaDefaults d{.vocab = 151936, .intermediate = 22016, .maxPositions = 32768};
    return d;
}

namespace {

void parseQwen2(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = qwenDefaults();
    d.qkvBias = true;
    readLlamaCore(t, c, d);
    // Qwen's config keeps sliding_window only with use_sliding_window; the mask then windows
    // every layer (HF 4.51's mask helper).
    if (t.boolean("use_sliding_window", false))
        readUniformWindow(t, c, 4096);
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
