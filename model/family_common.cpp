// The keys Llama-style family units share (family_common.h), as transformers 4.51 reads them
// and, for RoPE, as 5.x reads both its own rope_parameters and the v4 keys.

#include "family_common.h"

#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sparqlab::model {

void readLlamaCore(const ConfigKeys& t, ModelConfig& c, const LlamaDefaults& d) {
    c.vocabSize = t.integer("vocab_size", d.vocab);
    c.hiddenSize = t.integer("hidden_size", d.hidden);
    c.intermediateSize = t.integer("intermediate_size", d.intermediate);
    c.nLayers = t.integer("num_hidden_layers", d.layers, 1, ConfigKeys::kMaxLayers);
    c.nHeads = t.integer("num_attention_heads", d.heads);
    c.nKvHeads = t.integer("num_key_value_heads", d.kvHeads > 0 ? d.kvHeads : c.nHeads);
    const bool explicitHeadDim = d.headDim > 0;
    if (!explicitHeadDim && !t.has("head_dim") && c.hiddenSize % c.nHeads != 0)
        t.fail("num_attention_heads", "must divide the hidden size (or give head_dim)");
    c.headDim = t.integer("head_dim", explicitHeadDim ? d.headDim : c.hiddenSize / c.nHeads);
    c.maxPositions = t.integer("max_position_embeddings", d.maxPositions);
    c.normEps = t.number("rms_norm_eps", d.normEps);
    if (!(c.normEps >= 0))
        t.fail("rms_norm_eps", "must be a number at or above 0");
    c.rope.theta = ropeTheta(t, d.ropeTheta);
    c.tieEmbeddings = t.boolean("tie_word_embeddings", d.tieEmbeddings);
    const bool attentionBias = t.boolean("attention_bias", d.attentionBias);
    c.qkvBias = d.qkvBias || attentionBias;
    c.outBias = !d.qkvBias && attentionBias;
    c.mlpBias = t.boolean("mlp_bias", false);
    c.hiddenAct = t.string("hidden_act", d.hiddenAct);
    c.rotaryDim = c.headDim;
    c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
}

void readJambaBlockCore(const ConfigKeys& t, ModelConfig& c, const LlamaDefaults& d) {
    readLlamaCore(t, c, d);
    if (t.isNull("num_key_value_heads"))
        c.nKvHeads = c.nHeads;
    c.mlpModule = "feed_forward";
    c.mlpNormName = "pre_ff_layernorm";
    c.finalNormName = "final_layernorm";
}

void readUniformWindow(const ConfigKeys& t, ModelConfig& c, int64_t defaultWindow) {
    const int64_t w =
        t.isNull("sliding_window") ? 0 : t.integer("sliding_window", defaultWindow, 0);
    if (w > 0)
        c.layerWindow.assign(static_cast<size_t>(c.nLayers), w);
}

void readLayerTypes(const ConfigKeys& t, const ModelConfig& c, std::vector<bool>& sliding) {
    if (!t.has("layer_types"))
        return;
    const json& lt = t.raw("layer_types");
    if (!lt.is_array() || lt.size() != static_cast<size_t>(c.nLayers))
        t.fail("layer_types", "must list one kind per layer (" + std::to_string(c.nLayers) + ")");
    for (size_t l = 0; l < lt.size(); ++l) {
        if (!lt[l].is_string() || (lt[l] != "sliding_attention" && lt[l] != "full_attention"))
            t.fail("layer_types", "must hold \"sliding_attention\" or \"full_attention\"");
        sliding[l] = lt[l] == "sliding_attention";
    }
}

void readPartialRotary(const ConfigKeys& k, ModelConfig& c, double def) {
    const double f = k.number("partial_rotary_factor", def);
    if (!(f > 0 && f <= 1))
        k.fail("partial_rotary_factor", "must lie in (0, 1]");
    c.rotaryDim = static_cast<int64_t>(static_cast<double>(c.headDim) * f);
}

