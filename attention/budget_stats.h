#pragma once
/// \file budget_stats.h
/// The budget statistics of METHODS.md §9 on one decode step per batch row (q [B, Hq, D],
/// K [B, Hkv, S, D], valid [B, S]): how many positions each head needs for a share p of its
/// attention mass (k_mass), and how much of a method's set is the head's true top set (recall).
/// The logits are the model's (config's scale, soft-cap and window).
///
/// Threading: reentrant.

#include "attention/attention.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace sparqlab::attention {

/// The p of the statistics file (CONTRACTS.md §6).
inline const std::vector<double> kKMassP{0.5, 0.8, 0.9, 0.95, 0.99};

/// §9.1: per p, the fewest positions (by descending probability, ties → lower index) whose
/// mass reaches p; p = 1 gives n_valid.
struct KMass {
    at::Tensor count;  ///< [P, B, Hq] int64
    at::Tensor margin; ///< [P, B, Hq] min(|cum[n] − p|, |cum[n−1] − p|), +inf for p = 1
};
KMass kMass(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid,
            const std::vector<double>& ps = kKMassP, const AttentionConfig& config = {});

/// §9.2: |I_h ∩ O_h| / |I_h| for a method's sets `indices` [B, Hq, W] (−1 padded), O_h the
/// exact per-head top-|I_h|.
struct Recall {
    at::Tensor recall;    ///< [B, Hq] in [0, 1]
    at::Tensor marginRel; ///< [B, Hq] margin_rel of O_h (small: a tie decided it)
};
Recall recallAtK(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid,
                 const at::Tensor& indices, const AttentionConfig& config = {});

} // namespace sparqlab::attention
