#pragma once
/// \file map_view.h
/// The query × key map of the lab's head. Plain views: they show what they are given and emit what
/// the user asks.

#include "analysis/lab_map.h"
#include "panels.h"

#include <string>
#include <vector>

class QComboBox;
class QLabel;
class QCustomPlot;
class QCPColorMap;
class QCPColorScale;
class QCPItemLine;
class QCPItemStraightLine;
class QCPItemText;

namespace sparqlab::widgets {

/// What the query × key map colours.
enum class MapMode { Exact, Approx, Chosen, Missed };

/// The query × key map of the lab's head (analysis/lab_map.h): rows are queries, columns keys,
/// coloured by the exact attention, the method's ŝ, or the exact attention on the positions it
/// attends to or misses; the head view's query marked. Hover: values; click: that row's query.
class QueryKeyMapView : public Panel {
    Q_OBJECT
public:
    explicit QueryKeyMapView(QWidget* parent = nullptr);
    /// Draws a map; `what` names the layer, head and method; `query` is the head view's query
    /// (marked when in the window); `tokens` the capture's token texts.
    void showMap(const analysis::QueryKeyMap& map, const QString& what, int64_t query,
                 const std::vector<std::string>& tokens);
    void showMessage(const QString& text);
    void setMode(MapMode m);
    MapMode mode() const;
    static QString modeLabel(MapMode m);
    /// The value drawn for (query, key) in the current mode (NaN: blank), and the hover text.
    double value(int64_t query, int64_t key) const;
    QString tipFor(int64_t query, int64_t key) const;
    const analysis::QueryKeyMap& map() const { return m_last; }
    QCustomPlot* plot() const { return m_plot; }
    QWidget* plotWidget() const;
    /// Where (query, key) is drawn, in the plot's pixels.
    QPoint pixelOf(int64_t query, int64_t key) const;
    /// Where the dashed row's label is drawn, in the plot's pixels (empty: not shown).
    QRect rowLabelRect() const;
    QLabel* caption() const { return m_caption; }

Q_SIGNALS:
    void queryChosen(qint64 position);

private:
    void draw();
    /// The dashed row's label where the map is blank beside it (after each layout).
    void placeRowLabel();
    QString tipAt(const QPoint& pixel) const;

    QCustomPlot* m_plot;
    QComboBox* m_mode;
    QLabel* m_caption;
    QLabel* m_message;
    QCPColorMap* m_map = nullptr;
    QCPColorScale* m_scale = nullptr;
    QCPItemStraightLine* m_row = nullptr;
    QCPItemText* m_rowLabel = nullptr;
    QCPItemLine* m_rowLeader = nullptr; ///< from a label placed higher up down to its row
    analysis::QueryKeyMap m_last;
    QString m_what;
    int64_t m_query = -1;
    std::vector<std::string> m_tokens;
};

} // namespace sparqlab::widgets
