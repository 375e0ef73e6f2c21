// The head view: SparQ's three steps for one head (the |q| components, exact against
// approximate scores with the chosen and true sets, α and the output error), and its tokens.

#include "head_view.h"
#include "plot_checks.h"
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
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextCursor>
#include <QTextDocument>
#include <QTimer>
#include <QToolTip>
#include <QUrl>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace sparqlab::widgets {

namespace att = sparqlab::attention;
using namespace style;

// --- HeadView ------------------------------------------------------------------------------

HeadView::HeadView(QWidget* parent)
    : Panel(tr("Head view"), parent), m_step1(new QCustomPlot), m_step2(new QCustomPlot),
      m_step3(new QLabel), m_tint(new QComboBox),
      m_logScores(new QCheckBox(tr("scores on a log scale"))), m_tokens(new QTextBrowser),
      m_tokenRange(new QLabel), m_message(new QLabel), m_headNote(new QLabel) {
    setObjectName(QStringLiteral("headView"));
    m_step1->setObjectName(QStringLiteral("step1Plot"));
    m_step2->setObjectName(QStringLiteral("step2Plot"));
    m_step3->setObjectName(QStringLiteral("step3Summary"));
    m_tokens->setObjectName(QStringLiteral("tokenView"));
    m_tint->setObjectName(QStringLiteral("tintChoice"));
    m_tokens->installEventFilter(this);
    basicPlot(m_step1, tr("component i of q"), tr("|q_i|"));
    basicPlot(m_step2, tr("position"), tr("attention score"));
    wholeTicks(m_step1->xAxis);
    wholeTicks(m_step2->xAxis);
    m_step1->setMinimumHeight(100);
    // Legible where the plots are short (teaching pages, 125 % scale).
    ticksByLength(m_step1->yAxis);
    ticksByLength(m_step2->yAxis);
    labelByLength(m_step2->yAxis, tr("score"));
    m_linearTicks = m_step2->yAxis->ticker(); // (back from the log scale's)
    m_step2->setMinimumHeight(140);
    m_step2->legend->setVisible(true);
    // The legend goes to the top corner away from the peaks (showHead places it).
    m_step2->legend->setFont(QFont(font().family(), 8));
    m_step3->setWordWrap(true);
    m_step3->setTextFormat(Qt::RichText);
    m_step3->setMargin(4);
    m_message->setAlignment(Qt::AlignCenter);
    m_message->setWordWrap(true);
    m_tint->addItem(tr("Tint tokens by exact attention s"));
    m_tint->addItem(tr("Tint tokens by approximate attention ŝ"));
    // (beside the scale's box in a narrow window: the choice's text may be cut, not the window)
    m_tint->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_tint->setMinimumContentsLength(12);
    m_tokens->setMaximumHeight(110);
    m_tokens->setMinimumHeight(40);
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    l->addWidget(m_message);
    m_headNote->setObjectName(QStringLiteral("headNote"));
    m_headNote->setWordWrap(true);
    m_headNote->setStyleSheet(QStringLiteral("color: #555;"));
    m_headNote->setVisible(false);
    l->addWidget(m_headNote);
    auto caption = [](const QString& text) {
        auto* c = new QLabel(text);
        c->setWordWrap(true);
        return c;
    };
    for (QLabel*& c : m_captions)
        c = caption(QString());
    l->addWidget(m_captions[0]);
    l->addWidget(m_step1, 2);
    l->addWidget(m_captions[1]);
    l->addWidget(m_step2, 4);
    m_logScores->setObjectName(QStringLiteral("logScores"));
    m_logScores->setToolTip(tr("Scores on a logarithmic axis, four decades under the largest in "
                               "sight: the small scores that one large one flattens show apart"));
    connect(m_logScores, &QCheckBox::toggled, this, [this](bool on) {
        m_step2->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
        m_step2->yAxis->setTicker(
            on ? QSharedPointer<QCPAxisTicker>(QSharedPointer<QCPAxisTickerLog>::create())
               : m_linearTicks);
        if (m_legendClear.empty())
            return;
        placeLegend();
        m_step2->replot();
    });
    l->addWidget(m_captions[2]);
    l->addWidget(m_step3);
    auto* shownRow = new QHBoxLayout; // how the words are tinted, how the scores are drawn
    shownRow->setContentsMargins(0, 0, 0, 0);
    shownRow->addWidget(m_tint, 1);
    shownRow->addWidget(m_logScores);
    l->addLayout(shownRow);
    l->addWidget(m_tokenRange);
    l->addWidget(m_tokens);
    m_tokenRange->setObjectName(QStringLiteral("tokenRange"));
    m_tokenRange->setVisible(false);
    connect(m_tint, &QComboBox::currentIndexChanged, this, &HeadView::drawTokens);
    // The legend and the strip follow the plot's range as the user drags or zooms it (redraws
    // of the same positions keep it: showHead).
    followPositionRange(
        m_step2, [this] { followRange(); }, [this] { return m_state.positions(); });
    // A click on a token shows that position's query; hovering shows its values.
    m_tokens->setOpenLinks(false);
    m_tokens->setToolTip(tr("Click a token to examine its query"));
    connect(m_tokens, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
        bool ok = false;
        const qint64 p = url.fragment().toLongLong(&ok);
        if (ok)
            Q_EMIT queryChosen(p);
    });
    connect(m_tokens, &QTextBrowser::highlighted, this, [this](const QUrl& url) {
        bool ok = false;
        const qint64 p = url.fragment().toLongLong(&ok);
        if (ok)
            QToolTip::showText(QCursor::pos(), scoreTip(p), m_tokens);
    });
    // Laid out at a new size (the teaching bar, the window): the legend is placed again, and
    // laid out with it before this replot draws (placeLegendAwayFrom).
    connect(m_step2, &QCustomPlot::afterLayout, this, [this] {
        if (m_legendClear.empty() || m_step2->axisRect()->rect().size() == m_legendPlacedFor)
            return;
        placeLegend();
    });
    for (QCustomPlot* p : {m_step1, m_step2}) {
        p->setMouseTracking(true);
        connect(p, &QCustomPlot::mouseMove, this, [this, p](QMouseEvent* e) { hoverPlot(p, e); });
    }
    showMessage(tr("Run a prompt to see SparQ at work."));
}

