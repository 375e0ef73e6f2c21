// sparqlab-cli figures: the paper's figures from a capture (CONTRACTS.md §2), drawn offscreen
// with QCustomPlot in PNG, SVG and PDF, each with a CSV of the plotted numbers beside it.

#include "commands.h"

#include "analysis/ruler_table.h"

#include "analysis/bench_figures.h"
#include "analysis/eval_figures.h"
#include "analysis/figures.h"
#include "analysis/stats_run.h"
#include "capture/capture_file.h"
#include "widgets/figure_renderer.h"

#include <QApplication>
#include <QDir>
#include <QSaveFile>

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace sparqlab::cli {

namespace {

QtMessageHandler g_qtMessages = nullptr;

/// Qt's messages as before, less its warning that XDG_RUNTIME_DIR is unset: on a machine without
/// a session (ssh, a batch job) QStandardPaths says it falls back to a folder of its own, which
/// drawing files does not need; the user has nothing to do about it.
void withoutRuntimeDirWarning(QtMsgType type, const QMessageLogContext& context,
                              const QString& message) {
    if (type == QtWarningMsg &&
        message.startsWith(QLatin1String("QStandardPaths: XDG_RUNTIME_DIR not set")))
        return;
    g_qtMessages(type, context, message);
}

} // namespace

int runFigures(const std::vector<std::string>& argv) {
    const Args a(argv, {"capture", "bench", "eval", "out", "format", "layer", "width", "height"},
                 {});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (int(a.has("capture")) + int(a.has("bench")) + int(a.has("eval")) != 1)
        throw UsageError(
            "give one of --capture cap.h5, --bench bench.jsonl or --eval results.jsonl");
    if (a.has("layer") && !a.has("capture")) // (it was ignored)
        throw UsageError("--layer goes with --capture (Fig. 4c's layer)");
    const QString out = QString::fromStdString(a.required("out"));
    std::vector<std::string> formats;
    std::stringstream ss(a.get("format").value_or("png,svg,pdf"));
    for (std::string f; std::getline(ss, f, ',');) {
        if (f != "png" && f != "svg" && f != "pdf")
            throw UsageError("--format takes png, svg and pdf, got '" + f + "'");
        formats.push_back(f);
    }
    const int width = static_cast<int>(a.integer("width").value_or(800));
    const int height = static_cast<int>(a.integer("height").value_or(520));
    if (width < 200 || height < 150 || width > 8000 || height > 8000)
        throw UsageError("--width and --height must lie in 200..8000 and 150..8000");
    std::vector<analysis::FigureData> figures;
    std::vector<std::pair<std::string, std::string>> tables; // file name, text
    if (const auto bench = a.get("bench")) {
        figures = analysis::benchFigures(analysis::readBenchJson(*bench));
    } else if (const auto eval = a.get("eval")) {
        const std::vector<analysis::EvalRecord> records = analysis::readEvalJsonl(*eval);
        figures = analysis::evalFigures(records);
        tables = {{"table2.csv", analysis::evalTableCsv(records)},
                  {"table2.md", analysis::evalTableMarkdown(records)}};
        // RULER's tasks: the table of tasks × lengths per method, and its figures.
        if (const std::vector<analysis::FigureData> ruler = analysis::rulerFigures(records);
            !ruler.empty()) {
            figures.insert(figures.end(), ruler.begin(), ruler.end());
            tables.emplace_back("ruler.csv", analysis::rulerTableCsv(records));
            tables.emplace_back("ruler.md", analysis::rulerTableMarkdown(records));
        }
    } else {
        const std::string capturePath = a.required("capture");
        const model::CaptureInfo info = capture::CaptureReader(capturePath).info();
        const int64_t layer = a.integer("layer").value_or(info.nLayers / 2);
        if (layer < 0 || layer >= info.nLayers)
            throw UsageError("--layer " + std::to_string(layer) + " is outside 0.." +
                             std::to_string(info.nLayers - 1) + " (" + capturePath + " has " +
                             std::to_string(info.nLayers) + " layers)");
        analysis::StatsOptions o = analysis::statsDefaultsFor(info);
        o.capturePath = capturePath;
        o.recall = analysis::defaultRecallConfigs();
        ProgressBar bar("figures");
        o.job = bar.job();
        const analysis::StatsResult stats = analysis::runStats(o);
        figures = analysis::paperFigures(stats, info, o, layer);
    }
    // The data first (its errors are the user's), then drawing. Widgets need a QApplication;
    // without a display the offscreen platform draws as well.
    if (!std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") &&
        !std::getenv("QT_QPA_PLATFORM"))
        setenv("QT_QPA_PLATFORM", "offscreen", 1);
    int qargc = 1;
    char name[] = "sparqlab-cli";
    char* qargv[] = {name, nullptr};
    g_qtMessages = qInstallMessageHandler(withoutRuntimeDirWarning);
    QApplication app(qargc, qargv);

    if (!QDir().mkpath(out))
        throw std::runtime_error(out.toStdString() + ": cannot create the folder");
    int written = 0;
    for (const analysis::FigureData& f : figures) {
        const QString stem = QDir(out).filePath(QString::fromStdString(f.id));
        for (const std::string& fmt : formats) {
            QString error;
            const QString path = stem + "." + QString::fromStdString(fmt);
            if (!widgets::saveFigure(f, path, width, height, &error))
                throw std::runtime_error(error.toStdString());
            std::printf("%s\n", qPrintable(path)); // each file written, one a line
            ++written;
        }
        QSaveFile csv(stem + ".csv");
        const std::string text = analysis::figureCsv(f);
        if (!csv.open(QIODevice::WriteOnly) ||
            csv.write(text.data(), static_cast<qint64>(text.size())) < 0 || !csv.commit())
            throw std::runtime_error((stem + ".csv").toStdString() + ": cannot write");
        std::printf("%s\n", qPrintable(stem + ".csv"));
    }
    for (const auto& [name, text] : tables) { // the Table 2 layout beside the figures
        const QString path = QDir(out).filePath(QString::fromStdString(name));
        QSaveFile f(path);
        if (!f.open(QIODevice::WriteOnly) ||
            f.write(text.data(), static_cast<qint64>(text.size())) < 0 || !f.commit())
            throw std::runtime_error(path.toStdString() + ": cannot write");
        std::printf("%s\n", qPrintable(path));
    }
    std::fprintf(
        stderr, "figures: %zu figures (%d pictures, %zu CSVs)%s in %s\n", figures.size(), written,
        figures.size(),
        tables.empty() ? "" : (" and " + std::to_string(tables.size()) + " table files").c_str(),
        qPrintable(out));
    return 0;
}

} // namespace sparqlab::cli
