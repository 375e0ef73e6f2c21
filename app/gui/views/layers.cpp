// Selection across layers: for the decode step's query, how much each layer's chosen keys
// overlap the previous layer's — the exact top-k, the lab's method and the model's own indexer
// (DSA, MiniMax-M3; docs/learned-sparse-and-hybrid.md §6), computed in a worker.

#include "app/gui/computed_view.h"
#include "widgets/layers_view.h"

namespace sparqlab::app {
namespace {

struct LayersResult {
    analysis::LayerReuse reuse;
    QString error;
};

class LayersUnit : public ComputedView<LayersResult> {
public:
    LayersUnit(LabHost& host, QWidget* parent)
        : ComputedView(parent), m_host(host), m_view(new widgets::LayersView(parent)) {}

    QWidget* widget() override { return m_view; }

private:
    std::function<LayersResult()> work() override {
        const std::shared_ptr<const analysis::LabCapture> cap = m_host.shownCapture();
        if (!cap)
            return {};
        const attention::AttentionConfig c = m_host.labConfig();
        return [cap, c]() { // the worker holds the capture
            LayersResult r;
            try {
                r.reuse = analysis::layerReuse(*cap, c);
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        };
    }
    void show(const LayersResult& r) override {
        if (r.error.isEmpty())
            m_view->showReuse(r.reuse);
        else
            m_view->showMessage(r.error);
    }

    LabHost& m_host;
    widgets::LayersView* m_view;
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(layers) {
    return {.name = "layers",
            .label = "Layers",
            .menu = "&Layers",
            .order = 6,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new LayersUnit(host, parent);
            }};
}
