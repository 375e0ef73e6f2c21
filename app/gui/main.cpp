// sparqlab: the SparQ Lab desktop application.

#include "app_options.h"
#include "main_window.h"

#include "attention/runtime_info.h"
#include "sparqlab/version.h"

#include <QApplication>
#include <QTimer>

#include <cstdio>

int main(int argc, char** argv) {
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
    window.resize(options.width, options.height);
    window.show();
    window.openModel(options.model);
    if (!options.screenshot.isEmpty()) {
        // Render once the model is open (or failed) and the window painted, then exit.
        auto* poll = new QTimer(&window);
        QObject::connect(poll, &QTimer::timeout, &window, [&window, &options, poll]() {
            if (window.isLoading())
                return;
            poll->stop();
            QString error;
            if (!window.saveScreenshot(options.screenshot, &error)) {
                std::fprintf(stderr, "error: %s\n", qPrintable(error));
                QApplication::exit(1);
                return;
            }
            QApplication::exit(0);
        });
        poll->start(50);
    }
    return QApplication::exec();
}
