#pragma once
/// \file lab_map.h
/// The lab's query × key map of one head: for a window of the held queries (each a decode step
/// over the keys up to its position, through the causal driver), the exact attention s, the
/// method's approximate ŝ (when it has one) and the positions it chose. Keys beyond a few
/// thousand are binned (the largest value of a bin) so that the map stays drawable; rows are
/// the last queries up to a window. libtorch only (no Qt).

#include "analysis/lab.h"

#include <cstdint>
#include <vector>

namespace sparqlab::analysis {

/// A query × key map of one head: rows are query positions firstQuery … lastQuery, columns
/// key positions [c · keyBin, (c + 1) · keyBin) (the last column may be shorter). Row-major
/// rows × columns; a key after its query's position is 0 (causal).
struct QueryKeyMap {
    int64_t firstQuery = 0, lastQuery = -1; ///< the rows' query positions
    /// The capture's first held query: it keeps the queries of its last positions only
    /// (labHistory), so rows cannot start before it.
    int64_t firstHeld = 0;
    int64_t keys = 0;   ///< key positions 0 … keys − 1 (= lastQuery + 1)
    int64_t keyBin = 1; ///< key positions per column
    /// DeepSeek-V4's compressed layer: positions per entry. Its rows see entries beside the
    /// window, and a cell holds the larger of a position's own weight and its entry's
    /// (keysByPosition); `chosen` marks a position whose key or entry the method chose. 0: none.
    int64_t entryRate = 0;
    int64_t columns = 0;
    std::vector<float> exact;    ///< s (largest of the bin)
    std::vector<float> approx;   ///< the method's ŝ (largest of the bin); empty if it has none
    std::vector<uint8_t> chosen; ///< 1 where the method attends to a key of the bin
    /// Per row: the exact mass on the chosen positions (the sink's share counted, as the head
    /// view counts it) and the number of positions attended.
    std::vector<float> chosenMass;
    std::vector<int64_t> count;
    int64_t rows() const { return lastQuery - firstQuery + 1; }
    /// The cell of (query position, key position); −1 when outside the map.
    int64_t cell(int64_t query, int64_t key) const;
};

/// The map of `head` of `layer` for the capture's last min(maxRows, held) queries, keys binned
/// to at most maxColumns columns. Runs the method exactly as the head view does at each row's
/// query (stateful methods from their history). Throws AttentionError for an out-of-range
/// layer, head or parameter, a method the capture lacks the queries for, or one that needs the
/// keys to be positions on a DeepSeek-V4 compressed layer.
QueryKeyMap queryKeyMap(const LabCapture& capture, int64_t layer, int64_t head,
                        const attention::AttentionConfig& config, int64_t maxRows = 256,
                        int64_t maxColumns = 2048);

} // namespace sparqlab::analysis
