// Granite 3 (GraniteForCausalLM): the Llama block with four multipliers: embeddings ×
// embedding_multiplier, the attention scale attention_multiplier, residual branches ×
// residual_multiplier, logits ÷ logits_scaling.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readGraniteMultipliers(const ConfigKeys& t, ModelConfig& c) {
    c.embedScale = t.number("embedding_multiplier", 1.0);
    c.attnScale = t.number("attention_multiplier", 1.0);
    c.residualScale = t.number("residual_multiplier", 1.0);
    const double logits = t.number("logits_scaling", 1.0);
    if (!(c.embedScale > 0))
        t.fail("embedding_multiplier", "must be positive");
    if (!(c.attnScale > 0))
        t.fail("attention_multiplier", "must be positive");
    if (!(logits > 0))
        t.fail("logits_scaling", "must be positive");
    c.logitScale = 1.0 / logits;
}

namespace {

void parseGranite(const ConfigKeys& t, ModelConfig& c) {
    readLlamaCore(t, c, LlamaDefaults{});
    readGraniteMultipliers(t, c);
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(granite) {
    return {.name = "granite",
            .label = "Granite",
            .examples = "Granite 3.x (dense)",
            .architectures = {"GraniteForCausalLM"},
            .parse = parseGranite};
}
