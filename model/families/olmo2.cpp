// OLMo 2 (Olmo2ForCausalLM): norms after attention and the MLP (not before), RMSNorm over the
// whole q and k projections.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parseOlmo2(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 50304, .normEps = 1e-5};
    readLlamaCore(t, c, d);
    c.norms = NormPlacement::Post;
    c.normWeightInFloat = true; // Olmo2RMSNorm: (w · x̂) in float32, then the cast
    c.qkNorm = QkNorm::Whole;
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(olmo2) {
    return {.name = "olmo2",
            .label = "OLMo 2",
            .examples = "OLMo 2",
            .architectures = {"Olmo2ForCausalLM"},
            .parse = parseOlmo2};
}