void HeadView::placeLegend() {
    // The y range fits the curves in sight: zoomed into quiet positions, their scores show.
    const auto [lower, upper] = xRange(m_step2);
    if (upper >= 0 && lower <= static_cast<double>(m_legendClear.size()) - 1)
        m_scoresTop = peakInSight(m_step2, {&m_legendClear}) * 1.05 + 1e-9;
    if (logScores()) // four decades under the peak in sight
        m_step2->yAxis->setRange(m_scoresTop * 1e-4, m_scoresTop);
    else
        m_step2->yAxis->setRange(0, m_scoresTop);
    placeLegendAwayFrom(m_step2, m_legendClear);
    m_legendPlacedFor = m_step2->axisRect()->rect().size();
    m_legendPlacedOver = xRange(m_step2);
}

void HeadView::followRange() {
    // Dragged or zoomed: the legend away from the peaks now in sight, the strip their words.
    if (!m_legendClear.empty() && xRange(m_step2) != m_legendPlacedOver) {
        placeLegend();
        m_step2->replot(QCustomPlot::rpQueuedReplot);
    }
    drawTokens();
}

void HeadView::setLogScores(bool on) {
    m_logScores->setChecked(on);
}

bool HeadView::logScores() const {
    return m_logScores->isChecked();
}

int HeadView::curveUnderLegend() const {
    return style::curveUnderLegend(m_step2);
}

QRect HeadView::legendRect() const {
    return m_step2->legend->outerRect();
}

QRect HeadView::axesRect() const {
    return m_step2->axisRect()->rect();
}

