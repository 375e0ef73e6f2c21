// The lab window on the demo model, driven through its controls offscreen: what the views
// show follows the controls and the invariants of SPARQ.md (r = d_h and k = S make SparQ
// exact with α = 1; coverage is the true top-k mass; the transfer counts are Eq. 3/11).

#include "test_support.h"

#include "app/gui/main_window.h"
#include "widgets/lab_views.h"
#include "widgets/panels.h"

#include "attention/methods.h"
#include "capture/capture_file.h"

#include <QComboBox>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

using sparqlab::app::MainWindow;

namespace {
const char* kPrompt =
    "Mr. Speaker, Mr. Vice President, Members of Congress, distinguished guests, and fellow "
    "Americans: Last month, I went to Andrews Air Force Base and welcomed home some of our last "
    "troops to serve in Iraq. Together, we offered a final, proud salute to the colors under "
    "which more than a million of our fellow citizens fought and several thousand gave their "
    "lives. We gather tonight knowing that this generation of heroes has made the United States "
    "safer and more respected around the world.";
} // namespace

class TestLab : public QObject {
    Q_OBJECT
    std::unique_ptr<MainWindow> m_w;

    const sparqlab::analysis::HeadState& head() const { return m_w->headView()->state(); }

private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true); // settings of tests stay out of the user's
        m_w = std::make_unique<MainWindow>();
        m_w->resize(1400, 900);
        m_w->show();
        m_w->openModel(QStringLiteral("demo"));
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isLoading(), 60000);
        m_w->runPrompt(QString::fromLatin1(kPrompt));
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isBusy(), 120000);
        QVERIFY2(m_w->labCapture() && m_w->lastError().isEmpty(), qPrintable(m_w->lastError()));
    }

    void controlsFollowTheCapture() {
        const auto* c = m_w->labCapture();
        auto* r = m_w->findChild<QSlider*>(QStringLiteral("rSlider"));
        auto* k = m_w->findChild<QSlider*>(QStringLiteral("kSlider"));
        QVERIFY(r && k);
        QCOMPARE(r->maximum(), static_cast<int>(c->headDim()));   // r ≤ d_h
        QCOMPARE(k->maximum(), static_cast<int>(c->positions())); // k ≤ S
        auto* kBox = m_w->findChild<QSpinBox*>(QStringLiteral("kBox"));
        kBox->setValue(100000); // beyond S: clamped, never an error
        QCOMPARE(kBox->value(), static_cast<int>(c->positions()));
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
            m_w->controls()->setMethod(m.id);
            QCOMPARE(m_w->controls()->config().method, m.id);
            for (const auto& p : sparqlab::attention::parameters())
                QVERIFY2(m_w->controls()->isShown(p.id) == sparqlab::attention::takes(m.id, p.id),
                         qPrintable(QStringLiteral("%1: --%2").arg(m.name, p.option)));
            QVERIFY2(m_w->lastError().isEmpty(),
                     qPrintable(QString::fromUtf8(m.name) + ": " + m_w->lastError()));
            QCOMPARE(head().method, m.id);
            const int64_t S = m_w->labCapture()->positions();
            if (m.selects && m.id != sparqlab::attention::Method::OracleTopP &&
                m.id != sparqlab::attention::Method::SparqTopP &&
                m.id != sparqlab::attention::Method::Quest)
                QCOMPARE(head().count, std::min<int64_t>(24, S));
            QVERIFY(head().outputError >= 0 && head().topkAgreement <= 1.0 + 1e-9);
            // The transfer panel shows the method's own formula.
            QVERIFY(m_w->transferPanel()->text()->text().contains(
                QString::fromUtf8(m.transferFormula)));
        }
        m_w->controls()->setMethod(sparqlab::attention::Method::Sparq);
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
        const int64_t S = m_w->labCapture()->positions();
        for (int64_t j = S - 5; j < S; ++j)
            QVERIFY(std::binary_search(head().chosen.begin(), head().chosen.end(), j));
        m_w->controls()->setLocal(0);
    }

    void fullRankAndAllPositionsIsExact() {
        const auto* c = m_w->labCapture();
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
        m_w->showView(1);
        auto* ov = m_w->overviewView();
        const auto* c = m_w->labCapture();
        // Coverage is the exact mass of the true top-k: the head view's number for each head.
        for (int layer = 0; layer < c->layers(); ++layer)
            for (int h = 0; h < c->heads(); ++h) {
                m_w->controls()->setLayerHead(layer, h);
                QVERIFY(std::abs(ov->cell(0, layer, h) - head().trueMass) < 1e-4);
                QVERIFY(ov->cell(2, layer, h) >= 0 && ov->cell(2, layer, h) <= 1);
            }
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
        const int64_t S = m_w->labCapture()->positions(), d = m_w->labCapture()->headDim();
        const QString text = m_w->transferPanel()->text()->text();
        const QString dense = QLocale().toString(static_cast<qlonglong>(2 * S * d + 2 * d));
        const QString sparq =
            QLocale().toString(static_cast<qlonglong>(S * 16 + 2 * 32 * d + 4 * d));
        QVERIFY2(text.contains(dense) && text.contains(sparq), qPrintable(text));
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

    void exportsThePapersFigures() {
        QTemporaryDir dir;
        m_w->exportFigureSetTo(dir.path());
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isExporting(), 120000);
        QVERIFY2(m_w->lastExportCount() >= 10, qPrintable(m_w->lastError()));
        QVERIFY(QFileInfo(dir.filePath(QStringLiteral("capture.h5"))).size() > 0);
        QVERIFY(QFileInfo(dir.filePath(QStringLiteral("fig4a_coverage_histogram.png"))).size() >
                1000);
        // The capture file is the lab's own capture: its keys are the ones shown.
        m_w->exportCaptureTo(dir.filePath(QStringLiteral("lab.h5")));
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isExporting(), 60000);
        sparqlab::capture::CaptureReader reader(
            dir.filePath(QStringLiteral("lab.h5")).toStdString());
        const sparqlab::capture::CaptureExample e = reader.read(0);
        QVERIFY(e.k[1].equal(m_w->labCapture()->k[1]));
        QCOMPARE(e.tokens, m_w->labCapture()->tokens);
    }

    void exportDuringGenerationKeepsTheWindowTurning() {
        // An export started while Generate runs uses the lab's capture, not the model (which
        // the generation holds): neither crashes, and the event loop keeps turning.
        auto* gen = m_w->findChild<QPushButton*>(QStringLiteral("generateButton"));
        auto* count = m_w->findChild<QSpinBox*>(QStringLiteral("generateCount"));
        count->setValue(200);
        QElapsedTimer clock;
        clock.start();
        qint64 last = 0, longest = 0;
        QTimer tick;
        QObject::connect(&tick, &QTimer::timeout, [&] {
            longest = std::max(longest, clock.elapsed() - last);
            last = clock.elapsed();
        });
        tick.start(5);
        gen->click();
        QVERIFY(m_w->isBusy());
        QTemporaryDir dir;
        m_w->exportFigureSetTo(dir.path());
        QVERIFY(m_w->isExporting());
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isExporting() && !m_w->isBusy(), 120000);
        tick.stop();
        qInfo("export during generation: longest event-loop stall %lld ms",
              static_cast<long long>(longest));
        QVERIFY2(m_w->lastExportCount() >= 10, qPrintable(m_w->lastError()));
        QVERIFY2(longest < 1000, qPrintable(QString::number(longest)));
        count->setValue(32);
    }

    void badInputIsAMessageNotACrash() {
        m_w->runPrompt(QStringLiteral("   "));
        QVERIFY(m_w->lastError().contains(QStringLiteral("empty")));
        QVERIFY(m_w->isVisible());
        m_w->runPrompt(QString::fromLatin1(kPrompt)); // the lab recovers
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isBusy(), 60000);
        QVERIFY(m_w->lastError().isEmpty());
    }

    void cancelReturnsControlAtOnce() {
        auto* gen = m_w->findChild<QPushButton*>(QStringLiteral("generateButton"));
        auto* cancel = m_w->findChild<QPushButton*>(QStringLiteral("cancelButton"));
        auto* count = m_w->findChild<QSpinBox*>(QStringLiteral("generateCount"));
        count->setValue(600);
        gen->click();
        QVERIFY(m_w->isBusy() && cancel->isEnabled());
        QTest::qWait(200);
        QElapsedTimer t;
        t.start();
        cancel->click();
        QVERIFY(gen->isEnabled()); // control is back before the worker has even noticed
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isBusy(), 2000);
        qInfo("generation stopped %lld ms after Cancel", static_cast<long long>(t.elapsed()));
        QVERIFY(t.elapsed() < 1000);
    }

    void cancelOfACaptureReturnsControlAtOnce() {
        const int64_t before = m_w->capturedPositions();
        // A prompt of the whole context (1024 tokens): the capture runs layer by layer.
        QString longPrompt;
        while (longPrompt.size() < 8000)
            longPrompt += QString::fromLatin1(kPrompt) + QLatin1Char(' ');
        auto* run = m_w->findChild<QPushButton*>(QStringLiteral("runButton"));
        auto* cancel = m_w->findChild<QPushButton*>(QStringLiteral("cancelButton"));
        m_w->runPrompt(longPrompt.left(3000));
        QVERIFY(m_w->isBusy() && cancel->isEnabled() && !run->isEnabled());
        QElapsedTimer t;
        t.start();
        cancel->click();
        const qint64 controlBack = t.elapsed();
        QVERIFY(run->isEnabled());
        QVERIFY2(controlBack < 200, qPrintable(QString::number(controlBack)));
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isBusy(), 5000);
        qInfo("capture: control back %lld ms after Cancel, worker gone after %lld ms",
              static_cast<long long>(controlBack), static_cast<long long>(t.elapsed()));
        QCOMPARE(m_w->capturedPositions(), before); // the cancelled capture is dropped
        QVERIFY(m_w->lastError().isEmpty());
    }

    void teachingRetrievalPageShowsTheInductionHead() {
        // Page 4: the repeated passage runs, the lab moves to the demo's strongest induction
        // head, whose exact attention peaks on the token after the earlier occurrence of the
        // current one, and SparQ with a small r (k = 16) selects it.
        m_w->setTeachingStep(4);
        QTRY_VERIFY_WITH_TIMEOUT(!m_w->isBusy(), 60000);
        auto* text = m_w->findChild<QLabel*>(QStringLiteral("teachingText"));
        QVERIFY2(text->text().contains(QStringLiteral("induction score")),
                 qPrintable(text->text()));
        const auto& h = head();
        const auto* cap = m_w->labCapture();
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
        m_w->setTeachingStep(0);
    }
};

QTEST_MAIN(TestLab)
#include "test_lab.moc"
