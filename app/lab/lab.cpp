// The lab's state and the model's worker (lab.h).

#include "app/lab/lab.h"

#include "analysis/induction.h"
#include "app/lab/decode_timing.h"
#include "app/lab/lab_export.h"
#include "app/lab/worker_pool.h"
#include "attention/runtime_info.h"
#include "capture/calibration_file.h"
#include "model/model.h"
#include "text/tokenizer.h"

#include <QPointer>
#include <QSettings>
#include <QtConcurrent/QtConcurrent>

#include <algorithm>

namespace sparqlab::app {

namespace {

/// The prompt's ids: the text as it is, or its turns through the model's chat template (ids
/// as apply_chat_template makes them), with the chat kept in `w` for the view and the session.
std::vector<int64_t> promptIds(const model::Model& model, const PromptInput& in, WorkResult& w) {
    if (!in.chat)
        return model.tokenizer().encode(in.text, true);
    const text::ChatTemplate t = text::requireChatTemplate(model.folder());
    w.chat.on = true;
    w.chat.system = in.system;
    w.chat.turns = text::parseTurns(in.text);
    w.chat.addGenerationPrompt = in.addGenerationPrompt;
    std::vector<text::ChatMessage> messages;
    if (!in.system.empty())
        messages.push_back({"system", in.system});
    messages.insert(messages.end(), w.chat.turns.begin(), w.chat.turns.end());
    w.rendering = t.render(text::toJson(messages), in.addGenerationPrompt);
    w.chat.contentTokens = text::contentTokenRanges(model.tokenizer(), w.rendering);
    return text::chatIds(model.tokenizer(), w.rendering);
}

struct LoadedCalibration {
    std::shared_ptr<attention::Calibration> cal;
    capture::CalibrationInfo info;
    QString error;
};

} // namespace

Lab::Lab(QObject* parent)
    : QObject(parent), m_settings([] { return LabSettings{}; }),
      m_loader(new QFutureWatcher<LoadResult>(this)), m_work(new QFutureWatcher<WorkResult>(this)),
      m_timing(new DecodeTiming(*this)), m_export(new LabExport(*this)),
      m_cancel(std::make_shared<std::atomic<bool>>(false)) {
    connect(m_loader, &QFutureWatcher<LoadResult>::finished, this, &Lab::modelLoaded);
    connect(m_work, &QFutureWatcher<WorkResult>::finished, this, &Lab::workFinished);
}

Lab::~Lab() {
    m_cancel->store(true);
    // Workers hold shared pointers to what they use; waiting keeps exit orderly.
    m_work->waitForFinished();
    m_loader->waitForFinished();
    delete m_timing;
    delete m_export;
}

void Lab::openModel(const QString& spec) {
    if (m_loader->isRunning()) {
        showStatus(tr("Still opening the previous model"), 3000);
        return;
    }
    m_loading = true;
    Q_EMIT modelLoading(spec);
    showStatus(tr("Opening %1…").arg(spec));
    const QString device = m_device;
    m_loader->setFuture(QtConcurrent::run(workerPool(), [spec, device]() {
        LoadResult r;
        r.spec = spec;
        r.device = device;
        try {
            model::ModelOpenOptions o;
            o.device = attention::requireDevice(device.toStdString());
            r.model = model::Model::open(spec.toStdString(), o);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

QString Lab::setDevice(const QString& device) {
    try {
        attention::requireDevice(device.toStdString());
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
    if (device == m_device)
        return {};
    if (m_loader->isRunning())
        return tr("A model is still opening: choose the device again once it is open");
    m_device = device;
    Q_EMIT deviceChanged(device);
    if (m_model && !m_spec.isEmpty())
        openModel(m_spec);
    return {};
}

void Lab::modelLoaded() {
    m_loading = false;
    const LoadResult r = m_loader->result();
    if (!r.model) {
        // Reopening on another device failed: the open model stays, and so does its device.
        const QString kept =
            m_model && m_model->device().is_cuda() ? QStringLiteral("cuda") : QStringLiteral("cpu");
        if (m_model && r.device != kept) {
            m_device = kept;
            Q_EMIT deviceChanged(kept);
        }
        Q_EMIT modelOpened(r.error);
        fail(r.error);
        return;
    }
    m_model = r.model;
    m_spec = r.spec;
    m_capture.reset();
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentModels")).toStringList();
    recent.removeAll(r.spec);
    recent.prepend(r.spec);
    settings.setValue(QStringLiteral("recentModels"), recent.mid(0, 8));
    Q_EMIT modelOpened(QString());
    showStatus(m_model->device().is_cuda()
                   ? tr("Opened %1 on the GPU").arg(QString::fromStdString(m_model->folder()))
                   : tr("Opened %1").arg(QString::fromStdString(m_model->folder())),
               5000);
}

void Lab::startWork(std::function<WorkResult(const base::Job& job)> work) {
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_busy = true;
    Q_EMIT busyChanged(true);
    const auto cancel = m_cancel;
    m_work->setFuture(QtConcurrent::run(workerPool(), [work = std::move(work), cancel]() {
        base::Job job;
        job.cancel = cancel.get();
        try {
            return work(job);
        } catch (const base::Cancelled&) {
            WorkResult w;
            w.cancelled = true;
            return w;
        } catch (const std::exception& e) {
            WorkResult w;
            w.error = QString::fromUtf8(e.what());
            return w;
        }
    }));
}

bool Lab::runModelWork(std::function<void(const base::Job& job)> work,
                       std::function<void(const QString& error, bool cancelled)> done) {
    if (!m_model || m_work->isRunning()) {
        showStatus(m_model ? tr("Wait for the running work to end") : tr("Open a model first"),
                   3000);
        return false;
    }
    m_workDone = std::move(done);
    startWork([work = std::move(work)](const base::Job& job) {
        work(job);
        return WorkResult{};
    });
    return true;
}

void Lab::runPrompt(const PromptInput& input, const attention::AttentionConfig& base,
                    bool retrieval, FirstScreen first) {
    if (m_work->isRunning()) {
        showStatus(tr("The previous run is still stopping; try again in a moment"), 3000);
        return;
    }
    if (!m_model) {
        fail(tr("error: no model is open"));
        return;
    }
    if (QString::fromStdString(input.text).trimmed().isEmpty()) {
        fail(tr("error: the prompt is empty"));
        return;
    }
    showStatus(tr("Running the model…"));
    const auto model = m_model;
    QPointer<Lab> self = this;
    startWork([model, input, retrieval, first, base, self](const base::Job& cancel) {
        WorkResult w;
        if (retrieval) { // the induction diagnostic (random tokens shown twice), same thread
            analysis::InductionOptions io;
            io.length = std::min<int64_t>(128, (model->config().maxPositions - 1) / 2);
            io.sequences = 2;
            const analysis::InductionReport r = analysis::inductionReport(*model->net(), io);
            w.retrievalLayer = static_cast<int>(r.bestLayer);
            w.retrievalHead = static_cast<int>(r.bestHead);
            w.retrievalScore = r.bestInduction;
        }
        const std::vector<int64_t> ids = promptIds(*model, input, w);
        if (static_cast<int64_t>(ids.size()) > model->config().maxPositions)
            throw std::runtime_error("the prompt has " + std::to_string(ids.size()) +
                                     " tokens, more than the model's context of " +
                                     std::to_string(model->config().maxPositions));
        // The queries of recent positions too (all when memory allows): SnapKV, TOVA and H2O
        // read them.
        const model::ModelConfig& mc = model->config();
        const int64_t keep = analysis::labHistory(static_cast<int64_t>(ids.size()), mc.nLayers,
                                                  mc.nHeads, mc.headDim);
        // Progress in the status bar (a 16k-token prompt takes a minute or more).
        int lastPercent = -1;
        base::Job job = cancel;
        job.progress = [self, &lastPercent, n = ids.size()](int64_t done, int64_t total,
                                                            const std::string&) {
            const int percent = static_cast<int>(100 * done / std::max<int64_t>(total, 1));
            if (percent == lastPercent)
                return;
            lastPercent = percent;
            QMetaObject::invokeMethod(
                self,
                [self, percent, n]() {
                    if (self)
                        self->showStatus(QObject::tr("Running the model over %1 tokens… %2%")
                                             .arg(n)
                                             .arg(percent));
                },
                Qt::QueuedConnection);
        };
        const model::CaptureExample e = model->capture(ids, false, -1, job, keep);
        w.capture = analysis::LabCapture::from(e, model->captureInfo());
        if (w.retrievalLayer >= 0) { // teaching page 4: the r it shows, found here, not on screen
            attention::AttentionConfig c = base;
            c.k = 16;
            const auto [r, h] =
                analysis::smallestRHolding(*w.capture, w.retrievalLayer, w.retrievalHead, c, 0.5);
            w.retrievalR = static_cast<int>(r);
            w.retrievalMass = h.chosenMass;
        }
        if (first != FirstScreen::No)
            w.firstHead = analysis::firstScreenHead(*w.capture,
                                                    first == FirstScreen::AtPromptK
                                                        ? analysis::promptK(w.capture->positions())
                                                        : base.k);
        return w;
    });
}

void Lab::generate(const PromptInput& input, int tokens, const attention::AttentionConfig& cfg) {
    if (!m_model || m_work->isRunning())
        return;
    if (QString::fromStdString(input.text).trimmed().isEmpty()) {
        fail(tr("error: the prompt is empty"));
        return;
    }
    showStatus(tr("Generating %1 tokens with %2…")
                   .arg(tokens)
                   .arg(QString::fromStdString(attention::methodName(cfg.method))));
    const auto model = m_model;
    startWork([model, input, tokens, cfg](const base::Job& job) {
        WorkResult w;
        const std::vector<int64_t> ids = promptIds(*model, input, w);
        // Healed as sparqlab-cli generate heals a text prompt (a cut last word); a chat prompt
        // ends in the template's generation prompt, nothing to heal.
        const model::Generation g = input.chat ? model->generate(ids, tokens, cfg, true, job)
                                               : model->generateHealed(ids, tokens, cfg, true, job);
        w.text = QString::fromStdString(model->continuationText(g));
        // The decode steps: one dense capture of the prompt and the generated tokens, keeping
        // the queries of the generated positions (causal: the query at step t is that of a
        // capture of the prompt and the first t generated tokens).
        std::vector<int64_t> all = g.promptIds;
        all.insert(all.end(), g.newIds.begin(), g.newIds.end());
        if (!g.newIds.empty()) {
            const model::ModelConfig& mc = model->config();
            const int64_t S = static_cast<int64_t>(all.size());
            const int64_t keep =
                std::max<int64_t>(analysis::labHistory(S, mc.nLayers, mc.nHeads, mc.headDim),
                                  static_cast<int64_t>(g.newIds.size()) + 1);
            const model::CaptureExample e = model->capture(all, false, -1, job, keep);
            w.capture = analysis::LabCapture::from(e, model->captureInfo());
            w.capture->promptPositions = static_cast<int64_t>(g.promptIds.size());
            if (g.healedTokens > 0) { // the steps that spelled the healed word again
                w.capture->healedSteps = g.healedTokens;
                w.capture->healedText = g.healed;
            }
        }
        return w;
    });
}

void Lab::openSession(const QString& path) {
    if (m_work->isRunning()) {
        showStatus(tr("Wait for the running work to end, then open the session"), 3000);
        return;
    }
    showStatus(tr("Opening %1…").arg(path));
    startWork([path](const base::Job&) {
        WorkResult w;
        w.sessionPath = path;
        w.session = std::make_shared<analysis::Session>(analysis::readSession(path.toStdString()));
        return w;
    });
}

void Lab::cancelWork() {
    m_cancel->store(true);
    // Control returns now: the worker's result is dropped when it arrives.
    Q_EMIT busyChanged(false);
    showStatus(tr("Cancelled"), 3000);
}

void Lab::workFinished() {
    m_busy = false;
    const WorkResult w = m_work->result();
    Q_EMIT busyChanged(false);
    if (m_workDone) { // a view's work (runModelWork)
        const auto done = std::move(m_workDone);
        m_workDone = nullptr;
        done(w.error, w.cancelled || m_cancel->load());
        return;
    }
    if (w.cancelled || m_cancel->load())
        return;
    if (!w.error.isEmpty()) {
        fail(w.error);
        return;
    }
    if (w.session) {
        Q_EMIT sessionOpened(*w.session, w.sessionPath);
        return;
    }
    Q_EMIT workDone(w);
}

void Lab::loadCalibration(const QString& path) {
    m_loadingCalibration = true;
    showStatus(tr("Reading %1…").arg(path));
    auto* watcher = new QFutureWatcher<LoadedCalibration>(this);
    connect(watcher, &QFutureWatcher<LoadedCalibration>::finished, this, [this, watcher, path] {
        watcher->deleteLater();
        m_loadingCalibration = false;
        const LoadedCalibration r = watcher->result();
        if (!r.error.isEmpty()) {
            fail(tr("error: %1").arg(r.error));
            return;
        }
        const capture::CalibrationInfo& i = r.info;
        if (m_capture && (i.nLayers != m_capture->layers() || i.headDim != m_capture->headDim() ||
                          (i.nHeads > 0 && i.nHeads != m_capture->heads()) ||
                          (i.nKvHeads > 0 && i.nKvHeads != m_capture->kvHeads()))) {
            fail(tr("error: %1: made for %2 layers, %3 query and %4 KV heads of %5 "
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
        Q_EMIT calibrationLoaded(r.cal);
        showStatus(tr("%1 uses %2 (File → Calibrate on the Prompt Itself to go back)")
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

void Lab::setCapture(std::shared_ptr<analysis::LabCapture> capture, const QString& generated,
                     const analysis::SessionChat& chat,
                     std::optional<analysis::HeadPick> firstHead) {
    m_capture = std::move(capture);
    m_generated = generated;
    m_chat = chat;
    m_firstHead = firstHead;
    m_lastError.clear();
    m_timing->release();
}

attention::AttentionConfig Lab::fittedConfig(QStringList* notes) const {
    attention::AttentionConfig c = m_settings().config;
    if (m_capture)
        for (const std::string& n :
             attention::fitDefaults(c, m_capture->positions(),
                                    {m_capture->headDim(), m_capture->layers(), m_capture->heads(),
                                     m_capture->kvHeads()}))
            if (notes)
                notes->append(QString::fromStdString(n));
    return c;
}

void Lab::setQueryPosition(int position) {
    if (!m_capture)
        return;
    const int first = static_cast<int>(m_capture->firstHeldQuery()),
              last = static_cast<int>(m_capture->positions() - 1);
    if (position < first || position > last) {
        showStatus(tr("The query of position %1 is not held (this capture keeps positions %2–%3)")
                       .arg(position)
                       .arg(first)
                       .arg(last),
                   5000);
        return;
    }
    Q_EMIT queryRequested(position);
}

void Lab::fail(const QString& message) {
    m_lastError = message;
    Q_EMIT errorChanged(message);
}

void Lab::clearError() {
    if (m_lastError.isEmpty())
        return;
    m_lastError.clear();
    Q_EMIT errorChanged(QString());
}

const analysis::HeadState* Lab::headState() const {
    return m_headState ? &*m_headState : nullptr;
}

void Lab::setHeadState(std::shared_ptr<const analysis::LabCapture> shown,
                       const analysis::HeadState* state, const QString& error) {
    if (shown)
        m_shown = std::move(shown);
    if (!error.isEmpty() || !state) {
        fail(error);
    } else {
        m_headState = *state;
        m_lastError.clear();
        Q_EMIT headStateChanged();
    }
    m_timing->schedule();
}

bool Lab::timingBusy() const {
    return m_timing->isMeasuring();
}
bool Lab::isTimingPending() const {
    return m_timing->isPending();
}
bool Lab::isExporting() const {
    return m_export->isExporting();
}
int Lab::lastExportCount() const {
    return m_export->count();
}

} // namespace sparqlab::app
