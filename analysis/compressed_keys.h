#pragma once
/// \file compressed_keys.h
/// A DeepSeek-V4 capture's layer as the attention library takes it
/// (docs/learned-sparse-and-hybrid.md §17): the layer's compressed entries before every
/// position's key, each key its own value, and per query the keys it sees (the entries complete
/// by its position, the window's positions) and the model's own choice among them (on a CSA
/// layer the lightning indexer's top entry_topk entries, by the captured scores). Any method then
/// runs over them as a decode step with those keys valid (attention::attendSteps).
///
/// Threading: reentrant.

#include "attention/attention.h"
#include "model/captured.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace sparqlab::analysis {

struct CompressedKeys {
    at::Tensor q;        ///< [1, Hq, n, D] the queries' (the last n captured)
    at::Tensor keys;     ///< [1, 1, C + S, D]: entries 0..C−1, then positions 0..S−1
    at::Tensor visible;  ///< [1, n, C + S] bool: what each query sees
    at::Tensor model;    ///< [1, n, C + S] bool: what the model attends (⊆ visible)
    int64_t entries = 0; ///< C
    /// Queries from … from + n − 1 over the keys each sees (each key its own value), as
    /// attention::attendSteps takes them.
    attention::AttentionInputs steps(int64_t from, int64_t n) const;
    /// Queries per chunk for a score tensor [1, Hq, chunk, C + S] of about `elements`.
    int64_t chunk(int64_t elements) const;
};

/// Layer `layer` of a compressed capture (CaptureInfo::compressed), from its readLayer example
/// (q [Hq, T, D], k [1, S, D], the layer's entries [C, D] and scores [T, C]), for its last n
/// queries. Throws attention::AttentionError with one line when the capture has no entries.
CompressedKeys compressedKeys(const model::CaptureInfo& info, const model::CaptureExample& layerEx,
                              int64_t layer, int64_t n);

/// Weights over a compressed layer's keys ([…, C + S]: the C entries, then S positions) as one
/// per position ([…, S]): a position's own, or where an entry of `rate` positions pools it the
/// larger of its own and the entry's (the strongest key that holds it). What the lab draws
/// over positions (the head view's word strip, the query × key map).
at::Tensor keysByPosition(const at::Tensor& byKey, int64_t entries, int64_t rate);

/// `config` as it runs over compressedKeys: the layer's scale and sinks, the window already in
/// `visible` (so none of its own). Throws attention::AttentionError with one line for a method
/// that needs the keys to be positions (attention::positionFreeProblem).
attention::AttentionConfig compressedConfig(const model::CaptureInfo& info, int64_t layer,
                                            const attention::AttentionConfig& config);

/// Elements the model's own attention reads per head and step on a compressed layer: its
/// `modelKeys` keys of `d` (each its value) and the one written, and the indexer's key of
/// `indexDim` for each of the `indexedEntries` entries it scores (0 on an HCA or sliding layer).
double compressedModelReads(int64_t modelKeys, int64_t d, int64_t indexedEntries, int64_t indexDim);

} // namespace sparqlab::analysis
