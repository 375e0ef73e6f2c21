// What the lab's plots share (plot_style.h): colours and marks, axes and their ticks, and the
// checks the tests ask of any plot's axes and curves (plot_checks.h; of its legend:
// plot_legend.cpp).

#include "plot_style.h"

#include "analysis/lab.h"
#include "plot_checks.h"

#include <QTimer>

#include <algorithm>
#include <cmath>

namespace sparqlab::widgets::style {

namespace {
/// The method's place among the decode-engine methods (dense left out), or among all methods
/// after them for the others.
size_t methodPlace(attention::Method m) {
    size_t engine = 0, other = 0;
    for (const attention::MethodInfo& info : attention::methods()) {
        const bool isEngine = info.fastDecode && info.id != attention::Method::Dense;
        if (info.id == m)
            return isEngine ? engine : 10 + other;
        (isEngine ? engine : other) += 1;
    }
    return 0;
}
} // namespace

QColor methodColor(attention::Method m) {
    // Tableau's ten without its blue (dense's), and black.
    static const QColor colors[] = {
        QColor(255, 127, 14), QColor(44, 160, 44),   QColor(214, 39, 40),   QColor(148, 103, 189),
        QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34),
        QColor(23, 190, 207), QColor(0, 0, 0)};
    return colors[methodPlace(m) % 10];
}

QCPScatterStyle::ScatterShape methodMarker(attention::Method m) {
    static const QCPScatterStyle::ScatterShape shapes[] = {
        QCPScatterStyle::ssDisc,     QCPScatterStyle::ssSquare,
        QCPScatterStyle::ssTriangle, QCPScatterStyle::ssDiamond,
        QCPScatterStyle::ssCross,    QCPScatterStyle::ssPlus,
        QCPScatterStyle::ssStar,     QCPScatterStyle::ssTriangleInverted,
        QCPScatterStyle::ssCircle,   QCPScatterStyle::ssCrossSquare};
    return shapes[methodPlace(m) % 10];
}

QVector<double> iota(size_t n) {
    QVector<double> v(static_cast<int>(n));
    for (int i = 0; i < v.size(); ++i)
        v[i] = i;
    return v;
}

QVector<double> toQ(const std::vector<float>& x) {
    return QVector<double>(x.begin(), x.end());
}

/// Marks positions `idx` on a scores plot at their exact weight: chosen sets, true top-k.
QCPGraph* addMarks(QCustomPlot* plot, const std::vector<int64_t>& idx,
                   const std::vector<float>& exact, const QString& name, const QColor& c,
                   QCPScatterStyle::ScatterShape shape, double size,
                   const std::vector<double>* keyX) {
    QVector<double> x, y;
    for (const int64_t j : idx)
        if (j >= 0 && static_cast<size_t>(j) < exact.size()) {
            x.push_back(keyX && static_cast<size_t>(j) < keyX->size()
                            ? (*keyX)[static_cast<size_t>(j)]
                            : static_cast<double>(j));
            y.push_back(exact[static_cast<size_t>(j)]);
        }
    QCPGraph* g = plot->addGraph();
    g->setName(name);
    g->setData(x, y, /*alreadySorted=*/keyX == nullptr); // (entries among positions: sorted here)
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(shape, c, size));
    return g;
}

QCPGraph* addKeyCurve(QCustomPlot* plot, const analysis::HeadState& h,
                      const std::vector<float>& byKey, const QString& name, const QPen& pen,
                      const QString& entriesName) {
    const auto C = static_cast<std::ptrdiff_t>(h.entries);
    if (C > 0) {
        const std::vector<double> x = h.keyPositions();
        const QVector<double> ex(x.begin(), x.begin() + C), ey(byKey.begin(), byKey.begin() + C);
        if (!entriesName.isEmpty()) {
            auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
            bars->setName(entriesName);
            bars->setData(ex, ey, true);
            bars->setWidth(0.9 * static_cast<double>(h.entryRate));
            QColor fill = pen.color();
            fill.setAlpha(70);
            bars->setBrush(fill);
            bars->setPen(QPen(pen.color(), 0.8));
            bars->setLayer(QStringLiteral("background"));
        } else {
            QCPGraph* line = plot->addGraph();
            line->setData(ex, ey, true);
            QPen apart = pen; // dashed; dotted where the positions' line is dashed (Compare's ŝ)
            apart.setStyle(pen.style() == Qt::DashLine ? Qt::DotLine : Qt::DashLine);
            line->setPen(apart);
            line->removeFromLegend();
        }
    }
    QCPGraph* g = plot->addGraph();
    g->setName(name);
    g->setData(iota(byKey.size() - static_cast<size_t>(C)),
               QVector<double>(byKey.begin() + C, byKey.end()), true);
    g->setPen(pen);
    return g;
}

