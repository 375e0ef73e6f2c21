// The query × key map: every held query of the lab's head against every key (exact s, the
// method's ŝ, what it attends to and what it misses), computed in a worker (analysis/lab_map.h);
// a window of 512 queries around the head view's query beyond that, keys binned beyond 2,048.
// A click on a row shows that query in every view.

#include "app/gui/lab_view.h"
#include "app/gui/worker_pool.h"
#include "attention/methods.h"
#include "widgets/lab_views.h"

#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrent>

#include <algorithm>

namespace sparqlab::app {
namespace {

constexpr int64_t kRows = 512, kColumns = 2048;

struct MapResult {
    analysis::QueryKeyMap map;
    QString error, what;
    int64_t query = -1;
};

class MapUnit : public LabView {
public:
    MapUnit(LabHost& host, QWidget* parent)
        : LabView(parent), m_host(host), m_view(new widgets::QueryKeyMapView(parent)),
          m_work(new QFutureWatcher<MapResult>(this)) {
        connect(m_work, &QFutureWatcher<MapResult>::finished, this, [this] { finished(); });
        connect(m_view, &widgets::QueryKeyMapView::queryChosen, this,
                [this](qint64 p) { m_host.setQueryPosition(static_cast<int>(p)); });
    }
    ~MapUnit() override { m_work->waitForFinished(); }

    QWidget* widget() override { return m_view; }
    void invalidate() override { m_dirty = true; }
    void refresh() override {
        if (m_dirty)
            draw();
    }
    void flush() override {
        while (m_pending) {
            m_work->waitForFinished();
            finished();
        }
    }
    bool busy() const override { return m_pending; }

private:
    void draw() {
        const std::shared_ptr<const analysis::LabCapture> whole = m_host.wholeCapture();
        if (!whole)
            return;
        m_dirty = false;
        if (m_pending) { // one at a time; the latest settings follow it
            m_again = true;
            return;
        }
        m_again = false;
        m_pending = true;
        const attention::AttentionConfig c = m_host.labConfig();
        const int64_t layer = m_host.labLayer(), head = m_host.labHead(),
                      query = m_host.queryPosition();
        m_work->setFuture(QtConcurrent::run(workerPool(), [whole, c, layer, head, query]() {
            MapResult r;
            r.query = query;
            r.what = QObject::tr("Layer %1, head %2, %3")
                         .arg(layer)
                         .arg(head)
                         .arg(QString::fromUtf8(attention::methodInfo(c.method).label));
            try {
                // The window of rows: every held query, or kRows of them around the query shown.
                const int64_t S = whole->positions(), first = whole->firstHeldQuery();
                int64_t last = S - 1;
                if (S - first > kRows)
                    last = std::clamp(query + kRows / 4, first + kRows - 1, S - 1);
                const auto cap = last == S - 1 ? whole : whole->atPosition(last);
                r.map = analysis::queryKeyMap(*cap, layer, head, c, kRows, kColumns);
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        }));
    }
    void finished() {
        if (!m_pending || m_work->isRunning())
            return;
        m_pending = false;
        const MapResult r = m_work->result();
        const auto whole = m_host.wholeCapture();
        if (!r.error.isEmpty())
            m_view->showMessage(r.error);
        else if (whole)
            m_view->showMap(r.map, r.what, r.query, whole->tokens);
        if (m_again)
            draw();
    }

    LabHost& m_host;
    widgets::QueryKeyMapView* m_view;
    QFutureWatcher<MapResult>* m_work;
    bool m_dirty = true;
    bool m_pending = false;
    bool m_again = false;
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(map) {
    return {.name = "map",
            .label = "Query × key",
            .menu = "&Query × Key Map",
            .order = 1,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new MapUnit(host, parent);
            }};
}
