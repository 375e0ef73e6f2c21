// The query bar (query_bar.h).

#include "app/gui/query_bar.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSlider>

namespace sparqlab::app {

QueryBar::QueryBar(QWidget* parent)
    : QWidget(parent), m_slider(new QSlider(Qt::Horizontal)), m_label(new QLabel) {
    setObjectName(QStringLiteral("stepBar"));
    m_slider->setObjectName(QStringLiteral("stepSlider"));
    m_label->setObjectName(QStringLiteral("stepLabel"));
    m_label->setTextFormat(Qt::PlainText); // token texts as they are ("<", "&")
    // A long text (a decode step with token healing) wraps rather than widening the window.
    m_label->setWordWrap(true);
    auto* sb = new QHBoxLayout(this);
    sb->setContentsMargins(6, 2, 6, 2);
    auto* queryLabel = new QLabel(tr("Query"));
    queryLabel->setToolTip(tr("The position whose query the views show: drag, or click a token "
                              "in the head view's token strip"));
    sb->addWidget(queryLabel);
    sb->addWidget(m_slider, 1);
    sb->addWidget(m_label, 3); // a position's text on one line at 1280 px
    setVisible(false);
    connect(m_slider, &QSlider::valueChanged, this, [this](int p) {
        updateText();
        Q_EMIT positionChanged(p);
    });
}

void QueryBar::setCapture(std::shared_ptr<const analysis::LabCapture> capture) {
    m_capture = std::move(capture);
    if (m_capture) {
        const QSignalBlocker block(m_slider);
        m_slider->setRange(static_cast<int>(m_capture->firstHeldQuery()),
                           static_cast<int>(m_capture->positions() - 1));
        m_slider->setValue(m_slider->maximum()); // the last position
    }
    updateText();
}

void QueryBar::setPositionQuietly(int position) {
    {
        const QSignalBlocker block(m_slider);
        m_slider->setValue(position);
    }
    updateText();
}

void QueryBar::setPosition(int position) {
    m_slider->setValue(position);
}

int QueryBar::position() const {
    return m_capture ? m_slider->value() : -1;
}

int QueryBar::decodeStep() const {
    if (!m_capture || m_capture->steps() == 0)
        return -1;
    const int t = m_slider->value() - static_cast<int>(m_capture->promptPositions - 1);
    return t >= 0 ? t : -1; // a prompt position's query is not a decode step
}

void QueryBar::updateText() {
    const int64_t S = m_capture ? m_capture->positions() : 0;
    setVisible(S > 0 && S - m_capture->firstHeldQuery() > 1);
    if (!isVisible())
        return;
    const int64_t pos = m_slider->value();
    auto token = [&](int64_t i) { // line breaks and tabs shown, not laid out
        QString t = static_cast<size_t>(i) < m_capture->tokens.size()
                        ? QString::fromStdString(m_capture->tokens[static_cast<size_t>(i)])
                        : QString();
        return t.replace(QLatin1Char('\n'), QStringLiteral("⏎"))
            .replace(QLatin1Char('\t'), QStringLiteral("⇥"));
    };
    const int t = decodeStep();
    if (t >= 0) {
        const QString chose = pos + 1 < S ? tr(", which chose “%1”").arg(token(pos + 1))
                                          : tr(", the last generated token (no step chose "
                                               "after it)");
        QString text = tr("decode step %1 of %2: the query of position %3 “%4”%5")
                           .arg(t)
                           .arg(m_capture->steps())
                           .arg(pos)
                           .arg(token(pos))
                           .arg(chose);
        // Token healing: say which steps re-spelled the prompt's last word, and why.
        const int64_t healed = m_capture->healedSteps;
        if (healed > 0) {
            const QString word = QString::fromStdString(m_capture->healedText)
                                     .replace(QLatin1Char('\n'), QStringLiteral("⏎"));
            text += t < healed
                        ? tr(" — token healing: the prompt's last word “%1” was taken off and "
                             "is spelled again here, as the model would write it inside a "
                             "longer text")
                              .arg(word)
                        : tr(" (%1 spelled again the prompt's last word “%2”: token healing)")
                              .arg(healed == 1 ? tr("step 0") : tr("steps 0–%1").arg(healed - 1))
                              .arg(word);
        }
        m_label->setText(text);
        return;
    }
    m_label->setText(pos == S - 1 ? tr("position %1 “%2”: the prompt's last query (the next "
                                       "token's decode step)")
                                        .arg(pos)
                                        .arg(token(pos))
                                  : tr("position %1 “%2”: its query over keys 0–%1 (the "
                                       "prompt up to it)")
                                        .arg(pos)
                                        .arg(token(pos)));
}

} // namespace sparqlab::app
