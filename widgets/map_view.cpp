// The query × key map of one head: for a window of the held queries, the exact attention s,
// the method's approximate ŝ, or the exact s on the positions the method chose or missed
// (analysis/lab_map.h), on a logarithmic viridis scale; keys a query cannot see are left blank.
// Hovering names the query, the key and the values; a click on a row examines that query.

#include "map_view.h"
#include "plot_style.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <cmath>
#include <limits>

namespace sparqlab::widgets {

QueryKeyMapView::QueryKeyMapView(QWidget* parent)
    : Panel(tr("Query × key map"), parent), m_plot(new QCustomPlot), m_mode(new QComboBox),
      m_caption(new QLabel), m_message(new QLabel) {
    setObjectName(QStringLiteral("queryKeyMapView"));
    m_plot->setObjectName(QStringLiteral("queryKeyMapPlot"));
    m_mode->setObjectName(QStringLiteral("queryKeyMapMode"));
    for (const MapMode m : {MapMode::Exact, MapMode::Approx, MapMode::Chosen, MapMode::Missed})
        m_mode->addItem(modeLabel(m), static_cast<int>(m));
    m_caption->setWordWrap(true);
    m_caption->setTextFormat(Qt::RichText);
    m_message->setWordWrap(true);
    m_message->setAlignment(Qt::AlignCenter);
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Show")));
    top->addWidget(m_mode);
    top->addStretch(1);
    l->addLayout(top);
    l->addWidget(m_caption);
    l->addWidget(m_message);
    l->addWidget(m_plot, 1);
    m_plot->setMinimumHeight(240);
    m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
    m_scale = new QCPColorScale(m_plot);
    m_plot->plotLayout()->addElement(0, 1, m_scale);
    m_scale->setType(QCPAxis::atRight);
    m_scale->setDataScaleType(QCPAxis::stLogarithmic);
    m_scale->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    m_map->setColorScale(m_scale);
    QCPColorGradient g = style::viridis();
    g.setNanHandling(QCPColorGradient::nhTransparent); // keys after the query: blank
    m_map->setGradient(g);
    m_map->setInterpolate(false);
    auto* margins = new QCPMarginGroup(m_plot);
    m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    m_plot->xAxis->setLabel(tr("key position j"));
    m_plot->yAxis->setLabel(tr("query position"));
    m_plot->yAxis->setRangeReversed(true); // the first query on top, as a matrix reads
    m_row = new QCPItemStraightLine(m_plot);
    m_row->setPen(QPen(QColor(230, 30, 30), 1.5, Qt::DashLine));
    // Over the axes: the last query's row lies on the x axis's line, which hid it.
    m_row->setLayer(QStringLiteral("overlay"));
    m_rowLabel = new QCPItemText(m_plot);
    m_rowLabel->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    m_rowLabel->setColor(QColor(200, 20, 20));
    m_rowLabel->setBrush(QBrush(QColor(255, 255, 255, 220))); // legible over the map's colours
    m_rowLabel->setPadding(QMargins(3, 1, 3, 1));
    m_rowLabel->setClipToAxisRect(true);
    m_rowLeader = new QCPItemLine(m_plot);
    m_rowLeader->setPen(QPen(QColor(200, 20, 20), 1, Qt::DotLine));
    m_rowLeader->setVisible(false);
    for (QCPItemPosition* end : {m_rowLeader->start, m_rowLeader->end}) {
        end->setTypeX(QCPItemPosition::ptAxisRectRatio); // at the right edge: the last keys
        end->setTypeY(QCPItemPosition::ptPlotCoords);
    }
    // The label goes where the map is blank, once the layout says how wide the keys are.
    connect(m_plot, &QCustomPlot::afterLayout, this, &QueryKeyMapView::placeRowLabel);
    m_plot->setMouseTracking(true);
    connect(m_plot, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        const QString tip = tipAt(e->pos());
        if (tip.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(e->globalPosition().toPoint(), tip, m_plot);
    });
    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
        if (m_last.rows() <= 0 || !m_plot->axisRect()->rect().contains(e->pos()))
            return;
        const int64_t q = std::llround(m_plot->yAxis->pixelToCoord(e->pos().y()));
        if (q >= m_last.firstQuery && q <= m_last.lastQuery)
            Q_EMIT queryChosen(q);
    });
    connect(m_mode, &QComboBox::currentIndexChanged, this, [this] { draw(); });
    showMessage(tr("Run a prompt to see every query's attention."));
}