QString HeadView::scoreTip(int64_t position) const {
    const int64_t S = m_state.positions(), C = m_state.entries;
    if (position < 0)
        return QString();
    const size_t j = static_cast<size_t>(position);
    const QString token =
        j < m_tokenTexts.size() ? QString::fromStdString(m_tokenTexts[j]) : QString();
    if (position >= S)
        return tr("position %1 “%2”: after the query (click to examine its query)")
            .arg(position)
            .arg(token);
    // What a key shows: s, ŝ, whether the method and (on a compressed layer) the model chose it.
    auto about = [this](int64_t key) {
        const size_t k = static_cast<size_t>(key);
        QString tip = tr("exact s = %1").arg(static_cast<double>(m_state.exact[k]), 0, 'g', 4);
        if (k < m_state.approx.size())
            tip +=
                tr(" · approximate ŝ = %1").arg(static_cast<double>(m_state.approx[k]), 0, 'g', 4);
        const bool chosen = std::binary_search(m_state.chosen.begin(), m_state.chosen.end(), key);
        const bool top = std::binary_search(m_state.trueTopK.begin(), m_state.trueTopK.end(), key);
        tip += chosen ? tr("\nchosen (attended)") : tr("\nnot attended");
        if (top)
            tip += tr(" · in the true top-%1").arg(m_state.trueTopK.size());
        if (m_state.entryRate > 0)
            tip += std::binary_search(m_state.modelChosen.begin(), m_state.modelChosen.end(), key)
                       ? tr(" · the model attends it")
                       : tr(" · the model does not attend it");
        return tip;
    };
    if (m_state.entryRate == 0) {
        QString tip = tr("position %1 “%2”\n").arg(position).arg(token) + about(position);
        if (position == S - 1)
            tip += tr("\nthe query's own position");
        return tip;
    }
    // DeepSeek-V4: the position's own key (in the window, or not seen) and the entry pooling it.
    QString tip = tr("position %1 “%2”").arg(position).arg(token);
    const int64_t key = C + position, w = position / m_state.entryRate;
    // (The window's keys are the model's own on every compressed layer.)
    const bool seen =
        std::binary_search(m_state.modelChosen.begin(), m_state.modelChosen.end(), key);
    tip += seen ? tr("\nits own key (in the window): ") + about(key)
                : tr("\nits own key: outside the window");
    if (w < C)
        tip += tr("\nentry %1 (positions %2–%3): ")
                   .arg(w)
                   .arg(w * m_state.entryRate)
                   .arg((w + 1) * m_state.entryRate - 1) +
               about(w);
    else
        tip += tr("\nits entry is not complete yet");
    if (position == S - 1)
        tip += tr("\nthe query's own position");
    return tip;
}

QString HeadView::componentTip(int64_t component) const {
    if (component < 0 || component >= static_cast<int64_t>(m_state.qAbs.size()))
        return QString();
    const bool used = std::find(m_state.components.begin(), m_state.components.end(), component) !=
                      m_state.components.end();
    const size_t i = static_cast<size_t>(component);
    QString tip = tr("component %1: |q_%1| = %2")
                      .arg(component)
                      .arg(static_cast<double>(m_state.qAbs[i]), 0, 'g', 4);
    if (m_state.rankedHeads > 1 && i < m_state.qRanked.size())
        tip += tr("; summed over heads %1–%2: %3")
                   .arg(m_state.firstRankedHead)
                   .arg(m_state.firstRankedHead + m_state.rankedHeads - 1)
                   .arg(static_cast<double>(m_state.qRanked[i]), 0, 'g', 4);
    return tip + (used ? tr(" (one of the r SparQ uses)") : QString());
}

QString HeadView::stepOneTip(double x) const {
    const attention::StepOneView& v = m_state.stepOne;
    const int64_t i = std::llround((x - v.x0) / v.dx);
    if (i < 0 || i >= static_cast<int64_t>(v.values.size()))
        return QString();
    const size_t j = static_cast<size_t>(i);
    return tr("%1 %2: %3 = %4%5")
        .arg(QString::fromStdString(v.xLabel))
        .arg(v.curve ? QString::number(i + 1)
                     : QString::number(v.x0 + static_cast<double>(i) * v.dx, 'g', 6))
        .arg(QString::fromStdString(v.yLabel))
        .arg(v.values[j], 0, 'g', 4)
        .arg(v.used[j] ? tr(" (used)") : QString());
}

