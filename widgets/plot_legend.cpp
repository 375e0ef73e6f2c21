// Where a plot's legend goes (plot_legend.h), and the checks the tests ask of it (plot_checks.h's
// curveUnderLegend and legendPlace).

#include "plot_legend.h"

#include "plot_checks.h"
#include "plot_style.h"

#include <QPointer>

#include <algorithm>
#include <cmath>
#include <memory>

namespace sparqlab::widgets::style {

namespace {
/// The room a legend keeps from the curves: a line running along its frame reads as crowded.
constexpr int kLegendClearance = 8;
/// Half a mark's width (a circle or a cross on a point): the legend's room is from its edge.
constexpr int kMarkRadius = 4;

/// Lays `legend`'s entries out in rows, filled across: the fewest rows whose entries fit `width`
/// px (one row where all do; 6 entries go 6, 3 + 3, 2 + 2 + 2, …).
void wrapInRows(QCPLegend* legend, int width) {
    const int count = std::max(1, legend->itemCount());
    for (int rows = 1; rows <= count; ++rows) {
        legend->setWrap((count + rows - 1) / rows);
        legend->setFillOrder(QCPLegend::foColumnsFirst, true); // (setWrap moves none)
        if (legend->minimumOuterSizeHint().width() <= width)
            return;
    }
}

/// One column of entries.
void oneColumn(QCPLegend* legend) {
    legend->setWrap(0);
    legend->setFillOrder(QCPLegend::foRowsFirst, true);
}

} // namespace

void setLegendAbove(QCustomPlot* plot, bool above) {
    QCPLegend* legend = plot->legend;
    if ((legend->layout() == plot->plotLayout()) == above)
        return;
    if (above) {
        plot->axisRect()->insetLayout()->take(legend);
        plot->plotLayout()->insertRow(0);
        plot->plotLayout()->addElement(0, 0, legend);
        plot->plotLayout()->setRowStretchFactor(0, 0.001);
        legend->setFillOrder(QCPLegend::foColumnsFirst, true);
        legend->setBorderPen(Qt::NoPen);
    } else {
        plot->plotLayout()->take(legend);
        plot->plotLayout()->simplify(); // (the legend's row, empty now)
        plot->axisRect()->insetLayout()->addElement(legend, Qt::AlignTop | Qt::AlignRight);
        oneColumn(legend);                        // (a row above may have wrapped it)
        legend->setBorderPen(QPen(Qt::black, 0)); // QCustomPlot's own
    }
}

void placeLegendAwayFrom(QCustomPlot* plot, const std::vector<float>& y) {
    // A short plot (under the teaching bar) has its legend as a row above the axes: inside, its
    // column of entries reached the foot and covered the marks there. The widget's height
    // decides, which moving the legend does not change.
    constexpr int kShortPlot = 200;
    const auto above = [plot] { // in as few rows as the plot's width holds
        setLegendAbove(plot, true);
        wrapInRows(plot->legend, plot->width());
        layOutAgain(plot);
    };
    if (plot->height() < kShortPlot)
        return above();
    setLegendAbove(plot, false);
    layOutAgain(plot); // (the axes' height below, with the legend back inside)
    // The thirds of the x range in sight (the user's zoom), y[i] drawn at x = i.
    const int64_t n = static_cast<int64_t>(y.size());
    if (n == 0)
        return;
    const QCPRange x = plot->xAxis->range();
    const float left = lineMaxBetween(y, x.lower, x.lower + x.size() / 3);
    const float right = lineMaxBetween(y, x.upper - x.size() / 3, x.upper);
    const Qt::Alignment corner = Qt::AlignTop | (right < left ? Qt::AlignRight : Qt::AlignLeft);
    if (plot->axisRect()->insetLayout()->insetAlignment(0) != corner) {
        plot->axisRect()->insetLayout()->setInsetAlignment(0, corner);
        layOutAgain(plot); // (a replot under way draws it in its new corner)
    }
    // Room above that third's peak for the legend (its height, and a margin), once the plot
    // has been laid out.
    const double rectHeight = plot->axisRect()->height();
    // (from the axes' top to the legend's foot as laid out, and the room under it to the peak's
    // mark)
    const double legendHeight = plot->legend->outerRect().bottom() -
                                plot->axisRect()->rect().top() + kLegendClearance + kMarkRadius;
    if (rectHeight <= 0)
        return;
    if (legendHeight >= 0.8 * rectHeight) // a column of entries nearly as tall as the axes
        return above();
    // The peak at (1 − the legend's share) of the axes' height, in the axis' own scale.
    const QCPRange r = plot->yAxis->range();
    const double peak = std::min(left, right);
    const double share = 1.0 - legendHeight / rectHeight;
    const bool log = plot->yAxis->scaleType() == QCPAxis::stLogarithmic;
    const double upper =
        log ? (peak > r.lower ? r.lower * std::pow(peak / r.lower, 1.0 / share) : r.upper)
            : r.lower + (peak - r.lower) / share;
    if (upper > r.upper) {
        plot->yAxis->setRangeUpper(upper);
        layOutAgain(plot); // (wider tick labels move the axes)
    }
}

namespace {
/// How much of the plot's named graphs (their points, and their lines every 3 px) and bars lies
/// in `legend` or within kLegendClearance px of it, in pixels as laid out now. (A band's edges are
/// unnamed: a legend may lie on a band.)
int curveIn(QCustomPlot* plot, const QRect& legend) { // (QCustomPlot::plottable is not const)
    const QRectF box = QRectF(legend).adjusted(-kLegendClearance, -kLegendClearance,
                                               kLegendClearance, kLegendClearance);
    int n = 0;
    for (int i = 0; i < plot->plottableCount(); ++i) {
        const QCPAbstractPlottable* p = plot->plottable(i);
        if (p->name().isEmpty() || !p->visible())
            continue;
        const QCPAxis* kx = p->keyAxis();
        const QCPAxis* vy = p->valueAxis();
        const auto pixel = [&](double key, double value) {
            return QPointF(kx->coordToPixel(key), vy->coordToPixel(value));
        };
        if (const auto* b = qobject_cast<const QCPBars*>(p)) {
            for (auto it = b->data()->constBegin(); it != b->data()->constEnd(); ++it)
                n += box.contains(pixel(it->key, it->value)) ? 1 : 0;
            continue;
        }
        const auto* g = qobject_cast<const QCPGraph*>(p);
        if (!g)
            continue;
        bool first = true;
        QPointF prev;
        for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
            const QPointF at = pixel(it->key, it->value);
            if (!std::isfinite(at.x()) || !std::isfinite(at.y()))
                continue;
            n += box.contains(at) ? 1 : 0;
            if (!first && g->lineStyle() != QCPGraph::lsNone) {
                const int steps = std::min(2000, static_cast<int>(QLineF(prev, at).length() / 3));
                for (int s = 1; s < steps; ++s)
                    n +=
                        box.contains(prev + (at - prev) * (static_cast<double>(s) / steps)) ? 1 : 0;
            }
            prev = at;
            first = false;
        }
    }
    return n;
}

/// The legend the plot shows, wherever it is laid out (in the axes, above, beside or under
/// them): QCustomPlot's own (a figure's first legend is that too) where it shows, else the first
/// one in an axis rect's inset layout; null where none shows.
const QCPLegend* shownLegend(const QCustomPlot* plot) {
    if (plot->legend && plot->legend->visible() && plot->legend->layout())
        return plot->legend;
    for (const QCPAxisRect* rect : plot->axisRects())
        for (int i = 0; i < rect->insetLayout()->elementCount(); ++i)
            if (const auto* l = qobject_cast<const QCPLegend*>(rect->insetLayout()->elementAt(i));
                l && l->visible())
                return l;
    return nullptr;
}
} // namespace

