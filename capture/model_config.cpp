#include "model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace sparqlab::capture {

namespace {

using json = nlohmann::json;

/// Reads keys with HF's defaults and reports bad values with the file and key.
class Keys {
public:
    /// `prefix` names where the object sits (e.g. "text_config.") in messages.
    Keys(const json& j, std::string path, std::string prefix = {})
        : m_j(j), m_path(std::move(path)), m_prefix(std::move(prefix)) {}

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw ConfigError(m_path + ": key '" + m_prefix + key + "' " + what);
    }
    bool has(const std::string& key) const { return m_j.contains(key) && !m_j[key].is_null(); }
    /// Given, as null (for keys whose default is not null).
    bool isNull(const std::string& key) const { return m_j.contains(key) && m_j[key].is_null(); }

    int64_t integer(const std::string& key, int64_t def, int64_t min = 1) const {
        if (!has(key))
            return def;
        const json& v = m_j[key];
        if (!v.is_number_integer() &&
            !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
            fail(key, "must be an integer");
        // Range-checked before any conversion: a huge float or unsigned value does not fit
        // int64 (found by fuzz_config).
        constexpr int64_t kMax = int64_t{1} << 40;
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMax))
            fail(key, "is out of range (" + v.dump() + ")");
        if (v.is_number_float() && std::abs(v.get<double>()) > static_cast<double>(kMax))
            fail(key, "is out of range (" + v.dump() + ")");
        const int64_t x =
            v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
        if (x < min || x > kMax)
            fail(key, "is out of range (" + std::to_string(x) + ")");
        return x;
    }
    int64_t required(const std::string& key, int64_t def) const {
        // HF has a default for every key; `def < 0` marks a key we insist on.
        if (def < 0 && !has(key))
            fail(key, "is missing");
        return integer(key, def);
    }
    double number(const std::string& key, double def) const {
        if (!has(key))
            return def;
        if (!m_j[key].is_number())
            fail(key, "must be a number");
        const double x = m_j[key].get<double>();
        if (!std::isfinite(x))
            fail(key, "must be finite");
        return x;
    }
    bool boolean(const std::string& key, bool def) const {
        if (!has(key))
            return def;
        if (!m_j[key].is_boolean())
            fail(key, "must be true or false");
        return m_j[key].get<bool>();
    }
    std::string string(const std::string& key, const std::string& def) const {
        if (!has(key))
            return def;
        if (!m_j[key].is_string())
            fail(key, "must be a string");
        return m_j[key].get<std::string>();
    }
    std::vector<int64_t> ids(const std::string& key) const {
        std::vector<int64_t> out;
        if (!has(key))
            return out;
        const json& v = m_j[key];
        if (v.is_number_integer())
            out.push_back(v.get<int64_t>());
        else if (v.is_array())
            for (const json& x : v) {
                if (!x.is_number_integer())
                    fail(key, "must hold integers");
                out.push_back(x.get<int64_t>());
            }
        else
            fail(key, "must be an integer or a list of integers");
        return out;
    }
    std::vector<double> numbers(const std::string& key) const {
        std::vector<double> out;
        if (!has(key))
            return out;
        if (!m_j[key].is_array())
            fail(key, "must be a list of numbers");
        for (const json& x : m_j[key]) {
            if (!x.is_number() || !std::isfinite(x.get<double>()))
                fail(key, "must hold finite numbers");
            out.push_back(x.get<double>());
        }
        return out;
    }
    const json& raw(const std::string& key) const { return m_j[key]; }
    /// The keys of a nested object (e.g. rope_scaling), its name in messages.
    Keys nested(const std::string& key) const {
        return Keys(m_j[key], m_path, m_prefix + key + ".");
    }

private:
    const json& m_j;
    std::string m_path;
    std::string m_prefix;
};

} // namespace