void HeadView::hoverPlot(QCustomPlot* plot, QMouseEvent* event) {
    if (m_state.exact.empty() || !plot->axisRect()->rect().contains(event->pos())) {
        QToolTip::hideText();
        return;
    }
    const int64_t x = std::llround(plot->xAxis->pixelToCoord(event->pos().x()));
    const QString tip = plot != m_step1 ? scoreTip(x)
                        : m_state.stepOne.values.empty()
                            ? componentTip(x)
                            : stepOneTip(plot->xAxis->pixelToCoord(event->pos().x()));
    if (tip.isEmpty())
        QToolTip::hideText();
    else
        QToolTip::showText(event->globalPosition().toPoint(), tip, plot);
}

void HeadView::showMessage(const QString& text) {
    m_message->setText(text);
    m_message->setVisible(!text.isEmpty());
}

void HeadView::setHeadNote(const QString& text) {
    m_headNote->setText(text);
    m_headNote->setVisible(!text.isEmpty());
}

QString HeadView::headNote() const {
    return m_headNote->text();
}

void HeadView::highlightStep(int step) {
    // The teaching bar's warm orange: a highlight, not the red of an error.
    const QString frame = QStringLiteral("border: 3px solid #e6850e;");
    m_step1->setStyleSheet(step == 1 ? frame : QString());
    m_step2->setStyleSheet(step == 2 ? frame : QString());
    m_step3->setStyleSheet(step == 3 ? frame : QString());
    // QCustomPlot paints itself; a frame shows through its parent margin instead.
    for (auto [p, s] : {std::pair{m_step1, 1}, std::pair{m_step2, 2}}) {
        p->setBackground(step == s ? QBrush(QColor(255, 245, 230)) : QBrush(Qt::white));
        p->replot(QCustomPlot::rpQueuedReplot);
    }
    m_step3->setAutoFillBackground(step == 3);
    QPalette pal = m_step3->palette();
    pal.setColor(QPalette::Window, QColor(255, 245, 230));
    m_step3->setPalette(pal);
    // Teaching Step 1 gives the components plot more height (legible at 1280×800); otherwise
    // the scores plot, with more to show, takes twice the components'.
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    l->setStretchFactor(m_step1, step == 1 ? 3 : 2);
    // Where the view scrolls (a short window), the step presented in sight with its caption,
    // once laid out with its new stretch.
    if (step >= 1 && step <= 3) {
        QWidget* shown = step == 1 ? m_step1 : step == 2 ? static_cast<QWidget*>(m_step2) : m_step3;
        QWidget* caption = m_captions[static_cast<size_t>(step - 1)];
        QTimer::singleShot(0, this, [this, shown, caption] {
            for (QWidget* w = parentWidget(); w; w = w->parentWidget())
                if (auto* scroll = qobject_cast<QScrollArea*>(w)) {
                    // (the caption first, then the step whole: a tall caption gives way)
                    scroll->ensureWidgetVisible(caption, 0, 8);
                    scroll->ensureWidgetVisible(shown, 0, 8);
                    break;
                }
        });
    }
}

