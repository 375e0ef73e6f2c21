// Mistral 4 (Mistral4ForCausalLM, and the language model of Mistral Small 4's
// Mistral3ForConditionalGeneration folders): DeepSeek-V3's multi-head latent attention and
// experts with a softmax router (in the model's dtype, group-limited, no correction bias), the
// softmax scale qk_head_dim^-½ without DeepSeek's mscale², and every layer's q scaled by its
// position after RoPE as Ministral 3's (docs/sinks-chunks-nope-mla.md).

#include "model/family_common.h"
#include "model/model_family.h"

#include <cmath>

namespace sparqlab::model {

/// Mistral's RoPE and query scale (ministral3.cpp): rope_parameters, else the legacy
/// rope_scaling, else the config class's own `defaults` (named `owner` in messages).
void readMistralRope(const ConfigKeys& t, ModelConfig& c, const json& defaults,
                     const std::string& owner);

void parseMistral4Text(const ConfigKeys& t, ModelConfig& c) {
    DeepseekDefaults d; // Mistral4Config's (Mistral Small 4's shape)
    d.core = {.vocab = 131072,
              .hidden = 4096,
              .intermediate = 12288,
              .layers = 36,
              .heads = 32,
              .kvHeads = 32,
              .headDim = 128,
              .maxPositions = 1048576};
    d.qLoraRank = 1024;
    d.kvLoraRank = 256;
    d.nopeDim = 64;
    d.ropeDim = 64;
    d.vHeadDim = 128;
    d.moe = {.experts = 128,
             .topK = 4,
             .intermediate = 2048,
             .groups = 1,
             .topKGroups = 1,
             .firstDense = 0,
             .routedScale = 1.0};
    parseDeepseekV3(t, c, d);
    c.moe.router = MoeRouter::SoftmaxGroups;
    c.moe.scoreCorrection = false;
    // Mistral4Attention's scale: qk_head_dim^-½ whatever the YaRN keys say (Mistral's
    // apply_scale false, written as mscale = mscale_all_dim = 1), as vLLM computes it too.
    c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    // Mistral4Config's own RoPE where a config gives none (Mistral Small 4's).
    readMistralRope(t, c,
                    {{"rope_type", "yarn"},
                     {"rope_theta", 10000.0},
                     {"factor", 128.0},
                     {"original_max_position_embeddings", 8192},
                     {"beta_fast", 32.0},
                     {"beta_slow", 1.0},
                     {"mscale", 1.0},
                     {"mscale_all_dim", 1.0},
                     {"llama_4_scaling_beta", 0.1}},
                    "Mistral4Config");
    c.rotaryDim = c.mla.ropeDim; // (whatever partial_rotary_factor says)
}

} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(mistral4) {
    return {.name = "mistral4",
            .label = "Mistral 4",
            .examples = "Mistral Small 4 (MLA, MoE behind a softmax router, position-scaled "
                        "queries)",
            .architectures = {"Mistral4ForCausalLM"},
            .parse = sparqlab::model::parseMistral4Text};
}