double ropeTheta(const ConfigKeys& t, double def) {
    // A base of 1 or below gives NaN or constant angles: refused where it is read.
    const auto checked = [](const ConfigKeys& at, double theta) {
        if (!(theta > 1))
            at.fail("rope_theta", "must be a number above 1");
        return theta;
    };
    if (t.has("rope_parameters") && t.raw("rope_parameters").is_object()) {
        const ConfigKeys r = t.nested("rope_parameters");
        if (r.has("rope_theta"))
            return checked(r, r.number("rope_theta", def));
        // Per layer type (OLMo 3, Gemma 3): the full layers' base.
        if (r.has("full_attention") && r.raw("full_attention").is_object()) {
            const ConfigKeys full = r.nested("full_attention");
            return checked(full, full.number("rope_theta", def));
        }
    }
    return checked(t, t.number("rope_theta", def));
}

namespace {

const char* kRopeTypes = "default, linear, llama3, longrope, yarn";

/// One RoPE object: v5's rope_parameters (or one of its per-layer-type entries, `v5`: the
/// base is inside it) or v4's rope_scaling (the base is rope_theta beside it).
void readRopeObject(const ConfigKeys& t, const ConfigKeys& r, ModelConfig& c, RopeSpec& spec,
                    bool v5, bool phi3Names) {
    if (v5)
        spec.theta = r.number("rope_theta", spec.theta);
    if (!(spec.theta > 1))
        (v5 ? r : t).fail("rope_theta", "must be a number above 1");
    if (v5 && r.has("partial_rotary_factor"))
        readPartialRotary(r, c, 1.0);
    std::string type = r.string("rope_type", r.string("type", std::string()));
    if (phi3Names && (type == "su" || type == "yarn"))
        type = "longrope";
    const char* typeKey = r.has("rope_type") ? "rope_type" : "type";
    if (type == "linear" || type == "llama3") {
        spec.scaling = type;
        spec.factor = r.number("factor", 1.0);
        spec.lowFreqFactor = r.number("low_freq_factor", 1.0);
        spec.highFreqFactor = r.number("high_freq_factor", 4.0);
        spec.originalMax = r.integer("original_max_position_embeddings", 8192);
        if (!(spec.factor > 0))
            r.fail("factor", "must be positive");
        if (type == "llama3" && !(spec.highFreqFactor > spec.lowFreqFactor))
            r.fail("high_freq_factor", "must exceed low_freq_factor");
    } else if (type == "longrope") {
        // HF's _compute_longrope_parameters. Phi-3's config always has a top-level
        // original_max_position_embeddings (default 4096). Under 4.x (rope_scaling) the factor is
        // then the ratio of the two context lengths, else it is given; under 5.x
        // (rope_parameters) a given factor wins, and the original length is the top-level one,
        // else the object's, else max_position_embeddings.
        spec.scaling = type;
        const bool hasOriginal = phi3Names || t.has("original_max_position_embeddings");
        spec.originalMax = hasOriginal ? t.integer("original_max_position_embeddings", 4096)
                           : v5 ? r.integer("original_max_position_embeddings", c.maxPositions)
                                : c.maxPositions;
        spec.shortFactor = r.numbers("short_factor");
        spec.longFactor = r.numbers("long_factor");
        const size_t n = static_cast<size_t>(c.rotaryDim / 2);
        if (spec.shortFactor.size() != n)
            r.fail("short_factor",
                   "must hold " + std::to_string(n) + " numbers (rotary dimensions / 2)");
        if (spec.longFactor.size() != n)
            r.fail("long_factor",
                   "must hold " + std::to_string(n) + " numbers (rotary dimensions / 2)");
        const bool givenFactor = r.has("factor") && !r.isNull("factor");
        if (!hasOriginal && !v5 && !(r.number("factor", 0) > 0))
            r.fail("factor", "must be positive (or give original_max_position_embeddings)");
        if (givenFactor && !(r.number("factor", 0) > 0))
            r.fail("factor", "must be positive");
        if (!(spec.originalMax > 0))
            r.fail("original_max_position_embeddings", "must be positive");
        const double factor =
            (v5 || !hasOriginal) && givenFactor
                ? r.number("factor", 1.0)
                : static_cast<double>(c.maxPositions) / static_cast<double>(spec.originalMax);
        spec.factor = factor;
        if (r.has("attention_factor"))
            spec.attentionFactor = r.number("attention_factor", 1.0);
        else
            spec.attentionFactor =
                factor <= 1.0 ? 1.0
                              : std::sqrt(1 + std::log(factor) /
                                                  std::log(static_cast<double>(spec.originalMax)));
    } else if (type == "yarn") {
        // transformers 5.x's _compute_yarn_parameters: the given factor (else the ratio of the
        // context lengths), the original context from the config's top level, the object or
        // max_position_embeddings, in that order.
        spec.scaling = type;
        spec.originalMax = t.has("original_max_position_embeddings")
                               ? t.integer("original_max_position_embeddings", c.maxPositions)
                               : r.integer("original_max_position_embeddings", c.maxPositions);
        spec.factor = r.has("factor") ? r.number("factor", 1.0)
                                      : static_cast<double>(c.maxPositions) /
                                            static_cast<double>(spec.originalMax);
        if (!(spec.factor > 0))
            r.fail("factor", "must be positive");
        // HF: `get("beta_fast") or 32`: absent or 0 means the default.
        const double fast = r.number("beta_fast", 0), slow = r.number("beta_slow", 0);
        spec.betaFast = fast != 0 ? fast : 32;
        spec.betaSlow = slow != 0 ? slow : 1;
        if (!(spec.betaFast > 0))
            r.fail("beta_fast", "must be positive");
        if (!(spec.betaSlow > 0))
            r.fail("beta_slow", "must be positive");
        spec.truncate = r.boolean("truncate", true);
        spec.attentionFactor = r.has("attention_factor")
                                   ? r.number("attention_factor", 1.0)
                                   : yarnAttentionFactor(spec.factor, r.number("mscale", 0),
                                                         r.number("mscale_all_dim", 0));
    } else if (type != "default" && !type.empty()) {
        r.fail(typeKey, "'" + type + "' is not supported (" + kRopeTypes + ")");
    }
}

bool isLayerTypeObject(const ConfigKeys& r) {
    for (const char* k : {"full_attention", "sliding_attention", "chunked_attention"})
        if (r.has(k) && r.raw(k).is_object())
            return true;
    return false;
}

} // namespace

