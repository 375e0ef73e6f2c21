#include "model_config.h"

#include "capture/config_keys.h"
#include "capture/model_family.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace sparqlab::capture {

std::string supportedArchitectures() {
    std::string s;
    for (const ModelFamily* f : modelFamilies())
        for (const std::string& a : f->architectures)
            s += (s.empty() ? "" : ", ") + a;
    return s;
}

const RopeSpec& ModelConfig::ropeOf(int64_t layer) const {
    const size_t l = static_cast<size_t>(layer);
    return l < layerLocalRope.size() && layerLocalRope[l] ? localRope : rope;
}

namespace {
std::string shortNumber(double x) {
    std::ostringstream s;
    s << x;
    return s.str();
}
/// "0, 2, 4" for a few layers, "0, 2, 4, … 24 (13 layers)" for many.
std::string layerList(const std::vector<int64_t>& layers) {
    std::string out;
    const size_t shown = layers.size() > 6 ? 4 : layers.size();
    for (size_t i = 0; i < shown; ++i)
        out += (i ? ", " : "") + std::to_string(layers[i]);
    if (shown < layers.size())
        out += ", … " + std::to_string(layers.back()) + " (" + std::to_string(layers.size()) +
               " layers)";
    return out;
}
} // namespace

std::vector<std::pair<std::string, std::string>> attentionModifierSummary(const ModelConfig& c) {
    std::vector<std::pair<std::string, std::string>> rows;
    const double defaultScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    if (c.attnScale > 0 && std::abs(c.attnScale - defaultScale) > 1e-12 * defaultScale)
        rows.emplace_back("Attention scale",
                          "1/√" + shortNumber(std::round(1.0 / (c.attnScale * c.attnScale))) +
                              " (not 1/√" + std::to_string(c.headDim) + ")");
    if (c.attnSoftcap > 0)
        rows.emplace_back("Attention soft-cap", shortNumber(c.attnSoftcap) + ", every layer");
    if (c.finalSoftcap > 0)
        rows.emplace_back("Final-logit soft-cap", shortNumber(c.finalSoftcap));
    if (!c.layerWindow.empty()) {
        // One line per kind of layer, listing its layers: every layer appears once.
        std::vector<int64_t> kinds;
        for (int64_t w : c.layerWindow)
            if (std::find(kinds.begin(), kinds.end(), w) == kinds.end())
                kinds.push_back(w);
        for (int64_t w : kinds) {
            std::vector<int64_t> layers;
            for (size_t l = 0; l < c.layerWindow.size(); ++l)
                if (c.layerWindow[l] == w)
                    layers.push_back(static_cast<int64_t>(l));
            rows.emplace_back(w > 0 ? "Window " + std::to_string(w) : std::string("Global"),
                              "layers " + layerList(layers));
        }
    }
    if (!c.layerLocalRope.empty())
        rows.emplace_back("RoPE base", shortNumber(c.rope.theta) + " global, " +
                                           shortNumber(c.localRope.theta) + " sliding layers");
    std::vector<int64_t> nope, chunked;
    for (int64_t l = 0; l < c.nLayers; ++l) {
        if (c.rotaryDim > 0 && c.layout != Layout::GPT2 && !c.usesRope(l))
            nope.push_back(l);
        if (c.chunkOf(l) > 0)
            chunked.push_back(l);
    }
    if (!chunked.empty())
        rows.emplace_back("Chunks of " + std::to_string(c.chunkOf(chunked.front())),
                          "layers " + layerList(chunked));
    if (!nope.empty())
        rows.emplace_back("No RoPE (NoPE)", "layers " + layerList(nope));
    if (c.sinks)
        rows.emplace_back("Attention sinks", "one logit per head, every layer");
    if (c.mla.kvLoraRank > 0)
        rows.emplace_back(
            "MLA", "q·k " + std::to_string(c.headDim) + " (" + std::to_string(c.mla.nopeDim) +
                       " + " + std::to_string(c.mla.ropeDim) + " rotary), v " +
                       std::to_string(c.valueDim()) + "; latent " +
                       std::to_string(c.mla.kvLoraRank + c.mla.ropeDim) + " per position");
    if (c.moe.experts > 0) {
        int64_t sparse = 0;
        for (int64_t l = 0; l < c.nLayers; ++l)
            sparse += c.moe.sparse(l) ? 1 : 0;
        rows.emplace_back("Experts", std::to_string(c.moe.topK) + " of " +
                                         std::to_string(c.moe.experts) +
                                         (c.moe.sharedIntermediate > 0 ? " + a shared one" : "") +
                                         " on " + std::to_string(sparse) + " layers");
    }
    return rows;
}

