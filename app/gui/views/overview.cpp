// The overview: any three per-head measures of any method for every layer × head, computed in
// a worker (half a second at 16k positions); a click opens that head.

#include "app/gui/lab_view.h"
#include "app/gui/worker_pool.h"
#include "widgets/lab_views.h"

#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrent>

namespace sparqlab::app {
namespace {

struct OverviewResult {
    analysis::Overview overview;
    QString error;
    int r = 0, k = 0;
};

class OverviewUnit : public LabView {
public:
    OverviewUnit(LabHost& host, QWidget* parent)
        : LabView(parent), m_host(host), m_view(new widgets::OverviewView(parent)),
          m_work(new QFutureWatcher<OverviewResult>(this)) {
        connect(m_work, &QFutureWatcher<OverviewResult>::finished, this, [this] { finished(); });
        connect(m_view, &widgets::OverviewView::cellClicked, this, [this](int layer, int head) {
            m_host.selectHead(layer, head);
            m_host.showViewNamed(QStringLiteral("head"));
        });
    }
    ~OverviewUnit() override { m_work->waitForFinished(); }

    QWidget* widget() override { return m_view; }
    void invalidate() override { m_dirty = true; }
    void refresh() override {
        if (m_dirty)
            draw();
    }
    void flush() override {
        while (m_pending) { // the grids the last change asked for, drawn now
            m_work->waitForFinished();
            finished();
        }
    }
    bool busy() const override { return m_pending; }
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
    void draw() {
        const std::shared_ptr<const analysis::LabCapture> cap = m_host.shownCapture();
        if (!cap)
            return;
        m_dirty = false;
        if (m_pending) { // one at a time; the latest settings follow it
            m_again = true;
            return;
        }
        m_again = false;
        m_pending = true;
        const attention::AttentionConfig c = m_host.labConfig();
        m_work->setFuture(
            QtConcurrent::run(workerPool(), [cap, c]() { // the worker holds the capture
                OverviewResult r;
                r.r = static_cast<int>(c.r);
                r.k = static_cast<int>(c.k);
                try {
                    r.overview = analysis::overview(*cap, c);
                } catch (const std::exception& e) {
                    r.error = QString::fromUtf8(e.what());
                }
                return r;
            }));
    }
    void finished() {
        // Called by the watcher, or by flush() after waiting (then the watcher's own call
        // finds nothing pending).
        if (!m_pending || m_work->isRunning())
            return;
        m_pending = false;
        const OverviewResult r = m_work->result();
        m_view->setCurrentHead(m_host.labLayer(), m_host.labHead());
        if (r.error.isEmpty())
            m_view->showOverview(r.overview, r.r, r.k);
        else
            m_view->showMessage(r.error);
        if (m_again)
            draw();
    }

    LabHost& m_host;
    widgets::OverviewView* m_view;
    QFutureWatcher<OverviewResult>* m_work;
    bool m_dirty = true;
    bool m_pending = false; ///< a worker computes the grids
    bool m_again = false;   ///< the settings changed meanwhile: compute again after
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
