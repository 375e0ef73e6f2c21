#pragma once
/// \file transformer.h
/// The decoder-only transformers of CONTRACTS.md §1 as torch::nn::Modules whose parameter
/// names are the Hugging Face state-dict names, so a checkpoint loads by name and the demo
/// trainer can reuse them. Attention goes through attention::attendCausal, so any method
/// of the attention library can run inside the model; a hook sees q (after RoPE), K and V.
///
/// Threading: a model may run on one thread at a time (it is stateless between calls apart
/// from the KVCache the caller owns).

#include "attention/attention.h"
#include "attention/decode/engine.h"
#include "model/decode_graphs.h"
#include "model/model_config.h"
#include "model/rope.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sparqlab::model {

/// The scores a learned selection's eager work (MiniMax-M3's block indexer, DSA's and M3's sparse
/// attention) holds at once: it takes a long prompt's query rows a few at a time to stay under
/// this.
inline constexpr int64_t kMaskedAttentionScores = int64_t{1} << 26;

class Checkpoint;
struct LinearState;
struct CompressorState;

/// Keys and values (after RoPE) of every layer, for incremental decoding.
///
/// With `capacity` set before the first forward call, keys and values live in preallocated
/// attention::DecodeCaches (no copy of the whole cache per step) and every one-token step of
/// dense or SparQ attention runs on the fast decode path (attention/decode/engine.h).
struct KVCache {
    std::vector<at::Tensor> k; ///< per layer [B, Hkv, S, D] (not in a DecodeCache)
    std::vector<at::Tensor> v; ///< per layer [B, Hkv, S, Dv] (not in a DecodeCache)
    /// With capacity, the buffers k and v view where they are not in a DecodeCache (MLA's keys
    /// and values of two widths): [B, Hkv, capacity, D] and [.., Dv].
    std::vector<at::Tensor> kStore, vStore;
    std::vector<attention::CausalState> state; ///< per layer: stateful methods' state
    int64_t capacity = 0;                      ///< positions to reserve; 0: grow by concatenation
    bool dimensionMajor =
        false; ///< keep SparQ's second copy of K even if the first call is not SparQ
    std::vector<std::shared_ptr<attention::DecodeCache>> fast; ///< per layer, with capacity
    std::shared_ptr<attention::DecodeAttention> engine;        ///< the fast path's workspaces
    /// Set before the first call: dense calls keep what the stateful methods (H2O, SnapKV) need
    /// to take over after them, with observeConfig's parameters (attention::CausalState), for a
    /// dense prefill.
    bool observe = false;
    attention::AttentionConfig observeConfig;
    /// Per layer: DSA's indexer keys [B, S, Di] (after its RoPE).
    std::vector<at::Tensor> indexerKeys;
    /// Per layer: a linear-attention layer's recurrent and convolution state.
    std::vector<std::shared_ptr<LinearState>> linear;
    /// Per layer: a DeepSeek-V4 compressed layer's projections and pooled entries.
    std::vector<std::shared_ptr<CompressorState>> compressors;
    /// Set before decoding on a GPU: one-token steps run as CUDA graphs (decode_graphs.h) where
    /// the model allows it (CausalLMImpl::graphable()) and the cache copies what it keeps (a
    /// capacity, no `observe`); the first such step is recorded, the later ones replay it, each
    /// with its own attention method. `graphs` says what was done.
    bool cudaGraphs = false;
    std::shared_ptr<DecodeGraphs> graphs;

    /// The positions cached (an attention layer's keys).
    int64_t length() const;
    /// Forgets every position from `n` on, to replay from a prefill (the stateful methods'
    /// state is the caller's to restore). A hybrid's recurrent states cannot be rewound: they are
    /// replaced by `linearAtN`, a copyLinear() made at position n; without it, InputError.
    void truncate(int64_t n, const std::vector<std::shared_ptr<LinearState>>* linearAtN = nullptr);
    /// A deep copy of the linear layers' states (empty for a model without linear layers).
    std::vector<std::shared_ptr<LinearState>> copyLinear() const;
    /// Layer `layer`'s indexer keys and linear state, made on first use (`layers`: the model's).
    at::Tensor& indexKeys(int64_t layer, size_t layers);
    LinearState& linearState(int64_t layer, size_t layers);
};

