#pragma once
/// \file plot_style.h
/// What the lab's plots share: the colours of the exact and approximate scores, the chosen and
/// the true sets and the local window; marks on a scores plot; the axes and interactions of a
/// plot (where their legends go: plot_legend.h). Internal to widgets/.

#include "attention/method_table.h"

#include <qcustomplot.h>

#include <QColor>
#include <QString>
#include <QVector>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

namespace sparqlab::analysis {
struct HeadState;
}

namespace sparqlab::widgets::style {

inline const QColor kExact(31, 119, 180);  // blue
inline const QColor kApprox(255, 127, 14); // orange
inline const QColor kChosen(44, 160, 44);  // green
inline const QColor kTrue(214, 39, 40);    // red
inline const QColor kLocal(148, 103, 189, 50);
inline const QColor kModel(23, 190, 207); // cyan: a model's own choice (DeepSeek-V4's indexer)

/// A method's colour and marker on the plots that draw several methods (the timing curves):
/// distinct for every decode-engine method (ten colours, none dense's blue, and ten markers,
/// both by the method's place in the method table), so curves stay apart in grey too.
QColor methodColor(attention::Method m);
QCPScatterStyle::ScatterShape methodMarker(attention::Method m);

/// 0, 1, …, n − 1.
QVector<double> iota(size_t n);
QVector<double> toQ(const std::vector<float>& x);
/// The positions [from, to) within a scores plot's x range (position i drawn at x = i), of S.
std::pair<int64_t, int64_t> positionsInSight(const QCustomPlot* plot, int64_t S);
/// A scores plot's x range over every one of S positions (position i at x = i).
void showAllPositions(QCustomPlot* plot, int64_t S);
/// A scores plot whose positions the user drags and zooms: `follow` runs after its x range
/// moves, at most once every 30 ms while it keeps moving and once after it stops (coalesced: a
/// drag moves it many times); a double-click shows every position again (`positions()` of them).
void followPositionRange(QCustomPlot* plot, std::function<void()> follow,
                         std::function<int64_t()> positions);
/// The highest the lines of `curves` (each S long, or empty) reach in sight: at a position in it,
/// or where a line crosses its edge on its way to a position out of sight; 0 if none is there.
float peakInSight(const QCustomPlot* plot, std::initializer_list<const std::vector<float>*> curves);
/// Marks keys `idx` on a scores plot at their exact weight: chosen sets, true top-k; key j drawn
/// at x = j, or at keyX[j] where given (DeepSeek-V4's entries at the positions they pool).
/// Returns the graph of marks it adds (always one, empty where idx is).
QCPGraph* addMarks(QCustomPlot* plot, const std::vector<int64_t>& idx,
                   const std::vector<float>& exact, const QString& name, const QColor& c,
                   QCPScatterStyle::ScatterShape shape, double size,
                   const std::vector<double>* keyX = nullptr);
/// A head's weights over keys (`byKey`: exact s, ŝ) on a scores plot whose x axis is positions:
/// the positions' own as a graph named `name`; on a DeepSeek-V4 compressed layer the entries' at
/// the positions they pool (HeadState::keyPosition), as bars named `entriesName` or, with none,
/// a dashed line under the graph's legend entry (dotted where `pen` is dashed). Returns the
/// positions' graph.
QCPGraph* addKeyCurve(QCustomPlot* plot, const analysis::HeadState& h,
                      const std::vector<float>& byKey, const QString& name, const QPen& pen,
                      const QString& entriesName = QString());
/// Viridis (matplotlib's perceptual colour map): dark violet to yellow, even in lightness, and
/// never the white of the background (a best cell never looks empty).
QCPColorGradient viridis();
/// Lays the plot out again now, with QCustomPlot's own passes: what moved is measured where it
/// went, and a replot under way (from afterLayout) draws it there, not once at its old place.
void layOutAgain(QCustomPlot* plot);
/// The highest the line through y (y[i] at x = i) reaches between x = lower and x = upper: at a
/// point between them, or where it crosses one of them (the line to a point out of sight is
/// drawn up to the edge). 0 where none of it is there.
float lineMaxBetween(const std::vector<float>& y, double lower, double upper);
/// Labels, horizontal drag and zoom, a minimum height, fast drawing.
void basicPlot(QCustomPlot* p, const QString& x, const QString& y);
/// Ticks at whole numbers only, for an axis of positions or components (a 13-token prompt had
/// ticks at 2.5, 7.5 and 12.5).
void wholeTicks(QCPAxis* axis);
/// As many ticks as the axis's length in pixels holds at one per `pixelsPerTick` (2 to 6), so
/// that a plot made short (a teaching page, 125 % scale) keeps its labels apart.
void ticksByLength(QCPAxis* axis, int pixelsPerTick = 30);
/// The axis's label as set now, or `brief` at each draw where the plot is too short (a vertical
/// axis) or narrow (a horizontal one) to show it whole (a teaching page at 125 % cut "attention
/// score" to "attention scor").
void labelByLength(QCPAxis* axis, const QString& brief);

} // namespace sparqlab::widgets::style
