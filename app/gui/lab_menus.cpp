// The lab window's menus and what File writes from the window (lab_menus.h).

#include "app/gui/lab_menus.h"

#include "app/gui/main_window.h"
#include "app/lab/lab_export.h"
#include "attention/method_spec.h"
#include "attention/runtime_info.h"
#include "base/atomic_file.h"
#include "model/model.h"
#include "sparqlab/version.h"
#include "widgets/controls_panel.h"
#include "widgets/figure_renderer.h"

#include <QAction>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QPixmap>
#include <QSettings>
#include <QSignalBlocker>
#include <QStatusBar>

namespace sparqlab::app {

namespace {

void showAbout(QWidget* window) {
    QMessageBox::about(
        window, QObject::tr("About SparQ Lab"),
        QObject::tr("<b>SparQ Lab %1</b><p>A laboratory for SparQ Attention "
                    "(Ribar et al., ICML 2024).</p><p>%2</p>")
            .arg(QStringLiteral(SPARQLAB_VERSION),
                 QString::fromStdString(attention::runtimeSummary()).toHtmlEscaped()));
}

void exportPlots(MainWindow& w) {
    const QString base =
        QFileDialog::getSaveFileName(&w, QObject::tr("Export plots"), QString(),
                                     QObject::tr("PNG (*.png);;SVG (*.svg);;PDF (*.pdf)"));
    if (base.isEmpty())
        return;
    QString error;
    const QStringList written = exportShownPlots(w, base, &error);
    if (!error.isEmpty())
        w.lab()->fail(QObject::tr("error: %1").arg(error));
    else
        w.statusBar()->showMessage(QObject::tr("Wrote %1 plots of the %2 view next to %3")
                                       .arg(written.size())
                                       .arg(w.currentViewName(), base),
                                   5000);
}

} // namespace

void addLabMenus(MainWindow& w) {
    Lab* lab = w.lab();
    QMainWindow* window = &w;
    QMenu* file = w.menuBar()->addMenu(QObject::tr("&File"));
    QAction* open = file->addAction(QObject::tr("Open &Model…"), window, [window, lab] {
        const QString dir = QFileDialog::getExistingDirectory(
            window, QObject::tr("Open a Hugging Face model folder"));
        if (!dir.isEmpty())
            lab->openModel(dir);
    });
    open->setShortcut(QKeySequence::Open);
    file->addAction(QObject::tr("Open the &Demo Model"), window,
                    [lab] { lab->openModel(QStringLiteral("demo")); });
    QMenu* hub = file->addMenu(QObject::tr("Open from the Hugging Face &Cache"));
    QObject::connect(hub, &QMenu::aboutToShow, window, [lab, hub] {
        hub->clear();
        const std::vector<std::string> ids = model::cachedHubModels();
        for (const std::string& id : ids) {
            const QString spec = QString::fromStdString(id);
            hub->addAction(spec, lab, [lab, spec] { lab->openModel(spec); });
        }
        if (ids.empty())
            hub->addAction(QObject::tr("(no models in ~/.cache/huggingface/hub)"))
                ->setEnabled(false);
    });
    QMenu* recent = file->addMenu(QObject::tr("Open &Recent"));
    QObject::connect(recent, &QMenu::aboutToShow, window, [lab, recent] {
        recent->clear();
        const QStringList list = QSettings().value(QStringLiteral("recentModels")).toStringList();
        for (const QString& spec : list)
            recent->addAction(spec, lab, [lab, spec] { lab->openModel(spec); });
        if (list.isEmpty())
            recent->addAction(QObject::tr("(none)"))->setEnabled(false);
    });
    file->addSeparator();
    QAction* openSession = file->addAction(QObject::tr("Open &Session…"), window, [window, lab] {
        const QString path =
            QFileDialog::getOpenFileName(window, QObject::tr("Open session"), QString(),
                                         QObject::tr("SparQ Lab session (*.h5)"));
        if (!path.isEmpty())
            lab->openSession(path);
    });
    openSession->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    QAction* saveSession = file->addAction(QObject::tr("&Save Session…"), window, [&w, lab] {
        if (!lab->labCapture()) {
            lab->fail(QObject::tr("error: nothing to save: run a prompt first"));
            return;
        }
        const QString path = QFileDialog::getSaveFileName(
            &w, QObject::tr("Save session"), QString(), QObject::tr("SparQ Lab session (*.h5)"));
        if (!path.isEmpty())
            w.saveSessionTo(path);
    });
    saveSession->setShortcut(QKeySequence::Save);
    file->addSeparator();
    file->addAction(QObject::tr("Load &Calibration (Loki Basis, Double Sparsity Channels)…"),
                    window, [window, lab] {
                        const QString path = QFileDialog::getOpenFileName(
                            window, QObject::tr("Load a Calibration (sparqlab-cli calibrate)"),
                            QString(), QObject::tr("Calibration (*.h5);;All files (*)"));
                        if (!path.isEmpty())
                            lab->loadCalibration(path);
                    });
    file->addAction(QObject::tr("Calibrate on the Prompt &Itself"), window, [&w] {
        for (const attention::MethodSpec* spec : attention::methodSpecs())
            if (spec->calibrator)
                w.controls()->setCalibration(spec->info.id, nullptr);
        w.statusBar()->showMessage(
            QObject::tr("Loki and Double Sparsity calibrate on the prompt itself"), 5000);
    });
    file->addAction(QObject::tr("Export &Capture (HDF5)…"), window, [window, lab] {
        if (!lab->labCapture()) {
            lab->fail(QObject::tr("error: nothing to export: run a prompt first"));
            return;
        }
        const QString path = QFileDialog::getSaveFileName(
            window, QObject::tr("Export capture"), QString(), QObject::tr("HDF5 capture (*.h5)"));
        if (!path.isEmpty())
            lab->exports()->exportCaptureTo(path);
    });
    file->addAction(QObject::tr("Export &Plots (PNG/SVG/PDF)…"), window, [&w] { exportPlots(w); });
    file->addAction(QObject::tr("Export the Paper's &Figures…"), window, [window, lab] {
        const QString dir =
            QFileDialog::getExistingDirectory(window, QObject::tr("Folder for the figures"));
        if (!dir.isEmpty())
            lab->exports()->exportFigureSetTo(dir);
    });
    file->addSeparator();
    // Where the model runs: the GPU where a CUDA libtorch sees one, else greyed out with the
    // reason (a CPU libtorch, or no visible device) as its tooltip.
    QAction* gpu = file->addAction(QObject::tr("Run the Model on the &GPU (CUDA)"));
    gpu->setObjectName(QStringLiteral("gpuAction"));
    gpu->setCheckable(true);
    gpu->setChecked(lab->device() == QLatin1String("cuda"));
    try {
        attention::requireDevice("cuda");
        gpu->setToolTip(QObject::tr("Open and run the model on the GPU: weights in their stored "
                                    "dtype, the KV cache and the decode kernels there"));
    } catch (const std::exception& e) {
        gpu->setEnabled(false);
        gpu->setToolTip(QString::fromUtf8(e.what()));
    }
    QObject::connect(gpu, &QAction::toggled, window, [lab, gpu](bool on) {
        const QString why = lab->setDevice(on ? QStringLiteral("cuda") : QStringLiteral("cpu"));
        if (!why.isEmpty()) {
            const QSignalBlocker block(gpu);
            gpu->setChecked(false);
            lab->fail(why);
        }
    });
    QObject::connect(lab, &Lab::deviceChanged, gpu, [gpu](const QString& device) {
        const QSignalBlocker block(gpu);
        gpu->setChecked(device == QLatin1String("cuda"));
    });
    file->setToolTipsVisible(true);
    file->addSeparator();
    QAction* quit = file->addAction(QObject::tr("&Quit"), window, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* view = w.menuBar()->addMenu(QObject::tr("&View"));
    view->setObjectName(QStringLiteral("viewMenu"));
    for (const ViewSpec* spec : viewSpecs())
        if (spec->menu) {
            const QString name = QString::fromUtf8(spec->name);
            view->addAction(QObject::tr(spec->menu), window, [&w, name] { w.showView(name); });
        }
    QAction* teach = view->addAction(QObject::tr("&Teaching Mode"), window,
                                     [&w] { w.setTeachingStep(w.teachingStep() ? 0 : 1); });
    teach->setShortcut(QKeySequence(Qt::Key_F5));
    // The columns beside the views, each hidden to give a projector's width to the view.
    view->addSeparator();
    const struct {
        MainWindow::Side side;
        const char* label;
        const char* name;
        Qt::Key key;
    } sides[] = {
        {MainWindow::Side::Left, "&Model and Prompt", "showLeftColumn", Qt::Key_F7},
        {MainWindow::Side::Right, "&Controls and Readouts", "showRightColumn", Qt::Key_F8}};
    for (const auto& s : sides) {
        QAction* a = view->addAction(QObject::tr(s.label));
        a->setObjectName(QLatin1String(s.name));
        a->setCheckable(true);
        a->setChecked(w.sideShown(s.side));
        a->setShortcut(QKeySequence(s.key));
        const MainWindow::Side side = s.side;
        QObject::connect(a, &QAction::toggled, window,
                         [&w, side](bool on) { w.setSideShown(side, on); });
    }
    QMenu* help = w.menuBar()->addMenu(QObject::tr("&Help"));
    help->addAction(QObject::tr("&About SparQ Lab"), window, [window] { showAbout(window); });
}

QStringList exportShownPlots(MainWindow& w, const QString& base, QString* error) {
    // What is on screen: the plots of the tab shown, as drawn, named STEM-VIEW-PLOT.EXT.
    w.flushRedraw();
    const QFileInfo fi(base);
    const QString ext = fi.suffix().isEmpty() ? QStringLiteral("png") : fi.suffix().toLower();
    const QString stem = fi.path() + QLatin1Char('/') + fi.completeBaseName() + QLatin1Char('-') +
                         w.currentViewName();
    LabView* v = w.view(w.currentViewName());
    if (!v) {
        *error = QObject::tr("%1: no view is shown").arg(base);
        return {};
    }
    return widgets::exportShownPlots(v->widget(), stem, ext, error);
}

bool saveScreenshot(QWidget& w, const QString& path, QString* error) {
    const QPixmap pixmap = w.grab();
    try {
        base::writeAtomically(path.toStdString(), [&](const std::string& tmp) {
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
