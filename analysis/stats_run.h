#pragma once
/// \file stats_run.h
/// The paper's statistics over a capture file (CONTRACTS.md §4 `stats`), streamed one
/// (example, layer) at a time so that memory stays bounded whatever the capture's size.
///
/// Threading: call from one thread; progress and cancel are polled from it.

#include "analysis/attend_run.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace sparqlab::model {
struct CaptureInfo;
}

namespace sparqlab::analysis {

inline constexpr const char* kStatsFormat = "sparqlab.stats";
inline constexpr int64_t kStatsFormatVersion = 1;

/// What to compute (CONTRACTS.md §4 defaults).
struct StatsOptions {
    std::string capturePath;
    int64_t coverageK = 32;
    std::vector<int64_t> agreementR{8, 16, 32, 64};
    std::vector<int64_t> agreementK{32, 64, 128};
    int64_t alphaR = 32;
    int64_t alphaK = 128;
    uint64_t projectionSeed = 0;                           ///< seed of the random-proj matrices
    std::vector<double> kMassP{0.5, 0.8, 0.9, 0.95, 0.99}; ///< METHODS.md §9.1
    /// Methods whose recall@k (METHODS.md §9.2) is measured at the decode step, each with its
    /// parameters; methods the capture lacks the queries (or a calibration) for are skipped.
    std::vector<attention::AttentionConfig> recall;
    Job job; ///< progress and cancel (base/job.h)
};

/// One top-k agreement grid point, per (layer, head) averaged over examples.
struct AgreementEntry {
    std::string method; ///< "top-r", "first-r", "random-proj"
    int64_t r = 0, k = 0;
    at::Tensor perHead; ///< [L, Hq]
};

/// Recall of one method and parameter set, per (layer, head) averaged over examples.
struct RecallEntry {
    attention::AttentionConfig config;
    at::Tensor perHead; ///< [L, Hq]
    /// Over the `runs` (example, layer) steps it ran: the mean transfer ratio at the examples'
    /// lengths (METHODS.md §10; on DeepSeek-V4's layers with entries over the keys the query sees,
    /// a key its value) and the mean keys attended (entries too); NaN where it ran on none.
    double compression = 0;
    double count = 0;
    int64_t runs = 0;
    std::string skipped; ///< why it could not run (then perHead is undefined)
    /// Why it did not run on DeepSeek-V4's layers with entries (a method that needs the keys to
    /// be positions: NaN there, the other layers kept); empty: it ran on all.
    std::string notOnEntries;
};

struct AlphaEntry {
    std::string tau; ///< "adaptive", "sqrt-dh", "sqrt-r"
    int64_t r = 0, k = 0;
    double rmse = 0;
};

/// Everything `stats` reports. Per-head tensors are [L, Hq] float64.
struct StatsResult {
    int64_t examples = 0, layers = 0, heads = 0;
    at::Tensor coverage, kurtosis, zmassRatio, zmassRatioNotebook;
    std::vector<AgreementEntry> agreement;
    std::vector<AlphaEntry> alpha;
    at::Tensor kMass; ///< [P, L, Hq] mean over examples of METHODS.md §9.1's count
    /// DeepSeek-V4 (capture format 6): its layers with compressed entries, where every measure
    /// scores the decode-step query against the entries and the positions it sees.
    int64_t entryLayers = 0;
    std::vector<RecallEntry> recall;
    double etaExcess[5] = {0, 0, 0, 0, 0}; ///< axes example, layer, head, sequence, dim
    double eta[5] = {0, 0, 0, 0, 0};
    int64_t etaPositions = 0; ///< trailing positions every example has
    /// A hybrid model's decode step at the examples' mean length
    /// (docs/learned-sparse-and-hybrid.md §3): elements its attention layers' caches move (every
    /// head; MLA: the latent) and its linear layers' states, read and written; linearLayers 0:
    /// not a hybrid.
    int64_t linearLayers = 0;
    double meanLength = 0, attentionElements = 0, linearStateElements = 0;
    // Per-example values behind the figures: [E, L, Hq] float64.
    at::Tensor coverageAll;
    at::Tensor alphaTrueAll;
    std::vector<at::Tensor> alphaApproxAll; ///< one per τ of `alpha`
    at::Tensor queries; ///< [E, L, Hq, D] the decode-step queries (for the q histograms)
};

/// The recall entries `stats` measures by default: every method that selects positions, each
/// at k ∈ ks (once, at ks' first, for a method whose budget is not k), configured by
/// `configOf` (the command line's options over the method's own defaults; empty: the
/// method's defaults, attention::defaultConfig).
std::vector<attention::AttentionConfig> defaultRecallConfigs(
    const std::vector<int64_t>& ks = {16, 32, 64, 128},
    const std::function<attention::AttentionConfig(attention::Method)>& configOf = {});

/// CONTRACTS.md §4's defaults fitted to a capture of this shape: the agreement r above head_dim
/// left out (the paper's 8 … 64 suit d = 128; head_dim alone where none is left), α's r at most
/// head_dim. Start from these and set what the user gave: runStats refuses a value that does not
/// fit.
StatsOptions statsDefaultsFor(const model::CaptureInfo& info);

/// Computes the statistics; throws with one line naming the file on bad input.
StatsResult runStats(const StatsOptions& options);

/// The JSON of CONTRACTS.md §4 (with a few added fields).
std::string statsJson(const StatsResult& r, const StatsOptions& o);

} // namespace sparqlab::analysis
