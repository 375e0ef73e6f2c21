#pragma once
/// \file induction.h
/// The induction diagnostic of a model (issue: a demo model that retrieves): a random token
/// sequence shown twice, and per layer × head how much attention goes to the previous token
/// and to the position after the earlier occurrence of the current token (the "induction"
/// target an in-context copying head looks at), with the loss on each showing.
///
/// Threading: one call at a time per model (it runs the model's forward pass).

#include "model/transformer.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace sparqlab::analysis {

/// What to measure.
struct InductionOptions {
    int64_t length = 256;   ///< R: random tokens per showing (the sequence is 2R, plus BOS)
    int64_t sequences = 4;  ///< random sequences averaged over
    uint64_t seed = 0;      ///< seed of the random ids
    int64_t vocabLimit = 0; ///< draw ids from [0, limit) (0: the whole vocabulary)
};

/// Per (layer, query head) scores, averaged over the sequences.
struct InductionReport {
    int64_t layers = 0, heads = 0, length = 0, sequences = 0;
    bool bos = false;     ///< a BOS id was put in front of each sequence
    at::Tensor prevToken; ///< [L, Hq] mean attention from position i to i − 1 (i ≥ 1)
    at::Tensor induction; ///< [L, Hq] mean attention from the second showing's i to
                          ///< the position after the same token's first showing
    double lossFirst = 0; ///< mean −ln p (nats) of the first showing's tokens (all but its first)
    double lossSecond = 0; ///< the same for the second showing
    /// The head with the largest induction score.
    int64_t bestLayer = 0, bestHead = 0;
    double bestInduction = 0;
};

/// Runs the diagnostic on `net` (its config gives the BOS id and each layer's attention
/// modifiers). Throws attention::AttentionError if the sequence does not fit the context.
InductionReport inductionReport(model::CausalLMImpl& net, const InductionOptions& options = {});

/// The report as JSON (`sparqlab-cli heads --json`).
std::string inductionJson(const InductionReport& r);

} // namespace sparqlab::analysis
