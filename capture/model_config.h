#pragma once
/// \file model_config.h
/// A model's `config.json`, read with Hugging Face's defaults for the keys a config omits
/// (HF writes only values that differ from the defaults), as transformers 4.51 reads them.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::capture {

/// A config.json that cannot be used; the message names the file and the key.
class ConfigError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The module names a checkpoint's weights follow (the transformer's three layouts); which
/// family uses which is in the family table (model_family.h).
enum class Layout {
    Llama,   ///< model.embed_tokens, model.layers.N.self_attn.q_proj …, lm_head (most families)
    GPTNeoX, ///< gpt_neox.layers.N.attention.query_key_value …, embed_out
    GPT2,    ///< transformer.h.N.attn.c_attn …, Conv1D weights [in, out]
};

/// Rotary position embedding of a set of layers (HF's rotate_half layout).
struct RopeSpec {
    double theta = 10000.0;
    std::string scaling;        ///< "" (none), "linear", "llama3" or "longrope"
    double factor = 1.0;        ///< rope_scaling.factor
    double lowFreqFactor = 1.0; ///< llama3
    double highFreqFactor = 4.0;
    int64_t originalMax = 8192;      ///< llama3, longrope: original_max_position_embeddings
    std::vector<double> shortFactor; ///< longrope, per frequency
    std::vector<double> longFactor;  ///< longrope, above originalMax positions
    double attentionFactor = 1.0;    ///< longrope: cos and sin are multiplied by it
};

/// Where a block normalises (RMSNorm/LayerNorm placement).
enum class NormPlacement {
    Pre,      ///< x + f(norm(x)) (Llama, Qwen, Phi-3, Gemma, GPT-NeoX, GPT-2)
    Sandwich, ///< x + post(f(pre(x))) for attention and MLP (Gemma 2, Gemma 3)
    Post,     ///< x + norm(f(x)) (OLMo 2)
};

/// How queries and keys are normalised before RoPE.
enum class QkNorm {
    None,
    PerHead, ///< RMSNorm over head_dim of each head (Qwen 3, Gemma 3)
    Whole,   ///< RMSNorm over the whole projection (OLMo 2)
};

/// Everything the runtime needs from config.json: the layer recipe a family unit reads
/// (capture/families/, model_family.h) and the transformer builds.
struct ModelConfig {
    std::string architectureName; ///< architectures[0], e.g. "LlamaForCausalLM"
    std::string family;           ///< its family's name (model_family.h), e.g. "llama"
    Layout layout = Layout::Llama;
    int64_t vocabSize = 0;
    int64_t hiddenSize = 0;
    int64_t intermediateSize = 0;
    int64_t nLayers = 0;
    int64_t nHeads = 0;
    int64_t nKvHeads = 0;
    int64_t headDim = 0;
    int64_t maxPositions = 0;
    double normEps = 1e-6;
    int64_t rotaryDim = 0; ///< dims of each head that get RoPE (GPT-NeoX, Phi-3: a fraction)
    RopeSpec rope;         ///< the (global) layers' RoPE
    RopeSpec localRope;    ///< sliding layers' RoPE where it differs (Gemma 3)
    std::vector<bool> layerLocalRope; ///< per layer: uses localRope (empty: none does)
    bool tieEmbeddings = false;
    bool qkvBias = false;  ///< bias on q, k, v projections
    bool outBias = false;  ///< bias on the attention output projection
    bool mlpBias = false;  ///< bias on the MLP projections
    std::string hiddenAct; ///< silu, gelu, gelu_new, gelu_pytorch_tanh
    bool parallelResidual = false;
    NormPlacement norms = NormPlacement::Pre;
    bool normPlusOne = false; ///< RMSNorm scales by (1 + w) (the Gemma family)
    QkNorm qkNorm = QkNorm::None;
    bool fusedQkv = false;    ///< one qkv_proj, rows q, k, v (Phi-3)
    bool fusedGateUp = false; ///< one gate_up_proj, rows gate, up (Phi-3)
    double embedScale = 0;    ///< embeddings multiplied by it (Gemma: sqrt(hidden)); 0: none
    double attnScale = 0;     ///< factor q·k is multiplied by
    double attnSoftcap = 0;   ///< attention-logit soft-cap c: logits c·tanh(z/c) (0: none)
    double finalSoftcap = 0;  ///< final-logit soft-cap (0: none)
    /// Sliding window per layer (0: global); empty when no layer has one.
    std::vector<int64_t> layerWindow;
    std::string weightPrefix; ///< before every weight name ("language_model." in Gemma 3 VLMs)
    std::vector<int64_t> eosIds;
    int64_t bosId = -1;
    std::string torchDtype; ///< "float32", "bfloat16", … as declared

    /// Parameters implied by the shapes (embedding, layers, head), for display and memory.
    int64_t parameterCount() const;
    /// The RoPE of layer `layer`.
    const RopeSpec& ropeOf(int64_t layer) const;
};

/// What a model does to attention beyond softmax(q·k/√d_h), as (label, value) lines for
/// people: the scale, the soft-caps, each layer's window and local RoPE base. Empty for a
/// model without any.
std::vector<std::pair<std::string, std::string>> attentionModifierSummary(const ModelConfig& c);

/// The supported names, for error messages.
std::string supportedArchitectures();

/// Reads `path` (a config.json). Throws ConfigError with one line naming the file and key.
ModelConfig readModelConfig(const std::string& path);
/// Parses config text; `path` is only used in messages.
ModelConfig parseModelConfig(const std::string& text, const std::string& path);

} // namespace sparqlab::capture
