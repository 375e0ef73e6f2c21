#include "app_options.h"

#include "sparqlab/version.h"

#include <QCommandLineParser>

#include <cstdio>

namespace sparqlab::app {

std::optional<int> parseAppOptions(const QStringList& arguments, AppOptions* out) {
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "SparQ Lab: watch SparQ Attention approximate exact attention in a real model."));
    const QCommandLineOption help = parser.addHelpOption();
    const QCommandLineOption version = parser.addVersionOption();
    const QCommandLineOption model(
        QStringLiteral("model"),
        QStringLiteral("Model to open: a folder, a cached hub id, or 'demo' (default)."),
        QStringLiteral("M"), QStringLiteral("demo"));
    const QCommandLineOption screenshot(
        QStringLiteral("screenshot"),
        QStringLiteral("Render the main window to a PNG file and exit."), QStringLiteral("FILE"));
    const QCommandLineOption size(QStringLiteral("size"),
                                  QStringLiteral("Window size for --screenshot, WxH."),
                                  QStringLiteral("WxH"), QStringLiteral("1280x800"));
    parser.addOptions({model, screenshot, size});
    if (!parser.parse(arguments)) {
        std::fprintf(stderr, "error: %s\n", qPrintable(parser.errorText()));
        return 2;
    }
    if (parser.isSet(help)) {
        std::printf("%s", qPrintable(parser.helpText()));
        return 0;
    }
    if (parser.isSet(version)) {
        std::printf("sparqlab %s\n", SPARQLAB_VERSION);
        return 0;
    }
    if (!parser.positionalArguments().isEmpty()) {
        std::fprintf(stderr, "error: unexpected argument '%s'\n",
                     qPrintable(parser.positionalArguments().constFirst()));
        return 2;
    }
    out->model = parser.value(model);
    out->screenshot = parser.value(screenshot);
    const QStringList wh = parser.value(size).split(QLatin1Char('x'));
    bool okW = false, okH = false;
    if (wh.size() == 2) {
        out->width = wh[0].toInt(&okW);
        out->height = wh[1].toInt(&okH);
    }
    if (!okW || !okH || out->width < 320 || out->height < 240 || out->width > 8192 ||
        out->height > 8192) {
        std::fprintf(stderr, "error: --size needs WxH between 320x240 and 8192x8192, got '%s'\n",
                     qPrintable(parser.value(size)));
        return 2;
    }
    return std::nullopt;
}

} // namespace sparqlab::app
