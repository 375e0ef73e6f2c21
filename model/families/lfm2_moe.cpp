// LFM2-MoE (Lfm2MoeForCausalLM: LFM2 8B-A1B): LFM2's layers (short convolutions, attention with
// q and k norms) with experts in place of the MLP from num_dense_layers on, behind a sigmoid
// router whose expert_bias chooses but does not weigh (docs/learned-sparse-and-hybrid.md §12).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readLfm2Layers(const ConfigKeys& t, ModelConfig& c); // lfm2.cpp

namespace {

void parseLfm2Moe(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 65536;
    d.hidden = 2048;
    d.intermediate = 7168; // (the dense layers' width, as given: no adjustment)
    d.layers = 24;
    d.kvHeads = 8;
    d.maxPositions = 128000;
    d.ropeTheta = 1e6;
    d.tieEmbeddings = true;
    readLlamaCore(t, c, d);
    readLfm2Layers(t, c);
    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "num_experts", 32);
    m.topK = t.integer("num_experts_per_tok", 4, 1, m.experts);
    m.intermediate = t.integer("moe_intermediate_size", 1792);
    // σ of the logits; expert_bias added to choose the top k, the k σ renormalised (+ 1e-6)
    // and × routed_scaling_factor
    m.router = MoeRouter::SigmoidGroups;
    m.scoreCorrection = t.boolean("use_expert_bias", true);
    m.scoreCorrectionBeside = true;
    m.scoreBiasName = "expert_bias";
    m.normTopK = t.boolean("norm_topk_prob", true);
    m.normEps = 1e-6;
    m.routedScale =
        t.isNull("routed_scaling_factor") ? 1.0 : t.number("routed_scaling_factor", 1.0);
    m.layout = ExpertLayout::Mixtral; // experts.E.w1, w3, w2 (Model::open: or packed)
    m.module = "feed_forward";
    m.routerName = "gate";
    const int64_t dense = t.integer("num_dense_layers", 2, 0);
    m.layers.assign(static_cast<size_t>(c.nLayers), false);
    for (int64_t l = dense; l < c.nLayers; ++l)
        m.layers[static_cast<size_t>(l)] = true;
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(lfm2_moe) {
    return {.name = "lfm2_moe",
            .label = "LFM2-MoE",
            .examples = "LFM2 8B-A1B (LFM2's short convolutions and attention, experts behind a "
                        "sigmoid router)",
            .architectures = {"Lfm2MoeForCausalLM"},
            .parse = parseLfm2Moe};
}