void HeadView::showHead(const analysis::HeadState& h, const std::vector<std::string>& tokens) {
    m_message->setVisible(false);
    // The same positions of the same text (another head, method or setting): the scores plot
    // keeps the range the user dragged or zoomed to; a new query or capture shows them all.
    const bool samePositions = h.positions() == m_state.positions() && tokens == m_tokenTexts;
    m_state = h;
    m_tokenTexts = tokens;
    const size_t D = h.qAbs.size();

    // Step 1: what the method ranks by (its unit's view), or |q| with the chosen components in
    // orange.
    m_step1->clearPlottables();
    m_step1->clearItems();
    if (!h.stepOne.values.empty())
        drawStepOne(h.stepOne);
    else
        drawComponents(h, D);

    // Step 2: s and ŝ over positions, the chosen and the true top-k marked, local window shaded.
    // On a DeepSeek-V4 compressed layer the entries are bars over the positions they pool.
    m_step2->clearPlottables();
    m_step2->clearItems();
    const size_t S = static_cast<size_t>(h.positions());
    const std::vector<double> keyX = h.keyPositions();
    addKeyCurve(m_step2, h, h.exact, h.entryRate > 0 ? tr("exact s of a position") : tr("exact s"),
                QPen(kExact, 1.2), tr("exact s of an entry (%1 positions)").arg(h.entryRate));
    if (!h.approx.empty())
        addKeyCurve(m_step2, h, h.approx, tr("approximate ŝ"), QPen(kApprox, 1.0));
    const std::vector<double>* xs = h.entryRate > 0 ? &keyX : nullptr;
    addMarks(m_step2, h.trueTopK, h.exact, tr("true top-k"), kTrue, QCPScatterStyle::ssCircle, 7,
             xs);
    addMarks(m_step2, h.chosen, h.exact, tr("chosen (attended)"), kChosen, QCPScatterStyle::ssCross,
             7, xs);
    if (h.entryRate > 0)
        addMarks(m_step2, h.modelChosen, h.exact, tr("the model's own keys"), kModel,
                 QCPScatterStyle::ssDiamond, 5, xs);
    if (h.localFrom < static_cast<int64_t>(h.exact.size())) {
        auto* band = new QCPItemRect(m_step2);
        band->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
        band->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
        // (From the first local key's positions: an entry's first where the window reaches back
        // into the entries.)
        band->topLeft->setCoords(h.localFrom < h.entries
                                     ? static_cast<double>(h.localFrom * h.entryRate) - 0.5
                                     : h.keyPosition(h.localFrom) - 0.5,
                                 0);
        band->bottomRight->setCoords(static_cast<double>(S) - 0.5, 1);
        band->setBrush(kLocal);
        band->setPen(Qt::NoPen);
        band->setLayer(QStringLiteral("background"));
    }
    if (!samePositions)
        showAllPositions(m_step2, static_cast<int64_t>(S));
    m_legendClear = h.exact; // the legend keeps clear of both curves
    for (size_t i = 0; i < std::min(m_legendClear.size(), h.approx.size()); ++i)
        m_legendClear[i] = std::max(m_legendClear[i], h.approx[i]);
    m_legendClear = m_state.byPosition(m_legendClear);
    placeLegend();
    m_step2->replot();

    // The captions say what this method does at each step (SparQ's three steps, or the
    // method's own rule from the method table).
    const att::MethodInfo& info = att::methodInfo(h.method);
    const bool sparq = h.method == att::Method::Sparq || h.method == att::Method::SparqTopP;
    m_captions[0]->setText(
        !h.stepOne.caption.empty() ? QString::fromStdString(h.stepOne.caption)
        : sparq && h.rankedHeads > 1
            ? tr("<b>Step 1</b> — the r largest components of |q| summed over heads %1–%2, which "
                 "share KV head %3 (•: this head's |q<sub>i</sub>|)")
                  .arg(h.firstRankedHead)
                  .arg(h.firstRankedHead + h.rankedHeads - 1)
                  .arg(h.firstRankedHead / h.rankedHeads)
        : sparq ? tr("<b>Step 1</b> — the r largest components of |q|")
                : tr("<b>Step 1</b> — the query's components |q<sub>i</sub>| (SparQ's first step, "
                     "shown for comparison; %1 ranks positions its own way: "
                     "Step 2)")
                      .arg(QString::fromUtf8(info.label)));
    m_captions[1]->setText(
        (h.approx.empty()
             ? tr("<b>Step 2</b> — %1 attends to the positions marked ×: %2")
                   .arg(QString::fromUtf8(info.label), QString::fromUtf8(info.summary))
             : tr("<b>Step 2</b> — approximate scores ŝ (%1) pick the positions marked ×; exact "
                  "attention runs on them")
                       .arg(QString::fromUtf8(info.label)) +
                   (h.positionHeads > 1
                        ? tr(", one set for the group's %1 heads by the GQA rule %2")
                              .arg(h.positionHeads)
                              .arg(QString::fromStdString(h.gqaRule))
                        : QString())) +
        tr(" (drag and wheel to scroll and zoom, double-click for all)") +
        (h.entryRate > 0 && h.entries == 0
             ? tr(".<br>This layer also reads DeepSeek-V4's compressed entries, one per %1 "
                  "positions: none is complete at this query yet.")
                   .arg(h.entryRate)
         : h.entryRate > 0
             ? tr(".<br>This layer also reads DeepSeek-V4's compressed entries (bars), one per %1 "
                  "positions; ◆ marks the keys the model itself attends%2.")
                   .arg(h.entryRate)
                   .arg(h.entryTopK > 0 ? tr(" (the window and the %1 entries its indexer picks)")
                                              .arg(h.entryTopK)
                                        : tr(" (the window and every entry complete)"))
             : QString()));
    m_captions[2]->setText(sparq ? tr("<b>Step 3</b> — α and the mean-value mix")
                                 : tr("<b>Step 3</b> — what the chosen positions hold"));

    // Step 3: α against the true top-k mass, the mean-value mix, the output error.
    QString text;
    if (sparq)
        text = tr("α = Σ ŝ over the chosen positions%6 = <b>%1</b> (τ = %2); the exact mass of the "
                  "true top-k is <b>%3</b>, of the chosen ones %4.<br>"
                  "y = α · y<sub>top-k</sub> + (1 − α) · v̄ mixes in %5% of the mean value.<br>")
                   .arg(h.alpha, 0, 'f', 3)
                   .arg(h.tau, 0, 'f', 2)
                   .arg(h.trueMass, 0, 'f', 3)
                   .arg(h.chosenMass, 0, 'f', 3)
                   .arg(100 * (1 - h.alpha), 0, 'f', 1)
                   .arg(h.sinkShare > 0 ? tr(" and the sink (kept by every method)") : QString());
    else
        text = tr("Exact mass on the positions used: <b>%1</b> (true top-k: %2).<br>")
                   .arg(h.chosenMass, 0, 'f', 3)
                   .arg(h.trueMass, 0, 'f', 3);
    text += tr("%1 positions · recall of the true top-%1 %2 · output error ‖y − "
               "y<sub>dense</sub>‖ / ‖y<sub>dense</sub>‖ = <b>%3</b>")
                .arg(h.count)
                .arg(h.topkAgreement, 0, 'f', 3)
                .arg(h.outputError, 0, 'g', 3);
    if (h.entryRate > 0)
        text += tr("<br>Against the model's own attention (◆): the method's error <b>%1</b>, dense "
                   "attention's over every key seen %2.")
                    .arg(h.modelError, 0, 'g', 3)
                    .arg(h.denseModelError, 0, 'g', 3);
    m_step3->setText(text);
    drawTokens();
}

