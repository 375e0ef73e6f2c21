// A slider with a number box beside it, kept in step (slider_box.h).

#include "slider_box.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>

#include <algorithm>

namespace sparqlab::widgets {

SliderBox::SliderBox(const QString& name, QWidget* parent)
    : QWidget(parent), m_slider(new QSlider(Qt::Horizontal)), m_box(new QSpinBox),
      m_note(new QLabel) {
    setObjectName(name);
    m_slider->setObjectName(name + QStringLiteral("Slider"));
    m_box->setObjectName(name + QStringLiteral("Box"));
    m_note->setObjectName(name + QStringLiteral("Note"));
    m_note->setVisible(false);
    auto* l = new QHBoxLayout(this);
    l->setContentsMargins(0, 0, 0, 0);
    l->addWidget(m_slider, 1);
    l->addWidget(m_box);
    l->addWidget(m_note);
    // The box takes any number typed (the value on Enter, not at each digit): one beyond the
    // slider's range is brought into it and said so beside the box, never cut digit by digit.
    m_box->setRange(0, kTypedMax);
    m_box->setKeyboardTracking(false);
    connect(m_slider, &QSlider::valueChanged, m_box, &QSpinBox::setValue);
    connect(m_box, &QSpinBox::valueChanged, this, [this](int v) {
        const int shown = std::clamp(v, m_slider->minimum(), m_slider->maximum());
        m_chosen = v;
        m_rule = nullptr; // the user's value, no longer the capture's
        showClamp(shown);
        if (shown != v) {
            const QSignalBlocker b(m_box);
            m_box->setValue(shown);
        }
        m_slider->setValue(shown);
        Q_EMIT valueChanged(shown);
    });
}

void SliderBox::showClamp(int shown) {
    if (m_rule) { // following the capture: said as such, the user's value not being asked
        m_note->setVisible(true);
        m_note->setText(tr("auto"));
        m_note->setToolTip(m_why.arg(m_slider->maximum()));
        return;
    }
    m_note->setVisible(shown != m_chosen);
    if (shown == m_chosen)
        return;
    m_note->setText(tr("%1 → %2").arg(m_chosen).arg(shown));
    m_note->setToolTip(tr("%1 is outside %2…%3 here (the capture shown): %4 is used")
                           .arg(m_chosen)
                           .arg(m_slider->minimum())
                           .arg(m_slider->maximum())
                           .arg(shown));
}

void SliderBox::setRange(int lo, int hi) {
    // The chosen value survives a range that cannot hold it: a k clamped to a 9-token
    // prompt comes back on a longer one, and is what the settings keep.
    const QSignalBlocker b1(m_slider), b2(m_box);
    m_slider->setRange(lo, hi);
    m_box->setRange(lo, std::max(hi, kTypedMax));
    if (m_rule) // (the value this capture asks for)
        m_chosen = m_rule(hi);
    const int shown = std::clamp(m_chosen, lo, std::max(lo, hi));
    m_box->setValue(shown);
    m_slider->setValue(shown);
    showClamp(shown); // (a k of 500 on a 43-token prompt: "500 → 43" beside the box)
}

void SliderBox::follow(std::function<int(int hi)> rule, const QString& why) {
    m_rule = std::move(rule);
    m_why = why;
    setRange(m_slider->minimum(), m_slider->maximum()); // the range shown asks for its value now
    Q_EMIT valueChanged(value());
}

QString SliderBox::note() const {
    return m_note->isHidden() ? QString() : m_note->text();
}

int SliderBox::value() const {
    return m_box->value();
}
void SliderBox::setValue(int v) {
    m_rule = nullptr;
    const int shown = std::clamp(v, m_slider->minimum(), m_slider->maximum());
    m_box->setValue(shown); // the range shown …
    m_chosen = v;           // … but what was asked for is kept, and said where it differs
    showClamp(shown);
}

} // namespace sparqlab::widgets
