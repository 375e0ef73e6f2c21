#pragma once
/// \file captured.h
/// What a capture holds, apart from the file it is kept in (capture/capture_file.h,
/// CONTRACTS.md §3): the model's attention shape (CaptureInfo) and one prompt's q, K and V
/// (CaptureExample), as the model returns them (Model::capture) and the capture files
/// store them.

#include "attention/attention.h"
#include "model/model_config.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace sparqlab::attention {
struct TransferArgs;
}

namespace sparqlab::model {

/// The root attributes of a capture: which model, and its attention shape.
struct CaptureInfo {
    std::string model;        ///< path or hub id
    std::string architecture; ///< config.json architectures[0]
    int64_t nLayers = 0;
    int64_t nHeads = 0;   ///< query heads Hq
    int64_t nKvHeads = 0; ///< KV heads Hkv
    int64_t headDim = 0;
    double attnScale = 0; ///< factor the model multiplies q·k by
    std::string createdBy;
    // Version 2 (CONTRACTS.md §7): the model's attention modifiers, per layer.
    std::vector<double> layerAttnScale;      ///< [L] (empty: attnScale everywhere)
    std::vector<int64_t> layerSlidingWindow; ///< [L], 0 = global (empty: none)
    double attnSoftcap = 0;                  ///< 0 = none
    // Version 3 (docs/sinks-chunks-nope-mla.md): what a version 2 reader would get wrong.
    int64_t vHeadDim = 0;            ///< values' head dimension d_v (0: head_dim)
    std::vector<int64_t> layerChunk; ///< [L] chunked attention, 0 = none (empty: none)
    at::Tensor sinks;                ///< [L, Hq] float32 sink logits (undefined: none)
    // Written in any version, for people and views: NoPE layers and MLA's latent cache.
    std::vector<int64_t> layerUsesRope; ///< [L] 1 = RoPE, 0 = NoPE (empty: not recorded)
    int64_t kvLoraRank = 0;             ///< MLA's latent per position (0: not MLA)
    int64_t qkRopeHeadDim = 0;          ///< MLA's shared rotary key per position
    /// [L, D/2] float64: each layer's RoPE inverse frequencies where it rotates the whole head
    /// in the rotate-half layout (Expected Attention's future rotation, ShadowKV's pre-RoPE
    /// keys); a NaN row where it does not (NoPE, partial or interleaved RoPE). Undefined: not
    /// recorded (captures before it).
    at::Tensor ropeInvFreq;
    /// Hybrid models (Qwen3-Next, Kimi Linear; docs/learned-sparse-and-hybrid.md): the kind of
    /// every model layer ("attention", "Gated DeltaNet", "Kimi Delta Attention"), and the model
    /// layer of each captured layer (only attention layers have q, K and V). Empty: every layer
    /// is attention, captured layer l is model layer l.
    std::vector<std::string> layerKinds;
    std::vector<int64_t> modelLayers;
    /// The elements of one linear layer's state per sequence (recurrent state and convolution
    /// inputs), read whole at every decode step; 0: none.
    int64_t linearStateElements = 0;
    /// Models with a learned selection (DeepSeek-V3.2, GLM-5, MiniMax-M3): the indexer's key
    /// dimension Di, its heads Hi and its top-k (keys; blocks for a block indexer); 0: no
    /// indexer (the examples then hold no index_scores).
    int64_t indexHeadDim = 0, indexHeads = 0, indexTopK = 0;
    /// Version 5, a block indexer (MiniMax-M3, docs/learned-sparse-and-hybrid.md §8): keys per
    /// block and the blocks ending at a query's own always kept; 0: a per-key indexer (DSA).
    int64_t indexBlockSize = 0, indexLocalBlocks = 0;
    /// [L] 1 = the layer has an indexer (MiniMax-M3's full-attention layers have none, and
    /// their index_scores are NaN). Empty: every layer has one.
    std::vector<int64_t> layerIndexed;
    /// Version 6, compressed entries (DeepSeek-V4, docs/learned-sparse-and-hybrid.md §17): each
    /// captured layer's positions per entry (0: a sliding layer, without entries), 1 where the
    /// lightning indexer picks among them (CSA), and its picks per query. Empty: no entries.
    std::vector<int64_t> layerCompressRate, layerEntryIndexed;
    int64_t entryTopK = 0;
    /// The lightning indexer's key elements per entry, which a CSA layer reads for every entry
    /// to pick (`entry_index_dim`; 0: not recorded, as in the files of before 2026-12).
    int64_t entryIndexDim = 0;
    /// Whether the examples hold compressed entries (version 6).
    bool compressed() const { return !layerCompressRate.empty(); }
    /// Layer l's positions per entry (0: none).
    int64_t compressRate(int64_t l) const {
        return static_cast<size_t>(l) < layerCompressRate.size()
                   ? layerCompressRate[static_cast<size_t>(l)]
                   : 0;
    }
    /// Whether layer l's indexer picks among its entries (CSA).
    bool entryIndexed(int64_t l) const {
        return static_cast<size_t>(l) < layerEntryIndexed.size() &&
               layerEntryIndexed[static_cast<size_t>(l)] != 0;
    }
    /// Layer l's entries over S positions, ⌊S / rate⌋ (0 on a sliding layer): entry w pools
    /// positions [w·rate, (w + 1)·rate) and is seen from position (w + 1)·rate − 1 on.
    int64_t entryCount(int64_t l, int64_t S) const {
        const int64_t r = compressRate(l);
        return r > 0 ? S / r : 0;
    }
    /// Where layer l's entries begin in an example's entries: the counts of the layers before.
    int64_t entryOffset(int64_t l, int64_t S) const {
        int64_t o = 0;
        for (int64_t m = 0; m < l; ++m)
            o += entryCount(m, S);
        return o;
    }
    /// The keys the model's own selection keeps per query: index_topk, of blocks for a block
    /// indexer.
    int64_t indexTopKeys() const { return indexTopK * std::max<int64_t>(1, indexBlockSize); }
    /// Whether `method` takes a local window l on this capture: as the method table says, but
    /// the indexer on a block indexer (MiniMax-M3), whose own local blocks take l's place.
    bool takesLocal(attention::Method method) const;
    /// Whether captured layer `l` has an indexer.
    bool indexed(int64_t l) const {
        return indexHeadDim > 0 && (static_cast<size_t>(l) >= layerIndexed.size() ||
                                    layerIndexed[static_cast<size_t>(l)] != 0);
    }
    /// The shape of an example's index_scores for T kept queries over S positions: [L, T, S] for
    /// a per-key indexer, [L, Hi, T, ⌈S / block⌉] for a block indexer.
    std::vector<int64_t> indexScoresShape(int64_t T, int64_t S) const;
    /// Whether some of the model's layers are not captured (a hybrid with layers without
    /// attention): then a captured layer is named by its model layer too. (Falcon-H1's layers
    /// all have attention: each captured layer is the model layer of its number.)
    bool skipsLayers() const { return modelLayerCount() != nLayers; }
    /// The model layer captured layer `l` is.
    int64_t modelLayer(int64_t l) const {
        return static_cast<size_t>(l) < modelLayers.size() ? modelLayers[static_cast<size_t>(l)]
                                                           : l;
    }
    /// A hybrid's linear layers' kind as labelled ("Mamba-2", "Gated DeltaNet"; Falcon-H1's
    /// attention + Mamba-2 layers: "Mamba-2", their state's); empty: none.
    std::string linearKind() const;
    /// A hybrid's layers that are not captured, counted by kind in the labels' order ("4 Mamba",
    /// "2 MLP, 4 Mamba-2"); empty: every layer is captured.
    std::string uncapturedKinds() const;
    /// A hybrid's linear layers (neither attention nor Nemotron-H's MLP blocks): those whose
    /// state a decode step reads and writes.
    int64_t linearLayerCount() const;
    /// The model's layers (nLayers for a model without linear layers).
    int64_t modelLayerCount() const {
        return layerKinds.empty() ? nLayers : static_cast<int64_t>(layerKinds.size());
    }