void HeadView::drawComponents(const analysis::HeadState& h, size_t D) {
    // The bars are what step 1 ranks: this head's |q_i|, or under the GQA group rule the sum
    // over the heads sharing its KV head, with this head's own |q_i| as dots.
    const bool group = h.rankedHeads > 1 && h.qRanked.size() == D;
    m_step1->xAxis->setLabel(tr("component i of q"));
    // (An axis label is plain text: no subscripts, which Unicode's draw some 5 px high; short,
    // as the plot is: the caption above says over which heads the sum runs.)
    m_step1->yAxis->setLabel(group ? tr("Σ |q[i]|") : tr("|q[i]|"));
    QVector<double> all = toQ(group ? h.qRanked : h.qAbs), top(static_cast<int>(D), 0.0);
    for (const int64_t i : h.components) {
        top[static_cast<int>(i)] = all[static_cast<int>(i)];
        all[static_cast<int>(i)] = 0;
    }
    auto* rest = new QCPBars(m_step1->xAxis, m_step1->yAxis);
    rest->setData(iota(D), all);
    rest->setBrush(QColor(160, 160, 160));
    rest->setPen(Qt::NoPen);
    rest->setWidth(0.8);
    auto* chosen = new QCPBars(m_step1->xAxis, m_step1->yAxis);
    chosen->setData(iota(D), top);
    chosen->setBrush(kApprox);
    chosen->setPen(Qt::NoPen);
    chosen->setWidth(0.8);
    if (group) {
        QCPGraph* own = m_step1->addGraph();
        own->setData(iota(D), toQ(h.qAbs), true);
        own->setLineStyle(QCPGraph::lsNone);
        own->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, Qt::black, 4));
    }
    m_step1->xAxis->setRange(-1, static_cast<double>(D));
    m_step1->yAxis->rescale();
    m_step1->yAxis->setRangeLower(0);
    m_step1->replot();
}