namespace {
/// Moves `legend` from its axes' inset layout out of the axes: to a column right of them (one
/// column of entries, at the top), or to a row under them (its entries in as few rows as the
/// plot's width holds, centred), whichever leaves the axes the larger area — a tall narrow
/// figure (the lab's Paper figures tab) keeps its axes wide. Spacers take the rest of the
/// legend's cell: a legend stretched over it would spread its entries.
void placeOutsideAxes(QCustomPlot* plot, QCPLegend* legend) {
    QCPLayoutGrid* grid = plot->plotLayout();
    auto* inset = qobject_cast<QCPLayoutInset*>(legend->layout());
    int row = 0, column = 0;
    QRect axes;
    for (int i = 0; i < grid->elementCount(); ++i)
        if (const auto* rect = qobject_cast<const QCPAxisRect*>(grid->elementAt(i));
            rect && rect->insetLayout() == inset) {
            grid->indexToRowCol(i, row, column);
            axes = rect->outerRect();
        }
    constexpr int kGap = 6;
    oneColumn(legend);
    const QSize column1 = legend->minimumOuterSizeHint();
    wrapInRows(legend, plot->viewport().width() - 2 * kGap); // under the axes
    const QSize wrapped = legend->minimumOuterSizeHint();
    const double besideArea = static_cast<double>(axes.width() - column1.width() - kGap) *
                              static_cast<double>(axes.height());
    const double underArea = static_cast<double>(axes.width()) *
                             static_cast<double>(axes.height() - wrapped.height() - kGap);
    inset->take(legend);
    inset->simplify();
    auto* cell = new QCPLayoutGrid;
    if (besideArea >= underArea) {
        oneColumn(legend);
        grid->addElement(row, grid->columnCount(), cell);
        grid->setColumnStretchFactor(grid->columnCount() - 1, 0.001);
        cell->addElement(0, 0, legend);
        cell->addElement(1, 0, new QCPLayoutElement(plot));
        cell->setRowStretchFactor(0, 0.001);
        cell->setMargins(QMargins(0, kGap, kGap, 0));
    } else {
        grid->insertRow(row + 1);
        grid->addElement(row + 1, column, cell);
        grid->setRowStretchFactor(row + 1, 0.001);
        cell->addElement(0, 0, new QCPLayoutElement(plot));
        cell->addElement(0, 1, legend);
        cell->addElement(0, 2, new QCPLayoutElement(plot));
        cell->setColumnStretchFactor(1, 0.001);
        cell->setMargins(QMargins(0, 0, 0, kGap));
    }
    layOutAgain(plot);
}

/// Takes `legend` back from out of the axes (placeOutsideAxes) into their inset layout `home`:
/// its cell and spacers are removed from the plot's layout, and its entries are one column again.
void bringBack(QCustomPlot* plot, QCPLegend* legend, QCPLayoutInset* home) {
    auto* cell = qobject_cast<QCPLayoutGrid*>(legend->layout());
    if (!cell)
        return;
    cell->take(legend);
    plot->plotLayout()->remove(cell); // (and deletes it, its spacers with it)
    plot->plotLayout()->simplify();   // (the row or column it had)
    oneColumn(legend);
    home->addElement(legend, Qt::AlignTop | Qt::AlignRight);
}
} // namespace

