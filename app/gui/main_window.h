#pragma once
/// \file main_window.h
/// The main window of SparQ Lab: model and prompt on the left, the views (the table of
/// lab_view.h: head view, overview, trade-offs, compare, timing) in the middle, controls,
/// transfer, timing and statistics on the right. Everything that computes runs in a worker: the
/// model (open, run, generate, a study), the head view's state, each view's own work, the timing
/// panel; the GUI thread only draws results (docs/ARCHITECTURE.md). GUI thread only.

#include "analysis/lab.h"

#include "analysis/figures.h"
#include "analysis/session.h"
#include "app/gui/lab_view.h"
#include "widgets/compare_view.h"
#include "widgets/controls_panel.h"
#include "widgets/figure_renderer.h"
#include "widgets/head_view.h"
#include "widgets/overview_view.h"
#include "widgets/transfer_panel.h"

#include <QFutureWatcher>
#include <QMainWindow>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

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

/// What the model's worker returns: a capture, generated text (with the capture of prompt and
/// generation), an opened session, or an error.
struct WorkResult {
    std::shared_ptr<analysis::LabCapture> capture;
    std::shared_ptr<analysis::Session> session; ///< File → Open Session
    QString sessionPath;
    QString text;
    QString error;
    bool cancelled = false;
    /// Teaching mode's retrieval page: the head with the largest induction score (−1: none),
    /// and the smallest r whose SparQ selection holds half of its exact attention.
    int retrievalLayer = -1, retrievalHead = -1, retrievalR = 0;
    double retrievalScore = 0, retrievalMass = 0;
    /// A chat prompt: its turns and content positions, and the template's rendering.
    analysis::SessionChat chat;
    capture::ChatRendering rendering;
};

/// What the prompt box asks for, read on the GUI thread and handed to a worker.
struct PromptInput {
    std::string text;
    bool chat = false;
    std::string system;
    bool addGenerationPrompt = true;
};

/// What the head worker hands back: the head view's state and the capture it was computed on.
struct HeadResult {
    std::shared_ptr<analysis::LabCapture> shown;
    analysis::HeadState state;
    QString error;
};

class MainWindow : public QMainWindow, public LabHost {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    /// Whether closing the window keeps r and k for the next start (off for runs driven by
    /// command-line options: what they set is not the user's choice).
    void setRememberSettings(bool remember) { m_rememberSettings = remember; }
    /// Opens a model (folder, cached hub id or "demo") in a worker thread.
    void openModel(const QString& spec);
    bool isLoading() const;
    /// True while a capture, a generation or a study runs.
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
    /// Stops the running capture, generation or study; control returns at once.
    void cancelWork();
    /// Recomputes the head view (in the head worker) from the current capture and settings;
    /// the views and panels follow when it is drawn.
    void redraw();
    /// Teaching mode: 0 off, 1–3 the step of SparQ being presented, 4 retrieval.
    void setTeachingStep(int step);
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
    /// Loads a calibration file (sparqlab-cli calibrate: Loki's basis, Double Sparsity's
    /// channels) in a worker, checks it against the capture and makes it its method's (the
    /// method shown); an error is one line naming the file. isLoadingCalibration() meanwhile.
    void loadCalibration(const QString& path);
    bool isLoadingCalibration() const { return m_loadingCalibration; }
    /// The session the lab would save now (without its capture's copy).
    analysis::Session currentSession() const;
    /// The prompt box's text and chat settings (GUI thread).
    PromptInput promptInput() const;
    /// The shown capture's positions the chat template wrote (empty: no chat).
    std::vector<bool> templateTokens() const;
    /// Runs a redraw the controls asked for now, if one is pending (redraws are coalesced:
    /// many control changes in one turn of the event loop draw once), and waits for the head
    /// worker and the shown view's own work.
    void flushRedraw();
    /// Decode steps: the step shown (0 … steps, steps = the last position), −1 when the
    /// capture has no generated tokens.
    int decodeStep() const;
    void setDecodeStep(int step);
    /// The position whose query the views show (any held one; the last by default); −1 before
    /// a run. Setting one the capture does not hold is a status line.
    int queryPosition() const override;
    void setQueryPosition(int position) override;
    /// The capture the views show: the lab's capture, or its view at the decode step.
    const analysis::LabCapture* shownCaptureNow() const { return m_shown.get(); }
    /// Measures the timing view's curve (decode time against S) in a worker; cached per shape.
    void measureTimingCurve();
    bool isCurveRunning() const;
    QString timingText() const;
    int lastExportCount() const { return m_exportCount; }
    /// Shows the view named `name` (the view table's, lab_view.h); false when there is none.
    bool showView(const QString& name);
    /// The name of the view shown.
    QString currentViewName() const;

    // The views' widgets, for automation and tests.
    widgets::CompareView* compareView() const;
    widgets::TimingCurveView* timingCurveView() const;
    widgets::TradeoffsView* tradeoffsView() const;
    widgets::OverviewView* overviewView() const;
    widgets::ControlsPanel* controls() const { return m_controls; }
    widgets::HeadView* headView() const { return m_head; }
    widgets::PromptPanel* promptPanel() const { return m_prompt; }
    widgets::TransferPanel* transferPanel() const { return m_transfer; }
    const analysis::LabCapture* labCapture() const { return m_capture.get(); }
    /// The last error shown (empty if none).
    QString lastError() const { return m_lastError; }

