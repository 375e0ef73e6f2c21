// GPT-2 (GPT2LMHeadModel): learned positions, Conv1D weights stored [in, out], LayerNorm.

#include "model/model_family.h"

#include <cmath>

namespace sparqlab::model {
namespace {

void parseGpt2(const ConfigKeys& k, ModelConfig& c) {
    c.vocabSize = k.integer("vocab_size", 50257);
    c.hiddenSize = k.integer("n_embd", 768);
    c.nLayers = k.integer("n_layer", 12, 1, ConfigKeys::kMaxLayers);
    c.nHeads = k.integer("n_head", 12);
    c.nKvHeads = c.nHeads;
    c.intermediateSize = k.integer("n_inner", 4 * c.hiddenSize);
    c.headDim = c.hiddenSize / c.nHeads;
    c.maxPositions = k.integer("n_positions", 1024);
    c.normEps = k.number("layer_norm_epsilon", 1e-5);
    c.tieEmbeddings = k.boolean("tie_word_embeddings", true);
    c.qkvBias = c.outBias = c.mlpBias = true;
    c.hiddenAct = k.string("activation_function", "gelu_new");
    c.attnScale = k.boolean("scale_attn_weights", true)
                      ? 1.0 / std::sqrt(static_cast<double>(c.headDim))
                      : 1.0;
    if (k.boolean("scale_attn_by_inverse_layer_idx", false))
        k.fail("scale_attn_by_inverse_layer_idx", "= true is not supported");
    c.rotaryDim = 0; // learned positions, no RoPE
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(gpt2) {
    return {.name = "gpt2",
            .label = "GPT-2",
            .examples = "GPT-2",
            .architectures = {"GPT2LMHeadModel"},
            .layout = Layout::GPT2,
            .parse = parseGpt2};
}