void readRopeParameters(const ConfigKeys& t, const ConfigKeys& r, ModelConfig& c, RopeSpec& spec) {
    readRopeObject(t, r, c, spec, /*v5=*/true, /*phi3Names=*/false);
}

void readLayerKinds(const ConfigKeys& t, const ModelConfig& c, std::vector<std::string>& kinds,
                    const std::vector<std::string>& allowed,
                    const std::vector<std::pair<std::string, std::string>>& legacy,
                    const std::string& key) {
    if (!t.has(key))
        return;
    const json& lt = t.raw(key);
    if (!lt.is_array() || lt.size() != static_cast<size_t>(c.nLayers))
        t.fail(key, "must list one kind per layer (" + std::to_string(c.nLayers) + ")");
    std::string names;
    for (const std::string& a : allowed)
        names += (names.empty() ? "\"" : ", \"") + a + "\"";
    for (size_t l = 0; l < lt.size(); ++l) {
        std::string kind = lt[l].is_string() ? lt[l].get<std::string>() : std::string();
        for (const auto& [old, now] : legacy)
            if (kind == old)
                kind = now;
        if (std::find(allowed.begin(), allowed.end(), kind) == allowed.end())
            t.fail(key, "must hold " + names);
        kinds[l] = kind;
    }
}

void readMlpLayerTypes(const ConfigKeys& t, ModelConfig& c) {
    if (!t.has("mlp_layer_types"))
        return;
    const json& lt = t.raw("mlp_layer_types");
    if (!lt.is_array() || lt.size() != static_cast<size_t>(c.nLayers))
        t.fail("mlp_layer_types",
               "must list one kind per layer (" + std::to_string(c.nLayers) + ")");
    c.moe.layers.assign(static_cast<size_t>(c.nLayers), false);
    for (size_t l = 0; l < lt.size(); ++l) {
        if (!lt[l].is_string() || (lt[l] != "dense" && lt[l] != "sparse"))
            t.fail("mlp_layer_types", "must hold \"dense\" or \"sparse\"");
        c.moe.layers[l] = lt[l] == "sparse";
    }
    if (c.moe.experts == 0 &&
        std::find(c.moe.layers.begin(), c.moe.layers.end(), true) != c.moe.layers.end())
        t.fail("mlp_layer_types", "names a sparse layer but the model has no experts");
}

