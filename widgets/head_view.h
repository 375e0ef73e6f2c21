#pragma once
/// \file head_view.h
/// The head view: SparQ's three steps for one head and the decode-step query. Plain views: they
/// show what they are given and emit what the user asks.

#include "analysis/lab.h"
#include "panels.h"

#include <QSharedPointer>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

class QCheckBox;
class QComboBox;
class QLabel;
class QMouseEvent;
class QTextBrowser;
class QTimer;
class QCPAxisTicker;
class QCustomPlot;

namespace sparqlab::widgets {

/// SparQ's three steps for one head and the decode-step query (SPARQ.md §3).
/// Where the strip's query token (its anchor "query") is drawn, in its viewport's pixels;
/// invalid where it has none.
QRect queryTokenRect(const QTextBrowser* strip);

class HeadView : public Panel {
    Q_OBJECT
public:
    explicit HeadView(QWidget* parent = nullptr);
    /// Draws a head. `tokens` label the position axis (may be empty); tokens after the query's
    /// position (the state's S − 1) are the keys it cannot see: the strip shows them greyed, to
    /// be clicked. A DeepSeek-V4 compressed layer's entries are bars over the positions they pool
    /// (HeadState::keyPosition), the keys the model attends marked beside the method's.
    void showHead(const analysis::HeadState& state, const std::vector<std::string>& tokens);
    /// Shows a message instead of plots (no capture yet, or an error).
    void showMessage(const QString& text);
    /// A line above the steps saying why this head is shown (a first screen's choice); empty:
    /// none.
    void setHeadNote(const QString& text);
    QString headNote() const;
    /// Teaching mode: 0 none, else the step (1–3) whose plot is framed.
    void highlightStep(int step);
    /// Positions the chat template wrote (true) rather than a turn's content: the token strip
    /// greys their text. Empty: no chat.
    void setTemplateTokens(std::vector<bool> templateTokens);
    const std::vector<bool>& templateTokens() const { return m_templateTokens; }

    QCustomPlot* componentsPlot() const { return m_step1; }
    QCustomPlot* scoresPlot() const { return m_step2; }
    /// The scores plot on a logarithmic axis (four decades under the peak in sight): the small
    /// scores the one spike of a sink or the last position flattens show apart.
    void setLogScores(bool on);
    bool logScores() const;
    QLabel* summary() const { return m_step3; }
    QTextBrowser* tokenView() const { return m_tokens; }
    /// What the scores plot shows now (for tests): exact and approximate series.
    const analysis::HeadState& state() const { return m_state; }
    /// How much of the scores plot's curves (exact s, ŝ, the marks) its legend covers or comes
    /// within 8 px of as drawn (style::curveUnderLegend).
    int curveUnderLegend() const;
    /// Where the scores plot's legend and its axes lie as laid out now, in the plot's pixels.
    QRect legendRect() const;
    QRect axesRect() const;
    /// What hovering at a position of the scores plot, or at a component of Step 1, shows.
    QString scoreTip(int64_t position) const;
    QString componentTip(int64_t component) const;

Q_SIGNALS:
    /// A token of the strip was clicked: show the query of that position.
    void queryChosen(qint64 position);

private:
    void drawTokens();
    void hoverPlot(QCustomPlot* plot, QMouseEvent* event);
    void drawComponents(const analysis::HeadState& h, size_t D);
    void drawStepOne(const attention::StepOneView& v);
    QString stepOneTip(double x) const;
    /// The scores plot's y range and legend for its size and x range now (again when its size
    /// changes, the teaching bar makes it short, or the user drags or zooms it).
    void placeLegend();
    /// After the scores plot's x range moved (a drag or zoom, coalesced): its legend and the word
    /// strip follow. Redraws of the same positions (another head, method or setting) keep the
    /// range; another query or prompt (other tokens), or a double-click, shows them all again.
    void followRange();
    /// Scrolls the word strip to show the query low in view, the words before it above, once
    /// the strip is shown (a hidden one is scrolled to its anchor again by its show event).
    void scrollStripToQuery();
    bool eventFilter(QObject* watched, QEvent* event) override;

    QCustomPlot* m_step1;
    QCustomPlot* m_step2;
    QLabel* m_step3;
    QLabel* m_captions[3] = {};
    QComboBox* m_tint;
    QCheckBox* m_logScores;
    QSharedPointer<QCPAxisTicker> m_linearTicks; ///< the scores plot's ticks on a linear axis
    QTextBrowser* m_tokens;
    QLabel* m_tokenRange; ///< which tokens the strip shows, when not all
    int64_t m_stripFrom = -1, m_stripTo = -1;
    bool m_stripToQuery = false; ///< the strip was drawn, not yet scrolled to its query
    int m_stripScrolledTo = -1;  ///< where scrolling to the query left the strip (−1: not so)
    static constexpr int64_t kStripTokens = 1000;
    static constexpr int64_t kStripAfter = 300; ///< tokens after the query in the strip
    QLabel* m_message;
    QLabel* m_headNote;
    analysis::HeadState m_state;
    std::vector<std::string> m_tokenTexts;
    std::vector<float> m_tinted; // the weights the token view shows now
    std::vector<bool> m_templateTokens;
    std::vector<float> m_legendClear; ///< the highest of the scores plot's curves, by position
    double m_scoresTop = 0;           ///< the y range's top before the legend's room (in sight)
    QSize m_legendPlacedFor;          ///< the axis rect the legend was placed in
    std::pair<double, double> m_legendPlacedOver; ///< and the x range
};

} // namespace sparqlab::widgets
