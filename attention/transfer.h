#pragma once
/// \file transfer.h
/// The transfer model of SPARQ.md §5 (paper Eq. 3, Eq. 11, App. G) for the paper's methods,
/// as integer element counts. Every method's formula lives in the method table (method_table.h,
/// transferElements); these are views of it.

#include "attention.h"

#include <cstdint>

namespace sparqlab::attention {

/// Element counts of the paper's methods for one (S, d_h, k, r).
struct TransferCounts {
    int64_t dense = 0;   ///< 2·S·d + 2·d
    int64_t sparq = 0;   ///< S·r + 2·k·d + 4·d
    int64_t h2o = 0;     ///< 2·k·d + 2·d + 2·S
    int64_t lminf = 0;   ///< 2·k·d + 2·d
    int64_t flexgen = 0; ///< S·d + k·d + 2·d
};

/// SPARQ.md §5 for sequence length S, head dimension d, k positions and rank r.
TransferCounts transferCounts(int64_t S, int64_t d, int64_t k, int64_t r);

/// Elements moved by `method` (the oracle reads like FlexGen: all of K, then k rows of V),
/// with the default page size and, for the top-p methods, n = k.
int64_t transferCount(Method method, int64_t S, int64_t d, int64_t k, int64_t r);

/// M_method / M_dense (1 for dense).
double compressionRatio(Method method, int64_t S, int64_t d, int64_t k, int64_t r);

} // namespace sparqlab::attention