std::string supportedArchitectures() {
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
           "GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
           "Gemma3ForConditionalGeneration, Phi3ForCausalLM, Olmo2ForCausalLM, "
           "GPTNeoXForCausalLM, GPT2LMHeadModel";
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
    const bool gated = arch != Architecture::GPTNeoX && arch != Architecture::GPT2;
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
    if (arch == Architecture::GPT2)
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
    const Keys k(j, path);
    ModelConfig c;
    if (!k.has("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
        !j["architectures"][0].is_string())
        k.fail("architectures", "is missing (a list naming the model class)");
    c.architectureName = j["architectures"][0].get<std::string>();
    c.torchDtype = k.string("torch_dtype", "float32");
    c.eosIds = k.ids("eos_token_id");
    const std::vector<int64_t> bos = k.ids("bos_token_id");
    c.bosId = bos.empty() ? -1 : bos.front();
    const std::string& a = c.architectureName;

    if (a == "LlamaForCausalLM" || a == "MistralForCausalLM" || a == "Qwen2ForCausalLM" ||
        a == "Qwen3ForCausalLM" || a == "GemmaForCausalLM" || a == "Gemma2ForCausalLM" ||
        a == "Gemma3ForCausalLM" || a == "Gemma3ForConditionalGeneration" ||
        a == "Phi3ForCausalLM" || a == "Olmo2ForCausalLM") {
        c.arch = a == "LlamaForCausalLM"     ? Architecture::Llama
                 : a == "MistralForCausalLM" ? Architecture::Mistral
                 : a == "Qwen2ForCausalLM"   ? Architecture::Qwen2
                 : a == "Qwen3ForCausalLM"   ? Architecture::Qwen3
                 : a == "GemmaForCausalLM"   ? Architecture::Gemma
                 : a == "Gemma2ForCausalLM"  ? Architecture::Gemma2
                 : a == "Phi3ForCausalLM"    ? Architecture::Phi3
                 : a == "Olmo2ForCausalLM"   ? Architecture::Olmo2
                                             : Architecture::Gemma3;
        // Gemma 3's vision-language folders keep the text model's config in text_config and
        // its weights under language_model.
        const bool vlm = a == "Gemma3ForConditionalGeneration";
        if (vlm && (!k.has("text_config") || !j["text_config"].is_object()))
            k.fail("text_config", "is missing (the text model's config)");
        const Keys t = vlm ? k.nested("text_config") : k;
        if (vlm) {
            c.weightPrefix = "language_model.";
            if (c.eosIds.empty())
                c.eosIds = t.ids("eos_token_id");
            if (c.bosId < 0 && !t.ids("bos_token_id").empty())
                c.bosId = t.ids("bos_token_id").front();
        }
        const Architecture ar = c.arch;
        const bool gemma = ar == Architecture::Gemma, gemma2 = ar == Architecture::Gemma2,
                   gemma3 = ar == Architecture::Gemma3, qwen2 = ar == Architecture::Qwen2,
                   qwen3 = ar == Architecture::Qwen3, mistral = ar == Architecture::Mistral,
                   phi3 = ar == Architecture::Phi3, olmo2 = ar == Architecture::Olmo2;
        const bool gemmaFamily = gemma || gemma2 || gemma3;
        // The defaults of each HF config class (transformers 4.51).
        auto pick = [&](int64_t llama, int64_t g1, int64_t g2, int64_t g3, int64_t qw, int64_t mi,
                        int64_t ph, int64_t ol) {
            return gemma              ? g1
                   : gemma2           ? g2
                   : gemma3           ? g3
                   : (qwen2 || qwen3) ? qw
                   : mistral          ? mi
                   : phi3             ? ph
                   : olmo2            ? ol
                                      : llama;
        };
        c.vocabSize = t.integer("vocab_size",
                                pick(32000, 256000, 256000, 262208, 151936, 32000, 32064, 50304));
        c.hiddenSize =
            t.integer("hidden_size", pick(4096, 3072, 2304, 2304, 4096, 4096, 3072, 4096));
        c.intermediateSize = t.integer("intermediate_size",
                                       pick(11008, 24576, 9216, 9216, 22016, 14336, 8192, 11008));
        c.nLayers = t.integer("num_hidden_layers", pick(32, 28, 26, 26, 32, 32, 32, 32));
        c.nHeads = t.integer("num_attention_heads", pick(32, 16, 8, 8, 32, 32, 32, 32));
        c.nKvHeads = t.integer("num_key_value_heads",
                               pick(c.nHeads, c.nHeads, 4, 4, c.nHeads, 8, c.nHeads, c.nHeads));
        const bool explicitHeadDim = gemmaFamily || qwen3;
        if (!explicitHeadDim && !t.has("head_dim") && c.hiddenSize % c.nHeads != 0)
            t.fail("num_attention_heads", "must divide the hidden size (or give head_dim)");
        c.headDim = t.integer("head_dim", gemmaFamily ? 256
                                          : qwen3     ? 128
                                                      : c.hiddenSize / c.nHeads);
        c.maxPositions = t.integer("max_position_embeddings",
                                   pick(2048, 8192, 8192, 131072, 32768, 4096 * 32, 4096, 2048));
        c.normEps = t.number("rms_norm_eps", phi3 || olmo2 ? 1e-5 : 1e-6);
        c.rope.theta = t.number("rope_theta", gemma3 ? 1e6 : 10000.0);
        c.tieEmbeddings = t.boolean("tie_word_embeddings", gemmaFamily);
        const bool attentionBias = t.boolean("attention_bias", false);
        c.qkvBias = qwen2 || attentionBias;
        c.outBias = !qwen2 && attentionBias;
        c.mlpBias = t.boolean("mlp_bias", false);
        if (gemmaFamily)
            c.hiddenAct =
                t.string("hidden_activation", t.string("hidden_act", "gelu_pytorch_tanh"));
        else
            c.hiddenAct = t.string("hidden_act", "silu");
        if (gemma && c.hiddenAct == "gelu")
            c.hiddenAct = "gelu_pytorch_tanh"; // HF Gemma uses the tanh approximation for "gelu"
        c.rotaryDim = c.headDim;
        if (phi3) {
            const double f = t.number("partial_rotary_factor", 1.0);
            if (!(f > 0 && f <= 1))
                t.fail("partial_rotary_factor", "must lie in (0, 1]");
            c.rotaryDim = static_cast<int64_t>(static_cast<double>(c.headDim) * f);
        }
        c.attnScale =
            1.0 / std::sqrt(static_cast<double>(
                      gemmaFamily ? t.integer("query_pre_attn_scalar", gemma ? c.headDim : 256)
                                  : c.headDim));
        if (gemmaFamily) {
            c.normPlusOne = true;
            c.embedScale = std::sqrt(static_cast<double>(c.hiddenSize));
        }
        if (gemma2 || gemma3) {
            c.norms = NormPlacement::Sandwich;
            // null turns a cap off (Gemma 2's defaults are 50 and 30, Gemma 3's none).
            c.attnSoftcap = t.isNull("attn_logit_softcapping")
                                ? 0.0
                                : t.number("attn_logit_softcapping", gemma2 ? 50.0 : 0.0);
            c.finalSoftcap = t.isNull("final_logit_softcapping")
                                 ? 0.0
                                 : t.number("final_logit_softcapping", gemma2 ? 30.0 : 0.0);
            if (c.attnSoftcap < 0)
                t.fail("attn_logit_softcapping", "must be positive (or null)");
            if (c.finalSoftcap < 0)
                t.fail("final_logit_softcapping", "must be positive (or null)");
        }
        if (olmo2) {
            c.norms = NormPlacement::Post;
            c.qkNorm = QkNorm::Whole;
        }
        if (qwen3 || gemma3)
            c.qkNorm = QkNorm::PerHead;
        if (phi3)
            c.fusedQkv = c.fusedGateUp = true;
        // Sliding windows, per layer (0: global).
        std::vector<int64_t> windows(static_cast<size_t>(c.nLayers), 0);
        if (gemma2 || gemma3) {
            const int64_t w = t.integer("sliding_window", 4096);
            // Gemma 2: every even layer; Gemma 3: all but every sliding_window_pattern-th.
            const int64_t pattern = gemma3 ? t.integer("sliding_window_pattern", 6) : 2;
            std::vector<bool> sliding(static_cast<size_t>(c.nLayers));
            for (int64_t l = 0; l < c.nLayers; ++l)
                sliding[static_cast<size_t>(l)] = gemma2 ? l % 2 == 0 : (l + 1) % pattern != 0;
            // Configs written by later transformers name each layer's kind in layer_types.
            if (t.has("layer_types")) {
                const json& lt = t.raw("layer_types");
                if (!lt.is_array() || lt.size() != static_cast<size_t>(c.nLayers))
                    t.fail("layer_types",
                           "must list one kind per layer (" + std::to_string(c.nLayers) + ")");
                for (size_t l = 0; l < lt.size(); ++l) {
                    if (!lt[l].is_string() ||
                        (lt[l] != "sliding_attention" && lt[l] != "full_attention"))
                        t.fail("layer_types",
                               "must hold \"sliding_attention\" or \"full_attention\"");
                    sliding[l] = lt[l] == "sliding_attention";
                }
            }
            for (size_t l = 0; l < sliding.size(); ++l)
                windows[l] = sliding[l] ? w : 0;
            if (gemma3) { // local layers: their own base and no scaling
                c.localRope.theta = t.number("rope_local_base_freq", 10000.0);
                c.layerLocalRope = sliding;
            }
        } else if (mistral || phi3 ||
                   ((qwen2 || qwen3) && t.boolean("use_sliding_window", false))) {
            // One causal mask for the whole model, windowed when config.sliding_window is set
            // (HF 4.51's mask helper; Qwen's config keeps it only with use_sliding_window, and
            // the mask then windows every layer). A null window is none; Mistral's default is
            // 4096.
            const int64_t w = t.isNull("sliding_window")
                                  ? 0
                                  : t.integer("sliding_window", mistral || !phi3 ? 4096 : 0, 0);
            std::fill(windows.begin(), windows.end(), w);
        }
        if (std::any_of(windows.begin(), windows.end(), [](int64_t w) { return w > 0; }))
            c.layerWindow = windows;
        // rope_scaling (Phi-3's "su" and "yarn" are its longrope, as HF maps them).
        if (t.has("rope_scaling")) {
            const json& rs = t.raw("rope_scaling");
            if (!rs.is_object())
                t.fail("rope_scaling", "must be an object or null");
            const Keys r = t.nested("rope_scaling");
            std::string type = r.string("rope_type", r.string("type", std::string()));
            if (phi3 && (type == "su" || type == "yarn"))
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
                // Phi-3's config always has original_max_position_embeddings (default 4096);
                // then the factor is the ratio of the two context lengths, else it is given.
                const bool hasOriginal = phi3 || t.has("original_max_position_embeddings");
                c.rope.originalMax = hasOriginal
                                         ? t.integer("original_max_position_embeddings", 4096)
                                         : c.maxPositions;
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
    } else if (a == "GPTNeoXForCausalLM") {
        c.arch = Architecture::GPTNeoX;
        c.vocabSize = k.integer("vocab_size", 50432);
        c.hiddenSize = k.integer("hidden_size", 6144);
        c.nLayers = k.integer("num_hidden_layers", 44);
        c.nHeads = k.integer("num_attention_heads", 64);
        c.nKvHeads = c.nHeads;
        c.intermediateSize = k.integer("intermediate_size", 24576);
        c.headDim = c.hiddenSize / c.nHeads;
        c.maxPositions = k.integer("max_position_embeddings", 2048);
        c.normEps = k.number("layer_norm_eps", 1e-5);
        c.rope.theta = k.number("rotary_emb_base", k.number("rope_theta", 10000.0));
        const double pct = k.number("rotary_pct", 0.25);
        if (!(pct > 0 && pct <= 1))
            k.fail("rotary_pct", "must lie in (0, 1]");
        c.rotaryDim = static_cast<int64_t>(c.headDim * pct);
        c.tieEmbeddings = k.boolean("tie_word_embeddings", false);
        c.qkvBias = c.outBias = k.boolean("attention_bias", true);
        c.mlpBias = true;
        c.hiddenAct = k.string("hidden_act", "gelu");
        c.parallelResidual = k.boolean("use_parallel_residual", true);
        c.attnScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    } else if (a == "GPT2LMHeadModel") {
        c.arch = Architecture::GPT2;
        c.vocabSize = k.integer("vocab_size", 50257);
        c.hiddenSize = k.integer("n_embd", 768);
        c.nLayers = k.integer("n_layer", 12);
        c.nHeads = k.integer("n_head", 12);
        c.nKvHeads = c.nHeads;
        c.intermediateSize = k.integer("n_inner", 4 * c.hiddenSize);
        c.headDim = c.hiddenSize / c.nHeads;
        c.maxPositions = k.integer("n_positions", 1024);
        c.normEps = k.number("layer_norm_epsilon", 1e-5);
        c.tieEmbeddings = k.boolean("tie_word_embeddings", true);
        c.qkvBias = c.outBias = c.mlpBias = true;
        c.hiddenAct = k.string("activation_function", "gelu_new");
        c.attnScale = k.boolean("scale_attn_weights", true)
                          ? 1.0 / std::sqrt(static_cast<double>(c.headDim))
                          : 1.0;
        if (k.boolean("scale_attn_by_inverse_layer_idx", false))
            k.fail("scale_attn_by_inverse_layer_idx", "= true is not supported");
    } else {
        throw ConfigError(path + ": unsupported architecture '" + a +
                          "' (supported: " + supportedArchitectures() + ")");
    }
    if (c.nHeads % c.nKvHeads != 0)
        k.fail("num_key_value_heads", "must divide num_attention_heads");
    const bool ownHeadDim = c.arch == Architecture::Gemma || c.arch == Architecture::Gemma2 ||
                            c.arch == Architecture::Gemma3 || c.arch == Architecture::Llama ||
                            c.arch == Architecture::Qwen3 || c.arch == Architecture::Mistral ||
                            c.arch == Architecture::Qwen2 || c.arch == Architecture::Olmo2 ||
                            c.arch == Architecture::Phi3;
    if (!ownHeadDim && c.headDim * c.nHeads != c.hiddenSize)
        k.fail("num_attention_heads", "must divide the hidden size");
    if (c.rotaryDim % 2 != 0)
        k.fail(c.arch == Architecture::Phi3 ? "partial_rotary_factor" : "rotary_pct",
               "must give an even number of rotary dimensions");
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
