#pragma once
/// \file calibrate_run.h
/// `sparqlab-cli calibrate` (CONTRACTS.md §6): Loki's basis (METHODS.md §4.1) or Double
/// Sparsity's channels (§5.1), per layer, from the keys (and queries) of a capture, or of one
/// captured prompt when generate/bpc calibrate on the prompt itself.
///
/// Threading: call from one thread; progress and cancel are polled from it.

#include "analysis/attend_run.h"
#include "capture/calibration_file.h"
#include "capture/capture_file.h"
#include "model/model.h"

#include <memory>
#include <string>

namespace sparqlab::analysis {

struct CalibrateOptions {
    std::string capturePath;
    attention::Method method = attention::Method::Loki;
    attention::ChannelMode mode = attention::ChannelMode::QK; ///< double-sparsity only
    bool center = true;                                       ///< loki only
    Job job; ///< progress per layer and cancel (base/job.h)
};

/// Calibrates on every example of the capture (loki: the keys of every captured position;
/// double-sparsity: each position's query with its key, so a capture made with
/// --all-queries). Throws with one line naming the file when it lacks what the method needs.
std::shared_ptr<attention::Calibration> calibrateCapture(const CalibrateOptions& o,
                                                         capture::CalibrationInfo* info = nullptr);

/// The calibration of `layers` layers from each layer's calibration tokens: tokens(l) gives
/// the keys [Hkv, N, D] and, for double-sparsity, the queries [Hq, N, D] of the same N tokens
/// (the one loop behind calibrateCapture, calibrateExample and the lab).
using CalibrationTokens = std::function<std::pair<at::Tensor, at::Tensor>(int64_t layer)>;
std::shared_ptr<attention::Calibration>
calibrateLayers(attention::Method method, int64_t layers, const CalibrationTokens& tokens,
                attention::ChannelMode mode = attention::ChannelMode::QK, bool center = true);

/// The same from one example held in memory (every position's query for double-sparsity).
std::shared_ptr<attention::Calibration>
calibrateExample(const model::CaptureExample& e, attention::Method method,
                 attention::ChannelMode mode = attention::ChannelMode::QK);

/// A calibration of `method` on the model's own run of `ids` (every query captured when the
/// method pairs queries with keys): what generate, bpc, eval and the lab use when no
/// calibration file is given. Its source reads "the prompt itself".
std::shared_ptr<attention::Calibration>
calibrateOnTokens(model::Model& model, const std::vector<int64_t>& ids, attention::Method method);

/// "--basis" or "--channels": the option naming `method`'s calibration file.
std::string calibrationOption(attention::Method method);

} // namespace sparqlab::analysis