void windowSlidingLayers(const ConfigKeys& t, ModelConfig& c, const std::vector<std::string>& kinds,
                         int64_t def) {
    const int64_t w = t.isNull("sliding_window") ? 0 : t.integer("sliding_window", def, /*min=*/0);
    c.layerWindow.assign(static_cast<size_t>(c.nLayers), 0);
    bool any = false;
    for (size_t l = 0; l < kinds.size(); ++l)
        if (kinds[l] == "sliding_attention") {
            c.layerWindow[l] = w;
            any = any || w > 0;
        }
    if (!any)
        c.layerWindow.clear();
}

std::vector<bool> readLayerFlags(const ConfigKeys& t, const ModelConfig& c, const char* key,
                                 const std::vector<bool>& def) {
    if (!t.has(key))
        return def;
    const json& v = t.raw(key);
    if (!v.is_array() || v.size() != static_cast<size_t>(c.nLayers))
        t.fail(key, "must list one 0 or 1 per layer (" + std::to_string(c.nLayers) + ")");
    std::vector<bool> out;
    for (const json& x : v) {
        if (!(x.is_number_integer() || x.is_boolean()) ||
            (x.is_number_integer() && x.get<int64_t>() != 0 && x.get<int64_t>() != 1))
            t.fail(key, "must hold 0 or 1 for each layer");
        out.push_back(x.is_boolean() ? x.get<bool>() : x.get<int64_t>() == 1);
    }
    return out;
}

std::vector<int64_t> readLayerIndices(const ConfigKeys& t, const ModelConfig& c, const char* key) {
    std::vector<int64_t> out;
    if (!t.has(key))
        return out;
    if (!t.raw(key).is_array())
        t.fail(key, "must be a list of layer indices");
    for (const json& x : t.raw(key)) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c.nLayers)
            t.fail(key, "must hold layer indices in 0.." + std::to_string(c.nLayers - 1));
        out.push_back(x.get<int64_t>());
    }
    return out;
}

int64_t readExpertCount(const ConfigKeys& t, const char* name, int64_t def, const char* alias) {
    return t.has(alias) ? t.integer(alias, def) : t.integer(name, def);
}

void readRopeScaling(const ConfigKeys& t, ModelConfig& c, bool phi3Names) {
    if (t.has("rope_parameters")) {
        if (!t.raw("rope_parameters").is_object())
            t.fail("rope_parameters", "must be an object");
        const ConfigKeys r = t.nested("rope_parameters");
        if (isLayerTypeObject(r)) {
            if (!r.has("full_attention") || !r.raw("full_attention").is_object())
                r.fail("full_attention", "is missing (the full layers' RoPE)");
            readRopeObject(t, r.nested("full_attention"), c, c.rope, true, phi3Names);
            if (r.has("sliding_attention")) {
                if (!r.raw("sliding_attention").is_object())
                    r.fail("sliding_attention", "must be an object");
                c.localRope.theta = c.rope.theta;
                readRopeObject(t, r.nested("sliding_attention"), c, c.localRope, true, phi3Names);
                // The sliding layers use it: the windowed ones.
                c.layerLocalRope.assign(static_cast<size_t>(c.nLayers), false);
                for (size_t l = 0; l < c.layerWindow.size(); ++l)
                    c.layerLocalRope[l] = c.layerWindow[l] > 0;
            }
            // transformers 5.x's YaRN reads `truncate` from rope_parameters itself, not from the
            // layer type's object: nested, it is true unless given beside the layer types.
            c.rope.truncate = c.localRope.truncate = r.boolean("truncate", true);
            return;
        }
        readRopeObject(t, r, c, c.rope, true, phi3Names);
        return;
    }
    if (!t.has("rope_scaling"))
        return;
    const json& rs = t.raw("rope_scaling");
    if (!rs.is_object())
        t.fail("rope_scaling", "must be an object or null");
    readRopeObject(t, t.nested("rope_scaling"), c, c.rope, false, phi3Names);
}