namespace {

/// One sparse layer's routed experts.
int64_t expertsOfLayer(const ModelConfig& c) {
    const MoeSpec& m = c.moe;
    int64_t n = m.experts * 3 * c.hiddenSize * m.intermediate;
    if (m.layout == ExpertLayout::FusedInterleaved) // gate_up and down biases
        n += m.experts * (2 * m.intermediate + c.hiddenSize);
    return n;
}

int64_t sparseLayers(const ModelConfig& c) {
    int64_t n = 0;
    for (int64_t l = 0; l < c.nLayers; ++l)
        n += c.moe.sparse(l) ? 1 : 0;
    return n;
}

} // namespace

int64_t ModelConfig::expertParameterCount() const {
    return sparseLayers(*this) * expertsOfLayer(*this);
}

namespace {

const char* ropeLayoutName(RopeLayout l) {
    switch (l) {
    case RopeLayout::Half:
        return "half";
    case RopeLayout::Interleaved:
        return "interleaved";
    case RopeLayout::InterleavedToHalf:
        return "interleaved_to_half";
    }
    return "?";
}

const char* routerName(MoeRouter r) {
    switch (r) {
    case MoeRouter::SoftmaxTopK:
        return "softmax, top k";
    case MoeRouter::TopKSoftmax:
        return "top k, softmax";
    case MoeRouter::SigmoidGroups:
        return "sigmoid, group-limited top k";
    case MoeRouter::SigmoidTopK:
        return "top k, sigmoid on the input";
    }
    return "?";
}

json ropeJson(const RopeSpec& r) {
    json j{{"type", r.scaling.empty() ? "default" : r.scaling}, {"theta", r.theta}};
    if (!r.scaling.empty())
        j["factor"] = r.factor;
    if (r.attentionFactor != 1.0)
        j["attention_factor"] = r.attentionFactor;
    return j;
}

} // namespace

std::string attentionFeaturesJson(const ModelConfig& c) {
    json j = json::object();
    if (c.rotaryDim > 0 && c.layout != Layout::GPT2) {
        json rope = ropeJson(c.rope);
        rope["layout"] = ropeLayoutName(c.ropeLayout);
        rope["rotary_dim"] = c.rotaryDim;
        if (!c.layerLocalRope.empty())
            rope["sliding_layers"] = ropeJson(c.localRope);
        j["rope"] = rope;
    }
    std::vector<int64_t> nope, chunked;
    for (int64_t l = 0; l < c.nLayers; ++l) {
        if (c.rotaryDim > 0 && !c.usesRope(l))
            nope.push_back(l);
        if (c.chunkOf(l) > 0)
            chunked.push_back(l);
    }
    if (!c.layerWindow.empty())
        j["layer_sliding_window"] = c.layerWindow;
    if (!chunked.empty())
        j["layer_chunk_size"] = c.layerChunk;
    if (!nope.empty())
        j["nope_layers"] = nope;
    if (c.attnTemperatureScale > 0)
        j["nope_temperature"] = {{"scale", c.attnTemperatureScale},
                                 {"floor", c.attnTemperatureFloor}};
    if (c.qkL2Norm)
        j["qk_l2_norm"] = true;
    if (c.sinks)
        j["sinks"] = true;
    if (c.mla.kvLoraRank > 0)
        j["mla"] = {{"q_lora_rank", c.mla.qLoraRank},
                    {"kv_lora_rank", c.mla.kvLoraRank},
                    {"qk_nope_head_dim", c.mla.nopeDim},
                    {"qk_rope_head_dim", c.mla.ropeDim},
                    {"v_head_dim", c.valueDim()},
                    {"latent_per_position", c.mla.kvLoraRank + c.mla.ropeDim},
                    {"per_head_kv_per_position", c.nKvHeads * (c.headDim + c.valueDim())}};
    else if (c.valueDim() != c.headDim)
        j["v_head_dim"] = c.valueDim();
    if (c.moe.experts > 0) {
        std::vector<int64_t> sparse;
        for (int64_t l = 0; l < c.nLayers; ++l)
            if (c.moe.sparse(l))
                sparse.push_back(l);
        json e{{"experts", c.moe.experts},
               {"top_k", c.moe.topK},
               {"expert_intermediate", c.moe.intermediate},
               {"router", routerName(c.moe.router)},
               {"sparse_layers", sparse},
               {"expert_parameters", c.expertParameterCount()}};
        if (c.moe.sharedIntermediate > 0)
            e["shared_expert_intermediate"] = c.moe.sharedIntermediate;
        j["experts"] = e;
    }
    return j.dump();
}

