// The layer × head overview of any per-head measure.

#include "overview_view.h"
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
#include <QTableWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace sparqlab::widgets {

namespace att = sparqlab::attention;
using namespace style;

// --- OverviewView --------------------------------------------------------------------------

OverviewView::OverviewView(QWidget* parent)
    : Panel(tr("Overview: layer × head"), parent), m_plot(new QCustomPlot), m_message(new QLabel) {
    setObjectName(QStringLiteral("overviewView"));
    m_plot->setObjectName(QStringLiteral("overviewPlot"));
    m_message->setAlignment(Qt::AlignCenter);
    m_message->setWordWrap(true); // (one line of it made the window wider than 1280)
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    l->addWidget(m_message);
    auto* pick = new QHBoxLayout;
    const analysis::Measure defaults[3] = {analysis::Measure::Coverage, analysis::Measure::KMass90,
                                           analysis::Measure::Recall};
    for (int i = 0; i < 3; ++i) {
        m_measures[i] = new QComboBox;
        m_measures[i]->setObjectName(QStringLiteral("measureBox%1").arg(i));
        for (const auto& [m, label] : analysis::measures())
            m_measures[i]->addItem(QString::fromStdString(label), static_cast<int>(m));
        m_measures[i]->setCurrentIndex(m_measures[i]->findData(static_cast<int>(defaults[i])));
        m_measures[i]->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        m_measures[i]->setMinimumContentsLength(8);
        connect(m_measures[i], &QComboBox::currentIndexChanged, this, &OverviewView::draw);
        pick->addWidget(m_measures[i], 1);
    }
    l->addLayout(pick);
    l->addWidget(m_plot, 1);
    m_plot->plotLayout()->clear();
    for (int i = 0; i < 3; ++i) {
        m_titles[i] = new QCPTextElement(m_plot, QString(), QFont(font().family(), 9, QFont::Bold));
        m_plot->plotLayout()->addElement(0, i, m_titles[i]);
        auto* rect = new QCPAxisRect(m_plot);
        m_plot->plotLayout()->addElement(1, i, rect);
        rect->axis(QCPAxis::atBottom)->setLabel(tr("head"));
        rect->axis(QCPAxis::atLeft)->setLabel(tr("layer"));
        auto* scale = new QCPColorScale(m_plot);
        scale->setType(QCPAxis::atBottom);
        m_plot->plotLayout()->addElement(2, i, scale);
        scale->setMinimumSize(10, 40);
        // Each colour bar as wide as its grid, with room at its ends for the end labels (a
        // neighbour's last label ran into the next bar's first), and few ticks.
        scale->setMargins(QMargins(18, 4, 18, 4));
        scale->setAutoMargins(QCP::msTop | QCP::msBottom);
        scale->axis()->ticker()->setTickCount(4);
        m_maps[i] = new QCPColorMap(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        m_maps[i]->setColorScale(scale);
        m_maps[i]->setInterpolate(false);
        // The head the head view shows: a frame, drawn over the map.
        m_current[i] = new QCPItemRect(m_plot);
        m_current[i]->setClipAxisRect(rect);
        for (QCPItemPosition* p : {m_current[i]->topLeft, m_current[i]->bottomRight}) {
            p->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            p->setAxisRect(rect);
        }
        m_current[i]->setPen(QPen(QColor(230, 30, 30), 3));
        m_current[i]->setBrush(Qt::NoBrush);
        m_current[i]->setVisible(false);
    }
    // Values on hover: the cell's layer, head and value, in every grid.
    m_plot->setMouseTracking(true);
    connect(m_plot, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        for (int i = 0; i < 3; ++i) {
            QCPColorMap* map = m_maps[i];
            if (!map->keyAxis()->axisRect()->rect().contains(e->pos()) ||
                map->data()->keySize() == 0)
                continue;
            const int head =
                static_cast<int>(std::lround(map->keyAxis()->pixelToCoord(e->pos().x())));
            const int layer =
                static_cast<int>(std::lround(map->valueAxis()->pixelToCoord(e->pos().y())));
            if (head < 0 || layer < 0 || head >= map->data()->keySize() ||
                layer >= map->data()->valueSize())
                break;
            const QString where =
                static_cast<size_t>(layer) < m_modelLayers.size()
                    ? tr("layer %1 (model layer %2)").arg(layer).arg(m_modelLayers[size_t(layer)])
                    : tr("layer %1").arg(layer);
            QToolTip::showText(e->globalPosition().toPoint(),
                               tr("%1, head %2\n%3: %4")
                                   .arg(where)
                                   .arg(head)
                                   .arg(m_measures[i]->currentText())
                                   .arg(map->data()->cell(head, layer), 0, 'g', 4),
                               m_plot);
            return;
        }
        QToolTip::hideText();
    });
    m_plot->plotLayout()->setRowStretchFactor(0, 0.1);
    m_plot->plotLayout()->setRowStretchFactor(2, 0.15);
    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
        for (QCPColorMap* map : m_maps) {
            QCPAxisRect* rect = map->keyAxis()->axisRect();
            if (!rect->rect().contains(e->pos()))
                continue;
            const int head =
                static_cast<int>(std::lround(map->keyAxis()->pixelToCoord(e->pos().x())));
            const int layer =
                static_cast<int>(std::lround(map->valueAxis()->pixelToCoord(e->pos().y())));
            if (head >= 0 && layer >= 0 && head < map->data()->keySize() &&
                layer < map->data()->valueSize())
                Q_EMIT cellClicked(layer, head);
        }
    });
    showMessage(tr("Run a prompt to see every head at once."));
}

