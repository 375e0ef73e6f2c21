#include "main_window.h"

#include "attention/runtime_info.h"
#include "capture/model.h"
#include "sparqlab/version.h"
#include "widgets/panels.h"

#include <QAction>
#include <QFileDialog>
#include <QFileInfo>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QPixmap>
#include <QSaveFile>
#include <QSplitter>
#include <QStatusBar>
#include <QtConcurrent/QtConcurrent>

namespace sparqlab::app {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_model(new widgets::ModelPanel), m_prompt(new widgets::PromptPanel),
      m_attention(new widgets::AttentionView), m_stats(new widgets::StatsPanel),
      m_timing(new widgets::TimingPanel), m_loader(new QFutureWatcher<LoadResult>(this)) {
    connect(m_loader, &QFutureWatcher<LoadResult>::finished, this, &MainWindow::modelLoaded);
    setWindowTitle(QStringLiteral(SPARQLAB_NAME));
    setObjectName(QStringLiteral("mainWindow"));

    auto* left = new QSplitter(Qt::Vertical);
    left->addWidget(m_model);
    left->addWidget(m_prompt);
    left->setStretchFactor(1, 1);

    auto* right = new QSplitter(Qt::Vertical);
    right->addWidget(m_stats);
    right->addWidget(m_timing);

    auto* main = new QSplitter(Qt::Horizontal);
    main->addWidget(left);
    main->addWidget(m_attention);
    main->addWidget(right);
    main->setStretchFactor(0, 2);
    main->setStretchFactor(1, 5);
    main->setStretchFactor(2, 2);
    main->setSizes({300, 700, 300});
    setCentralWidget(main);

    buildMenus();
    const std::string warning = attention::slowBlasWarning();
    statusBar()->showMessage(
        QString::fromStdString(warning.empty() ? attention::runtimeSummary() : warning));
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* open = file->addAction(tr("Open &Model…"), this, &MainWindow::openModelDialog);
    open->setShortcut(QKeySequence::Open);
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->setObjectName(QStringLiteral("viewMenu"));
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
    return m_loader->isRunning();
}

void MainWindow::openModel(const QString& spec) {
    if (m_loader->isRunning()) {
        statusBar()->showMessage(tr("Still opening the previous model"), 3000);
        return;
    }
    m_model->showLoading(spec);
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
    const LoadResult r = m_loader->result();
    if (!r.model) {
        m_model->showError(r.error);
        statusBar()->showMessage(tr("Could not open %1").arg(r.spec), 5000);
        return;
    }
    m_current = r.model;
    const capture::ModelConfig& c = m_current->config();
    const double mb = static_cast<double>(c.parameterCount()) * 4.0 / (1 << 20); // float32
    const QString arch = QString::fromStdString(c.architectureName);
    const QString name = r.spec == QLatin1String("demo") ? tr("Demo model (%1)").arg(arch) : arch;
    m_model->showModel(
        name, {{tr("Layers"), QString::number(c.nLayers)},
               {tr("Query heads"), QString::number(c.nHeads)},
               {tr("KV heads"), QString::number(c.nKvHeads)},
               {tr("Head dimension"), QString::number(c.headDim)},
               {tr("Context"), QString::number(c.maxPositions)},
               {tr("Parameters"), QLocale().toString(static_cast<qlonglong>(c.parameterCount()))},
               {tr("Memory (float32)"), tr("%1 MB").arg(mb, 0, 'f', 1)},
               {tr("Tokenizer"), m_current->hasTokenizer() ? tr("yes") : tr("none (ids only)")}});
    statusBar()->showMessage(tr("Opened %1").arg(QString::fromStdString(m_current->folder())),
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
