// Decode time against the sequence length, measured and theoretical speed-ups, where a method
// pays off.

#include "lab_views.h"
#include "plot_style.h"

#include "attention/transfer.h"
#include "figure_renderer.h"

#include "attention/methods.h"
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

double crossover(const std::vector<int64_t>& seq, const std::vector<double>& speedup) {
    const size_t n = std::min(seq.size(), speedup.size());
    if (n == 0)
        return -1;
    // The last point still below 1: from the next one on the method stays faster (a noisy
    // point near 1 at a short length does not count as paying off).
    size_t below = n;
    for (size_t i = n; i-- > 0;)
        if (speedup[i] < 1) {
            below = i;
            break;
        }
    if (below == n)
        return 0;
    if (below == n - 1)
        return -1;
    // Between point `below` (under 1) and the next (at or above): linear in log S.
    const double x0 = std::log(static_cast<double>(seq[below])),
                 x1 = std::log(static_cast<double>(seq[below + 1]));
    const double y0 = speedup[below], y1 = speedup[below + 1];
    const double t = y1 > y0 ? (1 - y0) / (y1 - y0) : 1;
    return std::exp(x0 + t * (x1 - x0));
}

TimingCurveView::TimingCurveView(QWidget* parent)
    : Panel(tr("Decode time against sequence length"), parent), m_time(new QCustomPlot),
      m_speedup(new QCustomPlot), m_summary(new QLabel), m_progress(new QLabel),
      m_measure(new QPushButton(tr("Measure"))), m_cancel(new QPushButton(tr("Cancel"))) {
    setObjectName(QStringLiteral("timingCurveView"));
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
        p->plotLayout()->addElement(0, 1, p->legend);
        p->plotLayout()->setColumnStretchFactor(1, 0.001);
        p->legend->setMaximumSize(260, QWIDGETSIZE_MAX);
        p->setMinimumHeight(160);
    }
    m_time->yAxis->setLabel(tr("decode step (µs)"));
    m_speedup->yAxis->setLabel(tr("speed-up over dense"));
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

