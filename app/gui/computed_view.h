#pragma once
/// \file computed_view.h
/// A view that computes what it draws in a worker (docs/ARCHITECTURE.md): one computation at a
/// time, the latest settings computed after it, drawn on the GUI thread; tests and screenshots
/// wait for it (flush). The overview and the query × key map are such views.

#include "app/gui/lab_view.h"
#include "app/lab/worker_pool.h"

#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrent>

#include <functional>

namespace sparqlab::app {

template <typename Result> class ComputedView : public LabView {
public:
    explicit ComputedView(QObject* parent)
        : LabView(parent), m_work(new QFutureWatcher<Result>(this)) {
        QObject::connect(m_work, &QFutureWatcher<Result>::finished, this, [this] { finished(); });
    }
    ~ComputedView() override { m_work->waitForFinished(); }

    void invalidate() override { m_dirty = true; }
    void refresh() override {
        if (m_dirty)
            start();
    }
    void flush() override {
        while (m_pending) { // what the last change asked for, drawn now
            m_work->waitForFinished();
            finished();
        }
    }
    bool busy() const override { return m_pending; }

protected:
    /// On the GUI thread: the work for the current settings (it runs in a worker and must hold
    /// what it reads), or an empty function when there is nothing to compute.
    virtual std::function<Result()> work() = 0;
    /// On the GUI thread: draws a result.
    virtual void show(const Result& r) = 0;

private:
    void start() {
        std::function<Result()> job = work();
        if (!job)
            return;
        m_dirty = false;
        if (m_pending) { // one at a time; the latest settings follow it
            m_again = true;
            return;
        }
        m_again = false;
        m_pending = true;
        m_work->setFuture(QtConcurrent::run(workerPool(), std::move(job)));
    }
    void finished() {
        // Called by the watcher, or by flush() after waiting (then the watcher's own call finds
        // nothing pending).
        if (!m_pending || m_work->isRunning())
            return;
        m_pending = false;
        show(m_work->result());
        if (m_again)
            start();
    }

    QFutureWatcher<Result>* m_work;
    bool m_dirty = true;
    bool m_pending = false; ///< a worker computes
    bool m_again = false;   ///< the settings changed meanwhile: compute again after
};

} // namespace sparqlab::app
