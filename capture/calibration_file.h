#pragma once
/// \file calibration_file.h
/// Calibration files of Loki and Double Sparsity (CONTRACTS.md §6): an HDF5 file with
/// `format = "sparqlab.calibration"`, the model's shape, and `basis` + `eigenvalues` (loki) or
/// `channels` (double-sparsity) for every layer.
///
/// Threading: one reader or writer per thread (HDF5, see h5.h).

#include "attention/attention.h"

#include <memory>
#include <string>

namespace sparqlab::capture {

inline constexpr const char* kCalibrationFormat = "sparqlab.calibration";
inline constexpr int64_t kCalibrationFormatVersion = 1;

/// The shape a calibration belongs to (root attributes).
struct CalibrationInfo {
    std::string model;
    int64_t nLayers = 0, nHeads = 0, nKvHeads = 0, headDim = 0;
};

/// Writes `cal` to `path` (a temporary name, renamed when complete). Throws h5::H5Error.
void writeCalibration(const std::string& path, const attention::Calibration& cal,
                      const CalibrationInfo& info);

/// Reads and checks a calibration file (format, version, method, shapes against the
/// attributes, finite values, channel indices in range). Throws h5::H5Error with one line
/// naming the file and what is wrong.
std::shared_ptr<attention::Calibration> readCalibration(const std::string& path,
                                                        CalibrationInfo* info = nullptr);

} // namespace sparqlab::capture
