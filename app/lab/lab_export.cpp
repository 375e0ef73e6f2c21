// The lab's exports (lab_export.h).

#include "app/lab/lab_export.h"

#include "analysis/stats_run.h"
#include "app/lab/lab.h"
#include "app/lab/worker_pool.h"
#include "capture/capture_file.h"
#include "sparqlab/version.h"

#include <QDir>
#include <QTimer>
#include <QtConcurrent/QtConcurrent>

#include <algorithm>

namespace sparqlab::app {

namespace {
/// A capture the lab writes says so (the model's runtime names the command line).
model::CaptureInfo guiCaptureInfo(model::CaptureInfo info) {
    info.createdBy = std::string("sparqlab ") + SPARQLAB_VERSION;
    return info;
}
} // namespace

std::vector<analysis::FigureData> paperFiguresOf(const analysis::LabCapture& cap,
                                                 const std::string& file) {
    // The same path as `sparqlab-cli figures`: a capture file, its statistics, the figures'
    // data; the caller draws them on the GUI thread (QCustomPlot is a widget).
    capture::CaptureWriter w(file, guiCaptureInfo(cap.info));
    w.add(cap.toExample());
    w.finish();
    analysis::StatsOptions o = analysis::statsDefaultsFor(cap.info);
    o.capturePath = file;
    o.recall = analysis::defaultRecallConfigs();
    o.alphaK = std::min<int64_t>(o.alphaK, cap.positions());
    return analysis::paperFigures(analysis::runStats(o), cap.info, o, cap.info.nLayers / 2);
}

LabExport::LabExport(Lab& lab) : m_lab(lab), m_work(new QFutureWatcher<ExportResult>(this)) {
    connect(m_work, &QFutureWatcher<ExportResult>::finished, this, &LabExport::finished);
}

LabExport::~LabExport() {
    m_work->waitForFinished();
}

bool LabExport::begin(const QString& status) {
    if (!m_lab.labCapture() || m_exporting) {
        m_lab.fail(m_lab.labCapture() ? tr("error: an export is still running")
                                      : tr("error: nothing to export: run a prompt first"));
        return false;
    }
    // Exports write the lab's own capture (what is shown), not a new run of the model: the
    // model may be generating in the other worker, and the prompt box may have changed since.
    m_exporting = true;
    m_count = 0;
    m_lab.showStatus(status);
    return true;
}

void LabExport::saveSessionTo(const QString& path,
                              const std::function<analysis::Session()>& snapshot) {
    if (!begin(tr("Saving the session to %1…").arg(path)))
        return;
    const analysis::Session s = snapshot();
    m_work->setFuture(QtConcurrent::run(workerPool(), [s, path]() {
        ExportResult r;
        try {
            analysis::writeSession(path.toStdString(), s);
            r.message = QObject::tr("Saved the session to %1").arg(path);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void LabExport::exportCaptureTo(const QString& path) {
    if (!begin(tr("Writing %1…").arg(path)))
        return;
    const auto cap = m_lab.wholeCapture();
    m_work->setFuture(QtConcurrent::run(workerPool(), [cap, path]() {
        ExportResult r;
        try {
            capture::CaptureWriter w(path.toStdString(), guiCaptureInfo(cap->info));
            w.add(cap->toExample());
            w.finish();
            r.message = QObject::tr("Wrote %1").arg(path);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void LabExport::exportFigureSetTo(const QString& dir) {
    if (!begin(tr("Computing the figure set…")))
        return;
    const auto cap = m_lab.wholeCapture();
    m_work->setFuture(QtConcurrent::run(workerPool(), [cap, dir]() {
        ExportResult r;
        r.dir = dir;
        try {
            r.figures = paperFiguresOf(
                *cap, QDir(dir).filePath(QStringLiteral("capture.h5")).toStdString());
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void LabExport::finished() {
    m_export = m_work->result();
    if (!m_export.error.isEmpty()) {
        m_exporting = false;
        m_lab.fail(m_export.error);
        return;
    }
    m_lab.clearError(); // (an earlier export's "cannot create the file" is gone with it)
    if (m_export.figures.empty()) {
        m_exporting = false;
        m_lab.showStatus(m_export.message, 5000);
        return;
    }
    std::reverse(m_export.figures.begin(), m_export.figures.end()); // drawn from the back
    QTimer::singleShot(0, this, &LabExport::renderNext);
}

void LabExport::renderNext() {
    // One figure per turn of the event loop, so that the window keeps answering.
    const analysis::FigureData f = m_export.figures.back();
    m_export.figures.pop_back();
    QString error;
    if (!m_render ||
        !m_render(f, QDir(m_export.dir).filePath(QString::fromStdString(f.id) + ".png"), &error)) {
        m_exporting = false;
        m_export.figures.clear();
        m_lab.fail(m_render ? error : tr("error: no figure renderer"));
        return;
    }
    ++m_count;
    if (!m_export.figures.empty()) {
        m_lab.showStatus(tr("Drawing the figures… %1 written").arg(m_count));
        QTimer::singleShot(0, this, &LabExport::renderNext);
        return;
    }
    m_exporting = false;
    m_lab.showStatus(tr("Wrote %1 figures to %2").arg(m_count).arg(m_export.dir), 5000);
}

} // namespace sparqlab::app