QString QueryKeyMapView::modeLabel(MapMode m) {
    switch (m) {
    case MapMode::Exact:
        return tr("exact attention s");
    case MapMode::Approx:
        return tr("the method's approximate scores ŝ");
    case MapMode::Chosen:
        return tr("exact s on the positions the method attends to");
    case MapMode::Missed:
        return tr("exact s the method misses");
    }
    return {};
}

void QueryKeyMapView::placeRowLabel() {
    m_rowLeader->setVisible(false);
    if (!m_rowLabel->visible())
        return;
    // Just above the line, right of the query's own key (its bin): keys after the query are blank
    // in every row above it, so the label covers no weight there. Where the keys in sight end
    // too soon after it (a query near the end: the lab's first one, the decode step's), higher
    // up, in the first row from it whose blank keys hold the label, at their right end, a dotted
    // leader down the last keys (blank above their own rows) to the line. Where no row holds it,
    // at the right end of the line.
    const QCPAxis* x = m_plot->xAxis;
    const QCPAxis* y = m_plot->yAxis;
    const double bin = static_cast<double>(std::max<int64_t>(1, m_last.keyBin));
    const auto after = [bin](double row) { return std::floor(row / bin) * bin + bin - 0.5; };
    const int width = QFontMetrics(m_rowLabel->font()).horizontalAdvance(m_rowLabel->text()) + 8;
    const int height = QFontMetrics(m_rowLabel->font()).height() + 4;
    const double right = x->coordToPixel(x->range().upper);
    const auto query = static_cast<double>(m_query);
    if (right - x->coordToPixel(after(query)) >= width + 4) {
        m_rowLabel->position->setTypeX(QCPItemPosition::ptPlotCoords);
        m_rowLabel->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        m_rowLabel->position->setCoords(after(query), query - 0.6);
        return;
    }
    // The last row whose first blank key is at most `leftmost`: the label's left edge there, its
    // right edge at kEnd of the axes' width.
    constexpr double kEnd = 0.995;
    const QRect axes = m_plot->axisRect()->rect();
    const double leftmost = x->pixelToCoord(axes.left() + kEnd * axes.width() - width - 4);
    const double row = (std::floor((leftmost + 0.5) / bin)) * bin - 1;
    const bool room =
        row >= y->range().lower + 0.5 &&
        std::abs(y->coordToPixel(row - 0.6) - y->coordToPixel(y->range().lower)) >= height;
    m_rowLabel->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    m_rowLabel->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
    m_rowLabel->position->setCoords(kEnd, room ? row - 0.6 : query - 0.6);
    if (!room)
        return;
    m_rowLeader->start->setCoords(0.99, row - 0.6);
    m_rowLeader->end->setCoords(0.99, query);
    m_rowLeader->setVisible(true);
}

void QueryKeyMapView::showMessage(const QString& text) {
    m_message->setText(text);
    m_message->setVisible(true);
}

void QueryKeyMapView::setMode(MapMode m) {
    m_mode->setCurrentIndex(m_mode->findData(static_cast<int>(m)));
}

MapMode QueryKeyMapView::mode() const {
    return static_cast<MapMode>(m_mode->currentData().toInt());
}

void QueryKeyMapView::showMap(const analysis::QueryKeyMap& m, const QString& what, int64_t query,
                              const std::vector<std::string>& tokens) {
    m_last = m;
    m_what = what;
    m_query = query;
    m_tokens = tokens;
    m_message->setVisible(false);
    draw();
}

