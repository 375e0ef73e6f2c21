#pragma once
/// \file layers_view.h
/// Selection across layers: how much each layer's chosen keys overlap the previous layer's, for
/// the exact top-k, the lab's method and a DSA model's own indexer (analysis::LayerReuse). Plain
/// views: they show what they are given.

#include "analysis/selection_overlap.h"
#include "panels.h"

class QCustomPlot;
class QLabel;

namespace sparqlab::widgets {

class LayersView : public Panel {
    Q_OBJECT
public:
    explicit LayersView(QWidget* parent = nullptr);
    void showReuse(const analysis::LayerReuse& r);
    void showMessage(const QString& text);
    QCustomPlot* plot() const { return m_plot; }
    /// The overlap drawn for series `label` at captured layer `layer` (NaN: none), for tests.
    double overlap(const QString& label, int layer) const;
    int graphCount() const; ///< the curves drawn, for tests

private:
    QCustomPlot* m_plot;
    QLabel* m_message;
    analysis::LayerReuse m_last;
};

} // namespace sparqlab::widgets
