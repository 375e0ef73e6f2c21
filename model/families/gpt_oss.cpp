// gpt-oss (GptOssForCausalLM): attention sinks (one learnt logit per query head), sliding and
// full layers in turn, q, k, v and o biases, YaRN RoPE without truncation, and a mixture of
// experts on every layer: the top k router logits (with a bias) softmaxed, experts stored fused
// with gate and up interleaved and a clamped SwiGLU (transformers 5.x, modeling_gpt_oss).

#include "model/family_common.h"
#include "model/model_family.h"

#include <cmath>

namespace sparqlab::model {
namespace {

void parseGptOss(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 201088,
                          .hidden = 2880,
                          .intermediate = 2880,
                          .layers = 36,
                          .heads = 64,
                          .kvHeads = 8,
                          .headDim = 64,
                          .maxPositions = 131072,
                          .normEps = 1e-5,
                          .ropeTheta = 150000.0,
                          .attentionBias = true};
    readLlamaCore(t, c, d);
    c.sinks = true;
    c.normWeightInFloat = true;
    c.swigluLimit = t.number("swiglu_limit", 7.0); // GptOssExperts: α 1.702, the clamp
    if (c.swigluLimit <= 0)
        t.fail("swiglu_limit", "must be positive");
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers));
    for (size_t l = 0; l < kinds.size(); ++l)
        kinds[l] = (l + 1) % 2 ? "sliding_attention" : "full_attention";
    readLayerKinds(t, c, kinds, {"sliding_attention", "full_attention"});
    windowSlidingLayers(t, c, kinds, 128);
    if (!t.has("rope_parameters") && !t.has("rope_scaling")) { // the class's default RoPE
        c.rope.scaling = "yarn";
        c.rope.factor = 32;
        c.rope.originalMax = 4096;
        c.rope.truncate = false;
        c.rope.attentionFactor = 0.1 * std::log(32.0) + 1.0;
    }
    readRopeScaling(t, c);
    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "num_experts", 128);
    m.topK = t.integer("num_experts_per_tok", 4);
    m.intermediate = c.intermediateSize;
    m.router = MoeRouter::TopKSoftmax;
    m.routerBias = true;
    m.layout = ExpertLayout::FusedInterleaved;
    m.routerName = "router";
    m.layers.assign(static_cast<size_t>(c.nLayers), true);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(gpt_oss) {
    return {.name = "gpt_oss",
            .label = "gpt-oss",
            .examples = "gpt-oss 20B and 120B (attention sinks, MoE)",
            .architectures = {"GptOssForCausalLM"},
            .parse = parseGptOss};
}