int64_t ModelConfig::parameterCount() const {
    const int64_t h = hiddenSize, Dv = valueDim();
    const int64_t q = nHeads * headDim, kv = nKvHeads * headDim, vw = nKvHeads * Dv;
    int64_t perLayer = 0;
    if (mla.kvLoraRank > 0) {
        const int64_t qa = mla.qLoraRank, kva = mla.kvLoraRank + mla.ropeDim;
        perLayer += qa > 0 ? h * qa + qa + qa * q + (qkvBias ? qa : 0) : h * q;
        perLayer += h * kva + (qkvBias ? kva : 0) + mla.kvLoraRank;
        perLayer += mla.kvLoraRank * nHeads * (mla.nopeDim + Dv);
        perLayer += nHeads * Dv * h + (outBias ? h : 0);
    } else {
        perLayer += h * q + h * kv + h * vw + nHeads * Dv * h; // q, k, v, o
        if (qkvBias)
            perLayer += q + kv + vw;
        if (outBias)
            perLayer += h;
    }
    if (sinks)
        perLayer += nHeads;
    if (qkNorm == QkNorm::PerHead)
        perLayer += 2 * headDim;
    else if (qkNorm == QkNorm::Whole)
        perLayer += q + kv;
    const bool layerNormBias = layout != Layout::Llama; // GPT-NeoX, GPT-2: LayerNorm with bias
    const int64_t normsPerLayer =
        norms == NormPlacement::Sandwich || norms == NormPlacement::SandwichGlm4 ? 4
        : norms == NormPlacement::Parallel                                       ? 1
                                                                                 : 2;
    perLayer += normsPerLayer * h * (layerNormBias ? 2 : 1);
    // The dense MLP (gated in the Llama layout), on the layers that are not sparse.
    int64_t dense = (layout == Layout::Llama ? 3 : 2) * h * intermediateSize;
    if (mlpBias)
        dense += (layout == Layout::Llama ? 2 : 1) * intermediateSize + h;
    const int64_t sparse = sparseLayers(*this);
    int64_t moeLayer = 0;
    if (moe.experts > 0) {
        moeLayer = moe.experts * h + (moe.routerBias ? moe.experts : 0) +
                   (moe.scoreCorrection ? moe.experts : 0) + expertsOfLayer(*this) +
                   3 * h * moe.sharedIntermediate;
    }
    int64_t total = nLayers * perLayer + (nLayers - sparse) * dense + sparse * moeLayer +
                    vocabSize * h + (layerNormBias ? 2 : 1) * h;
    if (!tieEmbeddings)
        total += vocabSize * h;
    if (layout == Layout::GPT2)
        total += maxPositions * h;
    return total;
}

bool ModelConfig::usesRope(int64_t layer) const {
    const size_t l = static_cast<size_t>(layer);
    return !(l < layerNoRope.size() && layerNoRope[l]);
}

int64_t ModelConfig::chunkOf(int64_t layer) const {
    const size_t l = static_cast<size_t>(layer);
    return l < layerChunk.size() ? layerChunk[l] : 0;
}

ModelConfig parseModelConfig(const std::string& text, const std::string& path) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        throw ConfigError(path + ": malformed JSON: " + e.what());
    }
    if (!j.is_object())
        throw ConfigError(path + ": config.json must be a JSON object");
    const ConfigKeys k(j, path);
    ModelConfig c;
    if (!k.has("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
        !j["architectures"][0].is_string())
        k.fail("architectures", "is missing (a list naming the model class)");
    c.architectureName = j["architectures"][0].get<std::string>();
    // v5 writes "dtype", v4 "torch_dtype".
    c.torchDtype = k.string("dtype", k.string("torch_dtype", "float32"));
    c.eosIds = k.ids("eos_token_id");
    const std::vector<int64_t> bos = k.ids("bos_token_id");
    c.bosId = bos.empty() ? -1 : bos.front();
    // The family table reads the rest (capture/families/).
    const ModelFamily* family = findFamily(c.architectureName);
    if (!family)
        throw ConfigError(path + ": unsupported architecture '" + c.architectureName +
                          "' (supported: " + supportedArchitectures() + ")");
    c.family = family->name;
    c.layout = family->layout;
    family->parse(k, c);
    if (c.nHeads % c.nKvHeads != 0)
        k.fail("num_key_value_heads", "must divide num_attention_heads");
    if (c.layout != Layout::Llama && c.headDim * c.nHeads != c.hiddenSize)
        k.fail("num_attention_heads", "must divide the hidden size");
    if (c.rotaryDim % 2 != 0 || c.rotaryDim > c.headDim)
        k.fail("head_dim", "must give an even number of rotary dimensions, at most head_dim");
    const std::string act = c.hiddenAct;
    if (act != "silu" && act != "gelu" && act != "gelu_new" && act != "gelu_pytorch_tanh")
        k.fail("hidden_act",
               "'" + act + "' is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh)");
    return c;
}

ModelConfig readModelConfig(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw ConfigError(path + ": cannot read (missing?)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return parseModelConfig(ss.str(), path);
}

} // namespace sparqlab::capture
