// The main window's files (main_window.h): sessions, exports, the screenshot.

#include "app/gui/worker_pool.h"
#include "main_window.h"

#include "analysis/stats_run.h"
#include "attention/atomic_file.h"
#include "attention/runtime_info.h"
#include "capture/calibration_file.h"
#include "capture/capture_file.h"
#include "capture/model.h"
#include "sparqlab/version.h"
#include "widgets/figure_renderer.h"
#include "widgets/panels.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMessageBox>
#include <QPixmap>
#include <QSignalBlocker>
#include <QSlider>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QtConcurrent/QtConcurrent>

#include <algorithm>

namespace sparqlab::app {

namespace {
/// A capture the lab writes says so (the model's runtime names the command line).
capture::CaptureInfo guiCaptureInfo(capture::CaptureInfo info) {
    info.createdBy = std::string("sparqlab ") + SPARQLAB_VERSION;
    return info;
}
} // namespace

analysis::Session MainWindow::currentSession() const {
    analysis::Session s;
    s.capture = m_capture;
    s.model = m_spec.toStdString();
    s.prompt = m_prompt->prompt().toStdString();
    s.generated = m_generated.toStdString();
    s.chat = m_chat;
    s.config = m_controls->config();
    s.config.calibration = nullptr;
    s.layer = m_controls->layer();
    s.head = m_controls->head();
    s.view = currentViewName().toStdString(); // a name: the tabs' order may change
    s.measure = analysis::measures()[0].second;
    for (const View& v : m_views)
        v.view->saveTo(s); // the overview's measure, the compared method, …
    s.step = decodeStep() >= 0 && decodeStep() < m_capture->steps() ? decodeStep() : -1;
    s.queryPosition =
        decodeStep() < 0 && queryPosition() < m_capture->positions() - 1 ? queryPosition() : -1;
    s.timing = m_timing->text()->text().toStdString();
    return s;
}

void MainWindow::saveSessionDialog() {
    if (!m_capture) {
        showError(tr("error: nothing to save: run a prompt first"));
        return;
    }
    const QString path = QFileDialog::getSaveFileName(this, tr("Save session"), QString(),
                                                      tr("SparQ Lab session (*.h5)"));
    if (!path.isEmpty())
        saveSessionTo(path);
}

void MainWindow::openSessionDialog() {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open session"), QString(),
                                                      tr("SparQ Lab session (*.h5)"));
    if (!path.isEmpty())
        openSession(path);
}

