#pragma once
/// \file bench_figures.h
/// The benchmark's figures (paper Fig. 8 and Fig. F1) from the JSON that `sparqlab-cli bench
/// --json` writes (CONTRACTS.md §5): time against S, and speed-up against input size; and Fig. 10
/// from the rows of `sparqlab-cli bench-generate --json` (CONTRACTS.md §11): tokens per second
/// against S.

#include "analysis/figures.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::analysis {

/// One configuration of a benchmark run.
struct BenchRecord {
    std::string device, dtype;
    int64_t batch = 0, heads = 0, kvHeads = 0, seq = 0, headDim = 0, r = 0, k = 0;
    double denseUs = 0, sparqUs = 0, speedup = 0, theoreticalSpeedup = 0;
    double denseGbps = 0, sparqGbps = 0, machineGbps = 0;
    /// `bench --methods` records: the method timed (version 1 records: "sparq", us = sparq_us)
    /// and its own time; r or k is 0 where the method has none.
    std::string method = "sparq";
    double us = 0;
    bool perMethod = false;
    /// A `bench-generate` row (Fig. 10): the model's label (where the file gives one), tokens per
    /// second per sequence and the limit the copy bandwidth sets.
    bool generation = false;
    std::string model;
    double tokensPerSecond = 0, limitTokensPerSecond = 0;
};

/// Thrown for a malformed benchmark file; the message names the file and line.
class BenchFileError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Parses JSON lines (one object per line) or one JSON array of objects, of `bench` or of
/// `bench-generate` (not both in one file). `path` names the source in errors.
std::vector<BenchRecord> parseBenchJson(const std::string& text, const std::string& path);
std::vector<BenchRecord> readBenchJson(const std::string& path);

/// Fig. 8 style (dense and SparQ time against S, one figure per batch size, at the r and k
/// measured most) and Fig. F1 style (speed-up against batch × S, one series per r, with the
/// theoretical speed-up dashed). From `bench --methods` records: one line per method in each.
/// From `bench-generate` records, Fig. 10: tokens per second against S per model, device, dtype
/// and batch, a line per method and dense's bandwidth limit dashed; and each method's share of
/// its own limit.
std::vector<FigureData> benchFigures(const std::vector<BenchRecord>& records);

} // namespace sparqlab::analysis
