#include "app_options.h"

#include "app/gui/lab_view.h"

#include "attention/attention.h"
#include "attention/method_table.h"
#include "sparqlab/version.h"
#include "widgets/controls_panel.h"

#include <QCommandLineParser>
#include <QFile>

#include <cstdio>

namespace sparqlab::app {

QString readPromptFile(const QString& path, QString* error) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        *error = QStringLiteral("%1: cannot read the prompt: %2").arg(path, f.errorString());
        return {};
    }
    QString prompt = QString::fromUtf8(f.readAll());
    if (prompt.endsWith(QLatin1Char('\n')))
        prompt.chop(prompt.endsWith(QLatin1String("\r\n")) ? 2 : 1);
    return prompt;
}

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
    const QCommandLineOption device(
        QStringLiteral("device"),
        QStringLiteral("Where the model runs: cpu (default) or cuda (File > Run the Model on the "
                       "GPU)."),
        QStringLiteral("D"), QStringLiteral("cpu"));
    const QCommandLineOption screenshot(
        QStringLiteral("screenshot"),
        QStringLiteral("Render the main window to a PNG file and exit."), QStringLiteral("FILE"));
    const QCommandLineOption size(QStringLiteral("size"),
                                  QStringLiteral("Window size for --screenshot, WxH."),
                                  QStringLiteral("WxH"), QStringLiteral("1280x800"));
    const QCommandLineOption promptFile(
        QStringLiteral("prompt-file"),
        QStringLiteral("Run the prompt in FILE once the model is open (without the file's final "
                       "line ending)."),
        QStringLiteral("FILE"));
    const QCommandLineOption layer(QStringLiteral("layer"),
                                   QStringLiteral("Layer to show (a session: as saved)."),
                                   QStringLiteral("L"), QStringLiteral("-1"));
    const QCommandLineOption head(QStringLiteral("head"),
                                  QStringLiteral("Head to show (a session: as saved)."),
                                  QStringLiteral("H"), QStringLiteral("-1"));
    const QCommandLineOption method(
        QStringLiteral("method"),
        QString::fromStdString("The attention method: " + attention::methodNames() + "."),
        QStringLiteral("METHOD"));
    const QCommandLineOption view(QStringLiteral("view"),
                                  QStringLiteral("The view to show: %1.").arg(viewNames()),
                                  QStringLiteral("VIEW"));
    const QCommandLineOption compare(
        QStringLiteral("compare"),
        QStringLiteral("The second method of the compare and timing views."),
        QStringLiteral("METHOD"));
    const QCommandLineOption eval(
        QStringLiteral("eval"),
        QStringLiteral("A trade-off study run before (sparqlab-cli eval's JSON lines) to show "
                       "in the Trade-offs view."),
        QStringLiteral("FILE"));
    const QCommandLineOption generate(
        QStringLiteral("generate"),
        QStringLiteral("Generate N tokens after the prompt and show the decode steps."),
        QStringLiteral("N"), QStringLiteral("0"));
    const QCommandLineOption step(QStringLiteral("step"),
                                  QStringLiteral("The decode step to show (default: the last)."),
                                  QStringLiteral("T"), QStringLiteral("-1"));
    const QCommandLineOption query(
        QStringLiteral("query"),
        QStringLiteral("The position whose query the views show (default: the last)."),
        QStringLiteral("P"), QStringLiteral("-1"));
    parser.addPositionalArgument(QStringLiteral("SESSION"),
                                 QStringLiteral("A session file (File > Save Session) to open; "
                                                "no model is needed."),
                                 QStringLiteral("[SESSION]"));
    const QCommandLineOption teach(
        QStringLiteral("teach"),
        QStringLiteral("Teaching mode at step N (1-3; 4: the retrieval head)."),
        QStringLiteral("N"), QStringLiteral("0"));
    const QCommandLineOption logScores(
        QStringLiteral("log-scores"),
        QStringLiteral(
            "The head view's scores on a logarithmic axis (its \"scores on a log scale\" box)."));
    parser.addOptions({model, device, screenshot, size, promptFile, layer, head, method, view,
                       teach, compare, eval, generate, step, query, logScores});
    // Every parameter of the parameter table, as sparqlab-cli takes it (--r, --k, --page-size,
    // --budget, …); the calibration files are opened from the lab's File menu.
    std::vector<std::pair<const attention::ParamInfo*, QCommandLineOption>> params;
    for (const attention::ParamInfo& p : attention::parameters())
        if (p.kind != attention::ParamKind::File) {
            const QString name = QString::fromUtf8(p.option);
            params.emplace_back(&p, p.kind == attention::ParamKind::Flag
                                        ? QCommandLineOption(name, QString::fromUtf8(p.help))
                                        : QCommandLineOption(name, QString::fromUtf8(p.help),
                                                             QString::fromStdString(p.valueName)));
            parser.addOption(params.back().second);
        }
    if (!parser.parse(arguments)) {
        std::fprintf(stderr, "error: %s\n", qPrintable(parser.errorText()));
        return 2;
    }
    if (parser.isSet(help)) {
        // (--help is answered before a QApplication names the program: name it here)
        std::printf("%s", qPrintable(parser.helpText().replace(QStringLiteral("<executable_name>"),
                                                               QStringLiteral("sparqlab"))));
        return 0;
    }
    if (parser.isSet(version)) {
        std::printf("sparqlab %s\n", SPARQLAB_VERSION);
        return 0;
    }
    if (parser.positionalArguments().size() > 1) {
        std::fprintf(stderr, "error: unexpected argument '%s' (one session file at most)\n",
                     qPrintable(parser.positionalArguments().at(1)));
        return 2;
    }
    if (!parser.positionalArguments().isEmpty())
        out->session = parser.positionalArguments().constFirst();
    out->logScores = parser.isSet(logScores);
    struct IntOpt {
        const QCommandLineOption* opt;
        int* dest;
        int lo, hi;
    };
    for (const IntOpt& o :
         {IntOpt{&layer, &out->layer, -1, 100000}, IntOpt{&head, &out->head, -1, 100000},
          IntOpt{&teach, &out->teach, 0, 4}, IntOpt{&generate, &out->generate, 0, 100000},
          IntOpt{&step, &out->step, -1, 100000}, IntOpt{&query, &out->query, -1, 100000000}}) {
        bool ok = false;
        *o.dest = parser.value(*o.opt).toInt(&ok);
        if (!ok || *o.dest < o.lo || *o.dest > o.hi) {
            std::fprintf(stderr, "error: --%s needs a whole number in %d..%d, got '%s'\n",
                         qPrintable(o.opt->names().constFirst()), o.lo, o.hi,
                         qPrintable(parser.value(*o.opt)));
            return 2;
        }
    }
    for (const auto& [p, opt] : params) {
        if (!parser.isSet(opt))
            continue;
        const std::string v = p->kind == attention::ParamKind::Flag
                                  ? std::string("1")
                                  : parser.value(opt).toStdString();
        try {
            attention::AttentionConfig probe;
            attention::setParamValue(probe, p->id, v);
        } catch (const attention::AttentionError& e) {
            std::fprintf(stderr, "error: --%s %s\n", p->option, e.what());
            return 2;
        }
        out->parameterValues.emplace_back(p->id, v);
    }
    out->promptFile = parser.value(promptFile);
    out->method = parser.value(method);
    if (!out->method.isEmpty() && !attention::findMethod(out->method.toStdString())) {
        std::fprintf(stderr, "error: --method: unknown attention method '%s' (%s)\n",
                     qPrintable(out->method), attention::methodNames().c_str());
        return 2;
    }
    out->view = parser.value(view);
    if (!out->view.isEmpty() && !findView(out->view)) {
        std::fprintf(stderr, "error: --view takes %s, got '%s'\n", qPrintable(viewNames()),
                     qPrintable(out->view));
        return 2;
    }
    out->device = parser.value(device);
    if (out->device != QLatin1String("cpu") && out->device != QLatin1String("cuda")) {
        std::fprintf(stderr, "error: --device takes cpu or cuda, got '%s'\n",
                     qPrintable(out->device));
        return 2;
    }
    out->compare = parser.value(compare);
    if (!out->compare.isEmpty() && !attention::findMethod(out->compare.toStdString())) {
        std::fprintf(stderr, "error: --compare: unknown attention method '%s' (%s)\n",
                     qPrintable(out->compare), attention::methodNames().c_str());
        return 2;
    }
    out->eval = parser.value(eval);
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