void OverviewView::showMessage(const QString& text) {
    m_message->setText(text);
    m_message->setVisible(true);
}

analysis::Measure OverviewView::measure(int grid) const {
    return static_cast<analysis::Measure>(m_measures[grid]->currentData().toInt());
}

void OverviewView::setMeasure(int grid, analysis::Measure m) {
    m_measures[grid]->setCurrentIndex(m_measures[grid]->findData(static_cast<int>(m)));
}

void OverviewView::showOverview(const analysis::Overview& o, int r, int k, att::Method method,
                                int64_t query) {
    const QString which =
        query >= 0 ? tr("Every head at the query of position %1 (the one the head view shows); ")
                         .arg(query)
                   : QString();
    m_message->setText(
        which +
        tr("Coverage at k = %1, kurtosis and the k for a share of the mass are each head's own, "
           "whatever the method; SparQ's top-k agreement is at r = %2; recall and output error "
           "are %3's. Click a cell to open that head.")
            .arg(k)
            .arg(r)
            .arg(QString::fromUtf8(att::methodInfo(method).label)));
    m_last = o;
    draw();
}

void OverviewView::draw() {
    const analysis::Overview& o = m_last;
    for (int i = 0; i < 3; ++i) {
        const analysis::Measure m = measure(i);
        m_titles[i]->setText(m_measures[i]->currentText());
        const auto it = o.grids.find(m);
        if (it == o.grids.end() || o.layers == 0)
            continue;
        QCPColorMap* map = m_maps[i];
        map->data()->setSize(static_cast<int>(o.heads), static_cast<int>(o.layers));
        map->data()->setRange(QCPRange(0, static_cast<double>(o.heads - 1)),
                              QCPRange(0, static_cast<double>(o.layers - 1)));
        for (int64_t l = 0; l < o.layers; ++l)
            for (int64_t h = 0; h < o.heads; ++h) {
                const float v = it->second[static_cast<size_t>(l * o.heads + h)];
                map->data()->setCell(static_cast<int>(h), static_cast<int>(l),
                                     std::isfinite(v) ? v : 0.0);
            }
        // Shares in [0, 1] on a fixed scale; counts, kurtosis and errors on their own range.
        const bool share = m == analysis::Measure::Coverage || m == analysis::Measure::Agreement ||
                           m == analysis::Measure::Recall;
        map->setGradient(style::viridis());
        if (share)
            map->setDataRange(QCPRange(0, 1));
        else
            map->rescaleDataRange(true);
        // Counts of positions on whole numbers (a narrow range had ticks at 205.25).
        const bool count = m == analysis::Measure::KMass50 || m == analysis::Measure::KMass90 ||
                           m == analysis::Measure::KMass99;
        QCPAxis* bar = map->colorScale()->axis();
        if (count) {
            style::wholeTicks(bar);
            bar->ticker()->setTickCount(4);
        } else if (bar->ticker().dynamicCast<QCPAxisTickerFixed>()) {
            auto plain = QSharedPointer<QCPAxisTicker>::create();
            plain->setTickCount(4);
            bar->setTicker(plain);
        }
        map->keyAxis()->setRange(-0.5, static_cast<double>(o.heads) - 0.5);
        map->valueAxis()->setRange(-0.5, static_cast<double>(o.layers) - 0.5);
        // Whole heads and layers only (a 3-layer capture had ticks at 0.5); a hybrid's rows by
        // their model layer, as the Layer control names them.
        style::wholeTicks(map->keyAxis());
        if (m_modelLayers.size() == static_cast<size_t>(o.layers)) {
            auto named = QSharedPointer<QCPAxisTickerText>::create();
            const int64_t every = (o.layers + 11) / 12; // at most 12 labels
            for (int64_t l = 0; l < o.layers; l += every)
                named->addTick(static_cast<double>(l),
                               QString::number(m_modelLayers[static_cast<size_t>(l)]));
            map->valueAxis()->setTicker(named);
            map->valueAxis()->setLabel(tr("model layer"));
        } else {
            style::wholeTicks(map->valueAxis());
            map->valueAxis()->setLabel(tr("layer"));
        }
        const bool shown = m_currentLayer >= 0 && m_currentLayer < o.layers && m_currentHead >= 0 &&
                           m_currentHead < o.heads;
        m_current[i]->setVisible(shown);
        if (shown) {
            m_current[i]->topLeft->setCoords(m_currentHead - 0.5, m_currentLayer + 0.5);
            m_current[i]->bottomRight->setCoords(m_currentHead + 0.5, m_currentLayer - 0.5);
        }
    }
    m_plot->replot();
}

