#pragma once
/// \file plot_legend.h
/// Where a plot's legend goes: clear of its curves, in a corner of the axes or out of them (a
/// figure's, keepLegendClear), in the top corner away from the peaks with room above them (a
/// scores plot's, placeLegendAwayFrom), or in a row above the axes (setLegendAbove); and how
/// tests see it (plot_checks.h's curveUnderLegend and legendPlace). Internal to widgets/.

#include <qcustomplot.h>

#include <vector>

namespace sparqlab::widgets::style {

/// Puts the legend in a row of its own above the axes (`above`), where it covers no data, or
/// back in the axes' top corner.
void setLegendAbove(QCustomPlot* plot, bool above);
/// Puts the legend in the top corner (left or right) whose third of the x range in sight holds
/// the lower values of `y` (y[i] drawn at x = i; the highest of every curve drawn), and raises the
/// y range where that third's peak would still reach under it: the legend covers no peak. A
/// plot too short for that, or whose legend is nearly as tall as its axes, has the legend above
/// them (in one row, or three or two columns). Call after the y range is set; the
/// plot is laid out again, so that a replot under way (afterLayout) draws the legend where it goes.
void placeLegendAwayFrom(QCustomPlot* plot, const std::vector<float>& y);
/// Keeps `legend` (in its axes' inset layout) in the corner where it covers, or comes within a
/// few pixels of, the least of the plot's named curves, `preferred` (a corner) where two are as
/// clear: chosen again after
/// each layout, before the replot under way draws (a saved figure's size included). Where no
/// corner is clear it goes out of the axes, right of them or under them (whichever leaves them
/// the larger area), and stays there.
void keepLegendClear(QCustomPlot* plot, QCPLegend* legend, Qt::Alignment preferred);
} // namespace sparqlab::widgets::style