int TimingCurveView::timeLines() const {
    return m_time->graphCount();
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
    static const QColor palette[] = {
        QColor(255, 127, 14), QColor(44, 160, 44),   QColor(214, 39, 40),  QColor(148, 103, 189),
        QColor(140, 86, 75),  QColor(227, 119, 194), QColor(23, 190, 207), QColor(188, 189, 34)};
    for (QCustomPlot* p : {m_time, m_speedup}) {
        p->clearGraphs();
        p->clearItems();
    }
    QString text = shape;
    double lo = 1e300, hi = 0, ylo = 1e300, yhi = 0, slo = 1e300, shi = 0;
    for (const TimingCurve& c : curves) {
        const Qt::PenStyle style =
            c.device == QLatin1String("CPU") ? Qt::SolidLine : Qt::DashDotLine;
        QVector<double> x;
        for (const int64_t s : c.seq) {
            x.push_back(static_cast<double>(s));
            lo = std::min(lo, static_cast<double>(s));
            hi = std::max(hi, static_cast<double>(s));
        }
        QCPGraph* dense = m_time->addGraph();
        dense->setName(tr("dense (%1)").arg(c.device));
        dense->setData(x, QVector<double>(c.denseUs.begin(), c.denseUs.end()));
        dense->setPen(QPen(kExact, 2, style));
        dense->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5));
        for (const double u : c.denseUs) {
            ylo = std::min(ylo, u);
            yhi = std::max(yhi, u);
        }
        for (size_t m = 0; m < c.methods.size(); ++m) {
            const QColor col = palette[m % 8];
            QCPGraph* g = m_time->addGraph();
            g->setName(tr("%1 (%2)").arg(c.methods[m], c.device));
            g->setData(x, QVector<double>(c.us[m].begin(), c.us[m].end()));
            g->setPen(QPen(col, 1.5, style));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
            std::vector<double> speed;
            for (size_t i = 0; i < c.seq.size(); ++i) {
                ylo = std::min(ylo, c.us[m][i]);
                yhi = std::max(yhi, c.us[m][i]);
                speed.push_back(c.denseUs[i] / std::max(c.us[m][i], 1e-9));
            }
            QCPGraph* measured = m_speedup->addGraph();
            measured->setName(tr("%1 measured (%2)").arg(c.methods[m], c.device));
            measured->setData(x, QVector<double>(speed.begin(), speed.end()));
            measured->setPen(QPen(col, 1.8, style));
            measured->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
            if (c.device == QLatin1String("CPU")) { // the theory does not depend on the device
                QCPGraph* theory = m_speedup->addGraph();
                theory->setName(tr("%1 theoretical").arg(c.methods[m]));
                theory->setData(x, QVector<double>(c.theory[m].begin(), c.theory[m].end()));
                theory->setPen(QPen(col, 1, Qt::DotLine));
                for (const double t : c.theory[m]) {
                    slo = std::min(slo, t);
                    shi = std::max(shi, t);
                }
            }
            for (const double v : speed) {
                slo = std::min(slo, v);
                shi = std::max(shi, v);
            }
            const double cross = crossover(c.seq, speed);
            QString where;
            if (cross > 0) {
                // Where the method starts to pay off: a dashed line in its colour (the
                // summary below gives the number).
                auto* mark = new QCPItemStraightLine(m_speedup);
                mark->point1->setCoords(cross, 1);
                mark->point2->setCoords(cross, 2);
                mark->setPen(QPen(col, 1, Qt::DashLine));
                where = tr("pays off from S ≈ <b>%1</b>")
                            .arg(QLocale().toString(static_cast<qlonglong>(std::lround(cross))));
            } else if (cross == 0) {
                where = tr("faster than dense from the first S measured (%1)").arg(c.seq.front());
            } else {
                where = tr("slower than dense at every S measured");
            }
            text += tr("<br>%1 (%2): %3; at S = %4 %5× measured, %6× in theory")
                        .arg(c.methods[m], c.device, where)
                        .arg(QLocale().toString(static_cast<qlonglong>(c.seq.back())))
                        .arg(speed.back(), 0, 'f', 2)
                        .arg(c.theory[m].back(), 0, 'f', 2);
        }
    }
    if (hi > 0) {
        auto* one = new QCPItemStraightLine(m_speedup); // speed-up 1: where a method pays off
        one->point1->setCoords(lo, 1);
        one->point2->setCoords(hi, 1);
        one->setPen(QPen(Qt::black, 1));
        for (QCustomPlot* p : {m_time, m_speedup})
            p->xAxis->setRange(lo / 1.2, hi * 1.2);
        m_time->yAxis->setRange(ylo / 1.5, yhi * 1.5);
        m_speedup->yAxis->setRange(std::min(slo, 1.0) / 1.5, std::max(shi, 1.0) * 1.5);
    }
    // Long legends go beside the plot: many methods × devices.
    m_summary->setText(text);
    m_time->replot();
    m_speedup->replot();
}

bool exportLabPlots(HeadView* head, OverviewView* overview, const QString& stem,
                    const QString& ext) {
    bool ok = true;
    const std::pair<QCustomPlot*, QString> plots[] = {
        {head->componentsPlot(), QStringLiteral("-step1")},
        {head->scoresPlot(), QStringLiteral("-step2")},
        {overview->plot(), QStringLiteral("-overview")}};
    for (const auto& [plot, suffix] : plots) {
        const QString path = stem + suffix + QLatin1Char('.') + ext;
        QString error;
        ok = savePlot(plot, path, std::max(plot->width(), 400), std::max(plot->height(), 200),
                      suffix.mid(1), &error) &&
             ok;
    }
    return ok;
}

} // namespace sparqlab::widgets
