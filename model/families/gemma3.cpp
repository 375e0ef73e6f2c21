// Gemma 3 (Gemma3ForCausalLM, and the language model of Gemma3ForConditionalGeneration
// folders): Gemma 2's block without soft-caps by default, RMSNorm on q and k per head, five
// sliding layers to one global, the sliding layers with their own RoPE base.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readGemmaCore(const ConfigKeys& t, ModelConfig& c, LlamaDefaults d, int64_t scalarDefault);
void readGemmaSandwich(const ConfigKeys& t, ModelConfig& c, double attnCap, double finalCap);
LlamaDefaults gemma2Defaults(); // gemma2.cpp

namespace {

void parseText(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = gemma2Defaults();
    d.vocab = 262208;
    d.maxPositions = 131072;
    d.ropeTheta = 1e6;
    readGemmaCore(t, c, d, 256);
    readGemmaSandwich(t, c, 0.0, 0.0);
    c.qkNorm = QkNorm::PerHead;
    const int64_t w = t.integer("sliding_window", 4096);
    // All but every sliding_window_pattern-th layer slide; layer_types names them in later
    // configs.
    const int64_t pattern = t.integer("sliding_window_pattern", 6);
    std::vector<bool> sliding(static_cast<size_t>(c.nLayers));
    for (int64_t l = 0; l < c.nLayers; ++l)
        sliding[static_cast<size_t>(l)] = (l + 1) % pattern != 0;
    readLayerTypes(t, c, sliding);
    c.layerWindow.assign(static_cast<size_t>(c.nLayers), 0);
    for (size_t l = 0; l < sliding.size(); ++l)
        c.layerWindow[l] = sliding[l] ? w : 0;
    // Local layers: their own base and no scaling.
    c.localRope.theta = t.number("rope_local_base_freq", 10000.0);
    c.layerLocalRope = sliding;
    readRopeScaling(t, c);
}

void parseGemma3(const ConfigKeys& k, ModelConfig& c) {
    if (c.architectureName != "Gemma3ForConditionalGeneration")
        return parseText(k, c);
    // Vision-language folders keep the text model's config in text_config and its weights
    // under language_model.
    if (!k.has("text_config") || !k.raw("text_config").is_object())
        k.fail("text_config", "is missing (the text model's config)");
    const ConfigKeys t = k.nested("text_config");
    c.weightPrefix = "language_model.";
    if (c.eosIds.empty())
        c.eosIds = t.ids("eos_token_id");
    if (c.bosId < 0 && !t.ids("bos_token_id").empty())
        c.bosId = t.ids("bos_token_id").front();
    parseText(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(gemma3) {
    return {.name = "gemma3",
            .label = "Gemma 3",
            .examples = "Gemma 3 (text, and the language model of vision-language folders)",
            .architectures = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"},
            .parse = parseGemma3};
}