    /// Writes the plots of the view shown, as displayed, next to `base` (BASE-VIEW-PLOT.EXT,
    /// the format by its suffix); the paths, or `error` naming the file that failed.
    QStringList exportShownPlots(const QString& base, QString* error);
    /// Renders the window (as shown) to a PNG. Returns false with *error set on failure.
    bool saveScreenshot(const QString& path, QString* error);

    // LabHost (lab_view.h): what the views ask of the window.
    std::shared_ptr<const analysis::LabCapture> shownCapture() const override { return m_shown; }
    std::shared_ptr<const analysis::LabCapture> wholeCapture() const override { return m_capture; }
    attention::AttentionConfig labConfig() const override;
    /// The controls' configuration with the defaults that do not fit the capture fitted to it
    /// (attention::fitDefaults, as `attend` does); what changed in `notes`.
    attention::AttentionConfig fittedConfig(QStringList* notes = nullptr) const;
    int labLayer() const override;
    int labHead() const override;
    const analysis::HeadState* headState() const override;
    void selectHead(int layer, int head) override;
    void showViewNamed(const QString& name) override { showView(name); }
    void scheduleRedraw() override;
    void showStatus(const QString& message, int milliseconds = 0) override;
    std::shared_ptr<capture::Model> model() const override { return m_current; }
    QString modelSpec() const override { return m_spec; }
    bool runModelWork(std::function<void(const attention::Job& job)> work,
                      std::function<void(const QString& error, bool cancelled)> done) override;
    void cancelModelWork() override { cancelWork(); }
    bool timingBusy() const override { return m_timingMeasuring; }
    QWidget* headWidget() override;

private:
    struct View {
        const ViewSpec* spec;
        LabView* view;
    };
    void buildMenus();
    void buildViews();
    void openModelDialog();
    void showAbout();
    void exportCapture();
    void exportPlots();
    void exportFigureSet();
    void saveSessionDialog();
    void openSessionDialog();
    void restoreSession(const analysis::Session& s, const QString& path);
    void startWork(std::function<WorkResult(const attention::Job& job)> work);
    void headFinished();
    void showRetrieval(const WorkResult& w);
    void updateStepBar();
    void modelLoaded();
    void workFinished();
    void measureTiming();
    void timingFinished();
    bool beginExport(const QString& status); ///< false (and a message) when it cannot start
    void exportFinished();
    void renderNextFigure();
    void showError(const QString& message);
    /// The error shown is gone with its cause (a successful export, Chat switched): the head
    /// view draws again in place of the message.
    void clearError();
    void updateStats(const analysis::HeadState& h);
    LabView* currentView() const;
    LabView* viewNamed(const char* name) const;

    widgets::ModelPanel* m_model;
    widgets::PromptPanel* m_prompt;
    widgets::HeadView* m_head;
    widgets::ControlsPanel* m_controls;
    widgets::TransferPanel* m_transfer;
    widgets::StatsPanel* m_stats;
    widgets::TimingPanel* m_timing;
    std::vector<View> m_views; ///< in the view table's order, one tab each
    QTabWidget* m_tabs;
    QWidget* m_stepBar;
    QSlider* m_stepSlider;
    QLabel* m_stepLabel;
    QTimer* m_redrawTimer;
    QFutureWatcher<HeadResult>* m_headWork;
    bool m_headPending = false; ///< the head worker computes
    bool m_headAgain = false;   ///< the settings changed meanwhile: compute again after
    bool m_headShown = false;   ///< m_headState holds a drawn state
    analysis::HeadState m_headState;
    bool m_keepTiming = false;    ///< a restored session's timing text stays until a change
    QString m_generated;          ///< the generated text of the capture shown
    analysis::SessionChat m_chat; ///< the capture's chat (off for a plain prompt)
    bool m_rememberSettings = true;
    QPushButton* m_teachBack = nullptr;
    QPushButton* m_teachNext = nullptr;
    /// What teaching page 4 replaces with its own (the prompt, the method and its values, the
    /// head), given back when the page is left.
    struct BeforeRetrieval {
        QString prompt;
        attention::AttentionConfig config;
        int layer = 0, head = 0;
    };
    std::optional<BeforeRetrieval> m_beforeRetrieval;
    bool m_timingMeasuring = false; ///< the timing panel's worker started, result not shown
    QWidget* m_teachBar;
    QLabel* m_teachText;
    int m_teachStep = 0;
    bool m_loading = false; ///< a model is being opened (until modelLoaded() ran)
    bool m_busy = false;    ///< the model's worker runs (until workFinished() ran)
    QFutureWatcher<LoadResult>* m_loader;
    QFutureWatcher<WorkResult>* m_work;
    /// What runModelWork's caller wants told when the model's work ends.
    std::function<void(const QString&, bool)> m_workDone;
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
    bool m_loadingCalibration = false;
};

} // namespace sparqlab::app
