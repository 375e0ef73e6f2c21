// Falcon-H1 (FalconH1ForCausalLM: Falcon-H1 0.5B to 34B, Falcon-H1R): every layer runs RoPE
// attention and a Mamba-2 layer side by side on the same normed input and adds their outputs,
// then a SwiGLU MLP; µP multipliers on the embedding, both mixers' inputs and outputs, the keys,
// the parts of in_proj's output, the MLP's gate and output and the logits
// (docs/learned-sparse-and-hybrid.md §11).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>
#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

/// The Mamba-2 mixer in LinearSpec's terms (model_config.h): mamba_n_groups key heads of
/// mamba_d_state, mamba_n_heads value heads of mamba_d_head, mamba_d_ssm channels in all.
void readMamba(const ConfigKeys& t, ModelConfig& c) {
    const int64_t ssm = t.isNull("mamba_d_ssm") ? t.integer("mamba_expand", 2) * c.hiddenSize
                                                : t.integer("mamba_d_ssm", 1024);
    readMambaKeys(t, c, ssm, "mamba_d_ssm");
    LinearSpec& s = c.linear;
    s.outBias = t.boolean("projectors_bias", false);
    s.normGroups = s.keyHeads; // (FalconH1RMSNormGated, one group per mamba_n_groups)
    s.gate = !t.boolean("mamba_rms_norm", false)         ? Mamba2Gate::NoNorm
             : t.boolean("mamba_norm_before_gate", true) ? Mamba2Gate::AfterNorm
                                                         : Mamba2Gate::BeforeNorm;
    if (t.has("ssm_multipliers")) {
        const std::vector<double> m = t.numbers("ssm_multipliers");
        if (m.size() != s.projScale.size())
            t.fail("ssm_multipliers", "must hold five numbers (z, x, B, C and dt's)");
        std::copy(m.begin(), m.end(), s.projScale.begin());
    }
}

void parseFalconH1(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 128000;
    d.intermediate = 14336;
    d.kvHeads = 8;
    d.maxPositions = 8192;
    d.normEps = 1e-5;
    readJambaBlockCore(t, c, d);
    readMamba(t, c);
    c.layerKinds.assign(static_cast<size_t>(c.nLayers), LayerKind::AttentionMamba2);
    MupMultipliers& m = c.mup;
    m.attnIn = t.number("attention_in_multiplier", 1.0);
    m.attnOut = t.number("attention_out_multiplier", 1.0);
    m.mambaIn = t.number("ssm_in_multiplier", 1.0);
    m.mambaOut = t.number("ssm_out_multiplier", 1.0);
    m.key = t.number("key_multiplier", 1.0);
    if (t.has("mlp_multipliers")) {
        const std::vector<double> mlp = t.numbers("mlp_multipliers");
        if (mlp.size() != 2)
            t.fail("mlp_multipliers", "must hold two numbers (the gate's and down_proj's)");
        m.gate = mlp[0];
        m.down = mlp[1];
    }
    c.embedScale = t.number("embedding_multiplier", 1.0);
    if (!(c.embedScale > 0))
        t.fail("embedding_multiplier", "must be a number above 0");
    if (c.embedScale == 1.0)
        c.embedScale = 0; // (none)
    c.logitScale = t.number("lm_head_multiplier", 1.0);
    readRopeScaling(t, c);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(falcon_h1) {
    return {.name = "falcon_h1",
            .label = "Falcon-H1",
            .examples = "Falcon-H1 0.5B to 34B, Falcon-H1R (attention and Mamba-2 side by side in "
                        "every layer, µP multipliers)",
            .architectures = {"FalconH1ForCausalLM"},
            .parse = parseFalconH1};
}