/// Called once per layer and forward call with q [B, Hq, T, D] as the model dots it with the
/// keys (after its norms, RoPE and Llama 4's temperature), and the full K [B, Hkv, S, D] and
/// V [B, Hkv, S, Dv] the queries attend to.
using CaptureHook = std::function<void(int64_t layer, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v)>;

class CausalLMImpl : public torch::nn::Module {
public:
    /// Builds the modules (parameters allocated, not initialised).
    explicit CausalLMImpl(const ModelConfig& config);

    /// Logits [B, T, vocab] (float32) for token ids [B, T] that follow the cache's positions
    /// ([B, 1, vocab], the last position's, with `lastLogitsOnly`: a prefill or a capture
    /// needs no more, and a 128k vocabulary's logits of 1,000 tokens are 0.5 GB).
    /// With a cache, its keys and values are extended.
    at::Tensor forward(const at::Tensor& ids, KVCache* cache,
                       const attention::AttentionConfig& attn = {}, const CaptureHook& hook = {},
                       bool lastLogitsOnly = false);

    /// Every parameter from the checkpoint by its HF name, in `dtype`, checking shapes and
    /// that the values are finite. With `mapStored`, a tensor stored in `dtype` views the
    /// file's read-only mapping instead of being copied (for inference: never write to those
    /// parameters; a trainer loads copies). `progress(bytes done, bytes)` after each tensor.
    /// On another `device` each tensor is copied there as it is read (the host holds one tensor
    /// at a time), and the RoPE tables go with them. Throws CheckpointError naming the file and
    /// tensor.
    /// gpt-oss's MXFP4 experts (decodesExpertsLazily) are left to be decoded as tokens reach
    /// them.
    void loadWeights(const Checkpoint& checkpoint, at::ScalarType dtype = at::kFloat,
                     const std::function<void(int64_t, int64_t)>& progress = {},
                     bool mapStored = false, at::Device device = at::kCPU);

    /// Where the weights are (a forward pass moves its token ids there).
    at::Device device() const { return m_embed.device(); }
    /// The dtype the weights compute in.
    at::ScalarType dtype() const { return m_embed.scalar_type(); }

    /// Before loading: the attention projections' stored shapes against the config, so that a
    /// head_dim × heads that contradicts the weights is a ConfigError naming `configPath` and
    /// the keys rather than a shape error of the weights.
    void checkShapes(const Checkpoint& checkpoint, const std::string& configPath) const;

    /// Random initialisation for training (normal(0, 0.02), norms at one, (1 + w) norms at
    /// zero), seeded.
    void initWeights(uint64_t seed);
    /// initWeights' values one parameter at a time (float32), without keeping them: for
    /// writing checkpoints larger than memory.
    void initialValues(uint64_t seed,
                       const std::function<void(const std::string&, const at::Tensor&)>& fn) const;

    const ModelConfig& config() const { return m_config; }

    /// Receives a layer's intermediates by the references' names while `trace` is set (what the
    /// reference tests compare): mixer_in, layer_out; DSA's idx_scores [B, T, S] and idx_selected;
    /// MiniMax-M3's idx_block_scores [B, Hi, T, blocks] and idx_selected [B, Hi, T, S];
    /// a linear layer's lin_conv_in, lin_q, lin_k, lin_v, lin_g, lin_beta, lin_core_out,
    /// lin_state, lin_z, lin_normed (batch 0, the references' layout).
    using Trace = std::function<void(int64_t layer, const std::string& name, const at::Tensor&)>;
    void setTrace(Trace trace) { m_trace = std::move(trace); }
    /// Receives each DSA layer's indexer scores [B, T, S] (before masking; a shared layer: the
    /// scores of the layer whose selection it takes), or each MiniMax-M3 sparse layer's block
    /// scores [B, Hi, T, blocks] (−inf: a block after the query), while set (Model::capture).
    using IndexerHook = std::function<void(int64_t layer, const at::Tensor& scores)>;
    void setIndexerHook(IndexerHook hook) { m_indexerHook = std::move(hook); }
    /// Receives each DeepSeek-V4 compressed layer's entries so far [B, C, D] (as the attention
    /// reads them) and, on a CSA layer, the lightning indexer's scores of the call's queries
    /// [B, T, C] (−inf: an entry the query does not see yet; undefined on an HCA layer), while
    /// set (Model::capture).
    using CompressedHook =
        std::function<void(int64_t layer, const at::Tensor& entries, const at::Tensor& scores)>;
    void setCompressedHook(CompressedHook hook) { m_compressedHook = std::move(hook); }

