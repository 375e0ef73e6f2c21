#pragma once
/// \file plot_checks.h
/// What the tests ask of any plot of the window, and the range they set on it as a user's drag
/// or wheel does, without QCustomPlot's header (which needs Qt's keywords, off in the code that
/// includes libtorch). The views set and read their plots' ranges through the same calls.

#include <QString>

#include <utility>
#include <vector>

class QWidget;

namespace sparqlab::widgets::style {

/// What makes a QCustomPlot's left value axis, as last drawn, hard to read: two ticks less than a
/// line of their labels' font apart ("ticks A and B are N px apart, a line is M"), or a label
/// longer than the axis's cell ("its label "L" needs N px of M") (empty: neither, or not a plot).
QString illegibleLeftAxis(const QWidget* plot);

/// A QCustomPlot's x range (lower, upper), as a drag or a wheel leaves it; and set, as they do.
/// Not a plot: (0, 0), and nothing set.
std::pair<double, double> xRange(const QWidget* plot);
void setXRange(QWidget* plot, double lower, double upper);
/// The top of a QCustomPlot's y range (not a plot: 0).
double yTop(const QWidget* plot);
/// Its y range (lower, upper), and whether that axis is logarithmic (not a plot: (0, 0), false).
std::pair<double, double> yRange(const QWidget* plot);
bool yLogarithmic(const QWidget* plot);
/// How much of a QCustomPlot's named curves its legend covers or comes within 8 px of, as last
/// laid out, wherever it stands (legendPlace): their points, and their lines every 3 px (0: none,
/// or no legend shows).
int curveUnderLegend(const QWidget* plot);
/// Where a QCustomPlot's legend stands as last laid out: "inside" its axes, "right" of them,
/// "below" them (or "above"); empty where none shows, or not a plot.
QString legendPlace(const QWidget* plot);
/// The (x, y) points of a QCustomPlot's graph or bars named `name` in its legend, in their
/// order; empty where none is (or not a plot).
std::vector<std::pair<double, double>> seriesPoints(const QWidget* plot, const QString& name);

} // namespace sparqlab::widgets::style
