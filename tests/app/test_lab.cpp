// The lab window on the demo model, driven through its controls offscreen: what the views
// show follows the controls and the invariants of SPARQ.md (r = d_h and k = S make SparQ
// exact with α = 1; coverage is the true top-k mass; the transfer counts are Eq. 3/11).

#include "lab_fixture.h"
#include "test_support.h"

#include "app/gui/main_window.h"
#include "app/lab/lab_timing.h"
#include "widgets/figure_renderer.h"
#include "widgets/head_view.h"
#include "widgets/layers_view.h"
#include "widgets/panels.h"
#include "widgets/slider_box.h"
#include "widgets/timing_view.h"

#include "analysis/calibrate_run.h"
#include "analysis/selection_overlap.h"
#include "attention/bench.h"
#include "attention/method_spec.h"
#include "attention/method_table.h"
#include "capture/calibration_file.h"
#include "capture/capture_file.h"
#include "model/model.h"
#include "text/tokenizer.h"

#include <ATen/ATen.h>

#include <QCheckBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QSlider>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QTimer>
#include <QtTest>
#include <algorithm>
#include <set>

using sparqlab::app::MainWindow;

using sparqlab::test::kLabPrompt;

class TestLab : public sparqlab::test::LabFixture {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { openLab(); }

    void controlsFollowTheCapture() {
        const auto* c = m_w->lab()->labCapture();
        auto* r = m_w->findChild<QSlider*>(QStringLiteral("rSlider"));
        auto* k = m_w->findChild<QSlider*>(QStringLiteral("kSlider"));
        QVERIFY(r && k);
        QCOMPARE(r->maximum(), static_cast<int>(c->headDim()));   // r ≤ d_h
        QCOMPARE(k->maximum(), static_cast<int>(c->positions())); // k ≤ S
        auto* kBox = m_w->findChild<QSpinBox*>(QStringLiteral("kBox"));
        kBox->setValue(100000); // beyond S: clamped, never an error, and said beside the box
        QCOMPARE(kBox->value(), static_cast<int>(c->positions()));
        auto* kRow = m_w->findChild<sparqlab::widgets::SliderBox*>(QStringLiteral("k"));
        QVERIFY(kRow);
        QCOMPARE(kRow->note(), QStringLiteral("100000 → %1").arg(c->positions()));
        QCOMPARE(kBox->maximum(), 1 << 30); // typed digits are never cut (999999 stays whole)
        k->setValue(8);                     // the slider: in range, the note goes
        QVERIFY(kRow->note().isEmpty());
        QCOMPARE(kBox->value(), 8);
    }

    void everyMethodOfTheTableRunsInTheLab() {
        // The method box is the method table, H2O included; each method shows the parameters
        // it takes and no others, and draws the head view and the overview without an error.
        auto* box = m_w->findChild<QComboBox*>(QStringLiteral("methodBox"));
        QVERIFY(box);
        QCOMPARE(box->count(), static_cast<int>(sparqlab::attention::methods().size()));
        m_w->controls()->setLayerHead(2, 1);
        m_w->controls()->setK(24);
        for (const auto& m : sparqlab::attention::methods()) {
            // The model's own indexer needs a DSA model: greyed out on the demo.
            if (m.id == sparqlab::attention::Method::Indexer) {
                QVERIFY(!m_w->controls()->isMethodAvailable(m.id));
                continue;
            }
            QVERIFY(m_w->controls()->isMethodAvailable(m.id));
            m_w->controls()->setMethod(m.id);
            QCOMPARE(m_w->controls()->config().method, m.id);
            m_w->flushRedraw();
            for (const auto& p : sparqlab::attention::parameters())
                QVERIFY2(m_w->controls()->isShown(p.id) == sparqlab::attention::takes(m.id, p.id),
                         qPrintable(QStringLiteral("%1: --%2").arg(m.name, p.option)));
            QVERIFY2(m_w->lab()->lastError().isEmpty(),
                     qPrintable(QString::fromUtf8(m.name) + ": " + m_w->lab()->lastError()));
            QCOMPARE(head().method, m.id);
            const int64_t S = m_w->lab()->labCapture()->positions();
            // k positions where k is the budget (not pages, a top-p or per-head budget,
            // ShadowKV's chunks or MagicPIG's samples).
            if (m.selects && !m.budgetVaries &&
                sparqlab::attention::takes(m.id, sparqlab::attention::Param::K) &&
                m.id != sparqlab::attention::Method::Quest)
                QCOMPARE(head().count, std::min<int64_t>(24, S));
            QVERIFY(head().outputError >= 0 && head().topkAgreement <= 1.0 + 1e-9);
            // The transfer panel shows the method's own formula.
            QVERIFY(m_w->transferPanel()->text()->text().contains(
                QString::fromUtf8(m.transferFormula)));
        }
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
    }

    void shadowkvDefaultsAreFittedToTheCapture() {
        // ShadowKV's defaults are for long contexts of large models: on the demo's short capture
        // the lab fits those left unset (as `attend` does, one function) and says so; what the
        // user sets is kept.
        namespace att = sparqlab::attention;
        auto* controls = m_w->controls();
        controls->setMethod(att::Method::ShadowKV);
        m_w->flushRedraw();
        QVERIFY2(m_w->lab()->lastError().isEmpty(), qPrintable(m_w->lab()->lastError()));
        const auto* cap = m_w->lab()->labCapture();
        att::AttentionConfig expected = controls->config();
        QVERIFY(!expected.given(att::Param::Rank)); // (left at its default)
        const auto notes =
            att::fitDefaults(expected, cap->positions(),
                             {cap->headDim(), cap->layers(), cap->heads(), cap->kvHeads()});
        QVERIFY(!notes.empty());
        const att::AttentionConfig used = m_w->lab()->labConfig();
        QVERIFY(used.values == expected.values);
        QVERIFY(used.integer(att::Param::Budget) < cap->positions());
        const QString text = m_w->transferPanel()->text()->text();
        QVERIFY2(text.contains(QStringLiteral("Defaults fitted")), qPrintable(text));
        QVERIFY2(!text.contains(QStringLiteral("compression 52")), qPrintable(text));
        // A value the user sets is theirs.
        att::AttentionConfig mine = controls->config();
        mine.values[att::Param::Rank] = 16;
        controls->setConfig(mine);
        QCOMPARE(m_w->lab()->labConfig().integer(att::Param::Rank), int64_t{16});
        controls->setMethod(att::Method::Sparq);
    }

