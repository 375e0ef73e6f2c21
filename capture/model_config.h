#pragma once
/// \file model_config.h
/// A model's `config.json`, read with Hugging Face's defaults for the keys a config omits
/// (HF writes only values that differ from the defaults).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::capture {

/// A config.json that cannot be used; the message names the file and the key.
class ConfigError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The architectures SparQ Lab runs (CONTRACTS.md §1).
enum class Architecture { Llama, Mistral, Qwen2, Gemma, GPTNeoX, GPT2 };

/// Everything the runtime needs from config.json.
struct ModelConfig {
    std::string architectureName; ///< architectures[0], e.g. "LlamaForCausalLM"
    Architecture arch = Architecture::Llama;
    int64_t vocabSize = 0;
    int64_t hiddenSize = 0;
    int64_t intermediateSize = 0;
    int64_t nLayers = 0;
    int64_t nHeads = 0;
    int64_t nKvHeads = 0;
    int64_t headDim = 0;
    int64_t maxPositions = 0;
    double normEps = 1e-6;
    double ropeTheta = 10000.0;
    int64_t rotaryDim = 0;          ///< dims of each head that get RoPE (GPT-NeoX: a fraction)
    std::string ropeScalingType;    ///< "" (none), "linear" or "llama3"
    double ropeFactor = 1.0;        ///< rope_scaling.factor
    double ropeLowFreqFactor = 1.0; ///< llama3
    double ropeHighFreqFactor = 4.0;
    int64_t ropeOriginalMax = 8192;
    bool tieEmbeddings = false;
    bool qkvBias = false;  ///< bias on q, k, v projections
    bool outBias = false;  ///< bias on the attention output projection
    bool mlpBias = false;  ///< bias on the MLP projections
    std::string hiddenAct; ///< silu, gelu, gelu_new, gelu_pytorch_tanh
    bool parallelResidual = false;
    double attnScale = 0;   ///< factor q·k is multiplied by
    double attnSoftcap = 0; ///< attention-logit soft-cap c: logits c·tanh(z/c) (0: none)
    /// Sliding window per layer (0: global); empty when no layer has one.
    std::vector<int64_t> layerWindow;
    std::vector<int64_t> eosIds;
    int64_t bosId = -1;
    std::string torchDtype; ///< "float32", "bfloat16", … as declared

    /// Parameters implied by the shapes (embedding, layers, head), for display and memory.
    int64_t parameterCount() const;
};

/// The supported names, for error messages.
std::string supportedArchitectures();

/// Reads `path` (a config.json). Throws ConfigError with one line naming the file and key.
ModelConfig readModelConfig(const std::string& path);
/// Parses config text; `path` is only used in messages.
ModelConfig parseModelConfig(const std::string& text, const std::string& path);

} // namespace sparqlab::capture
