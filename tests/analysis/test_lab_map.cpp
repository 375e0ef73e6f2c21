// Any query of a head (issue 36): the lab's view of the query of any held position
// (LabCapture::atPosition) and the query × key map of a head. Each row of the map is the head
// view of that row's query (exact s, the method's ŝ and chosen set, the chosen mass) for every
// method of the table, on real checkpoints from refs/hf3 (gpt-oss: sinks and windows; Command
// R7B: windows and NoPE); binned columns hold the largest of their keys; rows are causal.

#include "../attention/method_inputs.h"
#include "test_support.h"

#include "analysis/lab.h"
#include "analysis/lab_map.h"
#include "attention/method_spec.h"
#include "attention/method_table.h"
#include "model/model.h"

#include <ATen/ATen.h>
#include <QFileInfo>
#include <QtTest>

#include <cmath>

using namespace sparqlab;

namespace {

std::shared_ptr<analysis::LabCapture> labOf(const QString& folder, int64_t S) {
    auto model = model::Model::open(folder.toStdString());
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < S; ++i)
        ids.push_back((i * 37 + 11) % 90 + 3);
    const model::CaptureExample e = model->capture(ids, false, -1, {}, /*recent=*/S);
    return analysis::LabCapture::from(e, model->captureInfo());
}

attention::AttentionConfig configOf(attention::Method m) {
    attention::AttentionConfig c = attention::defaultConfig(m);
    c.k = 6;
    c.r = 8;
    c.p = 0.8;
    c.snapWindow = 4;
    sparqlab::test::smallShapes(c, c.k); // METHODS2/3's methods at a 30-token prompt
    return c;
}

} // namespace

