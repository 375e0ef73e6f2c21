// Mixtral (MixtralForCausalLM): Mistral's block (one sliding window for every layer when the
// config sets one) with a mixture of experts on every layer: softmax over the experts, the top
// k renormalised; experts stored as w1 (gate), w3 (up), w2 (down).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseMixtral(const ConfigKeys& t, ModelConfig& c) {
    readLlamaCore(t, c, mixtralDefaults());
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "sliding_attention");
    readLayerKinds(t, c, kinds, {"sliding_attention", "full_attention"});
    windowSlidingLayers(t, c, kinds, 0); // MixtralConfig: sliding_window None
    readRopeScaling(t, c);
    readMixtralMoe(t, c);
}

} // namespace

LlamaDefaults mixtralDefaults() {
    return {.intermediate = 14336,
            .kvHeads = 8,
            .maxPositions = 4096 * 32,
            .normEps = 1e-5,
            .ropeTheta = 1e6};
}

void readMixtralMoe(const ConfigKeys& t, ModelConfig& c) {
    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "num_local_experts", 8, /*alias=*/"num_experts");
    m.topK = t.integer("num_experts_per_tok", 2, 1, m.experts);
    m.intermediate = c.intermediateSize;
    m.router = MoeRouter::SoftmaxTopK; // (the top k renormalised)
    m.layout = ExpertLayout::Mixtral;
    m.module = "block_sparse_moe";
    m.layers.assign(static_cast<size_t>(c.nLayers), true);
}

} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(mixtral) {
    return {.name = "mixtral",
            .label = "Mixtral",
            .examples = "Mixtral 8x7B, 8x22B",
            .architectures = {"MixtralForCausalLM"},
            .parse = parseMixtral};
}
