// The main window opens offscreen with its panels, and --screenshot writes a non-blank PNG.

#include "test_support.h"

#include "analysis/lab.h"
#include "app/gui/app_options.h"
#include "app/gui/lab_menus.h"
#include "app/gui/lab_view.h"
#include "app/gui/main_window.h"
#include "app/lab/lab.h"
#include "attention/runtime_info.h"
#include "model/resources.h"
#include "widgets/compare_view.h"
#include "widgets/controls_panel.h"
#include "widgets/head_view.h"
#include "widgets/overview_view.h"
#include "widgets/panels.h"
#include "widgets/plot_checks.h"
#include "widgets/transfer_panel.h"

#include <ATen/ATen.h>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QProcess>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <utility>

/// The rich text of the labels inside a panel.
static QString panelText(QWidget* panel) {
    QString all;
    for (QLabel* l : panel->findChildren<QLabel*>())
        all += l->text() + QLatin1Char('\n');
    return all;
}

class TestMainWindow : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void panelsExist() {
        sparqlab::app::MainWindow w;
        w.resize(1200, 800);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        // Statistics and the step's timing are the two tabs of the column's foot.
        auto* readouts = w.findChild<QTabWidget*>(QStringLiteral("readoutTabs"));
        QVERIFY(readouts && readouts->count() == 2);
        for (const char* name : {"modelPanel", "promptPanel", "headView", "controlsPanel",
                                 "transferPanel", "statsPanel", "timingPanel"}) {
            QWidget* panel = w.findChild<QWidget*>(QLatin1String(name));
            QVERIFY2(panel, name);
            const int tab = readouts->indexOf(panel);
            if (tab >= 0)
                readouts->setCurrentIndex(tab);
            QVERIFY2(panel->isVisible() && panel->width() > 100 && panel->height() > 50, name);
        }
        QVERIFY(w.findChild<QWidget*>(QStringLiteral("step2Plot")));
        // Run stays disabled until a model is open.
        auto* run = w.findChild<QPushButton*>(QStringLiteral("runButton"));
        QVERIFY(run && !run->isEnabled());
        QStringList menus;
        for (QAction* a : w.menuBar()->actions())
            menus << a->text().remove(QLatin1Char('&'));
        QCOMPARE(menus, (QStringList{QStringLiteral("File"), QStringLiteral("View"),
                                     QStringLiteral("Help")}));
    }

    void sideColumnsHideFromTheViewMenu() {
        // A lecturer hides the columns beside the view (F7, F8) to give it a projector's width;
        // shown again, each is as it was.
        sparqlab::app::MainWindow w;
        sparqlab::app::addLabMenus(w);
        w.resize(1280, 800);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* tabs = w.findChild<QTabWidget*>(QStringLiteral("viewTabs"));
        QWidget* left = w.findChild<QWidget*>(QStringLiteral("leftColumn"));
        QWidget* right = w.findChild<QWidget*>(QStringLiteral("rightColumn"));
        auto* showLeft = w.findChild<QAction*>(QStringLiteral("showLeftColumn"));
        auto* showRight = w.findChild<QAction*>(QStringLiteral("showRightColumn"));
        QVERIFY(tabs && left && right && showLeft && showRight);
        QVERIFY(showLeft->isChecked() && showRight->isChecked());
        QVERIFY(left->isVisible() && right->isVisible());
        const int both = tabs->width(), leftWidth = left->width(), rightWidth = right->width();
        showLeft->trigger();
        QVERIFY(!left->isVisible() && right->isVisible());
        QTRY_VERIFY(tabs->width() >= both + leftWidth);
        showRight->trigger();
        QVERIFY(!right->isVisible());
        QTRY_VERIFY(tabs->width() >= both + leftWidth + rightWidth);
        QVERIFY(tabs->width() <= w.width());
        showLeft->trigger();
        showRight->trigger();
        QVERIFY(left->isVisible() && right->isVisible());
        QVERIFY(showLeft->isChecked() && showRight->isChecked());
        QTRY_COMPARE(tabs->width(), both);
        QCOMPARE(left->width(), leftWidth);
        QCOMPARE(right->width(), rightWidth);
    }

    void aShortWindowScrollsItsViewRatherThanOverlap() {
        // At 1280×800 under 125 % scaling (1024×640 of the window's own pixels), a teaching page
        // leaves the head view less height than its parts need: they are scrolled, each whole,
        // instead of drawn over one another (Step 3's text lay over the scores plot).
        sparqlab::app::MainWindow w;
        w.resize(1024, 640);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        w.lab()->openModel(QStringLiteral("demo"));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
        w.runPrompt(QStringLiteral("Mr. Speaker, Mr. Vice President, Members of Congress, "
                                   "distinguished guests, and fellow Americans."));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        for (const int page : {2, 3, 0}) {
            w.setTeachingStep(page);
            w.flushRedraw();
            QTest::qWait(20);
            // The step presented is in sight (page 3's Step 3 lay below the fold).
            if (page == 2 || page == 3) {
                QWidget* step =
                    w.findChild<QWidget*>(QLatin1String(page == 2 ? "step2Plot" : "step3Summary"));
                QWidget* viewport = nullptr; // (the head view's scroll area's)
                for (QWidget* a = w.headView(); a && !viewport; a = a->parentWidget())
                    if (auto* scroll = qobject_cast<QScrollArea*>(a))
                        viewport = scroll->viewport();
                QVERIFY(viewport);
                const QRect at(step->mapTo(viewport, QPoint(0, 0)), step->size());
                QVERIFY2(viewport->rect().contains(at),
                         qPrintable(QStringLiteral("page %1: the step at %2..%3 of 0..%4")
                                        .arg(page)
                                        .arg(at.top())
                                        .arg(at.bottom())
                                        .arg(viewport->height())));
            }
            QWidget* body = w.findChild<QWidget*>(QStringLiteral("step3Summary"))->parentWidget();
            QList<QWidget*> shown;
            for (QWidget* c : body->findChildren<QWidget*>(Qt::FindDirectChildrenOnly))
                if (c->isVisible())
                    shown << c;
            QVERIFY(shown.size() >= 5);
            for (int i = 0; i < shown.size(); ++i)
                for (int j = i + 1; j < shown.size(); ++j)
                    QVERIFY2(
                        !shown[i]->geometry().intersects(shown[j]->geometry()),
                        qPrintable(QStringLiteral("page %1: %2 and %3 overlap")
                                       .arg(page)
                                       .arg(QLatin1String(shown[i]->metaObject()->className()),
                                            QLatin1String(shown[j]->metaObject()->className()))));
            QVERIFY2(w.height() <= 640,
                     qPrintable(QStringLiteral("the window is %1 px tall").arg(w.height())));
        }
        w.setTeachingStep(0);
    }

    void theControlsKeepTheTablesRules() {
        // The controls bound their rows by the parameter table's rules, not rules of their own:
        // SnapKV's window stops at k, the local window at k (the user's value back when k
        // grows), the pooling kernel is odd; what they give passes the command line's checks.
        namespace att = sparqlab::attention;
        sparqlab::widgets::ControlsPanel c;
        c.show();
        c.setLimits(4, 4, 64, 200);
        c.setMethod(att::Method::SnapKV);
        auto* window = c.findChild<QSpinBox*>(QStringLiteral("windowBox"));
        auto* kernel = c.findChild<QSpinBox*>(QStringLiteral("kernelBox"));
        QVERIFY(window && kernel);
        window->setValue(48);
        c.setK(16);
        QCOMPARE(window->maximum(), 16);
        QCOMPARE(c.config().snapWindow, int64_t{16});
        c.config().validateFor(64); // (throws where a rule is broken)
        c.setK(100);
        QCOMPARE(window->maximum(), 100);
        QCOMPARE(window->value(), 16);      // (a spin box keeps what it shows)
        c.setMethod(att::Method::RocketKV); // no pair of window and k: the whole range
        c.setK(8);
        QVERIFY(window->maximum() > 100);
        // An even kernel typed becomes odd when the edit ends.
        c.setMethod(att::Method::SnapKV);
        c.setK(64);
        kernel->setFocus();
        kernel->selectAll();
        QTest::keyClicks(kernel, QStringLiteral("8"));
        QTest::keyClick(kernel, Qt::Key_Return);
        QCOMPARE(kernel->value() % 2, 1);
        QCOMPARE(c.config().kernel % 2, int64_t{1});
        c.config().validateFor(64);
        // The local window: above k it stops at k, and comes back when k grows.
        c.setMethod(att::Method::H2O);
        c.setK(64);
        c.setLocal(40);
        c.setK(16);
        QCOMPARE(c.config().effectiveLocal(), int64_t{16});
        c.setK(64);
        QCOMPARE(c.config().effectiveLocal(), int64_t{40});
    }

    void theControlsFollowTheCapturesIndexer() {
        // A capture's indexer sets the indexer's key dimension; a block indexer's (MiniMax-M3)
        // own local blocks take l's place: its row is hidden and no l is given, even one set.
        namespace att = sparqlab::attention;
        sparqlab::model::CaptureInfo info;
        info.nLayers = 1;
        info.nHeads = 4;
        info.nKvHeads = 2;
        info.headDim = 8;
        info.attnScale = 1.0 / std::sqrt(8.0);
        info.indexHeadDim = 32;
        info.indexHeads = 2;
        info.indexTopK = 2;
        sparqlab::model::CaptureExample e;
        e.tokenIds = at::arange(20, at::kLong);
        e.qPositions = at::arange(20, at::kLong);
        e.q = at::randn({1, 4, 20, 8});
        e.k = at::randn({1, 2, 20, 8});
        e.v = at::randn({1, 2, 20, 8});
        sparqlab::widgets::ControlsPanel c;
        c.show();
        c.setMethod(att::Method::Indexer);
        c.setLocal(5); // (as --local or a session would)
        // The indexer stays chosen as the captures change: a DSA-like one, MiniMax-M3's, again.
        for (const bool blocks : {false, true, false}) {
            info.indexBlockSize = blocks ? 16 : 0;
            info.indexLocalBlocks = blocks ? 1 : 0;
            info.layerIndexed = blocks ? std::vector<int64_t>{1} : std::vector<int64_t>{};
            e.indexScores = blocks ? at::randn({1, 2, 20, 2}) : at::randn({1, 20, 20});
            c.setCapture(*sparqlab::analysis::LabCapture::from(e, info));
            QCOMPARE(c.config().method, att::Method::Indexer);
            QCOMPARE(c.config().integer(att::Param::IndexDim), int64_t{32});
            QCOMPARE(c.isShown(att::Param::Local), !blocks);
            QCOMPARE(c.config().local.has_value(), !blocks);
        }
        c.setMethod(att::Method::H2O);
        QVERIFY(c.isShown(att::Param::Local));
        // `sparqlab --method indexer --local 4 --k 12` on MiniMax-M3's capture: k is held, l is
        // said not to be, in one line; so is a k beyond the capture's 20 positions.
        info.indexBlockSize = 16;
        info.indexLocalBlocks = 1;
        info.layerIndexed = {1};
        e.indexScores = at::randn({1, 2, 20, 2});
        c.setCapture(*sparqlab::analysis::LabCapture::from(e, info));
        sparqlab::app::AppOptions o;
        QVERIFY(!sparqlab::app::parseAppOptions(
            {QStringLiteral("sparqlab"), QStringLiteral("--method"), QStringLiteral("indexer"),
             QStringLiteral("--local"), QStringLiteral("4"), QStringLiteral("--k"),
             QStringLiteral("12")},
            &o));
        std::vector<std::string> notes = sparqlab::app::applyMethodAndParameters(o, c);
        QCOMPARE(c.config().k, int64_t{12});
        QCOMPARE(notes.size(), size_t{1});
        QCOMPARE(notes[0], std::string("--local 4: the lab holds 0 for indexer here"));
        o.parameterValues = {{att::Param::K, "40"}};
        notes = sparqlab::app::applyMethodAndParameters(o, c);
        QCOMPARE(notes, std::vector<std::string>{"--k 40: the lab holds 20 for indexer here"});
        // An option the method does not take: as the command line says it.
        o.parameterValues = {{att::Param::Sink, "8"}};
        QCOMPARE(
            sparqlab::app::applyMethodAndParameters(o, c),
            std::vector<std::string>{att::notTakenNote(att::Param::Sink, {att::Method::Indexer})});
        // Ordinary SparQ: a fixed τ, l above k (which is k), no mean value: nothing to say.
        o = {};
        QVERIFY(!sparqlab::app::parseAppOptions(
            {QStringLiteral("sparqlab"), QStringLiteral("--method"), QStringLiteral("sparq"),
             QStringLiteral("--r"), QStringLiteral("4"), QStringLiteral("--k"), QStringLiteral("8"),
             QStringLiteral("--local"), QStringLiteral("12"), QStringLiteral("--tau"),
             QStringLiteral("2.5"), QStringLiteral("--no-mean-value")},
            &o));
        notes = sparqlab::app::applyMethodAndParameters(o, c);
        QVERIFY2(notes.empty(), notes.empty() ? "" : notes[0].c_str());
        o.parameterValues = {{att::Param::Local, "4"}};
        o.method = QStringLiteral("h2o"); // where l has its row, nothing to say
        QVERIFY(sparqlab::app::applyMethodAndParameters(o, c).empty());
        QCOMPARE(c.config().local.value_or(-1), int64_t{4});
    }

    void theTransferPanelNamesAHybridsLayers() {
        // A hybrid's transfer line names its linear layers' kind and what share of a step's
        // cache traffic selection acts on: 1 attention layer of 8 elements per position at
        // S = 99 reads 800, 3 Mamba-2 layers read and write 2 × 3 × 100: 800 / 1,400 = 57.1%.
        sparqlab::widgets::TransferPanel t;
        t.setHybrid(1, 3, 100, 8, QStringLiteral("Mamba-2"));
        sparqlab::attention::AttentionConfig dense;
        t.showTransfer(dense, 99, 16);
        const QString text = t.text()->text();
        QVERIFY2(text.contains(QStringLiteral("3 Mamba-2 layers read and write 600 state")),
                 qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("acts on <b>57.1%</b>")), qPrintable(text));
    }

    void theTransferPanelReadsACompressedLayer() {
        // A DeepSeek-V4 CSA layer's head as HeadState counts it (3 entries of 4 positions and a
        // window, 7 keys seen; SparQ 300 elements, dense 500, the model's own 250): the panel
        // names the head's method and formula and the two ratios, 300 / 500 and 300 / 250.
        sparqlab::analysis::HeadState h;
        h.method = sparqlab::attention::Method::Sparq;
        h.entries = 3;
        h.entryRate = 4;
        h.entryTopK = 1;
        h.keysSeen = 7;
        h.modelChosen = {0, 5, 6};
        h.transfer = 300;
        h.denseTransfer = 500;
        h.modelTransfer = 250;
        h.modelIndexerCounted = true;
        sparqlab::widgets::TransferPanel t;
        t.showCompressed(16, 8, h);
        const QString text = t.text()->text();
        for (const char* part : {"3 compressed entries (one per 4 positions)", "<b>7</b> keys",
                                 "dense over them: <b>500</b>",
                                 "SparQ (S·r + 2·k·d + 4·d): <b>300</b>, 0.600 of dense",
                                 "the indexer's key of each entry, then 3 keys",
                                 "<b>250</b>; SparQ reads <b>1.20×</b>"})
            QVERIFY2(text.contains(QString::fromUtf8(part)), qPrintable(text));
        h.modelIndexerCounted = false; // a capture of before entry_index_dim
        t.showCompressed(16, 8, h);
        QVERIFY2(t.text()->text().contains(QStringLiteral("does not record the indexer's")),
                 qPrintable(t.text()->text()));
    }

    /// A random model of `config` with the demo's tokenizer, opened in `w` and run on the
    /// default prompt.
    static void openRandomModel(sparqlab::app::MainWindow& w, const QTemporaryDir& dir,
                                const char* config) {
        const QString cfgPath = dir.filePath(QStringLiteral("config.json"));
        QVERIFY(sparqlab::test::writeFile(cfgPath, config));
        const QString model = dir.filePath(QStringLiteral("model"));
        const auto made = sparqlab::test::runCli(
            {"init-model", "--config", cfgPath, "--out", model, "--seed", "1", "--tokenizer",
             QString::fromStdString(sparqlab::model::resourcePath("demo-model/tokenizer.json"))});
        QVERIFY2(made.exitCode == 0, qPrintable(made.err));
        w.resize(1280, 800);
        w.show();
        w.lab()->openModel(model);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
        w.runPrompt(sparqlab::widgets::PromptPanel::defaultPrompt(), /*firstScreen=*/true);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        w.flushRedraw();
        QVERIFY2(w.lab()->lastError().isEmpty(), qPrintable(w.lab()->lastError()));
    }

    void aHybridsLayersAreNamedAsTheModelNumbersThem() {
        // A Nemotron-H of one-mixer blocks (Mamba-2, experts, NoPE attention, an MLP; random
        // weights, the demo's tokenizer): the model panel counts each kind of block, the first
        // screen's note names the captured layer by its model layer as the Layer control does,
        // and the transfer line counts only the Mamba-2 blocks' state.
        QTemporaryDir dir;
        sparqlab::app::MainWindow w;
        openRandomModel(w, dir, R"({
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": 4096,
  "hidden_size": 64, "intermediate_size": 96, "hybrid_override_pattern": "ME*M-*",
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "max_position_embeddings": 1024, "mamba_num_heads": 4, "mamba_head_dim": 16,
  "ssm_state_size": 16, "n_groups": 2, "chunk_size": 64, "n_routed_experts": 4,
  "num_experts_per_tok": 2, "moe_intermediate_size": 32,
  "moe_shared_expert_intermediate_size": 32, "dtype": "float32"})");
        const QString panel = panelText(w.findChild<QWidget*>(QStringLiteral("modelPanel")));
        QVERIFY2(panel.contains(QStringLiteral("2 MLP, 2 Mamba-2, 2 attention")),
                 qPrintable(panel));
        auto* note = w.findChild<QLabel*>(QStringLiteral("headNote"));
        const int layer = w.controls()->layer();
        QVERIFY(note && note->isVisible());
        QVERIFY2(note->text().contains(QStringLiteral("Layer %1 (model layer %2), head")
                                           .arg(layer)
                                           .arg(layer == 0 ? 2 : 5)),
                 qPrintable(note->text()));
        const QString transfer = w.findChild<sparqlab::widgets::TransferPanel*>()->text()->text();
        QVERIFY2(transfer.contains(QStringLiteral("2 Mamba-2 layers read and write")),
                 qPrintable(transfer));
        // The overview's rows are the attention blocks, labelled by their model layer.
        auto* overview = w.viewWidget<sparqlab::widgets::OverviewView>("overview");
        w.showView(QStringLiteral("overview"));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        w.flushRedraw();
        QTRY_COMPARE_WITH_TIMEOUT(overview->layerLabels(),
                                  (QStringList{QStringLiteral("2"), QStringLiteral("5")}), 30000);
        // Counts of positions on whole numbers, however narrow their range.
        overview->setMeasure(1, sparqlab::analysis::Measure::KMass90);
        w.flushRedraw();
        for (const QString& label : overview->scaleLabels(1))
            QVERIFY2(!label.contains(QLatin1Char('.')), qPrintable(label));
    }

    void aParallelHybridsLayersAreAllCaptured() {
        // A Falcon-H1 (attention beside Mamba-2 in each of 3 layers): every layer is captured, so
        // neither the Layer control nor the note names a "model layer" and the overview has a row
        // for each layer; the statistics say the attention is with Mamba-2, and the transfer
        // line counts every layer's state.
        QTemporaryDir dir;
        sparqlab::app::MainWindow w;
        openRandomModel(w, dir, R"({
  "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "vocab_size": 4096,
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "max_position_embeddings": 1024, "mamba_d_ssm": 64, "mamba_n_heads": 4,
  "mamba_d_state": 16, "mamba_chunk_size": 64, "key_multiplier": 0.39, "dtype": "float32"})");
        const QString panel = panelText(w.findChild<QWidget*>(QStringLiteral("modelPanel")));
        QVERIFY2(panel.contains(QStringLiteral("3 attention + Mamba-2")), qPrintable(panel));
        auto* note = w.findChild<QLabel*>(QStringLiteral("headNote"));
        QVERIFY(note && note->isVisible());
        QVERIFY2(note->text().contains(QStringLiteral("Layer %1, head").arg(w.controls()->layer())),
                 qPrintable(note->text()));
        auto* layerBox = w.findChild<QSpinBox*>(QStringLiteral("layerBox"));
        QVERIFY(layerBox && !layerBox->text().contains(QStringLiteral("model layer")));
        auto* stats = w.findChild<QTableWidget*>(QStringLiteral("statsTable"));
        QVERIFY(stats &&
                !stats->findItems(QStringLiteral("this layer: with Mamba-2"), Qt::MatchExactly)
                     .isEmpty());
        const QString transfer = w.findChild<sparqlab::widgets::TransferPanel*>()->text()->text();
        QVERIFY2(transfer.contains(QStringLiteral("3 Mamba-2 layers read and write")),
                 qPrintable(transfer));
        auto* overview = w.viewWidget<sparqlab::widgets::OverviewView>("overview");
        w.showView(QStringLiteral("overview"));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        w.flushRedraw();
        QTRY_COMPARE_WITH_TIMEOUT(
            overview->layerLabels(),
            (QStringList{QStringLiteral("0"), QStringLiteral("1"), QStringLiteral("2")}), 30000);
    }

    void theLabTakesEveryParameterOfTheTable() {
        // `sparqlab` takes every parameter of the table as sparqlab-cli does, from the table
        // (--page-size was refused before: the lab wrote --r, --k and --local by hand), and the
        // controls hold what was given.
        namespace att = sparqlab::attention;
        sparqlab::app::AppOptions o;
        QVERIFY(!sparqlab::app::parseAppOptions(
            {QStringLiteral("sparqlab"), QStringLiteral("--method"), QStringLiteral("quest"),
             QStringLiteral("--page-size"), QStringLiteral("32"), QStringLiteral("--r"),
             QStringLiteral("8"), QStringLiteral("--k"), QStringLiteral("48")},
            &o));
        QCOMPARE(o.method, QStringLiteral("quest"));
        const std::vector<std::pair<att::Param, std::string>> given{
            {att::Param::R, "8"}, {att::Param::K, "48"}, {att::Param::PageSize, "32"}};
        QVERIFY(o.parameterValues == given); // in the table's order
        sparqlab::app::MainWindow w;
        auto* c = w.controls();
        sparqlab::app::applyMethodAndParameters(o, *c);
        QCOMPARE(c->config().pageSize, int64_t{32});
        QCOMPARE(c->config().k, int64_t{48});
        QCOMPARE(c->config().method, att::Method::Quest);
        for (const att::ParamInfo& p : att::parameters()) { // each option exists, each checked
            if (p.kind == att::ParamKind::File)
                continue;
            QStringList args{QStringLiteral("sparqlab"),
                             QStringLiteral("--") + QString::fromUtf8(p.option)};
            if (p.kind != att::ParamKind::Flag)
                args << QString::fromStdString(att::paramValue(att::AttentionConfig{}, p.id));
            sparqlab::app::AppOptions one;
            QVERIFY2(!sparqlab::app::parseAppOptions(args, &one), p.option);
            const std::string value =
                p.kind == att::ParamKind::Flag ? "1" : args.last().toStdString();
            QVERIFY2(one.parameterValues ==
                         (std::vector<std::pair<att::Param, std::string>>{{p.id, value}}),
                     p.option);
        }
    }

    /// File > Run the Model on the GPU: where no CUDA device is usable it is greyed out with the
    /// one-line reason, the lab stays on the CPU, and `sparqlab --device cuda` exits with that
    /// line.
    void theGpuChoiceSaysWhyItIsOff() {
        if (sparqlab::attention::cudaUsable())
            QSKIP(
                "a CUDA device is usable here: the choice is enabled (test_model_device runs it)");
        sparqlab::app::MainWindow w;
        QAction* gpu = w.findChild<QAction*>(QStringLiteral("gpuAction"));
        QVERIFY(gpu);
        QVERIFY(gpu->isCheckable() && !gpu->isChecked() && !gpu->isEnabled());
        QVERIFY2(gpu->toolTip().startsWith(QLatin1String("--device cuda: ")),
                 qPrintable(gpu->toolTip()));
        QCOMPARE(w.lab()->setDevice(QStringLiteral("cuda")), gpu->toolTip());
        QCOMPARE(w.lab()->device(), QStringLiteral("cpu"));
        QVERIFY(w.lab()->setDevice(QStringLiteral("cpu")).isEmpty());
        QProcess p;
        p.start(sparqlab::test::guiPath(),
                {QStringLiteral("--device"), QStringLiteral("cuda"), QStringLiteral("--screenshot"),
                 QDir::temp().filePath(QStringLiteral("x.png"))});
        QVERIFY(p.waitForFinished(60000));
        const QString err = QString::fromUtf8(p.readAllStandardError()).trimmed();
        QCOMPARE(p.exitCode(), 1);
        QVERIFY2(err.split(QLatin1Char('\n')).contains(QStringLiteral("error: ") + gpu->toolTip()),
                 qPrintable(err));
    }

    void aPromptFileLosesOnlyItsFinalLineEnding() {
        // --prompt-file: the file's last line ending is an editor's, not the prompt's (after it
        // the demo model ends its text at once); the text before it stays as written.
        QTemporaryDir dir;
        QString error;
        for (const auto& [bytes, prompt] :
             {std::pair{QByteArray("state of the\n"), QStringLiteral("state of the")},
              {QByteArray("state of the\r\n"), QStringLiteral("state of the")},
              {QByteArray("a\n\n"), QStringLiteral("a\n")},
              {QByteArray("  no ending "), QStringLiteral("  no ending ")},
              {QByteArray("caf\xc3\xa9\n"), QStringLiteral("caf\u00e9")}}) {
            const QString path = dir.filePath(QStringLiteral("p.txt"));
            sparqlab::test::writeFile(path, bytes);
            QCOMPARE(sparqlab::app::readPromptFile(path, &error), prompt);
            QVERIFY(error.isEmpty());
        }
        const QString missing = dir.filePath(QStringLiteral("missing.txt"));
        QVERIFY(sparqlab::app::readPromptFile(missing, &error).isEmpty());
        QVERIFY2(error.startsWith(missing + QStringLiteral(": cannot read the prompt: ")) &&
                     !error.contains(QLatin1Char('\n')),
                 qPrintable(error));
    }

    void helpAndVersionNeedNoDisplay() {
        // `sparqlab --help` and `--version` on a machine without a display (no DISPLAY, no
        // platform plugin asked for): they answer, and nothing tries to open a window.
        for (const QString& flag : {QStringLiteral("--help"), QStringLiteral("--version")}) {
            QProcess p;
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            env.remove(QStringLiteral("DISPLAY"));
            env.remove(QStringLiteral("WAYLAND_DISPLAY"));
            env.remove(QStringLiteral("QT_QPA_PLATFORM"));
            p.setProcessEnvironment(env);
            p.start(sparqlab::test::guiPath(), {flag});
            QVERIFY(p.waitForFinished(60000));
            const QString out = QString::fromUtf8(p.readAllStandardOutput());
            QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0,
                     qPrintable(QString::fromUtf8(p.readAllStandardError())));
            QVERIFY2(flag == QLatin1String("--help")
                         ? out.contains(QStringLiteral("--model")) &&
                               out.startsWith(QStringLiteral("Usage: sparqlab [options]"))
                         : out.startsWith(QStringLiteral("sparqlab ")),
                     qPrintable(out));
        }
    }

    void opensASessionFromTheCommandLine() {
        // `sparqlab FILE`: a session made from a capture opens without a model and renders;
        // a file that is not one is a one-line error naming it.
        QTemporaryDir dir;
        const QString cap = dir.filePath(QStringLiteral("cap.h5"));
        const QString session = dir.filePath(QStringLiteral("s.h5"));
        auto r =
            sparqlab::test::runCli({"capture", "--model", "demo", "--ids",
                                    "5,6,7,8,9,10,11,12,13,14", "--all-queries", "--out", cap});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        r = sparqlab::test::runCli({"session", "--capture", cap, "--out", session, "--method",
                                    "sparq", "--r", "8", "--k", "4", "--layer", "1", "--head",
                                    "2"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        auto gui = [&](const QStringList& args, QString* err) {
            QProcess p;
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
            p.setProcessEnvironment(env);
            p.start(sparqlab::test::guiPath(), args);
            if (!p.waitForFinished(120000))
                return -1;
            *err = QString::fromUtf8(p.readAllStandardError());
            return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
        };
        QString err;
        const QString shot = dir.filePath(QStringLiteral("shot.png"));
        QCOMPARE(gui({session, QStringLiteral("--screenshot"), shot, QStringLiteral("--view"),
                      QStringLiteral("compare")},
                     &err),
                 0);
        QVERIFY2(QFileInfo(shot).size() > 10000, qPrintable(err));
        // A method's own parameters from the method table (METHODS3.md's ShadowKV): taken when
        // in range, refused in one line naming the option when not.
        QFile::remove(shot);
        QCOMPARE(
            gui({session, QStringLiteral("--method"), QStringLiteral("shadowkv"),
                 QStringLiteral("--budget"), QStringLiteral("32"), QStringLiteral("--chunk-size"),
                 QStringLiteral("4"), QStringLiteral("--screenshot"), shot},
                &err),
            0);
        QVERIFY2(QFileInfo(shot).size() > 10000, qPrintable(err));
        QCOMPARE(gui({session, QStringLiteral("--method"), QStringLiteral("shadowkv"),
                      QStringLiteral("--budget"), QStringLiteral("-4"),
                      QStringLiteral("--screenshot"), shot},
                     &err),
                 2);
        QVERIFY2(err.count(QStringLiteral("error: ")) == 1 &&
                     err.contains(QStringLiteral("error: --budget")) &&
                     err.contains(QStringLiteral("at least 0")),
                 qPrintable(err));
        const QString bad = dir.filePath(QStringLiteral("bad.h5"));
        QVERIFY(sparqlab::test::writeFile(bad, QByteArray("not an HDF5 file\n")));
        QCOMPARE(gui({bad, QStringLiteral("--screenshot"), shot}, &err), 1);
        QStringList lines;
        for (const QString& l : err.split(QLatin1Char('\n'), Qt::SkipEmptyParts))
            if (l.startsWith(QStringLiteral("error: ")))
                lines << l;
        QCOMPARE(lines.size(), 1);
        QVERIFY2(lines[0].contains(QStringLiteral("bad.h5")), qPrintable(err));
    }

    void opensAModelWithoutBlocking() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf/llama_gqa/config.json"));
        sparqlab::app::MainWindow w;
        w.show();
        const QString ref = sparqlab::test::sharedDir() + QStringLiteral("/refs/hf/llama_gqa");
        w.lab()->openModel(ref);
        auto* panel = w.findChild<QWidget*>(QStringLiteral("modelPanel"));
        QTRY_VERIFY_WITH_TIMEOUT(panelText(panel).contains(QStringLiteral("Layers")), 30000);
        const QString text = panelText(panel);
        // Titled by the folder opened and its class, the family's label beneath.
        QVERIFY2(text.contains(QStringLiteral("llama_gqa (LlamaForCausalLM)")) &&
                     text.contains(QStringLiteral("Family</td><td align='right'>Llama<")),
                 qPrintable(text));
        QVERIFY(text.contains(QStringLiteral("KV heads")) && text.contains(QStringLiteral(">2<")));
        // A folder that is no model: the message is shown, the window lives on.
        w.lab()->openModel(QStringLiteral("/nonexistent/model"));
        QTRY_VERIFY_WITH_TIMEOUT(panelText(panel).contains(QStringLiteral("no such model folder")),
                                 30000);
        QVERIFY(w.isVisible());
        // …and says which model Run still uses: the one opened before, with its summary.
        const QString after = panelText(panel);
        QVERIFY2(after.contains(QStringLiteral("Still in use")) &&
                     after.contains(QStringLiteral("LlamaForCausalLM")) &&
                     after.contains(QStringLiteral("KV heads")),
                 qPrintable(after));
        QVERIFY(w.findChild<QPushButton*>(QStringLiteral("runButton"))->isEnabled());
    }

    void modelPanelShowsEachLayersWindowAndSoftcap() {
        // Gemma 2 (refs/hf/gemma2): soft-cap 6 on every layer, final cap 15, a window of 16
        // on layers 0 and 2, layers 1 and 3 global, scale 1/√32.
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf/gemma2/config.json"));
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf/llama_gqa/config.json"));
        sparqlab::app::MainWindow w;
        w.show();
        w.lab()->openModel(sparqlab::test::sharedDir() + QStringLiteral("/refs/hf/gemma2"));
        auto* panel = w.findChild<QWidget*>(QStringLiteral("modelPanel"));
        QTRY_VERIFY_WITH_TIMEOUT(panelText(panel).contains(QStringLiteral("Layers")), 30000);
        const QString text = panelText(panel);
        for (const char* want : {"Attention soft-cap</td><td align='right'>6, every layer",
                                 "Final-logit soft-cap</td><td align='right'>15",
                                 "Window 16</td><td align='right'>layers 0, 2",
                                 "Global</td><td align='right'>layers 1, 3", "1/√32 (not 1/√48)"})
            QVERIFY2(text.contains(QString::fromUtf8(want)), qPrintable(text));
        // A model without modifiers shows none of these rows.
        w.lab()->openModel(sparqlab::test::sharedDir() + QStringLiteral("/refs/hf/llama_gqa"));
        QTRY_VERIFY_WITH_TIMEOUT(panelText(panel).contains(QStringLiteral("LlamaForCausalLM")),
                                 30000);
        QVERIFY(!panelText(panel).contains(QStringLiteral("soft-cap")));
        QVERIFY(!panelText(panel).contains(QStringLiteral("Window")));
    }

    void everyPlotIsLegibleAt1280x800() {
        // A projector's 1280×800: in every view, and on each teaching page, every plot shown
        // keeps a legible size (issue 36: Step 1 had shrunk to 35 px under the banner).
        sparqlab::app::MainWindow w;
        w.resize(1280, 800);
        w.show();
        w.lab()->openModel(QStringLiteral("demo"));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
        w.runPrompt(QStringLiteral("Mr. Speaker, Mr. Vice President, Members of Congress, "
                                   "distinguished guests, and fellow Americans."));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        auto check = [&](const QString& where) {
            w.flushRedraw();
            QCoreApplication::processEvents();
            int shown = 0;
            for (QWidget* p : w.findChildren<QWidget*>()) {
                if (!p->inherits("QCustomPlot") || !p->isVisible())
                    continue;
                ++shown;
                QVERIFY2(p->height() >= 70 && p->width() >= 300,
                         qPrintable(QStringLiteral("%1: %2 is %3×%4")
                                        .arg(where, p->objectName())
                                        .arg(p->width())
                                        .arg(p->height())));
                // Its value axis's tick labels apart (a short plot's default ticks stacked
                // five labels in 50 px) and its label whole.
                const QString crowded = sparqlab::widgets::style::illegibleLeftAxis(p);
                QVERIFY2(
                    crowded.isEmpty(),
                    qPrintable(QStringLiteral("%1: %2's %3").arg(where, p->objectName(), crowded)));
            }
            QVERIFY2(shown > 0, qPrintable(where));
            // Nothing asks for more than the projector's width (the overview's one-line caption
            // made the window 1,432 px wide).
            QVERIFY2(w.minimumSizeHint().width() <= 1280 && w.width() == 1280,
                     qPrintable(QStringLiteral("%1: the window needs %2 px, is %3")
                                    .arg(where)
                                    .arg(w.minimumSizeHint().width())
                                    .arg(w.width())));
            // The controls' rows are whole: a narrow window gives the centre less width rather
            // than cutting off the rows' right edge (the layer box and τ's value were cut).
            auto* scroll = w.findChild<QScrollArea*>(QStringLiteral("controlsScroll"));
            QVERIFY(scroll && scroll->widget());
            for (QWidget* c : scroll->widget()->findChildren<QWidget*>()) {
                if (!c->isVisible() || c->parentWidget() != scroll->widget())
                    continue;
                const int right = c->mapTo(scroll->viewport(), QPoint(c->width(), 0)).x();
                QVERIFY2(right <= scroll->viewport()->width(),
                         qPrintable(QStringLiteral("%1: %2 ends at %3 of %4")
                                        .arg(where, QLatin1String(c->metaObject()->className()))
                                        .arg(right)
                                        .arg(scroll->viewport()->width())));
            }
        };
        for (const sparqlab::app::ViewSpec* view : sparqlab::app::viewSpecs()) { // every view
            QVERIFY(w.showView(QLatin1String(view->name)));
            check(QLatin1String(view->name));
        }
        // Every statistic is in sight without scrolling (stacked under the timing, two of
        // SparQ's eight rows were).
        auto* stats = w.findChild<QTableWidget*>(QStringLiteral("statsTable"));
        QVERIFY(stats && stats->isVisible() && stats->rowCount() == 8);
        const int last = stats->rowCount() - 1;
        QVERIFY2(stats->rowViewportPosition(last) + stats->rowHeight(last) <=
                     stats->viewport()->height(),
                 qPrintable(QStringLiteral("row %1 ends at %2 of %3")
                                .arg(last)
                                .arg(stats->rowViewportPosition(last) + stats->rowHeight(last))
                                .arg(stats->viewport()->height())));
        for (int page = 1; page <= 4; ++page) {
            w.setTeachingStep(page);
            if (page == 4) { // it runs its prompt and says which head it found
                auto* text = w.findChild<QLabel*>(QStringLiteral("teachingText"));
                QTRY_VERIFY_WITH_TIMEOUT(text->text().contains(QStringLiteral("induction score")),
                                         60000);
            }
            check(QStringLiteral("teaching page %1").arg(page));
            // The scores plot, short under the teaching bar, keeps its legend off every point
            // (page 4's column of entries covered the marks of the last 20 positions).
            if (w.findChild<QWidget*>(QStringLiteral("step2Plot"))->isVisible())
                QVERIFY2(w.headView()->curveUnderLegend() == 0,
                         qPrintable(
                             QStringLiteral("teaching page %1: %2 samples of a curve by the legend")
                                 .arg(page)
                                 .arg(w.headView()->curveUnderLegend())));
        }
        w.setTeachingStep(0);
    }

    void aDsaModelsIndexerIsOfferedAndCompared() {
        // The capture says what the controls offer and what the compare view compares, not the
        // window: on a DeepSeek Sparse Attention model (the DeepSeek-V3.2 reference's shape,
        // random weights, GPT-2's tokenizer) its trained indexer is a method and the compare view
        // puts it against the lab's; back on the demo it is greyed out, its tooltip saying why,
        // and the compare view takes another method.
        const QString gpt2 = QStringLiteral("refs/tokenizers/gpt2/tokenizer.json");
        const QString ref = QStringLiteral("refs/hf4/deepseek_v32/config.json");
        SPARQLAB_NEED_REFERENCE(gpt2);
        SPARQLAB_NEED_REFERENCE(ref);
        QTemporaryDir dir;
        QJsonObject cfg =
            QJsonDocument::fromJson(sparqlab::test::readFile(sparqlab::test::sharedFile(ref)))
                .object();
        cfg[QStringLiteral("vocab_size")] = 50257; // GPT-2's
        const QString cfgPath = dir.filePath(QStringLiteral("config.json"));
        QVERIFY(sparqlab::test::writeFile(cfgPath, QJsonDocument(cfg).toJson()));
        const QString model = dir.filePath(QStringLiteral("model"));
        const auto made =
            sparqlab::test::runCli({"init-model", "--config", cfgPath, "--out", model, "--seed",
                                    "1", "--tokenizer", sparqlab::test::sharedFile(gpt2)});
        QVERIFY2(made.exitCode == 0, qPrintable(made.err));
        sparqlab::app::MainWindow w;
        w.show();
        auto* compare = w.viewWidget<sparqlab::widgets::CompareView>("compare");
        const auto run = [&](const QString& spec) {
            w.lab()->openModel(spec);
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
            w.runPrompt(QStringLiteral("The keys a trained indexer picks are not always the ones "
                                       "the queries would pick themselves, and here is why."));
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            w.showView(QStringLiteral("compare"));
            w.flushRedraw();
            QVERIFY2(w.lab()->lastError().isEmpty(), qPrintable(w.lab()->lastError()));
        };
        run(model);
        if (QTest::currentTestFailed())
            return;
        QVERIFY(!w.lab()->labCapture()->indexScores.empty());
        QVERIFY(w.controls()->isMethodAvailable(sparqlab::attention::Method::Indexer));
        QCOMPARE(compare->second(), sparqlab::attention::Method::Indexer);
        run(QStringLiteral("demo"));
        if (QTest::currentTestFailed())
            return;
        QVERIFY(w.lab()->labCapture()->indexScores.empty());
        QVERIFY(!w.controls()->isMethodAvailable(sparqlab::attention::Method::Indexer));
        QCOMPARE(compare->second(), sparqlab::attention::Method::Quest);
        auto* box = w.findChild<QComboBox*>(QStringLiteral("methodBox"));
        const QString tip =
            box->itemData(box->findData(QStringLiteral("indexer")), Qt::ToolTipRole).toString();
        QVERIFY2(tip.startsWith(QStringLiteral("needs ")) &&
                     tip.contains(QStringLiteral("DeepSeek Sparse Attention")),
                 qPrintable(tip));
    }

    void theFirstScreenShowsAHeadWithSeveralPeaks() {
        // A start's first run (the default passage) shows the head whose attention is most
        // spread among those whose k largest positions hold 90% of it, and says so; the pick is
        // checked against the layer's exact probabilities, sorted here.
        sparqlab::app::MainWindow w;
        w.resize(1280, 800);
        w.show();
        w.lab()->openModel(QStringLiteral("demo"));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
        w.runPrompt(sparqlab::widgets::PromptPanel::defaultPrompt(), /*firstScreen=*/true);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        w.flushRedraw();
        const sparqlab::analysis::LabCapture& c = *w.lab()->labCapture();
        const int64_t k = std::min<int64_t>(w.controls()->config().k, c.positions());
        QVERIFY(k < c.positions()); // the passage is long enough for SparQ to read less
        int64_t bestLayer = -1, bestHead = -1, bestSpread = -1;
        for (int64_t l = 0; l < c.layers(); ++l) {
            const at::Tensor p = std::get<0>(c.layerCache(l)->dense.probs[0].sort(-1, true));
            for (int64_t h = 0; h < c.heads(); ++h) {
                const at::Tensor cum = p[h].cumsum(0);
                const double coverage = cum[k - 1].item<double>();
                const int64_t spread = (cum < 0.9).sum().item<int64_t>() + 1;
                if (coverage >= 0.9 && spread > bestSpread)
                    std::tie(bestLayer, bestHead, bestSpread) = std::tuple{l, h, spread};
            }
        }
        QVERIFY2(bestLayer >= 0, "no head of the demo holds 90% in its k largest positions");
        QVERIFY2(bestSpread > 8, "the chosen head's attention is not spread");
        QCOMPARE(w.controls()->layer(), static_cast<int>(bestLayer));
        QCOMPARE(w.controls()->head(), static_cast<int>(bestHead));
        auto* note = w.findChild<QLabel*>(QStringLiteral("headNote"));
        QVERIFY(note && note->isVisible());
        QVERIFY2(
            note->text().contains(
                QStringLiteral("Layer %1, head %2 is shown first").arg(bestLayer).arg(bestHead)) &&
                note->text().contains(QStringLiteral("over %1 positions").arg(bestSpread)),
            qPrintable(note->text()));
        // Another head: the note goes with its cause.
        w.controls()->setLayerHead(static_cast<int>((bestLayer + 1) % c.layers()), 0);
        w.flushRedraw();
        QTRY_VERIFY(!note->isVisible());
        // A run the user starts keeps the head the user chose.
        w.controls()->setLayerHead(1, 1);
        w.runPrompt(sparqlab::widgets::PromptPanel::defaultPrompt());
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        w.flushRedraw();
        QCOMPARE(w.controls()->layer(), 1);
        QCOMPARE(w.controls()->head(), 1);
        QVERIFY(!note->isVisible());
        // The temperature box shows the τ the step used (SparQ's adaptive rule by default), not
        // the value "fixed" would start from; choosing "fixed" keeps it.
        auto* tauValue = w.findChild<QDoubleSpinBox*>(QStringLiteral("tauValue"));
        auto* tauBox = w.findChild<QComboBox*>(QStringLiteral("tauBox"));
        QVERIFY(tauValue && tauBox);
        const double tau = w.lab()->headState()->tau;
        QVERIFY(tau > 0);
        QVERIFY(!tauValue->isEnabled());
        QVERIFY2(std::abs(tauValue->value() - tau) < 0.006,
                 qPrintable(QStringLiteral("%1 shown, %2 used").arg(tauValue->value()).arg(tau)));
        tauBox->setCurrentIndex(tauBox->findData(QStringLiteral("fixed")));
        QVERIFY(tauValue->isEnabled());
        QCOMPARE(w.controls()->config().tauValue, tauValue->value());
    }

    void screenshotIsNotBlank() {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("shot.png"));
        sparqlab::app::MainWindow w;
        w.resize(1000, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QString error;
        QVERIFY2(sparqlab::app::saveScreenshot(w, path, &error), qPrintable(error));
        QImage img(path);
        QVERIFY(!img.isNull());
        QCOMPARE(w.size(), QSize(1000, 700)); // the window fits a small laptop screen
        QCOMPARE(img.size(), w.size());
        // Not one colour: count distinct pixel values on a grid.
        QSet<QRgb> colours;
        for (int y = 0; y < img.height(); y += 7)
            for (int x = 0; x < img.width(); x += 7)
                colours.insert(img.pixel(x, y));
        QVERIFY2(colours.size() > 5, "the screenshot is blank");
    }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
