#pragma once
/// \file transformer_layer.h
/// The tensors of one transformer block, borrowed from the modules CausalLMImpl registers under
/// the Hugging Face names, and the mixture of experts' forward pass. Internal to the capture
/// layer (transformer.cpp builds and loads; transformer_forward.cpp, transformer_attention.cpp
/// and moe.cpp run them).

#include "model/expert_keeper.h"
#include "model/model_config.h"
#include "model/transformer.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::model {

/// One routed expert's tensors (the per-expert layouts), or slices of the fused ones.
struct Expert {
    at::Tensor gate, up, down; ///< [I, h], [I, h], [h, I] (at::linear's layout); gate undefined:
                               ///< act(up) alone (Nemotron-H)
    at::Tensor upB, downB;     ///< Nemotron-H's shared expert with mlp_bias
};

/// A sparse layer: the router, the experts and the shared expert.
struct MoeWeights {
    at::Tensor routerW, routerB, scoreBias; ///< [E, h], [E] (gpt-oss), [E] (DeepSeek)
    at::Tensor tid2eid;          ///< a hash layer's experts per token id [vocab, k] (float32 ids)
    std::vector<Expert> experts; ///< the per-expert layouts
    /// The fused layouts: gate_up [E, h, 2I] (+ bias [E, 2I]), down [E, I, h] (+ bias [E, h]);
    /// FusedRows: gate_up [E, 2I, h] (ungated: up [E, I, h]), down [E, h, I].
    at::Tensor gateUp, gateUpB, down, downB;
    /// Nemotron-H's latent projections around the experts (fc1 [latent, h], fc2 [h, latent]).
    at::Tensor latentInW, latentInB, latentOutW, latentOutB;
    Expert shared;          ///< undefined tensors: none (no gate: an ungated MLP)
    at::Tensor sharedGateW; ///< [1, h]: the shared expert × σ(x·wᵀ) (Qwen3-Next)
    /// Per expert: its tensors were found finite (a mapped checkpoint's experts are checked when
    /// a token first reaches them, so that untouched experts are never read).
    std::vector<char> checked;
    std::vector<std::string> names; ///< per expert: its first tensor's name, for messages
    std::string file;               ///< where the experts are, for messages
    /// MXFP4 experts (gpt-oss as published): gateUp and down stay empty; an expert is decoded
    /// from the checkpoint when a token reaches it and the decoder holds none, then kept or not
    /// as the decoder's keeper says (expert_keeper.h).
    std::shared_ptr<struct ExpertDecoder> decoder;
    int64_t decoderSlot = 0; ///< its index in decoder->layers (the keeper's ids slot·E + e)
    std::string gateUpName, downName;                   ///< the checkpoint's names, for the decoder
    std::vector<at::Tensor> decodedGateUp, decodedDown; ///< per expert; undefined: not decoded
};

/// The model's MXFP4 experts, decoded as tokens reach them (moe.cpp), those the keeper holds
/// kept within its budget of bytes (the others decoded again when reached), so a model whose
/// decoded experts exceed the memory (gpt-oss-20b: 38 GB) runs with its packed blocks mapped.
struct ExpertDecoder {
    std::shared_ptr<const Checkpoint> checkpoint;
    at::ScalarType dtype = at::kFloat;
    at::Device device = at::kCPU;
    ExpertKeeper keeper{0};
    /// Every sparse layer's, at its decoderSlot: expert e of layers[i] is the keeper's i·E + e.
    std::vector<MoeWeights*> layers;
};

