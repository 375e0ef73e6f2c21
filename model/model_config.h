#pragma once
/// \file model_config.h
/// A model's `config.json`, read with Hugging Face's defaults for the keys a config omits
/// (HF writes only values that differ from the defaults), as transformers 4.51 reads them and,
/// for the families added since (MoE, sinks, NoPE, chunked layers, MLA), as 5.x does: both the
/// v4 form (rope_theta, rope_scaling) and v5's rope_parameters.

#include <array>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::model {

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

/// Rotary position embedding of a set of layers.
struct RopeSpec {
    double theta = 10000.0;
    std::string scaling;        ///< "" (none), "linear", "llama3", "longrope" or "yarn"
    double factor = 1.0;        ///< the scaling's factor
    double lowFreqFactor = 1.0; ///< llama3
    double highFreqFactor = 4.0;
    int64_t originalMax = 8192;      ///< llama3, longrope, yarn: original_max_position_embeddings
    std::vector<double> shortFactor; ///< longrope, per frequency
    std::vector<double> longFactor;  ///< longrope, above originalMax positions
    double attentionFactor = 1.0;    ///< longrope, yarn: cos and sin are multiplied by it
    double betaFast = 32, betaSlow = 1; ///< yarn: the ramp's ends, in rotations
    bool truncate = true; ///< yarn: the ramp's ends rounded to whole dimensions (gpt-oss: false)
};

/// How a head's rotary dimensions pair up.
enum class RopeLayout {
    Half,              ///< rotate_half: dim i pairs with i + rot/2 (Llama and most)
    Interleaved,       ///< dims 2i and 2i + 1 pair, in place (Cohere, GLM-4, Llama 4)
    InterleavedToHalf, ///< pairs (2i, 2i + 1) written out as [evens | odds] (DeepSeek-V3)
};

/// Where a block normalises (RMSNorm/LayerNorm placement).
enum class NormPlacement {
    Pre,          ///< x + f(norm(x)) (Llama, Qwen, Phi-3, Gemma, GPT-NeoX, GPT-2)
    Sandwich,     ///< x + post(f(pre(x))) for attention and MLP (Gemma 2, Gemma 3)
    SandwichGlm4, ///< the same with GLM-4's names (post_self_attn_, post_mlp_layernorm)
    Post,         ///< x + norm(f(x)) (OLMo 2, OLMo 3)
    Parallel,     ///< x + attn(norm(x)) + mlp(norm(x)), one norm (Cohere 2)
    Single,       ///< x + f(norm(x)), one norm ("norm") and one f per block: its token mixer,
                  ///< or its MLP where the block has no mixer (LayerKind::Mlp; Nemotron-H)
    /// n = norm(x), then α·n + β·f(n), for the mixer and for the MLP (MiniMax-01: the residual
    /// is the normed input; ModelConfig::residual holds α and β, or says the input itself)
    NormedResidual,
    /// Zamba2: every layer x + mamba(norm(x + t)), where a hybrid layer's t is linear(f) of a
    /// shared block f = mlp(norm'(attention(norm''([x | embeddings])))) with no residual of its
    /// own (ModelConfig::shared), and a Mamba-2 layer's t is 0.
    SharedBlock,
    /// OLMo Hybrid: the attention layers as Post (OLMo 3's block), the linear-attention layers
    /// as Pre (Llama's); ModelConfig::normsOf gives a layer's own.
    PostAttentionPreLinear,
};

/// How an MoE layer routes a token (the router's logits are x·Wᵀ (+ b)).
enum class MoeRouter {
    SoftmaxTopK,   ///< softmax over every expert, the top k, renormalised (Qwen3-MoE, Mixtral)
    TopKSoftmax,   ///< the top k logits, softmax over them (gpt-oss; GraniteMoe's in float32)
    SigmoidGroups, ///< σ + correction bias, top groups then top k; σ renormalised × scale
                   ///< (DeepSeek-V3)
    SigmoidTopK,   ///< the top k logits, weight σ(logit) on the expert's input (Llama 4)
    /// softmax in the model's dtype, top groups then top k (no correction bias); softmax
    /// renormalised × scale (Mistral 4)
    SoftmaxGroups,
    /// sqrt(softplus(logit)) in the model's dtype, the top k by it + the correction bias, its
    /// values renormalised × scale; on MoeSpec::hashLayers the k experts a fixed table gives each
    /// token id instead (DeepSeek-V4)
    SqrtSoftplusTopK,
};

