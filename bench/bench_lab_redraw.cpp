// How fast the lab redraws after a slider change (issue 7): the head view (SparQ's three steps
// for one head) and the layer × head overview grids, on a model and a prompt of ~1000 tokens.
// A benchmark, not a test. Prints one JSON object.
//
//   bench_lab_redraw [MODEL] [PROMPT_FILE] [REPEATS]      (offscreen or under xvfb-run)

#include "analysis/lab.h"
#include "app/gui/main_window.h"
#include "attention/runtime_info.h"
#include "widgets/lab_views.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QFile>

#include <algorithm>
#include <cstdio>
#include <vector>

using namespace sparqlab;

namespace {
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
} // namespace

int main(int argc, char** argv) {
    attention::restartWithPassiveOpenMP(argv);
    attention::initRuntime();
    QApplication app(argc, argv);
    const QString model = argc > 1 ? QString::fromLocal8Bit(argv[1]) : QStringLiteral("demo");
    QString prompt;
    if (argc > 2) {
        QFile f(QString::fromLocal8Bit(argv[2]));
        if (!f.open(QIODevice::ReadOnly)) {
            std::fprintf(stderr, "error: %s: cannot read the prompt\n", argv[2]);
            return 1;
        }
        prompt = QString::fromUtf8(f.readAll());
    } else {
        for (int i = 0; i < 60; ++i)
            prompt += QStringLiteral("The Congress shall have power to lay and collect taxes, "
                                     "duties, imposts and excises. ");
    }
    const int repeats = argc > 3 ? std::max(1, atoi(argv[3])) : 20;
    app::MainWindow w;
    w.resize(1500, 950);
    w.show();
    w.openModel(model);
    while (w.isLoading())
        QApplication::processEvents(QEventLoop::WaitForMoreEvents, 50);
    w.runPrompt(prompt);
    while (w.isBusy())
        QApplication::processEvents(QEventLoop::WaitForMoreEvents, 50);
    const analysis::LabCapture* cap = w.labCapture();
    if (!cap) {
        std::fprintf(stderr, "error: %s\n", qPrintable(w.lastError()));
        return 1;
    }
    std::vector<double> headMs, overviewMs, fullMs, computeMs;
    for (int i = 0; i < repeats; ++i) {
        w.controls()->blockSignals(true);
        w.controls()->setR(8 + (i % 4) * 8);
        w.controls()->blockSignals(false);
        const attention::AttentionConfig c = w.controls()->config();
        QElapsedTimer t;
        t.start();
        const analysis::HeadState h = analysis::headState(*cap, 1, 1, c);
        computeMs.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
        w.headView()->showHead(h, cap->tokens);
        QApplication::processEvents(); // paint
        headMs.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
        t.restart();
        w.overviewView()->showOverview(analysis::overview(*cap, c), static_cast<int>(c.r),
                                       static_cast<int>(c.k));
        QApplication::processEvents();
        overviewMs.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
        t.restart();
        w.controls()->setR(8 + ((i + 1) % 4) * 8); // what a slider does: everything redraws
        QApplication::processEvents();
        fullMs.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
    }
    std::printf("{\"positions\":%lld,\"layers\":%lld,\"heads\":%lld,\"repeats\":%d,"
                "\"head_view_ms\":%.2f,\"head_compute_ms\":%.2f,\"overview_ms\":%.2f,\"slider_"
                "change_ms\":%.2f}\n",
                static_cast<long long>(cap->positions()), static_cast<long long>(cap->layers()),
                static_cast<long long>(cap->heads()), repeats, median(headMs), median(computeMs),
                median(overviewMs), median(fullMs));
    return 0;
}
