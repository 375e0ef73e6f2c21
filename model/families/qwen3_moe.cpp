// Qwen3-MoE (Qwen3MoeForCausalLM): Qwen 3's attention (RMSNorm on each head's q and k) and a
// mixture of experts on every decoder_sparse_step-th layer but mlp_only_layers: softmax over
// every expert, the top k, renormalised with norm_topk_prob.

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>

namespace sparqlab::model {

LlamaDefaults qwenDefaults(); // qwen2.cpp

/// Qwen3-MoE's experts (and Qwen3-VL-MoE's): num_experts, num_experts_per_tok,
/// moe_intermediate_size, norm_topk_prob, and the sparse layers: every decoder_sparse_step-th
/// but mlp_only_layers.
void readQwen3MoeExperts(const ConfigKeys& t, ModelConfig& c) {
    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "num_experts", 128);
    m.topK = t.integer("num_experts_per_tok", 8);
    m.intermediate = t.integer("moe_intermediate_size", 768);
    m.normTopK = t.boolean("norm_topk_prob", false);
    const int64_t step = t.integer("decoder_sparse_step", 1);
    const std::vector<int64_t> dense = readLayerIndices(t, c, "mlp_only_layers");
    for (int64_t l = 0; l < c.nLayers; ++l)
        m.layers.push_back(std::find(dense.begin(), dense.end(), l) == dense.end() &&
                           (l + 1) % step == 0);
}

namespace {

void parseQwen3Moe(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d = qwenDefaults();
    d.hidden = 2048;
    d.intermediate = 6144;
    d.layers = 24;
    d.heads = 32;
    d.kvHeads = 4;
    readLlamaCore(t, c, d);
    // Qwen 3's attention; the window, with use_sliding_window, on every layer (Qwen3MoeConfig
    // has no layer_types).
    c.qkNorm = QkNorm::PerHead;
    if (t.boolean("use_sliding_window", false))
        readUniformWindow(t, c, 4096);
    readRopeScaling(t, c);
    readQwen3MoeExperts(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(qwen3_moe) {
    return {.name = "qwen3_moe",
            .label = "Qwen3-MoE",
            .examples = "Qwen3-30B-A3B, Qwen3-235B-A22B",
            .architectures = {"Qwen3MoeForCausalLM"},
            .parse = parseQwen3Moe};
}