/// How a checkpoint stores the experts.
enum class ExpertLayout {
    PerExpert,        ///< experts.E.{gate,up,down}_proj.weight (Qwen3-MoE, DeepSeek-V3)
    Mixtral,          ///< experts.E.{w1 (gate), w3 (up), w2 (down)}.weight
    FusedInterleaved, ///< experts.gate_up_proj [E, h, 2I] (gate, up interleaved) with biases,
                      ///< down_proj [E, I, h]; a clamped SwiGLU (gpt-oss)
    FusedHalves,      ///< experts.gate_up_proj [E, h, 2I] as [gate | up], down_proj [E, I, h]
                      ///< (Llama 4)
    FusedRows,        ///< experts.gate_up_proj [E, 2I, h] as rows [gate | up], down_proj [E, h, I]:
                      ///< transformers 5's packed experts (Qwen3.5-MoE), each a Linear's weight;
                      ///< without a gate (ModelConfig::gatedMlp false) experts.up_proj [E, I, h]
    ParallelExperts,  ///< the same tensors as input_linear.weight [E, 2I, h] and
                      ///< output_linear.weight [E, h, I] (GraniteMoe's ParallelExperts)
};

/// The mixture of experts of a model's sparse layers.
struct MoeSpec {
    int64_t experts = 0;      ///< 0: no sparse layers
    int64_t topK = 1;         ///< experts per token
    int64_t intermediate = 0; ///< each expert's
    MoeRouter router = MoeRouter::SoftmaxTopK;
    bool normTopK = true;               ///< SoftmaxTopK, SigmoidGroups: the k weights renormalised
    double routedScale = 1.0;           ///< SigmoidGroups: routed_scaling_factor
    int64_t groups = 1, topKGroups = 1; ///< SigmoidGroups: n_group, topk_group
    bool routerBias = false;            ///< gpt-oss
    bool routerFloat32 = false;   ///< the logits in float32, the weights back in the hidden dtype
    bool scoreCorrection = false; ///< DeepSeek's gate.e_score_correction_bias
    /// The correction bias's name (LFM2-MoE: expert_bias, beside the router); kept in float32.
    std::string scoreBiasName = "e_score_correction_bias";
    /// SigmoidGroups, SoftmaxGroups: the renormalisation's w / (Σ w + normEps) (LFM2-MoE: 1e-6).
    double normEps = 1e-20;
    /// The correction bias beside the router, not in it (MiniMax-M2's
    /// block_sparse_moe.e_score_correction_bias).
    bool scoreCorrectionBeside = false;
    /// The shared expert's output × σ(shared_expert_gate(x)) (Qwen3-Next, Qwen3.5).
    bool sharedGate = false;
    ExpertLayout layout = ExpertLayout::PerExpert;
    int64_t sharedIntermediate = 0;  ///< a shared expert every token goes through (0: none)
    std::string module = "mlp";      ///< the layer's module ("block_sparse_moe", "feed_forward")
    std::string routerName = "gate"; ///< "gate" or "router"
    std::string sharedName = "shared_experts"; ///< DeepSeek; Llama 4: "shared_expert"
    std::vector<bool> layers;                  ///< per layer: sparse (else the dense MLP)
    /// The dense MLP runs on the sparse layers too, its output added to the experts'
    /// (GraniteMoeHybrid's shared_mlp).
    bool denseBeside = false;
    /// The experts work in a latent of this width: fc1_latent_proj [latent, h] before them,
    /// fc2_latent_proj [h, latent] after (Nemotron-H's moe_latent_size); 0: none.
    int64_t latent = 0;
    /// The experts' weighted outputs summed in the routing weights' dtype (float32) and rounded
    /// to the model's once (Nemotron-H's experts), not each rounded as it is added.
    bool sumInRouterDtype = false;
    /// Per layer: the experts a token reaches are a fixed table's row for its id
    /// (mlp.gate.tid2eid [vocab, k]; DeepSeek-V4's "hash_moe" layers), not the router's top k;
    /// empty: none.
    std::vector<bool> hashLayers;
    /// The routed experts' gate clamped above and up both ways at this limit before act(gate)·up
    /// (DeepSeek-V4's swiglu_limit; its shared expert is not clamped); 0: none.
    double expertClamp = 0;
    bool hashed(int64_t layer) const {
        return layer >= 0 && static_cast<size_t>(layer) < hashLayers.size() &&
               hashLayers[static_cast<size_t>(layer)];
    }
    bool sparse(int64_t layer) const {
        return experts > 0 && layer >= 0 && static_cast<size_t>(layer) < layers.size() &&
               layers[static_cast<size_t>(layer)];
    }
};

/// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): q from a low-rank projection, keys
/// and values from one shared latent per position; each head's q·k has nope + rope dimensions,
/// its value v_head_dim.
struct MlaSpec {
    int64_t qLoraRank = 0;  ///< 0: a plain q_proj
    int64_t kvLoraRank = 0; ///< 0: not MLA
    int64_t nopeDim = 0;    ///< qk_nope_head_dim
    int64_t ropeDim = 0;    ///< qk_rope_head_dim: the shared rotary key's dimensions
};

