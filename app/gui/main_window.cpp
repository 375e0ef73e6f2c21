#include "main_window.h"

#include "analysis/induction.h"

#include "analysis/eval_run.h"
#include "analysis/figures.h"
#include "analysis/stats_run.h"
#include "attention/bench.h"
#include "attention/runtime_info.h"
#include "capture/capture_file.h"
#include "capture/model.h"
#include "capture/tokenizer.h"
#include "sparqlab/version.h"
#include "widgets/figure_renderer.h"
#include "widgets/lab_views.h"
#include "widgets/panels.h"
#include "widgets/tradeoffs_view.h"

#include <algorithm>

#include <QAction>
#include <QApplication>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QPixmap>
#include <QPointer>
#include <QPushButton>
#include <QSaveFile>
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

namespace {

/// One sentence per step of SparQ, for teaching mode (paper §3, Alg. 1).
QString teachingSentence(int step) {
    switch (step) {
    case 1:
        return QObject::tr("Step 1 of 3 — SparQ reads only the r components where |q| is "
                           "largest, so it fetches r rows of K instead of all d_h.");
    case 2:
        return QObject::tr("Step 2 of 3 — those components give approximate scores ŝ; the k "
                           "positions they rank highest are fetched in full for exact attention.");
    case 3:
        return QObject::tr("Step 3 of 3 — α, the approximate mass of those k positions, mixes "
                           "their output with the mean value v̄ to stand in for the rest.");
    case 4:
        return QObject::tr("Retrieval — the prompt repeats a passage. A retrieval (induction) "
                           "head looks back at the token that followed the current one the first "
                           "time; SparQ finds that position from a few components of q.");
    default:
        return {};
    }
}

/// The lab's decode-step timing: one sequence of the capture's shape at S positions, five
/// samples after one warm-up, each at least 5 ms on a GPU.
attention::DecodeBenchConfig labBench(const capture::CaptureInfo& info, int64_t S,
                                      const std::string& device = "cpu") {
    attention::DecodeBenchConfig b;
    b.batch = 1;
    b.heads = info.nHeads;
    b.kvHeads = info.nKvHeads;
    b.headDim = info.headDim;
    b.seq = S;
    b.device = device;
    b.repeats = 5;
    b.warmup = 1;
    b.minSampleSeconds = 0.005;
    return b;
}

/// Every method the decode engine runs, with the lab's parameters (r, k as given), for timing
/// against dense; calibrated on the benchmark's own keys, without the model's modifiers.
std::vector<attention::AttentionConfig> engineMethods(const attention::AttentionConfig& c,
                                                      int64_t r, int64_t k) {
    std::vector<attention::AttentionConfig> out;
    for (const attention::MethodInfo& m : attention::methods()) {
        if (!m.fastDecode || m.id == attention::Method::Dense)
            continue;
        attention::AttentionConfig mc = c;
        mc.method = m.id;
        mc.r = r;
        if (mc.k != attention::AttentionConfig::kNoCap ||
            !attention::takes(m.id, attention::Param::P))
            mc.k = k;
        if (mc.calibration && mc.calibration->method != m.id)
            mc.calibration = nullptr;
        mc.softcap = 0;
        mc.slidingWindow = 0;
        out.push_back(mc);
    }
    return out;
}

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_model(new widgets::ModelPanel), m_prompt(new widgets::PromptPanel),
      m_head(new widgets::HeadView), m_overview(new widgets::OverviewView),
      m_controls(new widgets::ControlsPanel), m_transfer(new widgets::TransferPanel),
      m_stats(new widgets::StatsPanel), m_timing(new widgets::TimingPanel),
      m_tradeoffs(new widgets::TradeoffsView), m_compare(new widgets::CompareView),
      m_curve(new widgets::TimingCurveView), m_tabs(new QTabWidget), m_stepBar(new QWidget),
      m_stepSlider(new QSlider(Qt::Horizontal)), m_stepLabel(new QLabel),
      m_redrawTimer(new QTimer(this)), m_overviewWork(new QFutureWatcher<OverviewResult>(this)),
      m_curveWork(new QFutureWatcher<std::vector<widgets::TimingCurve>>(this)),
      m_curveCancel(std::make_shared<std::atomic<bool>>(false)), m_teachBar(new QWidget),
      m_teachText(new QLabel), m_loader(new QFutureWatcher<LoadResult>(this)),
      m_work(new QFutureWatcher<WorkResult>(this)), m_timingWork(new QFutureWatcher<QString>(this)),
      m_exportWork(new QFutureWatcher<ExportResult>(this)), m_timingDelay(new QTimer(this)),
      m_cancel(std::make_shared<std::atomic<bool>>(false)) {
    connect(m_loader, &QFutureWatcher<LoadResult>::finished, this, &MainWindow::modelLoaded);
    connect(m_work, &QFutureWatcher<WorkResult>::finished, this, &MainWindow::workFinished);
    connect(m_timingWork, &QFutureWatcher<QString>::finished, this, &MainWindow::timingFinished);
    connect(m_exportWork, &QFutureWatcher<ExportResult>::finished, this,
            &MainWindow::exportFinished);
    connect(m_curveWork, &QFutureWatcher<std::vector<widgets::TimingCurve>>::finished, this,
            &MainWindow::curveFinished);
    connect(m_overviewWork, &QFutureWatcher<OverviewResult>::finished, this,
            &MainWindow::overviewFinished);
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
    auto* back = new QPushButton(tr("◀ Back"));
    auto* next = new QPushButton(tr("Next ▶"));
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

    m_tabs->addTab(m_head, tr("Head view"));
    m_tabs->addTab(m_overview, tr("Overview"));
    m_tabs->addTab(m_tradeoffs, tr("Trade-offs"));
    m_tabs->addTab(m_compare, tr("Compare"));
    m_tabs->addTab(m_curve, tr("Timing"));
    connect(m_tabs, &QTabWidget::currentChanged, this, [this](int index) {
        if (index == 1 && m_overviewDirty)
            drawOverview();
        if (index == 3)
            redraw();
        if (index == 4 && m_capture && !m_curveWork->isRunning())
            measureTimingCurve(); // drawn at once when this shape was measured before
    });
    connect(m_compare, &widgets::CompareView::secondChanged, this, &MainWindow::scheduleRedraw);
    connect(m_curve, &widgets::TimingCurveView::measureRequested, this,
            &MainWindow::measureTimingCurve);
    connect(m_curve, &widgets::TimingCurveView::cancelRequested, this, [this] {
        m_curveCancel->store(true);
        if (!m_curveWork->isRunning() && m_curvePending) { // still waiting to start
            m_curvePending = false;
            m_curve->showProgress(tr("Cancelled; Measure to start again."), false);
        }
    });
    // Decode steps: a slider over the generated tokens, shown after Generate.
    m_stepBar->setObjectName(QStringLiteral("stepBar"));
    m_stepSlider->setObjectName(QStringLiteral("stepSlider"));
    m_stepLabel->setObjectName(QStringLiteral("stepLabel"));
    m_stepLabel->setTextFormat(Qt::PlainText); // token texts as they are ("<", "&")
    auto* sb = new QHBoxLayout(m_stepBar);
    sb->setContentsMargins(6, 2, 6, 2);
    sb->addWidget(new QLabel(tr("Decode step")));
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
    m_tradeoffs->setRunEnabled(false);
    connect(m_tradeoffs, &widgets::TradeoffsView::runRequested, this, &MainWindow::runTradeoffs);
    connect(m_tradeoffs, &widgets::TradeoffsView::cancelRequested, this, &MainWindow::cancelWork);
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
    connect(m_prompt, &widgets::PromptPanel::generateRequested, this, &MainWindow::generate);
    connect(m_controls, &widgets::ControlsPanel::changed, this, &MainWindow::scheduleRedraw);
    connect(m_overview, &widgets::OverviewView::cellClicked, this, [this](int layer, int head) {
        m_controls->setLayerHead(layer, head);
        showView(0);
    });
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
    QSettings settings;
    const attention::AttentionConfig c = m_controls->config();
    settings.setValue(QStringLiteral("lab/r"), static_cast<int>(c.r));
    settings.setValue(QStringLiteral("lab/k"), static_cast<int>(c.k));
    // Workers hold shared pointers to what they use; waiting keeps exit orderly.
    m_curveCancel->store(true);
    m_work->waitForFinished();
    m_timingWork->waitForFinished();
    m_curveWork->waitForFinished();
    m_exportWork->waitForFinished();
    m_overviewWork->waitForFinished();
    m_loader->waitForFinished();
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
    file->addAction(tr("Export &Capture (HDF5)…"), this, &MainWindow::exportCapture);
    file->addAction(tr("Export &Plots (PNG/SVG/PDF)…"), this, &MainWindow::exportPlots);
    file->addAction(tr("Export the Paper's &Figures…"), this, &MainWindow::exportFigureSet);
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->setObjectName(QStringLiteral("viewMenu"));
    view->addAction(tr("&Head View"), this, [this] { showView(0); });
    view->addAction(tr("&Overview"), this, [this] { showView(1); });
    view->addAction(tr("&Compare Two Methods"), this, [this] { showView(3); });
    view->addAction(tr("&Timing Against Length"), this, [this] { showView(4); });
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
    m_loader->setFuture(QtConcurrent::run([spec]() {
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
    m_tradeoffs->setRunEnabled(m_current->hasTokenizer());
    if (m_prompt->prompt().isEmpty())
        m_prompt->setPrompt(tr("Mr. Speaker, Members of Congress, the state of our Union is"));
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentModels")).toStringList();
    recent.removeAll(r.spec);
    recent.prepend(r.spec);
    settings.setValue(QStringLiteral("recentModels"), recent.mid(0, 8));
    statusBar()->showMessage(tr("Opened %1").arg(QString::fromStdString(m_current->folder())),
                             5000);
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
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_busy = true;
    m_prompt->setBusy(true);
    statusBar()->showMessage(tr("Running the model…"));
    const auto model = m_current;
    const auto cancel = m_cancel;
    const std::string prompt = text.toStdString();
    const bool retrieval = m_teachStep == 4; // find the retrieval head as well
    QPointer<QStatusBar> bar = statusBar();
    m_work->setFuture(QtConcurrent::run([model, cancel, prompt, retrieval, bar]() {
        WorkResult w;
        try {
            if (retrieval) { // the induction diagnostic (random tokens shown twice), same thread
                analysis::InductionOptions io;
                io.length = std::min<int64_t>(128, (model->config().maxPositions - 1) / 2);
                io.sequences = 2;
                const analysis::InductionReport r = analysis::inductionReport(*model->net(), io);
                w.retrievalLayer = static_cast<int>(r.bestLayer);
                w.retrievalHead = static_cast<int>(r.bestHead);
                w.retrievalScore = r.bestInduction;
            }
            const std::vector<int64_t> ids = model->tokenizer().encode(prompt, true);
            if (static_cast<int64_t>(ids.size()) > model->config().maxPositions)
                throw std::runtime_error("the prompt has " + std::to_string(ids.size()) +
                                         " tokens, more than the model's context of " +
                                         std::to_string(model->config().maxPositions));
            // The queries of recent positions too (all when memory allows): SnapKV, TOVA and
            // H2O read them.
            const capture::ModelConfig& mc = model->config();
            const int64_t keep = analysis::labHistory(static_cast<int64_t>(ids.size()), mc.nLayers,
                                                      mc.nHeads, mc.headDim);
            // Progress in the status bar (a 16k-token prompt takes a minute or more).
            int lastPercent = -1;
            attention::Job job;
            job.cancel = cancel.get();
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
        } catch (const attention::Cancelled&) {
            w.cancelled = true;
        } catch (const std::exception& ex) {
            w.error = QString::fromUtf8(ex.what());
        }
        return w;
    }));
}

void MainWindow::runTradeoffs(const widgets::TradeoffRequest& r) {
    if (!m_current || m_work->isRunning()) {
        m_tradeoffs->showMessage(tr("Open a model first, and wait for the running work to end."));
        return;
    }
    analysis::EvalOptions o;
    o.task = r.task;
    o.dataPath = r.dataPath.toStdString();
    o.outPath = r.outPath.toStdString();
    o.limit = r.limit;
    o.resume = true; // a study stopped half-way goes on where it stopped
    o.modelName = m_spec.toStdString();
    o.createdBy = std::string("sparqlab ") + SPARQLAB_VERSION;
    try {
        if (r.dataPath.isEmpty())
            throw std::runtime_error("choose a data file for the task");
        std::vector<attention::Method> methods;
        for (const QString& m : r.methods.split(QLatin1Char(','), Qt::SkipEmptyParts))
            methods.push_back(attention::parseMethod(m.trimmed().toStdString()));
        std::map<attention::Param, std::vector<std::string>> overrides;
        auto list = [&](attention::Param p, const QString& text) {
            for (const QString& v : text.split(QLatin1Char(','), Qt::SkipEmptyParts))
                overrides[p].push_back(v.trimmed().toStdString());
        };
        list(attention::Param::R, r.r);
        list(attention::Param::K, r.k);
        const capture::ModelConfig& mc = m_current->config();
        o.points = analysis::evalGrid(methods, overrides, "", mc.headDim, mc.maxPositions);
    } catch (const std::exception& e) {
        m_tradeoffs->showMessage(QStringLiteral("<span style='color:#b00020'>%1</span>")
                                     .arg(QString::fromUtf8(e.what()).toHtmlEscaped()));
        return;
    }
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_busy = true;
    m_prompt->setBusy(true);
    m_tradeoffs->setRunning(true);
    m_tradeoffs->showMessage(tr("Running %1 settings…").arg(o.points.size()));
    // Progress and the curves so far, from the worker to this thread.
    QPointer<widgets::TradeoffsView> view = m_tradeoffs;
    const std::string partial = o.outPath + ".partial";
    o.job.progress = [view, partial](int64_t done, int64_t total, const std::string&) {
        QMetaObject::invokeMethod(
            view,
            [view, partial, done, total]() {
                if (!view)
                    return;
                view->setProgress(done, total);
                try {
                    view->showRecords(analysis::readEvalJsonl(partial));
                } catch (const std::exception&) {
                }
            },
            Qt::QueuedConnection);
    };
    const auto model = m_current;
    const auto cancel = m_cancel;
    m_work->setFuture(QtConcurrent::run([model, cancel, o]() mutable {
        WorkResult w;
        w.tradeoffs = true;
        o.job.cancel = cancel.get();
        try {
            const analysis::EvalSummary s = analysis::runEval(*model, o);
            w.text = QObject::tr("%1 examples × %2 settings: %3 lines (%4 from before) in %5")
                         .arg(s.examples)
                         .arg(o.points.size())
                         .arg(s.lines)
                         .arg(s.skipped)
                         .arg(QString::fromStdString(s.outPath));
        } catch (const attention::Cancelled&) {
            w.cancelled = true;
        } catch (const std::exception& e) {
            w.error = QString::fromUtf8(e.what());
        }
        return w;
    }));
}

void MainWindow::generate(int tokens) {
    if (!m_current || m_work->isRunning())
        return;
    attention::AttentionConfig cfg = m_controls->config();
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_busy = true;
    m_prompt->setBusy(true);
    statusBar()->showMessage(tr("Generating %1 tokens with %2…")
                                 .arg(tokens)
                                 .arg(QString::fromStdString(attention::methodName(cfg.method))));
    const auto model = m_current;
    const auto cancel = m_cancel;
    const std::string prompt = m_prompt->prompt().toStdString();
    m_work->setFuture(QtConcurrent::run([model, cancel, prompt, tokens, cfg]() {
        WorkResult w;
        try {
            const std::vector<int64_t> ids = model->tokenizer().encode(prompt, true);
            // Healed as sparqlab-cli generate heals a text prompt (a cut last word).
            const capture::Generation g =
                model->generateHealed(ids, tokens, cfg, true, attention::Job{{}, cancel.get()});
            w.text = QString::fromStdString(model->continuationText(g));
            // The decode steps: one dense capture of the prompt and the generated tokens,
            // keeping the queries of the generated positions (causal: the query at step t is
            // that of a capture of the prompt and the first t generated tokens).
            std::vector<int64_t> all = g.promptIds;
            all.insert(all.end(), g.newIds.begin(), g.newIds.end());
            if (!g.newIds.empty()) {
                const capture::ModelConfig& mc = model->config();
                const int64_t S = static_cast<int64_t>(all.size());
                const int64_t keep =
                    std::max<int64_t>(analysis::labHistory(S, mc.nLayers, mc.nHeads, mc.headDim),
                                      static_cast<int64_t>(g.newIds.size()) + 1);
                const capture::CaptureExample e =
                    model->capture(all, false, -1, attention::Job{{}, cancel.get()}, keep);
                w.capture = analysis::LabCapture::from(e, model->captureInfo());
                w.capture->promptPositions = static_cast<int64_t>(g.promptIds.size());
            }
        } catch (const attention::Cancelled&) {
            w.cancelled = true;
        } catch (const std::exception& ex) {
            w.error = QString::fromUtf8(ex.what());
        }
        return w;
    }));
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
    if (w.tradeoffs) {
        m_tradeoffs->setRunning(false);
        m_tradeoffs->setRunEnabled(m_current && m_current->hasTokenizer());
        if (!w.error.isEmpty())
            m_tradeoffs->showMessage(QStringLiteral("<span style='color:#b00020'>%1</span>")
                                         .arg(w.error.toHtmlEscaped()));
        else
            m_tradeoffs->showMessage(w.cancelled ? tr("Stopped; Run again to resume.") : w.text);
        try { // the final file (or the partial one, when stopped)
            const std::string out = m_tradeoffs->request().outPath.toStdString();
            const std::string path = QFileInfo::exists(QString::fromStdString(out + ".partial"))
                                         ? out + ".partial"
                                         : out;
            if (QFileInfo::exists(QString::fromStdString(path)))
                m_tradeoffs->showRecords(analysis::readEvalJsonl(path));
        } catch (const std::exception&) {
        }
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
    if (!w.capture) {
        statusBar()->showMessage(tr("Generated"), 3000);
        return;
    }
    m_capture = w.capture;
    m_generated = w.text;
    m_lastError.clear();
    m_keepTiming = false;
    m_controls->setLimits(
        static_cast<int>(m_capture->layers()), static_cast<int>(m_capture->heads()),
        static_cast<int>(m_capture->headDim()), static_cast<int>(m_capture->positions()));
    {
        const QSignalBlocker block(m_stepSlider);
        m_stepSlider->setRange(0, static_cast<int>(m_capture->steps()));
        m_stepSlider->setValue(static_cast<int>(m_capture->steps())); // the last position
    }
    updateStepBar();
    if (w.retrievalLayer >= 0 && m_teachStep == 4) {
        // SparQ on that head with the smallest r whose selection holds most of the exact mass
        // (what a lecturer would find by moving the slider), k = 16.
        m_controls->setMethod(attention::Method::Sparq);
        m_controls->setK(16);
        m_controls->setLayerHead(w.retrievalLayer, w.retrievalHead);
        int r = 0;
        for (const int tryR : {2, 4, 8, 16, 32, 64}) {
            if (tryR > static_cast<int>(m_capture->headDim()))
                break;
            r = tryR;
            m_controls->setR(r);
            redraw();
            if (m_head->state().chosenMass >= 0.5)
                break;
        }
        m_teachText->setText(
            teachingSentence(4) +
            tr(" Here: layer %1, head %2 (induction score %3); with r = %4 of %5 components and "
               "k = 16 SparQ's selection holds %6 of the exact attention.")
                .arg(w.retrievalLayer)
                .arg(w.retrievalHead)
                .arg(w.retrievalScore, 0, 'f', 2)
                .arg(r)
                .arg(m_capture->headDim())
                .arg(m_head->state().chosenMass, 0, 'f', 2));
    }
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
    while (m_overviewPending) { // the grids the last change asked for, drawn now
        m_overviewWork->waitForFinished();
        overviewFinished();
    }
}

int MainWindow::decodeStep() const {
    return m_capture && m_capture->steps() > 0 ? m_stepSlider->value() : -1;
}

void MainWindow::setDecodeStep(int step) {
    m_stepSlider->setValue(step);
    flushRedraw();
}

void MainWindow::updateStepBar() {
    const int64_t steps = m_capture ? m_capture->steps() : 0;
    m_stepBar->setVisible(steps > 0);
    if (steps == 0)
        return;
    const int t = m_stepSlider->value();
    const int64_t pos = m_capture->promptPositions - 1 + t;
    const size_t next = static_cast<size_t>(pos + 1);
    const QString chose =
        next < m_capture->tokens.size()
            ? tr("chose “%1”").arg(QString::fromStdString(m_capture->tokens[next]))
            : tr("(the last generated token's query)");
    m_stepLabel->setText(
        tr("step %1 of %2: the query of position %3 “%4”, which %5")
            .arg(t)
            .arg(steps)
            .arg(pos)
            .arg(static_cast<size_t>(pos) < m_capture->tokens.size()
                     ? QString::fromStdString(m_capture->tokens[static_cast<size_t>(pos)])
                     : QString())
            .arg(chose));
}

void MainWindow::redraw() {
    m_redrawTimer->stop();
    if (!m_capture)
        return;
    const attention::AttentionConfig c = m_controls->config();
    try {
        const int step = decodeStep();
        m_shown = step >= 0 && step < m_capture->steps() ? m_capture->atStep(step) : m_capture;
        const analysis::HeadState h =
            analysis::headState(*m_shown, m_controls->layer(), m_controls->head(), c);
        m_head->showHead(h, m_shown->tokens);
        updateStats(h);
        m_transfer->showTransfer(c, m_shown->positions(), m_shown->headDim(),
                                 static_cast<double>(h.count));
        // The overview and the comparison are drawn when they are shown (a slider change
        // redraws what is visible; the rest follows when its tab is opened).
        m_overviewDirty = true;
        if (m_tabs->currentIndex() == 1)
            drawOverview();
        if (m_tabs->currentIndex() == 3)
            drawCompare(h);
        m_lastError.clear();
    } catch (const std::exception& e) {
        showError(QString::fromUtf8(e.what()));
    }
    if (!m_keepTiming)
        m_timingDelay->start();
}

void MainWindow::drawOverview() {
    if (!m_shown)
        return;
    m_overviewDirty = false;
    if (m_overviewPending) { // one at a time; the latest settings follow it
        m_overviewAgain = true;
        return;
    }
    m_overviewAgain = false;
    m_overviewPending = true;
    const attention::AttentionConfig c = m_controls->config();
    const auto cap = m_shown; // the worker holds the capture it reads
    m_overviewWork->setFuture(QtConcurrent::run([cap, c]() {
        OverviewResult r;
        r.r = static_cast<int>(c.r);
        r.k = static_cast<int>(c.k);
        try {
            r.overview = analysis::overview(*cap, c);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

void MainWindow::overviewFinished() {
    // Called by the watcher, or by flushRedraw() after waiting (then the watcher's own call
    // finds nothing pending).
    if (!m_overviewPending || m_overviewWork->isRunning())
        return;
    m_overviewPending = false;
    const OverviewResult r = m_overviewWork->result();
    if (r.error.isEmpty())
        m_overview->showOverview(r.overview, r.r, r.k);
    else
        m_overview->showMessage(r.error);
    if (m_overviewAgain)
        drawOverview();
}

void MainWindow::drawCompare(const analysis::HeadState& a) {
    attention::AttentionConfig b = m_controls->config();
    b.method = m_compare->second();
    try {
        m_compare->showPair(
            a, analysis::headState(*m_shown, m_controls->layer(), m_controls->head(), b));
    } catch (const std::exception& e) {
        m_compare->showMessage(QString::fromUtf8(e.what()));
    }
}

void MainWindow::updateStats(const analysis::HeadState& h) {
    QTableWidget* t = m_stats->table();
    const QList<QPair<QString, QString>> rows = {
        {tr("α (SparQ)"), QString::number(h.alpha, 'f', 4)},
        {tr("true top-k mass"), QString::number(h.trueMass, 'f', 4)},
        {tr("mass of chosen"), QString::number(h.chosenMass, 'f', 4)},
        {tr("recall@k (true top-|chosen|)"), QString::number(h.topkAgreement, 'f', 4)},
        {tr("positions attended"), QString::number(h.count)},
        {tr("k for 90% of the mass"), QString::number(h.kMass90)},
        {tr("output error"), QString::number(h.outputError, 'g', 4)},
        {tr("temperature τ"), QString::number(h.tau, 'f', 3)},
    };
    t->setRowCount(static_cast<int>(rows.size()));
    for (int i = 0; i < rows.size(); ++i) {
        t->setItem(i, 0, new QTableWidgetItem(rows[i].first));
        t->setItem(i, 1, new QTableWidgetItem(rows[i].second));
    }
}

void MainWindow::measureTiming() {
    if (!m_shown)
        return;
    // One measurement at a time (they share the cores): a change made while one runs is
    // measured after it, not dropped.
    if (m_timingWork->isRunning() || m_curveWork->isRunning()) {
        m_timingDelay->start();
        return;
    }
    const capture::CaptureInfo& mc = m_shown->info; // the shape: no model needed (sessions)
    const attention::AttentionConfig c = m_controls->config();
    attention::DecodeBenchConfig b = labBench(mc, m_shown->positions());
    b.r = std::min<int64_t>(c.r, mc.headDim);
    b.k = std::min<int64_t>(c.k, b.seq);
    const std::vector<attention::AttentionConfig> methods = engineMethods(c, b.r, b.k);
    m_timingMeasuring = true;
    m_timingWork->setFuture(QtConcurrent::run([b, methods]() {
        QString text = QObject::tr("Decode step, this model's shape, S = %1, r = %2, k = %3 "
                                   "(each method's own parameters as set in the lab):")
                           .arg(b.seq)
                           .arg(b.r)
                           .arg(b.k);
        std::vector<std::string> devices{"cpu"};
        if (attention::cudaAvailable())
            devices.push_back("cuda");
        for (const std::string& device : devices) {
            attention::DecodeBenchConfig c = b;
            c.device = device;
            try {
                const auto results = attention::benchDecodeMethods(c, methods);
                text += QObject::tr("<br><b>%1</b>: dense <b>%2 µs</b>")
                            .arg(QString::fromStdString(device).toUpper())
                            .arg(results.front().denseUs, 0, 'f', 1);
                text += QStringLiteral("<table cellspacing=\"6\"><tr><th align=left>") +
                        QObject::tr("method") + QStringLiteral("</th><th>µs</th><th>") +
                        QObject::tr("speed-up") + QStringLiteral("</th><th>") +
                        QObject::tr("theoretical") + QStringLiteral("</th></tr>");
                for (const attention::MethodBenchResult& r : results)
                    text +=
                        QStringLiteral("<tr><td>%1</td><td align=right>%2</td><td "
                                       "align=right><b>%3×</b></td><td "
                                       "align=right>%4×</td></tr>")
                            .arg(QString::fromUtf8(attention::methodInfo(r.config.method).label))
                            .arg(r.us, 0, 'f', 1)
                            .arg(r.speedup, 0, 'f', 2)
                            .arg(r.theoreticalSpeedup, 0, 'f', 2);
                text += QStringLiteral("</table>");
            } catch (const std::exception& e) {
                text += QObject::tr("<br>%1: unavailable (%2)")
                            .arg(QString::fromStdString(device).toUpper(),
                                 QString::fromUtf8(e.what()).toHtmlEscaped());
            }
        }
        return text;
    }));
}

void MainWindow::timingFinished() {
    m_timingMeasuring = false;
    m_timing->showText(m_timingWork->result());
}

QString MainWindow::timingText() const {
    return m_timing->text()->text();
}

bool MainWindow::isCurveRunning() const {
    return m_curvePending; // from the request until curveFinished() has drawn it
}

void MainWindow::measureTimingCurve() {
    if (!m_shown || m_curveWork->isRunning())
        return;
    const capture::CaptureInfo& info = m_shown->info;
    const attention::AttentionConfig c = m_controls->config();
    const int64_t r = std::min<int64_t>(c.r, info.headDim);
    const std::vector<attention::AttentionConfig> methods = engineMethods(c, r, c.k);
    std::vector<std::string> devices{"cpu"};
    if (attention::cudaAvailable())
        devices.push_back("cuda");
    // One curve per shape and parameters: measured once, drawn again at once.
    QString key = QStringLiteral("%1/%2/%3").arg(info.nHeads).arg(info.nKvHeads).arg(info.headDim);
    for (const attention::AttentionConfig& m : methods)
        for (const attention::Param p : attention::methodInfo(m.method).params)
            key += QStringLiteral("/") + QString::fromStdString(attention::paramValue(m, p));
    key += QString::number(devices.size());
    const QString shape = tr("Decode step of one sequence, this model's shape (%1 query heads, %2 "
                             "KV heads, d<sub>h</sub> = %3), float32, r = %4, k = %5; dotted: the "
                             "transfer model's speed-up.")
                              .arg(info.nHeads)
                              .arg(info.nKvHeads)
                              .arg(info.headDim)
                              .arg(r)
                              .arg(c.k);
    const auto hit = m_curves.find(key);
    if (hit != m_curves.end()) {
        m_curvePending = false;
        m_curve->showCurves(hit->second, shape);
        m_curve->showProgress(tr("Measured earlier for this shape and these parameters."), false);
        return;
    }
    if (m_timingWork->isRunning()) { // one measurement at a time: they share the cores
        m_curvePending = true;
        m_curve->showProgress(tr("Waiting for the timing panel's measurement…"), true);
        QTimer::singleShot(200, this, [this] {
            if (m_curvePending) // not cancelled meanwhile
                measureTimingCurve();
        });
        return;
    }
    m_curveKey = key;
    m_curvePending = true;
    m_curveCancel = std::make_shared<std::atomic<bool>>(false);
    const auto cancel = m_curveCancel;
    m_curve->setProperty("shape", shape);
    m_curve->showProgress(tr("Measuring…"), true);
    QPointer<widgets::TimingCurveView> view = m_curve;
    m_curveWork->setFuture(QtConcurrent::run([=, info = info]() { // the shape, copied
        std::vector<widgets::TimingCurve> out;
        std::vector<int64_t> lengths;
        for (int64_t S = 256; S <= 32768; S *= 2)
            lengths.push_back(S);
        const int total = static_cast<int>(lengths.size() * devices.size());
        int done = 0;
        for (const std::string& device : devices) {
            { // threads started and pages touched before the first point is timed
                try {
                    (void)attention::benchDecodeMethods(labBench(info, lengths.front(), device),
                                                        methods);
                } catch (const std::exception&) {
                }
            }
            widgets::TimingCurve curve;
            curve.device = QString::fromStdString(device).toUpper();
            curve.us.resize(methods.size());
            curve.theory.resize(methods.size());
            for (const attention::AttentionConfig& m : methods)
                curve.methods.push_back(QString::fromUtf8(attention::methodInfo(m.method).label));
            for (const int64_t S : lengths) {
                if (cancel->load())
                    return std::vector<widgets::TimingCurve>{};
                QMetaObject::invokeMethod(
                    view,
                    [view, S, done, total, device]() {
                        if (view)
                            view->showProgress(QObject::tr("Measuring %1 at S = %2 (%3 of %4)…")
                                                   .arg(QString::fromStdString(device).toUpper())
                                                   .arg(S)
                                                   .arg(done + 1)
                                                   .arg(total),
                                               true);
                    },
                    Qt::QueuedConnection);
                const attention::DecodeBenchConfig b = labBench(info, S, device);
                std::vector<attention::AttentionConfig> at = methods;
                for (attention::AttentionConfig& m : at)
                    if (m.k != attention::AttentionConfig::kNoCap)
                        m.k = std::min<int64_t>(m.k, S);
                try {
                    const auto results = attention::benchDecodeMethods(b, at);
                    curve.seq.push_back(S);
                    curve.denseUs.push_back(results.front().denseUs);
                    for (size_t i = 0; i < results.size(); ++i) {
                        curve.us[i].push_back(results[i].us);
                        curve.theory[i].push_back(results[i].theoreticalSpeedup);
                    }
                } catch (const std::exception&) {
                    break; // out of memory on this device at this length: the curve ends here
                }
                ++done;
            }
            if (!curve.seq.empty())
                out.push_back(curve);
        }
        return out;
    }));
}

void MainWindow::curveFinished() {
    m_curvePending = false;
    const std::vector<widgets::TimingCurve> curves = m_curveWork->result();
    if (m_curveCancel->load() || curves.empty()) {
        m_curve->showProgress(tr("Cancelled; Measure to start again."), false);
        return;
    }
    m_curves[m_curveKey] = curves;
    m_curve->showCurves(curves, m_curve->property("shape").toString());
    m_curve->showProgress(tr("Measured %1 lengths.").arg(curves.front().seq.size()), false);
}

analysis::Session MainWindow::currentSession() const {
    analysis::Session s;
    s.capture = m_capture;
    s.model = m_spec.toStdString();
    s.prompt = m_prompt->prompt().toStdString();
    s.generated = m_generated.toStdString();
    s.config = m_controls->config();
    s.config.calibration = nullptr;
    s.layer = m_controls->layer();
    s.head = m_controls->head();
    s.view = m_tabs->currentIndex();
    s.measure = analysis::measures()[0].second;
    for (const auto& [m, label] : analysis::measures())
        if (m == m_overview->measure(0))
            s.measure = label;
    s.compareMethod = m_compare->second();
    s.step = decodeStep() >= 0 && decodeStep() < m_capture->steps() ? decodeStep() : -1;
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
    m_exportWork->setFuture(QtConcurrent::run([s, path]() {
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
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_busy = true;
    m_prompt->setBusy(true);
    statusBar()->showMessage(tr("Opening %1…").arg(path));
    m_work->setFuture(QtConcurrent::run([path]() {
        WorkResult w;
        w.sessionPath = path;
        try {
            w.session =
                std::make_shared<analysis::Session>(analysis::readSession(path.toStdString()));
        } catch (const std::exception& e) {
            w.error = QString::fromUtf8(e.what());
        }
        return w;
    }));
}

void MainWindow::restoreSession(const analysis::Session& s, const QString& path) {
    m_capture = s.capture;
    m_generated = QString::fromStdString(s.generated);
    m_lastError.clear();
    m_prompt->setPrompt(QString::fromStdString(s.prompt));
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
        const QSignalBlocker b(m_controls), c(m_stepSlider), d(m_compare);
        m_controls->setLimits(
            static_cast<int>(m_capture->layers()), static_cast<int>(m_capture->heads()),
            static_cast<int>(m_capture->headDim()), static_cast<int>(m_capture->positions()));
        m_controls->setConfig(s.config);
        m_controls->setLayerHead(static_cast<int>(s.layer), static_cast<int>(s.head));
        m_compare->setSecond(s.compareMethod);
        for (const auto& [m, label] : analysis::measures())
            if (label == s.measure)
                m_overview->setMeasure(0, m);
        m_stepSlider->setRange(0, static_cast<int>(m_capture->steps()));
        m_stepSlider->setValue(s.step >= 0 ? static_cast<int>(s.step)
                                           : static_cast<int>(m_capture->steps()));
    }
    updateStepBar();
    {
        const QSignalBlocker b(m_tabs);
        m_tabs->setCurrentIndex(static_cast<int>(s.view));
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

void MainWindow::showError(const QString& message) {
    m_lastError = message;
    m_head->showMessage(message);
    statusBar()->showMessage(message, 8000);
}

QString MainWindow::retrievalPrompt() {
    // A passage of the 2012 address (held out from the demo's training), then its start again:
    // the last token's earlier occurrence is in the first showing.
    const QString passage = QStringLiteral(
        "Members of Congress, distinguished guests, and fellow Americans: Last month, I went to "
        "Andrews Air Force Base and welcomed home some of our last troops to serve in Iraq. "
        "Together, we offered a final, proud salute to the colors under which more than a "
        "million of our fellow citizens fought and several thousand gave their lives.");
    return passage + QLatin1Char(' ') + passage.left(120);
}

void MainWindow::setTeachingStep(int step) {
    const int was = m_teachStep;
    m_teachStep = std::clamp(step, 0, 4);
    m_teachBar->setVisible(m_teachStep > 0);
    m_teachText->setText(teachingSentence(m_teachStep));
    m_head->highlightStep(m_teachStep == 4 ? 2 : m_teachStep);
    if (m_teachStep > 0)
        showView(0);
    if (m_teachStep == 4 && was != 4 && m_current && m_current->hasTokenizer()) {
        m_prompt->setPrompt(retrievalPrompt());
        runPrompt(retrievalPrompt());
    }
}

void MainWindow::showView(int index) {
    m_tabs->setCurrentIndex(index);
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
    m_exportWork->setFuture(QtConcurrent::run([cap, path]() {
        ExportResult r;
        try {
            capture::CaptureWriter w(path.toStdString(), cap->info);
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
    m_exportWork->setFuture(QtConcurrent::run([cap, dir]() {
        ExportResult r;
        r.dir = dir;
        try {
            // The same path as `sparqlab-cli figures`: a capture file, its statistics, the
            // figures' data; the figures are drawn on the GUI thread (QCustomPlot is a widget).
            const std::string file = QDir(dir).filePath(QStringLiteral("capture.h5")).toStdString();
            capture::CaptureWriter w(file, cap->info);
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
    const QFileInfo fi(base);
    const QString stem = fi.path() + QLatin1Char('/') + fi.completeBaseName();
    const QString ext = fi.suffix().isEmpty() ? QStringLiteral("png") : fi.suffix().toLower();
    const bool ok = widgets::exportLabPlots(m_head, m_overview, stem, ext);
    statusBar()->showMessage(ok ? tr("Plots written next to %1").arg(base)
                                : tr("error: %1: could not write every plot").arg(base),
                             5000);
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
    QSaveFile out(path); // written to a temporary name and renamed on commit
    if (!out.open(QIODevice::WriteOnly) || !pixmap.save(&out, "PNG") || !out.commit()) {
        *error = path + QStringLiteral(": cannot write the screenshot: ") + out.errorString();
        return false;
    }
    return true;
}

} // namespace sparqlab::app