void OverviewView::setCurrentHead(int layer, int head) {
    if (layer == m_currentLayer && head == m_currentHead)
        return;
    m_currentLayer = layer;
    m_currentHead = head;
    if (m_last.layers > 0)
        draw();
}

void OverviewView::setModelLayers(std::vector<int64_t> layers) {
    m_modelLayers = std::move(layers);
    if (m_last.layers > 0)
        draw();
}

namespace {

/// The tick labels `axis` draws over its range.
QStringList tickLabels(QCPAxis* axis) {
    QVector<double> ticks;
    QVector<QString> labels;
    axis->ticker()->generate(axis->range(), axis->parentPlot()->locale(),
                             axis->numberFormat().at(0), axis->numberPrecision(), ticks, nullptr,
                             &labels);
    return QStringList(labels.begin(), labels.end());
}

} // namespace

QStringList OverviewView::layerLabels() const {
    return tickLabels(m_maps[0]->valueAxis());
}

QStringList OverviewView::scaleLabels(int grid) const {
    return tickLabels(m_maps[grid]->colorScale()->axis());
}

double OverviewView::cell(int grid, int layer, int head) const {
    return m_maps[grid]->data()->cell(head, layer);
}

QPoint OverviewView::cellCenter(int grid, int layer, int head) const {
    m_plot->replot(QCustomPlot::rpImmediateRefresh); // axis rects laid out at the current size
    const QCPColorMap* map = m_maps[grid];
    return {static_cast<int>(map->keyAxis()->coordToPixel(head)),
            static_cast<int>(map->valueAxis()->coordToPixel(layer))};
}

} // namespace sparqlab::widgets