    void aMethodKeepsItsOwnLocalWindow() {
        // H2O's local window is ⌊k/4⌋ unless the user sets one, in the lab as on the command
        // line (the lab used to send the slider's 0, and showed H2O about 5× worse than it is).
        namespace att = sparqlab::attention;
        auto* controls = m_w->controls();
        controls->setMethod(att::Method::H2O);
        controls->setK(24);
        att::AttentionConfig c = controls->config();
        QVERIFY(!c.local.has_value());
        QCOMPARE(c.effectiveLocal(), int64_t{6});
        auto* local = m_w->findChild<QSpinBox*>(QStringLiteral("localBox"));
        QVERIFY(local);
        QCOMPARE(local->value(), 6); // the slider shows the default in force
        controls->setK(40);
        QCOMPARE(local->value(), 10); // and follows k
        QCOMPARE(controls->config().effectiveLocal(), int64_t{10});
        local->setValue(3); // the user's own
        c = controls->config();
        QVERIFY(c.local.has_value());
        QCOMPARE(c.effectiveLocal(), int64_t{3});
        controls->setK(20);
        QCOMPARE(controls->config().effectiveLocal(), int64_t{3});
        controls->setMethod(att::Method::Sparq); // another method: its own default again
        QVERIFY(!controls->config().local.has_value());
        QCOMPARE(controls->config().effectiveLocal(), int64_t{0});
        controls->setMethod(att::Method::H2O);
        QCOMPARE(controls->config().effectiveLocal(), int64_t{5});
        m_w->flushRedraw();
        QVERIFY2(m_w->lab()->lastError().isEmpty(), qPrintable(m_w->lab()->lastError()));
        controls->setMethod(att::Method::Sparq);
    }

    void slidersRedrawTheHeadView() {
        m_w->controls()->setLayerHead(1, 2);
        m_w->controls()->setR(8);
        m_w->controls()->setK(20);
        QCOMPARE(head().components.size(), size_t{8});
        QCOMPARE(head().chosen.size(), size_t{20});
        QCOMPARE(head().approx.size(), head().exact.size());
        QVERIFY(head().alpha > 0 && head().alpha <= 1 + 1e-6);
        m_w->controls()->setR(24);
        QCOMPARE(head().components.size(), size_t{24});
        // The local window is always among the chosen positions (SPARQ.md §2.7).
        m_w->controls()->setLocal(5);
        const int64_t S = m_w->lab()->labCapture()->positions();
        for (int64_t j = S - 5; j < S; ++j)
            QVERIFY(std::binary_search(head().chosen.begin(), head().chosen.end(), j));
        m_w->controls()->setLocal(0);
    }

    void fullRankAndAllPositionsIsExact() {
        const auto* c = m_w->lab()->labCapture();
        m_w->controls()->setR(static_cast<int>(c->headDim()));
        m_w->controls()->setK(static_cast<int>(c->positions()));
        for (int layer = 0; layer < c->layers(); ++layer)
            for (int h = 0; h < c->heads(); ++h) {
                m_w->controls()->setLayerHead(layer, h);
                QVERIFY(std::abs(head().alpha - 1.0) < 1e-5);
                QVERIFY2(head().outputError < 1e-5,
                         qPrintable(QString::number(head().outputError)));
                QCOMPARE(static_cast<int64_t>(head().chosen.size()), c->positions());
                QCOMPARE(head().topkAgreement, 1.0);
                double worst = 0;
                for (size_t j = 0; j < head().exact.size(); ++j)
                    worst = std::max(worst, std::abs(double(head().exact[j]) - head().approx[j]));
                QVERIFY2(worst < 1e-5, qPrintable(QString::number(worst)));
            }
    }

    void overviewAgreesWithTheHeadViewAndOpensHeads() {
        m_w->controls()->setR(16);
        m_w->controls()->setK(32);
        m_w->showView(QStringLiteral("overview"));
        auto* ov = m_w->viewWidget<sparqlab::widgets::OverviewView>("overview");
        const auto* c = m_w->lab()->labCapture();
        // Coverage is the exact mass of the true top-k: the head view's number for each head.
        for (int layer = 0; layer < c->layers(); ++layer)
            for (int h = 0; h < c->heads(); ++h) {
                m_w->controls()->setLayerHead(layer, h);
                m_w->flushRedraw();
                QVERIFY(std::abs(ov->cell(0, layer, h) - head().trueMass) < 1e-4);
                QVERIFY(ov->cell(2, layer, h) >= 0 && ov->cell(2, layer, h) <= 1);
            }
        QCOMPARE(ov->layerLabels(), QStringList({"0", "1", "2", "3"})); // whole layers, the demo's
        // A click on a cell of the coverage grid opens that head.
        QWidget* plot = ov->findChild<QWidget*>(QStringLiteral("overviewPlot"));
        QTRY_VERIFY(plot->isVisible());
        QTest::mouseClick(plot, Qt::LeftButton, {}, ov->cellCenter(0, 2, 1));
        QCOMPARE(m_w->controls()->layer(), 2);
        QCOMPARE(m_w->controls()->head(), 1);
    }

    void transferPanelFollowsTheFormula() {
        m_w->controls()->setR(16);
        m_w->controls()->setK(32);
        m_w->flushRedraw();
        const int64_t S = m_w->lab()->labCapture()->positions(),
                      d = m_w->lab()->labCapture()->headDim();
        const QString text = m_w->transferPanel()->text()->text();
        const QString dense = QLocale().toString(static_cast<qlonglong>(2 * S * d + 2 * d));
        const QString sparq =
            QLocale().toString(static_cast<qlonglong>(S * 16 + 2 * 32 * d + 4 * d));
        QVERIFY2(text.contains(dense) && text.contains(sparq) && text.contains("× fewer") &&
                     !text.contains("covers all"),
                 qPrintable(text));
        // k at S: SparQ reads step 1's S·r on top of dense's and the panel says so.
        m_w->controls()->setK(static_cast<int>(S));
        m_w->flushRedraw();
        const QString all = m_w->transferPanel()->text()->text();
        QVERIFY2(all.contains("× more") && all.contains(QStringLiteral("covers all %1").arg(S)),
                 qPrintable(all));
    }

    void timingPanelTimesEveryMethodOfTheEngine() {
        // After a run the timing panel times each method the decode engine has, on this
        // model's shape, in one run against one dense.
        const QLabel* t =
            m_w->findChild<sparqlab::widgets::TimingPanel*>(QStringLiteral("timingPanel"))->text();
        QTRY_VERIFY_WITH_TIMEOUT(t->text().contains(QStringLiteral("theoretical")), 120000);
        for (const sparqlab::attention::MethodInfo& m : sparqlab::attention::methods())
            if (m.fastDecode && m.id != sparqlab::attention::Method::Dense)
                QVERIFY2(t->text().contains(QString::fromUtf8(m.label)), m.label);
    }

    void teachingModeWalksTheSteps() {
        m_w->setTeachingStep(1);
        auto* text = m_w->findChild<QLabel*>(QStringLiteral("teachingText"));
        QVERIFY(text->isVisible() && text->text().startsWith(QStringLiteral("Step 1 of 3")));
        m_w->setTeachingStep(3);
        QVERIFY(text->text().startsWith(QStringLiteral("Step 3 of 3")));
        m_w->setTeachingStep(0);
        QVERIFY(!text->isVisible());
    }

