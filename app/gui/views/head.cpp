// The head view (widgets/head_view.h): SparQ's three steps for the chosen layer and head at the
// query shown, computed in a worker whenever the capture or the settings change (a live view:
// the lab keeps its state, and the panels and the other views follow it).

#include "app/gui/computed_view.h"
#include "widgets/head_view.h"

#include <algorithm>

namespace sparqlab::app {
namespace {

/// The head worker's result: the head state and the capture it was computed on.
struct HeadResult {
    std::shared_ptr<const analysis::LabCapture> shown;
    analysis::HeadState state;
    QString error;
};

/// The positions of `shown` the chat template wrote (empty: no chat).
std::vector<bool> templateTokens(const analysis::SessionChat& chat,
                                 const analysis::LabCapture& shown) {
    if (!chat.on)
        return {};
    const int64_t S = shown.positions(), P = shown.promptLength();
    std::vector<bool> t(static_cast<size_t>(S), false);
    std::fill(t.begin(), t.begin() + P, true);
    for (const auto& [b, e] : chat.contentTokens)
        for (int64_t i = std::max<int64_t>(b, 0); i < std::min(e, P); ++i)
            t[static_cast<size_t>(i)] = false;
    return t;
}

class HeadUnit : public ComputedView<HeadResult> {
public:
    HeadUnit(LabHost& host, QWidget* parent)
        : ComputedView(parent), m_host(host), m_view(new widgets::HeadView(parent)) {
        connect(m_view, &widgets::HeadView::queryChosen, this,
                [this](qint64 position) { m_host.setQueryPosition(static_cast<int>(position)); });
    }
    QWidget* widget() override { return m_view; }

private:
    std::function<HeadResult()> work() override {
        // The query's view of the capture and the head state (calibrating Loki and Double
        // Sparsity on the prompt on first use): all in the worker.
        const std::shared_ptr<const analysis::LabCapture> cap = m_host.wholeCapture();
        if (!cap)
            return {};
        const attention::AttentionConfig c = m_host.labConfig();
        const int64_t pos = m_host.queryPosition();
        const int layer = m_host.labLayer(), head = m_host.labHead();
        return [cap, c, pos, layer, head]() {
            HeadResult r;
            try {
                r.shown = pos >= 0 && pos < cap->positions() - 1 ? cap->atPosition(pos) : cap;
                r.state = analysis::headState(*r.shown, layer, head, c);
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        };
    }
    void show(const HeadResult& r) override {
        const auto whole = m_host.wholeCapture();
        if (r.error.isEmpty() && r.shown && whole) {
            m_view->setTemplateTokens(templateTokens(m_host.chat(), *r.shown));
            m_view->showHead(r.state, whole->tokens); // the strip: the later tokens to click
        }
        m_view->setHeadNote(firstHeadNote());
        m_host.setHeadState(r.shown, r.error.isEmpty() ? &r.state : nullptr, r.error);
    }

    /// Why the head shown is shown, while it is the one a first screen chose.
    QString firstHeadNote() const {
        const std::optional<analysis::HeadPick> p = m_host.firstHead();
        if (!p || p->layer != m_host.labLayer() || p->head != m_host.labHead())
            return {};
        // (a hybrid's captured layer by its model layer too, as the Layer control names it)
        const auto whole = m_host.wholeCapture();
        const QString where =
            whole && whole->info.skipsLayers()
                ? QObject::tr("Layer %1 (model layer %2), head %3 is shown first")
                      .arg(p->layer)
                      .arg(whole->info.modelLayer(p->layer))
                      .arg(p->head)
                : QObject::tr("Layer %1, head %2 is shown first").arg(p->layer).arg(p->head);
        if (!p->covered)
            return QObject::tr(
                       "%1: its %2 largest positions hold %3% of its attention, the most of any "
                       "head. Layer and Head show the others.")
                .arg(where)
                .arg(p->k)
                .arg(100 * p->coverage, 0, 'f', 0);
        return QObject::tr("%1: of the heads whose %2 largest positions hold at least %3% of "
                           "their attention, it spreads it the widest (90% over %4 positions), "
                           "so SparQ has several peaks to find. Layer and Head show the others.")
            .arg(where)
            .arg(p->k)
            .arg(100 * p->minCoverage, 0, 'f', 0)
            .arg(p->kMass90);
    }

    LabHost& m_host;
    widgets::HeadView* m_view;
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(head) {
    return {.name = "head",
            .label = "Head view",
            .menu = "&Head View",
            .order = 0,
            .live = true,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new HeadUnit(host, parent);
            }};
}
