// Two methods on one head, side by side.

#include "compare_view.h"
#include "plot_legend.h"
#include "plot_style.h"

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
#include <QStandardItemModel>
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

namespace {
/// Ticks at 0 and above only: the lanes under the axis hold marks, not attention weights, and
/// a weight below 0 would read as a number the plot claims.
class WeightTicker : public QCPAxisTicker {
protected:
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override {
        QVector<double> ticks = QCPAxisTicker::createTickVector(tickStep, range);
        ticks.erase(std::remove_if(ticks.begin(), ticks.end(),
                                   [tickStep](double t) { return t < -1e-6 * tickStep; }),
                    ticks.end());
        return ticks;
    }
};
} // namespace
using namespace style;

// --- CompareView ---------------------------------------------------------------------------

CompareView::CompareView(QWidget* parent)
    : Panel(tr("Compare two methods on one head"), parent), m_method(new QComboBox),
      m_plot(new QCustomPlot), m_table(new QTableWidget), m_message(new QLabel) {
    setObjectName(QStringLiteral("compareView"));
    m_method->setObjectName(QStringLiteral("compareMethodBox"));
    m_plot->setObjectName(QStringLiteral("comparePlot"));
    m_table->setObjectName(QStringLiteral("compareTable"));
    for (const att::MethodInfo& m : att::methods())
        m_method->addItem(QString::fromUtf8(m.label), QString::fromUtf8(m.name));
    setSecond(att::Method::Quest);
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    auto* pick = new QHBoxLayout;
    pick->addWidget(new QLabel(tr("The lab's method (controls) against")));
    pick->addWidget(m_method, 1);
    l->addLayout(pick);
    l->addWidget(m_message);
    m_message->setWordWrap(true);
    basicPlot(m_plot, tr("position"), tr("attention s (dashed: ŝ)"));
    wholeTicks(m_plot->xAxis);
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new WeightTicker));
    m_plot->legend->setVisible(true);
    m_plot->legend->setFont(QFont(font().family(), 8));
    // The legend in a row of its own above the plot: two methods' lanes and the peaks of both
    // ends leave no corner free of data.
    setLegendAbove(m_plot, true);
    m_plot->legend->setWrap(5);
    l->addWidget(m_plot, 3);
    // Dragged or zoomed, the score axis fits what is in sight. Redraws of the same positions
    // keep the range (showPair).
    followPositionRange(
        m_plot,
        [this] {
            fitScores();
            m_plot->replot(QCustomPlot::rpQueuedReplot);
        },
        [this] { return m_a.positions(); });
    m_table->setColumnCount(3);
    m_table->verticalHeader()->setVisible(false);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setMinimumHeight(120);
    l->addWidget(m_table, 2);
    connect(m_method, &QComboBox::currentIndexChanged, this, &CompareView::secondChanged);
    showMessage(tr("Run a prompt to compare methods."));
}

att::Method CompareView::second() const {
    return att::parseMethod(m_method->currentData().toString().toStdString());
}

void CompareView::setSecond(att::Method m) {
    const int i = m_method->findData(QString::fromStdString(att::methodName(m)));
    if (i >= 0)
        m_method->setCurrentIndex(i);
}

void CompareView::setFirst(att::Method m) {
    auto* items = qobject_cast<QStandardItemModel*>(m_method->model());
    const QString name = QString::fromStdString(att::methodName(m));
    for (int i = 0; i < m_method->count(); ++i) {
        const bool lab = m_method->itemData(i).toString() == name;
        items->item(i)->setEnabled(!lab);
        items->item(i)->setToolTip(lab ? tr("The lab's own method (the controls)") : QString());
    }
    if (second() == m)
        setSecond(m == att::Method::Sparq ? att::Method::Quest : att::Method::Sparq);
}

void CompareView::showMessage(const QString& text) {
    m_message->setText(text);
}

QString CompareView::cell(int row, int column) const {
    const QTableWidgetItem* it = m_table->item(row, column);
    return it ? it->text() : QString();
}

