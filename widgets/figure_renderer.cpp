#include "figure_renderer.h"
#include "plot_legend.h"
#include "plot_style.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QSvgGenerator>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace sparqlab::widgets {

namespace {

/// One palette for every figure (colour-blind safe, Okabe–Ito).
const QColor kPalette[] = {QColor(0, 114, 178),   QColor(213, 94, 0),  QColor(0, 158, 115),
                           QColor(204, 121, 167), QColor(230, 159, 0), QColor(86, 180, 233),
                           QColor(0, 0, 0),       QColor(240, 228, 66)};

QString q(const std::string& s) {
    return QString::fromStdString(s);
}

/// A figure's title that breaks into lines at the width its column had at the last layout (the
/// plot's before the first), rather than making its text's width the plot's minimum: a long
/// title (k_mass's, 738 px) made the paper view wider than a 1280 px screen.
class FigureTitle : public QCPTextElement {
public:
    FigureTitle(QCustomPlot* plot, const QString& text, const QFont& font)
        : QCPTextElement(plot, text, font) {
        setTextFlags(Qt::AlignCenter | Qt::TextWordWrap);
    }

protected:
    QSize minimumOuterSizeHint() const override {
        m_countedAt = column();
        return wrappedAt(m_countedAt);
    }
    QSize maximumOuterSizeHint() const override {
        return {QWIDGETSIZE_MAX, wrappedAt(column()).height()};
    }
    void draw(QCPPainter* painter) override {
        QCPTextElement::draw(painter);
        // The layout counted the lines at another width than it gave: once more at this one
        // (only when the width changed, so a plot squeezed below its minimum height is no loop).
        if (mOuterRect.width() != m_countedAt)
            mParentPlot->replot(QCustomPlot::rpQueuedReplot);
    }

private:
    /// The width of the title's column at the last layout, or the plot's before the first.
    int column() const {
        return mOuterRect.width() > 0 ? mOuterRect.width() : mParentPlot->viewport().width();
    }
    QSize wrappedAt(int columnWidth) const {
        const int sides = mMargins.left() + mMargins.right();
        const int width = std::max(kNarrowest, columnWidth - sides);
        const QSize text =
            QFontMetrics(mFont).boundingRect(0, 0, width, 0, mTextFlags, mText).size();
        return {std::min(text.width(), kNarrowest) + sides,
                text.height() + mMargins.top() + mMargins.bottom()};
    }