    /// The attention layer `index` computes: `base` with the model's logit scale, soft-cap
    /// and that layer's sliding window (CONTRACTS.md §7), chunk and sinks
    /// (docs/sinks-chunks-nope-mla.md).
    attention::AttentionConfig layerAttention(int64_t index,
                                              const attention::AttentionConfig& base = {}) const;
    /// The RoPE inverse frequencies layer `index` rotates with ([rot / 2]; undefined for a NoPE
    /// layer), for views and tests (the short factors of longrope).
    at::Tensor ropeInverseFrequencies(int64_t index) const;

    struct Layer; // the tensors of one block, borrowed from the registered modules

private:
    at::Tensor embed(const at::Tensor& ids, int64_t firstPos);
    /// Layer `index` of x. `pending`: the previous block's MLP output not yet added to x (none:
    /// undefined), added here; on return, this block's where it leaves the add to the next
    /// block's first norm (a plain pre-norm block, no trace), else undefined.
    at::Tensor block(int64_t index, const at::Tensor& x, at::Tensor& pending, KVCache* cache,
                     int64_t firstPos, const attention::AttentionConfig& attn,
                     const CaptureHook& hook);
    /// The layer's token mixer: attention, or a linear-attention layer.
    at::Tensor mixer(int64_t index, const at::Tensor& x, KVCache* cache, int64_t firstPos,
                     const attention::AttentionConfig& attn, const CaptureHook& hook);
    at::Tensor attention(int64_t index, const at::Tensor& x, KVCache* cache, int64_t firstPos,
                         const attention::AttentionConfig& attn, const CaptureHook& hook);
    /// DeepSeek-V4's attention of layer `index` (compressed_attention.cpp): the sliding window of
    /// its one key-value head, and a compressed layer's entries beside it; its output projected.
    at::Tensor compressedAttention(int64_t index, const at::Tensor& x, KVCache* cache,
                                   int64_t firstPos, const attention::AttentionConfig& attn,
                                   const CaptureHook& hook);
    /// DeepSeek-V4's block on the residual streams [B, T, n, h] (ModelConfig::hyper): mHC's
    /// mapping around the attention, then around the experts.
    at::Tensor hyperBlock(int64_t index, const at::Tensor& streams, KVCache* cache,
                          int64_t firstPos, const attention::AttentionConfig& attn,
                          const CaptureHook& hook);
    /// mHC's last collapse of the streams [B, T, n, h] into the hidden state (hc_head).
    at::Tensor hyperHead(const at::Tensor& streams) const;
    /// Layer `index`'s attention output [B, Hq, T, Dv] (in the method's dtype) from its q, k
    /// and v: the cache's append, then the model's own selection (DSA, which reads x and MLA's
    /// q latent) or the method, on the decode engine where it runs one query.
    at::Tensor attend(int64_t index, const at::Tensor& x, const at::Tensor& qLatent,
                      const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, KVCache* cache,
                      int64_t firstPos, const attention::AttentionConfig& attn,
                      const CaptureHook& hook);
    /// The output projection of attention output y [B, Hq, T, Dv] (× σ(gate) where gated).
    at::Tensor attentionOutput(int64_t index, const at::Tensor& y, const at::Tensor& gate) const;
    /// The final norm, the head and the logits' scaling of the last hidden states x (plus the
    /// last block's pending MLP output, where defined).
    at::Tensor head(at::Tensor x, at::Tensor pending, bool lastLogitsOnly) const;
    /// Whether every layer's step between attentions can be a CUDA graph: nothing in it depends
    /// on the position but the RoPE tables, nor on the data (MoE routing), nor keeps a state
    /// (linear attention, the DSA indexer's keys).
    bool graphable() const;
    /// The cache's graphs for a step of ids [B, 1] (recorded or to be recorded), or null: run
    /// eagerly.
    DecodeGraphs* graphsFor(const at::Tensor& ids, KVCache* cache, const CaptureHook& hook,
                            const attention::AttentionConfig& attn);
    /// The RoPE tables the graphs read, made before a recording (`firstPos`) or rewritten for a
    /// replay's position.
    void recordAngles(DecodeGraphs& g, int64_t firstPos) const;
    void writeAngles(DecodeGraphs& g, int64_t firstPos) const;
    /// q [B, Hq, T, D], k [B, Hkv, T, D], v [B, Hkv, T, Dv] of layer `index` before the cache;
    /// gated attention's gate [B, T, Hq·D] and MLA's q latent [B, T, q_lora] where asked.
    void projections(int64_t index, const at::Tensor& x, int64_t firstPos, at::Tensor& q,
                     at::Tensor& k, at::Tensor& v, at::Tensor* gate = nullptr,
                     at::Tensor* qLatent = nullptr) const;
    at::Tensor mlp(int64_t index, const at::Tensor& x);
    /// The layer's dense MLP (on a sparse layer of GraniteMoeHybrid: its shared MLP).
    at::Tensor denseMlp(const Layer& L, const at::Tensor& x) const;
    at::Tensor norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const;
    /// {x + a, norm(x + a)}: on a GPU one fused kernel where the norm is a plain RMSNorm.
    std::pair<at::Tensor, at::Tensor> addNorm(const at::Tensor& x, const at::Tensor& a,
                                              const at::Tensor& w, const at::Tensor& b) const;
    /// The RoPE angles of `layer` (its table, longrope's factors) for T positions from firstPos.
    const RopeAngles& layerAngles(int64_t firstPos, int64_t T, int64_t layer) const;
    /// q and k [B, H, T, D] rotated in their first rotaryDim dims, in the model's layout: on a GPU
    /// in the rotate-half layout one fused kernel for both.
    void ropeQK(at::Tensor& q, at::Tensor& k, int64_t firstPos, int64_t layer) const;
    /// q [B, H, T, D] × the attention temperature of its positions (ModelConfig::
    /// attnTemperatureScale; q itself where there is none).
    at::Tensor tempered(const at::Tensor& q, int64_t firstPos) const;

