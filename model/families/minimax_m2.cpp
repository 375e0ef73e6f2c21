// MiniMax-M2, M2.1 and M2.5 (MiniMaxM2ForCausalLM): full attention on every layer, RMSNorm over
// the whole q and k projections (qk_norm_type "per_layer", OLMo 2's), RoPE on the first
// rotary_dim of each head (rotate-half), and a mixture of experts on every layer stored as
// Mixtral's (block_sparse_moe, experts w1, w3, w2) behind a sigmoid router: the top k of σ plus
// the correction bias block_sparse_moe.e_score_correction_bias, weighted by σ renormalised. No
// shared expert, no sliding window; the multi-token-prediction modules are not read.

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>

namespace sparqlab::model {

// (family_common.h.) `def` is all of head_dim for M2 and MiniMax-01, 64 for M3; a
// partial_rotary_factor inside rope_parameters is read after this, by readRopeScaling.
void readMiniMaxRotaryDim(const ConfigKeys& t, ModelConfig& c, int64_t def) {
    if (t.has("partial_rotary_factor") || (!t.has("rotary_dim") && def >= c.headDim)) {
        readPartialRotary(t, c, 1.0);
        return;
    }
    const int64_t d =
        t.integer("rotary_dim", std::min(def, c.headDim), /*min=*/2, /*max=*/c.headDim);
    if (d % 2 != 0)
        t.fail("rotary_dim", "must be even (" + std::to_string(d) + ")");
    c.rotaryDim = d;
}

void readMiniMaxMoe(const ConfigKeys& t, ModelConfig& c, int64_t experts, int64_t topK) {
    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "num_local_experts", experts, /*alias=*/"num_experts");
    m.topK = t.integer("num_experts_per_tok", topK);
    if (m.topK > m.experts)
        t.fail("num_experts_per_tok", "must be at most num_local_experts");
    m.intermediate = c.intermediateSize;
    m.router = MoeRouter::SigmoidGroups; // one group: the plain top k
    m.scoreCorrection = t.boolean("use_routing_bias", true);
    m.scoreCorrectionBeside = true;
    m.layout = ExpertLayout::Mixtral;
    m.module = "block_sparse_moe";
}

namespace {

void parseMiniMaxM2(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 200064,
                          .hidden = 3072,
                          .intermediate = 1536,
                          .layers = 62,
                          .heads = 48,
                          .kvHeads = 8,
                          .headDim = 128,
                          .maxPositions = 196608,
                          .normEps = 1e-6,
                          .ropeTheta = 5e6};
    readLlamaCore(t, c, d);
    // MiniMax-Text-01's lightning (linear) attention layers are attn_type 0; M2 has none.
    for (bool full : readLayerFlags(t, c, "attn_type_list",
                                    std::vector<bool>(static_cast<size_t>(c.nLayers), true)))
        if (!full)
            t.fail("attn_type_list", "names a lightning-attention layer (0); MiniMax-M2's are "
                                     "all full attention (1)");
    // transformers and vLLM always norm the whole projections; MiniMax's own code reads
    // use_qk_norm. "per_head" is MiniMax-M3's, another class (minimax_m3_vl.cpp).
    if (t.boolean("use_qk_norm", true)) {
        const std::string type = t.string("qk_norm_type", "per_layer");
        if (type != "per_layer")
            t.fail("qk_norm_type", "must be \"per_layer\" (MiniMax-M2's), not \"" + type + "\"");
        c.qkNorm = QkNorm::Whole;
    }
    readMiniMaxRotaryDim(t, c, c.headDim);
    readRopeScaling(t, c); // v5 may repeat partial_rotary_factor inside rope_parameters
    const std::string scoring = t.string("scoring_func", "sigmoid");
    if (scoring != "sigmoid")
        t.fail("scoring_func",
               "must be \"sigmoid\" (MiniMax-M2's router), not \"" + scoring + "\"");
    if (t.integer("shared_intermediate_size", 0, /*min=*/0) != 0)
        t.fail("shared_intermediate_size", "must be 0: a shared expert is not read");
    readMiniMaxMoe(t, c, 256, 8);
    c.moe.layers.assign(static_cast<size_t>(c.nLayers), true);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(minimax_m2) {
    return {.name = "minimax_m2",
            .label = "MiniMax-M2",
            .examples = "MiniMax-M2, M2.1, M2.5 (MoE)",
            .architectures = {"MiniMaxM2ForCausalLM"},
            .parse = parseMiniMaxM2};
}