struct CausalLMImpl::Layer {
    at::Tensor norm1W, norm1B, norm2W, norm2B; ///< before attention and before the MLP
    at::Tensor postAttnW, postFfnW; ///< after attention / the MLP (Gemma 2/3, OLMo 2/3, GLM-4)
    at::Tensor qW, qB, kW, kB, vW, vB, qkvW, qkvB, oW, oB;
    at::Tensor qNormW, kNormW; ///< Qwen 3, Gemma 3 (per head), OLMo 2/3 (whole projection)
    at::Tensor sinks;          ///< [Hq] gpt-oss's sink logits
    /// MLA: q_a_proj (+ bias), q_a_layernorm, q_b_proj (qW without q_lora_rank),
    /// kv_a_proj_with_mqa (+ bias), kv_a_layernorm, kv_b_proj.
    at::Tensor qAW, qAB, qANormW, qBW, kvAW, kvAB, kvANormW, kvBW;
    at::Tensor gateW, gateB, upW, upB, downW, downB, gateUpW;
    MoeWeights moe; ///< a sparse layer's (moe.routerW defined)
    /// DSA's indexer: wq_b [Hi·Di, q_lora], wk [Di, h], k_norm (LayerNorm) weight and bias [Di],
    /// weights_proj [Hi, h]. MiniMax-M3's: index_q_proj [Hi·Di, h], index_k_proj [Di, h] and
    /// their (1 + w) RMSNorms index_q_norm, index_k_norm [Di].
    at::Tensor idxQW, idxKW, idxKNormW, idxKNormB, idxWeightsW, idxQNormW;
    /// DeepSeek-V4 (ModelConfig::compressed): q_a_proj, q_a_norm and q_b_proj are qAW, qANormW and
    /// qBW, kv_proj and kv_norm kW and kNormW, o_b_proj oW; o_a_proj is oAW [G·rank, H·D / G].
    /// A compressed layer's compressor: kv_proj and gate_proj [r·D, h], position_bias
    /// [rate, r·D], kv_norm [D] (r = 2 on a CSA layer: two series); a CSA layer's indexer: the
    /// same at index_head_dim (idxCmp…), q_b_proj idxQW, weights_proj idxWeightsW.
    at::Tensor oAW, cmpKvW, cmpGateW, cmpBias, cmpNormW;
    at::Tensor idxCmpKvW, idxCmpGateW, idxCmpBias, idxCmpNormW;
    /// mHC's mappings before the attention and before the MLP: fn [(2 + n)·n, n·h], base
    /// [(2 + n)·n], scale [3] (float32).
    at::Tensor attnHcFn, attnHcBase, attnHcScale, ffnHcFn, ffnHcBase, ffnHcScale;
    /// A linear-attention layer (linear_attn / Kimi's self_attn): LinearWeights.
    std::shared_ptr<struct LinearWeights> linear;
    /// Zamba2's hybrid layer (NormPlacement::SharedBlock): the shared block's tensors are its
    /// block's (the same tensors in every hybrid layer that runs it: norm1W the Mamba-2 layer's
    /// norm, blockNormW [2h] the block's input norm, norm2W its pre_ff_layernorm, qW … oW and
    /// gateUpW, downW), beside this layer's own adapters, each {down [r, in], up [out, r]}
    /// adding up(down(x)) to its projection, and `linear` [h, h] into the Mamba-2 layer.
    at::Tensor blockNormW, linkW;
    std::array<at::Tensor, 2> qAdapter, kAdapter, vAdapter, gateUpAdapter;
};