/// What a layer's token mixer is: softmax attention, or linear attention with a recurrent state
/// (the hybrid models: three of every four layers in Qwen3-Next, Qwen3.5 and Kimi Linear).
enum class LayerKind {
    Attention,     ///< softmax attention over the cached keys (every method applies here)
    GatedDeltaNet, ///< Gated DeltaNet: one decay per head (Qwen3-Next, Qwen3.5, OLMo Hybrid)
    KimiDelta,     ///< Kimi Delta Attention: one decay per key channel (Kimi Linear)
    Mamba2,        ///< Mamba-2's state space (SSD): one decay per head, no delta (Granite 4.0-H)
    /// No token mixer: a block that holds only its MLP or experts (NormPlacement::Single;
    /// Nemotron-H's "-" and "E" blocks).
    Mlp,
    /// LFM2's gated short convolution: in_proj gives [B | C | x], y = C·conv(B·x) with a
    /// depthwise causal convolution of a few taps, out_proj; its state is the convolution's last
    /// inputs only (LinearSpec: no keys, one value head of the hidden width).
    ShortConv,
    /// Softmax attention and a Mamba-2 layer in one layer: side by side on the same normed input,
    /// their outputs summed (Falcon-H1's every layer), or a shared attention block whose output
    /// joins the Mamba-2 layer's input (Zamba2's hybrid layers, NormPlacement::SharedBlock):
    /// captured as attention, with a state as Mamba-2's.
    AttentionMamba2,
    /// Mamba (Mamba-1)'s selective scan (Jamba): a decay per channel and state dimension, dt
    /// from a low-rank projection, B and C shared by every channel (LinearSpec: no key heads,
    /// one value head of the inner width, key_head_dim the state's).
    Mamba1,
    /// MiniMax-01's lightning attention: linear attention whose state decays by one fixed
    /// exp(−s) per head and token (s: ALiBi's slopes scaled down with depth), q, k and v one
    /// qkv_proj through hidden_act, no delta; an RMSNorm over every head's output, × σ(gate)
    /// (LinearSpec: heads of head_dim keys and values, convKernel 1: no convolution).
    Lightning,
};

/// Whether a layer of this kind keeps a recurrent state (a linear-attention layer).
inline bool isLinearKind(LayerKind kind) {
    return kind != LayerKind::Attention && kind != LayerKind::Mlp;
}

/// Whether a layer of this kind has softmax attention (a KV cache, and a captured layer).
inline bool hasAttentionKind(LayerKind kind) {
    return kind == LayerKind::Attention || kind == LayerKind::AttentionMamba2;
}

/// Whether a layer of this kind scans as Mamba-2 (alone, or beside attention).
inline bool isMamba2Kind(LayerKind kind) {
    return kind == LayerKind::Mamba2 || kind == LayerKind::AttentionMamba2;
}

/// Where Mamba-2's gate SiLU(z) meets its output y and the gated RMSNorm.
enum class Mamba2Gate {
    BeforeNorm, ///< norm(y·SiLU(z))·w (Granite 4.0, Nemotron-H; Falcon-H1's mamba_norm_before_gate
                ///< false)
    AfterNorm, ///< norm(y)·w·SiLU(z) (Falcon-H1's mamba_norm_before_gate true)
    NoNorm,    ///< y·SiLU(z), no norm (Falcon-H1's mamba_rms_norm false)
};

/// The linear-attention layers' shape: the delta rule's heads and its state [Hv, dk, dv].
/// Mamba-2 in the same terms: its B and C are the keys and queries (n_groups key heads of
/// d_state), its x the values (mamba_n_heads of mamba_d_head), the state [heads, d_state, d_head].
/// How a Gated DeltaNet layer's checkpoint holds its input projections.
enum class GdnProjections {
    Interleaved, ///< Qwen3-Next: in_proj_qkvz and in_proj_ba, grouped per key head
    Flat,        ///< Qwen3.5: in_proj_qkv ([q | k | v]), in_proj_z, in_proj_b, in_proj_a
    /// OLMo Hybrid: q_proj, k_proj, v_proj, g_proj (the gate z), b_proj, a_proj; its norm is
    /// o_norm and its output o_proj
    Separate,
};

