#pragma once
/// \file worker_pool.h
/// The lab's own thread pool for its workers (capture, head state, overview, comparison,
/// timing, export, model loading). Not QThreadPool::globalInstance(): Qt's raster paint engine
/// hands parts of painting to that pool and waits for them, so workers holding its threads
/// (two on a 2-core machine) froze the window's painting for seconds while they ran
/// (bench_lab_redraw's export-during-generation stall, issue 36).

#include <QThreadPool>

namespace sparqlab::app {

inline QThreadPool* workerPool() {
    static QThreadPool* pool = [] {
        auto* p = new QThreadPool; // lives as long as the process: workers may outlive windows
        p->setMaxThreadCount(8);   // every kind of worker at once; each is one job at a time
        return p;
    }();
    return pool;
}

} // namespace sparqlab::app
