#pragma once
/// \file causal.h
/// The one causal driver: any method over the queries of one sequence, each query a decode
/// step over the keys up to its position. The model's layers (attendCausal), `attend` over a
/// capture and the lab's head view all run methods through it; stateful methods (H2O, TOVA,
/// SnapKV) get their earlier queries and keep their state through their unit's CausalHooks
/// (method_spec.h).
///
/// Threading: reentrant; a CausalState belongs to one sequence and one caller at a time.

#include "attention/attention.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sparqlab::attention {

/// The queries of one sequence and the keys and values they attend to.
struct CausalInputs {
    at::Tensor q;                   ///< [B, Hq, T, D]
    std::vector<int64_t> positions; ///< the T queries' positions, strictly increasing
    at::Tensor k, v;                ///< [B, Hkv, S, D], S > the last position
    /// The queries before this index are history only (a stateful method's state learns from
    /// them; nothing is computed for them otherwise); the rest are decode steps.
    int64_t firstStep = 0;
    /// Named inputs the method reads beyond q, K, V (AttentionInputs::extra: MagicPIG's
    /// hyperplanes, a PQCache codebook), the same for every step.
    std::map<std::string, at::Tensor> extra{};
};

/// How the driver runs and what it returns.
struct CausalOptions {
    AttendOptions attend;      ///< keepScores, validate, diagnostics of each step
    bool withDense = false;    ///< also dense attention (keepScores) of every step, to compare
    AttentionConfig denseMods; ///< the model's modifiers for that dense reference
    /// Scores [steps of a chunk, S] per batch row and query head a chunk may take before the
    /// steps are split into chunks.
    int64_t chunkElements = int64_t{1} << 24;
    /// Whether a stateful method's history is checked (off when the caller checked the whole
    /// sequence and runs a part of it: checkHistory).
    bool checkHistory = true;
    /// Called for each chunk of steps [t0, t0 + n) (counted from firstStep) with the method's
    /// result and, with withDense, dense attention's; without it the results are concatenated
    /// and returned.
    std::function<void(int64_t t0, int64_t n, const AttentionResult& method,
                       const AttentionResult* dense)>
        onChunk;
};

/// Runs `config`'s method over the steps of `in` (and dense attention beside it when asked).
/// `state` carries stateful methods' state from earlier calls of the same sequence (null: a
/// fresh one). Throws AttentionError with one line when a stateful method lacks the queries it
/// reads ("h2o needs the queries of every position …"). Without onChunk returns the steps'
/// results along the query axis ([B, Hq, steps, …]); with it, an empty result.
AttentionResult runCausal(const CausalInputs& in, const AttentionConfig& config,
                          CausalState* state = nullptr, const CausalOptions& options = {});

/// Throws AttentionError with one line when `config`'s method lacks the earlier queries of
/// `in` it reads (runCausal does this on a fresh state); nothing for a stateless method.
void checkHistory(const CausalInputs& in, const AttentionConfig& config);

/// The one-line requirement a stateful method's history check names, e.g. "h2o needs the
/// queries of every position up to its step (a capture made with --all-queries)"; empty for a
/// stateless method.
std::string historyRequirement(const AttentionConfig& config);

} // namespace sparqlab::attention
