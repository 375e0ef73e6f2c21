// GLM-4.7-Flash (Glm4MoeLiteForCausalLM): DeepSeek-V3's block under GLM's defaults, multi-head
// latent attention and DeepSeek-V3's mixture of experts, not GLM-4.5's grouped-query attention;
// which layers have a dense MLP is mlp_layer_types ("dense" or "sparse"; the first layer dense
// by default), not first_k_dense_replace (docs/sinks-chunks-nope-mla.md).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseGlm4MoeLite(const ConfigKeys& t, ModelConfig& c) {
    DeepseekDefaults d; // Glm4MoeLiteConfig's
    d.core = {.vocab = 154880,
              .hidden = 2048,
              .intermediate = 10240,
              .layers = 47,
              .heads = 20,
              .kvHeads = 20,
              .headDim = 64, // (head_dim is qk_rope_head_dim here; 2048 / 20 is no width)
              .maxPositions = 202752,
              .normEps = 1e-5};
    d.qLoraRank = 768;
    d.kvLoraRank = 512;
    d.nopeDim = 192;
    d.ropeDim = 64;
    d.vHeadDim = 256;
    d.moe = {.experts = 64,
             .topK = 4,
             .intermediate = 1536,
             .groups = 1,
             .topKGroups = 1,
             .firstDense = 1,
             .routedScale = 1.8};
    parseDeepseekV3(t, c, d);
    // The class has no first_k_dense_replace (a config's key of that name is kept, not read).
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "sparse");
    kinds.front() = "dense";
    readLayerKinds(t, c, kinds, {"dense", "sparse"}, {}, "mlp_layer_types");
    for (size_t l = 0; l < kinds.size(); ++l)
        c.moe.layers[l] = kinds[l] == "sparse" && c.moe.experts > 0;
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(glm4_moe_lite) {
    return {.name = "glm4_moe_lite",
            .label = "GLM-4.7-Flash",
            .examples = "GLM-4.7-Flash (MLA, MoE)",
            .architectures = {"Glm4MoeLiteForCausalLM"},
            .parse = parseGlm4MoeLite};
}
