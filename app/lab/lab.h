#pragma once
/// \file lab.h
/// The lab below the window: its state (the model, the capture and the capture shown, the chat,
/// the head state, the last error) and its workers — the model's (open, capture, generate, open
/// a session, a view's model work), the calibration reader, the exports (lab_export.h) and the
/// timing panel's measurement (decode_timing.h). The views observe it (LabHost); the window
/// arranges widgets around it: it gives the lab its settings (setSettingsSource) and carries
/// out what the lab asks through its signals. Qt Core and Concurrent only; GUI thread only
/// (its workers run in workerPool()).

#include "app/lab/lab_host.h"

#include "text/chat_template.h"

#include <QFutureWatcher>
#include <QObject>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace sparqlab::app {

class DecodeTiming;
class LabExport;

/// A model opened off the GUI thread, or the one-line error that stopped it.
struct LoadResult {
    std::shared_ptr<model::Model> model;
    QString error;
    QString spec;
    QString device; ///< where it was asked to open
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
    /// A first screen: the head it shows (analysis::firstScreenHead), found in the worker.
    std::optional<analysis::HeadPick> firstHead;
    /// A chat prompt: its turns and content positions, and the template's rendering.
    analysis::SessionChat chat;
    text::ChatRendering rendering;
};

/// Whether a run is a first screen, whose worker picks the head shown
/// (analysis::firstScreenHead), and at which k: the one asked for, or the prompt's own
/// (analysis::promptK: k follows the prompt until the user sets one).
enum class FirstScreen { No, AtK, AtPromptK };

/// What the prompt box asks for, read on the GUI thread and handed to a worker.
struct PromptInput {
    std::string text;
    bool chat = false;
    std::string system;
    bool addGenerationPrompt = true;
};

/// What the window's controls say: the method and its parameters (unfitted), the head, the
/// query shown (−1: none).
struct LabSettings {
    attention::AttentionConfig config;
    int layer = 0, head = 0, query = -1;
};

class Lab : public QObject, public LabHost {
    Q_OBJECT
public:
    explicit Lab(QObject* parent = nullptr);
    ~Lab() override;

    /// Where the lab reads its settings (the window's controls), whenever it needs them.
    void setSettingsSource(std::function<LabSettings()> source) { m_settings = std::move(source); }

    /// Opens a model (folder, cached hub id or "demo") in a worker, on the lab's device;
    /// modelOpened() or an error.
    void openModel(const QString& spec);
    /// Where models open and run: "cpu" or "cuda" (attention::requireDevice). With a model open on
    /// another device, it is opened again there; if that fails, the model and its device stay
    /// (deviceChanged() says so). Returns the one-line reason when the device cannot be used or a
    /// model is still opening (the device stays as it was), else an empty string.
    QString setDevice(const QString& device);
    QString device() const { return m_device; }
    bool isLoading() const { return m_loading; } ///< until modelOpened() (or the error) is out
    /// Captures q, K and V of `input` in the model's worker; `base` is the method teaching's
    /// retrieval page measures with (`retrieval`: find the retrieval head as well) and whose k
    /// a first screen picks its head at, unless k follows the prompt (`first`:
    /// WorkResult::firstHead).
    void runPrompt(const PromptInput& input, const attention::AttentionConfig& base, bool retrieval,
                   FirstScreen first = FirstScreen::No);
    /// Generates `tokens` tokens after the prompt with `cfg`, then captures prompt and
    /// generation for the decode steps.
    void generate(const PromptInput& input, int tokens, const attention::AttentionConfig& cfg);
    /// Opens a session file in the model's worker (no model needed); sessionOpened() then.
    void openSession(const QString& path);
    /// Stops the running capture, generation or study; control returns at once.
    void cancelWork();
    /// True while the model's worker runs (until its result is handed on).
    bool isBusy() const { return m_busy; }
    /// Loads a calibration file (sparqlab-cli calibrate) in a worker and checks it against the
    /// capture; calibrationLoaded() or an error naming the file.
    void loadCalibration(const QString& path);
    bool isLoadingCalibration() const { return m_loadingCalibration; }

    /// The lab shows `capture` (a run, a generation, a session): the head state and the capture
    /// shown are recomputed.
    void setCapture(std::shared_ptr<analysis::LabCapture> capture, const QString& generated,
                    const analysis::SessionChat& chat,
                    std::optional<analysis::HeadPick> firstHead = std::nullopt);
    const analysis::LabCapture* labCapture() const { return m_capture.get(); }
    std::shared_ptr<analysis::LabCapture> capture() const { return m_capture; }
    const analysis::LabCapture* shownCaptureNow() const { return m_shown.get(); }
    int64_t capturedPositions() const { return m_capture ? m_capture->positions() : 0; }
    const QString& generated() const { return m_generated; }
    /// The settings' configuration with the defaults that do not fit the capture fitted to it
    /// (attention::fitDefaults, as `attend` does); what changed in `notes`.
    attention::AttentionConfig fittedConfig(QStringList* notes = nullptr) const;

