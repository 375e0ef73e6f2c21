#include "main_window.h"

#include "app/gui/lab_menus.h"
#include "app/gui/query_bar.h"
#include "app/gui/teaching_bar.h"
#include "app/lab/decode_timing.h"
#include "app/lab/lab_export.h"
#include "attention/method_table.h"
#include "attention/runtime_info.h"
#include "model/model.h"
#include "sparqlab/version.h"
#include "widgets/controls_panel.h"
#include "widgets/figure_renderer.h"
#include "widgets/head_view.h"
#include "widgets/panels.h"
#include "widgets/transfer_panel.h"

#include <algorithm>

#include <QFileInfo>
#include <QLabel>
#include <QScrollArea>
#include <QSettings>
#include <QSignalBlocker>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>

namespace sparqlab::app {

namespace {

/// What the prompt box asks for (GUI thread), for the lab's worker.
PromptInput promptInput(const widgets::PromptPanel& p) {
    return {p.prompt().toStdString(), p.chatMode(), p.systemPrompt().toStdString(),
            p.addGenerationPrompt()};
}

QSplitter* splitter(Qt::Orientation o, const QList<QWidget*>& widgets, const QList<int>& stretch,
                    const QList<int>& sizes) {
    auto* s = new QSplitter(o);
    for (QWidget* w : widgets)
        s->addWidget(w);
    for (int i = 0; i < stretch.size(); ++i)
        if (stretch[i] >= 0) // (−1: as the widget says)
            s->setStretchFactor(i, stretch[i]);
    if (!sizes.isEmpty())
        s->setSizes(sizes);
    return s;
}

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_lab(new Lab(this)), m_model(new widgets::ModelPanel),
      m_prompt(new widgets::PromptPanel), m_controls(new widgets::ControlsPanel),
      m_transfer(new widgets::TransferPanel), m_stats(new widgets::StatsPanel),
      m_timing(new widgets::TimingPanel), m_tabs(new QTabWidget), m_query(new QueryBar),
      m_redrawTimer(new QTimer(this)) {
    setWindowTitle(QStringLiteral(SPARQLAB_NAME));
    setObjectName(QStringLiteral("mainWindow"));
    m_tabs->setObjectName(QStringLiteral("viewTabs"));
    // One tab per view of the table (lab_view.h, app/gui/views/), in its order.
    for (const ViewSpec* spec : viewSpecs()) {
        LabView* view = spec->create(*m_lab, this);
        m_views.push_back({spec, view});
        view->widget()->setProperty("viewName", QString::fromUtf8(spec->name));
        // Scrolled where the window is too short for the view's parts (125 % on a projector).
        m_tabs->addTab(widgets::verticalScroll(view->widget()), tr(spec->label));
    }
    connect(m_tabs, &QTabWidget::currentChanged, this, [this](int) {
        if (LabView* v = currentView())
            v->refresh();
    });
    m_teach = new TeachingBar(*m_lab, m_controls, m_prompt, headView());
    m_redrawTimer->setSingleShot(true);
    m_redrawTimer->setInterval(0);
    connect(m_redrawTimer, &QTimer::timeout, this, &MainWindow::redraw);

    auto* center = new QWidget;
    auto* cl = new QVBoxLayout(center);
    cl->setContentsMargins(0, 0, 0, 0);
    cl->addWidget(m_teach);
    cl->addWidget(m_query);
    cl->addWidget(m_tabs, 1);
    QSplitter* left = splitter(Qt::Vertical, {m_model, m_prompt}, {-1, 1}, {});
    // Statistics and the step's timing share the column's foot as two tabs: stacked, a
    // projector's 800 px showed two of the eight statistics and none of the timing's notes.
    auto* readouts = new QTabWidget;
    readouts->setObjectName(QStringLiteral("readoutTabs"));
    readouts->addTab(m_stats, tr("Statistics"));
    readouts->addTab(m_timing, tr("Step timing"));
    m_stats->setTitleShown(false);
    m_timing->setTitleShown(false);
    QSplitter* right =
        splitter(Qt::Vertical, {m_controls, m_transfer, readouts}, {0, -1, 1}, {340, 100, 360});
    left->setObjectName(QStringLiteral("leftColumn"));
    right->setObjectName(QStringLiteral("rightColumn"));
    m_left = left;
    m_right = right;
    setCentralWidget(splitter(Qt::Horizontal, {left, center, right}, {2, 6, 2}, {260, 760, 300}));

    connectLab();
    QSettings settings;
    m_controls->setR(settings.value(QStringLiteral("lab/r"), 16).toInt());
    // k follows the prompt until the user sets one (analysis::promptK). A remembered 64 is the
    // default: every close kept it before k could follow.
    const int k = settings.value(QStringLiteral("lab/k"), 0).toInt();
    if (k > 0 && k != analysis::kLabK)
        m_controls->setK(k);
    else
        m_controls->followPromptK();
    addLabMenus(*this);
    const std::string warning = attention::slowBlasWarning();
    statusBar()->showMessage(
        QString::fromStdString(warning.empty() ? attention::runtimeSummary() : warning));
}

void MainWindow::setSideShown(Side side, bool shown) {
    QWidget* column = side == Side::Left ? m_left : m_right;
    if (column->isHidden() != shown)
        return;
    // The view takes the column's width and gives it back (the splitter alone would share it
    // among all by their stretch).
    auto* split = static_cast<QSplitter*>(centralWidget());
    const int i = split->indexOf(column), view = 1;
    QList<int> sizes = split->sizes();
    int& kept = side == Side::Left ? m_leftWidth : m_rightWidth;
    if (!shown) {
        kept = sizes[i];
        sizes[view] += sizes[i];
        sizes[i] = 0;
        column->hide();
    } else {
        column->show();
        const int width = std::min(kept, sizes[view] / 2);
        sizes[view] -= width;
        sizes[i] = width;
    }
    split->setSizes(sizes);
}

bool MainWindow::sideShown(Side side) const {
    return !(side == Side::Left ? m_left : m_right)->isHidden();
}

MainWindow::~MainWindow() {
    m_lab->cancelWork();
    if (m_rememberSettings) { // the user's choice, not a value clamped to a short prompt
        // (closed on teaching's page 4: the user's, not the page's own r = r*, k = 16)
        const TeachingBar::UserRK user = m_teach->userRK().value_or(TeachingBar::UserRK{
            m_controls->chosenR(), m_controls->chosenK(), m_controls->kFollowsPrompt()});
        QSettings settings;
        settings.setValue(QStringLiteral("lab/r"), user.r);
        if (user.kFollows)
            settings.remove(QStringLiteral("lab/k"));
        else
            settings.setValue(QStringLiteral("lab/k"), user.k);
    }
    for (View& v : m_views) // (each waits for its own work)
        delete v.view;
    m_views.clear();
    delete m_lab; // waits for its workers
}

void MainWindow::connectLab() {
    // What the window gives the lab: its settings, read when the lab needs them.
    m_lab->setSettingsSource([this] {
        return LabSettings{m_controls->config(), m_controls->layer(), m_controls->head(),
                           m_query->position()};
    });
    m_lab->timing()->setOthersMeasuring([this] {
        for (const View& v : m_views)
            if (v.view->measuring())
                return true;
        return false;
    });
    m_lab->exports()->setFigureRenderer(
        [](const analysis::FigureData& f, const QString& path, QString* error) {
            return widgets::saveFigure(f, path, 800, 520, error);
        });
    const auto schedule = [this] {
        m_lab->timing()->release(); // a restored session's timing stays until a change
        m_redrawTimer->start();     // many changes in one turn of the event loop: one redraw
    };
    connect(m_controls, &widgets::ControlsPanel::changed, this, schedule);
    connect(m_query, &QueryBar::positionChanged, this, schedule);
    connect(m_lab, &Lab::redrawRequested, this, schedule);
    connect(m_prompt, &widgets::PromptPanel::runRequested, this,
            [this] { runPrompt(m_prompt->prompt()); });
    connect(m_prompt, &widgets::PromptPanel::cancelRequested, m_lab, &Lab::cancelWork);
    connect(m_prompt, &widgets::PromptPanel::chatToggled, m_lab, &Lab::clearError);
    connect(m_prompt, &widgets::PromptPanel::generateRequested, this, &MainWindow::generate);
    connect(m_teach, &TeachingBar::runRequested, this,
            [this](const QString& text) { runPrompt(text); });
    connect(m_teach, &TeachingBar::headViewRequested, this,
            [this] { showView(QStringLiteral("head")); });
    // What the lab says.
    connect(m_lab, &Lab::modelLoading, this, [this](const QString& spec) {
        m_model->showLoading(spec);
        m_prompt->setRunEnabled(false);
    });
    connect(m_lab, &Lab::modelOpened, this, &MainWindow::modelOpened);
    connect(m_lab, &Lab::busyChanged, m_prompt, &widgets::PromptPanel::setBusy);
    connect(m_lab, &Lab::workDone, this, &MainWindow::captured);
    connect(m_lab, &Lab::sessionOpened, this, &MainWindow::restoreSession);
    connect(m_lab, &Lab::calibrationLoaded, this,
            [this](std::shared_ptr<attention::Calibration> cal) {
                m_controls->setCalibration(cal->method, cal);
                m_controls->setMethod(cal->method);
            });
    connect(m_lab, &Lab::errorChanged, this, &MainWindow::errorChanged);
    connect(m_lab, &Lab::headStateChanged, this, &MainWindow::headStateChanged);
    connect(m_lab, &Lab::status, statusBar(), &QStatusBar::showMessage);
    connect(m_lab, &Lab::headSelected, m_controls, &widgets::ControlsPanel::setLayerHead);
    connect(m_lab, &Lab::viewRequested, this, &MainWindow::showView);
    connect(m_lab, &Lab::queryRequested, m_query, &QueryBar::setPosition);
    connect(m_lab->timing(), &DecodeTiming::measured, m_timing, &widgets::TimingPanel::showText);
}

void MainWindow::modelOpened(const QString& failed) {
    const std::shared_ptr<model::Model> model = m_lab->model();
    if (!failed.isEmpty()) {
        m_model->showError(failed);
        m_prompt->setRunEnabled(static_cast<bool>(model));
        return;
    }
    m_model->showModel(*model, m_lab->modelSpec());
    m_prompt->setRunEnabled(model->hasTokenizer());
    for (View& v : m_views)
        v.view->refresh(); // (the trade-offs view can run now)
    if (m_prompt->prompt().isEmpty())
        m_prompt->setPrompt(widgets::PromptPanel::defaultPrompt());
}

void MainWindow::runPrompt(const QString& text, bool firstScreen) {
    PromptInput input = promptInput(*m_prompt);
    input.text = text.toStdString();
    const FirstScreen first = !firstScreen                   ? FirstScreen::No
                              : m_controls->kFollowsPrompt() ? FirstScreen::AtPromptK
                                                             : FirstScreen::AtK;
    attention::AttentionConfig base = m_controls->config();
    if (first == FirstScreen::AtK) // the k asked for, not as the last range clamped it
        base.k = m_controls->chosenK();
    m_lab->runPrompt(input, base, m_teach->step() == 4, first);
}

void MainWindow::generate(int tokens) {
    m_lab->generate(promptInput(*m_prompt), tokens, m_controls->config());
}

void MainWindow::captured(const WorkResult& w) {
    if (!w.text.isEmpty())
        m_prompt->showOutput(tr("<b>Generated:</b> %1").arg(w.text.toHtmlEscaped()));
    else if (w.capture) // a new Run: what an earlier Generate wrote is not of this prompt
        m_prompt->showOutput(QString());
    if (!w.capture) {
        statusBar()->showMessage(tr("Generated"), 3000);
        return;
    }
    m_lab->setCapture(w.capture, w.text, w.chat, w.firstHead);
    if (w.chat.on)
        m_prompt->showRendered(w.rendering.text, w.rendering.content);
    const analysis::LabCapture& c = *w.capture;
    showCapture(w.capture);
    if (w.firstHead) // (the head view says why this one)
        m_controls->setLayerHead(static_cast<int>(w.firstHead->layer),
                                 static_cast<int>(w.firstHead->head));
    if (w.retrievalLayer >= 0 && m_teach->step() == 4)
        m_teach->showRetrieval(w, c.headDim());
    statusBar()->showMessage(tr("Captured %1 positions").arg(c.positions()), 3000);
    redraw();
}

void MainWindow::restoreSession(const analysis::Session& s, const QString& path) {
    const QString generated = QString::fromStdString(s.generated);
    m_lab->setCapture(s.capture, generated, s.chat);
    const analysis::LabCapture& c = *s.capture;
    m_prompt->setChat(s.chat.on, QString::fromStdString(s.chat.system), s.chat.addGenerationPrompt);
    m_prompt->setPrompt(
        QString::fromStdString(s.chat.on ? text::formatTurns(s.chat.turns) : s.prompt));
    m_prompt->showOutput(generated.isEmpty()
                             ? QString()
                             : tr("<b>Generated:</b> %1").arg(generated.toHtmlEscaped()));
    if (!m_lab->model())
        m_model->showSession(QFileInfo(path).fileName(), s);
    {
        const QSignalBlocker b(m_controls);
        showCapture(s.capture);
        m_controls->setConfig(s.config);
        m_controls->setLayerHead(static_cast<int>(s.layer), static_cast<int>(s.head));
        for (const View& v : m_views)
            v.view->restoreFrom(s); // the overview's measure, the compared method, …
        m_query->setPositionQuietly(static_cast<int>(s.queryPosition >= 0 ? s.queryPosition
                                                     : s.step >= 0 && c.steps() > 0
                                                         ? c.promptPositions - 1 + s.step
                                                         : c.positions() - 1));
    }
    {
        const QSignalBlocker b(m_tabs);
        if (!showView(QString::fromStdString(s.view)))
            statusBar()->showMessage(tr("%1: no view '%2' in this version; showing the head view")
                                         .arg(path, QString::fromStdString(s.view)),
                                     5000);
    }
    redraw();
    if (!s.timing.empty()) { // the timing measured when the session was saved, until a change
        m_lab->timing()->keepRestored();
        m_timing->showText(QString::fromStdString(s.timing));
    }
    statusBar()->showMessage(
        tr("Opened the session %1 (%2 positions)").arg(path).arg(c.positions()), 5000);
}

void MainWindow::showCapture(std::shared_ptr<const analysis::LabCapture> capture) {
    // The controls' ranges and the query bar's positions: the capture's.
    m_controls->setCapture(*capture);
    const model::CaptureInfo& info = capture->info;
    m_transfer->setHybrid(info.nLayers, info.linearLayerCount(), info.linearStateElements,
                          info.cacheElementsPerPosition(),
                          QString::fromStdString(info.linearKind()));
    m_query->setCapture(std::move(capture));
}

analysis::Session MainWindow::currentSession() const {
    analysis::Session s;
    s.capture = m_lab->capture();
    s.model = m_lab->modelSpec().toStdString();
    s.prompt = m_prompt->prompt().toStdString();
    s.generated = m_lab->generated().toStdString();
    s.chat = m_lab->chat();
    s.config = m_controls->config();
    s.config.calibration = nullptr;
    s.layer = m_controls->layer();
    s.head = m_controls->head();
    s.view = currentViewName().toStdString(); // a name: the tabs' order may change
    s.measure = analysis::measures()[0].second;
    for (const View& v : m_views)
        v.view->saveTo(s); // the overview's measure, the compared method, …
    const int step = decodeStep(), query = m_lab->queryPosition();
    s.step = step >= 0 && step < s.capture->steps() ? step : -1;
    s.queryPosition = step < 0 && query < s.capture->positions() - 1 ? query : -1;
    s.timing = timingText().toStdString();
    return s;
}

void MainWindow::saveSessionTo(const QString& path) {
    m_lab->exports()->saveSessionTo(path, [this] { return currentSession(); });
}

void MainWindow::redraw() {
    m_redrawTimer->stop();
    if (!m_lab->labCapture())
        return;
    for (View& v : m_views)
        if (v.spec->live) { // the head view: the panels and the other views follow its state
            v.view->invalidate();
            v.view->refresh();
        }
}

void MainWindow::flushRedraw() {
    if (m_redrawTimer->isActive())
        redraw();
    for (View& v : m_views) // the state the last change asked for, drawn now
        if (v.spec->live)
            v.view->flush();
    if (LabView* v = currentView())
        v->flush();
}

void MainWindow::headStateChanged() {
    QStringList fitted;
    const attention::AttentionConfig c = m_lab->fittedConfig(&fitted);
    const analysis::HeadState& h = *m_lab->headState();
    const analysis::LabCapture& shown = *m_lab->shownCapture();
    const model::CaptureInfo& info = shown.info;
    m_stats->showHead(h, c.method);
    m_controls->showTauInEffect(h.tau);
    // As the layer computes it: the capture's indexer key dimension, the indexer method as dense
    // attention on a layer without an indexer.
    if (h.entryRate > 0) // DeepSeek-V4: entries beside the window, each key its own value
        m_transfer->showCompressed(shown.positions(), shown.headDim(), h);
    else
        m_transfer->showTransfer(info.layerConfig(m_lab->labLayer(), c), shown.positions(),
                                 shown.headDim(), static_cast<double>(h.count), info.valueDim(),
                                 info.kvLoraRank > 0 ? info.kvLoraRank + info.qkRopeHeadDim : 0,
                                 info.nKvHeads, fitted);
    // The views draw what is shown; the rest when their tab is opened.
    LabView* shownView = currentView();
    for (View& v : m_views)
        if (!v.spec->live) {
            v.view->invalidate();
            if (v.view == shownView)
                v.view->refresh();
        }
}

void MainWindow::errorChanged(const QString& message) {
    if (!message.isEmpty()) {
        headView()->showMessage(message);
        statusBar()->showMessage(message, 8000);
        return;
    }
    // The error is gone with its cause (a successful export, Chat switched): the head view
    // draws again in place of the message.
    statusBar()->clearMessage();
    if (m_lab->labCapture())
        redraw();
    else
        headView()->showMessage(QString());
}

void MainWindow::setTeachingStep(int step) {
    m_teach->setStep(step);
}

int MainWindow::teachingStep() const {
    return m_teach->step();
}

int MainWindow::decodeStep() const {
    return m_lab->labCapture() ? m_query->decodeStep() : -1;
}

void MainWindow::setDecodeStep(int step) {
    if (const analysis::LabCapture* c = m_lab->labCapture())
        m_query->setPosition(static_cast<int>(c->promptPositions - 1) + step);
    flushRedraw();
}

LabView* MainWindow::currentView() const {
    const int i = m_tabs->currentIndex();
    return i >= 0 && i < static_cast<int>(m_views.size()) ? m_views[static_cast<size_t>(i)].view
                                                          : nullptr;
}

LabView* MainWindow::view(const QString& name) const {
    for (const View& v : m_views)
        if (name == QLatin1String(v.spec->name))
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

QString MainWindow::timingText() const {
    return m_timing->text()->text();
}

widgets::HeadView* MainWindow::headView() const {
    return viewWidget<widgets::HeadView>("head");
}

} // namespace sparqlab::app
