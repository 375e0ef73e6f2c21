// sparqlab: the SparQ Lab desktop application.

#include "app_options.h"
#include "lab_menus.h"
#include "main_window.h"

#include "attention/runtime_info.h"
#include "sparqlab/version.h"
#include "widgets/compare_view.h"
#include "widgets/controls_panel.h"
#include "widgets/head_view.h"
#include "widgets/panels.h"
#include "widgets/timing_view.h"
#include "widgets/tradeoffs_view.h"

#include <QApplication>
#include <QFile>
#include <QGuiApplication>
#include <QScreen>
#include <QTimer>
#include <algorithm>

#include <cstdio>

int main(int argc, char** argv) {
    // --help and --version answer before any window system is touched (no display needed).
    for (int i = 1; i < argc; ++i) {
        const QByteArray a(argv[i]);
        if (a == "--help" || a == "-h" || a == "-?" || a == "--help-all" || a == "--version" ||
            a == "-v") {
            QStringList args;
            for (int j = 0; j < argc; ++j)
                args << QString::fromLocal8Bit(argv[j]);
            sparqlab::app::AppOptions ignored;
            return sparqlab::app::parseAppOptions(args, &ignored).value_or(0);
        }
    }
    sparqlab::attention::restartWithPassiveOpenMP(argv);
    sparqlab::attention::initRuntime();
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("SparQ Lab"));
    QApplication::setOrganizationName(QStringLiteral("SparQ Lab"));
    QApplication::setApplicationVersion(QStringLiteral(SPARQLAB_VERSION));

    sparqlab::app::AppOptions options;
    if (const auto exitCode = sparqlab::app::parseAppOptions(QApplication::arguments(), &options))
        return *exitCode;
    if (const std::string w = sparqlab::attention::slowBlasWarning(); !w.empty())
        std::fprintf(stderr, "%s\n", w.c_str());

    sparqlab::app::MainWindow window;
    // What the command line sets is not the user's choice: it is not kept for the next start.
    window.setRememberSettings(options.screenshot.isEmpty() && options.promptFile.isEmpty() &&
                               options.parameterValues.empty() && options.method.isEmpty());
    QSize size(options.width, options.height);
    if (options.screenshot.isEmpty()) // on a screen: within it, title bar and panel included
        if (const QScreen* screen = QGuiApplication::primaryScreen())
            size = size.boundedTo(screen->availableGeometry().size() - QSize(0, 48));
    window.resize(size);
    window.show();
    // A session opens without a model (its capture is all the lab needs).
    if (const QString why = window.lab()->setDevice(options.device); !why.isEmpty()) {
        std::fprintf(stderr, "error: %s\n", qPrintable(why));
        return 1;
    }
    if (options.session.isEmpty())
        window.lab()->openModel(options.model);
    else
        window.lab()->openSession(options.session);
    // What the command line asks of the lab (--teach, --view, --method, …) is applied after the
    // first run, with or without --screenshot.
    const bool labAsked = options.teach > 0 || !options.view.isEmpty() ||
                          !options.method.isEmpty() || options.layer >= 0 || options.head >= 0 ||
                          !options.compare.isEmpty() || !options.eval.isEmpty() ||
                          options.generate > 0 || options.step >= 0 || options.query >= 0 ||
                          !options.parameterValues.empty();
    if (options.promptFile.isEmpty() && options.screenshot.isEmpty() && !labAsked) {
        // A first start shows SparQ at work: once the model is open its prompt is run (the
        // default passage is long enough that k < S), not left as empty plots.
        if (options.session.isEmpty()) {
            auto* open = new QTimer(&window);
            QObject::connect(open, &QTimer::timeout, &window, [&window, open]() {
                if (window.lab()->isLoading())
                    return;
                open->stop();
                open->deleteLater();
                const QString prompt = window.promptPanel()->prompt();
                if (window.promptPanel()->runEnabled() && !window.lab()->isBusy() &&
                    !prompt.trimmed().isEmpty())
                    window.runPrompt(prompt, /*firstScreen=*/true);
            });
            open->start(50);
        }
        return QApplication::exec();
    }

    // Automation: open the model, run the prompt, set the view, render, exit.
    QString prompt;
    if (!options.promptFile.isEmpty()) {
        QString error;
        prompt = sparqlab::app::readPromptFile(options.promptFile, &error);
        if (!error.isEmpty()) {
            std::fprintf(stderr, "error: %s\n", qPrintable(error));
            return 1;
        }
    }
    enum class Stage { Loading, Running, Done };
    Stage stage = Stage::Loading;
    QString evalError; // --eval's file could not be read: said, and the exit status 1
    if (!options.eval.isEmpty()) {
        QObject::connect(window.viewWidget<sparqlab::widgets::TradeoffsView>("tradeoffs"),
                         &sparqlab::widgets::TradeoffsView::openFailed, &window,
                         [&evalError](const QString& error) { evalError = error; });
        if (options.view.isEmpty()) // what --eval asks to see
            options.view = QStringLiteral("tradeoffs");
        // Read in the view's worker while the model opens: the file needs no model.
        window.viewWidget<sparqlab::widgets::TradeoffsView>("tradeoffs")->openResults(options.eval);
    }
    auto* poll = new QTimer(&window);
    QObject::connect(poll, &QTimer::timeout, &window, [&]() {
        if (stage == Stage::Loading) {
            if (window.lab()->isLoading())
                return;
            if (prompt.isEmpty() && options.session.isEmpty() && window.promptPanel()->runEnabled())
                prompt = window.promptPanel()->prompt(); // (the first screen, as a start shows)
            if (!prompt.trimmed().isEmpty() && options.session.isEmpty()) {
                window.promptPanel()->setPrompt(prompt);
                if (options.generate > 0)
                    window.generate(options.generate);
                else // a head of its own choice unless one is asked for
                    window.runPrompt(prompt, options.layer < 0 && options.head < 0);
            }
            stage = Stage::Running;
            return;
        }
        if (stage == Stage::Running) {
            if (window.lab()->isBusy())
                return;
            if (!options.session.isEmpty()) { // as saved, but for what is asked for
                if (options.layer >= 0 || options.head >= 0)
                    window.controls()->setLayerHead(
                        options.layer >= 0 ? options.layer : window.controls()->layer(),
                        options.head >= 0 ? options.head : window.controls()->head());
                if (!options.view.isEmpty())
                    window.showView(options.view);
                stage = Stage::Done;
                return;
            }
            auto* c = window.controls();
            for (const std::string& note : sparqlab::app::applyMethodAndParameters(options, *c))
                std::fprintf(stderr, "note: %s\n", note.c_str());
            if (options.layer >= 0 || options.head >= 0)
                c->setLayerHead(std::max(options.layer, 0), std::max(options.head, 0));
            if (!options.compare.isEmpty()) { // the second method of Compare and Timing
                const auto second = sparqlab::attention::parseMethod(options.compare.toStdString());
                window.viewWidget<sparqlab::widgets::CompareView>("compare")->setSecond(second);
                window.viewWidget<sparqlab::widgets::TimingCurveView>("timing")->setSecond(second);
            }
            if (options.step >= 0) {
                const sparqlab::analysis::LabCapture* cap = window.lab()->labCapture();
                if (cap && options.step > cap->steps()) // (the model ended its text early)
                    std::fprintf(stderr,
                                 "note: --step %d: the generation has %lld decode steps (the "
                                 "model ended its text); showing the last\n",
                                 options.step, static_cast<long long>(cap->steps()));
                window.setDecodeStep(options.step);
            }
            if (options.query >= 0)
                window.lab()->setQueryPosition(options.query);
            window.showView(options.view.isEmpty() ? QStringLiteral("head") : options.view);
            window.setTeachingStep(options.teach);
            window.headView()->setLogScores(options.logScores);
            stage = Stage::Done;
            return;
        }
        // (Teaching page 4 runs its prompt; the timing tab measures its curve; a view computes.)
        const auto busy = [&window]() {
            const sparqlab::app::LabView* shown = window.view(window.currentViewName());
            return window.lab()->isTimingPending() || window.lab()->isBusy() ||
                   window.view(QStringLiteral("timing"))->busy() || (shown && shown->busy());
        };
        if (busy())
            return;
        window.flushRedraw();
        if (busy())
            return; // the redraw started work (the timing tab's measurement): drawn when done
        poll->stop();
        if (!window.lab()->lastError().isEmpty())
            std::fprintf(stderr, "error: %s\n", qPrintable(window.lab()->lastError()));
        if (!evalError.isEmpty())
            std::fprintf(stderr, "error: %s\n", qPrintable(evalError));
        if (options.screenshot.isEmpty()) // --prompt-file alone: the window stays, for the user
            return;
        QString error;
        if (!sparqlab::app::saveScreenshot(window, options.screenshot, &error)) {
            std::fprintf(stderr, "error: %s\n", qPrintable(error));
            QApplication::exit(1);
            return;
        }
        QApplication::exit(window.lab()->lastError().isEmpty() && evalError.isEmpty() ? 0 : 1);
    });
    poll->start(50);
    return QApplication::exec();
}
