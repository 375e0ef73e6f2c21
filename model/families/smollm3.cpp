// SmolLM 3 (SmolLM3ForCausalLM): the Llama block with NoPE layers: no_rope_layers[l] = 0 (every
// no_rope_layer_interval-th layer by default) rotates neither q nor k.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseSmolLM3(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 128256,
                          .hidden = 2048,
                          .intermediate = 11008,
                          .layers = 36,
                          .heads = 16,
                          .kvHeads = 4,
                          .maxPositions = 32768,
                          .ropeTheta = 2000000.0,
                          .tieEmbeddings = true};
    readLlamaCore(t, c, d);
    const int64_t interval = t.integer("no_rope_layer_interval", 4);
    std::vector<bool> rope(static_cast<size_t>(c.nLayers));
    for (size_t l = 0; l < rope.size(); ++l)
        rope[l] = (static_cast<int64_t>(l) + 1) % interval != 0;
    rope = readLayerFlags(t, c, "no_rope_layers", rope); // 1: the layer has RoPE
    c.layerNoRope.assign(rope.size(), false);
    for (size_t l = 0; l < rope.size(); ++l)
        c.layerNoRope[l] = !rope[l];
    // Windows only with use_sliding_window, on the NoPE layers (SmolLM3Config's layer_types).
    std::vector<std::string> kinds(rope.size(), "full_attention");
    const bool windowed = t.boolean("use_sliding_window", false) && t.has("sliding_window");
    for (size_t l = 0; l < kinds.size(); ++l)
        if (windowed && !rope[l])
            kinds[l] = "sliding_attention";
    readLayerKinds(t, c, kinds, {"sliding_attention", "full_attention"});
    windowSlidingLayers(t, c, kinds, 0);
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(smollm3) {
    return {.name = "smollm3",
            .label = "SmolLM 3",
            .examples = "SmolLM3-3B (NoPE layers)",
            .architectures = {"SmolLM3ForCausalLM"},
            .parse = parseSmolLM3};
}
