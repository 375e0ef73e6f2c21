#include "main_window.h"
#include "app/gui/worker_pool.h"
#include "attention/method_spec.h"

#include "analysis/induction.h"
#include "attention/runtime_info.h"
#include "capture/model.h"
#include "capture/tokenizer.h"
#include "sparqlab/version.h"
#include "widgets/compare_view.h"
#include "widgets/controls_panel.h"
#include "widgets/head_view.h"
#include "widgets/overview_view.h"
#include "widgets/panels.h"
#include "widgets/tradeoffs_view.h"
#include "widgets/transfer_panel.h"

#include <algorithm>

#include <QAction>
#include <QApplication>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QMenuBar>
#include <QPointer>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QSlider>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

namespace sparqlab::app {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_model(new widgets::ModelPanel), m_prompt(new widgets::PromptPanel),
      m_head(new widgets::HeadView), m_controls(new widgets::ControlsPanel),
      m_transfer(new widgets::TransferPanel), m_stats(new widgets::StatsPanel),
      m_timing(new widgets::TimingPanel), m_tabs(new QTabWidget), m_stepBar(new QWidget),
      m_stepSlider(new QSlider(Qt::Horizontal)), m_stepLabel(new QLabel),
      m_redrawTimer(new QTimer(this)), m_headWork(new QFutureWatcher<HeadResult>(this)),
      m_teachBar(new QWidget), m_teachText(new QLabel),
      m_loader(new QFutureWatcher<LoadResult>(this)), m_work(new QFutureWatcher<WorkResult>(this)),
      m_timingWork(new QFutureWatcher<QString>(this)),
      m_exportWork(new QFutureWatcher<ExportResult>(this)), m_timingDelay(new QTimer(this)),
      m_cancel(std::make_shared<std::atomic<bool>>(false)) {
    connect(m_loader, &QFutureWatcher<LoadResult>::finished, this, &MainWindow::modelLoaded);
    connect(m_work, &QFutureWatcher<WorkResult>::finished, this, &MainWindow::workFinished);
    connect(m_headWork, &QFutureWatcher<HeadResult>::finished, this, &MainWindow::headFinished);
    connect(m_head, &widgets::HeadView::queryChosen, this,
            [this](qint64 position) { setQueryPosition(static_cast<int>(position)); });
    connect(m_timingWork, &QFutureWatcher<QString>::finished, this, &MainWindow::timingFinished);
    connect(m_exportWork, &QFutureWatcher<ExportResult>::finished, this,
            &MainWindow::exportFinished);
    setWindowTitle(QStringLiteral(SPARQLAB_NAME));
    setObjectName(QStringLiteral("mainWindow"));
    m_tabs->setObjectName(QStringLiteral("viewTabs"));

    // Teaching mode: a bar above the views with the step's sentence.
    m_teachBar->setObjectName(QStringLiteral("teachingBar"));
    m_teachText->setObjectName(QStringLiteral("teachingText"));
    m_teachText->setWordWrap(true);
    QFont big = m_teachText->font();
    big.setPointSizeF(big.pointSizeF() * 1.25);
    m_teachText->setFont(big);
    auto* back = m_teachBack = new QPushButton(tr("◀ Back"));
    auto* next = m_teachNext = new QPushButton(tr("Next ▶"));
    back->setObjectName(QStringLiteral("teachBack"));
    next->setObjectName(QStringLiteral("teachNext"));
    auto* done = new QPushButton(tr("Done"));
    auto* tb = new QHBoxLayout(m_teachBar);
    tb->addWidget(m_teachText, 1);
    tb->addWidget(back);
    tb->addWidget(next);
    tb->addWidget(done);
    m_teachBar->setStyleSheet(QStringLiteral("background: #fff5e6;"));
    m_teachBar->setVisible(false);
    connect(back, &QPushButton::clicked, this,
            [this] { setTeachingStep(std::max(1, m_teachStep - 1)); });
    connect(next, &QPushButton::clicked, this,
            [this] { setTeachingStep(std::min(4, m_teachStep + 1)); });
    connect(done, &QPushButton::clicked, this, [this] { setTeachingStep(0); });

    buildViews();
    // The query shown: a slider over the positions whose query is held (the prompt's and the
    // generated ones: decode steps), or a click on a token of the head view's strip.
    m_stepBar->setObjectName(QStringLiteral("stepBar"));
    m_stepSlider->setObjectName(QStringLiteral("stepSlider"));
    m_stepLabel->setObjectName(QStringLiteral("stepLabel"));
    m_stepLabel->setTextFormat(Qt::PlainText); // token texts as they are ("<", "&")
    auto* sb = new QHBoxLayout(m_stepBar);
    sb->setContentsMargins(6, 2, 6, 2);
    auto* queryLabel = new QLabel(tr("Query"));
    queryLabel->setToolTip(tr("The position whose query the views show: drag, or click a token "
                              "in the head view's token strip"));
    sb->addWidget(queryLabel);
    sb->addWidget(m_stepSlider, 1);
    sb->addWidget(m_stepLabel, 2);
    m_stepBar->setVisible(false);
    connect(m_stepSlider, &QSlider::valueChanged, this, [this](int) {
        updateStepBar();
        scheduleRedraw();
    });
    m_redrawTimer->setSingleShot(true);
    m_redrawTimer->setInterval(0);
    connect(m_redrawTimer, &QTimer::timeout, this, &MainWindow::redraw);
    auto* center = new QWidget;
    auto* cl = new QVBoxLayout(center);
    cl->setContentsMargins(0, 0, 0, 0);
    cl->addWidget(m_teachBar);
    cl->addWidget(m_stepBar);
    cl->addWidget(m_tabs, 1);

    auto* left = new QSplitter(Qt::Vertical);
    left->addWidget(m_model);
    left->addWidget(m_prompt);
    left->setStretchFactor(1, 1);

    auto* right = new QSplitter(Qt::Vertical);
    right->addWidget(m_controls);
    right->addWidget(m_transfer);
    right->addWidget(m_timing);
    right->addWidget(m_stats);
    right->setStretchFactor(0, 0);
    right->setStretchFactor(3, 1);
    right->setSizes({300, 130, 130, 260});

    auto* main = new QSplitter(Qt::Horizontal);
    main->addWidget(left);
    main->addWidget(center);
    main->addWidget(right);
    main->setStretchFactor(0, 2);
    main->setStretchFactor(1, 6);
    main->setStretchFactor(2, 2);
    main->setSizes({260, 760, 300});
    setCentralWidget(main);

    connect(m_prompt, &widgets::PromptPanel::runRequested, this,
            [this] { runPrompt(m_prompt->prompt()); });
    connect(m_prompt, &widgets::PromptPanel::cancelRequested, this, &MainWindow::cancelWork);
    connect(m_prompt, &widgets::PromptPanel::chatToggled, this, [this] { clearError(); });
    connect(m_prompt, &widgets::PromptPanel::generateRequested, this, &MainWindow::generate);
    connect(m_controls, &widgets::ControlsPanel::changed, this, &MainWindow::scheduleRedraw);
    m_timingDelay->setSingleShot(true);
    m_timingDelay->setInterval(400);
    connect(m_timingDelay, &QTimer::timeout, this, &MainWindow::measureTiming);

    QSettings settings;
    m_controls->setR(settings.value(QStringLiteral("lab/r"), 16).toInt());
    m_controls->setK(settings.value(QStringLiteral("lab/k"), 64).toInt());

    buildMenus();
    const std::string warning = attention::slowBlasWarning();
    statusBar()->showMessage(
        QString::fromStdString(warning.empty() ? attention::runtimeSummary() : warning));
}

MainWindow::~MainWindow() {
    m_cancel->store(true);
    if (m_rememberSettings) { // the user's choice, not a value clamped to a short prompt
        QSettings settings;
        settings.setValue(QStringLiteral("lab/r"), m_controls->chosenR());
        settings.setValue(QStringLiteral("lab/k"), m_controls->chosenK());
    }
    // Workers hold shared pointers to what they use; waiting keeps exit orderly (the views
    // wait for their own).
    m_work->waitForFinished();
    m_headWork->waitForFinished();
    m_timingWork->waitForFinished();
    m_exportWork->waitForFinished();
    m_loader->waitForFinished();
    for (View& v : m_views)
        delete v.view;
    m_views.clear();
}

void MainWindow::buildViews() {
    // One tab per view of the table (lab_view.h, app/gui/views/), in its order.
    for (const ViewSpec* spec : viewSpecs()) {
        LabView* view = spec->create(*this, this);
        m_views.push_back({spec, view});
        view->widget()->setProperty("viewName", QString::fromUtf8(spec->name));
        m_tabs->addTab(view->widget(), tr(spec->label));
    }
    connect(m_tabs, &QTabWidget::currentChanged, this, [this](int) {
        if (LabView* v = currentView())
            v->refresh();
    });
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* open = file->addAction(tr("Open &Model…"), this, &MainWindow::openModelDialog);
    open->setShortcut(QKeySequence::Open);
    file->addAction(tr("Open the &Demo Model"), this,
                    [this] { openModel(QStringLiteral("demo")); });
    QMenu* hub = file->addMenu(tr("Open from the Hugging Face &Cache"));
    connect(hub, &QMenu::aboutToShow, this, [this, hub] {
        hub->clear();
        const std::vector<std::string> ids = capture::cachedHubModels();
        for (const std::string& id : ids) {
            const QString spec = QString::fromStdString(id);
            hub->addAction(spec, this, [this, spec] { openModel(spec); });
        }
        if (ids.empty())
            hub->addAction(tr("(no models in ~/.cache/huggingface/hub)"))->setEnabled(false);
    });
    QMenu* recent = file->addMenu(tr("Open &Recent"));
    connect(recent, &QMenu::aboutToShow, this, [this, recent] {
        recent->clear();
        const QStringList list = QSettings().value(QStringLiteral("recentModels")).toStringList();
        for (const QString& spec : list)
            recent->addAction(spec, this, [this, spec] { openModel(spec); });
        if (list.isEmpty())
            recent->addAction(tr("(none)"))->setEnabled(false);
    });
    file->addSeparator();
    QAction* openSession =
        file->addAction(tr("Open &Session…"), this, &MainWindow::openSessionDialog);
    openSession->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    QAction* saveSession =
        file->addAction(tr("&Save Session…"), this, &MainWindow::saveSessionDialog);
    saveSession->setShortcut(QKeySequence::Save);
    file->addSeparator();
    file->addAction(tr("Load &Calibration (Loki Basis, Double Sparsity Channels)…"), this, [this] {
        const QString path =
            QFileDialog::getOpenFileName(this, tr("Load a Calibration (sparqlab-cli calibrate)"),
                                         QString(), tr("Calibration (*.h5);;All files (*)"));
        if (!path.isEmpty())
            loadCalibration(path);
    });
    file->addAction(tr("Calibrate on the Prompt &Itself"), this, [this] {
        for (const attention::MethodSpec* spec : attention::methodSpecs())
            if (spec->calibrator)
                m_controls->setCalibration(spec->info.id, nullptr);
        statusBar()->showMessage(tr("Loki and Double Sparsity calibrate on the prompt itself"),
                                 5000);
    });
    file->addAction(tr("Export &Capture (HDF5)…"), this, &MainWindow::exportCapture);
    file->addAction(tr("Export &Plots (PNG/SVG/PDF)…"), this, &MainWindow::exportPlots);
    file->addAction(tr("Export the Paper's &Figures…"), this, &MainWindow::exportFigureSet);
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->setObjectName(QStringLiteral("viewMenu"));
    for (const ViewSpec* spec : viewSpecs())
        if (spec->menu) {
            const QString name = QString::fromUtf8(spec->name);
            view->addAction(tr(spec->menu), this, [this, name] { showView(name); });
        }
    QAction* teach = view->addAction(tr("&Teaching Mode"), this,
                                     [this] { setTeachingStep(m_teachStep ? 0 : 1); });
    teach->setShortcut(QKeySequence(Qt::Key_F5));
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About SparQ Lab"), this, &MainWindow::showAbout);
}

void MainWindow::openModelDialog() {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Open a Hugging Face model folder"));
    if (!dir.isEmpty())
        openModel(dir);
}

bool MainWindow::isLoading() const {
    return m_loading; // until modelLoaded() has run, not just until the worker returned
}

bool MainWindow::isBusy() const {
    return m_busy;
}

int64_t MainWindow::capturedPositions() const {
    return m_capture ? m_capture->positions() : 0;
}

bool MainWindow::isTimingPending() const {
    // Until timingFinished() has shown the result (the watcher stops running before its
    // finished signal is delivered).
    return m_timingDelay->isActive() || m_timingMeasuring;
}

void MainWindow::openModel(const QString& spec) {
    if (m_loader->isRunning()) {
        statusBar()->showMessage(tr("Still opening the previous model"), 3000);
        return;
    }
    m_loading = true;
    m_model->showLoading(spec);
    m_prompt->setRunEnabled(false);
    statusBar()->showMessage(tr("Opening %1…").arg(spec));
    m_loader->setFuture(QtConcurrent::run(workerPool(), [spec]() {
        LoadResult r;
        r.spec = spec;
        try {
            r.model = capture::Model::open(spec.toStdString());
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void MainWindow::modelLoaded() {
    m_loading = false;
    const LoadResult r = m_loader->result();
    if (!r.model) {
        m_model->showError(r.error);
        m_prompt->setRunEnabled(static_cast<bool>(m_current));
        showError(r.error);
        return;
    }
    m_current = r.model;
    m_spec = r.spec;
    m_capture.reset();
    const capture::ModelConfig& c = m_current->config();
    const at::ScalarType compute = m_current->computeDtype();
    const double bytes = compute == at::kFloat ? 4.0 : 2.0;
    const double mb = static_cast<double>(c.parameterCount()) * bytes / (1 << 20);
    const QString computeName = compute == at::kFloat      ? QStringLiteral("float32")
                                : compute == at::kBFloat16 ? QStringLiteral("bfloat16")
                                                           : QStringLiteral("float16");
    const QString arch = QString::fromStdString(c.architectureName);
    const QString name = r.spec == QLatin1String("demo") ? tr("Demo model (%1)").arg(arch) : arch;
    QList<QPair<QString, QString>> rows{
        {tr("Layers"), QString::number(c.nLayers)},
        {tr("Query heads"), QString::number(c.nHeads)},
        {tr("KV heads"), QString::number(c.nKvHeads)},
        {tr("Head dimension"), QString::number(c.headDim)},
        {tr("Context"), QString::number(c.maxPositions)},
        {tr("Parameters"), QLocale().toString(static_cast<qlonglong>(c.parameterCount()))},
        {tr("Weights"), tr("%1, computed in %2")
                            .arg(QString::fromStdString(m_current->weightsDtype()), computeName)},
        {tr("Memory"), tr("%1 MB").arg(mb, 0, 'f', 1)}};
    // Each layer's window and soft-cap, the scale: what attend, stats and the lab apply.
    for (const auto& [label, value] : capture::attentionModifierSummary(c))
        rows.append({QString::fromStdString(label), QString::fromStdString(value)});
    rows.append({tr("Tokenizer"), m_current->hasTokenizer() ? tr("yes") : tr("none (ids only)")});
    m_model->showModel(name, rows);
    m_prompt->setRunEnabled(m_current->hasTokenizer());
    for (View& v : m_views)
        v.view->refresh(); // (the trade-offs view can run now)
    if (m_prompt->prompt().isEmpty())
        m_prompt->setPrompt(widgets::PromptPanel::defaultPrompt());
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentModels")).toStringList();
    recent.removeAll(r.spec);
    recent.prepend(r.spec);
    settings.setValue(QStringLiteral("recentModels"), recent.mid(0, 8));
    statusBar()->showMessage(tr("Opened %1").arg(QString::fromStdString(m_current->folder())),
                             5000);
}

void MainWindow::startWork(std::function<WorkResult(const attention::Job& job)> work) {
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_busy = true;
    m_prompt->setBusy(true);
    const auto cancel = m_cancel;
    m_work->setFuture(QtConcurrent::run(workerPool(), [work = std::move(work), cancel]() {
        attention::Job job;
        job.cancel = cancel.get();
        try {
            return work(job);
        } catch (const attention::Cancelled&) {
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

bool MainWindow::runModelWork(std::function<void(const attention::Job& job)> work,
                              std::function<void(const QString& error, bool cancelled)> done) {
    if (!m_current || m_work->isRunning()) {
        statusBar()->showMessage(
            m_current ? tr("Wait for the running work to end") : tr("Open a model first"), 3000);
        return false;
    }
    m_workDone = std::move(done);
    startWork([work = std::move(work)](const attention::Job& job) {
        work(job);
        return WorkResult{};
    });
    return true;
}

namespace {

/// The prompt's ids: the text as it is, or its turns through the model's chat template (ids
/// as apply_chat_template makes them), with the chat kept in `w` for the view and the session.
std::vector<int64_t> promptIds(const capture::Model& model, const PromptInput& in, WorkResult& w) {
    if (!in.chat)
        return model.tokenizer().encode(in.text, true);
    const capture::ChatTemplate t = capture::requireChatTemplate(model.folder());
    w.chat.on = true;
    w.chat.system = in.system;
    w.chat.turns = capture::parseTurns(in.text);
    w.chat.addGenerationPrompt = in.addGenerationPrompt;
    std::vector<capture::ChatMessage> messages;
    if (!in.system.empty())
        messages.push_back({"system", in.system});
    messages.insert(messages.end(), w.chat.turns.begin(), w.chat.turns.end());
    w.rendering = t.render(capture::toJson(messages), in.addGenerationPrompt);
    w.chat.contentTokens = capture::contentTokenRanges(model.tokenizer(), w.rendering);
    return capture::chatIds(model.tokenizer(), w.rendering);
}

} // namespace

PromptInput MainWindow::promptInput() const {
    PromptInput in;
    in.text = m_prompt->prompt().toStdString();
    in.chat = m_prompt->chatMode();
    in.system = m_prompt->systemPrompt().toStdString();
    in.addGenerationPrompt = m_prompt->addGenerationPrompt();
    return in;
}

std::vector<bool> MainWindow::templateTokens() const {
    if (!m_chat.on || !m_shown)
        return {};
    const int64_t S = m_shown->positions(), P = m_shown->promptLength();
    std::vector<bool> t(static_cast<size_t>(S), false);
    std::fill(t.begin(), t.begin() + P, true);
    for (const auto& [b, e] : m_chat.contentTokens)
        for (int64_t i = std::max<int64_t>(b, 0); i < std::min(e, P); ++i)
            t[static_cast<size_t>(i)] = false;
    return t;
}

void MainWindow::runPrompt(const QString& text) {
    if (m_work->isRunning()) {
        statusBar()->showMessage(tr("The previous run is still stopping; try again in a moment"),
                                 3000);
        return;
    }
    if (!m_current) {
        showError(tr("error: no model is open"));
        return;
    }
    if (text.trimmed().isEmpty()) {
        showError(tr("error: the prompt is empty"));
        return;
    }
    statusBar()->showMessage(tr("Running the model…"));
    const auto model = m_current;
    PromptInput input = promptInput();
    input.text = text.toStdString();
    const bool retrieval = m_teachStep == 4; // find the retrieval head as well
    const attention::AttentionConfig base = m_controls->config();
    QPointer<QStatusBar> bar = statusBar();
    startWork([model, input, retrieval, base, bar](const attention::Job& cancel) {
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
        const capture::ModelConfig& mc = model->config();
        const int64_t keep = analysis::labHistory(static_cast<int64_t>(ids.size()), mc.nLayers,
                                                  mc.nHeads, mc.headDim);
        // Progress in the status bar (a 16k-token prompt takes a minute or more).
        int lastPercent = -1;
        attention::Job job = cancel;
        job.progress = [bar, &lastPercent, n = ids.size()](int64_t done, int64_t total,
                                                           const std::string&) {
            const int percent = static_cast<int>(100 * done / std::max<int64_t>(total, 1));
            if (percent == lastPercent)
                return;
            lastPercent = percent;
            QMetaObject::invokeMethod(
                bar,
                [bar, percent, n]() {
                    if (bar)
                        bar->showMessage(QObject::tr("Running the model over %1 tokens… %2%")
                                             .arg(n)
                                             .arg(percent));
                },
                Qt::QueuedConnection);
        };
        const capture::CaptureExample e = model->capture(ids, false, -1, job, keep);
        w.capture = analysis::LabCapture::from(e, model->captureInfo());
        if (w.retrievalLayer >= 0) { // teaching page 4: the r it shows, found here, not on screen
            attention::AttentionConfig c = base;
            c.k = 16;
            const auto [r, h] =
                analysis::smallestRHolding(*w.capture, w.retrievalLayer, w.retrievalHead, c, 0.5);
            w.retrievalR = static_cast<int>(r);
            w.retrievalMass = h.chosenMass;
        }
        return w;
    });
}

void MainWindow::generate(int tokens) {
    if (!m_current || m_work->isRunning())
        return;
    if (m_prompt->prompt().trimmed().isEmpty()) {
        showError(tr("error: the prompt is empty"));
        return;
    }
    const attention::AttentionConfig cfg = m_controls->config();
    statusBar()->showMessage(tr("Generating %1 tokens with %2…")
                                 .arg(tokens)
                                 .arg(QString::fromStdString(attention::methodName(cfg.method))));
    const auto model = m_current;
    const PromptInput input = promptInput();
    startWork([model, input, tokens, cfg](const attention::Job& job) {
        WorkResult w;
        const std::vector<int64_t> ids = promptIds(*model, input, w);
        // Healed as sparqlab-cli generate heals a text prompt (a cut last word); a chat prompt
        // ends in the template's generation prompt, nothing to heal.
        const capture::Generation g = input.chat
                                          ? model->generate(ids, tokens, cfg, true, job)
                                          : model->generateHealed(ids, tokens, cfg, true, job);
        w.text = QString::fromStdString(model->continuationText(g));
        // The decode steps: one dense capture of the prompt and the generated tokens, keeping
        // the queries of the generated positions (causal: the query at step t is that of a
        // capture of the prompt and the first t generated tokens).
        std::vector<int64_t> all = g.promptIds;
        all.insert(all.end(), g.newIds.begin(), g.newIds.end());
        if (!g.newIds.empty()) {
            const capture::ModelConfig& mc = model->config();
            const int64_t S = static_cast<int64_t>(all.size());
            const int64_t keep =
                std::max<int64_t>(analysis::labHistory(S, mc.nLayers, mc.nHeads, mc.headDim),
                                  static_cast<int64_t>(g.newIds.size()) + 1);
            const capture::CaptureExample e = model->capture(all, false, -1, job, keep);
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

void MainWindow::cancelWork() {
    m_cancel->store(true);
    // Control returns now: the worker's result is dropped when it arrives.
    m_prompt->setBusy(false);
    statusBar()->showMessage(tr("Cancelled"), 3000);
}

void MainWindow::workFinished() {
    m_busy = false;
    const WorkResult w = m_work->result();
    m_prompt->setBusy(false);
    if (m_workDone) { // a view's work (runModelWork)
        const auto done = std::move(m_workDone);
        m_workDone = nullptr;
        done(w.error, w.cancelled || m_cancel->load());
        return;
    }
    if (w.cancelled || m_cancel->load())
        return;
    if (!w.error.isEmpty()) {
        showError(w.error);
        return;
    }
    if (w.session) {
        restoreSession(*w.session, w.sessionPath);
        return;
    }
    if (!w.text.isEmpty())
        m_prompt->showOutput(tr("<b>Generated:</b> %1").arg(w.text.toHtmlEscaped()));
    else if (w.capture) // a new Run: what an earlier Generate wrote is not of this prompt
        m_prompt->showOutput(QString());
    if (!w.capture) {
        statusBar()->showMessage(tr("Generated"), 3000);
        return;
    }
    m_capture = w.capture;
    m_generated = w.text;
    m_chat = w.chat;
    if (w.chat.on)
        m_prompt->showRendered(w.rendering.text, w.rendering.content);
    m_lastError.clear();
    m_keepTiming = false;
    m_controls->setLimits(
        static_cast<int>(m_capture->layers()), static_cast<int>(m_capture->heads()),
        static_cast<int>(m_capture->headDim()), static_cast<int>(m_capture->positions()));
    {
        const QSignalBlocker block(m_stepSlider);
        m_stepSlider->setRange(static_cast<int>(m_capture->firstHeldQuery()),
                               static_cast<int>(m_capture->positions() - 1));
        m_stepSlider->setValue(m_stepSlider->maximum()); // the last position
    }
    updateStepBar();
    if (w.retrievalLayer >= 0 && m_teachStep == 4)
        showRetrieval(w);
    statusBar()->showMessage(tr("Captured %1 positions").arg(m_capture->positions()), 3000);
    redraw();
}

void MainWindow::scheduleRedraw() {
    m_keepTiming = false;
    m_redrawTimer->start(); // many changes in one turn of the event loop: one redraw
}

void MainWindow::flushRedraw() {
    if (m_redrawTimer->isActive()) {
        m_redrawTimer->stop();
        redraw();
    }
    while (m_headPending) { // the head state the last change asked for, drawn now
        m_headWork->waitForFinished();
        headFinished();
    }
    if (LabView* v = currentView())
        v->flush();
}

int MainWindow::decodeStep() const {
    if (!m_capture || m_capture->steps() == 0)
        return -1;
    const int t = m_stepSlider->value() - static_cast<int>(m_capture->promptPositions - 1);
    return t >= 0 ? t : -1; // a prompt position's query is not a decode step
}

void MainWindow::setDecodeStep(int step) {
    if (m_capture)
        m_stepSlider->setValue(static_cast<int>(m_capture->promptPositions - 1) + step);
    flushRedraw();
}

int MainWindow::queryPosition() const {
    return m_capture ? m_stepSlider->value() : -1;
}

void MainWindow::setQueryPosition(int position) {
    if (!m_capture)
        return;
    if (position < m_stepSlider->minimum() || position > m_stepSlider->maximum()) {
        statusBar()->showMessage(
            tr("The query of position %1 is not held (this capture keeps positions %2–%3)")
                .arg(position)
                .arg(m_stepSlider->minimum())
                .arg(m_stepSlider->maximum()),
            5000);
        return;
    }
    m_stepSlider->setValue(position);
}

void MainWindow::updateStepBar() {
    const int64_t S = m_capture ? m_capture->positions() : 0;
    m_stepBar->setVisible(S > 0 && S - m_capture->firstHeldQuery() > 1);
    if (!m_stepBar->isVisible())
        return;
    const int64_t pos = m_stepSlider->value();
    auto token = [&](int64_t i) { // line breaks and tabs shown, not laid out
        QString t = static_cast<size_t>(i) < m_capture->tokens.size()
                        ? QString::fromStdString(m_capture->tokens[static_cast<size_t>(i)])
                        : QString();
        return t.replace(QLatin1Char('\n'), QStringLiteral("⏎"))
            .replace(QLatin1Char('\t'), QStringLiteral("⇥"));
    };
    const int t = decodeStep();
    if (t >= 0) {
        const QString chose = pos + 1 < S ? tr("chose “%1”").arg(token(pos + 1))
                                          : tr("(the last generated token's query)");
        QString text = tr("decode step %1 of %2: the query of position %3 “%4”, which %5")
                           .arg(t)
                           .arg(m_capture->steps())
                           .arg(pos)
                           .arg(token(pos))
                           .arg(chose);
        // Token healing: say which steps re-spelled the prompt's last word, and why.
        const int64_t healed = m_capture->healedSteps;
        if (healed > 0) {
            const QString word = QString::fromStdString(m_capture->healedText)
                                     .replace(QLatin1Char('\n'), QStringLiteral("⏎"));
            text += t < healed
                        ? tr(" — token healing: the prompt's last word “%1” was taken off and "
                             "is spelled again here, as the model would write it inside a "
                             "longer text")
                              .arg(word)
                        : tr(" (%1 spelled again the prompt's last word “%2”: token healing)")
                              .arg(healed == 1 ? tr("step 0") : tr("steps 0–%1").arg(healed - 1))
                              .arg(word);
        }
        m_stepLabel->setText(text);
        return;
    }
    m_stepLabel->setText(pos == S - 1 ? tr("position %1 “%2”: the prompt's last query (the next "
                                           "token's decode step)")
                                            .arg(pos)
                                            .arg(token(pos))
                                      : tr("position %1 “%2”: its query over keys 0–%1, as a "
                                           "capture of the prompt up to it")
                                            .arg(pos)
                                            .arg(token(pos)));
}

void MainWindow::redraw() {
    m_redrawTimer->stop();
    if (!m_capture)
        return;
    if (m_headPending) { // one at a time; the latest settings follow it
        m_headAgain = true;
        return;
    }
    m_headAgain = false;
    m_headPending = true;
    // The decode step's view of the capture, the head state (calibrating Loki and Double
    // Sparsity on the prompt on first use): all in the worker.
    const attention::AttentionConfig c = fittedConfig();
    const int64_t pos = queryPosition();
    const int layer = m_controls->layer(), head = m_controls->head();
    const auto cap = m_capture;
    m_headWork->setFuture(QtConcurrent::run(workerPool(), [cap, c, pos, layer, head]() {
        HeadResult r;
        try {
            r.shown = pos >= 0 && pos < cap->positions() - 1 ? cap->atPosition(pos) : cap;
            r.state = analysis::headState(*r.shown, layer, head, c);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void MainWindow::headFinished() {
    // Called by the watcher, or by flushRedraw() after waiting.
    if (!m_headPending || m_headWork->isRunning())
        return;
    m_headPending = false;
    const HeadResult r = m_headWork->result();
    if (r.shown)
        m_shown = r.shown;
    if (!r.error.isEmpty()) {
        showError(r.error);
    } else {
        QStringList fitted;
        const attention::AttentionConfig c = fittedConfig(&fitted);
        m_headState = r.state;
        m_headShown = true;
        m_head->setTemplateTokens(templateTokens());
        m_head->showHead(r.state, m_capture->tokens); // the strip: the later tokens to click
        updateStats(r.state);
        const capture::CaptureInfo& info = m_shown->info;
        m_transfer->showTransfer(c, m_shown->positions(), m_shown->headDim(),
                                 static_cast<double>(r.state.count), info.valueDim(),
                                 info.kvLoraRank > 0 ? info.kvLoraRank + info.qkRopeHeadDim : 0,
                                 info.nKvHeads, fitted);
        m_lastError.clear();
        // The views draw what is shown; the rest when their tab is opened.
        LabView* shown = currentView();
        for (View& v : m_views)
            if (v.view != shown)
                v.view->invalidate();
        if (shown) {
            shown->invalidate();
            shown->refresh();
        }
    }
    if (!m_keepTiming)
        m_timingDelay->start();
    if (m_headAgain)
        redraw();
}

void MainWindow::updateStats(const analysis::HeadState& h) {
    QTableWidget* t = m_stats->table();
    // α and τ are rows of the methods that have them (the method table says which).
    const attention::Method m = m_controls->config().method;
    QList<QPair<QString, QString>> rows;
    if (attention::takes(m, attention::Param::MeanValue))
        rows.push_back({tr("α (Eq. 10 mix)"), QString::number(h.alpha, 'f', 4)});
    rows += QList<QPair<QString, QString>>{
        {tr("true top-k mass"), QString::number(h.trueMass, 'f', 4)},
        {tr("mass of chosen"), QString::number(h.chosenMass, 'f', 4)},
        {tr("recall@k (true top-|chosen|)"), QString::number(h.topkAgreement, 'f', 4)},
        {tr("positions attended"), QString::number(h.count)},
        {tr("k for 90% of the mass"), QString::number(h.kMass90)},
        {tr("output error"), QString::number(h.outputError, 'g', 4)},
    };
    if (attention::takes(m, attention::Param::Tau))
        rows.push_back({tr("temperature τ"), QString::number(h.tau, 'f', 3)});
    if (h.sinkShare > 0) // gpt-oss: attention to nothing, in both masses above
        rows.push_back({tr("sink's share"), QString::number(h.sinkShare, 'f', 4)});
    if (!h.layerNote.empty())
        rows.push_back({tr("this layer"), QString::fromStdString(h.layerNote)});
    t->setRowCount(static_cast<int>(rows.size()));
    for (int i = 0; i < rows.size(); ++i) {
        t->setItem(i, 0, new QTableWidgetItem(rows[i].first));
        t->setItem(i, 1, new QTableWidgetItem(rows[i].second));
    }
}

void MainWindow::showError(const QString& message) {
    m_lastError = message;
    m_head->showMessage(message);
    statusBar()->showMessage(message, 8000);
}

void MainWindow::clearError() {
    if (m_lastError.isEmpty())
        return;
    m_lastError.clear();
    statusBar()->clearMessage();
    if (m_capture)
        redraw();
    else
        m_head->showMessage(QString());
}

LabView* MainWindow::currentView() const {
    const int i = m_tabs->currentIndex();
    return i >= 0 && i < static_cast<int>(m_views.size()) ? m_views[static_cast<size_t>(i)].view
                                                          : nullptr;
}

LabView* MainWindow::viewNamed(const char* name) const {
    for (const View& v : m_views)
        if (std::string(v.spec->name) == name)
            return v.view;
    return nullptr;
}

bool MainWindow::showView(const QString& name) {
    for (size_t i = 0; i < m_views.size(); ++i)
        if (name == QLatin1String(m_views[i].spec->name)) {
            m_tabs->setCurrentIndex(static_cast<int>(i));
            return true;
        }
    return false;
}

QString MainWindow::currentViewName() const {
    const int i = m_tabs->currentIndex();
    return i >= 0 ? QString::fromUtf8(m_views[static_cast<size_t>(i)].spec->name) : QString();
}

widgets::CompareView* MainWindow::compareView() const {
    return qobject_cast<widgets::CompareView*>(viewNamed("compare")->widget());
}
widgets::TimingCurveView* MainWindow::timingCurveView() const {
    return qobject_cast<widgets::TimingCurveView*>(viewNamed("timing")->widget());
}
widgets::TradeoffsView* MainWindow::tradeoffsView() const {
    return qobject_cast<widgets::TradeoffsView*>(viewNamed("tradeoffs")->widget());
}
widgets::OverviewView* MainWindow::overviewView() const {
    return qobject_cast<widgets::OverviewView*>(viewNamed("overview")->widget());
}

// --- LabHost -----------------------------------------------------------------------------------

attention::AttentionConfig MainWindow::labConfig() const {
    return fittedConfig();
}

attention::AttentionConfig MainWindow::fittedConfig(QStringList* notes) const {
    attention::AttentionConfig c = m_controls->config();
    if (m_capture)
        for (const std::string& n :
             attention::fitDefaults(c, m_capture->positions(),
                                    {m_capture->headDim(), m_capture->layers(), m_capture->heads(),
                                     m_capture->kvHeads()}))
            if (notes)
                notes->append(QString::fromStdString(n));
    return c;
}
int MainWindow::labLayer() const {
    return m_controls->layer();
}
int MainWindow::labHead() const {
    return m_controls->head();
}
const analysis::HeadState* MainWindow::headState() const {
    return m_headShown ? &m_headState : nullptr;
}
void MainWindow::selectHead(int layer, int head) {
    m_controls->setLayerHead(layer, head);
}
void MainWindow::showStatus(const QString& message, int milliseconds) {
    statusBar()->showMessage(message, milliseconds);
}
QWidget* MainWindow::headWidget() {
    return m_head;
}

} // namespace sparqlab::app
