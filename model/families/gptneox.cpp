// GPT-NeoX (GPTNeoXForCausalLM: Pythia): LayerNorm, a fused query_key_value projection laid out
// per head, partial rotary dimensions, the parallel residual.

#include "model/family_common.h"
#include "model/model_family.h"

#include <cmath>

namespace sparqlab::model {
namespace {

void parseGptNeoX(const ConfigKeys& k, ModelConfig& c) {
    c.vocabSize = k.integer("vocab_size", 50432);
    c.hiddenSize = k.integer("hidden_size", 6144);
    c.nLayers = k.integer("num_hidden_layers", 44, 1, ConfigKeys::kMaxLayers);
    c.nHeads = k.integer("num_attention_heads", 64);
    c.nKvHeads = c.nHeads;
    c.intermediateSize = k.integer("intermediate_size", 24576);
    c.headDim = c.hiddenSize / c.nHeads;
    c.maxPositions = k.integer("max_position_embeddings", 2048);
    c.normEps = k.number("layer_norm_eps", 1e-5);
    c.rope.theta = k.number("rotary_emb_base", k.number("rope_theta", 10000.0));
    const double pct = k.number("rotary_pct", 0.25);
    if (!(pct > 0 && pct <= 1))
        k.fail("rotary_pct", "must lie in (0, 1]");
    c.rotaryDim = static_cast<int64_t>(c.headDim * pct);
    // transformers 5.x keeps the base and the rotary share in rope_parameters (rotary_emb_base
    // and rotary_pct fill in only what it lacks); 4.x's rope_scaling (linear) beside them.
    readRopeScaling(k, c);
    if (c.rotaryDim % 2 != 0)
        k.fail("rotary_pct", "must give an even number of rotary dimensions");
    c.tieEmbeddings = k.boolean("tie_word_embeddings", false);
    c.qkvBias = c.outBias = k.boolean("attention_bias", true);
    c.mlpBias = true;
    c.hiddenAct = k.string("hidden_act", "gelu");
    c.parallelResidual = k.boolean("use_parallel_residual", true);
    c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(gptneox) {
    return {.name = "gpt_neox",
            .label = "GPT-NeoX",
            .examples = "Pythia",
            .architectures = {"GPTNeoXForCausalLM"},
            .layout = Layout::GPTNeoX,
            .parse = parseGptNeoX};
}
