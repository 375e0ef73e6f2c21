#pragma once
/// \file lab_export.h
/// The lab's exports: its capture (HDF5), a session, and the paper's figure set (the capture
/// file and statistics computed in a worker, the figures then rendered one per turn of the
/// event loop by the renderer the window gives). One at a time; owned by the lab (lab.h). Qt
/// Core only, GUI thread only.

#include "analysis/figures.h"
#include "analysis/session.h"

#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include <functional>
#include <vector>

namespace sparqlab::app {

class Lab;

/// The paper's figures of a capture (analysis::paperFigures at the command line's defaults, as
/// `sparqlab-cli figures` makes them): the capture written to `file`, its statistics. Seconds of
/// work: call it in a worker. Throws what writing or the statistics throw.
std::vector<analysis::FigureData> paperFiguresOf(const analysis::LabCapture& cap,
                                                 const std::string& file);

/// What an export's worker hands back: figures left to render on the GUI thread.
struct ExportResult {
    QString dir, message, error;
    std::vector<analysis::FigureData> figures;
};

class LabExport : public QObject {
    Q_OBJECT
public:
    /// Draws a figure into a file (widgets::saveFigure); false with `error` set on failure.
    using FigureRenderer = std::function<bool(const analysis::FigureData& figure,
                                              const QString& path, QString* error)>;

    explicit LabExport(Lab& lab);
    ~LabExport() override;
    void setFigureRenderer(FigureRenderer render) { m_render = std::move(render); }

    /// Starts writing the lab's capture to `path` (HDF5) in a worker.
    void exportCaptureTo(const QString& path);
    /// Starts writing the session `snapshot` makes (the lab's capture with the window's
    /// settings; taken when the export can start) to `path`.
    void saveSessionTo(const QString& path, const std::function<analysis::Session()>& snapshot);
    /// Starts writing the figure set (capture file, statistics, the paper's figures) into `dir`.
    void exportFigureSetTo(const QString& dir);
    bool isExporting() const { return m_exporting; }
    /// The figures the last figure set wrote.
    int count() const { return m_count; }

private:
    bool begin(const QString& status); ///< false (and a message) when it cannot start
    void finished();
    void renderNext();

    Lab& m_lab;
    QFutureWatcher<ExportResult>* m_work;
    FigureRenderer m_render;
    ExportResult m_export; ///< the figures being rendered
    bool m_exporting = false;
    int m_count = 0;
};

} // namespace sparqlab::app
