// Falcon-H1 (FalconH1ForCausalLM: Falcon-H1 0.5B to 34B, Falcon-H1R): every layer runs RoPE
// attention and a Mamba-2 layer side by side on the same normed input and adds their outputs,
// then a SwiGLU MLP; µP multipliers on the embedding, both mixers' inputs and outputs, the keys,
// the parts of in_proj's output, the MLP's gate and output and the logits
// (docs/learned-sparse-and-hybrid.md §11).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

/// A multiplier: a finite number (transformers multiplies by it as a Python float).
double multiplier(const ConfigKeys& t, const char* key, double def) {
    const double m = t.number(key, def);
    if (!std::isfinite(m))
        t.fail(key, "must be a finite number");
    return m;
}

/// The Mamba-2 mixer in LinearSpec's terms (model_config.h): mamba_n_groups key heads of
/// mamba_d_state, mamba_n_heads value heads of mamba_d_head, mamba_d_ssm channels in all.
void readMamba(const ConfigKeys& t, ModelConfig& c) {
    LinearSpec& s = c.linear;
    const int64_t ssm = t.isNull("mamba_d_ssm") ? t.integer("mamba_expand", 2) * c.hiddenSize
                                                : t.integer("mamba_d_ssm", 1024);
    s.valueHeads = t.integer("mamba_n_heads", 128);
    s.keyHeads = t.integer("mamba_n_groups", 1);
    s.keyDim = t.integer("mamba_d_state", 256);
    s.convKernel = t.integer("mamba_d_conv", 4, 1, 64);
    s.chunk = t.integer("mamba_chunk_size", 256);
    s.convBias = t.boolean("mamba_conv_bias", true);
    s.projBias = t.boolean("mamba_proj_bias", false);
    s.outBias = t.boolean("projectors_bias", false);
    s.convAct = c.hiddenAct;
    if (ssm % s.valueHeads != 0)
        t.fail("mamba_n_heads", "must divide mamba_d_ssm (" + std::to_string(ssm) + ")");
    const bool automatic = !t.has("mamba_d_head") ||
                           (t.raw("mamba_d_head").is_string() && t.raw("mamba_d_head") == "auto");
    s.valueDim = automatic ? ssm / s.valueHeads : t.integer("mamba_d_head", 0);
    if (s.valueDim * s.valueHeads != ssm)
        t.fail("mamba_d_head", "× mamba_n_heads must be mamba_d_ssm (" + std::to_string(ssm) + ")");
    if (s.valueHeads % s.keyHeads != 0)
        t.fail("mamba_n_groups",
               "must divide mamba_n_heads (" + std::to_string(s.valueHeads) + ")");
    s.normGroups = s.keyHeads; // (FalconH1RMSNormGated, one group per mamba_n_groups)
    s.gate = !t.boolean("mamba_rms_norm", false)         ? Mamba2Gate::NoNorm
             : t.boolean("mamba_norm_before_gate", true) ? Mamba2Gate::AfterNorm
                                                         : Mamba2Gate::BeforeNorm;
    readTimeStepLimit(t, "time_step_limit", s);
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
    readLlamaCore(t, c, d);
    if (t.isNull("num_key_value_heads"))
        c.nKvHeads = c.nHeads;
    if (!isActivation(c.hiddenAct))
        t.fail("hidden_act",
               "'" + c.hiddenAct + "' is not supported (" + std::string(kActivations) + ")");
    c.mlpModule = "feed_forward";
    c.mlpNormName = "pre_ff_layernorm";
    c.finalNormName = "final_layernorm";
    readMamba(t, c);
    c.layerKinds.assign(static_cast<size_t>(c.nLayers), LayerKind::AttentionMamba2);
    MupMultipliers& m = c.mup;
    m.attnIn = multiplier(t, "attention_in_multiplier", 1.0);
    m.attnOut = multiplier(t, "attention_out_multiplier", 1.0);
    m.mambaIn = multiplier(t, "ssm_in_multiplier", 1.0);
    m.mambaOut = multiplier(t, "ssm_out_multiplier", 1.0);
    m.key = multiplier(t, "key_multiplier", 1.0);
    if (t.has("mlp_multipliers")) {
        const std::vector<double> mlp = t.numbers("mlp_multipliers");
        if (mlp.size() != 2)
            t.fail("mlp_multipliers", "must hold two numbers (the gate's and down_proj's)");
        m.gate = mlp[0];
        m.down = mlp[1];
    }
    c.embedScale = multiplier(t, "embedding_multiplier", 1.0);
    if (!(c.embedScale > 0))
        t.fail("embedding_multiplier", "must be a number above 0");
    if (c.embedScale == 1.0)
        c.embedScale = 0; // (none)
    c.logitScale = multiplier(t, "lm_head_multiplier", 1.0);
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