void readTextConfigFolder(const ConfigKeys& k, ModelConfig& c,
                          void (*text)(const ConfigKeys&, ModelConfig&)) {
    if (!k.has("text_config"))
        return text(k, c);
    if (!k.raw("text_config").is_object())
        k.fail("text_config", "must be an object (the text model's config)");
    const ConfigKeys t = k.nested("text_config");
    if (c.eosIds.empty())
        c.eosIds = t.ids("eos_token_id");
    if (c.bosId < 0 && !t.ids("bos_token_id").empty())
        c.bosId = t.ids("bos_token_id").front();
    text(t, c);
    if (k.boolean("tie_word_embeddings", false))
        c.tieEmbeddings = true;
}

void readMambaKeys(const ConfigKeys& t, ModelConfig& c, int64_t inner,
                   const std::string& innerName) {
    LinearSpec& s = c.linear;
    s.valueHeads = t.integer("mamba_n_heads", 128);
    s.keyHeads = t.integer("mamba_n_groups", 1);
    s.keyDim = t.integer("mamba_d_state", 256);
    s.convKernel = t.integer("mamba_d_conv", 4, 1, 64);
    s.chunk = t.integer("mamba_chunk_size", 256);
    s.convBias = t.boolean("mamba_conv_bias", true);
    s.projBias = t.boolean("mamba_proj_bias", false);
    s.convAct = c.hiddenAct; // (config.hidden_act after the convolution too)
    const std::string width = innerName + " (" + std::to_string(inner) + ")";
    if (inner % s.valueHeads != 0)
        t.fail("mamba_n_heads", "must divide " + width);
    const bool automatic = !t.has("mamba_d_head") ||
                           (t.raw("mamba_d_head").is_string() && t.raw("mamba_d_head") == "auto");
    s.valueDim = automatic ? inner / s.valueHeads : t.integer("mamba_d_head", 0);
    if (s.valueDim * s.valueHeads != inner)
        t.fail("mamba_d_head", "× mamba_n_heads must be " + width);
    if (s.valueHeads % s.keyHeads != 0)
        t.fail("mamba_n_groups",
               "must divide mamba_n_heads (" + std::to_string(s.valueHeads) + ")");
    readTimeStepLimit(t, "time_step_limit", s);
}

std::vector<bool> listedLayers(const ConfigKeys& t, const std::string& key, int64_t nLayers) {
    if (!t.has(key) || !t.raw(key).is_array()) // (raw() of a missing key would be undefined)
        t.fail(key, "must be a list of layer indices");
    const json& idx = t.raw(key);
    std::vector<bool> listed(static_cast<size_t>(nLayers), false);
    for (const json& i : idx) {
        if (!i.is_number_integer())
            t.fail(key, "must be a list of layer indices");
        if (i.get<int64_t>() >= 0 && i.get<int64_t>() < nLayers)
            listed[static_cast<size_t>(i.get<int64_t>())] = true;
    }
    return listed;
}

void readTimeStepLimit(const ConfigKeys& t, const std::string& key, LinearSpec& s) {
    if (!t.has(key))
        return;
    const json& v = t.raw(key);
    auto bound = [&](const json& x) {
        if (x.is_number() && std::isfinite(x.get<double>()))
            return x.get<double>();
        if (x == "Infinity")
            return std::numeric_limits<double>::infinity();
        return std::nan("");
    };
    const double lo = v.is_array() && v.size() == 2 ? bound(v[0]) : std::nan("");
    const double hi = v.is_array() && v.size() == 2 ? bound(v[1]) : std::nan("");
    if (!(lo >= 0 && std::isfinite(lo) && hi > lo))
        t.fail(key, "must be [min, max] with 0 <= min < max");
    s.dtMin = lo;
    s.dtMax = hi;
}

} // namespace sparqlab::model