struct LinearSpec {
    int64_t keyHeads = 0;   ///< Hk (GDN: linear_num_key_heads; KDA: the heads)
    int64_t valueHeads = 0; ///< Hv; value head h reads key head h / (Hv / Hk)
    int64_t keyDim = 0;     ///< dk
    int64_t valueDim = 0;   ///< dv
    int64_t convKernel = 4; ///< the depthwise causal convolution's width
    /// How a Gated DeltaNet layer stores its projections.
    GdnProjections projections = GdnProjections::Interleaved;
    /// GDN: q, k and v through convolutions of their own (q_conv1d, k_conv1d, v_conv1d, as OLMo
    /// Hybrid is published; Kimi Delta Attention always), else one conv1d over [q | k | v].
    bool separateConvs = false;
    /// GDN: β = σ(b)·betaScale (OLMo Hybrid's linear_allow_neg_eigval: 2, so β lies in [0, 2]).
    double betaScale = 1;
    /// Mamba-2: the convolution's, in_proj's and out_proj's biases, the time step's clamp
    /// (time_step_limit), the chunks its scan takes at once (mamba_chunk_size; the lightning
    /// layers' block_size).
    bool convBias = false, projBias = false, outBias = false;
    double dtMin = 0, dtMax = std::numeric_limits<double>::infinity();
    int64_t chunk = 256;
    /// Mamba-2: the gated RMSNorm's groups, each normalised alone (Nemotron-H: n_groups), and
    /// the activation after the convolution (Nemotron-H's mamba_hidden_act; else hidden_act).
    int64_t normGroups = 1;
    std::string convAct = "silu";
    double gateNormEps = 0; ///< the gated RMSNorm's eps where fixed (Zamba2: 1e-5); 0: the model's
    Mamba2Gate gate = Mamba2Gate::BeforeNorm;
    /// Mamba-2: in_proj's output [z | x | B | C | dt] scaled part by part (Falcon-H1's
    /// ssm_multipliers, its µP vector, a buffer of the model's dtype).
    std::array<double, 5> projScale{1, 1, 1, 1, 1};
    /// Mamba-1: the time step's rank (x_proj gives [dt dtRank | B N | C N], dt_proj widens dt),
    /// and Jamba's RMSNorms on dt, B and C before they are used.
    int64_t dtRank = 0;
    bool innerNorms = false;
    /// Elements of one layer's state per sequence: the recurrent state and the convolution's
    /// last kernel − 1 inputs.
    int64_t stateElements() const {
        return valueHeads * keyDim * valueDim +
               (convKernel - 1) * (2 * keyHeads * keyDim + valueHeads * valueDim);
    }
};

/// A model's own learned selection of the keys each query attends to, by a lightning indexer
/// (docs/learned-sparse-and-hybrid.md). DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): per
/// query, every earlier key scored by Σ_h w_h·ReLU(q_h·k·Di^-½) with one Di-dimensional key per
/// position; the attention sees only the top index_topk keys. MiniMax-M3 (`blockSize` > 0): per
/// indexer head h, a key's score q_h·k, a block's score the largest of its keys', and the query
/// heads of group h see the keys of the top index_topk_blocks blocks (the query's own last
/// `localBlocks` blocks always among them).
struct IndexerSpec {
    int64_t heads = 0;       ///< Hi (index_n_heads); 0: no indexer
    int64_t dim = 0;         ///< Di (index_head_dim)
    int64_t topK = 0;        ///< index_topk keys (DSA); index_topk_blocks blocks (MiniMax-M3)
    int64_t blockSize = 0;   ///< MiniMax-M3: keys scored and kept in blocks of this many; 0: DSA
    int64_t localBlocks = 0; ///< MiniMax-M3: the query's own last blocks, always kept
    RopeLayout ropeLayout = RopeLayout::Half; ///< the indexer's own RoPE layout
    /// Per layer: takes the previous indexer layer's selection instead of computing its own
    /// (GLM-5's shared-indexer layers); empty: every layer computes.
    std::vector<bool> reuse;
    /// Per layer: has an indexer (MiniMax-M3's "minimax_m3_sparse" layers); empty: every
    /// attention layer has one.
    std::vector<bool> layers;
    bool active() const { return heads > 0; }
    /// Whether selection is by blocks, one per indexer head (MiniMax-M3), not by keys (DSA).
    bool blocks() const { return blockSize > 0; }
    /// Whether layer `layer` selects its keys by an indexer.
    bool on(int64_t layer) const {
        return active() &&
               (layers.empty() || (layer >= 0 && static_cast<size_t>(layer) < layers.size() &&
                                   layers[static_cast<size_t>(layer)]));
    }
    bool reuses(int64_t layer) const {
        return layer >= 0 && static_cast<size_t>(layer) < reuse.size() &&
               reuse[static_cast<size_t>(layer)];
    }
};