double QueryKeyMapView::value(int64_t query, int64_t key) const {
    const int64_t cell = m_last.cell(query, key);
    if (cell < 0 || key > query)
        return std::numeric_limits<double>::quiet_NaN();
    const size_t c = static_cast<size_t>(cell);
    const bool chosen = m_last.chosen[c] != 0;
    switch (mode()) {
    case MapMode::Exact:
        return m_last.exact[c];
    case MapMode::Approx:
        return m_last.approx.empty() ? std::numeric_limits<double>::quiet_NaN() : m_last.approx[c];
    case MapMode::Chosen:
        return chosen ? m_last.exact[c] : std::numeric_limits<double>::quiet_NaN();
    case MapMode::Missed:
        return chosen ? std::numeric_limits<double>::quiet_NaN() : m_last.exact[c];
    }
    return std::numeric_limits<double>::quiet_NaN();
}

void QueryKeyMapView::draw() {
    const analysis::QueryKeyMap& m = m_last;
    if (m.rows() <= 0)
        return;
    const bool noApprox = mode() == MapMode::Approx && m.approx.empty();
    if (noApprox)
        showMessage(tr("This method ranks positions without approximate scores ŝ: choose another "
                       "map."));
    else
        m_message->setVisible(false);
    const int rows = static_cast<int>(m.rows()), cols = static_cast<int>(m.columns);
    m_map->data()->setSize(cols, rows);
    const double half = static_cast<double>(m.keyBin - 1) / 2;
    m_map->data()->setRange(
        QCPRange(half, static_cast<double>(cols - 1) * static_cast<double>(m.keyBin) + half),
        QCPRange(static_cast<double>(m.firstQuery), static_cast<double>(m.lastQuery)));
    constexpr double kFloor = 1e-4; // the scale's lower end: smaller weights look the same
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const int64_t q = m.firstQuery + r, key = static_cast<int64_t>(c) * m.keyBin;
            const double v = value(q, key);
            m_map->data()->setCell(c, r, std::isnan(v) ? v : std::max(v, kFloor));
        }
    m_map->setDataRange(QCPRange(kFloor, 1));
    m_scale->axis()->setLabel(modeLabel(mode()));
    m_plot->xAxis->setRange(-0.5, static_cast<double>(m.keys) - 0.5);
    m_plot->yAxis->setRange(static_cast<double>(m.firstQuery) - 0.5,
                            static_cast<double>(m.lastQuery) + 0.5);
    const bool rowShown = m_query >= m.firstQuery && m_query <= m.lastQuery;
    m_row->setVisible(rowShown);
    m_rowLabel->setVisible(rowShown);
    m_rowLeader->setVisible(false); // (placeRowLabel shows it where the label needs it)
    if (rowShown) {
        m_row->point1->setCoords(0, static_cast<double>(m_query));
        m_row->point2->setCoords(1, static_cast<double>(m_query));
        m_rowLabel->setText(tr("the head view's query (%1)").arg(m_query));
        placeRowLabel();
    }
    const int64_t r = m_query - m.firstQuery;
    const QString rowFacts =
        rowShown ? tr(" At query %1: %2 positions attended, holding %3 of the exact attention.")
                       .arg(m_query)
                       .arg(m.count[static_cast<size_t>(r)])
                       .arg(static_cast<double>(m.chosenMass[static_cast<size_t>(r)]), 0, 'f', 3)
                 : QString();
    // Why the rows start or end where they do, when not at the first or the last query.
    const QString firstRow =
        m.firstQuery == 0
            ? (m.lastQuery + 1 < static_cast<int64_t>(m_tokens.size())
                   ? tr(" Rows end at query %1 of %2: the map draws %3 queries at a time, "
                        "around the one the head view shows.")
                         .arg(m.lastQuery)
                         .arg(m_tokens.size() - 1)
                         .arg(m.rows())
                   : QString())
        : m.firstQuery > m.firstHeld
            ? tr(" Rows start at query %1: the map draws %2 queries at a time, around the one "
                 "the head view shows (any held query from %3 on can be shown).")
                  .arg(m.firstQuery)
                  .arg(m.rows())
                  .arg(m.firstHeld)
            : tr(" Rows start at query %1: the capture holds the queries of its last %2 "
                 "positions only (all of them would not fit its memory budget).")
                  .arg(m.firstQuery)
                  .arg(m.keys - m.firstHeld);
    m_caption->setText(
        tr("%1 — queries %2–%3 (rows) over keys 0–%4 (columns%5); blank: keys after the query. "
           "Hover for values, click a row to examine that query.%6%7%8")
            .arg(m_what)
            .arg(m.firstQuery)
            .arg(m.lastQuery)
            .arg(m.keys - 1)
            .arg(m.keyBin > 1 ? tr(", the largest of each %1 keys").arg(m.keyBin) : QString())
            .arg(firstRow)
            .arg(rowFacts)
            .arg(m.entryRate > 0
                     ? tr(" This DeepSeek-V4 layer also reads compressed entries, one per %1 "
                          "positions: a cell shows the larger of its position's own weight and "
                          "its entry's (the window's keys are the recent ones).")
                           .arg(m.entryRate)
                     : QString()));
    m_plot->replot();
}

