// EXAONE 4.0 (Exaone4ForCausalLM: LG's EXAONE 4.0 32B and 1.2B): OLMo 2's block (norms after
// attention and the MLP) with q and k normalised per head, sliding layers (three of every four
// by default), and, where the model has a window, no positions at all on its full layers
// (transformers' "global NoPE"): RoPE on the sliding layers only.

#include "model/family_common.h"
#include "model/model_family.h"

#include <string>
#include <vector>

namespace sparqlab::model {
namespace {

/// The layers' kinds without layer_types: sliding_window_pattern, every pattern-th layer full
/// (Exaone4Config), or as EXAONE's own configs write it, a string such as "LLLG" repeated
/// ('L' sliding, 'G' full) with the last layer full whatever the letters say (as EXAONE's code,
/// TensorRT-LLM and mlx-lm read it; transformers cannot read a string there).
std::vector<std::string> patternKinds(const ConfigKeys& t, int64_t layers) {
    std::vector<std::string> kinds(static_cast<size_t>(layers), "sliding_attention");
    if (t.has("sliding_window_pattern") && t.raw("sliding_window_pattern").is_string()) {
        const std::string p = t.string("sliding_window_pattern", "");
        if (p.empty() || p.find_first_not_of("LG") != std::string::npos)
            t.fail("sliding_window_pattern", "must be a number or letters L and G (\"LLLG\")");
        for (size_t l = 0; l < kinds.size(); ++l)
            if (p[l % p.size()] == 'G' || l + 1 == kinds.size())
                kinds[l] = "full_attention";
        return kinds;
    }
    const int64_t every = t.integer("sliding_window_pattern", 4);
    for (size_t l = 0; l < kinds.size(); ++l)
        if ((static_cast<int64_t>(l) + 1) % every == 0)
            kinds[l] = "full_attention";
    return kinds;
}

void parseExaone4(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 102400,
                          .intermediate = 16384,
                          .kvHeads = 32,
                          .maxPositions = 2048,
                          .normEps = 1e-5};
    readLlamaCore(t, c, d);
    c.qkvBias = c.outBias = false; // (Exaone4Attention's projections have none, whatever
                                   // attention_bias says)
    c.norms = NormPlacement::Post;
    c.qkNorm = QkNorm::PerHead;
    // sliding_window null: every layer full, all with RoPE; else the pattern's, and the full
    // layers without RoPE.
    const bool windowed = !t.isNull("sliding_window");
    if (windowed) // (0 would make the full layers NoPE and leave the sliding ones unbounded)
        t.integer("sliding_window", 4096, /*min=*/1);
    std::vector<std::string> kinds = windowed
                                         ? patternKinds(t, c.nLayers)
                                         : std::vector<std::string>(c.nLayers, "full_attention");
    readLayerKinds(t, c, kinds, {"sliding_attention", "full_attention"});
    windowSlidingLayers(t, c, kinds, 4096);
    if (windowed) {
        c.layerNoRope.assign(kinds.size(), false);
        for (size_t l = 0; l < kinds.size(); ++l)
            c.layerNoRope[l] = kinds[l] == "full_attention";
    }
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(exaone4) {
    return {.name = "exaone4",
            .label = "EXAONE 4.0",
            .examples = "EXAONE 4.0 32B and 1.2B (sliding layers, NoPE full layers, q and k norms)",
            .architectures = {"Exaone4ForCausalLM"},
            .parse = parseExaone4};
}