class TestLabMap : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void eachRowIsTheHeadViewOfItsQuery_data() {
        QTest::addColumn<QString>("folder");
        const QString hf3 = sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/");
        QTest::newRow("gpt_oss") << hf3 + "gpt_oss";
        QTest::newRow("cohere2") << hf3 + "cohere2";
        // DeepSeek-V3.2: the map of its own indexer's selection too.
        QTest::newRow("deepseek_v32")
            << sparqlab::test::sharedDir() + QStringLiteral("/refs/hf4/deepseek_v32");
    }

    void eachRowIsTheHeadViewOfItsQuery() {
        QFETCH(QString, folder);
        SPARQLAB_NEED_REFERENCE("refs/" + QFileInfo(folder).dir().dirName() + "/" +
                                QFileInfo(folder).fileName() + "/config.json");
        const int64_t S = 30;
        const auto cap = labOf(folder, S);
        const int64_t head = 1, rows = 12;
        for (int64_t layer = 0; layer < cap->layers(); ++layer) {
            for (const attention::MethodInfo& info : attention::methods()) {
                if (info.id == attention::Method::Indexer && cap->indexScores.empty())
                    continue; // needs a DSA model's scores (test_lab_models: its one line)
                const attention::AttentionConfig c = configOf(info.id);
                const QString where =
                    QString::fromUtf8(info.name) + QStringLiteral(", layer %1").arg(layer);
                const analysis::QueryKeyMap m = analysis::queryKeyMap(*cap, layer, head, c, rows);
                QCOMPARE(m.rows(), rows);
                QCOMPARE(m.lastQuery, S - 1);
                QCOMPARE(m.keyBin, int64_t{1});
                QCOMPARE(static_cast<int64_t>(m.exact.size()), rows * S);
                for (const int64_t p : {S - rows, S - 5, S - 1}) {
                    const auto at = p == S - 1 ? cap : cap->atPosition(p);
                    QCOMPARE(at->positions(), p + 1);
                    const analysis::HeadState h = analysis::headState(*at, layer, head, c);
                    const size_t row = static_cast<size_t>((p - m.firstQuery) * m.columns);
                    for (int64_t j = 0; j < S; ++j) {
                        const size_t cell = row + static_cast<size_t>(j);
                        const float want = j <= p ? h.exact[static_cast<size_t>(j)] : 0.0f;
                        QVERIFY2(std::abs(m.exact[cell] - want) < 1e-5, qPrintable(where));
                        const bool chosen = std::binary_search(h.chosen.begin(), h.chosen.end(), j);
                        QVERIFY2(
                            static_cast<bool>(m.chosen[cell]) == chosen,
                            qPrintable(where +
                                       QStringLiteral(": position %1 at query %2").arg(j).arg(p)));
                        if (!h.approx.empty())
                            QVERIFY2(std::abs(m.approx[cell] -
                                              (j <= p ? h.approx[static_cast<size_t>(j)] : 0.0f)) <
                                         1e-5,
                                     qPrintable(where));
                    }
                    QCOMPARE(h.approx.empty(), m.approx.empty());
                    QVERIFY2(std::abs(m.chosenMass[static_cast<size_t>(p - m.firstQuery)] -
                                      h.chosenMass) < 1e-4,
                             qPrintable(where));
                    QCOMPARE(m.count[static_cast<size_t>(p - m.firstQuery)], h.count);
                }
            }
        }
    }

    void binsHoldTheLargestOfTheirKeys() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf3/smollm3/config.json"));
        const auto cap =
            labOf(sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/smollm3"), 37);
        const attention::AttentionConfig c = configOf(attention::Method::Sparq);
        const analysis::QueryKeyMap full = analysis::queryKeyMap(*cap, 0, 0, c, 8, 100);
        const analysis::QueryKeyMap bin = analysis::queryKeyMap(*cap, 0, 0, c, 8, 5);
        QCOMPARE(bin.keyBin, int64_t{8}); // ⌈37 / 5⌉
        // Eight rows of the 37 held queries: they start after the first held one.
        QCOMPARE(full.firstQuery, int64_t{29});
        QCOMPARE(full.firstHeld, 37 - cap->history());
        QVERIFY(full.firstQuery > full.firstHeld);
        QCOMPARE(bin.columns, int64_t{5});
        for (int64_t p = full.firstQuery; p <= full.lastQuery; ++p)
            for (int64_t col = 0; col < bin.columns; ++col) {
                float mx = 0;
                bool any = false;
                for (int64_t j = col * 8; j < std::min<int64_t>(37, col * 8 + 8); ++j) {
                    mx = std::max(mx, full.exact[static_cast<size_t>(full.cell(p, j))]);
                    any = any || full.chosen[static_cast<size_t>(full.cell(p, j))];
                }
                const size_t cell = static_cast<size_t>(bin.cell(p, col * 8));
                QCOMPARE(bin.exact[cell], mx);
                QCOMPARE(static_cast<bool>(bin.chosen[cell]), any);
            }
        QCOMPARE(bin.cell(full.firstQuery - 1, 0), int64_t{-1});
        QCOMPARE(bin.cell(full.lastQuery, 37), int64_t{-1});
    }

    void stepOneShowsWhatTheMethodRanksBy() {
        // Each unit's Step 1 (attention::StepOneView) against what its selection did.
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf3/smollm3/config.json"));
        const auto cap =
            labOf(sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/smollm3"), 40);
        const int64_t layer = 1, head = 2, D = cap->headDim();
        const at::Tensor q = cap->q[layer][head];
        auto state = [&](attention::Method m) {
            attention::AttentionConfig c = configOf(m);
            c.gqa = attention::GroupSelect::PerHead; // each head's own ranking: its own curve
            if (attention::methodInfo(m).budgetVaries)
                c.k = attention::AttentionConfig::kNoCap; // p alone sets n
            c.pageSize = 4;
            c.local = 0;
            return analysis::headState(*cap, layer, head, c);
        };
        auto usedCount = [](const attention::StepOneView& v) {
            return std::count(v.used.begin(), v.used.end(), uint8_t{1});
        };
        // Loki: |q·P_i| over an orthonormal basis keeps |q|; the first r directions are used.
        const analysis::HeadState loki = state(attention::Method::Loki);
        QCOMPARE(static_cast<int64_t>(loki.stepOne.values.size()), D);
        double sq = 0;
        for (const double x : loki.stepOne.values)
            sq += x * x;
        QVERIFY(std::abs(std::sqrt(sq) - q.norm().item<double>()) < 1e-3 * q.norm().item<double>());
        QCOMPARE(usedCount(loki.stepOne), configOf(attention::Method::Loki).r);
        for (int64_t i = 0; i < D; ++i)
            QCOMPARE(loki.stepOne.used[static_cast<size_t>(i)] != 0, i < 8);
        // Double Sparsity: |q| with r calibrated channels marked.
        const analysis::HeadState ds = state(attention::Method::DoubleSparsity);
        QCOMPARE(usedCount(ds.stepOne), int64_t{8});
        for (int64_t i = 0; i < D; ++i)
            QVERIFY(std::abs(ds.stepOne.values[static_cast<size_t>(i)] -
                             std::abs(q[i].item<double>())) < 1e-6);
        // Quest: every chosen position lies in a page marked as used; one bar per page.
        const analysis::HeadState quest = state(attention::Method::Quest);
        QCOMPARE(static_cast<int64_t>(quest.stepOne.values.size()), int64_t{10}); // ⌈40 / 4⌉
        QVERIFY(usedCount(quest.stepOne) >= 1);
        for (const int64_t j : quest.chosen)
            QVERIFY(quest.stepOne.used[static_cast<size_t>(j / 4)]);
        QCOMPARE(static_cast<int64_t>(quest.chosen.size()), 4 * usedCount(quest.stepOne));
        // Top-p: a cumulative curve, non-decreasing to the whole mass, its first n ranks used.
        for (const attention::Method m :
             {attention::Method::OracleTopP, attention::Method::SparqTopP}) {
            const analysis::HeadState h = state(m);
            const attention::StepOneView& v = h.stepOne;
            QVERIFY(v.curve);
            QCOMPARE(v.cut, 0.8);
            QCOMPARE(usedCount(v), h.count);
            for (size_t i = 1; i < v.values.size(); ++i)
                QVERIFY(v.values[i] >= v.values[i - 1] - 1e-12);
            QVERIFY(std::abs(v.values.back() - 1) < 1e-4);
            if (m == attention::Method::OracleTopP) // reaches p at n, not before
                QVERIFY(v.values[static_cast<size_t>(h.count - 1)] >= 0.8 - 1e-6 &&
                        (h.count == 1 || v.values[static_cast<size_t>(h.count - 2)] < 0.8));
        }
        // SparQ keeps the head view's own |q| panel.
        QVERIFY(state(attention::Method::Sparq).stepOne.values.empty());
    }

    void outOfRangeIsOneLine() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf3/smollm3/config.json"));
        const auto cap =
            labOf(sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/smollm3"), 10);
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError, cap->atPosition(10));
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError, cap->atPosition(-1));
        QVERIFY_THROWS_EXCEPTION(
            attention::AttentionError,
            analysis::queryKeyMap(*cap, 0, 99, configOf(attention::Method::Sparq)));
        // The decode step is the position after the prompt's last: the same view.
        QCOMPARE(cap->atPosition(4)->positions(), int64_t{5});
        QCOMPARE(cap->atPosition(4)->firstHeldQuery(), int64_t{0});
        // A view at another query ranks with the prompt's calibration (made once, shared).
        const attention::AttentionConfig loki = configOf(attention::Method::Loki);
        QVERIFY(cap->layerConfig(0, loki).calibration);
        QCOMPARE(cap->atPosition(4)->layerConfig(0, loki).calibration,
                 cap->layerConfig(0, loki).calibration);
    }
};

QTEST_GUILESS_MAIN(TestLabMap)
#include "test_lab_map.moc"