/// A linear-attention layer's tensors (Gated DeltaNet, Kimi Delta Attention).
struct LinearWeights {
    /// GDN: in_proj_qkvz [2·Hk·dk + 2·Hv·dv, h] and in_proj_ba [2·Hv, h], grouped per key head
    /// (Qwen3-Next); or in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Qwen3.5); or OLMo
    /// Hybrid's g_proj (zW), b_proj, a_proj beside qW, kW and vW.
    at::Tensor qkvzW, baW, qkvW, zW, bW, aW;
    /// KDA and OLMo Hybrid: q_proj, k_proj, v_proj; KDA's f_a_proj, f_b_proj (the decay),
    /// g_a_proj, g_b_proj (the output gate), b_proj (β).
    at::Tensor qW, kW, vW, fAW, fBW, gAW, gBW;
    /// The causal convolutions: one over [q | k | v] [C, 1, K], or one each (KDA; GDN where
    /// LinearSpec::separateConvs).
    at::Tensor convW, qConvW, kConvW, vConvW;
    at::Tensor aLog, dtBias; ///< the decay's A_log [Hv] (KDA [1, 1, H, 1]) and dt_bias
    at::Tensor normW;        ///< the gated RMSNorm's weight [dv] (Mamba-2: [Hv·dv])
    at::Tensor outW, outB;   ///< out_proj / o_proj [h, Hv·dv] (Mamba-2: + bias)
    /// Mamba-2: in_proj [Hv·dv + conv + Hv, h] (+ bias) giving [z | x B C | dt], the
    /// convolution's bias, D [Hv] (the skip x·D).
    at::Tensor inW, inB, convB, d;
    /// Mamba-1: x_proj [dtRank + 2·N, I], dt_proj [I, dtRank] and its bias, A_log [I, N] (with
    /// aLog), Jamba's dt, B and C norms' weights.
    at::Tensor xProjW, dtProjW, dtProjB, dtNormW, bNormW, cNormW;
    /// The layer's index (the lightning decay's depth scaling); the lightning layer's weights are
    /// qkvW (qkv_proj), zW (output_gate), normW and outW.
    int64_t layer = -1;
};

/// A linear-attention layer's state between calls: the recurrent state and the convolution's
/// last kernel − 1 inputs.
struct LinearState {
    at::Tensor recurrent; ///< [B, Hv, dk, dv] float32
    at::Tensor conv;      ///< [B, C, K − 1] (KDA: q, k and v side by side; LFM2: B·x)
};

/// A DeepSeek-V4 compressed layer's sources between calls: every position's projections
/// [B, S, r·D] (the compressor's kv and gate; a CSA layer's indexer's at its own width) and the
/// entries pooled from the windows complete so far [B, C, D] (normalised and rotated), so that a
/// call pools only the windows it completes, and a rewind only drops what lies past it.
struct CompressorState {
    int64_t rate = 0;
    at::Tensor kv, gate, entries, idxKv, idxGate, idxEntries;
};

/// The token mixer of linear-attention layer `c.kindOf(layer)` for x [B, T, h] after the
/// input norm; with `state`, continues from it and leaves the state after x's last token
/// there. With `trace`, records the intermediates the references hold (lin_* tensors).
at::Tensor linearAttentionForward(const ModelConfig& c, const LinearWeights& w, LayerKind kind,
                                  const at::Tensor& x, LinearState* state,
                                  std::map<std::string, at::Tensor>* trace = nullptr);

/// The gated delta rule over T tokens, in float32 (docs/learned-sparse-and-hybrid.md): q, k
/// [B, H, T, dk] (normalised, q scaled), v [B, H, T, dv], log-decay g [B, H, T] (one per head) or
/// [B, H, T, dk] (per key channel), β [B, H, T]; `state` [B, H, dk, dv] is read and updated.
/// Returns o [B, H, T, dv].
at::Tensor gatedDeltaRule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& g, const at::Tensor& beta, at::Tensor& state);

/// DSA's indexer on one layer: x [B, T, h] after the input norm, qResid its query latent
/// [B, T, q_lora]; `keys` holds the earlier positions' indexer keys [B, S0, Di] (undefined: none)
/// and is extended. Returns the selection [B, T, S0 + T] bool (causal and in the top `topK` by
/// score: the model's index_topk, or another k); `scores`, when given, receives the scores
/// [B, T, S0 + T] before masking.
at::Tensor indexerSelect(const ModelConfig& c, const CausalLMImpl::Layer& L, const at::Tensor& x,
                         const at::Tensor& qResid, const at::Tensor& invFreq, int64_t firstPos,
                         at::Tensor& keys, int64_t topK, at::Tensor* scores = nullptr);

