// OLMo 2 (Olmo2ForCausalLM): norms after attention and the MLP (not before), RMSNorm over the
// whole q and k projections.

#include "capture/family_common.h"
#include "capture/model_family.h"

namespace sparqlab::capture {
namespace {

void parseOlmo2(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 50304;
    d.normEps = 1e-5;
    readLlamaCore(t, c, d);
    c.norms = NormPlacement::Post;
    c.qkNorm = QkNorm::Whole;
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::capture

SPARQLAB_MODEL_FAMILY(olmo2) {
    ModelFamily f;
    f.name = "olmo2";
    f.label = "OLMo 2";
    f.examples = "OLMo 2";
    f.architectures = {"Olmo2ForCausalLM"};
    f.parse = parseOlmo2;
    return f;
}