    void compareViewShowsTwoMethodsOnOneHead() {
        // The compare tab: the lab's method (its controls) against a second one on the same
        // head, each with its own chosen set, transfer, output error and recall.
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->controls()->setR(8);
        m_w->controls()->setK(16);
        m_w->controls()->setLayerHead(3, 1);
        m_w->viewWidget<sparqlab::widgets::CompareView>("compare")->setSecond(
            sparqlab::attention::Method::Quest);
        m_w->showView(QStringLiteral("compare"));
        m_w->flushRedraw();
        const auto& a = m_w->viewWidget<sparqlab::widgets::CompareView>("compare")->first();
        const auto& b = m_w->viewWidget<sparqlab::widgets::CompareView>("compare")->secondState();
        QCOMPARE(a.method, sparqlab::attention::Method::Sparq);
        QCOMPARE(b.method, sparqlab::attention::Method::Quest);
        // The first is the head view's state; the second what the lab computes for Quest.
        QCOMPARE(a.chosen, head().chosen);
        QCOMPARE(a.outputError, head().outputError);
        auto cfg = m_w->controls()->config();
        cfg.method = sparqlab::attention::Method::Quest;
        const auto quest = sparqlab::analysis::headState(*m_w->lab()->shownCaptureNow(), 3, 1, cfg);
        QCOMPARE(b.chosen, quest.chosen);
        QCOMPARE(b.outputError, quest.outputError);
        QCOMPARE(b.exact, a.exact); // one exact attention under both
        // Every curve drawn is below the plot's top, on every head: SparQ's ŝ peaks are not
        // cut off (on some head they rise above every exact score).
        bool approxHigher = false;
        for (int64_t l = 0; l < m_w->lab()->labCapture()->layers(); ++l)
            for (int64_t hh = 0; hh < m_w->lab()->labCapture()->heads(); ++hh) {
                m_w->controls()->setLayerHead(static_cast<int>(l), static_cast<int>(hh));
                m_w->flushRedraw();
                const auto* cv = m_w->viewWidget<sparqlab::widgets::CompareView>("compare");
                const auto& sa = cv->first();
                QVERIFY(!sa.approx.empty());
                const float exactTop = *std::max_element(sa.exact.begin(), sa.exact.end());
                for (const std::vector<float>* curve : {&sa.exact, &sa.approx})
                    for (const float x : *curve) {
                        QVERIFY2(x <= cv->plotTop(),
                                 qPrintable(QStringLiteral("layer %1 head %2").arg(l).arg(hh)));
                        approxHigher = approxHigher || x > 1.1f * exactTop;
                    }
            }
        QVERIFY(approxHigher);
        m_w->controls()->setLayerHead(3, 1);
        m_w->flushRedraw();
        // The table: each column the method's own numbers.
        auto* view = m_w->viewWidget<sparqlab::widgets::CompareView>("compare");
        QVERIFY(view->rowCount() >= 7);
        QCOMPARE(view->cell(0, 1), QString::number(a.count));
        QCOMPARE(view->cell(0, 2), QString::number(b.count));
        QCOMPARE(view->cell(4, 1), QString::number(a.outputError, 'f', 3)); // the row's format
        QCOMPARE(view->cell(4, 2), QString::number(b.outputError, 'f', 3));
        QCOMPARE(view->cell(5, 2), QString::number(b.topkAgreement, 'f', 3));
        // A different second method redraws the comparison.
        view->setSecond(sparqlab::attention::Method::H2O);
        m_w->flushRedraw();
        QCOMPARE(view->secondState().method, sparqlab::attention::Method::H2O);
        // The lab's own method is never the second: the lab switched to the second's method
        // moves the second to SparQ, and the lab on SparQ moves it to Quest; the lab's entry in
        // the box is not offered.
        const auto offered = [view](sparqlab::attention::Method m) {
            auto* box = view->findChild<QComboBox*>(QStringLiteral("compareMethodBox"));
            const int i = box->findData(QString::fromStdString(sparqlab::attention::methodName(m)));
            return static_cast<QStandardItemModel*>(box->model())->item(i)->isEnabled();
        };
        m_w->controls()->setMethod(sparqlab::attention::Method::H2O);
        m_w->flushRedraw();
        QCOMPARE(view->second(), sparqlab::attention::Method::Sparq);
        QCOMPARE(view->first().method, sparqlab::attention::Method::H2O);
        QCOMPARE(view->secondState().method, sparqlab::attention::Method::Sparq);
        QVERIFY(!offered(sparqlab::attention::Method::H2O));
        QVERIFY(offered(sparqlab::attention::Method::Sparq));
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->flushRedraw();
        QCOMPARE(view->secondState().method, sparqlab::attention::Method::Quest);
        QVERIFY(offered(sparqlab::attention::Method::H2O));
        QVERIFY(!offered(sparqlab::attention::Method::Sparq));
        // Long method names at 1280 px: the legend takes two rows rather than squeezing its
        // entries over one another.
        const QSize before = m_w->size();
        m_w->resize(1280, 800);
        QCoreApplication::sendPostedEvents(nullptr, QEvent::LayoutRequest);
        m_w->controls()->setMethod(sparqlab::attention::Method::DoubleSparsity);
        view->setSecond(sparqlab::attention::Method::ExpectedAttention);
        m_w->flushRedraw();
        QCOMPARE(view->secondState().method, sparqlab::attention::Method::ExpectedAttention);
        QVERIFY(view->legendFits());
        QCOMPARE(view->legendRows(), 2);
        // A wider window: the same entries back on one row, without a new drawing.
        m_w->resize(1920, 1000);
        QCoreApplication::sendPostedEvents(nullptr, QEvent::LayoutRequest);
        QTest::qWait(50); // (the queued replot)
        QCOMPARE(view->legendRows(), 1);
        QVERIFY(view->legendFits());
        m_w->resize(before);
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->showView(QStringLiteral("head"));
    }

    void layersViewComparesEachLayerWithThePrevious() {
        // Selection across layers: per layer the key set's overlap with the previous layer's,
        // as analysis::layerReuse computes it on the query shown, in [0, 1] and none for the
        // first layer; the exact top-k and the lab's method (no indexer on the demo).
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->controls()->setK(16);
        m_w->showView(QStringLiteral("layers"));
        m_w->flushRedraw();
        auto* v = m_w->viewWidget<sparqlab::widgets::LayersView>("layers");
        QVERIFY(v);
        const auto want =
            sparqlab::analysis::layerReuse(*m_w->lab()->shownCapture(), m_w->controls()->config());
        QCOMPARE(want.series.size(), size_t{2});
        QCOMPARE(want.k, int64_t{16});
        for (const auto& s : want.series) {
            const QString label = QString::fromStdString(s.label);
            QVERIFY(std::isnan(v->overlap(label, 0)));
            for (int l = 1; l < static_cast<int>(s.overlap.size()); ++l) {
                QCOMPARE(v->overlap(label, l), s.overlap[static_cast<size_t>(l)]);
                QVERIFY(s.overlap[static_cast<size_t>(l)] >= 0 &&
                        s.overlap[static_cast<size_t>(l)] <= 1);
            }
        }
        QCOMPARE(v->graphCount(), 3); // two series and the random sets' line
        m_w->showView(QStringLiteral("head"));
    }

