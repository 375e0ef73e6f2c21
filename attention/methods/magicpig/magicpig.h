#pragma once
/// \file magicpig.h
/// What MagicPIG's kernel over captured q, K, V (magicpig.cpp) and its decode kernel
/// (decode.cpp) share: the hyperplanes drawn from --hash-seed, SimHash, the sampling
/// probability (METHODS2.md §5). Internal to the unit.

#include "attention/attention.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace sparqlab::attention::detail {

/// §5.3: the 1e-4 inside log(w + 1e-4).
inline constexpr double kMagicpigWeightOffset = 1e-4;
/// §5.2: a key is sampled on its second collision (lsh.cc).
inline constexpr int64_t kMagicpigMinCollisions = 2;

/// The Gaussian hyperplanes [D, K·L] (float32) of `c`'s --hash-bits, --hash-tables and
/// --hash-seed, the same on every machine.
at::Tensor magicpigHyperplanes(const AttentionConfig& c, int64_t D);
/// §5.1: code_t(x) = Σ_{i<K} 2^i [x·W[:, t·K + i] > 0], [..., L] int64.
at::Tensor simhash(const at::Tensor& x, const at::Tensor& W, int64_t K, int64_t L);

} // namespace sparqlab::attention::detail
