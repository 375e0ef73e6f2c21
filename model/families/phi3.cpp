// Phi-3 (Phi3ForCausalLM): fused qkv and gate_up projections, partial rotary dimensions,
// longrope ("su", "yarn") with its short and long factors.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {
namespace {

void parsePhi3(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 32064,
                          .hidden = 3072,
                          .intermediate = 8192,
                          .maxPositions = 4096,
                          .normEps = 1e-5};
    readLlamaCore(t, c, d);
    readPartialRotary(t, c, 1.0);
    if (c.rotaryDim % 2 != 0)
        t.fail("partial_rotary_factor", "must give an even number of rotary dimensions");
    c.fusedQkv = c.fusedGateUp = true;
    readUniformWindow(t, c, 0);
    readRopeScaling(t, c, /*phi3Names=*/true);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(phi3) {
    return {.name = "phi3",
            .label = "Phi-3",
            .examples = "Phi-3, Phi-3.5 (longrope)",
            .architectures = {"Phi3ForCausalLM"},
            .parse = parsePhi3};
}
