#pragma once
/// \file slider_box.h
/// A slider with a number box beside it, kept in step. Plain views: they show what they are given
/// and emit what the user asks.

#include <QWidget>

#include <functional>

class QLabel;
class QSlider;
class QSpinBox;

namespace sparqlab::widgets {

/// A slider with a number box beside it, kept in step.
class SliderBox : public QWidget {
    Q_OBJECT
public:
    SliderBox(const QString& name, QWidget* parent = nullptr);
    void setRange(int lo, int hi);
    int value() const;
    void setValue(int v);
    QSlider* slider() const { return m_slider; }
    QSpinBox* box() const { return m_box; }
    /// What the user asked for (the rule's value while following); value() is it clamped to
    /// the range of the capture shown.
    int chosen() const { return m_chosen; }
    /// What is said beside the box: "auto" while following, "chosen → shown" where the value
    /// asked for (typed, or kept from a longer capture) was brought into the range, else "".
    QString note() const;
    /// Until the user sets a value, the box follows the capture: the range now and each range
    /// [lo, hi] set later show `rule(hi)`, with "auto" beside the box and `why` as the tooltip
    /// (hi in its one %-place left). A value the user types or drags to (a change: typing the
    /// value shown changes nothing) or setValue() ends it.
    void follow(std::function<int(int hi)> rule, const QString& why);
    bool follows() const { return static_cast<bool>(m_rule); }

Q_SIGNALS:
    void valueChanged(int value);

private:
    /// The note beside the box: "chosen → shown" where the range holds `shown` instead.
    void showClamp(int shown);

    static constexpr int kTypedMax = 1 << 30; ///< what the box accepts typed
    QSlider* m_slider;
    QSpinBox* m_box;
    QLabel* m_note;
    int m_chosen = 0;
    std::function<int(int)> m_rule; ///< set while the box follows the capture (follow())
    QString m_why;
};

} // namespace sparqlab::widgets
