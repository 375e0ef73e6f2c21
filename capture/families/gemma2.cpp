// Gemma 2 (Gemma2ForCausalLM): Gemma's block with sandwich norms, attention and final-logit
// soft-caps, and a sliding window on every other layer.

#include "capture/family_common.h"
#include "capture/model_family.h"

namespace sparqlab::capture {

void readGemmaCore(const ConfigKeys& t, ModelConfig& c, LlamaDefaults d, int64_t scalarDefault);
void readGemmaSandwich(const ConfigKeys& t, ModelConfig& c, double attnCap, double finalCap);

/// Gemma 2's and 3's small-model defaults.
LlamaDefaults gemma2Defaults() {
    LlamaDefaults d;
    d.vocab = 256000;
    d.hidden = 2304;
    d.intermediate = 9216;
    d.layers = 26;
    d.heads = 8;
    d.kvHeads = 4;
    d.maxPositions = 8192;
    return d;
}

namespace {

void parseGemma2(const ConfigKeys& t, ModelConfig& c) {
    readGemmaCore(t, c, gemma2Defaults(), 256);
    readGemmaSandwich(t, c, 50.0, 30.0);
    const int64_t w = t.integer("sliding_window", 4096);
    std::vector<bool> sliding(static_cast<size_t>(c.nLayers));
    for (int64_t l = 0; l < c.nLayers; ++l)
        sliding[static_cast<size_t>(l)] = l % 2 == 0;
    readLayerTypes(t, c, sliding);
    c.layerWindow.assign(static_cast<size_t>(c.nLayers), 0);
    for (size_t l = 0; l < sliding.size(); ++l)
        c.layerWindow[l] = sliding[l] ? w : 0;
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::capture

SPARQLAB_MODEL_FAMILY(gemma2) {
    ModelFamily f;
    f.name = "gemma2";
    f.label = "Gemma 2";
    f.examples = "Gemma 2";
    f.architectures = {"Gemma2ForCausalLM"};
    f.parse = parseGemma2;
    return f;
}
