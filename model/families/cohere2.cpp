// Command R7B (Cohere2ForCausalLM): attention and MLP in parallel on one mean-centred LayerNorm
// without bias, sliding layers with interleaved RoPE and global layers without RoPE (every
// sliding_window_pattern-th), tied embeddings and logits × logit_scale.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseCohere2(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 256000,
                          .hidden = 8192,
                          .intermediate = 22528,
                          .layers = 40,
                          .heads = 64,
                          .maxPositions = 8192,
                          .normEps = 1e-5,
                          .tieEmbeddings = true};
    readLlamaCore(t, c, d);
    c.normEps = t.number("layer_norm_eps", 1e-5);
    c.layerNorm = true;
    c.norms = NormPlacement::Parallel;
    c.ropeLayout = RopeLayout::Interleaved;
    c.logitScale = t.number("logit_scale", 0.0625);
    const int64_t pattern = t.integer("sliding_window_pattern", 4);
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers));
    for (size_t l = 0; l < kinds.size(); ++l)
        kinds[l] = (static_cast<int64_t>(l) + 1) % pattern ? "sliding_attention" : "full_attention";
    readLayerKinds(t, c, kinds, {"sliding_attention", "full_attention"});
    windowSlidingLayers(t, c, kinds, 4096);
    // RoPE on the windowed layers only (Cohere2Attention rotates when it has a window).
    c.layerNoRope.assign(kinds.size(), true);
    for (size_t l = 0; l < c.layerWindow.size(); ++l)
        c.layerNoRope[l] = c.layerWindow[l] == 0;
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(cohere2) {
    return {.name = "cohere2",
            .label = "Command R7B",
            .examples = "Command R7B (Cohere 2: NoPE global layers)",
            .architectures = {"Cohere2ForCausalLM"},
            .parse = parseCohere2};
}
