#pragma once
/// \file overview_view.h
/// The overview: three layer × head grids of a measure each. Plain views: they show what they are
/// given and emit what the user asks.

#include "analysis/lab.h"
#include "panels.h"

class QComboBox;
class QLabel;
class QCustomPlot;
class QCPColorMap;
class QCPItemRect;
class QCPTextElement;

namespace sparqlab::widgets {

/// Three layer × head grids, each of a measure the user picks (coverage, kurtosis, SparQ's
/// agreement, the method's recall or output error, k_mass), colour-mapped.
class OverviewView : public Panel {
    Q_OBJECT
public:
    explicit OverviewView(QWidget* parent = nullptr);
    /// The grids of every layer and head for the query at position `query`.
    void showOverview(const analysis::Overview& o, int r, int k, attention::Method method,
                      int64_t query = -1);
    void showMessage(const QString& text);
    QCustomPlot* plot() const { return m_plot; }
    /// The value drawn at (grid 0–2, layer, head), for tests.
    double cell(int grid, int layer, int head) const;
    /// Where (grid, layer, head) is drawn, in the plot's pixels.
    QPoint cellCenter(int grid, int layer, int head) const;
    /// The measure grid i shows.
    analysis::Measure measure(int grid) const;
    void setMeasure(int grid, analysis::Measure m);
    /// Frames the head the head view shows, in every grid.
    void setCurrentHead(int layer, int head);
    /// A hybrid's captured layers by their model layer (empty: the captured layers are the
    /// model's): the rows are labelled with these numbers.
    void setModelLayers(std::vector<int64_t> layers);
    /// The row labels drawn (the layer axis' tick labels), for tests.
    QStringList layerLabels() const;
    /// The labels of grid i's colour bar, for tests.
    QStringList scaleLabels(int grid) const;

Q_SIGNALS:
    void cellClicked(int layer, int head);

private:
    void draw();

    QCustomPlot* m_plot;
    QCPColorMap* m_maps[3] = {};
    QComboBox* m_measures[3] = {};
    QCPTextElement* m_titles[3] = {};
    QCPItemRect* m_current[3] = {};
    int m_currentLayer = -1, m_currentHead = -1;
    std::vector<int64_t> m_modelLayers;
    QLabel* m_message;
    analysis::Overview m_last;
};

} // namespace sparqlab::widgets