std::vector<std::string> applyMethodAndParameters(const AppOptions& options,
                                                  widgets::ControlsPanel& controls) {
    if (!options.method.isEmpty())
        controls.setMethod(attention::parseMethod(options.method.toStdString()));
    if (options.parameterValues.empty())
        return {};
    attention::AttentionConfig cfg = controls.config(); // the method's defaults, then these
    for (const auto& [param, value] : options.parameterValues)
        attention::setParamValue(cfg, param, value);
    controls.setConfig(cfg);
    // What is not taken is said, not dropped in silence: an option the method does not take (as
    // the command line says it), and a value the controls do not hold where the method takes it
    // (MiniMax-M3's block indexer takes no l on its capture; a k beyond the positions). An l
    // above k is k for every method (paramValueInEffect), as the controls hold it.
    const attention::AttentionConfig held = controls.config();
    std::vector<std::string> notes;
    for (const auto& [param, value] : options.parameterValues) {
        const attention::ParamInfo& info = attention::paramInfo(param);
        if (!attention::takes(held.method, param))
            notes.push_back(attention::notTakenNote(param, {held.method}));
        else if (attention::paramValueInEffect(held, param) !=
                 attention::paramValueInEffect(cfg, param))
            notes.push_back(
                "--" + std::string(info.option) +
                (info.kind == attention::ParamKind::Flag ? std::string() : " " + value) +
                ": the lab holds " + attention::paramValueInEffect(held, param) + " for " +
                attention::methodName(held.method) + " here");
    }
    return notes;
}

} // namespace sparqlab::app
