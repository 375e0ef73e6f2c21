// The Trade-offs view (the paper's Fig. A1 study run in the lab's worker, drawn, exported and
// read back) and the figures it draws: their legends clear of the curves.

#include "test_support.h"

#include "analysis/eval_task_table.h"
#include "app/gui/main_window.h"
#include "app/lab/lab.h"
#include "widgets/figure_renderer.h"
#include "widgets/plot_checks.h"
#include "widgets/tradeoffs_view.h"

#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTemporaryDir>
#include <QtTest>

namespace {
/// A figure of line series on axes x and y, named `id` and titled `title`.
sparqlab::analysis::FigureData lineFigure(const std::string& id, const std::string& title,
                                          std::vector<sparqlab::analysis::Series> series) {
    sparqlab::analysis::FigureData f;
    f.id = id;
    f.title = title;
    f.xLabel = "x";
    f.yLabel = "y";
    f.series = std::move(series);
    return f;
}

/// `f` shown in a figure of `size`, exposed; its plot in `plot` (null where it has none).
void showFigure(sparqlab::widgets::FigurePlot& figure, const sparqlab::analysis::FigureData& f,
                QSize size, QWidget*& plot) {
    figure.resize(size);
    figure.showFigure(f);
    figure.show();
    QVERIFY(QTest::qWaitForWindowExposed(&figure));
    plot = nullptr;
    for (QWidget* child : figure.findChildren<QWidget*>())
        if (QByteArray(child->metaObject()->className()) == "QCustomPlot")
            plot = child;
    QVERIFY(plot);
}
} // namespace