/// How the checkpoint's weights are quantized (config.json's quantization_config). Only
/// transformers' "fp8" is read: float8 weight matrices, each block of them with a float scale
/// (`weight_scale_inv`), dequantized when the model opens (the activations are not quantized:
/// transformers' `dequantize` path, not its fp8 matmul).
struct WeightQuantization {
    std::string method; ///< "" (none), "fp8" or "mxfp4" (gpt-oss's experts)
    /// fp8: a block's rows and columns (weight_block_size; 0: one scale per matrix).
    int64_t blockRows = 0, blockCols = 0;
    /// "fp8, 128×128 blocks", "fp8, a scale per matrix", "mxfp4, …", or "" when not quantized.
    std::string describe() const;
};

/// DeepSeek-V4's attention (docs/learned-sparse-and-hybrid.md §17): one key per position that is
/// also its value (kv_proj, its RMSNorm), q from a low-rank latent with each head RMS-normalised,
/// RoPE interleaved on each head's last rotaryDim dimensions and undone on the output, a sink
/// per head, a sliding window on every layer, and a grouped output projection. Beside the window
/// a compressed layer attends to one entry per `rate` positions, each a softmax-gated pool of
/// their projections: every entry (heavily compressed attention, HCA), or the top `indexTopK` of
/// them by a lightning indexer over entries of its own (compressed sparse attention, CSA, whose
/// pools also take the previous window's).
struct CompressedAttentionSpec {
    int64_t qLoraRank = 0;          ///< q_lora_rank; 0: not DeepSeek-V4
    int64_t outGroups = 1;          ///< o_groups: the heads' outputs projected in groups
    int64_t outRank = 0;            ///< o_lora_rank: each group's width after o_a_proj
    std::vector<int64_t> layerRate; ///< per layer: positions per entry; 0: the window alone
    std::vector<bool> layerIndexed; ///< per layer: CSA (two overlapping series, the indexer)
    int64_t indexHeads = 0, indexDim = 0, indexTopK = 0; ///< the CSA layers' indexer
    /// The indexer's weights_proj under `scorer.` (transformers since 5.16) or beside q_b_proj
    /// (the first releases); Model::open reads which from the checkpoint.
    bool scorerModule = true;
    bool active() const { return qLoraRank > 0; }
    int64_t rateOf(int64_t layer) const {
        return layer >= 0 && static_cast<size_t>(layer) < layerRate.size()
                   ? layerRate[static_cast<size_t>(layer)]
                   : 0;
    }
    bool indexed(int64_t layer) const {
        return layer >= 0 && static_cast<size_t>(layer) < layerIndexed.size() &&
               layerIndexed[static_cast<size_t>(layer)];
    }
};

/// Manifold-constrained hyper-connections (DeepSeek-V4's mHC): the residual is `streams` copies
/// of the hidden state; before each attention and MLP a mapping of the normalised streams
/// weighs them into the sublayer's input (pre), places its output in each stream (post) and
/// mixes the streams by a doubly stochastic matrix (Sinkhorn-Knopp, `sinkhornIters` steps).
struct HyperConnectionSpec {
    int64_t streams = 0; ///< hc_mult; 0: a plain residual
    int64_t sinkhornIters = 20;
    double eps = 1e-6; ///< hc_eps
};

/// How queries and keys are normalised before RoPE.
enum class QkNorm {
    None,
    PerHead, ///< RMSNorm over head_dim of each head (Qwen 3, Gemma 3)
    Whole,   ///< RMSNorm over the whole projection (OLMo 2)
};

/// What an attention layer caches per position for every head: MLA's latent (kv_lora_rank +
/// the shared rotary key) where kvLoraRank > 0, else every KV head's key and value.
inline int64_t cacheElementsPerPosition(int64_t kvLoraRank, int64_t ropeDim, int64_t kvHeads,
                                        int64_t headDim, int64_t valueDim) {
    return kvLoraRank > 0 ? kvLoraRank + ropeDim : kvHeads * (headDim + valueDim);
}

/// MiniMax-01's residual weights (NormPlacement::NormedResidual): after the mixer
/// α·n + β·f(n), after the MLP the same with its own pair; the mixer's pair is the softmax
/// layers' or the lightning layers' (DeepNorm's α = (2·layers)^¼ in MiniMax-Text-01).
struct ResidualFactors {
    double attnAlpha = 1, attnBeta = 1, linearAlpha = 1, linearBeta = 1, mlpAlpha = 1, mlpBeta = 1;
    /// α weighs the normed input (MiniMax's postnorm; transformers' only form); false: the
    /// input itself, α·x + β·f(norm(x)) (MiniMax's own code with postnorm false).
    bool fromNormed = true;
};

/// Falcon-H1's µP multipliers on the parts of a layer (1: none): the attention's and the
/// Mamba-2 layer's input and output, the keys before RoPE, the MLP's gate before its activation
/// and its output.
struct MupMultipliers {
    double attnIn = 1, attnOut = 1, mambaIn = 1, mambaOut = 1, key = 1, gate = 1, down = 1;
};

