#pragma once
/// \file lab_timing.h
/// How the lab times decode attention (the timing panel and the timing view): one sequence of the
/// capture's shape, every method the decode engine runs with the lab's parameters. GUI-free.

#include "attention/bench.h"
#include "capture/capture_file.h"

#include <optional>
#include <string>
#include <vector>

namespace sparqlab::app {

/// The lab's decode-step timing: one sequence of the capture's shape at S positions, five
/// samples after one warm-up, each at least 5 ms on a GPU.
attention::DecodeBenchConfig labBench(const model::CaptureInfo& info, int64_t S,
                                      const std::string& device = "cpu");

/// Every method the decode engine runs, with the lab's parameters (r, k as given), for timing
/// against dense; calibrated on the benchmark's own keys, without the model's modifiers.
std::vector<attention::AttentionConfig> engineMethods(const attention::AttentionConfig& c,
                                                      int64_t r, int64_t k);

/// What the timing view times against dense: the lab's method (SparQ where the decode engine
/// does not run the lab's), and `second` beside it; every engine method when `every`.
std::vector<attention::AttentionConfig> curveMethods(const attention::AttentionConfig& c, int64_t r,
                                                     int64_t k,
                                                     std::optional<attention::Method> second,
                                                     bool every);

/// "cpu", and "cuda" where libtorch has a device.
std::vector<std::string> timingDevices();

} // namespace sparqlab::app