    ModelConfig m_config;
    std::vector<std::shared_ptr<Layer>> m_layers;
    at::Tensor m_embed, m_positions, m_finalNormW, m_finalNormB, m_lmHead;
    /// RoPE inverse frequencies [rotaryDim / 2] (longrope: the short and the long factors').
    struct Rope {
        at::Tensor invFreq, longInvFreq;
        mutable at::Tensor invFreqDouble; // invFreq in float64 (AttentionConfig::ropeInvFreq)
    };
    Rope m_rope;      // the (global) layers'
    Rope m_localRope; // the sliding layers' where they differ (Gemma 3, OLMo 3)
    /// The RoPE angles of this forward call's positions, for each inverse-frequency table and
    /// attention factor used (ropeAngles), made at their first use and dropped at the call's end.
    struct AnglesKey {
        const void* invFreq;
        double factor;
        int64_t firstPos, T;
        bool operator<(const AnglesKey& o) const {
            return std::tie(invFreq, factor, firstPos, T) <
                   std::tie(o.invFreq, o.factor, o.firstPos, o.T);
        }
    };
    mutable std::map<AnglesKey, RopeAngles> m_angles;
    const RopeAngles& angles(const at::Tensor& invFreq, int64_t firstPos, int64_t T,
                             double factor) const;
    Trace m_trace;
    IndexerHook m_indexerHook;
    CompressedHook m_compressedHook;
    at::Tensor m_lastScores;    // DSA: the last indexer layer's scores in this call
    at::Tensor m_lastSelection; // DSA: the last indexer layer's selection in this call
    at::Tensor m_embedded; // Zamba2: this call's token embeddings, which every shared block reads
    at::Tensor m_ids;      // DeepSeek-V4: this call's token ids, which the hash layers route by
    /// DeepSeek-V4: mHC's final collapse of the streams (hc_head's fn [n, n·h], base [n], scale).
    at::Tensor m_hcHeadFn, m_hcHeadBase, m_hcHeadScale;
    DecodeGraphs* m_recording = nullptr; // a decode step being recorded as CUDA graphs
};
TORCH_MODULE(CausalLM);

/// Whether sparse layer `layer`'s routed experts are MXFP4 that are decoded as tokens reach them
/// (gpt-oss's gate_up_proj and down_proj, on the CPU: ExpertDecoder) rather than loaded with the
/// other weights; Model::open leaves them out of its memory estimate.
bool decodesExpertsLazily(const ModelConfig& c, const Checkpoint& checkpoint, int64_t layer,
                          at::Device device);

} // namespace sparqlab::model
