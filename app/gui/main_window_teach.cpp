// The main window's teaching mode (main_window.h): SparQ's three steps one page at a time over
// the head view, and a retrieval page with its own prompt and head.

#include "main_window.h"

#include "capture/model.h"
#include "widgets/controls_panel.h"
#include "widgets/head_view.h"
#include "widgets/panels.h"

#include <algorithm>

#include <QFutureWatcher>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>

namespace sparqlab::app {

namespace {

/// One sentence per step of SparQ, for teaching mode (paper §3, Alg. 1).
QString teachingSentence(int step) {
    switch (step) {
    case 1:
        return QObject::tr("Step 1 of 3 — SparQ reads only the r components where |q| is "
                           "largest, so it fetches r rows of K instead of all d_h.");
    case 2:
        return QObject::tr("Step 2 of 3 — those components give approximate scores ŝ; the k "
                           "positions they rank highest are fetched in full for exact attention.");
    case 3:
        return QObject::tr("Step 3 of 3 — α, the approximate mass of those k positions, mixes "
                           "their output with the mean value v̄ to stand in for the rest.");
    case 4:
        return QObject::tr("Retrieval — the prompt repeats a passage. A retrieval (induction) "
                           "head looks back at the token that followed the current one the first "
                           "time; SparQ finds that position from a few components of q.");
    default:
        return {};
    }
}

} // namespace

void MainWindow::setTeachingStep(int step) {
    const int was = m_teachStep;
    m_teachStep = std::clamp(step, 0, 4);
    m_teachBar->setVisible(m_teachStep > 0);
    m_teachText->setText(teachingSentence(m_teachStep));
    m_teachBack->setEnabled(m_teachStep > 1);
    m_teachNext->setEnabled(m_teachStep < 4);
    m_head->highlightStep(m_teachStep == 4 ? 2 : m_teachStep);
    if (m_teachStep > 0)
        showView(QStringLiteral("head"));
    if (m_teachStep == 4 && was != 4 && m_current && m_current->hasTokenizer()) {
        // Page 4 shows its own prompt, head and SparQ settings; the user's come back when the
        // page is left.
        m_beforeRetrieval = BeforeRetrieval{m_prompt->prompt(), m_controls->config(),
                                            m_controls->layer(), m_controls->head()};
        m_prompt->setPrompt(retrievalPrompt());
        runPrompt(retrievalPrompt());
    } else if (was == 4 && m_teachStep != 4 && m_beforeRetrieval) {
        const BeforeRetrieval before = *m_beforeRetrieval;
        m_beforeRetrieval.reset();
        m_controls->setConfig(before.config);
        m_controls->setLayerHead(before.layer, before.head);
        m_prompt->setPrompt(before.prompt);
        if (!before.prompt.trimmed().isEmpty() && !m_work->isRunning())
            runPrompt(before.prompt);
    }
}

QString MainWindow::retrievalPrompt() {
    // A passage of the 2012 address (held out from the demo's training), then its start again:
    // the last token's earlier occurrence is in the first showing.
    const QString passage = QStringLiteral(
        "Members of Congress, distinguished guests, and fellow Americans: Last month, I went to "
        "Andrews Air Force Base and welcomed home some of our last troops to serve in Iraq. "
        "Together, we offered a final, proud salute to the colors under which more than a "
        "million of our fellow citizens fought and several thousand gave their lives.");
    return passage + QLatin1Char(' ') + passage.left(120);
}

void MainWindow::showRetrieval(const WorkResult& w) {
    // SparQ on the retrieval head with the smallest r whose selection holds most of the exact
    // mass (found in the worker), k = 16.
    const QSignalBlocker block(m_controls);
    m_controls->setMethod(attention::Method::Sparq);
    m_controls->setK(16);
    m_controls->setLayerHead(w.retrievalLayer, w.retrievalHead);
    m_controls->setR(w.retrievalR);
    m_teachText->setText(
        teachingSentence(4) +
        tr(" Here: layer %1, head %2 (induction score %3); with r = %4 of %5 components and "
           "k = 16 SparQ's selection holds %6 of the exact attention.")
            .arg(w.retrievalLayer)
            .arg(w.retrievalHead)
            .arg(w.retrievalScore, 0, 'f', 2)
            .arg(w.retrievalR)
            .arg(m_capture->headDim())
            .arg(w.retrievalMass, 0, 'f', 2));
}

} // namespace sparqlab::app
