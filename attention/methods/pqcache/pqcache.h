#pragma once
/// \file pqcache.h
/// PQCache's codebook (METHODS2.md §4.2): product quantisation of the prompt's keys by a
/// deterministic k-means, what the unit builds for each decode step unless one is given, and
/// what its decode kernel reads.
///
/// Threading: reentrant.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace sparqlab::attention {

/// The k-means of one batch row, or of every row (pqBuild).
struct PqCodebook {
    at::Tensor centroids;  ///< [(B,) Hkv, m, 2^b, D/m]: rows from n_centroids on are 0
    at::Tensor codes;      ///< [(B,) Hkv, m, S] int64 nearest centroid, −1 at invalid positions
    at::Tensor nCentroids; ///< [(B)] int64: C_eff = min(2^b, n_fit)
    at::Tensor fit;        ///< [(B,) S] bool: the keys fitted (valid, fidx ≥ sink, cidx ≥ 1)
    at::Tensor codeGapRel; ///< [(B,) Hkv, m]: the smallest (d₂ − d₁)/d₂ over coded keys
    at::Tensor updates;    ///< [(B)] int64: Lloyd updates made (an early stop at a fixed point)
};

/// §4.2 for one row: keys [Hkv, S, D] (any float type; computed in it), valid [S] bool, m
/// sub-spaces (m divides D), 2^b centroids, the first `sink` positions and the current token
/// not fitted, `iters` Lloyd updates at most. Throws AttentionError on bad parameters.
PqCodebook pqBuildRow(const at::Tensor& k, const at::Tensor& valid, int64_t m, int64_t b,
                      int64_t sink, int64_t iters);
/// §4.2 for every row: keys [B, Hkv, S, D], valid [B, S].
PqCodebook pqBuild(const at::Tensor& k, const at::Tensor& valid, int64_t m, int64_t b, int64_t sink,
                   int64_t iters);

} // namespace sparqlab::attention
