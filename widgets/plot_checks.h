#pragma once
/// \file plot_checks.h
/// What the tests ask of any plot of the window, without QCustomPlot's header (which needs Qt's
/// keywords, off in the code that includes libtorch).

#include <QString>

class QWidget;

namespace sparqlab::widgets::style {

/// What makes a QCustomPlot's left value axis, as last drawn, hard to read: two ticks less than a
/// line of their labels' font apart ("ticks A and B are N px apart, a line is M"), or a label
/// longer than the axis's cell ("its label "L" needs N px of M") (empty: neither, or not a plot).
QString illegibleLeftAxis(const QWidget* plot);

} // namespace sparqlab::widgets::style
