#pragma once
/// \file ruler_table.h
/// RULER's summary of an eval results file (LONGCONTEXT.md §8–9): per method and parameter
/// set, each RULER task's score at each length (100 × the mean of string_match_all, 2 decimals)
/// and the mean over the tasks; as CSV, as Markdown (tasks × lengths per method) and as figures
/// (the mean score against the length per method, and against the compression per length).

#include "analysis/eval_figures.h"

#include <limits>
#include <string>
#include <vector>

namespace sparqlab::analysis {

/// One (method and parameters, length, task) of the RULER records; task "average" is the mean
/// of the tasks' scores at that length.
struct RulerCell {
    std::string point; ///< the method and its parameters, e.g. "sparq k=64 r=16"
    int64_t length = 0;
    std::string task;
    int64_t n = 0;    ///< examples
    double score = 0; ///< 100 × mean
    double compression = 1;
    double speedup = std::numeric_limits<double>::quiet_NaN(); ///< measured (NaN: not)
};

/// The cells, points in order of first appearance, lengths ascending, tasks as RULER lists
/// them; empty when no record is of a RULER task.
std::vector<RulerCell> rulerCells(const std::vector<EvalRecord>& records);
std::string rulerTableCsv(const std::vector<EvalRecord>& records);
std::string rulerTableMarkdown(const std::vector<EvalRecord>& records);
std::vector<FigureData> rulerFigures(const std::vector<EvalRecord>& records);

} // namespace sparqlab::analysis
