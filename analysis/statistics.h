#pragma once
/// \file statistics.h
/// The attention statistics of SPARQ.md §6 (paper §3, Fig. 4, Table 1, App. E), computed in
/// float64 on one decode step per batch row: q [B, Hq, D], K, V [B, Hkv, S, D], valid [B, S].
///
/// Threading: reentrant.

#include "attention/attention.h"

#include <ATen/core/Tensor.h>

#include <utility>

namespace sparqlab::analysis {

/// §6.1: sum of the min(k, n_valid) largest exact softmax probabilities. [B, Hq]
/// Every function here takes the model's attention modifiers (`mods`: scale, soft-cap,
/// sliding window; CONTRACTS.md §7); the default is SPARQ.md's plain 1/sqrt(D).
at::Tensor coverage(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid, int64_t topK,
                    const attention::AttentionConfig& mods = {});

/// §6.2: Fisher kurtosis (biased moments), pooled over the first and last axes:
/// Q [B, *mid, D] → [*mid]. NaN where the variance is 0.
at::Tensor kurtosis(const at::Tensor& Q);

/// §6.3: |z| > 3 mass relative to a Gaussian (σ with ddof 1), pooled like kurtosis.
at::Tensor zmassRatio(const at::Tensor& Q);

/// §6.3: the notebook's bug-compatible variant (kept to reproduce the paper's Fig. E1).
at::Tensor zmassRatioNotebook(const at::Tensor& Q);

/// How the approximate scores of §6.4 choose their r dimensions.
enum class AgreementMethod { TopR, FirstR, LastR, RandomProj };

/// §6.4: |top-k(approx) ∩ top-k(exact)| / min(k, n_valid) per head. proj [Hkv, D, r] is used
/// by RandomProj. marginRel (optional) receives min(margin_rel) of the two selections. [B, Hq]
at::Tensor topkAgreement(const at::Tensor& q, const at::Tensor& k, const at::Tensor& valid,
                         int64_t r, int64_t topK, AgreementMethod method,
                         const at::Tensor& proj = {}, at::Tensor* marginRel = nullptr,
                         const attention::AttentionConfig& mods = {});

/// §6.5: α_true (exact mass on the exact top-k) and α_approx (approximate softmax with per-head
/// top-r components and temperature `tau`, mass on the same set), each [B, Hq].
std::pair<at::Tensor, at::Tensor> alphaAgreement(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& valid, int64_t r, int64_t topK,
                                                 attention::TauMode tau,
                                                 const attention::AttentionConfig& mods = {});

/// §6.6: V [B, …, S, D] restricted to the longest suffix of positions valid in every row.
at::Tensor validTail(const at::Tensor& v, const at::Tensor& valid);

/// §6.6: (η, η − d^−1/2) along `axis` of v. NaN when v has no variance.
std::pair<double, double> correlationRatio(const at::Tensor& v, int64_t axis);

/// A random orthonormal [Hkv, D, r] projection (QR of a Gaussian, column signs fixed), seeded.
at::Tensor randomProjection(int64_t kvHeads, int64_t headDim, int64_t r, uint64_t seed);

} // namespace sparqlab::analysis