    int64_t valueDim() const { return vHeadDim > 0 ? vHeadDim : headDim; }
    /// What an attention layer caches per position for every head (MLA: its latent).
    int64_t cacheElementsPerPosition() const {
        return model::cacheElementsPerPosition(kvLoraRank, qkRopeHeadDim, nKvHeads, headDim,
                                               valueDim());
    }
    /// The version this capture needs (1 without any of the later attributes; 2 with a layer's
    /// own scale, a window or a soft-cap; 3 with sinks, chunks or d_v ≠ head_dim; 4 for a
    /// hybrid or DSA model; 5 for a block indexer, MiniMax-M3; 6 with compressed entries,
    /// DeepSeek-V4).
    int64_t formatVersion() const;
    /// Every layer multiplies q·k by attnScale (no layerAttnScale of its own).
    bool uniformScale() const;

    /// `base` with layer `layer`'s scale, soft-cap, window, sinks and RoPE, as the model
    /// computes them.
    attention::AttentionConfig layerConfig(int64_t layer,
                                           const attention::AttentionConfig& base = {}) const;
    /// The transfer-formula arguments of `config` at a step over S keys (the positions, or on
    /// DeepSeek-V4's compressed layers the entries and positions the query sees), `count` of
    /// them attended (a top-p method's; < 0: k): the capture's head and value dimensions, and
    /// on a DeepSeek-V4 capture each key its own value (docs/design/METHODS.md §10).
    attention::TransferArgs transferArgs(const attention::AttentionConfig& config, int64_t S,
                                         double count = -1) const;
};

/// One prompt: tokens and, per layer and head, the captured queries, keys and values.
struct CaptureExample {
    at::Tensor tokenIds;             ///< [S] int64
    std::vector<std::string> tokens; ///< [S] each token's text (may be empty: then "")
    at::Tensor qPositions;           ///< [T] int64, ascending, each < S
    at::Tensor q;                    ///< [L, Hq, T, d_h]
    at::Tensor k;                    ///< [L, Hkv, S, d_h]
    at::Tensor v;                    ///< [L, Hkv, S, d_v] (d_v = d_h but for MLA)
    /// The model's indexer scores of each kept query (docs/learned-sparse-and-hybrid.md), float32:
    /// a DSA model's over the keys [L, T, S], NaN where a key is after the query; a block
    /// indexer's (MiniMax-M3) per indexer head over the blocks of keys [L, Hi, T, blocks], NaN
    /// where a block starts after the query and on a layer without an indexer. Undefined: none.
    at::Tensor indexScores;
    /// Version 6 (DeepSeek-V4): every captured layer's compressed entries, layer after layer
    /// [ΣC_l, d_h] float32 (CaptureInfo::entryOffset and entryCount find a layer's), as the
    /// attention reads them (pooled, normalised, rotated; each is its own value); and the
    /// lightning indexer's score of each kept query for each entry [T, ΣC_l], NaN where the
    /// entry is not yet seen by the query and on the layers without an indexer. Undefined: none.
    /// (CaptureReader::readLayer gives the layer's own: [C_l, d_h] and [T, C_l].)
    at::Tensor entries, entryScores;
    /// indexScores as the indexer method's input for layer `layer`: [1, S, S] or
    /// [1, Hi, S, blocks], row p the query at position p (NaN for positions not kept); undefined:
    /// none.
    at::Tensor indexScoresByPosition(int64_t layer) const;
};

/// One layer's index scores ([T, S], or [Hi, T, blocks] of a block indexer, T the kept queries
/// at `positions`) as the indexer method's input over S positions: [1, S, S] or
/// [1, Hi, S, blocks], row p the query at position p, NaN where no query is kept.
at::Tensor indexScoresByPosition(const at::Tensor& layerScores, const at::Tensor& positions,
                                 int64_t S);
/// The indexer method's input (indexScoresByPosition) cut to the first n positions: rows and
/// keys, or rows and the blocks of `blockSize` keys that hold them.
at::Tensor firstPositions(const at::Tensor& byPosition, int64_t n, int64_t blockSize);

} // namespace sparqlab::model
