#include "layers_view.h"

#include "plot_style.h"

#include <QLabel>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <cmath>

namespace sparqlab::widgets {

LayersView::LayersView(QWidget* parent)
    : Panel(tr("Selection across layers"), parent), m_plot(new QCustomPlot), m_message(new QLabel) {
    setObjectName(QStringLiteral("layersView"));
    m_plot->setObjectName(QStringLiteral("layersPlot"));
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    m_message->setWordWrap(true);
    l->addWidget(m_message);
    l->addWidget(m_plot, 1);
    style::basicPlot(m_plot, tr("layer"), tr("overlap with the previous layer's keys"));
    m_plot->legend->setVisible(true);
    m_plot->legend->setFont(QFont(font().family(), 9));
}

namespace {
/// "1, 3 and 4".
QString layerList(const std::vector<int64_t>& layers) {
    QStringList names;
    for (const int64_t l : layers)
        names << QString::number(l);
    const QString last = names.isEmpty() ? QString() : names.takeLast();
    return names.isEmpty() ? last
                           : QObject::tr("%1 and %2").arg(names.join(QStringLiteral(", ")), last);
}
} // namespace

void LayersView::showReuse(const analysis::LayerReuse& r) {
    m_last = r;
    m_plot->clearGraphs();
    m_plot->clearItems();
    const int L = static_cast<int>(r.modelLayers.size());
    const bool hybrid = L > 0 && r.modelLayers.back() != L - 1;
    m_message->setText(
        tr("For the query at position %5: each layer's key set (the k = %1 positions chosen by "
           "the most heads) against the previous layer's. Where the sets stay alike, one layer's "
           "choice could serve the next ones (GLM-5 shares its indexer's choice across layers "
           "this way, Kascade reuses it); two random sets of %1 of %2 positions share %3%. "
           "%6%4%7")
            .arg(r.k)
            .arg(r.positions)
            .arg(100 * r.chance(), 0, 'f', 1)
            .arg(hybrid ? tr(" The layers are the model's attention layers (numbered as in "
                             "the model); its other layers (%1) choose no keys.")
                              .arg(QString::fromStdString(r.otherLayers))
                        : QString())
            .arg(r.positions - 1)
            .arg(hybrid && L > 0 ? tr("Layer %1, the first attention layer, has none before it.")
                                       .arg(r.modelLayers.front())
                                 : tr("Layer 0 has no layer before it."))
            .arg(r.entryLayers.empty()
                     ? QString()
                     : tr(" Layers %1 (DeepSeek-V4) choose among compressed entries of their "
                          "own beside the positions: they have no set to compare with a "
                          "neighbour's (the head view shows them).")
                           .arg(layerList(r.entryLayers))));
    const QColor colors[] = {style::kTrue, style::kApprox, QColor(148, 103, 189)};
    const QCPScatterStyle::ScatterShape shapes[] = {
        QCPScatterStyle::ssCircle, QCPScatterStyle::ssCross, QCPScatterStyle::ssPlus};
    for (size_t s = 0; s < r.series.size(); ++s) {
        QCPGraph* g = m_plot->addGraph();
        g->setName(QString::fromStdString(r.series[s].label));
        g->setPen(QPen(colors[s % 3], 2));
        g->setScatterStyle(QCPScatterStyle(shapes[s % 3], 8));
        for (int l = 1; l < L; ++l)
            g->addData(static_cast<double>(r.modelLayers[static_cast<size_t>(l)]),
                       r.series[s].overlap[static_cast<size_t>(l)]);
    }
    QCPGraph* chance = m_plot->addGraph();
    chance->setName(tr("two random sets"));
    chance->setPen(QPen(Qt::gray, 1, Qt::DashLine));
    if (L > 0) {
        chance->addData(static_cast<double>(r.modelLayers.front()), r.chance());
        chance->addData(static_cast<double>(r.modelLayers.back()), r.chance());
    }
    m_plot->xAxis->setRange(-0.5, L > 0 ? static_cast<double>(r.modelLayers.back()) + 0.5 : 1);
    m_plot->yAxis->setRange(0, 1.05);
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(std::max(1.0, std::ceil(L / 16.0)));
    m_plot->xAxis->setTicker(ticker);
    m_plot->replot();
}

void LayersView::showMessage(const QString& text) {
    m_last = {};
    m_plot->clearGraphs();
    m_plot->replot();
    m_message->setText(text);
}

int LayersView::graphCount() const {
    return m_plot->graphCount();
}

double LayersView::overlap(const QString& label, int layer) const {
    for (const analysis::LayerReuse::Series& s : m_last.series)
        if (QString::fromStdString(s.label) == label && layer >= 0 &&
            static_cast<size_t>(layer) < s.overlap.size())
            return s.overlap[static_cast<size_t>(layer)];
    return std::nan("");
}

} // namespace sparqlab::widgets
