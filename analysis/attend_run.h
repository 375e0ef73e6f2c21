#pragma once
/// \file attend_run.h
/// Runs one attention method on every captured query of a capture file (CONTRACTS.md §2
/// `attend`), compares it with dense attention, and writes the result file of §3b.
///
/// Threading: call from one thread; progress and cancel are polled from that thread.

#include "attention/attention.h"
#include "base/job.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sparqlab::analysis {

inline constexpr const char* kAttendFormat = "sparqlab.attend";
inline constexpr int64_t kAttendFormatVersion = 1;

/// Long work's progress and cancellation (base/job.h): the one convention.
using base::Cancelled;
using base::Job;

struct AttendRunOptions {
    std::string capturePath;
    std::string outPath; ///< result file (§3b); empty: do not write one
    /// An HDF5 file of named method inputs, `inputs/<name>` (MagicPIG's hyperplanes; a result
    /// file holds the ones its method drew): each the same for every example and layer.
    std::string inputsPath;
    attention::AttentionConfig config;
    Job job; ///< progress per (example, layer); cancel between them
    /// Also write `probs` [L, Hq, T, S]: the model's exact attention of each step (dense, as
    /// Hugging Face's attention weights: with sinks, the sink's share dropped).
    bool probs = false;
};

/// Figures of a run, per (layer, query head) averaged over examples and captured queries.
struct AttendSummary {
    int64_t examples = 0;
    int64_t queries = 0;         ///< captured queries per (layer, head), over all examples
    at::Tensor relErrorPerHead;  ///< [L, Hq] mean of ‖y − y_dense‖ / ‖y_dense‖
    at::Tensor agreementPerHead; ///< [L, Hq] mean recall |I ∩ T| / |I|, T = exact top-|I|
                                 ///< by logits (METHODS.md §9.2)
    at::Tensor alphaPerHead;     ///< [L, Hq] mean α
    at::Tensor countPerHead;     ///< [L, Hq] mean positions attended
    at::Tensor massPerHead;      ///< [L, Hq] mean exact attention mass of those positions
    double relError = 0;         ///< mean over layers and heads
    double agreement = 0;        ///< mean recall
    double transferPerStep = 0;  ///< mean elements read per head and step (METHODS.md §10)
    double denseTransferPerStep = 0;
    double compressionRatio = 0; ///< Σ M_method / Σ M_dense (SPARQ.md §5) over the queries
    /// Steps (queries × layers; on DeepSeek-V4's compressed layers over the keys each query
    /// sees) whose length k reached (attention::budgetCoversLength) and where the method's count is
    /// more than dense's (SparQ's step 1, H2O's scores): it attended every position there, as dense
    /// does.
    int64_t stepsCovered = 0, steps = 0;
    int64_t groupSize = 1; ///< query heads per KV head
    /// MLA: what its cache really holds, one shared latent per position (kv_lora_rank +
    /// qk_rope_head_dim elements for all heads), against the per-head keys and values the
    /// transfer formulas count (docs/sinks-chunks-nope-mla.md); 0 without MLA.
    int64_t latentPerPosition = 0;
    int64_t perHeadCachePerPosition = 0; ///< Hkv · (d + d_v)
    double meanPositions = 0;            ///< mean S over the steps counted
    /// DeepSeek-V4 (capture format 6): its layers with compressed entries, where the method chose
    /// among the entries and the window's positions (the result's indices below `entries` are
    /// entries) and its reads count a key as its value (CaptureInfo::transferArgs).
    int64_t entryLayers = 0;
    /// The configuration run: the options' with the defaults that did not fit the capture's
    /// shortest example fitted (attention::fitDefaults, as the lab does), and what changed.
    attention::AttentionConfig config;
    std::vector<std::string> fitted;
};

/// The named inputs of an --inputs file (`inputs/<name>` datasets, CONTRACTS.md additions),
/// each one that `m` reads (MethodSpec::inputs); throws h5::H5Error / AttentionError with one
/// line naming the file otherwise. Shapes are the method's to check.
std::map<std::string, at::Tensor> readMethodInputs(const std::string& path, attention::Method m);

/// Runs the method; throws h5::H5Error / attention::AttentionError with one line on bad input,
/// Cancelled when cancelled (no result file is left behind then).
AttendSummary runAttend(const AttendRunOptions& options);

/// The summary as the JSON object `attend --json` prints.
std::string attendSummaryJson(const AttendSummary& s, const attention::AttentionConfig& config);

/// A configuration's parameters as a compact JSON object, under their attribute names, in the
/// table's order: each parameter the method takes (and with `sparqV1` SparQ's of version 1
/// too, as attend's files have them); a calibration file as its path, or with `fileNames` its
/// file name ("the prompt" when there is none).
std::string paramsJson(const attention::AttentionConfig& config, bool sparqV1, bool fileNames);

/// A per-head table [L, H] as result files hold it: one array per layer, one number per head,
/// null where the value is not finite (attend's and stats' JSON).
nlohmann::json perHeadJson(const at::Tensor& t);

} // namespace sparqlab::analysis
