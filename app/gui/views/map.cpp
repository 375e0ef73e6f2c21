// The query × key map: every held query of the lab's head against every key (exact s, the
// method's ŝ, what it attends to and what it misses), computed in a worker (analysis/lab_map.h);
// a window of 512 queries around the head view's query beyond that, keys binned beyond 2,048.
// A click on a row shows that query in every view.

#include "app/gui/computed_view.h"
#include "attention/method_table.h"
#include "widgets/map_view.h"

#include <algorithm>

namespace sparqlab::app {
namespace {

constexpr int64_t kRows = 512, kColumns = 2048;

struct MapResult {
    analysis::QueryKeyMap map;
    QString error, what;
    int64_t query = -1;
};

class MapUnit : public ComputedView<MapResult> {
public:
    MapUnit(LabHost& host, QWidget* parent)
        : ComputedView(parent), m_host(host), m_view(new widgets::QueryKeyMapView(parent)) {
        connect(m_view, &widgets::QueryKeyMapView::queryChosen, this,
                [this](qint64 p) { m_host.setQueryPosition(static_cast<int>(p)); });
    }

    QWidget* widget() override { return m_view; }

private:
    std::function<MapResult()> work() override {
        const std::shared_ptr<const analysis::LabCapture> whole = m_host.wholeCapture();
        if (!whole)
            return {};
        const attention::AttentionConfig c = m_host.labConfig();
        const int64_t layer = m_host.labLayer(), head = m_host.labHead(),
                      query = m_host.queryPosition();
        // The window of rows: every held query, or kRows of them around the query shown.
        const int64_t S = whole->positions(), first = whole->firstHeldQuery();
        const int64_t last =
            S - first > kRows ? std::clamp(query + kRows / 4, first + kRows - 1, S - 1) : S - 1;
        // Another query in the same window moves only the mark: the map stays as computed.
        std::string key = std::to_string(reinterpret_cast<uintptr_t>(whole.get())) + " " +
                          std::to_string(layer) + " " + std::to_string(head) + " " +
                          std::to_string(last) + " " + attention::methodName(c.method) + " " +
                          std::to_string(reinterpret_cast<uintptr_t>(c.calibration.get()));
        for (const attention::ParamInfo& p : attention::parameters())
            key += " " + attention::paramValue(c, p.id);
        if (key == m_lastKey && m_last.error.isEmpty()) {
            MapResult same = m_last;
            same.query = query;
            return [same]() { return same; };
        }
        m_lastKey = key;
        return [whole, c, layer, head, query, last]() {
            MapResult r;
            r.query = query;
            r.what = QObject::tr("Layer %1, head %2, %3")
                         .arg(layer)
                         .arg(head)
                         .arg(QString::fromUtf8(attention::methodInfo(c.method).label));
            try {
                const auto cap = last == whole->positions() - 1 ? whole : whole->atPosition(last);
                r.map = analysis::queryKeyMap(*cap, layer, head, c, kRows, kColumns);
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        };
    }
    void show(const MapResult& r) override {
        m_last = r;
        const auto whole = m_host.wholeCapture();
        if (!r.error.isEmpty())
            m_view->showMessage(r.error);
        else if (whole)
            m_view->showMap(r.map, r.what, r.query, whole->tokens);
    }

    LabHost& m_host;
    widgets::QueryKeyMapView* m_view;
    std::string m_lastKey; ///< what the last map was computed for
    MapResult m_last;
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
