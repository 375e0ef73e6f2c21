#pragma once
/// \file figures.h
/// The data of the paper's figures (Fig. 2/C1, Fig. 4 a–f, Fig. E1, Fig. E2, Table 1) from the
/// statistics of a capture, as plain series and grids: no drawing here (widgets/ draws them),
/// so the numbers can be written as CSV and tested without a display.

#include "analysis/stats_run.h"
#include "capture/capture_file.h"

#include <string>
#include <vector>

namespace sparqlab::analysis {

/// One plotted series.
struct Series {
    enum class Style { Line, Points, Bars, Dashed };
    std::string name;
    std::vector<double> x, y;
    Style style = Style::Line;
    std::vector<double> yErr; ///< ±1 standard error per point, drawn as a band (empty: none)
};

/// A figure: either series on x/y axes, or a grid (heatmap).
struct FigureData {
    std::string id;    ///< file name stem, e.g. "fig4a_coverage_histogram"
    std::string title; ///< e.g. "Fig. 4a: top-32 attention coverage"
    std::string xLabel, yLabel;
    bool logX = false, logY = false;
    std::vector<Series> series;
    std::vector<std::string> xCategories;  ///< tick labels when x holds category indices
    std::vector<std::vector<double>> grid; ///< heatmap rows (y) × columns (x), when not empty
    std::string gridLabel;                 ///< colour-scale label
    double gridMin = 0, gridMax = 1;
    bool integerX = false;                ///< x holds indices (layers, heads): whole-number ticks
    bool legendBottom = false;            ///< the legend goes bottom right (data in the top right)
    std::vector<double> xMarkers;         ///< vertical dotted lines (e.g. 1/2, 1/4, 1/8)
    std::vector<std::string> yCategories; ///< heatmap row labels (else row indices)
    /// What it shows and why it matters to SparQ, in a sentence or two (the lab's Paper view).
    std::string caption;
};

/// Every figure. kdeLayer chooses the layer of Fig. 4c (clamped to the model's layers).
std::vector<FigureData> paperFigures(const StatsResult& stats, const model::CaptureInfo& info,
                                     const StatsOptions& options, int64_t kdeLayer);

/// The plotted numbers as CSV: for series "series,x,y" rows; for grids "row,column,value".
std::string figureCsv(const FigureData& f);

} // namespace sparqlab::analysis
