#pragma once
/// \file selection_overlap.h
/// Which keys the methods choose, side by side on a capture (docs/learned-sparse-and-hybrid.md
/// §6, `sparqlab-cli overlap`): per captured layer and method, the overlap of its chosen set with
/// the model's own indexer's (a DSA or MiniMax-M3 capture) and with the exact top-k, the attention
/// mass it keeps, its output error against dense attention and against the model's own
/// (indexer-masked) attention, its transfer per step, and how much its set overlaps the previous
/// layer's. On a DeepSeek-V4 capture (format version 6) a layer's keys are its compressed entries
/// and its window's positions (compressed_keys.h): dense attention is over every entry a query
/// sees, and the model's own set, on a CSA layer, the indexer's entries and the window.
///
/// Threading: call from one thread; progress and cancel are polled from it.

#include "attention/attention.h"
#include "base/job.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sparqlab::analysis {

struct OverlapOptions {
    std::string capturePath;
    /// The methods compared (their other parameters as given; k set per `ks`).
    std::vector<attention::AttentionConfig> methods;
    std::vector<int64_t> ks{256, 2048}; ///< budgets (each at most the keys a query sees)
    int64_t queries = 8;                ///< the last N captured queries of each example
    base::Job job;
};

/// One (layer, method, k): means over the examples' last queries (and heads, where per head).
struct OverlapRow {
    int64_t layer = 0;      ///< captured layer
    int64_t modelLayer = 0; ///< the model's layer (a hybrid's attention layers are some of them)
    std::string method;
    int64_t k = 0;
    /// |A ∩ I| / |I| with the model's indexer's set I at the same k (DeepSeek-V4: the model's
    /// own set, its indexer's entries and the window)
    double indexerOverlap = 0;
    double topkRecall = 0;    ///< |A ∩ T| / |T|, T the exact top-|A| by attention per head
    double mass = 0;          ///< exact attention mass of A
    double relErrorDense = 0; ///< ‖y − y_dense‖ / ‖y_dense‖
    double relErrorModel = 0; ///< ‖y − y_model‖ / ‖y_model‖, y_model the indexer at index_topk
    double transfer = 0;      ///< elements read per head and step (the transfer formula)
    double transferDense = 0; ///< dense attention's
    /// |A_l ∩ A_{l−1}| / k of the layer's key set (the k positions the most heads chose) with
    /// the previous captured layer's (not for the first layer).
    double previousLayerOverlap = 0;
    /// DeepSeek-V4 (a capture with compressed entries): the layer's positions per entry (0: a
    /// sliding layer) and the entries the last query sees; −1: not such a capture.
    int64_t compressRate = -1, entriesSeen = 0;
    bool hasIndexer = false;  ///< indexerOverlap and relErrorModel were measured
    bool hasPrevious = false; ///< previousLayerOverlap was measured
};

struct OverlapResult {
    std::vector<OverlapRow> rows;
    bool hasIndexer = false;
    int64_t indexTopK = 0;
    int64_t examples = 0, queries = 0;
};

/// Throws AttentionError or h5::H5Error with one line naming the file.
OverlapResult runOverlap(const OverlapOptions& o);

/// A layer's key set from its heads' selections [Hq, n, S] (n steps): per step the k positions
/// the most heads chose (ties: the earlier position), [n, S] bool.
at::Tensor layerKeySet(const at::Tensor& selected, int64_t k);

struct LabCapture; // lab.h

/// How much each layer's chosen keys overlap the previous layer's, for the lab's decode step
/// (the lab's Layers view): per captured layer the key set (layerKeySet) of the exact top-k, of
/// the lab's method and, on a capture with indexer scores, of the model's indexer, all at the
/// method's k.
struct LayerReuse {
    std::vector<int64_t> modelLayers; ///< the model layer of each captured layer
    /// A hybrid's layers that choose no keys, by kind ("4 Mamba"; CaptureInfo::uncapturedKinds).
    std::string otherLayers;
    struct Series {
        std::string label;
        std::vector<double> overlap; ///< per captured layer; NaN for the first
        std::vector<double> mass;    ///< the exact attention mass of the set, mean over heads
    };
    std::vector<Series> series;
    /// DeepSeek-V4's layers with compressed entries (captured indices): their keys are their own
    /// entries beside the positions, so their overlap with a neighbour is NaN.
    std::vector<int64_t> entryLayers;
    int64_t k = 0, positions = 0;
    /// The overlap of two sets of k drawn at random from the positions.
    double chance() const {
        return positions > 0 ? static_cast<double>(k) / static_cast<double>(positions) : 0;
    }
};
/// Throws AttentionError with one line when the method cannot run on the capture.
LayerReuse layerReuse(const LabCapture& c, const attention::AttentionConfig& method);
/// The result as JSON text (format "sparqlab.overlap", version 1).
std::string overlapJson(const OverlapResult& r, const OverlapOptions& o);

} // namespace sparqlab::analysis
