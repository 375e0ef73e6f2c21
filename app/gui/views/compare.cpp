// Compare: the lab's method against any other on the same head, both chosen sets and a table of
// what each moves and keeps; the second method's head state computed in a worker.

#include "app/gui/lab_view.h"
#include "app/lab/worker_pool.h"
#include "widgets/compare_view.h"

#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrent>

namespace sparqlab::app {
namespace {

struct PairResult {
    analysis::HeadState a, b;
    QString error;
};

class CompareUnit : public LabView {
public:
    CompareUnit(LabHost& host, QWidget* parent)
        : LabView(parent), m_host(host), m_view(new widgets::CompareView(parent)),
          m_work(new QFutureWatcher<PairResult>(this)) {
        connect(m_work, &QFutureWatcher<PairResult>::finished, this, [this] { finished(); });
        connect(m_view, &widgets::CompareView::secondChanged, this, [this] { refresh(); });
    }
    ~CompareUnit() override { m_work->waitForFinished(); }

    QWidget* widget() override { return m_view; }
    void invalidate() override { followCapture(); }
    void refresh() override {
        followCapture();
        {
            const QSignalBlocker block(m_view); // (this refresh computes the second it leaves)
            m_view->setFirst(m_host.labConfig().method);
        }
        const std::shared_ptr<const analysis::LabCapture> cap = m_host.shownCapture();
        const analysis::HeadState* a = m_host.headState();
        if (!cap || !a)
            return;
        if (m_pending) {
            m_again = true;
            return;
        }
        m_again = false;
        m_pending = true;
        attention::AttentionConfig b = m_host.labConfig();
        b.method = m_view->second();
        if (!cap->info.takesLocal(b.method)) // (the indexer on MiniMax-M3 refuses one)
            b.local.reset();
        const int layer = m_host.labLayer(), head = m_host.labHead();
        m_work->setFuture(QtConcurrent::run(workerPool(), [cap, first = *a, b, layer, head]() {
            PairResult r;
            r.a = first;
            try {
                r.b = analysis::headState(*cap, layer, head, b);
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        }));
    }
    void flush() override {
        while (m_pending) {
            m_work->waitForFinished();
            finished();
        }
    }
    bool busy() const override { return m_pending; }
    void saveTo(analysis::Session& s) const override { s.compareMethod = m_view->second(); }
    void restoreFrom(const analysis::Session& s) override {
        m_seen = m_host.wholeCapture(); // (the session's choice, not the capture's default)
        const QSignalBlocker block(m_view);
        m_view->setSecond(s.compareMethod);
    }

private:
    /// A new capture of a model with an indexer (DSA, MiniMax-M3) puts it against the lab's
    /// method; on a capture without the indexer's scores another method takes its place.
    void followCapture() {
        const std::shared_ptr<const analysis::LabCapture> whole = m_host.wholeCapture();
        if (!whole || m_seen.lock() == whole)
            return;
        m_seen = whole;
        const QSignalBlocker block(m_view);
        if (!whole->indexScores.empty())
            m_view->setSecond(attention::Method::Indexer);
        else if (m_view->second() == attention::Method::Indexer)
            m_view->setSecond(attention::Method::Quest);
    }

    void finished() {
        if (!m_pending || m_work->isRunning())
            return;
        m_pending = false;
        const PairResult r = m_work->result();
        if (r.error.isEmpty())
            m_view->showPair(r.a, r.b);
        else
            m_view->showMessage(r.error);
        if (m_again)
            refresh();
    }

    LabHost& m_host;
    widgets::CompareView* m_view;
    QFutureWatcher<PairResult>* m_work;
    std::weak_ptr<const analysis::LabCapture> m_seen; ///< the capture followCapture saw last
    bool m_pending = false, m_again = false;
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(compare) {
    return {.name = "compare",
            .label = "Compare",
            .menu = "&Compare Two Methods",
            .order = 4,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new CompareUnit(host, parent);
            }};
}