class TestTradeoffsView : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void theTradeoffsStudyTakesTheModelsOwnSelection() {
        // A model with its own indexer adds it to the paper's methods while the list is the
        // default; a list the user wrote stays as written.
        sparqlab::widgets::TradeoffsView v;
        auto* methods = v.findChild<QLineEdit*>(QStringLiteral("tradeoffsMethods"));
        QVERIFY(methods);
        const QString paper = QString::fromLatin1(sparqlab::analysis::kPaperMethods);
        QCOMPARE(methods->text(), paper);
        v.setModel(QStringLiteral("dsa"), /*ownSelection=*/true);
        QCOMPARE(methods->text(), paper + QStringLiteral(",indexer"));
        v.setModel(QStringLiteral("demo"), false);
        QCOMPARE(methods->text(), paper);
        methods->setText(QStringLiteral("dense,sparq"));
        v.setModel(QStringLiteral("m3"), true);
        QCOMPARE(methods->text(), QStringLiteral("dense,sparq"));
    }

    void tradeoffsTabRunsTheStudy() {
        // The Trade-offs tab runs `eval` in the worker and draws what it wrote; export writes
        // the figures and the Table 2 layout.
        QTemporaryDir dir;
        qputenv("XDG_CACHE_HOME", dir.filePath(QStringLiteral("cache")).toUtf8());
        sparqlab::app::MainWindow w;
        w.resize(1200, 800);
        w.show();
        w.lab()->openModel(QStringLiteral("demo"));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
        auto* view = w.viewWidget<sparqlab::widgets::TradeoffsView>("tradeoffs");
        sparqlab::widgets::TradeoffRequest r;
        r.task = sparqlab::analysis::EvalTask::Bpc;
        r.dataPath = sparqlab::test::sourcePath(QStringLiteral("tests/data/sotu_2012_excerpt.txt"));
        r.methods = QStringLiteral("dense,sparq");
        r.r = QStringLiteral("8,16");
        r.limit = 1;
        view->setRequest(r);
        w.showView(QStringLiteral("tradeoffs"));
        // Before any result: the study's own axes, not placeholder numbers.
        QVERIFY(view->xLabel().startsWith(QStringLiteral("compression ratio")));
        QCOMPARE(view->yLabel(), QStringLiteral("bits per character"));
        QVERIFY2(view->emptyNote().startsWith(QStringLiteral("No results yet: Run")),
                 qPrintable(view->emptyNote())); // said where the curves will be
        QTest::mouseClick(view->findChild<QPushButton*>(QStringLiteral("tradeoffsRun")),
                          Qt::LeftButton);
        QVERIFY(w.lab()->isBusy());
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 120000);
        QCOMPARE(view->records().size(), size_t{3}); // dense, SparQ r = 8 and 16
        QCOMPARE(view->records()[0].method, std::string("dense"));
        QCOMPARE(view->emptyNote(), QString());
        // What the points and bands are, under the plot (one example each here).
        auto* caption = view->findChild<QLabel*>(QStringLiteral("tradeoffCaption"));
        QVERIFY(caption && caption->isVisible());
        QVERIFY2(caption->text().contains(QStringLiteral("over its 1 example;")) &&
                     caption->text().contains(QStringLiteral("standard error")),
                 qPrintable(caption->text()));
        QString error;
        const QString out = dir.filePath(QStringLiteral("export"));
        QVERIFY2(view->exportTo(out, &error) > 0, qPrintable(error));
        for (const char* f : {"eval_bpc.png", "eval_bpc.svg", "eval_bpc.pdf", "eval_bpc.csv",
                              "table2.md", "table2.csv"})
            QVERIFY2(QFile::exists(QDir(out).filePath(QLatin1String(f))), f);
        // A second Run resumes the file: nothing new to compute, the same records.
        QTest::mouseClick(view->findChild<QPushButton*>(QStringLiteral("tradeoffsRun")),
                          Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 120000);
        QCOMPARE(view->records().size(), size_t{3});
        // Out of the box: no data file given, the repetition task runs on the held-out text
        // the project ships.
        r.task = sparqlab::analysis::EvalTask::Repetition;
        r.dataPath.clear();
        r.r = QStringLiteral("8");
        view->setRequest(r);
        QVERIFY(view->request().dataPath.endsWith(QStringLiteral("eval/sotu-2010-2011.txt")));
        QTest::mouseClick(view->findChild<QPushButton*>(QStringLiteral("tradeoffsRun")),
                          Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 120000);
        QVERIFY(w.lab()->lastError().isEmpty());
        QCOMPARE(view->records().size(), size_t{2}); // dense and SparQ r = 8, one example
        QCOMPARE(view->records()[0].data, std::string("sotu-2010-2011.txt"));
        // RULER with speed measured: the lines carry the engine's speed-up (dense's is 1), and
        // the plot draws the score against it.
        r.task = sparqlab::analysis::EvalTask::RulerNiahSingle1;
        r.methods = QStringLiteral("dense,sparq");
        r.k = QStringLiteral("64");
        r.measureSpeed = true;
        view->setRequest(r);
        view->findChild<QComboBox*>(QStringLiteral("tradeoffsAgainst"))->setCurrentIndex(1);
        QTest::mouseClick(view->findChild<QPushButton*>(QStringLiteral("tradeoffsRun")),
                          Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 120000);
        QVERIFY2(w.lab()->lastError().isEmpty(), qPrintable(w.lab()->lastError()));
        QCOMPARE(view->records().size(), size_t{2});
        QCOMPARE(view->records()[0].speedup, 1.0);
        QVERIFY(view->records()[1].speedup > 0);
        QCOMPARE(view->records()[1].length, int64_t{1024}); // the demo's context
        QVERIFY(view->plottedPoints() >= 2);                // SparQ, dense and the front
        // That study opens in a window without a model (Open results…, the app's --eval):
        // read in a worker, its task chosen, a line saying what the file holds.
        const QString results = view->request().outPath;
        sparqlab::app::MainWindow fresh;
        fresh.show();
        auto* other = fresh.viewWidget<sparqlab::widgets::TradeoffsView>("tradeoffs");
        auto* status = other->findChild<QLabel*>(QStringLiteral("tradeoffsStatus"));
        other->openResults(results);
        QTRY_COMPARE_WITH_TIMEOUT(other->records().size(), size_t{2}, 30000);
        QVERIFY(other->request().task == sparqlab::analysis::EvalTask::RulerNiahSingle1);
        QVERIFY(other->plottedPoints() >= 2);
        QVERIFY2(status->text().contains(QStringLiteral("2 lines of niah_single_1")),
                 qPrintable(status->text()));
        // A file whose first lines are of a task this version does not know: the first task
        // it knows is drawn.
        QFile in(results);
        QVERIFY(in.open(QIODevice::ReadOnly));
        const QByteArray lines = in.readAll();
        const QString mixed = dir.filePath(QStringLiteral("mixed.jsonl"));
        QFile m(mixed);
        QVERIFY(m.open(QIODevice::WriteOnly));
        m.write(lines.left(lines.indexOf('\n') + 1).replace("\"niah_single_1\"", "\"mystery\""));
        m.write(lines);
        m.close();
        other->openResults(mixed);
        QTRY_COMPARE_WITH_TIMEOUT(other->records().size(), size_t{3}, 30000);
        QVERIFY(other->request().task == sparqlab::analysis::EvalTask::RulerNiahSingle1);
        QVERIFY(other->plottedPoints() >= 2);
        // A file that is not a study's: one line naming it, and the records shown stay.
        const QString bad = dir.filePath(QStringLiteral("bad.jsonl"));
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"task\": 3}\n");
        f.close();
        other->openResults(bad);
        QTRY_VERIFY_WITH_TIMEOUT(!status->text().startsWith(QStringLiteral("Reading")), 30000);
        QVERIFY2(status->text().contains(QStringLiteral("b00020")) &&
                     status->text().contains(bad + QStringLiteral(" line 1")),
                 qPrintable(status->text()));
        QCOMPARE(other->records().size(), size_t{3});
        // Each model's study has its own results file (another model's lines would count as
        // done): the demo's is named for it, another folder named demo has another, and
        // another model clears the demo's curves.
        QVERIFY2(QFileInfo(results).fileName().startsWith(QStringLiteral("tradeoffs-demo-")),
                 qPrintable(results));
        view->setModel(dir.filePath(QStringLiteral("demo")));
        QVERIFY(view->records().empty() && view->plottedPoints() == 0);
        const QString another = view->request().outPath;
        QVERIFY2(another != results &&
                     QFileInfo(another).fileName().startsWith(QStringLiteral("tradeoffs-demo-")),
                 qPrintable(another));
    }

    void figureLegendGoesWhereNoCurvePasses() {
        // A figure whose legend belongs bottom right (FigureData::legendBottom), with one curve
        // along the foot and one rising to the top right: only the top left is clear, and the
        // legend goes there, at every size the figure is drawn.
        sparqlab::analysis::Series flat{
            "flat", {}, {}, sparqlab::analysis::Series::Style::Line, {}},
            rising{"rising", {}, {}, sparqlab::analysis::Series::Style::Line, {}};
        for (int i = 0; i <= 20; ++i) {
            flat.x.push_back(i);
            flat.y.push_back(0);
            rising.x.push_back(i);
            rising.y.push_back(i);
        }
        sparqlab::analysis::FigureData f =
            lineFigure("legend_test", "a curve through the legend's corner", {flat, rising});
        f.legendBottom = true;
        sparqlab::widgets::FigurePlot figure;
        QWidget* plot = nullptr;
        showFigure(figure, f, QSize(640, 420), plot);
        if (QTest::currentTestFailed())
            return;
        QTRY_VERIFY(plot->height() > 200);
        QTest::qWait(50);
        QCOMPARE(sparqlab::widgets::style::curveUnderLegend(plot), 0);
        figure.resize(900, 300);
        QTRY_VERIFY(plot->width() > 800);
        QTest::qWait(50);
        QCOMPARE(sparqlab::widgets::style::curveUnderLegend(plot), 0);
        // A message in the figure's place shows no legend (its box stayed, empty).
        figure.showMessage(QStringLiteral("no figure"));
        QCOMPARE(sparqlab::widgets::style::legendPlace(plot), QString());
    }

    void figureLegendLeavesTheAxesWhereNoCornerIsClear() {
        // Eight lines fanning from every height at the left to the opposite one at the right:
        // each corner of the axes has a curve through it, and the legend leaves the axes (the
        // recall figure's 19 methods covered the top right ones): right of them in a wide
        // figure, below them in a tall narrow one (the lab's Paper figures tab), whichever
        // leaves the axes more room.
        std::vector<sparqlab::analysis::Series> fan;
        for (int i = 0; i < 8; ++i)
            fan.push_back({"line " + std::to_string(i),
                           {0, 20},
                           {3.0 * i, 21.0 - 3.0 * i},
                           sparqlab::analysis::Series::Style::Line,
                           {}});
        const sparqlab::analysis::FigureData f =
            lineFigure("legend_outside_test", "curves through every corner", std::move(fan));
        for (const auto& [size, place] : {std::pair{QSize(1200, 360), QStringLiteral("right")},
                                          std::pair{QSize(330, 640), QStringLiteral("below")}}) {
            sparqlab::widgets::FigurePlot figure;
            QWidget* plot = nullptr;
            showFigure(figure, f, size, plot);
            if (QTest::currentTestFailed())
                return;
            QTRY_COMPARE(sparqlab::widgets::style::legendPlace(plot), place);
            // Every line is drawn in full, between the axes' ends.
            const auto [lower, upper] = sparqlab::widgets::style::xRange(plot);
            QVERIFY2(lower <= 0 && upper >= 20,
                     qPrintable(QStringLiteral("%1 … %2").arg(lower).arg(upper)));
        }
    }

    void tradeoffsLegendCoversNoCurve() {
        // The shipped repetition study (six methods) at the lecture's 1280×800: its legend clear
        // of every curve, in the window and at another size.
        sparqlab::app::MainWindow w;
        w.resize(1280, 800);
        w.show();
        auto* view = w.viewWidget<sparqlab::widgets::TradeoffsView>("tradeoffs");
        w.showView(QStringLiteral("tradeoffs"));
        view->openResults(
            sparqlab::test::sourcePath(QStringLiteral("docs/eval/demo-repetition.jsonl")));
        QTRY_VERIFY_WITH_TIMEOUT(!view->records().empty(), 30000);
        QVERIFY(view->plottedPoints() > 20);
        QWidget* plot = view->plotWidget();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTRY_VERIFY(plot->height() > 200);
        QCOMPARE(sparqlab::widgets::style::curveUnderLegend(plot), 0);
        w.resize(1920, 1080);
        QTRY_VERIFY(plot->width() > 900);
        QTest::qWait(50);
        QCOMPARE(sparqlab::widgets::style::curveUnderLegend(plot), 0);
    }
};

QTEST_MAIN(TestTradeoffsView)
#include "test_tradeoffs_view.moc"
