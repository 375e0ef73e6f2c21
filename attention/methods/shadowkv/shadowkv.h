#pragma once
/// \file shadowkv.h
/// What ShadowKV's kernel over captured q, K, V (shadowkv.cpp) and its decode kernel
/// (decode.cpp) share (METHODS3.md §3): the chunks' landmarks and outliers, the low-rank
/// factors of the prompt's keys. Internal to the unit.

#include "attention/select.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace sparqlab::attention::detail {

/// §3.2 for the chunks' keys [Hkv, n_ch, C, D] (post-RoPE): the landmarks [Hkv, n_ch, D] (means,
/// summed in order), each chunk's smallest cosine with its landmark [Hkv, n_ch] and the n_out
/// outlier chunks (the smallest, ties → the lower chunk).
struct ShadowChunks {
    at::Tensor landmarks, minCos;
    Selection outliers; ///< mask [Hkv, n_ch]
};
ShadowChunks shadowChunks(const at::Tensor& chunkKeys, int64_t nOut);

/// §3.4: X [n, m] ≈ A·Vt, A = X·V_r [n, r_eff], Vt = V_rᵀ [r_eff, m] (r_eff = min(rank, n, m)),
/// and X's singular values.
struct LowRankFactors {
    at::Tensor A, Vt, sv;
};
LowRankFactors lowRankFactors(const at::Tensor& X, int64_t rank);

} // namespace sparqlab::attention::detail