void HeadView::drawStepOne(const attention::StepOneView& v) {
    const int n = static_cast<int>(v.values.size());
    QVector<double> x(n), used(n, 0.0), rest(n, 0.0);
    for (int i = 0; i < n; ++i) {
        x[i] = v.x0 + i * v.dx;
        (v.used[static_cast<size_t>(i)] ? used : rest)[i] = v.values[static_cast<size_t>(i)];
    }
    m_step1->xAxis->setLabel(QString::fromStdString(v.xLabel));
    m_step1->yAxis->setLabel(QString::fromStdString(v.yLabel));
    if (v.curve) {
        QCPGraph* all = m_step1->addGraph();
        all->setData(x, QVector<double>(v.values.begin(), v.values.end()), true);
        all->setPen(QPen(QColor(120, 120, 120), 1.2));
        QVector<double> ux, uy;
        for (int i = 0; i < n; ++i)
            if (v.used[static_cast<size_t>(i)]) {
                ux.push_back(x[i]);
                uy.push_back(v.values[static_cast<size_t>(i)]);
            }
        QCPGraph* kept = m_step1->addGraph();
        kept->setData(ux, uy, true);
        kept->setPen(QPen(kApprox, 2.5));
        if (v.cut >= 0) {
            auto* cut = new QCPItemStraightLine(m_step1);
            cut->point1->setCoords(0, v.cut);
            cut->point2->setCoords(1, v.cut);
            cut->setPen(QPen(kTrue, 1, Qt::DashLine));
        }
        m_step1->xAxis->setRange(0, v.x0 + n * v.dx);
        m_step1->yAxis->setRange(0, 1.05);
    } else {
        for (auto [data, colour] :
             {std::pair{&rest, QColor(160, 160, 160)}, std::pair{&used, kApprox}}) {
            auto* bars = new QCPBars(m_step1->xAxis, m_step1->yAxis);
            bars->setData(x, *data);
            bars->setBrush(colour);
            bars->setPen(Qt::NoPen);
            bars->setWidth(0.8 * v.dx);
        }
        m_step1->xAxis->setRange(v.x0 - v.dx, v.x0 + n * v.dx);
        m_step1->yAxis->rescale();
        m_step1->yAxis->setRangeLower(std::min(0.0, m_step1->yAxis->range().lower));
    }
    m_step1->replot();
}

void HeadView::setTemplateTokens(std::vector<bool> templateTokens) {
    if (templateTokens == m_templateTokens)
        return;
    m_templateTokens = std::move(templateTokens);
    m_tinted.clear(); // redraw the strip
    drawTokens();
}