void MainWindow::saveSessionTo(const QString& path) {
    if (!beginExport(tr("Saving the session to %1…").arg(path)))
        return;
    const analysis::Session s = currentSession();
    m_exportWork->setFuture(QtConcurrent::run(workerPool(), [s, path]() {
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

void MainWindow::openSession(const QString& path) {
    if (m_work->isRunning()) {
        statusBar()->showMessage(tr("Wait for the running work to end, then open the session"),
                                 3000);
        return;
    }
    statusBar()->showMessage(tr("Opening %1…").arg(path));
    startWork([path](const attention::Job&) {
        WorkResult w;
        w.sessionPath = path;
        w.session = std::make_shared<analysis::Session>(analysis::readSession(path.toStdString()));
        return w;
    });
}

namespace {
struct LoadedCalibration {
    std::shared_ptr<attention::Calibration> cal;
    capture::CalibrationInfo info;
    QString error;
};
} // namespace

void MainWindow::loadCalibration(const QString& path) {
    m_loadingCalibration = true;
    statusBar()->showMessage(tr("Reading %1…").arg(path));
    auto* watcher = new QFutureWatcher<LoadedCalibration>(this);
    connect(watcher, &QFutureWatcher<LoadedCalibration>::finished, this, [this, watcher, path] {
        watcher->deleteLater();
        m_loadingCalibration = false;
        const LoadedCalibration r = watcher->result();
        if (!r.error.isEmpty()) {
            showError(tr("error: %1").arg(r.error));
            return;
        }
        const capture::CalibrationInfo& i = r.info;
        if (m_capture && (i.nLayers != m_capture->layers() || i.headDim != m_capture->headDim() ||
                          (i.nHeads > 0 && i.nHeads != m_capture->heads()) ||
                          (i.nKvHeads > 0 && i.nKvHeads != m_capture->kvHeads()))) {
            showError(tr("error: %1: made for %2 layers, %3 query and %4 KV heads of %5 "
                         "dimensions; the capture has %6, %7, %8 and %9")
                          .arg(path)
                          .arg(i.nLayers)
                          .arg(i.nHeads)
                          .arg(i.nKvHeads)
                          .arg(i.headDim)
                          .arg(m_capture->layers())
                          .arg(m_capture->heads())
                          .arg(m_capture->kvHeads())
                          .arg(m_capture->headDim()));
            return;
        }
        m_controls->setCalibration(r.cal->method, r.cal);
        m_controls->setMethod(r.cal->method);
        statusBar()->showMessage(
            tr("%1 uses %2 (File → Calibrate on the Prompt Itself to go back)")
                .arg(QString::fromUtf8(attention::methodInfo(r.cal->method).label), path),
            8000);
    });
    watcher->setFuture(QtConcurrent::run(workerPool(), [path]() {
        LoadedCalibration r;
        try {
            r.cal = capture::readCalibration(path.toStdString(), &r.info);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void MainWindow::restoreSession(const analysis::Session& s, const QString& path) {
    m_capture = s.capture;
    m_generated = QString::fromStdString(s.generated);
    m_lastError.clear();
    m_chat = s.chat;
    m_prompt->setChat(s.chat.on, QString::fromStdString(s.chat.system), s.chat.addGenerationPrompt);
    m_prompt->setPrompt(
        QString::fromStdString(s.chat.on ? capture::formatTurns(s.chat.turns) : s.prompt));
    m_prompt->showOutput(m_generated.isEmpty()
                             ? QString()
                             : tr("<b>Generated:</b> %1").arg(m_generated.toHtmlEscaped()));
    if (!m_current)
        m_model->showModel(
            tr("Session (no model loaded)"),
            {{tr("File"), QFileInfo(path).fileName()},
             {tr("Captured with"), QString::fromStdString(s.model)},
             {tr("Architecture"), QString::fromStdString(s.capture->info.architecture)},
             {tr("Layers"), QString::number(s.capture->layers())},
             {tr("Query heads"), QString::number(s.capture->heads())},
             {tr("KV heads"), QString::number(s.capture->kvHeads())},
             {tr("Head dimension"), QString::number(s.capture->headDim())},
             {tr("Positions"), QString::number(s.capture->positions())}});
    {
        const QSignalBlocker b(m_controls), c(m_stepSlider);
        m_controls->setLimits(
            static_cast<int>(m_capture->layers()), static_cast<int>(m_capture->heads()),
            static_cast<int>(m_capture->headDim()), static_cast<int>(m_capture->positions()));
        m_controls->setConfig(s.config);
        m_controls->setLayerHead(static_cast<int>(s.layer), static_cast<int>(s.head));
        for (const View& v : m_views)
            v.view->restoreFrom(s); // the overview's measure, the compared method, …
        m_stepSlider->setRange(static_cast<int>(m_capture->firstHeldQuery()),
                               static_cast<int>(m_capture->positions() - 1));
        m_stepSlider->setValue(static_cast<int>(s.queryPosition >= 0 ? s.queryPosition
                                                : s.step >= 0 && m_capture->steps() > 0
                                                    ? m_capture->promptPositions - 1 + s.step
                                                    : m_capture->positions() - 1));
    }
    updateStepBar();
    {
        const QSignalBlocker b(m_tabs);
        if (!showView(QString::fromStdString(s.view)))
            statusBar()->showMessage(tr("%1: no view '%2' in this version; showing the head view")
                                         .arg(path, QString::fromStdString(s.view)),
                                     5000);
    }
    redraw();
    if (!s.timing.empty()) { // the timing measured when the session was saved, until a change
        m_timingDelay->stop();
        m_keepTiming = true;
        m_timing->showText(QString::fromStdString(s.timing));
    }
    statusBar()->showMessage(
        tr("Opened the session %1 (%2 positions)").arg(path).arg(m_capture->positions()), 5000);
}

void MainWindow::exportCapture() {
    if (!m_capture) {
        showError(tr("error: nothing to export: run a prompt first"));
        return;
    }
    const QString path = QFileDialog::getSaveFileName(this, tr("Export capture"), QString(),
                                                      tr("HDF5 capture (*.h5)"));
    if (!path.isEmpty())
        exportCaptureTo(path);
}

bool MainWindow::beginExport(const QString& status) {
    if (!m_capture || m_exporting) {
        showError(m_capture ? tr("error: an export is still running")
                            : tr("error: nothing to export: run a prompt first"));
        return false;
    }
    // Exports write the lab's own capture (what is shown), not a new run of the model: the
    // model may be generating in the other worker, and the prompt box may have changed since.
    m_exporting = true;
    m_exportCount = 0;
    statusBar()->showMessage(status);
    return true;
}

void MainWindow::exportCaptureTo(const QString& path) {
    if (!beginExport(tr("Writing %1…").arg(path)))
        return;
    const auto cap = m_capture;
    m_exportWork->setFuture(QtConcurrent::run(workerPool(), [cap, path]() {
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

void MainWindow::exportFigureSet() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Folder for the figures"));
    if (!dir.isEmpty())
        exportFigureSetTo(dir);
}

void MainWindow::exportFigureSetTo(const QString& dir) {
    if (!beginExport(tr("Computing the figure set…")))
        return;
    const auto cap = m_capture;
    m_exportWork->setFuture(QtConcurrent::run(workerPool(), [cap, dir]() {
        ExportResult r;
        r.dir = dir;
        try {
            // The same path as `sparqlab-cli figures`: a capture file, its statistics, the
            // figures' data; the figures are drawn on the GUI thread (QCustomPlot is a widget).
            const std::string file = QDir(dir).filePath(QStringLiteral("capture.h5")).toStdString();
            capture::CaptureWriter w(file, guiCaptureInfo(cap->info));
            w.add(cap->toExample());
            w.finish();
            analysis::StatsOptions o;
            o.capturePath = file;
            o.recall = analysis::defaultRecallConfigs();
            const capture::CaptureInfo& info = cap->info;
            o.alphaK = std::min<int64_t>(o.alphaK, cap->positions());
            r.figures = analysis::paperFigures(analysis::runStats(o), info, o, info.nLayers / 2);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void MainWindow::exportFinished() {
    m_export = m_exportWork->result();
    if (!m_export.error.isEmpty()) {
        m_exporting = false;
        showError(m_export.error);
        return;
    }
    clearError(); // (an earlier export's "cannot create the file" is gone with it)
    if (m_export.figures.empty()) {
        m_exporting = false;
        statusBar()->showMessage(m_export.message, 5000);
        return;
    }
    std::reverse(m_export.figures.begin(), m_export.figures.end()); // drawn from the back
    QTimer::singleShot(0, this, &MainWindow::renderNextFigure);
}

void MainWindow::renderNextFigure() {
    // One figure per turn of the event loop, so that the window keeps answering.
    const analysis::FigureData f = m_export.figures.back();
    m_export.figures.pop_back();
    QString error;
    if (!widgets::saveFigure(f, QDir(m_export.dir).filePath(QString::fromStdString(f.id) + ".png"),
                             800, 520, &error)) {
        m_exporting = false;
        m_export.figures.clear();
        showError(error);
        return;
    }
    ++m_exportCount;
    if (!m_export.figures.empty()) {
        statusBar()->showMessage(tr("Drawing the figures… %1 written").arg(m_exportCount));
        QTimer::singleShot(0, this, &MainWindow::renderNextFigure);
        return;
    }
    m_exporting = false;
    statusBar()->showMessage(tr("Wrote %1 figures to %2").arg(m_exportCount).arg(m_export.dir),
                             5000);
}

void MainWindow::exportPlots() {
    const QString base = QFileDialog::getSaveFileName(this, tr("Export plots"), QString(),
                                                      tr("PNG (*.png);;SVG (*.svg);;PDF (*.pdf)"));
    if (base.isEmpty())
        return;
    QString error;
    const QStringList written = exportShownPlots(base, &error);
    if (!error.isEmpty())
        showError(tr("error: %1").arg(error));
    else
        statusBar()->showMessage(tr("Wrote %1 plots of the %2 view next to %3")
                                     .arg(written.size())
                                     .arg(currentViewName(), base),
                                 5000);
}

QStringList MainWindow::exportShownPlots(const QString& base, QString* error) {
    // What is on screen: the plots of the tab shown, as drawn, named STEM-VIEW-PLOT.EXT.
    flushRedraw();
    const QFileInfo fi(base);
    const QString ext = fi.suffix().isEmpty() ? QStringLiteral("png") : fi.suffix().toLower();
    const QString stem =
        fi.path() + QLatin1Char('/') + fi.completeBaseName() + QLatin1Char('-') + currentViewName();
    LabView* v = currentView();
    if (!v) {
        *error = tr("%1: no view is shown").arg(base);
        return {};
    }
    return widgets::exportShownPlots(v->widget(), stem, ext, error);
}

void MainWindow::showAbout() {
    QMessageBox::about(
        this, tr("About SparQ Lab"),
        tr("<b>SparQ Lab %1</b><p>A laboratory for SparQ Attention "
           "(Ribar et al., ICML 2024).</p><p>%2</p>")
            .arg(QStringLiteral(SPARQLAB_VERSION),
                 QString::fromStdString(attention::runtimeSummary()).toHtmlEscaped()));
}

bool MainWindow::saveScreenshot(const QString& path, QString* error) {
    const QPixmap pixmap = grab();
    try {
        attention::writeAtomically(path.toStdString(), [&](const std::string& tmp) {
            if (!pixmap.save(QString::fromStdString(tmp), "PNG"))
                throw std::runtime_error(path.toStdString() + ": cannot write the screenshot");
        });
    } catch (const std::exception& e) {
        *error = QString::fromUtf8(e.what());
        return false;
    }
    return true;
}

} // namespace sparqlab::app
