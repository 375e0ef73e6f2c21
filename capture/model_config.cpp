#include "model_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

namespace sparqlab::capture {

namespace {

using json = nlohmann::json;

/// Reads keys with HF's defaults and reports bad values with the file and key.
class Keys {
public:
    Keys(const json& j, std::string path) : m_j(j), m_path(std::move(path)) {}

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw ConfigError(m_path + ": key '" + key + "' " + what);
    }
    bool has(const std::string& key) const { return m_j.contains(key) && !m_j[key].is_null(); }

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
    const json& raw(const std::string& key) const { return m_j[key]; }

private:
    const json& m_j;
    std::string m_path;
};

} // namespace

std::string supportedArchitectures() {
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GemmaForCausalLM, "
           "GPTNeoXForCausalLM, GPT2LMHeadModel";
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
    perLayer += (layerNorm ? 4 : 2) * h;
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
        a == "GemmaForCausalLM") {
        c.arch = a == "LlamaForCausalLM"     ? Architecture::Llama
                 : a == "MistralForCausalLM" ? Architecture::Mistral
                 : a == "Qwen2ForCausalLM"   ? Architecture::Qwen2
                                             : Architecture::Gemma;
        const bool gemma = c.arch == Architecture::Gemma;
        const bool qwen = c.arch == Architecture::Qwen2;
        const bool mistral = c.arch == Architecture::Mistral;
        // HF defaults of LlamaConfig / MistralConfig / Qwen2Config / GemmaConfig.
        c.vocabSize = k.integer("vocab_size", gemma ? 256000 : qwen ? 151936 : 32000);
        c.hiddenSize = k.integer("hidden_size", gemma ? 3072 : 4096);
        c.intermediateSize = k.integer("intermediate_size", gemma     ? 24576
                                                            : qwen    ? 22016
                                                            : mistral ? 14336
                                                                      : 11008);
        c.nLayers = k.integer("num_hidden_layers", gemma ? 28 : 32);
        c.nHeads = k.integer("num_attention_heads", gemma ? 16 : 32);
        c.nKvHeads = k.integer("num_key_value_heads", mistral ? 8 : c.nHeads);
        if (!gemma && !k.has("head_dim") && c.hiddenSize % c.nHeads != 0)
            k.fail("num_attention_heads", "must divide the hidden size (or give head_dim)");
        c.headDim = k.integer("head_dim", gemma ? 256 : c.hiddenSize / c.nHeads);
        c.maxPositions = k.integer("max_position_embeddings", gemma     ? 8192
                                                              : qwen    ? 32768
                                                              : mistral ? 4096 * 32
                                                                        : 2048);
        c.normEps = k.number("rms_norm_eps", 1e-6);
        c.ropeTheta = k.number("rope_theta", 10000.0);
        c.tieEmbeddings = k.boolean("tie_word_embeddings", gemma);
        const bool attentionBias = k.boolean("attention_bias", false);
        c.qkvBias = qwen || attentionBias;
        c.outBias = !qwen && attentionBias;
        c.mlpBias = k.boolean("mlp_bias", false);
        c.hiddenAct =
            gemma ? k.string("hidden_activation", k.string("hidden_act", "gelu_pytorch_tanh"))
                  : k.string("hidden_act", "silu");
        if (gemma && c.hiddenAct == "gelu")
            c.hiddenAct = "gelu_pytorch_tanh"; // HF Gemma uses the tanh approximation for "gelu"
        c.rotaryDim = c.headDim;
        c.attnScale = 1.0 / std::sqrt(static_cast<double>(
                                gemma ? k.integer("query_pre_attn_scalar", c.headDim) : c.headDim));
        if (k.has("rope_scaling")) {
            const json& rs = k.raw("rope_scaling");
            if (!rs.is_object())
                k.fail("rope_scaling", "must be an object or null");
            const std::string type = rs.value("rope_type", rs.value("type", std::string()));
            if (type == "linear" || type == "llama3") {
                c.ropeScalingType = type;
                c.ropeFactor = rs.value("factor", 1.0);
                c.ropeLowFreqFactor = rs.value("low_freq_factor", 1.0);
                c.ropeHighFreqFactor = rs.value("high_freq_factor", 4.0);
                c.ropeOriginalMax = rs.value("original_max_position_embeddings", int64_t{8192});
                if (!(c.ropeFactor > 0))
                    k.fail("rope_scaling", "factor must be positive");
            } else if (type != "default" && !type.empty()) {
                k.fail("rope_scaling", "type '" + type + "' is not supported (linear, llama3)");
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
        c.ropeTheta = k.number("rotary_emb_base", k.number("rope_theta", 10000.0));
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
    if (c.arch != Architecture::Gemma && c.arch != Architecture::Llama &&
        c.headDim * c.nHeads != c.hiddenSize)
        k.fail("num_attention_heads", "must divide the hidden size");
    if (c.rotaryDim % 2 != 0)
        k.fail("rotary_pct", "must give an even number of rotary dimensions");
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