namespace {
/// The positions [from, to) of S drawn between x = lower and x = upper (position i at x = i; the
/// bounds clamped first: a range zoomed far out would not fit an integer).
std::pair<int64_t, int64_t> positionsBetween(double lower, double upper, int64_t S) {
    const auto S1 = static_cast<double>(S);
    const int64_t to = std::clamp<int64_t>(
        static_cast<int64_t>(std::floor(std::clamp(upper, -1.0, S1))) + 1, 0, S);
    return {
        std::clamp<int64_t>(static_cast<int64_t>(std::ceil(std::clamp(lower, -1.0, S1))), 0, to),
        to};
}

} // namespace

float lineMaxBetween(const std::vector<float>& y, double lower, double upper) {
    const auto n = static_cast<int64_t>(y.size());
    const auto [from, to] = positionsBetween(lower, upper, n);
    float peak = from < to ? *std::max_element(y.begin() + from, y.begin() + to) : 0.0f;
    for (const double x : {lower, upper})
        if (x > 0 && x < static_cast<double>(n - 1)) {
            const auto i = static_cast<size_t>(std::floor(x));
            const double t = x - static_cast<double>(i);
            peak = std::max(peak, static_cast<float>((1 - t) * y[i] + t * y[i + 1]));
        }
    return peak;
}

void showAllPositions(QCustomPlot* plot, int64_t S) {
    plot->xAxis->setRange(-0.5, static_cast<double>(S) - 0.5);
    plot->replot(QCustomPlot::rpQueuedReplot);
}

void followPositionRange(QCustomPlot* plot, std::function<void()> follow,
                         std::function<int64_t()> positions) {
    auto* timer = new QTimer(plot);
    timer->setSingleShot(true);
    timer->setInterval(30);
    QObject::connect(timer, &QTimer::timeout, plot, std::move(follow));
    // (started only when idle: a timer restarted at each move would wait for the drag's end)
    QObject::connect(plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), timer,
                     [timer] {
                         if (!timer->isActive())
                             timer->start();
                     });
    QObject::connect(
        plot, &QCustomPlot::mouseDoubleClick, plot,
        [plot, positions = std::move(positions)] { showAllPositions(plot, positions()); });
}

std::pair<int64_t, int64_t> positionsInSight(const QCustomPlot* plot, int64_t S) {
    return positionsBetween(plot->xAxis->range().lower, plot->xAxis->range().upper, S);
}

float peakInSight(const QCustomPlot* plot,
                  std::initializer_list<const std::vector<float>*> curves) {
    float peak = 0;
    for (const std::vector<float>* c : curves)
        peak = std::max(peak,
                        lineMaxBetween(*c, plot->xAxis->range().lower, plot->xAxis->range().upper));
    return peak;
}

void basicPlot(QCustomPlot* p, const QString& x, const QString& y) {
    p->xAxis->setLabel(x);
    p->yAxis->setLabel(y);
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    p->axisRect()->setRangeDrag(Qt::Horizontal);
    p->axisRect()->setRangeZoom(Qt::Horizontal);
    p->setMinimumHeight(80);
    p->setPlottingHints(QCP::phFastPolylines | QCP::phCacheLabels);
}