void HeadView::drawTokens() {
    const std::vector<float> w = m_state.byPosition(
        m_tint->currentIndex() == 1 && !m_state.approx.empty() ? m_state.approx : m_state.exact);
    if (w.empty() || m_tokenTexts.size() < w.size()) {
        m_tokens->setPlainText(QString());
        m_tinted.clear();
        m_tokenRange->setVisible(false);
        return;
    }
    // The strip shows the tokens of the scores plot's visible range, at most kStripTokens of
    // them (its last ones): a 16k-token prompt scrolls with the plot instead of laying out
    // 16k spans. Dragging or zooming the plot moves it.
    const int64_t S = static_cast<int64_t>(w.size());
    const auto [from, to] = positionsInSight(m_step2, S);
    const int64_t hi = std::clamp<int64_t>(to, 1, S);
    const int64_t lo = std::clamp<int64_t>(std::max(from, hi - kStripTokens), 0, hi - 1);
    // Laying out a thousand tinted tokens costs more than the rest of the view: the exact
    // weights do not move with r or k, so most slider changes keep the text as it is.
    if (w == m_tinted && lo == m_stripFrom && hi == m_stripTo)
        return;
    m_tinted = w;
    m_stripFrom = lo;
    m_stripTo = hi;
    // After the query (the last position of the scores), the keys it cannot see: greyed, to be
    // clicked (a few hundred of them).
    const int64_t all = static_cast<int64_t>(m_tokenTexts.size());
    const int64_t after = hi == S ? std::min<int64_t>(all, S + kStripAfter) : S;
    m_tokenRange->setVisible(lo > 0 || hi < S);
    m_tokenRange->setText(
        tr("Tokens %1–%2 of %3 (drag or zoom the scores plot to move)").arg(lo).arg(hi - 1).arg(S));
    const float mx = *std::max_element(w.begin() + lo, w.begin() + hi);
    QString html;
    html.reserve(static_cast<int>(hi - lo) * 60);
    for (int64_t i = lo; i < hi; ++i) {
        const size_t j = static_cast<size_t>(i);
        const double a = mx > 0 ? std::sqrt(w[j] / mx) : 0; // sqrt: small weights stay visible
        const QColor c = QColor::fromRgbF(1 - 0.8 * a, 1 - 0.45 * a, 1 - 0.2 * a);
        // The chat template's own tokens in grey text, the turns' content in black.
        const bool templ = j < m_templateTokens.size() && m_templateTokens[j];
        // The query's own token framed; every token a link to its position's query.
        if (i == S - 1)
            html += QStringLiteral("<a name=\"query\"></a>");
        html +=
            QStringLiteral("<a href=\"#%4\" style=\"text-decoration:none; color:%2\"><span "
                           "style=\"background-color:%1%3\">%5</span></a>")
                .arg(c.name(), templ ? QStringLiteral("#7a7a7a") : QStringLiteral("#000000"),
                     i == S - 1 ? QStringLiteral("; font-weight:bold; text-decoration:underline")
                                : QString(),
                     QString::number(i), QString::fromStdString(m_tokenTexts[j]).toHtmlEscaped());
    }
    for (int64_t i = S; i < after; ++i)
        html +=
            QStringLiteral("<a href=\"#%1\" style=\"text-decoration:none; "
                           "color:#b0b0b0\">%2</a>")
                .arg(QString::number(i),
                     QString::fromStdString(m_tokenTexts[static_cast<size_t>(i)]).toHtmlEscaped());
    m_tokens->setHtml(html);
    m_stripToQuery = hi == S;
    m_stripScrolledTo = -1;
    scrollStripToQuery();
}

QRect queryTokenRect(const QTextBrowser* strip) {
    const QTextDocument* doc = strip->document();
    for (QTextBlock b = doc->begin(); b.isValid(); b = b.next())
        for (auto it = b.begin(); !it.atEnd(); ++it)
            if (it.fragment().charFormat().anchorNames().contains(QStringLiteral("query"))) {
                QTextCursor c(const_cast<QTextDocument*>(doc));
                c.setPosition(it.fragment().position());
                return strip->cursorRect(c);
            }
    return {};
}

void HeadView::scrollStripToQuery() {
    if (!m_stripToQuery || !m_tokens->isVisible())
        return;
    m_stripToQuery = false;
    // The query in view, low: the tinted words before it above, a line after. (Scrolled to the
    // query's line and up by two thirds, the last query, whose line cannot come to the top, was
    // scrolled up from the foot: a middle of the prompt was shown.)
    m_tokens->scrollToAnchor(QStringLiteral("query")); // (the text laid out up to it)
    const QRect at = queryTokenRect(m_tokens);
    QScrollBar* bar = m_tokens->verticalScrollBar();
    if (at.isValid())
        bar->setValue(bar->value() + at.top() - m_tokens->viewport()->height() * 2 / 3);
    m_stripScrolledTo = bar->value();
}

bool HeadView::eventFilter(QObject* watched, QEvent* event) {
    // Drawn while another view was shown: scrolled when the strip shows, after its own show
    // event has put the query's line at the top.
    if (watched == m_tokens && event->type() == QEvent::Show && m_stripToQuery)
        QTimer::singleShot(0, this, &HeadView::scrollStripToQuery);
    // Resized (a column beside the view hidden or shown, the window resized) while the strip
    // still showed its query where it was scrolled to: the words flow anew, scrolled again.
    if (watched == m_tokens && event->type() == QEvent::Resize && m_stripScrolledTo >= 0 &&
        m_tokens->verticalScrollBar()->value() == m_stripScrolledTo) {
        m_stripToQuery = true;
        QTimer::singleShot(0, this, &HeadView::scrollStripToQuery);
    }
    return QWidget::eventFilter(watched, event);
}

} // namespace sparqlab::widgets