    void paperViewDrawsTheCommandLinesFigures() {
        // The Paper figures view computes `sparqlab-cli figures` on the lab's capture in its
        // worker: the same figures in the same order, each with its caption, and the same numbers
        // (each figure's CSV, as the command line writes it beside the image).
        QTemporaryDir dir;
        const QString cap = dir.filePath(QStringLiteral("lab.h5"));
        m_w->lab()->exports()->exportCaptureTo(cap);
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->exports()->isExporting(), 60000);
        const QString out = dir.filePath(QStringLiteral("figures"));
        const auto cli = sparqlab::test::runCli(
            {"figures", "--capture", cap, "--out", out, "--format", "png"}, 300000);
        QVERIFY2(cli.exitCode == 0, qPrintable(cli.err));
        QStringList stems; // each figure's CSV is listed beside its pictures: one a figure
        for (const QString& file : cli.out.split(QLatin1Char('\n'), Qt::SkipEmptyParts))
            if (file.endsWith(QStringLiteral(".csv")))
                stems << file.chopped(4);
        m_w->showView(QStringLiteral("paper"));
        m_w->flushRedraw();
        auto* list = m_w->findChild<QListWidget*>(QStringLiteral("paperFigureList"));
        auto* plot = m_w->findChild<sparqlab::widgets::FigurePlot*>(QStringLiteral("paperFigure"));
        QVERIFY(list && plot);
        QCOMPARE(list->count(), static_cast<int>(stems.size()));
        // The paper's figures are all there: Fig. 2, 4a–f, E1, E2 and Table 1.
        for (const char* id :
             {"fig2_arithmetic_intensity", "fig4a_coverage_histogram", "fig4b_coverage_grid",
              "fig4c_q_density", "fig4d_kurtosis", "fig4e_agreement_vs_r", "fig4f_alpha_agreement",
              "figE1_kurtosis_by_layer", "figE1_zmass_by_layer", "figE2_agreement_selectors",
              "table1_eta"})
            QVERIFY2(std::any_of(stems.begin(), stems.end(),
                                 [&](const QString& s) {
                                     return QFileInfo(s).fileName() == QLatin1String(id);
                                 }),
                     id);
        for (int i = 0; i < list->count(); ++i) {
            const QString id = QFileInfo(stems[i]).fileName();
            QCOMPARE(list->item(i)->data(Qt::UserRole).toString(), id);
            list->setCurrentRow(i);
            QCOMPARE(plot->figureId(), id);
            // Its title wraps: no figure makes the window wider than a projector's 1280 px
            // (once the layouts have taken the new figure's size).
            QCoreApplication::sendPostedEvents(nullptr, QEvent::LayoutRequest);
            QVERIFY2(m_w->minimumSizeHint().width() <= 1280,
                     qPrintable(id + QStringLiteral(": %1").arg(m_w->minimumSizeHint().width())));
            QCOMPARE(plot->csv(), QString::fromUtf8(
                                      sparqlab::test::readFile(stems[i] + QStringLiteral(".csv"))));
            if (id.startsWith(QStringLiteral("fig4")))
                QVERIFY2(plot->caption().contains(QStringLiteral("Fig. 4")), qPrintable(id));
        }
        m_w->showView(QStringLiteral("head"));
    }

    void h2oInTheLabIsChunkedAndBounded() {
        // H2O's accumulated attention (the lab's history state) runs in chunks of 256 queries:
        // the same as all S − 1 rows at once (SPARQ.md §4.4.1), here over 600 positions.
        at::manual_seed(3);
        const int64_t S = 600, Hq = 4, Hkv = 2, D = 16;
        const at::Tensor q = at::randn({Hq, S, D}), k = at::randn({Hkv, S, D});
        sparqlab::attention::AttentionConfig mods;
        const at::Tensor w =
            at::softmax(sparqlab::attention::causalLogits(q.narrow(1, 0, S - 1).unsqueeze(0),
                                                          k.unsqueeze(0), 0, mods),
                        -1);
        const at::Tensor whole = w.view({1, Hkv, Hq / Hkv, S - 1, S}).mean(2).sum(2);
        sparqlab::attention::AttentionConfig acc;
        acc.method = sparqlab::attention::Method::H2O;
        const sparqlab::attention::CausalState st = sparqlab::analysis::historyState(q, k, k, acc);
        QVERIFY(at::allclose(st.methods.at(sparqlab::attention::Method::H2O)->tensors().at("acc"),
                             whole, 1e-4, 1e-5));
        // Beyond kQuadraticMaxPositions the lab says where to run H2O and TOVA instead of
        // freezing the window.
        const int64_t big = sparqlab::analysis::LabCapture::kQuadraticMaxPositions + 1;
        sparqlab::model::CaptureExample e;
        e.tokenIds = at::arange(big, at::kLong);
        e.qPositions = at::arange(big, at::kLong);
        e.q = at::randn({1, 2, big, 8});
        e.k = at::randn({1, 1, big, 8});
        e.v = at::randn({1, 1, big, 8});
        sparqlab::model::CaptureInfo info;
        info.nLayers = 1;
        info.nHeads = 2;
        info.nKvHeads = 1;
        info.headDim = 8;
        info.attnScale = 1 / std::sqrt(8.0);
        const auto cap = sparqlab::analysis::LabCapture::from(e, info);
        sparqlab::attention::AttentionConfig h2o;
        h2o.method = sparqlab::attention::Method::H2O;
        h2o.k = 32;
        h2o.r = 4;
        for (const auto m : {sparqlab::attention::Method::H2O, sparqlab::attention::Method::Tova}) {
            h2o.method = m;
            try {
                (void)sparqlab::analysis::headState(*cap, 0, 0, h2o);
                QFAIL("ran on a capture beyond the lab's bound");
            } catch (const sparqlab::attention::AttentionError& ex) {
                QVERIFY2(QString::fromUtf8(ex.what()).contains(QStringLiteral("S = 2048")),
                         ex.what());
            }
        }
        h2o.method = sparqlab::attention::Method::Sparq; // the other methods run there
        QCOMPARE(sparqlab::analysis::headState(*cap, 0, 0, h2o).count, int64_t{32});
    }

    void timingCurveIsMeasuredInTheWorkerAndCached() {
        // Paying off with confidence: from the first S after which every point's interval
        // (dense's first quartile over the method's third) stays above 1.
        using sparqlab::widgets::confidentPayoff;
        QCOMPARE(confidentPayoff({256, 512, 1024}, {0.5, 1.2, 4.0}), int64_t{512});
        QCOMPARE(confidentPayoff({256, 512}, {1.5, 2.0}), int64_t{0});
        QCOMPARE(confidentPayoff({256, 512}, {0.5, 0.9}), int64_t{-1});
        // A point above 1 before the curve dips does not count: from 1024 on it stays.
        QCOMPARE(confidentPayoff({256, 512, 1024, 2048}, {1.1, 0.5, 2.0, 3.0}), int64_t{1024});
        QCOMPARE(confidentPayoff({256, 512}, {2.0, 0.5}), int64_t{-1});
        QCOMPARE(confidentPayoff({256, 512}, {2.0, 1.0}), int64_t{-1}); // 1 is not above 1
        const auto si = sparqlab::attention::speedupInterval(200, 180, 260, 100, 90, 120);
        QCOMPARE(si.median, 2.0);
        QCOMPARE(si.lower, 1.5);
        QCOMPARE(si.upper, 260.0 / 90.0);
        // The timing summaries' quantile: between order statistics, in any order of the samples.
        using sparqlab::attention::sampleQuantile;
        QCOMPARE(sampleQuantile({5, 1, 3}, 0.5), 3.0);
        QCOMPARE(sampleQuantile({4, 1, 3, 2}, 0.5), 2.5);
        QCOMPARE(sampleQuantile({5, 4, 3, 2, 1}, 0.25), 2.0);
        QCOMPARE(sampleQuantile({5, 4, 3, 2, 1}, 0.0), 1.0);
        QCOMPARE(sampleQuantile({5, 4, 3, 2, 1}, 1.0), 5.0);
        QCOMPARE(sampleQuantile({}, 0.5), 0.0);
        // The curve: every length from 256 to 32k, dense against the lab's method and a second
        // one, measured in the worker while the window keeps turning; asked again, it is drawn
        // from the cache. Every engine method on request (not timed here: eleven curves).
        namespace att = sparqlab::attention;
        m_w->controls()->setR(16);
        m_w->controls()->setK(64);
        m_w->flushRedraw();
        auto* view = m_w->viewWidget<sparqlab::widgets::TimingCurveView>("timing");
        int engine = 0;
        for (const auto& m : att::methods())
            if (m.fastDecode && m.id != att::Method::Dense)
                ++engine;
        const att::AttentionConfig lab = m_w->lab()->labConfig();
        QCOMPARE(
            static_cast<int>(sparqlab::app::curveMethods(lab, 16, 64, std::nullopt, true).size()),
            engine);
        const auto two = sparqlab::app::curveMethods(lab, 16, 64, att::Method::Quest, false);
        QCOMPARE(two.size(), size_t{2});
        QCOMPARE(two[0].method, att::Method::Sparq);
        QCOMPARE(two[1].method, att::Method::Quest);
        att::AttentionConfig h2o = lab; // not an engine method: SparQ is timed in its place
        h2o.method = att::Method::H2O;
        QCOMPARE(sparqlab::app::curveMethods(h2o, 16, 64, std::nullopt, false).front().method,
                 att::Method::Sparq);
        // Distinct colours and markers for every engine method (Quest and RocketKV shared green).
        std::set<QRgb> colors;
        std::set<int> markers;
        for (const auto& m : att::methods())
            if (m.fastDecode && m.id != att::Method::Dense) {
                colors.insert(sparqlab::widgets::TimingCurveView::colorOf(m.id).rgb());
                markers.insert(sparqlab::widgets::TimingCurveView::markerOf(m.id));
            }
        QCOMPARE(static_cast<int>(colors.size()), engine);
        QCOMPARE(static_cast<int>(markers.size()), engine);
        view->setSecond(att::Method::Quest);
        m_w->view(QStringLiteral("timing"))->refresh();
        QVERIFY(m_w->view(QStringLiteral("timing"))->busy());
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->view(QStringLiteral("timing"))->busy(), 240000);
        const int devices = att::cudaAvailable() ? 2 : 1;
        QCOMPARE(view->timeLines(), 3 * devices); // dense, SparQ, Quest
        QCOMPARE(view->timePoints(0), 8);         // 256, 512, …, 32768
        QVERIFY(view->lineColor(1) != view->lineColor(2));
        // The legend: one entry per curve (the theoretical lines are said in the caption).
        QCOMPARE(view->legendEntries(true), 2 * devices);
        // ... together at the top of their column, not spread over the plot's height.
        QVERIFY2(view->legendHeightShare(true) < 0.4,
                 qPrintable(QString::number(view->legendHeightShare(true))));
        QVERIFY(view->summary()->text().contains(QStringLiteral("SparQ")));
        QVERIFY(view->summary()->text().contains(QStringLiteral("32,768")) ||
                view->summary()->text().contains(QStringLiteral("32768")));
        // Medians with their spread; both y axes labelled at more than one tick.
        QVERIFY(view->summary()->text().contains(QStringLiteral("the median of 5 samples")));
        QVERIFY2(view->yTickLabels(false).size() >= 3,
                 qPrintable(view->yTickLabels(false).join(',')));
        QVERIFY2(view->yTickLabels(true).size() >= 3,
                 qPrintable(view->yTickLabels(true).join(',')));
        m_w->view(QStringLiteral("timing"))
            ->refresh(); // the same shape and parameters: from the cache
        QVERIFY(!m_w->view(QStringLiteral("timing"))->busy());
        // Other parameters: measured again, and Cancel stops it.
        m_w->controls()->setK(32);
        m_w->flushRedraw();
        m_w->view(QStringLiteral("timing"))->refresh();
        QVERIFY(m_w->view(QStringLiteral("timing"))->busy());
        view->findChild<QPushButton*>(QStringLiteral("cancelCurveButton"))->click();
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->view(QStringLiteral("timing"))->busy(), 60000);
        QVERIFY(view->findChild<QPushButton*>(QStringLiteral("measureCurveButton"))->isEnabled());
        QCOMPARE(view->timePoints(0), 8); // the curve drawn before stays
    }

    void decodeStepsWalkTheGeneratedTokens() {
        // After Generate, the step slider walks the generated tokens: the query at step t is
        // the one a capture of the prompt and the first t generated tokens ends with.
        m_w->promptPanel()->setPrompt(QStringLiteral("The state of our Union is"));
        m_w->generate(8);
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isBusy(), 120000);
        QVERIFY2(m_w->lab()->lastError().isEmpty(), qPrintable(m_w->lab()->lastError()));
        const auto* cap = m_w->lab()->labCapture();
        const int64_t steps = cap->steps(), P = cap->promptPositions;
        QVERIFY2(steps >= 1, qPrintable(QString::number(steps)));
        QVERIFY(m_w->findChild<QWidget*>(QStringLiteral("stepBar"))->isVisible());
        QCOMPARE(m_w->decodeStep(), static_cast<int>(steps)); // the last position first
        const auto model = sparqlab::model::Model::open("demo");
        // Token healing: the prompt's last word ("is") was taken off and the first generated
        // tokens spell it again; the step label says so at those steps and names it after.
        auto* label = m_w->findChild<QLabel*>(QStringLiteral("stepLabel"));
        const int64_t healed = cap->healedSteps;
        QVERIFY2(healed >= 1 && healed < steps, qPrintable(QString::number(healed)));
        QCOMPARE(QString::fromStdString(cap->healedText).trimmed(), QStringLiteral("is"));
        const std::vector<int64_t> again(cap->tokenIds.begin() + P,
                                         cap->tokenIds.begin() + P + healed);
        QVERIFY(model->tokenizer().decode(again, true).rfind(cap->healedText, 0) == 0);
        m_w->setDecodeStep(0);
        QVERIFY2(label->text().contains(QStringLiteral("token healing: the prompt's last word")),
                 qPrintable(label->text()));
        // The long label wraps: the window still fits a projector's 1280 px.
        QCoreApplication::sendPostedEvents(nullptr, QEvent::LayoutRequest);
        QVERIFY2(m_w->minimumSizeHint().width() <= 1280,
                 qPrintable(QString::number(m_w->minimumSizeHint().width())));
        m_w->setDecodeStep(static_cast<int>(healed));
        QVERIFY2(label->text().contains(QStringLiteral("spelled again the prompt's last word")),
                 qPrintable(label->text()));
        m_w->controls()->setLayerHead(3, 2);
        for (const int64_t t : {int64_t{0}, steps / 2, steps}) {
            m_w->setDecodeStep(static_cast<int>(t));
            const auto* shown = m_w->lab()->shownCaptureNow();
            QCOMPARE(shown->positions(), P + t);
            const std::vector<int64_t> prefix(cap->tokenIds.begin(), cap->tokenIds.begin() + P + t);
            const sparqlab::model::CaptureExample e = model->capture(prefix, false);
            for (int64_t l = 0; l < cap->layers(); ++l) {
                const at::Tensor q = e.q[l].select(1, 0);
                QVERIFY2(at::allclose(shown->q[l], q, 1e-4, 1e-4),
                         qPrintable(QStringLiteral("step %1 layer %2").arg(t).arg(l)));
                QVERIFY(at::allclose(shown->k[l], e.k[l], 1e-4, 1e-4));
            }
            // What the head view draws at this step is the lab on that capture.
            const auto own = sparqlab::analysis::LabCapture::from(e, model->captureInfo());
            const auto expect =
                sparqlab::analysis::headState(*own, 3, 2, m_w->controls()->config());
            QCOMPARE(head().exact.size(), expect.exact.size());
            for (size_t j = 0; j < expect.exact.size(); ++j)
                QVERIFY(std::abs(head().exact[j] - expect.exact[j]) < 1e-5);
            QCOMPARE(head().chosen, expect.chosen);
        }
        QVERIFY(label->text().contains(QStringLiteral("step %1 of %2").arg(steps).arg(steps)));
        // A session saved at a decode step reopens at that step, with the generated text.
        m_w->setDecodeStep(1);
        MainWindow w2;
        reopen(w2);
        QCOMPARE(w2.decodeStep(), 1);
        QCOMPARE(w2.lab()->shownCapture()->positions(), P + 1);
        QCOMPARE(w2.headView()->state().exact, head().exact);
        QCOMPARE(w2.lab()->labCapture()->steps(), steps);
        m_w->runPrompt(QString::fromLatin1(kLabPrompt)); // back to the prompt the tests use
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isBusy(), 60000);
        QCOMPARE(m_w->decodeStep(), -1); // a prompt alone has no decode steps
        QVERIFY(m_w->findChild<QLabel*>(QStringLiteral("stepLabel"))
                    ->text()
                    .contains(QStringLiteral("the prompt's last query")));
    }

    void clickingATokenExaminesItsQuery() {
        // Any held query: a click on a token of the strip shows that position's query, over
        // the keys up to it — the head view of a capture of the prompt up to that token.
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
        m_w->controls()->setLayerHead(3, 1);
        const auto* cap = m_w->lab()->labCapture();
        const int64_t S = cap->positions(), p = S / 2;
        QCOMPARE(m_w->lab()->queryPosition(), static_cast<int>(S - 1)); // the last query first
        QTextBrowser* strip = m_w->headView()->tokenView();
        (void)head();
        QVERIFY(strip->toHtml().contains(QStringLiteral("#%1").arg(p)));
        Q_EMIT strip->anchorClicked(QUrl(QStringLiteral("#%1").arg(p)));
        QCOMPARE(m_w->lab()->queryPosition(), static_cast<int>(p));
        const auto expect =
            sparqlab::analysis::headState(*cap->atPosition(p), 3, 1, m_w->controls()->config());
        QCOMPARE(head().exact.size(), static_cast<size_t>(p + 1));
        QCOMPARE(m_w->lab()->shownCaptureNow()->positions(), p + 1);
        for (size_t j = 0; j < expect.exact.size(); ++j)
            QVERIFY(std::abs(head().exact[j] - expect.exact[j]) < 1e-6);
        QCOMPARE(head().chosen, expect.chosen);
        QVERIFY(m_w->findChild<QLabel*>(QStringLiteral("stepLabel"))
                    ->text()
                    .startsWith(QStringLiteral("position %1 ").arg(p)));
        // The later tokens stay in the strip (greyed) to be clicked; hovering names the values.
        QVERIFY(strip->toHtml().contains(QStringLiteral("#%1").arg(S - 1)));
        QVERIFY(m_w->headView()->scoreTip(2).contains(QStringLiteral("exact s = ")));
        QVERIFY(m_w->headView()->scoreTip(p + 3).contains(QStringLiteral("after the query")));
        QVERIFY(
            m_w->headView()->componentTip(0).startsWith(QStringLiteral("component 0: |q_0| = ")));
        // A position whose query is not held is a status line, nothing changes.
        m_w->lab()->setQueryPosition(static_cast<int>(S + 5));
        QCOMPARE(m_w->lab()->queryPosition(), static_cast<int>(p));
        // A session keeps the query shown.
        MainWindow w2;
        reopen(w2);
        QCOMPARE(w2.lab()->queryPosition(), static_cast<int>(p));
        QCOMPARE(w2.headView()->state().exact, head().exact);
        m_w->lab()->setQueryPosition(static_cast<int>(S - 1));
        QCOMPARE(head().exact.size(), static_cast<size_t>(S));
    }

    void aCalibrationFileReplacesThePromptsOwn() {
        // Loki calibrated on another text (here: the first half of the prompt's keys) loaded
        // from a file: the head view runs with it and Step 1 names it; a bad file is one line.
        namespace att = sparqlab::attention;
        const auto* cap = m_w->lab()->labCapture();
        const int64_t S = cap->positions();
        const auto cal =
            sparqlab::analysis::calibrateLayers(att::Method::Loki, cap->layers(), [&](int64_t l) {
                return std::make_pair(at::Tensor(), cap->k[l].narrow(1, 0, S / 2));
            });
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("loki-basis.h5"));
        sparqlab::capture::CalibrationInfo info{"demo", cap->layers(), cap->heads(), cap->kvHeads(),
                                                cap->headDim()};
        sparqlab::capture::writeCalibration(path.toStdString(), *cal, info);
        m_w->controls()->setLayerHead(3, 1);
        m_w->lab()->loadCalibration(path);
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isLoadingCalibration(), 60000);
        QVERIFY2(m_w->lab()->lastError().isEmpty(), qPrintable(m_w->lab()->lastError()));
        QCOMPARE(m_w->controls()->config().method, att::Method::Loki);
        att::AttentionConfig c = m_w->controls()->config();
        QVERIFY(c.calibration);
        c.calibration = sparqlab::capture::readCalibration(path.toStdString());
        const auto expect = sparqlab::analysis::headState(*cap, 3, 1, c);
        QCOMPARE(head().chosen, expect.chosen);
        QVERIFY(QString::fromStdString(head().stepOne.caption).contains(path));
        // On the prompt again: its own calibration, not the file's.
        c.calibration = nullptr;
        m_w->controls()->setCalibration(att::Method::Loki, nullptr);
        QVERIFY(QString::fromStdString(head().stepOne.caption)
                    .contains(QStringLiteral("the prompt itself")));
        QCOMPARE(head().chosen, sparqlab::analysis::headState(*cap, 3, 1, c).chosen);
        // Not a calibration: one line naming the file, the lab unchanged.
        const QString bad = dir.filePath(QStringLiteral("not-a-basis.h5"));
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not HDF5");
        f.close();
        m_w->lab()->loadCalibration(bad);
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isLoadingCalibration(), 60000);
        QVERIFY(m_w->lab()->lastError().contains(bad));
        QVERIFY(!m_w->lab()->lastError().contains(QLatin1Char('\n')));
        QVERIFY(!m_w->controls()->calibration(att::Method::Loki));
        m_w->controls()->setMethod(att::Method::Sparq);
        (void)head();
    }

    void aClampedKIsNotTheUsersChoice() {
        // k = 500 clamped to a 9-token prompt comes back on a longer one, and closing keeps
        // 500; a window driven from the command line keeps nothing.
        QSettings().setValue(QStringLiteral("lab/k"), 77);
        {
            MainWindow w;
            w.lab()->openModel(QStringLiteral("demo"));
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
            QCOMPARE(w.controls()->config().k, 77); // as remembered
            w.controls()->setK(500);
            w.runPrompt(QStringLiteral("Mr. Speaker, Mr. Vice President"));
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            const int64_t S = w.lab()->labCapture()->positions();
            QVERIFY(S < 500);
            QCOMPARE(w.controls()->config().k, S); // clamped to what the capture holds
            QCOMPARE(w.controls()->chosenK(), 500);
            // … and said beside the box, where a lecturer would change it.
            const auto* kRow = w.findChild<sparqlab::widgets::SliderBox*>(QStringLiteral("k"));
            QCOMPARE(kRow->note(), QStringLiteral("500 → %1").arg(S));
            w.runPrompt(QString::fromLatin1(kLabPrompt));
            QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
            const int64_t longer = w.lab()->labCapture()->positions();
            QCOMPARE(w.controls()->config().k, std::min<int64_t>(500, longer)); // back
            QCOMPARE(kRow->note(),
                     longer < 500 ? QStringLiteral("500 → %1").arg(longer) : QString());
        }
        QCOMPARE(QSettings().value(QStringLiteral("lab/k")).toInt(), 500);
        {
            MainWindow w;
            w.setRememberSettings(false);
            w.controls()->setK(9);
        }
        QCOMPARE(QSettings().value(QStringLiteral("lab/k")).toInt(), 500);
    }

    void chatModeRendersTheTemplateAndGreysItsTokens() {
        // A small random Qwen 2 with the GPT-2 tokenizer and Qwen2.5-7B-Instruct's template.
        QTemporaryDir dir;
        const QString folder = dir.filePath(QStringLiteral("qwen_chat"));
        const QString made = sparqlab::test::makeChatModel(folder);
        if (made.startsWith(QStringLiteral("skip: ")))
            QSKIP(qPrintable(made));
        QVERIFY2(made.isEmpty(), qPrintable(made));

        MainWindow w;
        w.resize(1280, 800);
        w.show();
        w.lab()->openModel(folder);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isLoading(), 60000);
        auto* chat = w.findChild<QCheckBox*>(QStringLiteral("chatMode"));
        auto* system = w.findChild<QLineEdit*>(QStringLiteral("chatSystem"));
        QVERIFY(chat && system);
        chat->setChecked(true);
        QVERIFY(system->isVisible());
        system->setText(QStringLiteral("Be brief."));
        const QString turns = QStringLiteral("user: What is SparQ?\nassistant: An attention "
                                             "approximation.\nuser: Why does it help?");
        w.promptPanel()->setPrompt(turns);
        w.runPrompt(turns);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isBusy(), 60000);
        QVERIFY2(w.lab()->labCapture() && w.lab()->lastError().isEmpty(),
                 qPrintable(w.lab()->lastError()));
        w.flushRedraw();
        // The rendering, as the template writes it.
        QCOMPARE(w.promptPanel()->renderedView()->toPlainText(),
                 QStringLiteral("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat "
                                "is SparQ?<|im_end|>\n<|im_start|>assistant\nAn attention "
                                "approximation.<|im_end|>\n<|im_start|>user\nWhy does it "
                                "help?<|im_end|>\n<|im_start|>assistant\n"));
        // The strip: the template's tokens grey, the turns' tokens not; the content tokens
        // spell the turns.
        const QString html = w.headView()->tokenView()->toHtml();
        QVERIFY(html.contains(QStringLiteral("#7a7a7a")));
        const auto* cap = w.lab()->labCapture();
        QString content, templ;
        int greyCount = 0;
        for (int64_t i = 0; i < cap->positions(); ++i) {
            bool isContent = false;
            for (const auto& [b, e] : w.currentSession().chat.contentTokens)
                isContent = isContent || (i >= b && i < e);
            (isContent ? content : templ) += QString::fromStdString(cap->tokens[i]);
            greyCount += !isContent;
        }
        QVERIFY(content.contains(QStringLiteral("What is SparQ?")));
        QVERIFY(content.contains(QStringLiteral("Why does it help?")));
        QVERIFY(!content.contains(QStringLiteral("im_start")));
        QVERIFY(templ.contains(QStringLiteral("im_start")) &&
                !templ.contains(QStringLiteral("SparQ")));
        const auto& grey = w.headView()->templateTokens();
        QCOMPARE(static_cast<int>(std::count(grey.begin(), grey.end(), true)), greyCount);
        QVERIFY(grey.front() && grey.back()); // "<|im_start|>" … "assistant\n"
        // The session keeps the turns and reopens in chat mode.
        const QString path = dir.filePath(QStringLiteral("chat.h5"));
        w.saveSessionTo(path);
        QTRY_VERIFY_WITH_TIMEOUT(!w.lab()->isExporting(), 60000);
        QVERIFY2(QFileInfo(path).size() > 0, qPrintable(w.lab()->lastError()));
        MainWindow w2;
        w2.lab()->openSession(path);
        QTRY_VERIFY_WITH_TIMEOUT(!w2.lab()->isBusy(), 60000);
        QVERIFY2(w2.lab()->lastError().isEmpty(), qPrintable(w2.lab()->lastError()));
        QVERIFY(w2.promptPanel()->chatMode());
        QCOMPARE(w2.promptPanel()->systemPrompt(), QStringLiteral("Be brief."));
        QCOMPARE(w2.promptPanel()->prompt(), turns);
        QCOMPARE(w2.currentSession().chat.contentTokens, w.currentSession().chat.contentTokens);
    }

    void cancelReturnsControlAtOnce() {
        auto* gen = m_w->findChild<QPushButton*>(QStringLiteral("generateButton"));
        auto* cancel = m_w->findChild<QPushButton*>(QStringLiteral("cancelButton"));
        auto* count = m_w->findChild<QSpinBox*>(QStringLiteral("generateCount"));
        // Not timed (a loaded CI machine): control is back within the click itself, the worker
        // stops at its next check (600 tokens would take minutes), and its result is dropped.
        const int64_t before = m_w->lab()->capturedPositions();
        count->setValue(600);
        gen->click();
        QVERIFY(m_w->lab()->isBusy() && cancel->isEnabled());
        QTest::qWait(200);
        QElapsedTimer t;
        t.start();
        cancel->click();
        QVERIFY(gen->isEnabled()); // control is back before the worker has even noticed
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isBusy(), 60000);
        qInfo("generation stopped %lld ms after Cancel", static_cast<long long>(t.elapsed()));
        QCOMPARE(m_w->lab()->capturedPositions(), before); // nothing of the cancelled run is shown
    }

    void cancelOfACaptureReturnsControlAtOnce() {
        const int64_t before = m_w->lab()->capturedPositions();
        // A prompt of the whole context (1024 tokens): the capture runs layer by layer.
        QString longPrompt;
        while (longPrompt.size() < 8000)
            longPrompt += QString::fromLatin1(kLabPrompt) + QLatin1Char(' ');
        auto* run = m_w->findChild<QPushButton*>(QStringLiteral("runButton"));
        auto* cancel = m_w->findChild<QPushButton*>(QStringLiteral("cancelButton"));
        m_w->runPrompt(longPrompt.left(3000));
        QVERIFY(m_w->lab()->isBusy() && cancel->isEnabled() && !run->isEnabled());
        QElapsedTimer t;
        t.start();
        cancel->click();
        const qint64 controlBack = t.elapsed();
        QVERIFY(run->isEnabled()); // within the click: no event had to be processed
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isBusy(), 60000);
        qInfo("capture: control back %lld ms after Cancel, worker gone after %lld ms",
              static_cast<long long>(controlBack), static_cast<long long>(t.elapsed()));
        QCOMPARE(m_w->lab()->capturedPositions(), before); // the cancelled capture is dropped
        QVERIFY(m_w->lab()->lastError().isEmpty());
    }

    void teachingRetrievalPageShowsTheInductionHead() {
        // Page 4: the repeated passage runs, the lab moves to the demo's strongest induction
        // head, whose exact attention peaks on the token after the earlier occurrence of the
        // current one, and SparQ with a small r (k = 16) selects it.
        const QString userPrompt = m_w->promptPanel()->prompt();
        // What the page replaces comes back when it is left: method, its values, the head.
        m_w->controls()->setMethod(sparqlab::attention::Method::Quest);
        m_w->controls()->setK(5); // below every prompt's length here: never clamped
        m_w->controls()->setLayerHead(1, 3);
        const sparqlab::attention::AttentionConfig before = m_w->controls()->config();
        m_w->setTeachingStep(4);
        QVERIFY(!m_w->findChild<QPushButton*>(QStringLiteral("teachNext"))->isEnabled());
        QVERIFY(m_w->findChild<QPushButton*>(QStringLiteral("teachBack"))->isEnabled());
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isBusy(), 60000);
        auto* text = m_w->findChild<QLabel*>(QStringLiteral("teachingText"));
        QVERIFY2(text->text().contains(QStringLiteral("induction score")),
                 qPrintable(text->text()));
        const auto& h = head();
        const auto* cap = m_w->lab()->labCapture();
        // The current (last) token's earlier occurrence j: the head's exact attention peaks at
        // j + 1.
        const std::vector<std::string>& tokens = cap->tokens;
        const size_t last = tokens.size() - 1;
        size_t j = last;
        while (j-- > 0 && tokens[j] != tokens[last]) {
        }
        QVERIFY(j < last);
        const auto peak = std::max_element(h.exact.begin(), h.exact.end()) - h.exact.begin();
        QCOMPARE(static_cast<size_t>(peak), j + 1);
        QVERIFY(h.exact[static_cast<size_t>(peak)] > 0.5);
        QVERIFY2(h.chosenMass >= 0.5, qPrintable(QString::number(h.chosenMass)));
        QVERIFY(m_w->controls()->config().r <= 32);
        m_w->setTeachingStep(0); // the user's prompt and settings come back, and it runs again
        QCOMPARE(m_w->promptPanel()->prompt(), userPrompt);
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->lab()->isBusy(), 60000);
        const sparqlab::attention::AttentionConfig after = m_w->controls()->config();
        QCOMPARE(after.method, sparqlab::attention::Method::Quest);
        QCOMPARE(after.k, before.k);
        QCOMPARE(after.r, before.r);
        QCOMPARE(m_w->controls()->layer(), 1);
        QCOMPARE(m_w->controls()->head(), 3);
        m_w->setTeachingStep(1);
        QVERIFY(!m_w->findChild<QPushButton*>(QStringLiteral("teachBack"))->isEnabled());
        m_w->setTeachingStep(0);
    }
};

QTEST_MAIN(TestLab)
#include "test_lab.moc"
