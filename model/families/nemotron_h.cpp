// Nemotron-H (NemotronHForCausalLM: Nemotron-H 4B/8B/47B/56B, Nemotron Nano 2, Nemotron 3 Nano
// and Super): blocks of one mixer each, x + f(norm(x)), f a Mamba-2 layer ("M"), NoPE attention
// ("*"), an ungated relu² MLP ("-") or experts ("E") behind DeepSeek-V3's sigmoid router with a
// shared expert beside them and, with moe_latent_size, a latent around them
// (docs/learned-sparse-and-hybrid.md §10). The weights sit under backbone (as published) or model
// (as transformers 5 saves them): Model::open looks.

#include "model/family_common.h"
#include "model/model_family.h"

#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

/// The blocks' kinds: layers_block_type (its alias layer_types), else hybrid_override_pattern,
/// else transformers' default of four; each "M"/"mamba"/"linear_attention", "*"/"attention"/
/// "full_attention", "-"/"mlp" or "E"/"moe". Sets the layer count, the kinds and the sparse
/// blocks.
void readBlocks(const ConfigKeys& t, ModelConfig& c) {
    std::vector<std::string> kinds;
    const char* key = t.has("layers_block_type") ? "layers_block_type"
                      : t.has("layer_types")     ? "layer_types"
                                                 : nullptr;
    const std::string allowed =
        "\"mamba\", \"linear_attention\", \"attention\", \"full_attention\", \"mlp\" or \"moe\"";
    if (key) {
        const json& v = t.raw(key);
        if (!v.is_array() || v.empty())
            t.fail(key, "must list one kind per layer");
        for (const json& k : v) {
            const std::string s = k.is_string() ? k.get<std::string>() : std::string();
            if (s == "mamba" || s == "linear_attention")
                kinds.push_back("M");
            else if (s == "attention" || s == "full_attention")
                kinds.push_back("*");
            else if (s == "mlp")
                kinds.push_back("-");
            else if (s == "moe")
                kinds.push_back("E");
            else
                t.fail(key, "must hold " + allowed);
        }
    } else if (t.has("hybrid_override_pattern")) {
        const std::string p = t.string("hybrid_override_pattern", "");
        if (p.empty() || p.find_first_not_of("M*-E") != std::string::npos)
            t.fail("hybrid_override_pattern", "must be a string of M, *, - and E, one per layer");
        for (char ch : p)
            kinds.emplace_back(1, ch);
    } else {
        kinds = {"M", "E", "*", "-"};
    }
    if (kinds.size() > static_cast<size_t>(ConfigKeys::kMaxLayers))
        t.fail(key ? key : "hybrid_override_pattern", "lists too many layers");
    // (num_hidden_layers is only a check in transformers, which warns and takes the list's length)
    c.nLayers = static_cast<int64_t>(kinds.size());
    c.moe.layers.assign(kinds.size(), false);
    for (size_t l = 0; l < kinds.size(); ++l) {
        const std::string& k = kinds[l];
        c.layerKinds.push_back(k == "M"   ? LayerKind::Mamba2
                               : k == "*" ? LayerKind::Attention
                                          : LayerKind::Mlp);
        c.moe.layers[l] = k == "E";
    }
    if (c.attentionLayers().empty())
        t.fail(key ? key : "hybrid_override_pattern",
               "must name at least one attention layer (the layers SparQ Lab captures)");
}

/// An activation key, checked against the ones the MLPs compute.
std::string readActivation(const ConfigKeys& t, const char* key, const char* def) {
    const std::string act = t.string(key, def);
    if (!isActivation(act))
        t.fail(key, "'" + act + "' is not supported (" + std::string(kActivations) + ")");
    return act;
}

/// A key transformers also reads under an older name, the older one winning where both are given
/// (NemotronHConfig.__post_init__ pops it over the new one).
std::string legacy(const ConfigKeys& t, const char* key, const char* old) {
    return t.has(old) ? old : key;
}

