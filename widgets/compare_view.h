#pragma once
/// \file compare_view.h
/// The compare view: two methods side by side on one head. Plain views: they show what they are
/// given and emit what the user asks.

#include "analysis/lab.h"
#include "panels.h"

class QComboBox;
class QLabel;
class QTableWidget;
class QCustomPlot;
class QCPGraph;

namespace sparqlab::widgets {

/// Two methods side by side on one head: the exact scores with both chosen sets and each
/// one's approximate scores, and a table of transfer, α, output error, recall of the true
/// top-k and mass kept. The first method is the lab's (its controls), the second one is picked
/// here and runs with the same parameters where it takes them.
class CompareView : public Panel {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    /// Draws the two states of one head (a, b) and their transfer at S positions. The plot's
    /// positions are all shown, or as the user dragged or zoomed them while S stays; its score
    /// axis fits the curves in sight; a double-click shows every position.
    void showPair(const analysis::HeadState& a, const analysis::HeadState& b);
    void showMessage(const QString& text);
    attention::Method second() const;
    void setSecond(attention::Method m);
    /// The lab's method: not offered as the second (a method against itself at the same
    /// parameters shows nothing), and where it is the second, the second becomes SparQ (Quest
    /// where the lab's is SparQ).
    void setFirst(attention::Method m);
    QCustomPlot* plot() const { return m_plot; }
    /// The table's text at (row, column 1 or 2), for tests.
    QString cell(int row, int column) const;
    int rowCount() const;
    const analysis::HeadState& first() const { return m_a; }
    const analysis::HeadState& secondState() const { return m_b; }

    /// Whether every legend entry has the width its text needs, inside the plot (for tests).
    bool legendFits() const;
    /// The legend's rows (for tests).
    int legendRows() const;
    /// The top of the plot's y range (for tests).
    double plotTop() const;

Q_SIGNALS:
    void secondChanged();

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    /// The legend on as few rows as the plot's width holds (long method names take two).
    void fitLegend();
    /// The y range and the chosen sets' lanes for the curves' peak at the positions in sight.
    void fitScores();
    QComboBox* m_method;
    QCustomPlot* m_plot;
    QTableWidget* m_table;
    QLabel* m_message;
    analysis::HeadState m_a, m_b;
    QCPGraph* m_lanes[2] = {}; ///< the two methods' chosen positions under the axis (the plot's)
};

} // namespace sparqlab::widgets