/// Zamba2's shared transformer blocks (NormPlacement::SharedBlock): `blocks` blocks of attention
/// and MLP, hybrid layer j (the j-th AttentionMamba2 layer) running block j mod blocks on
/// [x | embeddings], twice the hidden width, with low-rank adapters of its own: on the MLP's
/// gate_up_proj always, on q, k and v where `attentionAdapters` says.
struct SharedBlockSpec {
    int64_t blocks = 0; ///< 0: none
    int64_t adapterRank = 0;
    bool attentionAdapters = false;
};

/// Everything the runtime needs from config.json: the layer recipe a family unit reads
/// (model/families/, model_family.h) and the transformer builds.
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
    int64_t headDim = 0;  ///< q·k dimensions per head
    int64_t vHeadDim = 0; ///< values' dimensions per head (0: headDim; MLA's v_head_dim)
    int64_t maxPositions = 0;
    double normEps = 1e-6;
    int64_t rotaryDim = 0; ///< dims of each head that get RoPE (GPT-NeoX, Phi-3: a fraction)
    RopeSpec rope;         ///< the (global) layers' RoPE
    RopeSpec localRope;    ///< sliding layers' RoPE where it differs (Gemma 3, OLMo 3)
    std::vector<bool> layerLocalRope; ///< per layer: uses localRope (empty: none does)
    RopeLayout ropeLayout = RopeLayout::Half;
    /// Per layer: no rotary embedding at all (NoPE: SmolLM 3, Cohere 2's global layers, Llama
    /// 4); empty: every layer has RoPE.
    std::vector<bool> layerNoRope;
    /// Per layer: chunked attention of that many positions (Llama 4), 0 = none; empty: none.
    std::vector<int64_t> layerChunk;
    bool sinks = false; ///< a learnt sink logit per query head (self_attn.sinks, gpt-oss)
    /// Llama 4: q and k divided by their root mean square after RoPE (no weight), RoPE layers.
    bool qkL2Norm = false;
    /// Attention-temperature tuning by position: q ×= 1 + scale·log1p(⌊(pos + shift) / floor⌋),
    /// pos from 0; 0: none. Llama 4: on its NoPE layers, shift 1. Mistral 4 (llama_4_scaling_beta
    /// over original_max_position_embeddings): on every layer after RoPE, shift 0.
    double attnTemperatureScale = 0;
    double attnTemperatureFloor = 8192;
    double attnTemperatureShift = 1;
    bool attnTemperatureEveryLayer = false;
    bool tieEmbeddings = false;
    bool qkvBias = false;  ///< bias on q, k, v projections
    bool outBias = false;  ///< bias on the attention output projection
    bool mlpBias = false;  ///< bias on the MLP projections
    std::string hiddenAct; ///< silu, gelu, gelu_new, gelu_pytorch_tanh, relu2 (relu(x)²)
    /// The MLPs (dense, experts, shared expert) are act(gate)·up (Llama layout); false: act(up)
    /// alone, up_proj then down_proj (Nemotron-H).
    bool gatedMlp = true;
    bool parallelResidual = false;
    NormPlacement norms = NormPlacement::Pre;
    bool normPlusOne = false;       ///< RMSNorm scales by (1 + w) (the Gemma family)
    bool normWeightInFloat = false; ///< (w · x̂) in float32 before the cast (gpt-oss's RMSNorm)
    /// SwiGLU-OAI's clamp L in every gated MLP (gpt-oss's experts; MiniMax-M3's experts, shared
    /// expert and dense MLPs): (clamp(up, ±L) + 1)·g·σ(α·g) with g = min(gate, L); 0: act(gate)·up.
    double swigluLimit = 0;
    double swigluAlpha = 1.702; ///< SwiGLU-OAI's α
    bool layerNorm = false;     ///< mean-centred LayerNorm without bias (Cohere), Llama layout
    QkNorm qkNorm = QkNorm::None;
    bool fusedQkv = false;          ///< one qkv_proj, rows q, k, v (Phi-3)
    bool fusedGateUp = false;       ///< one gate_up_proj, rows gate, up (Phi-3)
    double embedScale = 0;          ///< embeddings multiplied by it (Gemma: sqrt(hidden)); 0: none
    bool embedScaleInDtype = false; ///< the scale rounded to the hidden dtype first (Gemma)
    MupMultipliers mup;             ///< Falcon-H1
    double residualScale = 1;       ///< x + scale·f(…) (Granite's residual_multiplier)
    ResidualFactors residual;       ///< NormPlacement::NormedResidual's α and β (MiniMax-01)
    SharedBlockSpec shared;         ///< NormPlacement::SharedBlock's blocks (Zamba2)
    double logitScale = 1; ///< logits × it (Cohere's logit_scale, Granite's 1/logits_scaling)
    std::string mlpModule = "mlp"; ///< the dense MLP's module ("feed_forward": Llama 4)
    /// The fused dense MLP's two projections (GraniteMoeHybrid: input_linear, output_linear).
    std::string gateUpName = "gate_up_proj", downName = "down_proj";
    /// The unfused dense MLP's gate and up projections (LFM2: w1, w3; its down is w2).
    std::string gateName = "gate_proj", upName = "up_proj";
    /// The attention's output projection and its per-head q and k norms (LFM2: out_proj,
    /// q_layernorm, k_layernorm).
    std::string attnOutName = "o_proj", qNormName = "q_norm", kNormName = "k_norm";
    MoeSpec moe; ///< sparse layers (intermediateSize is the dense MLP's width)
    MlaSpec mla;
    /// Per layer: its token mixer (empty: every layer is softmax attention).
    std::vector<LayerKind> layerKinds;
    LinearSpec linear;   ///< the linear-attention layers' shape (hybrid models)
    IndexerSpec indexer; ///< the model's own key selection (DeepSeek-V3.2, GLM-5, MiniMax-M3)
    CompressedAttentionSpec compressed; ///< DeepSeek-V4's attention (compressed.active())
    HyperConnectionSpec hyper;          ///< DeepSeek-V4's residual streams
    /// Gated attention (Qwen3-Next, Qwen3.5): q_proj gives per head [q | gate] and the output is
    /// multiplied by σ(gate) before o_proj.
    bool gatedAttention = false;
    double attnScale = 0;    ///< factor q·k is multiplied by
    double attnSoftcap = 0;  ///< attention-logit soft-cap c: logits c·tanh(z/c) (0: none)
    double finalSoftcap = 0; ///< final-logit soft-cap (0: none)
    /// Sliding window per layer (0: global); empty when no layer has one.
    std::vector<int64_t> layerWindow;
    std::string weightPrefix; ///< before every weight name ("language_model." in Gemma 3 VLMs)
    /// The decoder's module (Llama layout): "model", or "model.language_model" where a
    /// vision-language folder keeps it there (Qwen3.5).
    std::string bodyModule = "model";
    /// Nemotron-H's names: the embedding and the final norm of the body, and the one module
    /// every block's attention, Mamba-2 layer, MLP or experts sit under ("mixer"; empty: each
    /// its own, self_attn, mamba, linear_attn, mlp).
    std::string embedName = "embed_tokens", finalNormName = "norm", mixerModule;
    /// The MLP's norm where the placement's name is not the model's (Falcon-H1:
    /// "pre_ff_layernorm"); empty: the placement's.
    std::string mlpNormName;
    /// The mixer's norm where the placement's name is not the model's (LFM2: "operator_norm");
    /// empty: the placement's.
    std::string mixerNormName;
    /// The module of layer `layer`'s attention.
    std::string attentionModule() const { return mixerModule.empty() ? "self_attn" : mixerModule; }
    /// The checkpoint names' prefix of layer `layer` ("model.layers.3.").
    std::string layerPrefix(int64_t layer) const {
        return weightPrefix + bodyModule + ".layers." + std::to_string(layer) + ".";
    }
    std::vector<int64_t> eosIds;
    int64_t bosId = -1;
    std::string torchDtype; ///< "float32", "bfloat16", … as declared
    WeightQuantization quantization;

    /// Parameters implied by the shapes (embedding, layers, head), for display and memory.
    int64_t parameterCount() const;
    /// One shared block's parameters (NormPlacement::SharedBlock, Zamba2), which a decode step
    /// reads at every hybrid layer that runs it; 0 without shared blocks.
    int64_t sharedBlockParameterCount() const;
    /// Of those, the sparse layers' routed experts (mapped from disk: only the experts a prompt
    /// routes to are read).
    int64_t expertParameterCount() const;
    /// Bytes this runtime's KV cache allocates per position over every attention layer with
    /// `elementSize`-byte elements: K and V of each KV head as the forward pass makes them (MLA's
    /// per-head keys and values, not its latent: decode_traffic.h counts the latent) and SparQ's
    /// dimension-major second copy of K. For memory checks, not traffic.
    int64_t cacheBytesPerToken(int64_t elementSize) const;
    /// The RoPE of layer `layer`.
    const RopeSpec& ropeOf(int64_t layer) const;
    /// Whether layer `layer` rotates q and k (false: a NoPE layer).
    bool usesRope(int64_t layer) const;
    /// The attention layers that do not rotate q and k in a model with RoPE, ascending.
    std::vector<int64_t> nopeLayers() const;
    int64_t chunkOf(int64_t layer) const; ///< its chunked-attention size (0: none)
    int64_t valueDim() const { return vHeadDim > 0 ? vHeadDim : headDim; }
    /// Layer `layer`'s token mixer.
    LayerKind kindOf(int64_t layer) const {
        return layer >= 0 && static_cast<size_t>(layer) < layerKinds.size()
                   ? layerKinds[static_cast<size_t>(layer)]
                   : LayerKind::Attention;
    }
    /// Whether layer `layer` has softmax attention (a captured layer).
    bool isAttention(int64_t layer) const { return hasAttentionKind(kindOf(layer)); }
    /// Whether layer `layer` keeps a recurrent state (a linear-attention layer).
    bool isLinear(int64_t layer) const { return isLinearKind(kindOf(layer)); }
    /// Layer `layer`'s norm placement (PostAttentionPreLinear resolved to Post or Pre).
    NormPlacement normsOf(int64_t layer) const {
        if (norms != NormPlacement::PostAttentionPreLinear)
            return norms;
        return isLinear(layer) ? NormPlacement::Pre : NormPlacement::Post;
    }
    /// Whether layer `layer` has an MLP or experts of its own (every layer but the mixer blocks
    /// of NormPlacement::Single, and none of SharedBlock's, whose MLPs are the shared blocks').
    bool hasMlp(int64_t layer) const {
        return norms == NormPlacement::SharedBlock ? false
               : norms != NormPlacement::Single    ? true
                                                   : kindOf(layer) == LayerKind::Mlp;
    }
    /// The width attention's q, k and v read: the hidden size, or twice it where a shared block
    /// reads [x | embeddings] (Zamba2).
    int64_t attentionInput() const { return shared.blocks > 0 ? 2 * hiddenSize : hiddenSize; }
    /// The linear-attention layers' count.
    int64_t linearLayerCount() const;
    /// The softmax-attention layers, ascending (all of them but in a hybrid model): what a
    /// capture holds, one captured layer each.
    std::vector<int64_t> attentionLayers() const;
    int64_t cacheElementsPerPosition() const {
        return model::cacheElementsPerPosition(mla.kvLoraRank, mla.ropeDim, nKvHeads, headDim,
                                               valueDim());
    }
};