    mutable int m_countedAt = -1;
    static constexpr int kNarrowest = 80;
};

void styleAxes(QCustomPlot* plot) {
    QFont font = plot->font();
    font.setPointSize(10);
    for (QCPAxis* axis : {plot->xAxis, plot->yAxis}) {
        axis->setLabelFont(font);
        axis->setTickLabelFont(font);
        axis->grid()->setPen(QPen(QColor(220, 220, 220), 1, Qt::DotLine));
    }
}

/// A heatmap (FigureData::grid): one cell per (row, column), in viridis, with its colour scale
/// beside the axes and its rows and columns named where the figure names them.
void drawHeatmap(QCustomPlot* plot, QCPAxisRect* rect, const analysis::FigureData& f) {
    const int rows = static_cast<int>(f.grid.size()), cols = static_cast<int>(f.grid[0].size());
    auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
    map->data()->setSize(cols, rows);
    map->data()->setRange(QCPRange(0, cols - 1), QCPRange(0, rows - 1));
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            map->data()->setCell(c, r, f.grid[static_cast<size_t>(r)][static_cast<size_t>(c)]);
    auto* scale = new QCPColorScale(plot);
    plot->plotLayout()->addElement(1, 1, scale);
    scale->axis()->setLabel(q(f.gridLabel));
    map->setColorScale(scale);
    map->setInterpolate(false);         // one block per (layer, head)
    map->setGradient(style::viridis()); // perceptually uniform, readable in grey
    map->setDataRange(QCPRange(f.gridMin, f.gridMax));
    auto* group = new QCPMarginGroup(plot);
    rect->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    plot->xAxis->setRange(-0.5, cols - 0.5);
    plot->yAxis->setRange(-0.5, rows - 0.5);
    style::wholeTicks(plot->xAxis);
    style::wholeTicks(plot->yAxis);
    // Named rows and columns (e.g. needle depths and lengths).
    auto named = [](const std::vector<std::string>& labels) {
        QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
        for (size_t i = 0; i < labels.size(); ++i)
            t->addTick(static_cast<double>(i), q(labels[i]));
        return t;
    };
    if (!f.xCategories.empty())
        plot->xAxis->setTicker(named(f.xCategories));
    if (!f.yCategories.empty())
        plot->yAxis->setTicker(named(f.yCategories));
}

/// Each series: bars, a line with its ±1 standard-error band, or points, in the palette (beyond
/// its 8 colours the line style and the marker tell series apart). Returns the x extent of the
/// bars (half their width beyond their first and last x), empty (from > to) without bars.
std::pair<double, double> drawSeries(QCustomPlot* plot, const analysis::FigureData& f) {
    int colour = 0;
    // Bars reach half their width beyond their first and last x: the x range must hold them.
    double barsFrom = std::numeric_limits<double>::infinity(), barsTo = -barsFrom;
    for (const analysis::Series& s : f.series) {
        // Beyond the palette's 8 colours, the line style and the marker tell series apart.
        const int cycle = (colour / 8) % 3;
        const QColor c = kPalette[colour++ % 8];
        const Qt::PenStyle lineStyles[3] = {Qt::SolidLine, Qt::DashLine, Qt::DashDotLine};
        const QCPScatterStyle::ScatterShape shapes[3] = {
            QCPScatterStyle::ssCircle, QCPScatterStyle::ssSquare, QCPScatterStyle::ssTriangle};
        const QVector<double> x(s.x.begin(), s.x.end()), y(s.y.begin(), s.y.end());
        if (s.style == analysis::Series::Style::Bars) {
            auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
            bars->setName(q(s.name));
            bars->setData(x, y);
            const double width = x.size() > 1 ? (x[1] - x[0]) * 0.8 : 0.8;
            bars->setWidth(width);
            bars->setPen(QPen(c.darker(120)));
            bars->setBrush(c);
            for (const double v : x) {
                barsFrom = std::min(barsFrom, v - 0.75 * width);
                barsTo = std::max(barsTo, v + 0.75 * width);
            }
            continue;
        }
        if (!s.yErr.empty() && s.yErr.size() == s.y.size()) {
            // ±1 standard error as a shaded band (the paper's App. A figures).
            QVector<double> lo(y.size()), hi(y.size());
            for (int i = 0; i < y.size(); ++i) {
                lo[i] = y[i] - s.yErr[static_cast<size_t>(i)];
                hi[i] = y[i] + s.yErr[static_cast<size_t>(i)];
            }
            QCPGraph* upper = plot->addGraph(plot->xAxis, plot->yAxis);
            QCPGraph* lower = plot->addGraph(plot->xAxis, plot->yAxis);
            upper->setData(x, hi, false);
            lower->setData(x, lo, false);
            for (QCPGraph* b : {upper, lower}) {
                b->setPen(Qt::NoPen);
                b->setName(QString()); // (addGraph names it "Graph N"): not in the legend
                b->removeFromLegend();
            }
            QColor band = c;
            band.setAlpha(45);
            upper->setBrush(band);
            upper->setChannelFillGraph(lower);
        }
        QCPGraph* g = plot->addGraph(plot->xAxis, plot->yAxis);
        g->setName(q(s.name));
        g->setData(x, y, /*alreadySorted=*/false);
        QPen pen(c, 2, lineStyles[cycle]);
        if (s.style == analysis::Series::Style::Dashed) {
            pen.setStyle(Qt::DashLine);
            pen.setColor(QColor(90, 90, 90));
            pen.setWidthF(1.5);
        }
        g->setPen(pen);
        if (s.style == analysis::Series::Style::Points) {
            g->setLineStyle(QCPGraph::lsNone);
            QColor fill = c;
            fill.setAlpha(150);
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, fill, fill, 5));
        } else if (s.style == analysis::Series::Style::Line && x.size() <= 12) {
            g->setScatterStyle(QCPScatterStyle(shapes[cycle], c, Qt::white, 6));
        }
    }
    return {barsFrom, barsTo};
}

