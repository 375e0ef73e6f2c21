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
    return rows;
}

int64_t ModelConfig::parameterCount() const {
    const int64_t h = hiddenSize, q = nHeads * headDim, kv = nKvHeads * headDim;
    int64_t perLayer = h * q + 2 * h * kv + q * h; // attention projections
    if (qkvBias)
        perLayer += q + 2 * kv;
    if (outBias)
        perLayer += h;
    const bool gated = layout == Layout::Llama;
    perLayer += (gated ? 3 : 2) * h * intermediateSize;
    if (mlpBias)
        perLayer += intermediateSize + h;
    const bool layerNorm = !gated; // LayerNorm has a bias, RMSNorm none
    perLayer += (layerNorm ? 4 : norms == NormPlacement::Sandwich ? 4 : 2) * h;
    if (qkNorm == QkNorm::PerHead)
        perLayer += 2 * headDim;
    else if (qkNorm == QkNorm::Whole)
        perLayer += q + kv;
    int64_t total = nLayers * perLayer + vocabSize * h + (layerNorm ? 2 : 1) * h;
    if (!tieEmbeddings)
        total += vocabSize * h;
    if (layout == Layout::GPT2)
        total += maxPositions * h;
    return total;
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
    c.torchDtype = k.string("torch_dtype", "float32");
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
    if (c.rotaryDim % 2 != 0)
        k.fail("head_dim", "must give an even number of rotary dimensions");
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
