// DeepSeek-V4's compressed entries and the lightning indexer's scores in a capture (format
// version 6), and what reads them: overlap, attend and stats over the entries and the window each
// query sees, and the lab's views of a compressed layer, against the float64 reference of
// tests/model/deepseek_v4_reference.h (docs/learned-sparse-and-hybrid.md §17).

#include "deepseek_v4_reference.h"
#include "test_support.h"

#include "analysis/attend_run.h"
#include "analysis/compressed_keys.h"
#include "analysis/lab.h"
#include "analysis/lab_map.h"
#include "analysis/selection_overlap.h"
#include "analysis/stats_run.h"
#include "attention/method_table.h"
#include "capture/capture_file.h"
#include "capture/h5.h"
#include "model/model.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

using namespace sparqlab;
using namespace sparqlab::test::f64;
using namespace sparqlab::test::v4;

class TestDeepseekV4Entries : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    /// A capture holds every compressed layer's entries and every CSA layer's indexer scores
    /// (format version 6), in one pass and in chunks of 5, as the reference pools and scores
    /// them. Written and read back, a layer's entries, its window's positions and the indexer's
    /// choice give the model's attention output (compressed_keys.h); `overlap` runs on it.
    void entriesInACapture() {
        const QString dir = m_dir.filePath(QStringLiteral("entries"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 61);
        auto model = model::Model::open(dir.toStdString());
        const int64_t S = 29;
        const std::vector<int64_t> ids = randomIds(S, 101, 7);
        const RefOut ref = referenceV4(c, w, ids);
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.layerCompressRate, (std::vector<int64_t>{8, 4, 0, 4, 8}));
        QCOMPARE(info.layerEntryIndexed, (std::vector<int64_t>{0, 1, 0, 1, 0}));
        QCOMPARE(info.entryTopK, int64_t{3});
        QCOMPARE(info.formatVersion(), int64_t{6});
        QCOMPARE(info.entryOffset(5, S), int64_t{3 + 7 + 0 + 7 + 3}); // ⌊29 / 8⌋, ⌊29 / 4⌋
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        const model::CaptureExample chunked =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/5);
        for (const model::CaptureExample* x : {&e, &chunked}) {
            QCOMPARE(x->entries.sizes().vec(), (std::vector<int64_t>{20, 16}));
            QCOMPARE(x->entryScores.sizes().vec(), (std::vector<int64_t>{S, 20}));
            for (const int64_t l : {0, 1, 3, 4}) {
                const int64_t at0 = info.entryOffset(l, S), C = info.entryCount(l, S);
                SPARQLAB_VERIFY_CLOSE(x->entries.narrow(0, at0, C), ref.entries.at(l), 1e-4,
                                      QStringLiteral("entries, layer %1").arg(l));
                const at::Tensor scores = x->entryScores.narrow(1, at0, C);
                if (!info.entryIndexed(l)) { // HCA: no indexer
                    QVERIFY(at::isnan(scores).all().item<bool>());
                    continue;
                }
                const at::Tensor want = ref.entryScores.at(l), seen = at::isfinite(want);
                QVERIFY(at::isnan(scores).equal(seen.logical_not()));
                const at::Tensor kept = want.masked_select(seen);
                SPARQLAB_VERIFY_CLOSE(scores.masked_select(seen), kept,
                                      2e-5 * kept.abs().max().item<double>(),
                                      QStringLiteral("indexer scores, layer %1").arg(l));
            }
        }
        const std::string path = m_dir.filePath(QStringLiteral("v4.h5")).toStdString();
        capture::CaptureWriter writer(path, info);
        writer.add(e);
        writer.finish();
        const capture::CaptureReader reader(path);
        QCOMPARE(reader.info().layerCompressRate, info.layerCompressRate);
        QCOMPARE(reader.info().layerEntryIndexed, info.layerEntryIndexed);
        QCOMPARE(reader.info().entryTopK, int64_t{3});
        const model::CaptureExample back = reader.read(0);
        QVERIFY(at::equal(back.entries, e.entries));
        QVERIFY(at::allclose(back.entryScores, e.entryScores, 0, 0, /*equal_nan=*/true));
        for (int64_t l = 0; l < 5; ++l) {
            const model::CaptureExample ex = reader.readLayer(0, l);
            QCOMPARE(ex.entries.size(0), info.entryCount(l, S));
            const analysis::CompressedKeys ck = analysis::compressedKeys(reader.info(), ex, l, S);
            attention::AttentionInputs in;
            in.q = ck.q;
            in.k = in.v = ck.keys;
            in.valid = ck.model;
            const attention::AttentionConfig dense =
                analysis::compressedConfig(reader.info(), l, {});
            const at::Tensor& want = ref.attention[static_cast<size_t>(l)];
            SPARQLAB_VERIFY_CLOSE(
                attention::attendSteps(in, dense).y[0], want, 1e-4,
                QStringLiteral("the model's attention from the capture, layer %1").arg(l));
            // The indexer's choice matters: every entry a query sees is not the model's.
            in.valid = ck.visible;
            const double off = largestDifference(attention::attendSteps(in, dense).y[0], want);
            QVERIFY2(
                info.entryIndexed(l) == (off > 1e-3),
                qPrintable(
                    QStringLiteral("layer %1: every entry seen is off by %2").arg(l).arg(off)));
        }
        // The lab keeps them: its capture gives them back, and its view at an earlier query what
        // a capture of that prefix holds, which a session or an export writes.
        const auto lab = analysis::LabCapture::from(e, info);
        const model::CaptureExample whole = lab->toExample();
        QVERIFY(at::equal(whole.entries, e.entries));
        QVERIFY(at::allclose(whole.entryScores, e.entryScores, 0, 0, /*equal_nan=*/true));
        const model::CaptureExample prefix = lab->atPosition(20)->toExample();
        const model::CaptureExample fresh =
            model->capture(std::vector<int64_t>(ids.begin(), ids.begin() + 21), true);
        QCOMPARE(prefix.entries.sizes().vec(), (std::vector<int64_t>{2 + 5 + 5 + 2, 16}));
        SPARQLAB_VERIFY_CLOSE(prefix.entries, fresh.entries, 1e-5,
                              QStringLiteral("the entries of the first 21 positions"));
        const at::Tensor seen = at::isfinite(fresh.entryScores);
        QVERIFY(at::isfinite(prefix.entryScores).equal(seen));
        SPARQLAB_VERIFY_CLOSE(prefix.entryScores.masked_select(seen),
                              fresh.entryScores.masked_select(seen), 1e-4,
                              QStringLiteral("the indexer scores of the first 21 queries"));
        capture::CaptureWriter again(m_dir.filePath(QStringLiteral("v4-prefix.h5")).toStdString(),
                                     info);
        again.add(prefix);
        again.finish();
        // overlap on the capture: at a k of every key a query sees, the oracle is dense
        // attention, keeps the model's set and, on a CSA layer, differs from the model's output.
        analysis::OverlapOptions o;
        o.capturePath = path;
        o.methods = {attention::defaultConfig(attention::Method::Oracle),
                     attention::defaultConfig(attention::Method::Sparq)};
        o.ks = {4, 64};
        o.queries = 6;
        const analysis::OverlapResult r = analysis::runOverlap(o);
        QVERIFY(r.hasIndexer);
        QCOMPARE(r.indexTopK, int64_t{3});
        QCOMPARE(r.rows.size(), size_t{5 * 2 * 2});
        std::set<int64_t> layersSeen;
        for (const analysis::OverlapRow& row : r.rows) {
            const QString what = QStringLiteral("layer %1, %2 at %3")
                                     .arg(row.layer)
                                     .arg(QString::fromStdString(row.method))
                                     .arg(row.k);
            layersSeen.insert(row.layer);
            QCOMPARE(row.compressRate, info.layerCompressRate[static_cast<size_t>(row.layer)]);
            // The last query (position 28) sees ⌊29 / rate⌋ entries and the window's 6 keys.
            const int64_t entries = info.entryCount(row.layer, S);
            QCOMPARE(row.entriesSeen, entries);
            QCOMPARE(row.hasIndexer, info.entryIndexed(row.layer));
            QVERIFY2(row.k == std::min<int64_t>(row.k == 4 ? 4 : 64, entries + 6),
                     qPrintable(what));
            if (row.method == "oracle" && row.k == entries + 6) {
                QVERIFY2(row.relErrorDense < 1e-5, qPrintable(what));
                QVERIFY2(std::abs(row.topkRecall - 1) < 1e-9, qPrintable(what));
                if (row.hasIndexer) {
                    QVERIFY2(std::abs(row.indexerOverlap - 1) < 1e-9, qPrintable(what));
                    QVERIFY2(row.relErrorModel > 1e-4, qPrintable(what));
                }
            }
            if (row.k == 4) // fewer keys than seen: an error of its own
                QVERIFY2(row.relErrorDense > 1e-4 && row.mass < 1, qPrintable(what));
        }
        QCOMPARE(layersSeen.size(), size_t{5});
        // attend over the same keys: at the last 6 queries its steps' errors are overlap's, each
        // step's keys are among the ones its query sees, and the result file says how many of
        // a layer's keys are entries; its transfers count every step over the keys it sees, each
        // key its value (METHODS.md §10): dense reads (seen + 1)·D, SparQ seen·r + k·D + 3·D.
        analysis::AttendRunOptions ao;
        ao.capturePath = path;
        ao.outPath = m_dir.filePath(QStringLiteral("v4-attend.h5")).toStdString();
        ao.config = o.methods[1]; // SparQ
        ao.config.k = 4;
        ao.config.r = 16; // (overlap's r of 32, at most the head dimension)
        const analysis::AttendSummary as = analysis::runAttend(ao);
        QCOMPARE(as.entryLayers, int64_t{4});
        QCOMPARE(as.steps, 5 * S);
        const h5::Group g = h5::File::openRead(ao.outPath).root().group("examples").group("0000");
        const at::Tensor entries = g.read("entries"), rel = g.read("rel_error"),
                         idx = g.read("indices");
        const int64_t window = c["sliding_window"];
        {
            const int64_t D = info.headDim;
            double dense = 0, sparse = 0;
            for (int64_t l = 0; l < 5; ++l)
                for (int64_t p = 0; p < S; ++p) {
                    const int64_t rate = info.compressRate(l);
                    // layer 2, the window alone, counts every position as any window does
                    const int64_t seen =
                        rate > 0 ? (p + 1) / rate + std::min<int64_t>(p + 1, window) : p + 1;
                    dense += static_cast<double>((seen + 1) * D);
                    sparse +=
                        static_cast<double>(seen * 16 + std::min<int64_t>(4, seen) * D + 3 * D);
                }
            QVERIFY(std::abs(as.denseTransferPerStep - dense / (5.0 * S)) < 1e-9 * dense);
            QVERIFY2(std::abs(as.compressionRatio - sparse / dense) < 1e-12,
                     qPrintable(QString::number(as.compressionRatio)));
        }
        for (int64_t l = 0; l < 5; ++l) {
            const int64_t C = info.entryCount(l, S), rate = info.compressRate(l);
            QCOMPARE(entries[l].item<int64_t>(), C);
            if (rate == 0)
                continue;
            int compared = 0;
            for (const analysis::OverlapRow& row : r.rows)
                if (row.layer == l && row.k == 4 && row.method == "sparq") {
                    QVERIFY2(std::abs(rel[l].narrow(1, S - 6, 6).mean().item<double>() -
                                      row.relErrorDense) < 1e-5,
                             qPrintable(QStringLiteral("layer %1").arg(l)));
                    ++compared;
                }
            QCOMPARE(compared, 1);
            const at::Tensor key = idx[l];                                 // [Hq, T, W]
            const at::Tensor p = at::arange(S, at::kLong).view({1, S, 1}); // query positions
            const at::Tensor seen = key.lt(p.add(1).div(rate, "floor"))
                                        .logical_or(key.ge(C)
                                                        .logical_and(key.sub(C).le(p))
                                                        .logical_and(p.sub(key.sub(C)).lt(window)));
            QVERIFY(seen.logical_or(key.lt(0)).all().item<bool>());
            QCOMPARE(key.ge(0).sum(-1).min().item<int64_t>(), int64_t{1});
        }
        // stats scores the last query against the same keys: its coverage is the lab's, and
        // the oracle keeping every key seen recalls all of them and reads what dense does; SparQ's
        // reads are over the keys the last query sees, each its value.
        analysis::StatsOptions so = analysis::statsDefaultsFor(reader.info());
        so.capturePath = path;
        so.coverageK = 5;
        attention::AttentionConfig every = o.methods[0]; // the oracle
        so.recall = {every, ao.config};
        so.recall[0].k = S + 64;
        const analysis::StatsResult sr = analysis::runStats(so);
        QCOMPARE(sr.entryLayers, int64_t{4});
        QVERIFY(sr.recall[0].skipped.empty());
        QCOMPARE(sr.recall[0].runs, int64_t{5});
        QVERIFY(std::abs(sr.recall[0].compression - 1) < 1e-12);
        {
            const int64_t D = info.headDim, p = S - 1;
            double ratio = 0;
            for (int64_t l = 0; l < 5; ++l) {
                const int64_t rate = info.compressRate(l);
                const int64_t seen =
                    rate > 0 ? (p + 1) / rate + std::min<int64_t>(p + 1, window) : p + 1;
                ratio += static_cast<double>(seen * 16 + 4 * D + 3 * D) /
                         static_cast<double>((seen + 1) * D) / 5;
            }
            QVERIFY2(std::abs(sr.recall[1].compression - ratio) < 1e-12,
                     qPrintable(QString::number(sr.recall[1].compression)));
        }
        // A method that needs positions runs on layer 2 alone, its other rows NaN.
        so.recall = {attention::defaultConfig(attention::Method::H2O)};
        const analysis::StatsResult byH2o = analysis::runStats(so);
        QVERIFY2(byH2o.recall[0].skipped.empty(), byH2o.recall[0].skipped.c_str());
        QVERIFY(byH2o.recall[0].notOnEntries.rfind("h2o needs the keys to be positions", 0) == 0);
        QCOMPARE(byH2o.recall[0].runs, int64_t{1});
        for (int64_t l = 0; l < 5; ++l)
            QCOMPARE(at::isnan(byH2o.recall[0].perHead[l]).all().item<bool>(), l != 2);
        for (int64_t l = 0; l < 5; ++l) {
            SPARQLAB_VERIFY_CLOSE(sr.coverage[l].to(at::kFloat), lab->coverageAt(l, 5), 1e-5,
                                  QStringLiteral("coverage at 5, layer %1").arg(l));
            SPARQLAB_VERIFY_CLOSE(sr.recall[0].perHead[l], at::ones({lab->heads()}, at::kDouble),
                                  1e-9, QStringLiteral("the oracle's recall, layer %1").arg(l));
        }
    }

    /// The lab scores the decode-step query of a compressed layer against its entries and the
    /// window's positions (the head view's keys: entries first): dense attention over every key
    /// it sees, the model's own choice among them, whose output is the float64 reference's, and
    /// any method that does not need positions among the keys seen. A layer of the window alone
    /// is as before; the query × key map refuses a compressed layer with one line.
    void theLabScoresTheEntries() {
        const QString dir = m_dir.filePath(QStringLiteral("lab"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 67);
        auto model = model::Model::open(dir.toStdString());
        const int64_t S = 29, window = c["sliding_window"];
        const std::vector<int64_t> ids = randomIds(S, 101, 9);
        const RefOut ref = referenceV4(c, w, ids);
        const model::CaptureInfo info = model->captureInfo();
        const auto lab = analysis::LabCapture::from(model->capture(ids, true), info);
        attention::AttentionConfig all = attention::defaultConfig(attention::Method::Oracle);
        all.k = S + 64; // every key seen
        attention::AttentionConfig sparq = attention::defaultConfig(attention::Method::Sparq);
        sparq.r = 4;
        sparq.k = 3;
        for (int64_t l = 0; l < 5; ++l) {
            const int64_t rate = info.compressRate(l), C = info.entryCount(l, S);
            QCOMPARE(lab->compressedLayer(l), rate > 0);
            const auto cache = lab->layerCache(l);
            for (int64_t head = 0; head < lab->heads(); ++head) {
                const QString what = QStringLiteral("layer %1, head %2").arg(l).arg(head);
                const analysis::HeadState h = analysis::headState(*lab, l, head, all);
                QCOMPARE(h.entries, C);
                QCOMPARE(h.entryRate, rate);
                QCOMPARE(static_cast<int64_t>(h.exact.size()), C + S);
                // The keys the last query (position 28) sees: every entry (⌊29 / rate⌋ are
                // complete), the window's positions; s is 0 elsewhere and sums with the sink to 1.
                double sum = h.sinkShare;
                for (int64_t j = 0; j < C + S; ++j) {
                    const bool seen = j < C || j >= C + S - window;
                    QVERIFY2(seen || h.exact[static_cast<size_t>(j)] == 0, qPrintable(what));
                    sum += h.exact[static_cast<size_t>(j)];
                }
                QVERIFY2(std::abs(sum - 1) < 1e-5, qPrintable(what));
                // Every key seen kept: dense attention, each of them chosen.
                QCOMPARE(h.count, C + window);
                QVERIFY2(h.outputError < 1e-5, qPrintable(what));
                // Each key its value (METHODS.md §10): the oracle keeping every key seen reads
                // what dense reads, (keys + 1)·D.
                const double D = static_cast<double>(info.headDim);
                if (rate == 0) {
                    QVERIFY(h.modelChosen.empty());
                    QCOMPARE(h.denseTransfer, (static_cast<double>(S) + 1) * D);
                    continue;
                }
                QCOMPARE(h.keysSeen, C + window);
                QCOMPARE(h.denseTransfer, (static_cast<double>(C + window) + 1) * D);
                QCOMPARE(h.transfer, h.denseTransfer);
                // The model's own: the indexer's top 3 entries on a CSA layer, every one on an
                // HCA layer, and the window; its output is the reference's attention.
                const int64_t picks = info.entryIndexed(l) ? std::min<int64_t>(3, C) : C;
                QCOMPARE(static_cast<int64_t>(h.modelChosen.size()), picks + window);
                QVERIFY(std::all_of(h.modelChosen.begin(), h.modelChosen.end(),
                                    [&](int64_t j) { return j < C || j >= C + S - window; }));
                SPARQLAB_VERIFY_CLOSE(cache->modelY[0][head],
                                      ref.attention[static_cast<size_t>(l)][head][S - 1], 1e-4,
                                      QStringLiteral("the model's own output, ") + what);
                QVERIFY2((h.modelError > 1e-3) == static_cast<bool>(info.entryIndexed(l)),
                         qPrintable(what));
                QCOMPARE(h.modelError, h.denseModelError); // (every key kept: dense's output)
                // Its reads: its keys and the one written, and on a CSA layer the indexer's key of
                // every entry seen.
                const int64_t Di = c["index_head_dim"];
                QCOMPARE(h.modelIndexerCounted, static_cast<bool>(info.entryIndexed(l)));
                QCOMPARE(h.modelTransfer,
                         static_cast<double>(picks + window + 1) * D +
                             (info.entryIndexed(l) ? static_cast<double>(C * Di) : 0.0));
                // SparQ at k = 3 chooses among the keys seen, and differs from dense.
                const analysis::HeadState sp = analysis::headState(*lab, l, head, sparq);
                QCOMPARE(sp.count, int64_t{3});
                QVERIFY(std::all_of(sp.chosen.begin(), sp.chosen.end(),
                                    [&](int64_t j) { return j < C || j >= C + S - window; }));
                QVERIFY2(sp.outputError > 1e-4, qPrintable(what));
                QCOMPARE(sp.approx.size(), h.exact.size());
                QCOMPARE(sp.transfer, static_cast<double>(C + window) * 4 + 3 * D + 3 * D);
            }
        }
        // A method that needs positions is refused on a compressed layer, with one line, as is
        // the query × key map.
        const auto says = [](const auto& run) {
            try {
                run();
            } catch (const attention::AttentionError& e) {
                return std::string(e.what());
            }
            return std::string("(nothing thrown)");
        };
        const attention::AttentionConfig h2o = attention::defaultConfig(attention::Method::H2O);
        const std::string refused = says([&] { analysis::headState(*lab, 1, 0, h2o); });
        QVERIFY2(refused.rfind("h2o needs the keys to be positions", 0) == 0 &&
                     refused.find('\n') == std::string::npos,
                 refused.c_str());
        QVERIFY(analysis::headState(*lab, 2, 0, h2o).count > 0); // the window's layer takes it
        const std::string noMap = says([&] { analysis::queryKeyMap(*lab, 1, 0, h2o); });
        QVERIFY2(noMap.rfind("h2o needs the keys to be positions", 0) == 0, noMap.c_str());
        QCOMPARE(analysis::queryKeyMap(*lab, 2, 0, all).keys, S);
        // The query × key map of a compressed layer: its last row is the head view's weights
        // over positions (an entry where it pools), its earlier rows see fewer entries.
        for (const int64_t l : {0, 1}) {
            const analysis::QueryKeyMap map = analysis::queryKeyMap(*lab, l, 1, sparq, 8);
            QCOMPARE(map.entryRate, info.compressRate(l));
            QCOMPARE(map.keyBin, int64_t{1});
            QCOMPARE(map.rows(), int64_t{8});
            const analysis::HeadState h = analysis::headState(*lab, l, 1, sparq);
            const std::vector<float> last(map.exact.end() - S, map.exact.end());
            const std::vector<float> want = h.byPosition(h.exact);
            for (int64_t p = 0; p < S; ++p)
                QVERIFY2(std::abs(last[static_cast<size_t>(p)] - want[static_cast<size_t>(p)]) <
                             1e-6,
                         qPrintable(QStringLiteral("layer %1, position %2").arg(l).arg(p)));
            QCOMPARE(map.count.back(), h.count);
            // Row 0 (position 21) sees ⌊22 / rate⌋ entries: no weight past the last one's
            // positions but the window's.
            const std::vector<float> first(map.exact.begin(), map.exact.begin() + S);
            const int64_t pooled = 22 / info.compressRate(l) * info.compressRate(l);
            for (int64_t p = pooled; p < 22 - window; ++p)
                QCOMPARE(first[static_cast<size_t>(p)], 0.0f);
        }
        // The overview over the same keys: every key seen kept is dense attention everywhere;
        // with a method that needs positions, the compressed layers' cells of its measures are
        // empty and the rest stay.
        const analysis::Overview o = analysis::overview(*lab, all);
        for (const float e : o.grids.at(analysis::Measure::OutputError))
            QVERIFY(e < 1e-5);
        const analysis::Overview byH2o = analysis::overview(*lab, h2o);
        const int64_t Hq = lab->heads();
        for (int64_t l = 0; l < 5; ++l) {
            const float e = byH2o.grids.at(analysis::Measure::OutputError)[l * Hq];
            QCOMPARE(std::isnan(e), lab->compressedLayer(l));
            QVERIFY(std::isfinite(byH2o.grids.at(analysis::Measure::KMass90)[l * Hq]));
        }
        // A local window of 8 keys is the last 8 the query sees (entries among them where the
        // window of positions is shorter); Step 1's axis is the keys, entries first.
        attention::AttentionConfig local = sparq;
        local.k = 12;
        local.local = 8;
        for (const int64_t l : {0, 1}) {
            const analysis::HeadState h = analysis::headState(*lab, l, 0, local);
            int64_t seenAfter = 0;
            for (int64_t j = h.localFrom; j < static_cast<int64_t>(h.exact.size()); ++j)
                seenAfter += j < h.entries || j >= h.entries + S - window;
            QCOMPARE(seenAfter, int64_t{8});
            QVERIFY(h.localFrom < h.entries); // (the window holds 6 positions: 2 entries too)
        }
        const analysis::HeadState quest =
            analysis::headState(*lab, 1, 0, attention::defaultConfig(attention::Method::Quest));
        QVERIFY2(quest.stepOne.xLabel.rfind("key, the 7 entries first", 0) == 0,
                 quest.stepOne.xLabel.c_str());
        // Across layers: a compressed layer has its mass over its keys and no overlap with a
        // neighbour's set; a method that needs positions has no mass there.
        const analysis::LayerReuse reuse = analysis::layerReuse(*lab, h2o);
        QCOMPARE(reuse.entryLayers, (std::vector<int64_t>{0, 1, 3, 4}));
        for (size_t l = 0; l < 5; ++l) {
            QVERIFY(std::isnan(reuse.series[1].overlap[l])); // (no two neighbours of positions)
            QVERIFY(std::isfinite(reuse.series[0].mass[l])); // the exact top-k's
            QCOMPARE(std::isnan(reuse.series[1].mass[l]), l != 2);
        }
        // At an earlier query, the entries complete by then.
        const auto earlier = lab->atPosition(20);
        QCOMPARE(analysis::headState(*earlier, 1, 0, all).entries, info.entryCount(1, 21));
    }
};

QTEST_GUILESS_MAIN(TestDeepseekV4Entries)
#include "test_deepseek_v4_entries.moc"