/// The Mamba-2 layers in LinearSpec's terms (model_config.h): n_groups key heads of
/// ssm_state_size, mamba_num_heads value heads of mamba_head_dim.
void readMamba(const ConfigKeys& t, ModelConfig& c) {
    LinearSpec& s = c.linear;
    s.valueHeads = t.integer("mamba_num_heads", 128);
    s.valueDim = t.integer("mamba_head_dim", 64);
    s.keyDim = t.integer("ssm_state_size", 128);
    const std::string groups = legacy(t, "n_groups", "mamba_n_groups");
    s.keyHeads = t.integer(groups, 8);
    s.convKernel = t.integer(legacy(t, "conv_kernel", "mamba_d_conv"), 4, 1, 64);
    s.chunk = t.integer(legacy(t, "chunk_size", "mamba_chunk_size"), 128);
    s.convBias = t.boolean(legacy(t, "use_conv_bias", "mamba_conv_bias"), true);
    s.projBias = s.outBias = t.boolean("use_bias", false);
    s.convAct = readActivation(t, "mamba_hidden_act", "silu");
    if (s.valueHeads % s.keyHeads != 0)
        t.fail(groups, "must divide mamba_num_heads (" + std::to_string(s.valueHeads) + ")");
    s.normGroups = s.keyHeads; // the gated norm, one group per n_groups
    // The time step clamped to time_step_limit (default [0, ∞)), as transformers' torch path does
    // since it was fixed to agree with its CUDA kernels (earlier: below at time_step_min).
    readTimeStepLimit(t, legacy(t, "time_step_limit", "mamba_dt_limit"), s);
}

/// The sparse blocks' experts: DeepSeek-V3's router (σ + e_score_correction_bias, n_group groups
/// by their two best, topk_group kept, the top k renormalised × routed_scaling_factor) over
/// ungated experts, the shared expert always beside them.
void readExperts(const ConfigKeys& t, ModelConfig& c) {
    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "n_routed_experts", 8);
    m.topK = t.integer("num_experts_per_tok", 2, 1, m.experts);
    m.intermediate = t.integer("moe_intermediate_size", 7688);
    m.sharedIntermediate = t.integer("moe_shared_expert_intermediate_size", 7688);
    m.latent = t.has("moe_latent_size") ? t.integer("moe_latent_size", 0) : 0;
    m.router = MoeRouter::SigmoidGroups;
    m.scoreCorrection = true;
    m.sumInRouterDtype = true; // (NemotronHExperts: zeros in top_k_weights' dtype, float32)
    m.normTopK = t.boolean("norm_topk_prob", true);
    m.routedScale = t.number("routed_scaling_factor", 1.0);
    m.groups = t.integer("n_group", 1);
    m.topKGroups = t.integer("topk_group", 1, 1, m.groups);
    if (m.experts % m.groups != 0 || (m.groups > 1 && m.experts / m.groups < 2))
        t.fail("n_group", "must divide n_routed_experts (" + std::to_string(m.experts) +
                              ") into groups of at least two");
    m.module = "mixer";
    m.routerName = "gate";
}

void parseNemotronH(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 131072;
    d.intermediate = 21504;
    d.kvHeads = 8;
    d.headDim = 128;
    d.maxPositions = 4096;
    readLlamaCore(t, c, d);
    if (t.isNull("num_key_value_heads"))
        c.nKvHeads = c.nHeads;
    c.normEps = t.number("layer_norm_epsilon", 1e-5);
    if (!(c.normEps >= 0))
        t.fail("layer_norm_epsilon", "must be a number at or above 0");
    c.qkvBias = c.outBias = false; // (q, k, v and o have none, whatever attention_bias says)
    c.tieEmbeddings = false;       // (transformers ties nothing: _tied_weights_keys is empty)
    c.hiddenAct = readActivation(t, "mlp_hidden_act", "relu2");
    c.gatedMlp = false;
    c.norms = NormPlacement::Single;
    c.bodyModule = "backbone";
    c.embedName = "embeddings";
    c.finalNormName = "norm_f";
    c.mixerModule = c.mlpModule = "mixer";
    readBlocks(t, c);
    readMamba(t, c);
    bool sparse = false;
    for (bool s : c.moe.layers)
        sparse = sparse || s;
    if (sparse)
        readExperts(t, c);
    else
        c.moe.layers.clear();
    c.layerNoRope.assign(static_cast<size_t>(c.nLayers), true); // NoPE: no rotary embedding
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(nemotron_h) {
    return {.name = "nemotron_h",
            .label = "Nemotron-H",
            .examples = "Nemotron-H 8B/47B, Nemotron Nano 2, Nemotron 3 Nano and Super (Mamba-2 "
                        "blocks, NoPE attention, relu² MLPs or experts)",
            .architectures = {"NemotronHForCausalLM"},
            .parse = parseNemotronH};
}
