// The overview: any three per-head measures of any method for every layer × head, computed in
// a worker (half a second at 16k positions); a click opens that head.

#include "app/gui/computed_view.h"
#include "widgets/overview_view.h"

namespace sparqlab::app {
namespace {

struct OverviewResult {
    analysis::Overview overview;
    QString error;
    int r = 0, k = 0;
    attention::Method method = attention::Method::Dense; ///< whose recall and error they show
    int64_t query = -1; ///< the position whose query the grids describe
};

class OverviewUnit : public ComputedView<OverviewResult> {
public:
    OverviewUnit(LabHost& host, QWidget* parent)
        : ComputedView(parent), m_host(host), m_view(new widgets::OverviewView(parent)) {
        connect(m_view, &widgets::OverviewView::cellClicked, this, [this](int layer, int head) {
            m_host.selectHead(layer, head);
            m_host.showViewNamed(QStringLiteral("head"));
        });
    }

    QWidget* widget() override { return m_view; }
    void saveTo(analysis::Session& s) const override {
        for (const auto& [m, label] : analysis::measures())
            if (m == m_view->measure(0))
                s.measure = label;
    }
    void restoreFrom(const analysis::Session& s) override {
        for (const auto& [m, label] : analysis::measures())
            if (label == s.measure)
                m_view->setMeasure(0, m);
    }

private:
    std::function<OverviewResult()> work() override {
        const std::shared_ptr<const analysis::LabCapture> cap = m_host.shownCapture();
        if (!cap)
            return {};
        const attention::AttentionConfig c = m_host.labConfig();
        return [cap, c]() { // the worker holds the capture
            OverviewResult r;
            r.r = static_cast<int>(c.r);
            r.k = static_cast<int>(c.k);
            r.method = c.method;
            r.query = cap->positions() - 1; // (the shown capture ends at the query shown)
            try {
                r.overview = analysis::overview(*cap, c);
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        };
    }
    void show(const OverviewResult& r) override {
        m_view->setCurrentHead(m_host.labLayer(), m_host.labHead());
        const auto whole = m_host.wholeCapture(); // a hybrid's rows by their model layer
        m_view->setModelLayers(whole && whole->info.skipsLayers() ? whole->info.modelLayers
                                                                  : std::vector<int64_t>());
        if (r.error.isEmpty())
            m_view->showOverview(r.overview, r.r, r.k, r.method, r.query);
        else
            m_view->showMessage(r.error);
    }

    LabHost& m_host;
    widgets::OverviewView* m_view;
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(overview) {
    return {.name = "overview",
            .label = "Overview",
            .menu = "&Overview",
            .order = 2,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new OverviewUnit(host, parent);
            }};
}