QCPColorGradient viridis() {
    // matplotlib's viridis at nine evenly spaced points.
    static const QColor stops[] = {{68, 1, 84},    {71, 44, 122},  {59, 81, 139},
                                   {44, 113, 142}, {33, 144, 141}, {39, 173, 129},
                                   {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};
    QCPColorGradient g;
    g.clearColorStops();
    const int n = static_cast<int>(std::size(stops));
    for (int i = 0; i < n; ++i)
        g.setColorStopAt(static_cast<double>(i) / (n - 1), stops[i]);
    g.setColorInterpolation(QCPColorGradient::ciRGB);
    return g;
}

void layOutAgain(QCustomPlot* plot) {
    for (const auto phase :
         {QCPLayoutElement::upPreparation, QCPLayoutElement::upMargins, QCPLayoutElement::upLayout})
        plot->plotLayout()->update(phase);
}

namespace {
/// The axis's length in pixels as laid out now, and the room for its label (its axis rect's cell:
/// a legend above the axes takes a cell of its own).
int lengthOf(const QCPAxis* axis) {
    const QCPAxisRect* r = axis->axisRect();
    return axis->orientation() == Qt::Vertical ? r->height() : r->width();
}
int roomOf(const QCPAxis* axis) {
    // The label is centred on the axes and drawn within their cell: twice the nearer end's
    // distance from the centre.
    const QRect cell = axis->axisRect()->outerRect();
    const QPoint c = axis->axisRect()->rect().center();
    return axis->orientation() == Qt::Vertical
               ? 2 * std::min(c.y() - cell.top(), cell.bottom() - c.y())
               : 2 * std::min(c.x() - cell.left(), cell.right() - c.x());
}

/// The pixels the axis's label font takes for `text` along the axis.
int labelLength(const QCPAxis* axis, const QString& text) {
    return QFontMetrics(axis->labelFont()).horizontalAdvance(text);
}

/// After each layout (in the replot under way, before it draws), `fit` makes what depends on the
/// axis's length agree with the length laid out, true where it changed something; the plot is
/// then laid out again (the ticks and labels were made before the layout that sized them).
template <typename Fit> void fitAfterLayout(QCPAxis* axis, Fit fit) {
    QCustomPlot* plot = axis->parentPlot();
    QObject::connect(plot, &QCustomPlot::afterLayout, axis, [plot, fit] {
        for (int pass = 0; pass < 2 && fit(); ++pass)
            layOutAgain(plot);
    });
}
} // namespace

void ticksByLength(QCPAxis* axis, int pixelsPerTick) {
    fitAfterLayout(axis, [axis, pixelsPerTick] {
        const int count = std::clamp(lengthOf(axis) / pixelsPerTick, 2, 6);
        if (axis->ticker()->tickCount() == count)
            return false;
        axis->ticker()->setTickCount(count);
        return true;
    });
}

void labelByLength(QCPAxis* axis, const QString& brief) {
    const QString full = axis->label();
    fitAfterLayout(axis, [axis, full, brief] {
        const QString label = labelLength(axis, full) + 8 <= roomOf(axis) ? full : brief;
        if (axis->label() == label)
            return false;
        axis->setLabel(label);
        return true;
    });
}

std::pair<double, double> xRange(const QWidget* widget) {
    const auto* plot = qobject_cast<const QCustomPlot*>(widget);
    return plot ? std::pair{plot->xAxis->range().lower, plot->xAxis->range().upper}
                : std::pair{0.0, 0.0};
}

void setXRange(QWidget* widget, double lower, double upper) {
    if (auto* plot = qobject_cast<QCustomPlot*>(widget)) {
        plot->xAxis->setRange(lower, upper);
        plot->replot(QCustomPlot::rpQueuedReplot);
    }
}

double yTop(const QWidget* widget) {
    const auto* plot = qobject_cast<const QCustomPlot*>(widget);
    return plot ? plot->yAxis->range().upper : 0;
}

std::pair<double, double> yRange(const QWidget* widget) {
    const auto* plot = qobject_cast<const QCustomPlot*>(widget);
    return plot ? std::pair{plot->yAxis->range().lower, plot->yAxis->range().upper}
                : std::pair{0.0, 0.0};
}

bool yLogarithmic(const QWidget* widget) {
    const auto* plot = qobject_cast<const QCustomPlot*>(widget);
    return plot && plot->yAxis->scaleType() == QCPAxis::stLogarithmic;
}

std::vector<std::pair<double, double>> seriesPoints(const QWidget* widget, const QString& name) {
    std::vector<std::pair<double, double>> out;
    // (QCustomPlot::plottable is not const.)
    auto* plot = qobject_cast<QCustomPlot*>(const_cast<QWidget*>(widget));
    for (int i = 0; plot && i < plot->plottableCount(); ++i) {
        const QCPAbstractPlottable* p = plot->plottable(i);
        if (p->name() != name)
            continue;
        if (const auto* g = qobject_cast<const QCPGraph*>(p))
            for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
                out.emplace_back(it->key, it->value);
        else if (const auto* b = qobject_cast<const QCPBars*>(p))
            for (auto it = b->data()->constBegin(); it != b->data()->constEnd(); ++it)
                out.emplace_back(it->key, it->value);
        break;
    }
    return out;
}

QString illegibleLeftAxis(const QWidget* widget) {
    const auto* plot = qobject_cast<const QCustomPlot*>(widget);
    if (!plot)
        return {};
    for (QCPAxisRect* rect : plot->axisRects())
        for (QCPAxis* axis : rect->axes(QCPAxis::atLeft)) {
            if (!axis->visible() || !axis->tickLabels())
                continue;
            const int needs = labelLength(axis, axis->label());
            if (needs > roomOf(axis))
                return QStringLiteral("label \"%1\" needs %2 px of %3")
                    .arg(axis->label())
                    .arg(needs)
                    .arg(roomOf(axis));
            const QVector<double> ticks = axis->tickVector();
            const int line = QFontMetrics(axis->tickLabelFont()).height();
            for (int i = 1; i < ticks.size(); ++i) {
                const double gap =
                    std::abs(axis->coordToPixel(ticks[i]) - axis->coordToPixel(ticks[i - 1]));
                if (gap < line)
                    return QStringLiteral("ticks %1 and %2 are %3 px apart, a line is %4")
                        .arg(ticks[i - 1])
                        .arg(ticks[i])
                        .arg(gap, 0, 'f', 1)
                        .arg(line);
            }
        }
    return {};
}

void wholeTicks(QCPAxis* axis) {
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(1);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    axis->setTicker(ticker);
}

} // namespace sparqlab::widgets::style
