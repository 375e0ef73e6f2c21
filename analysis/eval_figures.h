#pragma once
/// \file eval_figures.h
/// The study's figures and table from `eval`'s JSON lines (CONTRACTS.md §8): per task, the
/// metric against the compression ratio with one line per method and ±1 standard error (the
/// paper's Fig. 1 and A1–A3), SparQ's r sweep (Fig. 7c), the needle heatmaps (Fig. A4), and
/// the Table 2 layout (each method's value nearest 1/2, 1/4 and 1/8 compression).

#include "analysis/figures.h"

#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparqlab::analysis {

/// A results file that cannot be used; the message names the file and line.
class EvalFileError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// One line of an eval results file.
struct EvalRecord {
    std::string task, data, example, method, metric;
    std::string params; ///< the params object as compact JSON (a point's identity)
    std::map<std::string, double> numbers; ///< its numeric parameters (r, k, local, p, …)
    double value = 0, compression = 1;
    int64_t seqLen = 0;
    double depth = -1;          ///< needle
    int64_t haystackTokens = 0; ///< needle
    int64_t length = 0;         ///< RULER: the length L the example was made for (0: none)
    /// The measured decode speed-up over dense (eval --measure-speed; NaN: not measured).
    double speedup = std::numeric_limits<double>::quiet_NaN();
};

/// Parses JSON lines (blank lines skipped). `path` names the source in errors.
std::vector<EvalRecord> parseEvalJsonl(const std::string& text, const std::string& path);
std::vector<EvalRecord> readEvalJsonl(const std::string& path);

/// One (task, method, parameters) over its examples.
struct EvalPointStats {
    std::string task, metric, method, params;
    std::map<std::string, double> numbers;
    int64_t n = 0;
    double mean = 0, stderr_ = 0; ///< of the metric (standard error of the mean)
    double compression = 1;       ///< mean over the examples
    /// The mean measured speed-up over its examples that carry one (NaN: none do).
    double speedup = std::numeric_limits<double>::quiet_NaN();
};

/// The points of `xy` no other point beats on both (larger x and larger y): the Pareto front of
/// score against speed-up, ascending in x.
std::vector<std::pair<double, double>> paretoFront(std::vector<std::pair<double, double>> xy);
/// That front as a dashed series named "Pareto front".
Series paretoSeries(const std::vector<std::pair<double, double>>& xy);

/// Grouped by (task, method, params), in order of first appearance.
std::vector<EvalPointStats> summariseEval(const std::vector<EvalRecord>& records);

/// The figures: per task "eval_<task>" and "eval_<task>_sparq_r"; for the needle,
/// "eval_needle_<method>…" heatmaps of accuracy per depth and length.
std::vector<FigureData> evalFigures(const std::vector<EvalRecord>& records);

/// The Table 2 layout as CSV (task, method, target, compression, value, stderr, params) and as
/// Markdown (one row per method, per task the values nearest 1/2, 1/4, 1/8 as "v ± se").
std::string evalTableCsv(const std::vector<EvalRecord>& records);
std::string evalTableMarkdown(const std::vector<EvalRecord>& records);

} // namespace sparqlab::analysis
