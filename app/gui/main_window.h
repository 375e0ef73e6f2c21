#pragma once
/// \file main_window.h
/// The main window of SparQ Lab: model and prompt on the left, the head view and the
/// layer × head overview in the middle, controls, transfer, timing and statistics on the
/// right. Models open, prompts run and timings are measured in workers; every control change
/// redraws at once from the captured q, K and V. GUI thread only.

#include "analysis/lab.h"

#include "analysis/figures.h"
#include "analysis/session.h"
#include "widgets/lab_views.h"

#include <QFutureWatcher>
#include <QMainWindow>

#include <atomic>
#include <map>
#include <memory>

class QLabel;
class QPushButton;
class QSlider;
class QTabWidget;
class QTimer;

namespace sparqlab::widgets {
class ModelPanel;
class PromptPanel;
class HeadView;
class OverviewView;
class ControlsPanel;
class TransferPanel;
class StatsPanel;
class TimingPanel;
class TradeoffsView;
struct TradeoffRequest;
class CompareView;
class TimingCurveView;
} // namespace sparqlab::widgets

namespace sparqlab::capture {
class Model;
}

namespace sparqlab::app {

/// A model opened off the GUI thread, or the one-line error that stopped it.
struct LoadResult {
    std::shared_ptr<capture::Model> model;
    QString error;
    QString spec;
};

/// What an export's worker hands back: figures left to render on the GUI thread.
struct ExportResult {
    QString dir, message, error;
    std::vector<analysis::FigureData> figures;
};

/// What a worker returns: a capture, generated text (with the capture of prompt and
/// generation), an opened session, or an error.
/// The overview's grids, computed in a worker (a 16k-token capture takes half a second).
struct OverviewResult {
    analysis::Overview overview;
    QString error;
    int r = 0, k = 0;
};

struct WorkResult {
    std::shared_ptr<analysis::LabCapture> capture;
    std::shared_ptr<analysis::Session> session; ///< File → Open Session
    QString sessionPath;
    QString text;
    QString error;
    bool cancelled = false;
    bool tradeoffs = false; ///< the Trade-offs tab's study ended
    /// Teaching mode's retrieval page: the head with the largest induction score (−1: none).
    int retrievalLayer = -1, retrievalHead = -1;
    double retrievalScore = 0;
};

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    /// Opens a model (folder, cached hub id or "demo") in a worker thread.
    void openModel(const QString& spec);
    bool isLoading() const;
    /// True while a capture or a generation runs.
    bool isBusy() const;
    /// Positions of the capture the lab shows (0 before the first run).
    int64_t capturedPositions() const;
    /// True while the timing panel's measurement is scheduled or running.
    bool isTimingPending() const;
    /// Captures q, K and V of `text` in a worker (what Run does).
    void runPrompt(const QString& text);
    /// Teaching mode's fourth page: the prompt that repeats a passage.
    static QString retrievalPrompt();
    /// Generates `tokens` tokens after the prompt box's text with the lab's method (what
    /// Generate does), then captures prompt and generation for the decode-step slider.
    void generate(int tokens);
    /// Stops the running capture or generation; control returns at once.
    void cancelWork();
    /// Redraws the head view, overview and transfer panel from the current capture.
    void redraw();
    /// Teaching mode: 0 off, 1–3 the step of SparQ being presented.
    void setTeachingStep(int step);
    /// Writes the paper's figures (PNG) for the current prompt into `dir`, as `sparqlab-cli
    /// figures` would for its capture (also written there). Returns the number of figures.
    /// Starts writing the figure set (capture file, statistics, the paper's figures) of what
    /// the lab shows into `dir`: the file and statistics in a worker, the figures rendered one
    /// per turn of the event loop. isExporting() until done; lastExportCount() figures.
    void exportFigureSetTo(const QString& dir);
    /// Starts writing the lab's capture to `path` (HDF5) in a worker.
    void exportCaptureTo(const QString& path);
    bool isExporting() const { return m_exporting; }
    /// Starts writing the session (the lab's capture, prompt, settings and view) to `path` in
    /// a worker; isExporting() until done.
    void saveSessionTo(const QString& path);
    /// Opens a session file in a worker and restores the lab from it, without a model.
    void openSession(const QString& path);
    /// The session the lab would save now (without its capture's copy).
    analysis::Session currentSession() const;
    /// Runs a redraw the controls asked for now, if one is pending (redraws are coalesced:
    /// many control changes in one turn of the event loop draw once), and waits for the
    /// overview's grids when they are being computed.
    void flushRedraw();
    /// True while the overview's grids are computed in the worker.
    bool isOverviewPending() const { return m_overviewPending; }
    /// Decode steps: the step shown (0 … steps, steps = the last position), −1 when the
    /// capture has no generated tokens.
    int decodeStep() const;
    void setDecodeStep(int step);
    /// The capture the views show: the lab's capture, or its view at the decode step.
    const analysis::LabCapture* shownCapture() const { return m_shown.get(); }
    /// Measures the timing curve (decode time against S) in a worker; cached per shape.
    void measureTimingCurve();
    bool isCurveRunning() const;
    widgets::CompareView* compareView() const { return m_compare; }
    widgets::TimingCurveView* timingCurveView() const { return m_curve; }
    QString timingText() const;
    int lastExportCount() const { return m_exportCount; }
    /// 0: head view, 1: overview, 2: trade-offs, 3: compare, 4: timing curve.
    void showView(int index);
    /// Runs the Trade-offs tab's study in the worker (what its Run does).
    void runTradeoffs(const widgets::TradeoffRequest& request);
    widgets::TradeoffsView* tradeoffsView() const { return m_tradeoffs; }