/// Log scales and their ticks, whole or named ticks, and a range with room around the data
/// (and around the bars, `bars`).
void setAxes(QCustomPlot* plot, const analysis::FigureData& f, std::pair<double, double> bars) {
    const auto [barsFrom, barsTo] = bars;
    if (f.logX) {
        plot->xAxis->setScaleType(QCPAxis::stLogarithmic);
        QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
        // Sequence lengths and batch sizes (powers of two): a tick at each doubling, 4096,
        // 8192, …, rather than at 10⁴, 2·10⁴, … between the measured points.
        bool powersOfTwo = true;
        for (const analysis::Series& s : f.series)
            for (const double x : s.x)
                powersOfTwo = powersOfTwo && x >= 1 && std::exp2(std::round(std::log2(x))) == x;
        if (powersOfTwo) {
            ticker->setLogBase(2);
            ticker->setSubTickCount(0);
            plot->xAxis->setNumberFormat("f");
            plot->xAxis->setNumberPrecision(0);
        }
        plot->xAxis->setTicker(ticker);
    }
    if (f.logY) {
        plot->yAxis->setScaleType(QCPAxis::stLogarithmic);
        plot->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    }
    if (f.integerX)
        style::wholeTicks(plot->xAxis);
    if (!f.xCategories.empty()) {
        QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
        for (size_t i = 0; i < f.xCategories.size(); ++i)
            ticker->addTick(static_cast<double>(i), q(f.xCategories[i]));
        plot->xAxis->setTicker(ticker);
    }
    plot->rescaleAxes();
    for (QCPAxis* axis : {plot->xAxis, plot->yAxis}) { // breathing room around the data
        QCPRange r = axis->range();
        if (axis->scaleType() == QCPAxis::stLogarithmic) {
            axis->setRange(r.lower / 1.5, r.upper * 1.5);
        } else {
            const double pad = r.size() > 0 ? r.size() * 0.06 : 0.5;
            r = QCPRange(r.lower - pad, r.upper + pad);
            if (axis == plot->xAxis && barsFrom < barsTo)
                r = QCPRange(std::min(r.lower, barsFrom), std::max(r.upper, barsTo));
            axis->setRange(r);
        }
    }
}

/// The vertical dotted lines of FigureData::xMarkers (1/2, 1/4, 1/8 compression), each named at
/// the top of the axes.
void addMarkers(QCustomPlot* plot, const analysis::FigureData& f) {
    for (double m : f.xMarkers) { // vertical dotted lines (1/2, 1/4, 1/8 compression), named
        auto* line = new QCPItemStraightLine(plot);
        line->point1->setCoords(m, 0);
        line->point2->setCoords(m, 1);
        line->setPen(QPen(QColor(120, 120, 120), 1, Qt::DotLine));
        auto* label = new QCPItemText(plot);
        label->position->setTypeX(QCPItemPosition::ptPlotCoords);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(m, 0.0);
        label->setPositionAlignment(Qt::AlignHCenter | Qt::AlignTop);
        const double inverse = 1.0 / m;
        label->setText(m > 0 && std::abs(inverse - std::round(inverse)) < 1e-9
                           ? QStringLiteral("1/%1").arg(std::lround(inverse))
                           : QString::number(m, 'g', 3));
        label->setColor(QColor(90, 90, 90));
        label->setBrush(Qt::white); // over its dotted line
        label->setClipToAxisRect(true);
    }
}

/// The legend of a figure of several series, in the axes' corner the figure asks for unless its
/// curves pass there (style::keepLegendClear).
void addLegend(QCustomPlot* plot, QCPAxisRect* rect, const analysis::FigureData& f) {
    rect->insetLayout()->addElement(
        new QCPLegend, (f.legendBottom ? Qt::AlignBottom : Qt::AlignTop) | Qt::AlignRight);
    auto* legend = static_cast<QCPLegend*>(rect->insetLayout()->elementAt(0));
    // On the plot's legend layer, over the grid (a QCPLegend of our own has no layer until
    // given one: its box was not drawn, and the grid ran through its entries).
    legend->setLayer(QStringLiteral("legend"));
    legend->setBrush(QColor(255, 255, 255, 220));
    legend->setBorderPen(QPen(QColor(200, 200, 200), 1));
    rect->insetLayout()->setMargins(QMargins(6, 6, 6, 6)); // (its box off the axes' lines)
    legend->setFont(QFont(plot->font().family(), 9));
    for (int i = 0; i < plot->plottableCount(); ++i)
        if (!plot->plottable(i)->name().isEmpty())
            plot->plottable(i)->addToLegend(legend);
    // The figure's corner unless its curves pass there (at the size it is drawn).
    style::keepLegendClear(plot, legend,
                           (f.legendBottom ? Qt::AlignBottom : Qt::AlignTop) | Qt::AlignRight);
}

} // namespace