void CompareView::fitLegend() {
    QCPLegend* legend = m_plot->legend;
    int wide = 0;
    for (int i = 0; i < legend->itemCount(); ++i) // (a cell of the grid may be empty)
        if (const QCPLayoutElement* item = legend->item(i))
            wide += item->minimumOuterSizeHint().width() + legend->columnSpacing();
    const int perRow =
        wide + legend->margins().left() + legend->margins().right() <= m_plot->width() ? 5 : 3;
    if (legend->wrap() != perRow) {
        legend->setWrap(perRow);
        legend->setFillOrder(legend->fillOrder(), true); // (setWrap moves no placed entry)
    }
}

void CompareView::resizeEvent(QResizeEvent* event) {
    Panel::resizeEvent(event);
    fitLegend();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

bool CompareView::legendFits() const {
    const QCPLegend* legend = m_plot->legend;
    for (int i = 0; i < legend->itemCount(); ++i) {
        const QCPLayoutElement* item = legend->item(i);
        if (item && (item->outerRect().width() < item->minimumOuterSizeHint().width() ||
                     !m_plot->viewport().contains(item->outerRect())))
            return false;
    }
    return true;
}

double CompareView::plotTop() const {
    return m_plot->yAxis->range().upper;
}

int CompareView::legendRows() const {
    return m_plot->legend->rowCount();
}

int CompareView::rowCount() const {
    return m_table->rowCount();
}

void CompareView::fitScores() {
    // The highest of the curves drawn at the positions in sight: ŝ's peaks are not cut off, and
    // a zoom into quiet positions shows their scores.
    // (By position: a DeepSeek-V4 layer's entries at the positions they pool.)
    const std::vector<float> exact = m_a.byPosition(m_a.exact), a = m_a.byPosition(m_a.approx),
                             b = m_b.byPosition(m_b.approx);
    float top = std::max(1e-9f, peakInSight(m_plot, {&exact, &a, &b}));
    if (top <= 1e-9f) // (none in sight: the whole range's)
        for (const std::vector<float>* curve : {&exact, &a, &b})
            for (const float x : *curve)
                top = std::max(top, x);
    // Each method's chosen positions in a lane of its own under the axis: at their exact weights
    // most would pile up at 0 and hide one another.
    for (const auto& [g, lane] : {std::pair{m_lanes[0], -0.07}, std::pair{m_lanes[1], -0.14}})
        if (g)
            for (auto it = g->data()->begin(); it != g->data()->end(); ++it)
                it->value = lane * top;
    m_plot->yAxis->setRange(-0.19 * top, 1.08 * top);
}

void CompareView::showPair(const analysis::HeadState& a, const analysis::HeadState& b) {
    // The same positions (another head or setting): the range the user dragged or zoomed to
    // stays; other positions are shown whole.
    const bool samePositions = a.positions() == m_a.positions();
    m_a = a;
    m_b = b;
    const QString la = QString::fromUtf8(att::methodInfo(a.method).label);
    const QString lb = QString::fromUtf8(att::methodInfo(b.method).label);
    // Over positions; a DeepSeek-V4 layer's entries (keys before the positions) at the
    // positions they pool, as the head view draws them.
    m_plot->clearPlottables();
    addKeyCurve(m_plot, a, a.exact, a.entryRate > 0 ? tr("exact s (the window)") : tr("exact s"),
                QPen(QColor(90, 90, 90), 1.2),
                tr("exact s of an entry (%1 positions)").arg(a.entryRate));
    const QColor ca = kApprox, cb(148, 103, 189);
    auto approx = [&](const analysis::HeadState& h, const QString& label, const QColor& c) {
        if (!h.approx.empty())
            addKeyCurve(m_plot, h, h.approx, tr("ŝ of %1").arg(label), QPen(c, 1.0, Qt::DashLine));
    };
    approx(a, la, ca);
    approx(b, lb, cb);
    const std::vector<double> keyX = a.keyPositions();
    const std::vector<double>* xs = a.entryRate > 0 ? &keyX : nullptr;
    addMarks(m_plot, a.trueTopK, a.exact, tr("true top-%1").arg(a.trueTopK.size()), kTrue,
             QCPScatterStyle::ssCircle, 9, xs);
    // The chosen keys in their lanes (placed by fitScores).
    const std::vector<float> lane(a.exact.size(), 0.0f);
    m_lanes[0] = addMarks(m_plot, a.chosen, lane, tr("chosen by %1 (lane)").arg(la), ca,
                          QCPScatterStyle::ssCross, 7, xs);
    m_lanes[1] = addMarks(m_plot, b.chosen, lane, tr("chosen by %1 (lane)").arg(lb), cb,
                          QCPScatterStyle::ssPlus, 7, xs);
    if (!samePositions)
        showAllPositions(m_plot, a.positions());
    fitScores();
    fitLegend();
    m_plot->replot();

    int64_t both = 0;
    for (const int64_t j : a.chosen)
        both += std::binary_search(b.chosen.begin(), b.chosen.end(), j) ? 1 : 0;
    auto num = [](double x, int digits = 3) { return QString::number(x, 'f', digits); };
    auto alpha = [&](const analysis::HeadState& h) {
        return h.tau > 0 || h.method == att::Method::Sparq ? num(h.alpha) : tr("— (none)");
    };
    // (On a DeepSeek-V4 compressed layer over the keys seen, each key its value: HeadState.)
    auto transfer = [&](const analysis::HeadState& h) {
        return QLocale().toString(h.transfer, 'f', 0);
    };
    auto compression = [&](const analysis::HeadState& h) {
        return h.denseTransfer > 0 ? num(h.transfer / h.denseTransfer) : tr("—");
    };
    QList<std::array<QString, 3>> rows{
        {tr("positions attended"), QString::number(a.count), QString::number(b.count)},
        {tr("transfer (elements per head and step)"), transfer(a), transfer(b)},
        {tr("compression (transfer / dense)"), compression(a), compression(b)},
        {tr("α (approximate mass kept)"), alpha(a), alpha(b)},
        {tr("output error against dense (relative)"), QString::number(a.outputError, 'f', 3),
         QString::number(b.outputError, 'f', 3)},
        {QString::fromStdString(analysis::measureLabel(analysis::Measure::Recall)),
         num(a.topkAgreement), num(b.topkAgreement)},
        {tr("exact mass of the chosen"), num(a.chosenMass), num(b.chosenMass)},
        {tr("positions both chose"), tr("%1 of its %2").arg(both).arg(a.chosen.size()),
         tr("%1 of its %2").arg(both).arg(b.chosen.size())},
    };
    if (a.entryRate > 0)
        rows.push_back(
            {tr("output error against the model's own"), num(a.modelError), num(b.modelError)});
    m_table->setHorizontalHeaderLabels({tr("measure"), la, lb});
    m_table->setRowCount(static_cast<int>(rows.size()));
    for (int i = 0; i < rows.size(); ++i)
        for (int c = 0; c < 3; ++c)
            m_table->setItem(i, c, new QTableWidgetItem(rows[i][static_cast<size_t>(c)]));
    // The controls' values serve both: name the parameters they share, not those of one alone.
    QStringList shared;
    for (const att::Param p : att::methodInfo(a.method).params)
        if (att::takes(b.method, p) && p != att::Param::Gqa &&
            (p != att::Param::Local || a.localFrom == b.localFrom)) // (a default of its own)
            shared << QString::fromUtf8(att::paramInfo(p).label);
    const QString same =
        shared.isEmpty() ? tr("each with its own parameters")
                         : tr("both at the controls' %1").arg(shared.join(QStringLiteral(", ")));
    m_message->setText(tr("%1 (×) against %2 (+), %3; circles: the true top-k of the exact "
                          "attention.%4")
                           .arg(la, lb, same,
                                a.entryRate > 0 ? tr(" Bars: the exact s of DeepSeek-V4's entries, "
                                                     "dotted: ŝ over them.")
                                                : QString()));
}

} // namespace sparqlab::widgets