/// The name of a layer kind as config.json's layer_types and the capture files write it
/// ("full_attention", "linear_attention"; the kind's own name for views: "Gated DeltaNet").
const char* layerKindName(LayerKind kind);
const char* layerKindLabel(LayerKind kind);
/// The kind `label` names (layerKindLabel's inverse) into `kind`; false where none does.
bool layerKindOfLabel(const std::string& label, LayerKind& kind);
/// Every kind, in enum order (the labels a capture's layer_kinds may hold).
inline constexpr LayerKind kLayerKinds[] = {
    LayerKind::Attention, LayerKind::GatedDeltaNet, LayerKind::KimiDelta,
    LayerKind::Mamba2,    LayerKind::Mlp,           LayerKind::AttentionMamba2,
    LayerKind::ShortConv, LayerKind::Mamba1,        LayerKind::Lightning};

/// The MLP activations a config may name (hidden_act), for messages; isActivation checks one.
inline constexpr const char* kActivations = "silu, gelu, gelu_new, gelu_pytorch_tanh, relu2";
bool isActivation(const std::string& name);

/// What a model does to attention beyond softmax(q·k/√d_h), as (label, value) lines for
/// people: the scale, the soft-caps, each layer's window and local RoPE base. Empty for a
/// model without any.
std::vector<std::pair<std::string, std::string>> attentionModifierSummary(const ModelConfig& c);

/// The model's attention features for `info` (docs/sinks-chunks-nope-mla.md), as JSON text:
/// RoPE (type, base, layout, rotary dims), per-layer windows, chunks and NoPE layers, sinks,
/// MLA's dimensions and the experts; a feature the model lacks is left out.
std::string attentionFeaturesJson(const ModelConfig& c);

/// The supported names, for error messages.
std::string supportedArchitectures();

/// Reads `path` (a config.json). Throws ConfigError with one line naming the file and key.
ModelConfig readModelConfig(const std::string& path);
/// `text` with Python's non-standard literals Infinity, -Infinity and NaN (json.dumps writes them
/// for a float that is not finite, as in Mamba-2's time_step_limit) made strings outside
/// strings, so that it parses as JSON: a key that takes one reads the string, any other says it
/// must be a number. Every reader of config.json parses through it.
std::string pythonLiteralsAsStrings(const std::string& text);
/// Parses config text; `path` is only used in messages.
ModelConfig parseModelConfig(const std::string& text, const std::string& path);

} // namespace sparqlab::model
