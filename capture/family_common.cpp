// The keys Llama-style family units share (family_common.h), as transformers 4.51 reads them.

#include "family_common.h"

#include <algorithm>
#include <cmath>

namespace sparqlab::capture {

void readLlamaCore(const ConfigKeys& t, ModelConfig& c, const LlamaDefaults& d) {
    c.vocabSize = t.integer("vocab_size", d.vocab);
    c.hiddenSize = t.integer("hidden_size", d.hidden);
    c.intermediateSize = t.integer("intermediate_size", d.intermediate);
    c.nLayers = t.integer("num_hidden_layers", d.layers);
    c.nHeads = t.integer("num_attention_heads", d.heads);
    c.nKvHeads = t.integer("num_key_value_heads", d.kvHeads > 0 ? d.kvHeads : c.nHeads);
    const bool explicitHeadDim = d.headDim > 0;
    if (!explicitHeadDim && !t.has("head_dim") && c.hiddenSize % c.nHeads != 0)
        t.fail("num_attention_heads", "must divide the hidden size (or give head_dim)");
    c.headDim = t.integer("head_dim", explicitHeadDim ? d.headDim : c.hiddenSize / c.nHeads);
    c.maxPositions = t.integer("max_position_embeddings", d.maxPositions);
    c.normEps = t.number("rms_norm_eps", d.normEps);
    c.rope.theta = t.number("rope_theta", d.ropeTheta);
    c.tieEmbeddings = t.boolean("tie_word_embeddings", d.tieEmbeddings);
    const bool attentionBias = t.boolean("attention_bias", false);
    c.qkvBias = d.qkvBias || attentionBias;
    c.outBias = !d.qkvBias && attentionBias;
    c.mlpBias = t.boolean("mlp_bias", false);
    c.hiddenAct = t.string("hidden_act", d.hiddenAct);
    c.rotaryDim = c.headDim;
    c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
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

void readRopeScaling(const ConfigKeys& t, ModelConfig& c, bool phi3Names) {
    if (!t.has("rope_scaling"))
        return;
    const json& rs = t.raw("rope_scaling");
    if (!rs.is_object())
        t.fail("rope_scaling", "must be an object or null");
    const ConfigKeys r = t.nested("rope_scaling");
    std::string type = r.string("rope_type", r.string("type", std::string()));
    if (phi3Names && (type == "su" || type == "yarn"))
        type = "longrope";
    if (type == "linear" || type == "llama3") {
        c.rope.scaling = type;
        c.rope.factor = r.number("factor", 1.0);
        c.rope.lowFreqFactor = r.number("low_freq_factor", 1.0);
        c.rope.highFreqFactor = r.number("high_freq_factor", 4.0);
        c.rope.originalMax = r.integer("original_max_position_embeddings", 8192);
        if (!(c.rope.factor > 0))
            r.fail("factor", "must be positive");
        if (type == "llama3" && !(c.rope.highFreqFactor > c.rope.lowFreqFactor))
            r.fail("high_freq_factor", "must exceed low_freq_factor");
    } else if (type == "longrope") {
        // HF's _compute_longrope_parameters: factor from the two context lengths.
        c.rope.scaling = type;
        // Phi-3's config always has original_max_position_embeddings (default 4096); then the
        // factor is the ratio of the two context lengths, else it is given.
        const bool hasOriginal = phi3Names || t.has("original_max_position_embeddings");
        c.rope.originalMax =
            hasOriginal ? t.integer("original_max_position_embeddings", 4096) : c.maxPositions;
        c.rope.shortFactor = r.numbers("short_factor");
        c.rope.longFactor = r.numbers("long_factor");
        const size_t n = static_cast<size_t>(c.rotaryDim / 2);
        if (c.rope.shortFactor.size() != n)
            r.fail("short_factor",
                   "must hold " + std::to_string(n) + " numbers (rotary dimensions / 2)");
        if (c.rope.longFactor.size() != n)
            r.fail("long_factor",
                   "must hold " + std::to_string(n) + " numbers (rotary dimensions / 2)");
        if (!hasOriginal && !(r.number("factor", 0) > 0))
            r.fail("factor", "must be positive (or give original_max_position_embeddings)");
        const double factor = hasOriginal ? static_cast<double>(c.maxPositions) /
                                                static_cast<double>(c.rope.originalMax)
                                          : r.number("factor", 1.0);
        c.rope.factor = factor;
        if (r.has("attention_factor"))
            c.rope.attentionFactor = r.number("attention_factor", 1.0);
        else
            c.rope.attentionFactor =
                factor <= 1.0
                    ? 1.0
                    : std::sqrt(1 + std::log(factor) /
                                        std::log(static_cast<double>(c.rope.originalMax)));
    } else if (type != "default" && !type.empty()) {
        r.fail(r.has("rope_type") ? "rope_type" : "type",
               "'" + type + "' is not supported (linear, llama3, longrope)");
    }
}

} // namespace sparqlab::capture
