#pragma once
/// \file transfer.h
/// The transfer model of SPARQ.md §5 (paper Eq. 3, Eq. 11, App. G): scalar elements read or
/// written per attention head per decode step, as literal formulas (no clamping).

#include "attention.h"

#include <cstdint>

namespace sparqlab::attention {

/// Element counts of every method for one (S, d_h, k, r).
struct TransferCounts {
    int64_t dense = 0;   ///< 2·S·d + 2·d
    int64_t sparq = 0;   ///< S·r + 2·k·d + 4·d
    int64_t h2o = 0;     ///< 2·k·d + 2·d + 2·S
    int64_t lminf = 0;   ///< 2·k·d + 2·d
    int64_t flexgen = 0; ///< S·d + k·d + 2·d
};

/// SPARQ.md §5 for sequence length S, head dimension d, k positions and rank r.
TransferCounts transferCounts(int64_t S, int64_t d, int64_t k, int64_t r);

/// Elements moved by `method` (the oracle reads like FlexGen: all of K, then k rows of V).
int64_t transferCount(Method method, int64_t S, int64_t d, int64_t k, int64_t r);

/// M_method / M_dense (1 for dense).
double compressionRatio(Method method, int64_t S, int64_t d, int64_t k, int64_t r);

} // namespace sparqlab::attention