void drawFigure(QCustomPlot* plot, const analysis::FigureData& f) {
    plot->clearPlottables();
    plot->clearItems();
    plot->plotLayout()->clear();
    auto* rect = new QCPAxisRect(plot);
    plot->plotLayout()->addElement(1, 0, rect);
    plot->xAxis = rect->axis(QCPAxis::atBottom);
    plot->yAxis = rect->axis(QCPAxis::atLeft);
    auto* title = new FigureTitle(plot, q(f.title), QFont(plot->font().family(), 12, QFont::Bold));
    plot->plotLayout()->addElement(0, 0, title);
    styleAxes(plot);
    plot->xAxis->setLabel(q(f.xLabel));
    plot->yAxis->setLabel(q(f.yLabel));
    if (!f.grid.empty())
        return drawHeatmap(plot, rect, f);
    setAxes(plot, f, drawSeries(plot, f));
    addMarkers(plot, f);
    if (f.series.size() > 1)
        addLegend(plot, rect, f);
}

bool savePlot(QCustomPlot* plot, const QString& path, int width, int height, const QString& title,
              QString* error) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    const QString tmp = path + QStringLiteral(".tmp.") + suffix;
    bool ok = false;
    if (suffix == QLatin1String("png")) {
        ok = plot->savePng(tmp, width, height, /*scale=*/2.0);
    } else if (suffix == QLatin1String("pdf")) {
        ok = plot->savePdf(tmp, width, height);
    } else if (suffix == QLatin1String("svg")) {
        QSvgGenerator svg;
        svg.setFileName(tmp);
        svg.setSize(QSize(width, height));
        svg.setViewBox(QRect(0, 0, width, height));
        svg.setTitle(title);
        QCPPainter painter;
        ok = painter.begin(&svg);
        if (ok) {
            plot->toPainter(&painter, width, height);
            ok = painter.end();
        }
    } else {
        *error = path + QStringLiteral(": unknown figure format '%1' (png, svg, pdf)").arg(suffix);
        return false;
    }
    QFile::remove(path);
    if (!ok || !QFile::rename(tmp, path)) {
        QFile::remove(tmp);
        *error = path + QStringLiteral(": cannot write the figure");
        return false;
    }
    return true;
}

bool saveFigure(const analysis::FigureData& f, const QString& path, int width, int height,
                QString* error) {
    QCustomPlot plot;
    plot.resize(width, height);
    plot.setViewport(QRect(0, 0, width, height)); // (a hidden widget gets its resize event late)
    drawFigure(&plot, f);
    // Twice: the first pass gives the title its column's width, the second its lines there.
    plot.replot(QCustomPlot::rpImmediateRefresh);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    return savePlot(&plot, path, width, height, q(f.title), error);
}

FigurePlot::FigurePlot(QWidget* parent)
    : QWidget(parent), m_plot(new QCustomPlot), m_caption(new QLabel) {
    m_plot->setObjectName(QStringLiteral("figurePlot"));
    m_caption->setObjectName(QStringLiteral("figureCaption"));
    m_caption->setWordWrap(true);
    m_caption->setTextFormat(Qt::PlainText);
    // The caption keeps every line it needs; the plot takes the rest.
    m_caption->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Minimum);
    m_plot->setMinimumHeight(160);
    auto* l = new QVBoxLayout(this);
    l->setContentsMargins(0, 0, 0, 0);
    l->addWidget(m_plot, 1);
    l->addWidget(m_caption);
}

void FigurePlot::showFigure(const analysis::FigureData& f) {
    drawFigure(m_plot, f);
    m_plot->updateGeometry(); // its minimum size is the new figure's (the window's layout asks)
    m_plot->replot();
    m_caption->setText(q(f.caption));
    layout()->activate(); // (the caption's lines now, not at the next layout pass)
    m_id = q(f.id);
    m_csv = q(analysis::figureCsv(f));
}

void FigurePlot::showMessage(const QString& message) {
    m_plot->clearPlottables();
    m_plot->clearItems();
    for (QCPLegend* legend : m_plot->findChildren<QCPLegend*>())
        legend->setVisible(false); // (an empty box, else; the next figure makes its own)
    m_plot->replot();
    m_caption->setText(message);
    layout()->activate();
    m_id.clear();
    m_csv.clear();
}

QString FigurePlot::caption() const {
    return m_caption->text();
}

} // namespace sparqlab::widgets