QWidget* QueryKeyMapView::plotWidget() const {
    return m_plot;
}

QPoint QueryKeyMapView::pixelOf(int64_t query, int64_t key) const {
    m_plot->replot(QCustomPlot::rpImmediateRefresh); // laid out at the current size
    return {static_cast<int>(m_plot->xAxis->coordToPixel(static_cast<double>(key))),
            static_cast<int>(m_plot->yAxis->coordToPixel(static_cast<double>(query)))};
}

QRect QueryKeyMapView::rowLabelRect() const {
    m_plot->replot(QCustomPlot::rpImmediateRefresh); // laid out at the current size
    if (!m_rowLabel->visible())
        return {};
    return QRectF(m_rowLabel->topLeft->pixelPosition(), m_rowLabel->bottomRight->pixelPosition())
        .toRect();
}

QString QueryKeyMapView::tipAt(const QPoint& pixel) const {
    if (m_last.rows() <= 0 || !m_plot->axisRect()->rect().contains(pixel))
        return {};
    const int64_t q = std::llround(m_plot->yAxis->pixelToCoord(pixel.y()));
    const int64_t key = std::llround(m_plot->xAxis->pixelToCoord(pixel.x()));
    return tipFor(q, key);
}

QString QueryKeyMapView::tipFor(int64_t q, int64_t key) const {
    const int64_t cell = m_last.cell(q, key);
    if (cell < 0)
        return {};
    auto token = [&](int64_t i) {
        return static_cast<size_t>(i) < m_tokens.size()
                   ? QString::fromStdString(m_tokens[static_cast<size_t>(i)])
                   : QString();
    };
    const int64_t from = key / m_last.keyBin * m_last.keyBin;
    const int64_t to = std::min(from + m_last.keyBin, m_last.keys) - 1;
    QString keys = m_last.keyBin > 1 ? tr("keys %1–%2").arg(from).arg(to)
                                     : tr("key %1 “%2”").arg(key).arg(token(key));
    if (from > q)
        return tr("query %1 “%2”, %3: after the query").arg(q).arg(token(q)).arg(keys);
    const size_t c = static_cast<size_t>(cell);
    QString tip = tr("query %1 “%2”, %3\nexact s = %4")
                      .arg(q)
                      .arg(token(q))
                      .arg(keys)
                      .arg(static_cast<double>(m_last.exact[c]), 0, 'g', 4);
    if (!m_last.approx.empty())
        tip += tr("\napproximate ŝ = %1").arg(static_cast<double>(m_last.approx[c]), 0, 'g', 4);
    tip += m_last.chosen[c] ? tr("\nattended by the method") : tr("\nnot attended");
    if (m_last.entryRate > 0) // DeepSeek-V4: the key or its entry (keysByPosition)
        tip += tr(" (its own key or its entry of %1 positions, the larger shown)")
                   .arg(m_last.entryRate);
    return tip;
}

} // namespace sparqlab::widgets
