#pragma once
/// \file plot_checks.h
/// What the tests ask of any plot of the window, without QCustomPlot's header (which needs Qt's
/// keywords, off in the code that includes libtorch).

#include <QString>

class QWidget;

namespace sparqlab::widgets::style {

/// Where a QCustomPlot's left value axis, as last drawn, has two ticks less than a line of their
/// labels' font apart: "ticks A and B are N px apart, a line is M" (empty: none, or not a plot).
QString crowdedTickLabels(const QWidget* plot);

} // namespace sparqlab::widgets::style
