// Decode time against the sequence length, measured and theoretical speed-ups, where a method
// pays off.

#include "timing_view.h"
#include "figure_renderer.h"
#include "plot_style.h"

#include "attention/bench.h"
#include "attention/transfer.h"
#include "figure_renderer.h"

#include "attention/method_table.h"
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace sparqlab::widgets {

namespace att = sparqlab::attention;
using namespace style;

// --- TimingCurveView -----------------------------------------------------------------------

int64_t confidentPayoff(const std::vector<int64_t>& seq, const std::vector<double>& lower) {
    const size_t n = std::min(seq.size(), lower.size());
    if (n == 0)
        return -1;
    size_t from = n; // the first point of the run of points above 1 that reaches the end
    while (from > 0 && lower[from - 1] > 1)
        --from;
    if (from == n)
        return -1;
    return from == 0 ? 0 : seq[from];
}

namespace {

/// Ticks at 1, 2 and 5 × 10ⁿ inside the axis's range, labelled (a log axis over less than two
/// decades otherwise shows one label).
void ticks125(QCPAxis* axis) {
    const QCPRange r = axis->range();
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    if (r.lower <= 0 || r.upper <= r.lower)
        return;
    for (int e = static_cast<int>(std::floor(std::log10(r.lower)));
         e <= static_cast<int>(std::ceil(std::log10(r.upper))); ++e)
        for (const double m : {1.0, 2.0, 5.0}) {
            const double v = m * std::pow(10.0, e);
            if (v >= r.lower && v <= r.upper)
                t->addTick(v, QLocale().toString(v, 'g', 6));
        }
    t->setSubTickCount(0);
    axis->setTicker(t);
}

} // namespace

TimingCurveView::TimingCurveView(QWidget* parent)
    : Panel(tr("Decode time against sequence length"), parent), m_time(new QCustomPlot),
      m_speedup(new QCustomPlot), m_summary(new QLabel), m_progress(new QLabel),
      m_measure(new QPushButton(tr("Measure"))), m_cancel(new QPushButton(tr("Cancel"))) {
    setObjectName(QStringLiteral("timingCurveView"));
    // What is timed: the lab's method against dense, a second one beside it, all on request.
    m_second = new QComboBox;
    m_second->setObjectName(QStringLiteral("timingSecondBox"));
    m_second->addItem(tr("no second method"), QString());
    for (const att::MethodInfo& m : att::methods())
        if (m.fastDecode && m.id != att::Method::Dense)
            m_second->addItem(QString::fromUtf8(m.label), QString::fromUtf8(m.name));
    m_second->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_second->setMinimumContentsLength(12);
    m_every = new QCheckBox(tr("every engine method"));
    m_every->setObjectName(QStringLiteral("timingEveryBox"));
    auto* pick = new QHBoxLayout; // (narrow: the window fits a small laptop's 1000 px)
    auto* what = new QLabel(tr("Against dense: the lab's method and"));
    what->setWordWrap(true);
    pick->addWidget(what, 1);
    pick->addWidget(m_second);
    pick->addWidget(m_every);
    static_cast<QVBoxLayout*>(body()->layout())->addLayout(pick);
    connect(m_second, &QComboBox::currentIndexChanged, this, &TimingCurveView::methodsChanged);
    connect(m_every, &QCheckBox::toggled, this, [this](bool on) {
        m_second->setEnabled(!on);
        Q_EMIT methodsChanged();
    });
    m_measure->setObjectName(QStringLiteral("measureCurveButton"));
    m_cancel->setObjectName(QStringLiteral("cancelCurveButton"));
    m_summary->setObjectName(QStringLiteral("timingCurveSummary"));
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    auto* bar = new QHBoxLayout;
    bar->addWidget(m_progress, 1);
    bar->addWidget(m_measure);
    bar->addWidget(m_cancel);
    l->addLayout(bar);
    m_progress->setWordWrap(true);
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    for (QCustomPlot* p : {m_time, m_speedup}) {
        p->setPlottingHints(QCP::phCacheLabels);
        p->xAxis->setScaleType(QCPAxis::stLogarithmic);
        QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
        ticker->setLogBase(2);
        p->xAxis->setTicker(ticker);
        p->xAxis->setNumberFormat(QStringLiteral("f"));
        p->xAxis->setNumberPrecision(0);
        p->xAxis->setLabel(tr("sequence length S"));
        p->yAxis->setScaleType(QCPAxis::stLogarithmic);
        QSharedPointer<QCPAxisTickerLog> yt(new QCPAxisTickerLog);
        p->yAxis->setTicker(yt);
        // The legend beside the plot, not over the curves (many methods × devices).
        p->legend->setVisible(true);
        p->legend->setFont(QFont(font().family(), 8));
        p->legend->setRowSpacing(-3);
        // Its entries at the top of the column, one under the other (a legend given the
        // column's whole height spreads them over it): the legend above a spacer that takes
        // the rest.
        auto* column = new QCPLayoutGrid;
        p->plotLayout()->addElement(0, 1, column);
        p->plotLayout()->setColumnStretchFactor(1, 0.001);
        column->addElement(0, 0, p->legend);
        column->addElement(1, 0, new QCPLayoutElement(p));
        column->setRowStretchFactor(0, 0.001);
        column->setMargins(QMargins(0, 6, 4, 0));
        p->legend->setMaximumSize(260, QWIDGETSIZE_MAX);
        p->setMinimumHeight(160);
    }
    m_time->setObjectName(QStringLiteral("timePlot"));
    m_speedup->setObjectName(QStringLiteral("speedupPlot"));
    m_time->yAxis->setLabel(tr("decode step (µs)"));
    m_speedup->yAxis->setLabel(tr("speed-up over dense"));
    // Before the first curve: the ranges measured ones take, labelled (not "0 0 0 1").
    for (QCustomPlot* p : {m_time, m_speedup})
        p->xAxis->setRange(256 / 1.2, 32768 * 1.2);
    m_time->yAxis->setRange(1, 1e5);
    m_speedup->yAxis->setRange(0.1, 10);
    ticks125(m_time->yAxis);
    ticks125(m_speedup->yAxis);
    l->addWidget(m_time, 1);
    l->addWidget(m_speedup, 1);
    l->addWidget(m_summary);
    m_cancel->setEnabled(false);
    connect(m_measure, &QPushButton::clicked, this, &TimingCurveView::measureRequested);
    connect(m_cancel, &QPushButton::clicked, this, &TimingCurveView::cancelRequested);
    showProgress(tr("Run a prompt, then Measure: the decode step of this model's shape is timed "
                    "at S = 256 … 32,768 for dense and each method."),
                 false);
}

std::optional<att::Method> TimingCurveView::second() const {
    const QString name = m_second->currentData().toString();
    if (name.isEmpty())
        return std::nullopt;
    return att::parseMethod(name.toStdString());
}

void TimingCurveView::setSecond(std::optional<att::Method> m) {
    m_second->setCurrentIndex(
        m ? std::max(0, m_second->findData(QString::fromStdString(att::methodName(*m)))) : 0);
}

QColor TimingCurveView::colorOf(att::Method m) {
    return methodColor(m);
}

int TimingCurveView::markerOf(att::Method m) {
    return static_cast<int>(methodMarker(m));
}

QColor TimingCurveView::lineColor(int line) const {
    return m_time->graph(line)->pen().color();
}

int TimingCurveView::legendEntries(bool speedup) const {
    return (speedup ? m_speedup : m_time)->legend->itemCount();
}

double TimingCurveView::legendHeightShare(bool speedup) const {
    const QCustomPlot* p = speedup ? m_speedup : m_time;
    return static_cast<double>(p->legend->outerRect().height()) /
           std::max(1, p->axisRect()->outerRect().height());
}

bool TimingCurveView::everyMethod() const {
    return m_every->isChecked();
}

void TimingCurveView::setEveryMethod(bool on) {
    m_every->setChecked(on);
}

int TimingCurveView::timeLines() const {
    return m_time->graphCount();
}

QStringList TimingCurveView::yTickLabels(bool speedup) const {
    QCustomPlot* p = speedup ? m_speedup : m_time;
    p->replot(QCustomPlot::rpImmediateRefresh);
    return p->yAxis->tickVectorLabels(); // (a copy: a QVector of QString is a QStringList)
}

int TimingCurveView::timePoints(int line) const {
    return m_time->graph(line)->dataCount();
}

void TimingCurveView::showProgress(const QString& text, bool running) {
    m_progress->setText(text);
    m_measure->setEnabled(!running);
    m_cancel->setEnabled(running);
}

void TimingCurveView::showCurves(const std::vector<TimingCurve>& curves, const QString& shape) {
    for (QCustomPlot* p : {m_time, m_speedup}) {
        p->clearGraphs();
        p->clearItems();
        p->clearPlottables();
    }
    QString text = shape;
    double lo = 1e300, hi = 0, ylo = 1e300, yhi = 0, slo = 1e300, shi = 0;
    // A median with its quartiles as error bars (the interval a busy machine allows).
    auto withSpread = [](QCustomPlot* p, const QVector<double>& x, const std::vector<double>& y,
                         const std::vector<double>& low, const std::vector<double>& high,
                         const QPen& pen, const QString& name,
                         QCPScatterStyle::ScatterShape marker) {
        QCPGraph* g = p->addGraph();
        g->setName(name);
        g->setData(x, QVector<double>(y.begin(), y.end()));
        g->setPen(pen);
        g->setScatterStyle(QCPScatterStyle(marker, 6));
        auto* bars = new QCPErrorBars(p->xAxis, p->yAxis);
        bars->removeFromLegend();
        bars->setDataPlottable(g);
        QVector<double> minus, plus;
        for (size_t i = 0; i < y.size(); ++i) {
            minus.push_back(std::max(0.0, y[i] - low[i]));
            plus.push_back(std::max(0.0, high[i] - y[i]));
        }
        bars->setData(minus, plus);
        bars->setPen(QPen(pen.color(), 1));
        return g;
    };
    int noisy = 0, points = 0;
    for (const TimingCurve& c : curves) {
        const Qt::PenStyle style =
            c.device == QLatin1String("CPU") ? Qt::SolidLine : Qt::DashDotLine;
        QVector<double> x;
        for (const int64_t s : c.seq) {
            x.push_back(static_cast<double>(s));
            lo = std::min(lo, static_cast<double>(s));
            hi = std::max(hi, static_cast<double>(s));
        }
        withSpread(m_time, x, c.denseUs, c.denseQ1, c.denseQ3, QPen(kExact, 2, style),
                   tr("dense (%1)").arg(c.device), QCPScatterStyle::ssDisc);
        for (size_t i = 0; i < c.seq.size(); ++i) {
            ylo = std::min(ylo, c.denseQ1[i]);
            yhi = std::max(yhi, c.denseQ3[i]);
            noisy += c.denseQ3[i] - c.denseQ1[i] > 0.25 * c.denseUs[i] ? 1 : 0;
            ++points;
        }
        for (size_t m = 0; m < c.methods.size(); ++m) {
            const att::Method id = m < c.ids.size() ? c.ids[m] : att::Method::Sparq;
            const QColor col = methodColor(id);
            withSpread(m_time, x, c.us[m], c.q1[m], c.q3[m], QPen(col, 1.5, style),
                       tr("%1 (%2)").arg(c.methods[m], c.device), methodMarker(id));
            std::vector<double> speed, low, high;
            int above = 0;
            for (size_t i = 0; i < c.seq.size(); ++i) {
                ylo = std::min(ylo, c.q1[m][i]);
                yhi = std::max(yhi, c.q3[m][i]);
                noisy += c.q3[m][i] - c.q1[m][i] > 0.25 * c.us[m][i] ? 1 : 0;
                ++points;
                const att::SpeedupInterval si = att::speedupInterval(
                    c.denseUs[i], c.denseQ1[i], c.denseQ3[i], c.us[m][i], c.q1[m][i], c.q3[m][i]);
                speed.push_back(si.median);
                low.push_back(si.lower);
                high.push_back(si.upper);
                above += si.lower > c.theory[m][i] ? 1 : 0;
                slo = std::min(slo, si.lower);
                shi = std::max(shi, si.upper);
            }
            withSpread(m_speedup, x, speed, low, high, QPen(col, 1.8, style),
                       tr("%1 (%2)").arg(c.methods[m], c.device), methodMarker(id));
            if (c.device == QLatin1String("CPU")) { // the theory does not depend on the device
                QCPGraph* theory = m_speedup->addGraph();
                theory->setName(tr("%1 theoretical").arg(c.methods[m]));
                theory->removeFromLegend(); // (dotted, in its colour: the caption says so)
                theory->setData(x, QVector<double>(c.theory[m].begin(), c.theory[m].end()));
                theory->setPen(QPen(col, 1, Qt::DotLine));
                for (const double t : c.theory[m]) {
                    slo = std::min(slo, t);
                    shi = std::max(shi, t);
                }
            }
            const int64_t from = confidentPayoff(c.seq, low);
            QString where;
            if (from > 0) {
                // Where the method pays off with confidence: a dashed line in its colour.
                auto* mark = new QCPItemStraightLine(m_speedup);
                mark->point1->setCoords(static_cast<double>(from), 1);
                mark->point2->setCoords(static_cast<double>(from), 2);
                mark->setPen(QPen(col, 1, Qt::DashLine));
                where = tr("pays off from S = <b>%1</b> (from there on the whole interval is above "
                           "1)")
                            .arg(QLocale().toString(static_cast<qlonglong>(from)));
            } else if (from == 0) {
                where = tr("faster than dense at every S measured, beyond the spread");
            } else if (speed.back() > 1) {
                where = tr("faster by the median at the longest S, but within the spread: not a "
                           "confident speed-up");
            } else {
                where = tr("not faster than dense at the longest S measured");
            }
            text += tr("<br>%1 (%2): %3; at S = %4 %5× measured (interval %6–%7), %8× in theory")
                        .arg(c.methods[m], c.device, where)
                        .arg(QLocale().toString(static_cast<qlonglong>(c.seq.back())))
                        .arg(speed.back(), 0, 'f', 2)
                        .arg(low.back(), 0, 'f', 2)
                        .arg(high.back(), 0, 'f', 2)
                        .arg(c.theory[m].back(), 0, 'f', 2);
            if (above > 0)
                text += tr(" ⚠ above the theoretical speed-up at %1 of %2 lengths (dense slowed "
                           "by a busy machine?)")
                            .arg(above)
                            .arg(c.seq.size());
        }
    }
    if (!curves.empty())
        text += tr("<br>Each point: the median of %1 samples, bars from the first to the third "
                   "quartile.")
                    .arg(curves.front().repeats);
    if (noisy > 0)
        text += tr(" ⚠ %1 of %2 points spread over ±25% (machine busy, or a step too short to "
                   "time).")
                    .arg(noisy)
                    .arg(points);
    if (hi > 0) {
        auto* one = new QCPItemStraightLine(m_speedup); // speed-up 1: where a method pays off
        one->point1->setCoords(lo, 1);
        one->point2->setCoords(hi, 1);
        one->setPen(QPen(Qt::black, 1));
        for (QCustomPlot* p : {m_time, m_speedup})
            p->xAxis->setRange(lo / 1.2, hi * 1.2);
        m_time->yAxis->setRange(ylo / 1.5, yhi * 1.5);
        m_speedup->yAxis->setRange(std::min(slo, 1.0) / 1.5, std::max(shi, 1.0) * 1.5);
        ticks125(m_time->yAxis);
        ticks125(m_speedup->yAxis);
    }
    m_summary->setText(text);
    m_time->replot();
    m_speedup->replot();
}

QStringList exportShownPlots(QWidget* view, const QString& stem, const QString& ext,
                             QString* error) {
    QStringList written;
    int n = 0;
    for (QCustomPlot* plot : view->findChildren<QCustomPlot*>()) {
        if (!plot->isVisible() || plot->width() < 10 || plot->height() < 10)
            continue; // (a plot the view hides now is not on screen)
        ++n;
        const QString name = plot->objectName().isEmpty() ? QString::number(n) : plot->objectName();
        const QString path = stem + QLatin1Char('-') + name + QLatin1Char('.') + ext;
        if (!savePlot(plot, path, plot->width(), plot->height(), name, error))
            return written;
        written << path;
    }
    if (n == 0)
        *error = QObject::tr("%1: this view shows no plot to export").arg(stem);
    return written;
}

} // namespace sparqlab::widgets