void keepLegendClear(QCustomPlot* plot, QCPLegend* legend, Qt::Alignment preferred) {
    const QPointer<QCPLayoutInset> home = qobject_cast<QCPLayoutInset*>(legend->layout());
    if (!home)
        return;
    // The plot's size (a saved figure's viewport) when the legend last left the axes: at another
    // size it is placed again, a corner of the axes first.
    auto leftAt = std::make_shared<QRect>();
    QObject::connect(plot, &QCustomPlot::afterLayout, legend, [=] {
        if (!home) // (its axes removed without it)
            return;
        if (legend->layout() != home) {
            if (plot->viewport() == *leftAt)
                return;
            bringBack(plot, legend, home);
        }
        int index = -1;
        for (int i = 0; i < home->elementCount(); ++i)
            if (home->elementAt(i) == legend)
                index = i;
        if (index < 0)
            return;
        const Qt::Alignment v = preferred & Qt::AlignVertical_Mask,
                            h = preferred & Qt::AlignHorizontal_Mask;
        const Qt::Alignment otherV = v == Qt::AlignTop ? Qt::AlignBottom : Qt::AlignTop,
                            otherH = h == Qt::AlignRight ? Qt::AlignLeft : Qt::AlignRight;
        Qt::Alignment best = v | h;
        int least = -1;
        for (const Qt::Alignment corner : {v | h, otherV | h, v | otherH, otherV | otherH}) {
            home->setInsetAlignment(index, corner);
            layOutAgain(plot);
            const int under = curveIn(plot, legend->outerRect());
            if (least < 0 || under < least) {
                least = under;
                best = corner;
            }
            if (under == 0)
                break;
        }
        if (least > 0) { // no corner is clear (a long list of methods): out of the axes
            placeOutsideAxes(plot, legend);
            *leftAt = plot->viewport();
            return;
        }
        if (home->insetAlignment(index) != best) {
            home->setInsetAlignment(index, best);
            layOutAgain(plot); // (the replot under way draws it there)
        }
    });
}

int curveUnderLegend(const QWidget* widget) {
    auto* plot = qobject_cast<QCustomPlot*>(const_cast<QWidget*>(widget));
    const QCPLegend* legend = plot ? shownLegend(plot) : nullptr;
    return legend ? curveIn(plot, legend->outerRect()) : 0;
}

QString legendPlace(const QWidget* widget) {
    auto* plot = qobject_cast<QCustomPlot*>(const_cast<QWidget*>(widget));
    if (!plot || !plot->axisRect())
        return {};
    const QRect axes = plot->axisRect()->rect();
    for (const QCPLegend* legend : plot->findChildren<QCPLegend*>()) {
        if (!legend->visible() || !legend->layout())
            continue;
        if (qobject_cast<const QCPLayoutInset*>(legend->layout()))
            return QStringLiteral("inside");
        const QRect r = legend->outerRect();
        if (r.left() >= axes.right())
            return QStringLiteral("right");
        if (r.top() >= axes.bottom())
            return QStringLiteral("below");
        if (r.bottom() <= axes.top())
            return QStringLiteral("above");
    }
    return {};
}

} // namespace sparqlab::widgets::style
