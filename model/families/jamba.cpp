// Jamba (JambaForCausalLM: AI21's Jamba v0.1, Jamba 1.5 and 1.6 Mini and Large, Jamba 1.7,
// Jamba Reasoning 3B): Mamba (Mamba-1) layers with RMSNorms on dt, B and C, and every
// attn_layer_period-th layer attention without positions; experts on every
// expert_layer_period-th layer behind a softmax router whose top k are not renormalised
// (docs/learned-sparse-and-hybrid.md §13).

#include "model/family_common.h"
#include "model/model_family.h"

#include <string>
#include <utility>

namespace sparqlab::model {

namespace {

/// A layer pattern's period and offset (`name`_layer_period, `name`_layer_offset): layer l
/// has the property where l mod period = offset; JambaConfig refuses an offset at or past the
/// period.
std::pair<int64_t, int64_t> readPeriod(const ConfigKeys& t, const std::string& name, int64_t period,
                                       int64_t offset) {
    const int64_t p = t.integer(name + "_layer_period", period, 1);
    const int64_t o = t.integer(name + "_layer_offset", offset, 0);
    if (o >= p)
        t.fail(name + "_layer_offset",
               "must be smaller than " + name + "_layer_period (" + std::to_string(p) + ")");
    return {p, o};
}

void parseJamba(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 65536;
    d.intermediate = 14336;
    d.kvHeads = 8;
    d.maxPositions = 262144;
    d.normEps = 1e-6;
    readJambaBlockCore(t, c, d);
    c.qkvBias = c.outBias = false; // (JambaAttention's projections have none)
    c.mlpBias = false;
    c.layerNoRope.assign(static_cast<size_t>(c.nLayers), true); // no positions at all
    // The Mamba-1 mixer in LinearSpec's terms: no key heads (B and C are shared by every
    // channel), one value head of the inner width, key_head_dim the state's, so that the state
    // is I·N and the convolution's last K − 1 inputs of x.
    LinearSpec& s = c.linear;
    s.keyHeads = 0;
    s.keyDim = t.integer("mamba_d_state", 16);
    s.valueHeads = 1;
    s.valueDim = t.integer("mamba_expand", 2) * c.hiddenSize;
    s.convKernel = t.integer("mamba_d_conv", 4, 1, 64);
    s.convBias = t.boolean("mamba_conv_bias", true);
    s.projBias = t.boolean("mamba_proj_bias", false);
    s.convAct = c.hiddenAct;
    s.innerNorms = true; // (dt_layernorm, b_layernorm, c_layernorm: always, in transformers)
    const bool automatic = !t.has("mamba_dt_rank") || t.isNull("mamba_dt_rank") ||
                           (t.raw("mamba_dt_rank").is_string() && t.raw("mamba_dt_rank") == "auto");
    s.dtRank = automatic ? (c.hiddenSize + 15) / 16 : t.integer("mamba_dt_rank", 256);
    const auto [attnPeriod, attnOffset] = readPeriod(t, "attn", 8, 4);
    for (int64_t l = 0; l < c.nLayers; ++l)
        c.layerKinds.push_back(l % attnPeriod == attnOffset ? LayerKind::Attention
                                                            : LayerKind::Mamba1);
    if (c.attentionLayers().empty())
        t.fail("attn_layer_offset", "names no layer of " + std::to_string(c.nLayers) +
                                        " (the attention layers are what SparQ Lab captures)");
    if (c.linearLayerCount() == 0) // (every layer attention: no hybrid)
        c.layerKinds.clear();
    // Experts where layer mod expert_layer_period = expert_layer_offset, num_experts > 1.
    const auto [expertPeriod, expertOffset] = readPeriod(t, "expert", 2, 1);
    MoeSpec& m = c.moe;
    const int64_t experts = readExpertCount(t, "num_experts", 16);
    if (experts > 1) {
        m.experts = experts;
        m.topK = t.integer("num_experts_per_tok", 2, 1, m.experts);
        m.intermediate = c.intermediateSize;
        m.router = MoeRouter::SoftmaxTopK; // softmax in float32, the top k as they are
        m.normTopK = false;
        m.layout = ExpertLayout::PerExpert; // experts.E.*_proj (Model::open: or packed)
        m.module = "feed_forward";
        m.routerName = "router";
        for (int64_t l = 0; l < c.nLayers; ++l)
            m.layers.push_back(l % expertPeriod == expertOffset);
    }
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(jamba) {
    return {.name = "jamba",
            .label = "Jamba",
            .examples = "Jamba v0.1, Jamba 1.5, 1.6 and 1.7 Mini and Large, Jamba Reasoning 3B "
                        "(Mamba layers, attention without positions, MoE)",
            .architectures = {"JambaForCausalLM"},
            .parse = parseJamba};
}
