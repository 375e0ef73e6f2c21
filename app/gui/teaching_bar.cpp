// Teaching mode (teaching_bar.h).

#include "app/gui/teaching_bar.h"

#include "model/model.h"
#include "widgets/controls_panel.h"
#include "widgets/head_view.h"
#include "widgets/panels.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>

#include <algorithm>

namespace sparqlab::app {

namespace {

/// One sentence per step of SparQ, for teaching mode (paper §3, Alg. 1).
QString teachingSentence(int step) {
    switch (step) {
    case 1:
        return QObject::tr("Step 1 of 3 — SparQ reads only the r components of q largest in "
                           "magnitude, so it fetches r rows of K instead of all d<sub>h</sub>.");
    case 2:
        return QObject::tr("Step 2 of 3 — those components give approximate scores ŝ; the k "
                           "positions they rank highest are fetched in full for exact attention.");
    case 3:
        return QObject::tr("Step 3 of 3 — α, the approximate mass of those k positions, mixes "
                           "their output with the mean value v̄ to stand in for the rest.");
    case 4:
        return QObject::tr("After the three steps, an example: retrieval — the prompt repeats "
                           "a passage, and an induction head looks back at the token that "
                           "followed this one the first time.");
    default:
        return {};
    }
}

} // namespace

TeachingBar::TeachingBar(Lab& lab, widgets::ControlsPanel* controls, widgets::PromptPanel* prompt,
                         widgets::HeadView* head, QWidget* parent)
    : QWidget(parent), m_lab(lab), m_controls(controls), m_prompt(prompt), m_head(head),
      m_text(new QLabel), m_back(new QPushButton(tr("◀ Back"))),
      m_next(new QPushButton(tr("Next ▶"))) {
    setObjectName(QStringLiteral("teachingBar"));
    m_text->setObjectName(QStringLiteral("teachingText"));
    m_text->setWordWrap(true);
    QFont big = m_text->font();
    big.setPointSizeF(big.pointSizeF() * 1.15);
    m_text->setFont(big);
    m_back->setObjectName(QStringLiteral("teachBack"));
    m_next->setObjectName(QStringLiteral("teachNext"));
    auto* done = new QPushButton(tr("Done"));
    auto* tb = new QHBoxLayout(this);
    tb->addWidget(m_text, 1);
    tb->addWidget(m_back);
    tb->addWidget(m_next);
    tb->addWidget(done);
    setStyleSheet(QStringLiteral("background: #fff5e6;"));
    setVisible(false);
    connect(m_back, &QPushButton::clicked, this, [this] { setStep(std::max(1, m_step - 1)); });
    connect(m_next, &QPushButton::clicked, this, [this] { setStep(std::min(4, m_step + 1)); });
    connect(done, &QPushButton::clicked, this, [this] { setStep(0); });
}

void TeachingBar::setStep(int step) {
    const int was = m_step;
    m_step = std::clamp(step, 0, 4);
    setVisible(m_step > 0);
    m_text->setText(teachingSentence(m_step));
    m_back->setEnabled(m_step > 1);
    m_next->setEnabled(m_step < 4);
    // Past step 3 of 3 comes an example, not a fourth step: the button says so.
    m_next->setText(m_step == 3 ? tr("Example ▶") : tr("Next ▶"));
    m_head->highlightStep(m_step == 4 ? 2 : m_step);
    if (m_step > 0)
        Q_EMIT headViewRequested();
    if (m_step == 4 && was != 4 && m_lab.model() && m_lab.model()->hasTokenizer()) {
        // Page 4 shows its own prompt, head and SparQ settings; the user's come back when the
        // page is left.
        m_before = BeforeRetrieval{m_prompt->prompt(),           m_controls->config(),
                                   m_controls->layer(),          m_controls->head(),
                                   m_controls->kFollowsPrompt(), m_controls->chosenK(),
                                   m_controls->chosenR()};
        m_prompt->setPrompt(retrievalPrompt());
        Q_EMIT runRequested(retrievalPrompt());
    } else if (was == 4 && m_step != 4 && m_before) {
        const BeforeRetrieval before = *m_before;
        m_before.reset();
        m_controls->setConfig(before.config);
        m_controls->setR(before.chosenR);
        if (before.kFollows)
            m_controls->followPromptK();
        else
            m_controls->setK(before.chosenK);
        m_controls->setLayerHead(before.layer, before.head);
        m_prompt->setPrompt(before.prompt);
        if (!before.prompt.trimmed().isEmpty() && !m_lab.isBusy())
            Q_EMIT runRequested(before.prompt);
    }
}

QString TeachingBar::retrievalPrompt() {
    // A passage of the 2012 address (held out from the demo's training), then its start again:
    // the last token's earlier occurrence is in the first showing.
    const QString passage = QStringLiteral(
        "Members of Congress, distinguished guests, and fellow Americans: Last month, I went to "
        "Andrews Air Force Base and welcomed home some of our last troops to serve in Iraq. "
        "Together, we offered a final, proud salute to the colors under which more than a "
        "million of our fellow citizens fought and several thousand gave their lives.");
    return passage + QLatin1Char(' ') + passage.left(120);
}

std::optional<TeachingBar::UserRK> TeachingBar::userRK() const {
    if (!m_before)
        return std::nullopt;
    return UserRK{m_before->chosenR, m_before->chosenK, m_before->kFollows};
}

void TeachingBar::showRetrieval(const WorkResult& w, int64_t headDim) {
    // SparQ on the retrieval head with the smallest r whose selection holds most of the exact
    // mass (found in the worker), k = 16.
    const QSignalBlocker block(m_controls);
    m_controls->setMethod(attention::Method::Sparq);
    m_controls->setK(16);
    m_controls->setLayerHead(w.retrievalLayer, w.retrievalHead);
    m_controls->setR(w.retrievalR);
    m_text->setText(
        teachingSentence(4) +
        tr(" Here layer %1, head %2 (induction score %3): with r = %4 of %5 components and "
           "k = 16, SparQ's selection holds %6 of its attention.")
            .arg(w.retrievalLayer)
            .arg(w.retrievalHead)
            .arg(w.retrievalScore, 0, 'f', 2)
            .arg(w.retrievalR)
            .arg(headDim)
            .arg(w.retrievalMass, 0, 'f', 2));
}

} // namespace sparqlab::app
