// DeepSeek-V3 and Kimi K2 (DeepseekV3ForCausalLM): multi-head latent attention (q from a
// low-rank projection; per head [k_nope | v] from one shared latent and a rotary key all heads
// share, RoPE on the rope dimensions only, interleaved), YaRN with DeepSeek's softmax scale
// (× mscale²), dense first layers, then a sigmoid router with a correction bias and
// group-limited routing, and a shared expert.

#include "model/family_common.h"
#include "model/model_family.h"
#include "model/rope.h"

#include <cmath>

namespace sparqlab::model {

/// DeepSeek-V3's defaults for the keys a config omits (GLM-5's differ, glm_moe_dsa.cpp).
DeepseekDefaults deepseekV3Defaults() {
    DeepseekDefaults d;
    d.core = {.vocab = 129280,
              .hidden = 7168,
              .intermediate = 18432,
              .layers = 61,
              .heads = 128,
              .kvHeads = 128,
              .maxPositions = 4096};
    return d;
}

/// DeepSeek-V3's keys with `dd`'s defaults (DeepSeek-V3.2 and GLM-5 read them too).
void parseDeepseekV3(const ConfigKeys& t, ModelConfig& c, const DeepseekDefaults& dd) {
    const LlamaDefaults& d = dd.core;
    readLlamaCore(t, c, d);
    MlaSpec& a = c.mla;
    a.qLoraRank = t.isNull("q_lora_rank") ? 0 : t.integer("q_lora_rank", dd.qLoraRank);
    a.kvLoraRank = t.integer("kv_lora_rank", dd.kvLoraRank);
    a.nopeDim = t.integer("qk_nope_head_dim", dd.nopeDim);
    a.ropeDim = t.integer("qk_rope_head_dim", dd.ropeDim);
    c.vHeadDim = t.integer("v_head_dim", dd.vHeadDim);
    // head_dim in the file is the rotary width; every head's q·k has nope + rope dimensions and
    // each head has its own key (num_key_value_heads: the heads).
    c.headDim = a.nopeDim + a.ropeDim;
    if (t.has("qk_head_dim") && t.integer("qk_head_dim", c.headDim) != c.headDim)
        t.fail("qk_head_dim",
               "must be qk_nope_head_dim + qk_rope_head_dim (" + std::to_string(c.headDim) + ")");
    c.rotaryDim = a.ropeDim;
    c.ropeLayout =
        t.boolean("rope_interleave", true) ? RopeLayout::InterleavedToHalf : RopeLayout::Half;
    readRopeScaling(t, c);
    c.rotaryDim = a.ropeDim; // (the rotary part whatever partial_rotary_factor says: Mistral 4's
                             // gives it as a share of the whole head)
    // The softmax scale: 1/sqrt(qk_head_dim), × mscale² of the rope's factor under a scaling.
    c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    if (!c.rope.scaling.empty()) {
        const ConfigKeys r =
            t.has("rope_parameters") ? t.nested("rope_parameters") : t.nested("rope_scaling");
        const double all = r.number("mscale_all_dim", 0);
        if (all != 0) {
            const double m = yarnMscale(c.rope.factor, all);
            c.attnScale *= m * m;
        }
    }
    readDeepseekMoe(t, c, dd.moe);
}

void readDeepseekMoe(const ConfigKeys& t, ModelConfig& c, const DeepseekMoeDefaults& d) {
    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "n_routed_experts", d.experts);
    m.topK = t.integer("num_experts_per_tok", d.topK);
    m.intermediate = t.integer("moe_intermediate_size", d.intermediate);
    m.router = MoeRouter::SigmoidGroups;
    m.normTopK = t.boolean("norm_topk_prob", true);
    m.routedScale = t.number("routed_scaling_factor", d.routedScale);
    m.groups = t.integer("n_group", d.groups);
    m.topKGroups = t.integer("topk_group", d.topKGroups);
    m.scoreCorrection = true;
    m.sharedIntermediate = m.intermediate * t.integer("n_shared_experts", 1, /*min=*/0);
    if (m.experts % m.groups != 0 || m.experts / m.groups < 2)
        t.fail("n_group", "must divide n_routed_experts into groups of at least 2");
    if (m.topKGroups > m.groups)
        t.fail("topk_group", "must be at most n_group");
    if (m.topK > m.experts)
        t.fail("num_experts_per_tok", "must be at most n_routed_experts");
    const int64_t firstDense = t.integer("first_k_dense_replace", d.firstDense, /*min=*/0);
    for (int64_t l = 0; l < c.nLayers; ++l)
        m.layers.push_back(l >= firstDense);
}

} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(deepseek_v3) {
    return {.name = "deepseek_v3",
            .label = "DeepSeek-V3",
            .examples = "DeepSeek-V3, DeepSeek-R1, Kimi K2 (MLA, MoE)",
            .architectures = {"DeepseekV3ForCausalLM"},
            .parse = [](const ConfigKeys& t, ModelConfig& c) {
                parseDeepseekV3(t, c, deepseekV3Defaults());
            }};
}
