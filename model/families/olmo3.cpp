// OLMo 3 (Olmo3ForCausalLM): OLMo 2's block (norms after attention and the MLP, RMSNorm over the
// whole q and k) with sliding layers (three of every four by default) and a RoPE per layer
// type: the sliding layers' plain, the full layers' with the config's scaling (YaRN).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

constexpr double kDefaultTheta = 500000.0; ///< Olmo3Config.default_theta

void parseOlmo3(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 50304, .normEps = 1e-5, .ropeTheta = kDefaultTheta};
    readLlamaCore(t, c, d);
    c.norms = NormPlacement::Post;
    c.normWeightInFloat = true; // Olmo2RMSNorm: (w · x̂) in float32, then the cast
    c.qkNorm = QkNorm::Whole;
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers));
    for (size_t l = 0; l < kinds.size(); ++l)
        kinds[l] = (l + 1) % 4 ? "sliding_attention" : "full_attention";
    readLayerKinds(t, c, kinds, {"sliding_attention", "full_attention"});
    windowSlidingLayers(t, c, kinds, 4096);
    // The sliding layers' RoPE, without scaling: v5 names both per layer type; for v4 below.
    c.localRope.theta = c.rope.theta;
    c.layerLocalRope.assign(kinds.size(), false);
    for (size_t l = 0; l < kinds.size(); ++l)
        c.layerLocalRope[l] = kinds[l] == "sliding_attention";
    readRopeScaling(t, c);
    if (!t.has("rope_parameters")) {
        // The v4 form as transformers 5.x's Olmo3Config converts it: rope_scaling joins the full
        // layers' entry, where YaRN does not read truncate (so true), and rope_theta goes to that
        // entry alone, the sliding layers keeping the class's default_theta.
        c.localRope.theta = kDefaultTheta;
        c.rope.truncate = c.localRope.truncate = true;
    }
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(olmo3) {
    return {.name = "olmo3",
            .label = "OLMo 3",
            .examples = "OLMo 3 7B and 32B",
            .architectures = {"Olmo3ForCausalLM"},
            .parse = parseOlmo3};
}
