#pragma once
/// \file query_bar.h
/// The bar above the views that chooses the query they show: a slider over the positions whose
/// query the capture holds (the prompt's and the generated ones: decode steps) and a line that
/// says which token it is, what it chose and what token healing re-spelled. GUI thread only.

#include "analysis/lab.h"

#include <QWidget>

#include <memory>

class QLabel;
class QSlider;

namespace sparqlab::app {

class QueryBar : public QWidget {
    Q_OBJECT
public:
    explicit QueryBar(QWidget* parent = nullptr);
    /// The capture's held queries, the last one chosen (no signal); hidden when there is one.
    void setCapture(std::shared_ptr<const analysis::LabCapture> capture);
    /// Chooses `position` without a signal (a restored session).
    void setPositionQuietly(int position);
    void setPosition(int position);
    int position() const;
    /// The decode step shown (0 … steps), −1 when the query is a prompt position's.
    int decodeStep() const;
    QSlider* slider() const { return m_slider; }

Q_SIGNALS:
    void positionChanged(int position);

private:
    void updateText();

    QSlider* m_slider;
    QLabel* m_label;
    std::shared_ptr<const analysis::LabCapture> m_capture;
};

} // namespace sparqlab::app