/// MiniMax-M3's indexer on one layer: x [B, T, h] after the input norm, `angles` the attention's
/// RoPE of these positions; `keys` holds the earlier positions' indexer keys [B, S0, Di] and is
/// extended. Per indexer head g and query s (position firstPos + s), a key's score is q_g·k in
/// float32, a block's (c.indexer.blockSize keys from position 0) the largest of its causal
/// keys'; the query's own last c.indexer.localBlocks blocks are always kept, and the top
/// `topBlocks` blocks are (the model's index_topk_blocks, or another count). Returns the
/// selection [B, Hi, T, S0 + T] bool (kept and causal; query head h reads group h / (H / Hi)),
/// or undefined where every block is kept (S0 + T ≤ topBlocks · blockSize) and no scores are asked;
/// `blockScores`, when given, receives the blocks' scores [B, Hi, T, ⌈S/blockSize⌉] (−inf: no
/// causal key) before the local blocks are forced.
at::Tensor blockIndexerSelect(const ModelConfig& c, const CausalLMImpl::Layer& L,
                              const at::Tensor& x, const RopeAngles* angles, int64_t firstPos,
                              at::Tensor& keys, int64_t topBlocks,
                              at::Tensor* blockScores = nullptr);

/// The routing of N tokens: per token its k experts and the weight each one's output (Llama 4:
/// its input) is multiplied by.
struct MoeRouting {
    at::Tensor experts; ///< [N, k] int64
    at::Tensor weights; ///< [N, k], the hidden dtype
};

/// c.moe's routing rule on the router's input x [N, h].
/// `ids` [N]: the tokens' ids, which a hash layer (w.tid2eid) routes by.
MoeRouting moeRoute(const ModelConfig& c, const MoeWeights& w, const at::Tensor& x,
                    const at::Tensor& ids = {});

/// The sparse layer's output for x [B, T, h] (c.moe's routing, experts and shared expert; `ids`
/// [B, T] the tokens', for a hash layer). Throws CheckpointError naming the tensor when an
/// expert a token reaches holds NaN or ±inf.
at::Tensor moeForward(const ModelConfig& c, MoeWeights& w, const at::Tensor& x,
                      const at::Tensor& ids = {});

/// RMSNorm over the last axis in float32 (HF LlamaRMSNorm: cast, then w·); with `weightInFloat`
/// the weight multiplies before the cast (gpt-oss); the Gemma family scales by (1 + w).
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps, bool plusOne,
                   bool weightInFloat);

/// The products at::linear(x, wᵢ, bᵢ) of one x; with siluMul (two of equal width) the one
/// output silu(x·w₀ᵀ + b₀)·(x·w₁ᵀ + b₁), HF's act(gate_proj(x)) * up_proj(x). On a GPU at one to
/// four rows of x, one launch of the decode step's gemv kernel (step.h) for all of them where it
/// takes the shapes (SPARQLAB_CUDA_GEMV=0: libtorch's operations always, to compare).
std::vector<at::Tensor> projectAll(const at::Tensor& x,
                                   const std::vector<std::pair<at::Tensor, at::Tensor>>& wb,
                                   bool siluMul = false);
/// at::linear(x, w, b), through projectAll.
at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

/// t × s as PyTorch 2 multiplies a tensor by a Python float: for bf16 and fp16 in float32 with
/// the scalar unrounded, then rounded once (libtorch 1.13's kernels would round s to t's dtype
/// first); t itself where s is 1.
at::Tensor timesFloat(const at::Tensor& t, double s);

/// The activation `act` (one of kActivations) of t.
at::Tensor activation(const std::string& act, const at::Tensor& t);
/// The activation of c.hiddenAct.
at::Tensor activate(const ModelConfig& c, const at::Tensor& t);
/// An expert on x: down(act(gate(x))·up(x)) (gatedUnit), or down(act(up(x))) where it has no
/// gate (Nemotron-H), with its biases where defined.
at::Tensor mlpOf(const ModelConfig& c, const at::Tensor& x, const Expert& e);

/// A gated MLP's unit: act(gate)·up, or SwiGLU-OAI where c.swigluLimit is set (model_config.h).
at::Tensor gatedUnit(const ModelConfig& c, const at::Tensor& gate, const at::Tensor& up);

} // namespace sparqlab::model
