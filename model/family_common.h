#pragma once
/// \file family_common.h
/// What the family units (model/families/) share: the keys of HF's Llama-style configs with a
/// family's defaults, rope_scaling, one sliding window for every layer, per-layer windows from
/// layer_types. Internal to the capture layer.

#include "model/config_keys.h"
#include "model/model_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sparqlab::model {

/// The defaults of a Llama-style HF config class for the keys a config omits.
struct LlamaDefaults {
    int64_t vocab = 32000, hidden = 4096, intermediate = 11008, layers = 32, heads = 32;
    int64_t kvHeads = 0; ///< 0: as many as the query heads
    int64_t headDim = 0; ///< the class's own head_dim default; 0: hidden / heads
    int64_t maxPositions = 2048;
    double normEps = 1e-6, ropeTheta = 10000.0;
    bool tieEmbeddings = false;
    bool attentionBias = false; ///< attention_bias's default (gpt-oss, GLM-4: true)
    bool qkvBias = false;       ///< q, k, v biases whatever attention_bias says (Qwen 2)
    const char* hiddenAct = "silu";
};

/// The defaults of DeepSeek-V3's mixture of experts for the keys a config omits (and of the
/// classes that share it: DeepSeek-V3.2, GLM-5, GLM-4.5).
struct DeepseekMoeDefaults {
    int64_t experts = 256, topK = 8, intermediate = 2048, groups = 8, topKGroups = 4;
    int64_t firstDense = 3;
    double routedScale = 2.5;
};
/// The defaults of DeepSeek-V3's config class and of the classes derived from it (DeepSeek-V3.2,
/// GLM-5) for the MLA and expert keys a config omits.
struct DeepseekDefaults {
    LlamaDefaults core;
    int64_t qLoraRank = 1536, kvLoraRank = 512, nopeDim = 128, ropeDim = 64, vHeadDim = 128;
    DeepseekMoeDefaults moe;
};
DeepseekDefaults deepseekV3Defaults();
/// DeepSeek-V3's keys (MLA, YaRN's softmax scale, the sigmoid router, dense first layers).
void parseDeepseekV3(const ConfigKeys& t, ModelConfig& c, const DeepseekDefaults& d);
/// DeepSeek-V3's mixture of experts: n_routed_experts behind a sigmoid router with a correction
/// bias and group-limited routing, n_shared_experts × moe_intermediate_size of shared expert,
/// on the layers from first_k_dense_replace on.
void readDeepseekMoe(const ConfigKeys& t, ModelConfig& c, const DeepseekMoeDefaults& d);

/// The rotary dimensions from `partial_rotary_factor` of `k` (default `def`, in (0, 1]): that
/// share of head_dim, rounded down, as HF's rotary embeddings take it.
void readPartialRotary(const ConfigKeys& k, ModelConfig& c, double def);

/// Sizes, head_dim, positions, norm epsilon, RoPE base, tied embeddings, biases, the activation,
/// rotary dimensions (all of head_dim) and the logit scale (1/sqrt(head_dim)) of a Llama-style
/// config `t`, as HF's config classes read them.
void readLlamaCore(const ConfigKeys& t, ModelConfig& c, const LlamaDefaults& d);

/// readLlamaCore for the hybrids built on Jamba's block (Jamba, Bamba, Falcon-H1):
/// num_key_value_heads null for as many as the query heads, the MLP under feed_forward after
/// pre_ff_layernorm, final_layernorm at the end.
void readJambaBlockCore(const ConfigKeys& t, ModelConfig& c, const LlamaDefaults& d);

/// The RoPE base: v5's rope_parameters.rope_theta (per layer type: the full layers'), else v4's
/// rope_theta, else `def`.
double ropeTheta(const ConfigKeys& t, double def);

/// The RoPE scaling, read after the layer kinds (c.layerWindow): v5's rope_parameters (one
/// object, or one per layer type: the full layers' in c.rope, the sliding layers' in
/// c.localRope) or v4's rope_scaling beside rope_theta; linear, llama3, longrope (Phi-3's "su"
/// and "yarn" are its longrope when `phi3Names`), yarn, or none; anything else is one
/// ConfigError naming rope_type.
void readRopeScaling(const ConfigKeys& t, ModelConfig& c, bool phi3Names = false);

/// One of v5's RoPE objects `r` (its base inside it; `t` the config, for the keys YaRN reads at
/// its top level) into `spec`, as readRopeScaling reads rope_parameters: DeepSeek-V4's "main" and
/// "compress" entries.
void readRopeParameters(const ConfigKeys& t, const ConfigKeys& r, ModelConfig& c, RopeSpec& spec);

/// One sliding window for every layer from `sliding_window` (null: none), as HF 4.51's causal
/// mask applies config.sliding_window to the whole model.
void readUniformWindow(const ConfigKeys& t, ModelConfig& c, int64_t defaultWindow);

