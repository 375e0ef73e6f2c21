#pragma once
/// \file rocketkv.h
/// What RocketKV's kernel over captured q, K, V (rocketkv.cpp) and its decode kernel
/// (decode.cpp) share (METHODS3.md §4). Internal to the unit.

#include "attention/attention.h"

#include <cstdint>

namespace sparqlab::attention::detail {

/// Its four budgets: the first stage's k₁, the second's k, its chunk c and channels r.
struct RocketParams {
    int64_t k1, k, c, r;
};
/// §4.5: from one token budget T at sequence length seqLen (max_new_tokens 0; k₁ at least the
/// window), or the ones given when there is no --token-budget.
RocketParams rocketParams(const AttentionConfig& cfg, int64_t seqLen, int64_t D);

} // namespace sparqlab::attention::detail
