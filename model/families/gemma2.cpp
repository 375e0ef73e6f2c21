// Gemma 2 (Gemma2ForCausalLM): Gemma's block with sandwich norms, attention and final-logit
// soft-caps, and a sliding window on every other layer.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readGemmaCore(const ConfigKeys& t, ModelConfig& c, LlamaDefaults d, int64_t scalarDefault);
void readGemmaSandwich(const ConfigKeys& t, ModelConfig& c, double attnCap, double finalCap);

/// Gemma 2's and 3's small-model defaults.
LlamaDefaults gemma2Defaults() {
    const LlamaDefaults d{.vocab = 256000,
                          .hidden = 2304,
                          .intermediate = 9216,
                          .layers = 26,
                          .heads = 8,
                          .kvHeads = 4,
                          .maxPositions = 8192};
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
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(gemma2) {
    return {.name = "gemma2",
            .label = "Gemma 2",
            .examples = "Gemma 2",
            .architectures = {"Gemma2ForCausalLM"},
            .parse = parseGemma2};
}