    /// Shows an error: lastError() until it is gone with its cause (clearError()).
    void fail(const QString& message);
    void clearError();
    QString lastError() const { return m_lastError; }

    DecodeTiming* timing() const { return m_timing; }
    LabExport* exports() const { return m_export; }
    bool isTimingPending() const;
    bool isExporting() const;
    int lastExportCount() const;

    // LabHost
    std::shared_ptr<const analysis::LabCapture> shownCapture() const override { return m_shown; }
    std::shared_ptr<const analysis::LabCapture> wholeCapture() const override { return m_capture; }
    const analysis::SessionChat& chat() const override { return m_chat; }
    std::optional<analysis::HeadPick> firstHead() const override { return m_firstHead; }
    attention::AttentionConfig labConfig() const override { return fittedConfig(); }
    int labLayer() const override { return m_settings().layer; }
    int labHead() const override { return m_settings().head; }
    int queryPosition() const override { return m_capture ? m_settings().query : -1; }
    void setQueryPosition(int position) override;
    const analysis::HeadState* headState() const override;
    void setHeadState(std::shared_ptr<const analysis::LabCapture> shown,
                      const analysis::HeadState* state, const QString& error) override;
    void selectHead(int layer, int head) override { Q_EMIT headSelected(layer, head); }
    void showViewNamed(const QString& name) override { Q_EMIT viewRequested(name); }
    void scheduleRedraw() override { Q_EMIT redrawRequested(); }
    void showStatus(const QString& message, int milliseconds = 0) override {
        Q_EMIT status(message, milliseconds);
    }
    std::shared_ptr<model::Model> model() const override { return m_model; }
    QString modelSpec() const override { return m_spec; }
    bool runModelWork(std::function<void(const base::Job& job)> work,
                      std::function<void(const QString& error, bool cancelled)> done) override;
    void cancelModelWork() override { cancelWork(); }
    bool timingBusy() const override;

Q_SIGNALS:
    /// The device models open on changed ("cpu" or "cuda").
    void deviceChanged(const QString& device);
    void modelLoading(const QString& spec);
    /// A model opened (model()); `failed` holds the error when none did.
    void modelOpened(const QString& failed);
    /// The model's worker started (true) or its result was handed on (false).
    void busyChanged(bool busy);
    /// A run or a generation ended with a capture (or generated text alone): `w` for the window
    /// (the text, the chat's rendering, teaching's retrieval head).
    void workDone(const WorkResult& w);
    void sessionOpened(const analysis::Session& s, const QString& path);
    /// A calibration file was read: the window makes it its method's (and shows that method).
    void calibrationLoaded(std::shared_ptr<attention::Calibration> cal);
    /// lastError() changed: a message to show, or "" (gone).
    void errorChanged(const QString& message);
    /// The head worker's result is in (headState(), shownCapture()); `fitted` the notes.
    void headStateChanged();
    void status(const QString& message, int milliseconds);
    void headSelected(int layer, int head);
    void viewRequested(const QString& name);
    void queryRequested(int position);
    void redrawRequested();

private:
    void startWork(std::function<WorkResult(const base::Job& job)> work);
    void modelLoaded();
    void workFinished();

    std::function<LabSettings()> m_settings;
    QFutureWatcher<LoadResult>* m_loader;
    QFutureWatcher<WorkResult>* m_work;
    /// What runModelWork's caller wants told when the model's work ends.
    std::function<void(const QString&, bool)> m_workDone;
    DecodeTiming* m_timing;
    LabExport* m_export;
    std::shared_ptr<std::atomic<bool>> m_cancel;
    bool m_loading = false; ///< a model is being opened (until modelOpened() is out)
    bool m_busy = false;    ///< the model's worker runs (until its result is handed on)
    bool m_loadingCalibration = false;
    std::shared_ptr<model::Model> m_model;
    QString m_spec;
    QString m_device = QStringLiteral("cpu");
    std::shared_ptr<analysis::LabCapture> m_capture;
    std::shared_ptr<const analysis::LabCapture> m_shown; ///< m_capture or its view at the query
    QString m_generated;                           ///< the generated text of the capture shown
    analysis::SessionChat m_chat;                  ///< the capture's chat (off for a plain prompt)
    std::optional<analysis::HeadPick> m_firstHead; ///< the capture's first screen's head
    std::optional<analysis::HeadState> m_headState;
    QString m_lastError;
};

} // namespace sparqlab::app