/// Per-layer kinds from `layer_types` ("sliding_attention" or "full_attention"), overriding
/// `sliding` (one entry per layer) when the config names them.
void readLayerTypes(const ConfigKeys& t, const ModelConfig& c, std::vector<bool>& sliding);
/// The same for any set of kinds (Llama 4: "chunked_attention"): `kinds` holds the defaults.
/// `legacy` pairs an older name with the one it stands for (the hybrids' "attention", "mamba");
/// `key` is the list's key (Granite 4.0 reads its alias layers_block_type too).
void readLayerKinds(const ConfigKeys& t, const ModelConfig& c, std::vector<std::string>& kinds,
                    const std::vector<std::string>& allowed,
                    const std::vector<std::pair<std::string, std::string>>& legacy = {},
                    const std::string& key = "layer_types");
/// The windows of the layers whose kind is "sliding_attention": `sliding_window` (default
/// `def`; null: none) on them, 0 elsewhere.
void windowSlidingLayers(const ConfigKeys& t, ModelConfig& c, const std::vector<std::string>& kinds,
                         int64_t def);

/// Which layers are sparse from `mlp_layer_types` ("dense" or "sparse", one per layer) where the
/// config lists them (DeepSeek-V3.2, GLM-5, Kimi Linear), overriding first_k_dense_replace.
void readMlpLayerTypes(const ConfigKeys& t, ModelConfig& c);
/// A per-layer list of 0/1 flags (`no_rope_layers`), one per layer.
std::vector<bool> readLayerFlags(const ConfigKeys& t, const ModelConfig& c, const char* key,
                                 const std::vector<bool>& def);
/// Layer indices (`mlp_only_layers`, `moe_layers`), each in 0..layers−1.
std::vector<int64_t> readLayerIndices(const ConfigKeys& t, const ModelConfig& c, const char* key);
/// The routed experts' count from `alias` where the config has it, else from `name`: the alias
/// is the name transformers' attribute_map points at the count (num_local_experts, 5.x's
/// common name; Mixtral's num_experts), set after the named argument and so winning over it.
int64_t readExpertCount(const ConfigKeys& t, const char* name, int64_t def,
                        const char* alias = "num_local_experts");

/// The layers a list of layer indices under `key` names (LFM2's full_attn_idxs, Bamba's
/// attn_layer_indices): HF's configs ask of each layer whether the list holds it, so an index
/// outside [0, nLayers) names none. Anything but a list of integers is one ConfigError.
std::vector<bool> listedLayers(const ConfigKeys& t, const std::string& key, int64_t nLayers);

/// MixtralConfig's defaults (MiniMaxConfig keeps them).
LlamaDefaults mixtralDefaults();
/// Mixtral's experts on every layer (Mixtral, MiniMax-01): num_local_experts (alias num_experts)
/// of intermediate_size, a softmax over every expert whose top num_experts_per_tok are
/// renormalised, stored under block_sparse_moe as experts.E.w1, w3, w2 (Model::open: or packed
/// under mlp, as transformers 5 saves them).
void readMixtralMoe(const ConfigKeys& t, ModelConfig& c);

/// MiniMax's rotary dimensions (model/families/minimax_m2.cpp): partial_rotary_factor where the
/// config gives it, else its own rotary_dim, else `def`.
void readMiniMaxRotaryDim(const ConfigKeys& t, ModelConfig& c, int64_t def);
/// MiniMax's experts (M2, M3): `experts` (num_local_experts) of intermediate_size, stored as
/// Mixtral's under block_sparse_moe, the top `topK` of σ + the correction bias beside the gate
/// (use_routing_bias) weighted by σ renormalised.
void readMiniMaxMoe(const ConfigKeys& t, ModelConfig& c, int64_t experts, int64_t topK);

/// Mamba-2's clamp of the time step from `key` (time_step_limit: [min, max], Python writing the
/// default's max as Infinity) into s.dtMin and s.dtMax, where the config gives it.
void readTimeStepLimit(const ConfigKeys& t, const std::string& key, LinearSpec& s);

/// The Mamba-2 layers' keys of Bamba's naming (Granite 4.0, Falcon-H1) in LinearSpec's terms
/// (model_config.h): mamba_n_groups key heads of mamba_d_state (B and C), mamba_n_heads value
/// heads of mamba_d_head ("auto": `inner` / heads) over `inner` channels (named `innerName` in
/// messages), the convolution (mamba_d_conv, mamba_conv_bias, then hidden_act), in_proj's bias
/// (mamba_proj_bias), the chunks and time_step_limit.
void readMambaKeys(const ConfigKeys& t, ModelConfig& c, int64_t inner,
                   const std::string& innerName);

/// A vision-language folder's config (Qwen3.5, Qwen3-VL): the text model's keys at the top
/// (…ForCausalLM), or in text_config (…ForConditionalGeneration), read by `text`; its eos and bos
/// from text_config where the top has none, tied embeddings where either says so. Its weights
/// under model.language_model are found from the checkpoint when the model opens.
void readTextConfigFolder(const ConfigKeys& k, ModelConfig& c,
                          void (*text)(const ConfigKeys&, ModelConfig&));

} // namespace sparqlab::model
