// Llama 4's language model (Llama4ForCausalLM, model_type llama4_text): chunked attention on its
// RoPE layers (complex, interleaved RoPE, then q and k L2-normed), NoPE global layers with
// attention-temperature tuning, and a mixture of experts on every interleave_moe_layer_step-th
// layer: the top k logits, σ of them weighting each expert's input, plus a shared expert.

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>

namespace sparqlab::model {
namespace {

void parseLlama4Text(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 202048,
                          .hidden = 5120,
                          .intermediate = 8192,
                          .layers = 48,
                          .heads = 40,
                          .kvHeads = 8,
                          .headDim = 128,
                          .maxPositions = 4096 * 32,
                          .normEps = 1e-5,
                          .ropeTheta = 500000.0};
    readLlamaCore(t, c, d);
    const int64_t expertWidth = c.intermediateSize; // intermediate_size: the experts'
    c.intermediateSize = t.integer("intermediate_size_mlp", 16384);
    c.mlpModule = "feed_forward";
    c.ropeLayout = RopeLayout::Interleaved;
    // no_rope_layers[l] = 1: the layer has RoPE (every no_rope_layer_interval-th has none).
    const int64_t interval = t.integer("no_rope_layer_interval", 4);
    std::vector<bool> rope(static_cast<size_t>(c.nLayers));
    for (size_t l = 0; l < rope.size(); ++l)
        rope[l] = (static_cast<int64_t>(l) + 1) % interval != 0;
    rope = readLayerFlags(t, c, "no_rope_layers", rope);
    c.layerNoRope.assign(rope.size(), false);
    std::vector<std::string> kinds(rope.size());
    for (size_t l = 0; l < rope.size(); ++l) {
        c.layerNoRope[l] = !rope[l];
        kinds[l] = rope[l] ? "chunked_attention" : "full_attention";
    }
    readLayerKinds(t, c, kinds, {"chunked_attention", "full_attention", "sliding_attention"});
    const int64_t chunk =
        t.isNull("attention_chunk_size") ? 0 : t.integer("attention_chunk_size", 8192, /*min=*/0);
    c.layerChunk.assign(kinds.size(), 0);
    for (size_t l = 0; l < kinds.size(); ++l)
        if (kinds[l] == "chunked_attention")
            c.layerChunk[l] = chunk;
    if (chunk == 0)
        c.layerChunk.clear();
    c.qkL2Norm = t.boolean("use_qk_norm", true);
    // HF tests it for truth only: transformers 4.x's default, and so its saved configs (Llama 4
    // Scout's among them), hold the number 4 where 5.x writes true.
    const bool tuning =
        t.has("attn_temperature_tuning") && t.raw("attn_temperature_tuning").is_number()
            ? t.number("attn_temperature_tuning", 1) != 0
            : t.boolean("attn_temperature_tuning", true);
    if (tuning) {
        c.attnTemperatureScale = t.number("attn_scale", 0.1);
        c.attnTemperatureFloor = t.number("floor_scale", 8192);
        if (!(c.attnTemperatureFloor > 0))
            t.fail("floor_scale", "must be positive");
    }
    readRopeScaling(t, c);
    MoeSpec& m = c.moe;
    m.experts = t.integer("num_local_experts", 16);
    m.topK = t.integer("num_experts_per_tok", 1);
    m.intermediate = expertWidth;
    m.router = MoeRouter::SigmoidTopK;
    m.layout = ExpertLayout::FusedHalves;
    m.module = "feed_forward";
    m.routerName = "router";
    m.sharedName = "shared_expert";
    m.sharedIntermediate = expertWidth;
    if (m.topK > m.experts)
        t.fail("num_experts_per_tok", "must be at most num_local_experts");
    const int64_t step = t.integer("interleave_moe_layer_step", 1);
    std::vector<int64_t> moe = readLayerIndices(t, c, "moe_layers");
    if (!t.has("moe_layers"))
        for (int64_t l = step - 1; l < c.nLayers; l += step)
            moe.push_back(l);
    for (int64_t l = 0; l < c.nLayers; ++l)
        m.layers.push_back(std::find(moe.begin(), moe.end(), l) != moe.end());
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(llama4_text) {
    return {.name = "llama4_text",
            .label = "Llama 4",
            .examples = "Llama 4 Scout and Maverick, the language model (chunked and NoPE layers, "
                        "MoE)",
            .architectures = {"Llama4ForCausalLM"},
            .parse = parseLlama4Text};
}