    widgets::ControlsPanel* controls() const { return m_controls; }
    widgets::HeadView* headView() const { return m_head; }
    widgets::OverviewView* overviewView() const { return m_overview; }
    widgets::PromptPanel* promptPanel() const { return m_prompt; }
    widgets::TransferPanel* transferPanel() const { return m_transfer; }
    const analysis::LabCapture* labCapture() const { return m_capture.get(); }
    /// The last error shown (empty if none).
    QString lastError() const { return m_lastError; }

    /// Renders the window (as shown) to a PNG. Returns false with *error set on failure.
    bool saveScreenshot(const QString& path, QString* error);

private:
    void buildMenus();
    void openModelDialog();
    void showAbout();
    void exportCapture();
    void exportPlots();
    void exportFigureSet();
    void saveSessionDialog();
    void openSessionDialog();
    void restoreSession(const analysis::Session& s, const QString& path);
    void scheduleRedraw();
    void drawOverview();
    void overviewFinished();
    void drawCompare(const analysis::HeadState& a);
    void curveFinished();
    void updateStepBar();
    void modelLoaded();
    void workFinished();
    void measureTiming();
    void timingFinished();
    bool beginExport(const QString& status); ///< false (and a message) when it cannot start
    void exportFinished();
    void renderNextFigure();
    void showError(const QString& message);
    void updateStats(const analysis::HeadState& h);

    widgets::ModelPanel* m_model;
    widgets::PromptPanel* m_prompt;
    widgets::HeadView* m_head;
    widgets::OverviewView* m_overview;
    widgets::ControlsPanel* m_controls;
    widgets::TransferPanel* m_transfer;
    widgets::StatsPanel* m_stats;
    widgets::TimingPanel* m_timing;
    widgets::TradeoffsView* m_tradeoffs;
    widgets::CompareView* m_compare;
    widgets::TimingCurveView* m_curve;
    QTabWidget* m_tabs;
    QWidget* m_stepBar;
    QSlider* m_stepSlider;
    QLabel* m_stepLabel;
    QTimer* m_redrawTimer;
    bool m_overviewDirty = true;
    bool m_overviewPending = false; ///< a worker computes the grids
    bool m_overviewAgain = false;   ///< the controls changed meanwhile: compute again after
    QFutureWatcher<OverviewResult>* m_overviewWork;
    bool m_keepTiming = false; ///< a restored session's timing text stays until a change
    QString m_generated;       ///< the generated text of the capture shown
    /// Timing curves measured, per shape and parameters.
    std::map<QString, std::vector<widgets::TimingCurve>> m_curves;
    QString m_curveKey;             ///< the key being measured
    bool m_curvePending = false;    ///< asked for and not drawn yet
    bool m_timingMeasuring = false; ///< the timing panel's worker started, result not shown
    QFutureWatcher<std::vector<widgets::TimingCurve>>* m_curveWork;
    std::shared_ptr<std::atomic<bool>> m_curveCancel;
    QWidget* m_teachBar;
    QLabel* m_teachText;
    int m_teachStep = 0;
    bool m_loading = false; ///< a model is being opened (until modelLoaded() ran)
    bool m_busy = false;    ///< a capture or generation runs (until workFinished() ran)
    QFutureWatcher<LoadResult>* m_loader;
    QFutureWatcher<WorkResult>* m_work;
    QFutureWatcher<QString>* m_timingWork;
    QFutureWatcher<ExportResult>* m_exportWork;
    ExportResult m_export; ///< the figures being rendered
    bool m_exporting = false;
    int m_exportCount = 0;
    QTimer* m_timingDelay;
    std::shared_ptr<std::atomic<bool>> m_cancel;
    std::shared_ptr<capture::Model> m_current;
    std::shared_ptr<analysis::LabCapture> m_capture;
    std::shared_ptr<analysis::LabCapture> m_shown; ///< m_capture or its decode-step view
    QString m_lastError;
    QString m_spec;
};

} // namespace sparqlab::app
