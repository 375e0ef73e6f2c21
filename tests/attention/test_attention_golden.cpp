// Agreement of the attention library with ../shared/refs/sparq/golden.h5 (SPARQ.md §8),
// for every case and parameter set, in float32 (the §8.4 float32 tolerances) and float64
// (the §8.4 float64 tolerances).

#include "golden_compare.h"
#include "test_support.h"

#include "attention/attention.h"
#include "attention/transfer.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <algorithm>
#include <limits>
#include <memory>

using namespace sparqlab;
using sparqlab::test::asSet;
using sparqlab::test::closeOn;
using sparqlab::test::codeName;
using sparqlab::test::toVector;
namespace att = sparqlab::attention;

namespace {

struct Tolerances {
    double y;       // times max(1, max|V|)
    double scalar;  // alpha, tau (relative for tau), weight_sum, mass
    double acc;     // relative
    double nearTie; // index sets must match where margin_rel >= this
};

Tolerances tolerancesFor(at::ScalarType t) {
    if (t == at::kDouble)
        return {1e-10, 1e-12, 1e-12, 1e-9};
    return {2e-5, 1e-5, 1e-5, 1e-4};
}

/// One golden case with its inputs, in the dtype under test.
struct Case : sparqlab::test::GoldenInputs {
    at::Tensor qHist, histPos, qPrefill, prefillPos;
    /// The least margin this dtype ranks by: float32's smallest normal number. A boundary
    /// whose scores differ by less sits at the edge of float32's range (scores of 1e-50 and
    /// 1e-68 are both 0 there, and the tie rule decides): a near-tie (SPARQ.md §8.4).
    double leastMargin = 0;
};

} // namespace

class TestAttentionGolden : public QObject {
    Q_OBJECT

private:
    /// The golden file shown and any kept-back one beside it (their cases whatever they are).
    std::vector<std::shared_ptr<h5::File>> m_files;

    Case loadCase(int file, const std::string& name, at::ScalarType dtype) const {
        Case c;
        c.load(*m_files[static_cast<size_t>(file)], name, dtype);
        c.leastMargin = dtype == at::kFloat ? std::numeric_limits<float>::min() : 0.0;
        const h5::Group in = c.group->group("inputs");
        c.qHist = in.read("q_hist").to(dtype);
        c.histPos = in.read("hist_pos").to(at::kLong);
        c.qPrefill = in.read("q_prefill").to(dtype);
        c.prefillPos = in.read("prefill_pos").to(at::kLong);
        return c;
    }

    /// Compares index sets per (b, h); returns a mask of entries whose other outputs should be
    /// compared (false where a near-tie legitimately flipped the set), or fails.
    at::Tensor checkIndices(const Case& c, const at::Tensor& got, const at::Tensor& want,
                            const at::Tensor& marginRel, const at::Tensor& margin, double nearTie,
                            const QString& what) {
        const int64_t B = want.size(0), H = want.size(1);
        at::Tensor ok = at::ones({B, H}, at::kBool);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h) {
                if (asSet(got[b][h]) == asSet(want[b][h]))
                    continue;
                const double mr = marginRel.defined() ? marginRel[b][h].item<double>() : INFINITY;
                const double m = margin.defined() ? margin[b][h].item<double>() : INFINITY;
                // A dyadic ties case's exact ties must follow the tie rule (§8.4), where they
                // stay exact: float64, or float32 with 1/√D a power of two (Case::exactTies).
                if (!(c.exactTies && mr == 0) && (mr < nearTie || m < c.leastMargin)) {
                    ok[b][h] = false;
                    qWarning("%s: near-tie at b=%lld h=%lld (margin_rel %g) skipped",
                             qPrintable(what), static_cast<long long>(b), static_cast<long long>(h),
                             mr);
                    continue;
                }
                QTest::qFail(qPrintable(QStringLiteral("%1: index set differs at b=%2 h=%3 "
                                                       "(margin_rel %4)")
                                            .arg(what)
                                            .arg(b)
                                            .arg(h)
                                            .arg(mr)),
                             __FILE__, __LINE__);
                return {};
            }
        return ok;
    }

    void
    runCaseDtype(const std::function<void(const Case&, const Tolerances&, const QString&)>& body) {
        QFETCH(int, file);
        QFETCH(QString, caseName);
        QFETCH(int, dtype);
        const auto st = static_cast<at::ScalarType>(dtype);
        const Case c = loadCase(file, caseName.toStdString(), st);
        body(c, tolerancesFor(st), caseName + (st == at::kDouble ? " f64" : " f32"));
    }

    void addCaseRows() { sparqlab::test::addGoldenCaseRows(m_files); }

private Q_SLOTS:
    void initTestCase() {
        sparqlab::test::openGoldenFiles(m_files, QStringLiteral("refs/sparq"),
                                        QStringLiteral("golden"),
                                        QStringLiteral("refs/sparq/golden.h5"));
    }

    void dense_data() { addCaseRows(); }
    void dense() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("dense");
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult r = att::attend({c.q, c.k, c.v, c.valid, {}}, {}, o);
            QString e =
                sparqlab::test::compareClose(r.y, g.read("y"), tol.y * c.vScale, 0, what + " y");
            QVERIFY2(e.isEmpty(), qPrintable(e));
            e = sparqlab::test::compareClose(r.probs, g.read("probs"), tol.scalar, 0,
                                             what + " probs");
            QVERIFY2(e.isEmpty(), qPrintable(e));
            e = sparqlab::test::compareClose(r.logits, g.read("logits"), tol.scalar * 10,
                                             tol.scalar, what + " logits");
            QVERIFY2(e.isEmpty(), qPrintable(e));
            e = sparqlab::test::compareClose(r.meanV, g.read("mean_v"), tol.y * c.vScale, 0,
                                             what + " mean_v");
            QVERIFY2(e.isEmpty(), qPrintable(e));
        });
    }

    void sparq_data() { addCaseRows(); }
    void sparq() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("sparq");
            const h5::Group prm = g.group("params");
            const auto r = toVector(prm.read("r")), k = toVector(prm.read("k")),
                       l = toVector(prm.read("l")), tau = toVector(prm.read("tau")),
                       gs = toVector(prm.read("group_select")),
                       cs = toVector(prm.read("component_select")),
                       re = toVector(prm.read("reallocate"));
            const at::Tensor Y = g.read("y"), A = g.read("alpha"), T = g.read("tau"),
                             I = g.read("indices"), C = g.read("comp_idx"),
                             M = g.read("margin_rel"), MG = g.read("margin");
            const int64_t debugIndex = g.read("debug/param_index").item<int64_t>();
            int64_t skipped = 0, compared = 0;
            for (size_t p = 0; p < r.size(); ++p) {
                att::AttentionConfig cfg;
                cfg.method = att::Method::Sparq;
                cfg.r = r[p];
                cfg.k = k[p];
                cfg.local = l[p];
                const QString tauCode = QString::fromStdString(codeName(prm, "tau", tau[p]));
                cfg.tau = tauCode == QLatin1String("one")
                              ? att::TauMode::One
                              : att::parseTauMode(tauCode.toStdString(), nullptr);
                cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[p]));
                cfg.components = codeName(prm, "component_select", cs[p]) == "group"
                                     ? att::ComponentSelect::Group
                                     : att::ComponentSelect::PerHead;
                cfg.meanValue = re[p] != 0;
                att::AttendOptions o;
                o.keepScores = static_cast<int64_t>(p) == debugIndex;
                const att::AttentionResult res = att::attend({c.q, c.k, c.v, c.valid, {}}, cfg, o);
                const QString w = QStringLiteral("%1 sparq[%2] r=%3 k=%4 l=%5 tau=%6")
                                      .arg(what)
                                      .arg(p)
                                      .arg(r[p])
                                      .arg(k[p])
                                      .arg(l[p])
                                      .arg(tauCode);
                // Component sets: golden is −1 padded to D.
                const int64_t rEff = res.compIdx.size(-1);
                QCOMPARE(rEff, std::min<int64_t>(r[p], c.q.size(-1)));
                QVERIFY2(res.compIdx.equal(C[p].slice(-1, 0, rEff).to(at::kLong)),
                         qPrintable(w + " comp_idx differs"));
                const at::Tensor ok =
                    checkIndices(c, res.indices, I[p], M[p], MG[p], tol.nearTie, w);
                if (!ok.defined())
                    return;
                skipped += ok.logical_not().sum().item<int64_t>();
                compared += ok.numel();
                QString e = closeOn(res.y, Y[p], ok, tol.y * c.vScale, 0, w + " y");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                e = closeOn(res.alpha, A[p], ok, tol.scalar, 0, w + " alpha");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                e = sparqlab::test::compareClose(res.tau, T[p], 0, tol.scalar, w + " tau");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                if (o.keepScores) {
                    const h5::Group d = g.group("debug");
                    e = sparqlab::test::compareClose(res.sHat, d.read("s_hat"), tol.scalar, 0,
                                                     w + " s_hat");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                    e = sparqlab::test::compareClose(res.zHat, d.read("z_hat"), tol.scalar * 10,
                                                     tol.scalar, w + " z_hat");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                    e = closeOn(res.yTopk, d.read("y_topk"), ok, tol.y * c.vScale, 0,
                                w + " y_topk");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                }
            }
            // Near-ties are rare: a set that differs at many of them is not one.
            QVERIFY2(skipped <= std::max<int64_t>(1, compared / 50),
                     qPrintable(QStringLiteral("%1 near-tie entries skipped of %2")
                                    .arg(skipped)
                                    .arg(compared)));
        });
    }

    void oracle_data() { addCaseRows(); }
    void oracle() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("oracle");
            const h5::Group prm = g.group("params");
            const auto k = toVector(prm.read("k")), l = toVector(prm.read("l")),
                       gs = toVector(prm.read("group_select"));
            const at::Tensor Y = g.read("y"), I = g.read("indices"), M = g.read("margin_rel"),
                             MG = g.read("margin"), MASS = g.read("mass");
            for (size_t p = 0; p < k.size(); ++p) {
                att::AttentionConfig cfg;
                cfg.method = att::Method::Oracle;
                cfg.k = k[p];
                cfg.local = l[p];
                cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[p]));
                const att::AttentionResult res = att::attend({c.q, c.k, c.v, c.valid, {}}, cfg);
                const QString w = QStringLiteral("%1 oracle[%2]").arg(what).arg(p);
                const at::Tensor ok =
                    checkIndices(c, res.indices, I[p], M[p], MG[p], tol.nearTie, w);
                if (!ok.defined())
                    return;
                QString e = closeOn(res.y, Y[p], ok, tol.y * c.vScale, 0, w + " y");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                e = closeOn(res.mass, MASS[p], ok, tol.scalar, 0, w + " mass");
                QVERIFY2(e.isEmpty(), qPrintable(e));
            }
        });
    }

    void flexgen_data() { addCaseRows(); }
    void flexgen() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("flexgen");
            const h5::Group prm = g.group("params");
            const auto k = toVector(prm.read("k")), gs = toVector(prm.read("group_select")),
                       re = toVector(prm.read("reallocate"));
            const at::Tensor Y = g.read("y"), I = g.read("indices"), M = g.read("margin_rel"),
                             MG = g.read("margin"), WS = g.read("weight_sum");
            for (size_t p = 0; p < k.size(); ++p) {
                att::AttentionConfig cfg;
                cfg.method = att::Method::FlexGen;
                cfg.k = k[p];
                cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[p]));
                cfg.flexgenReallocate = re[p] != 0;
                const att::AttentionResult res = att::attend({c.q, c.k, c.v, c.valid, {}}, cfg);
                const QString w = QStringLiteral("%1 flexgen[%2]").arg(what).arg(p);
                const at::Tensor ok =
                    checkIndices(c, res.indices, I[p], M[p], MG[p], tol.nearTie, w);
                if (!ok.defined())
                    return;
                QString e = closeOn(res.y, Y[p], ok, tol.y * c.vScale, 0, w + " y");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                e = closeOn(res.weightSum, WS[p], ok, tol.scalar, 0, w + " weight_sum");
                QVERIFY2(e.isEmpty(), qPrintable(e));
            }
        });
    }

    void lmInfinite_data() { addCaseRows(); }
    void lmInfinite() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("lm_infinite");
            const h5::Group prm = g.group("params");
            const auto k = toVector(prm.read("k")), sink = toVector(prm.read("sink"));
            const at::Tensor Y = g.read("y"), I = g.read("indices");
            for (size_t p = 0; p < k.size(); ++p) {
                att::AttentionConfig cfg;
                cfg.method = att::Method::LmInfinite;
                cfg.k = k[p];
                cfg.values[att::Param::Sink] = static_cast<double>(sink[p]);
                const att::AttentionResult res = att::attend({c.q, c.k, c.v, c.valid, {}}, cfg);
                const QString w = QStringLiteral("%1 lm_infinite[%2]").arg(what).arg(p);
                const at::Tensor ok = checkIndices(c, res.indices, I[p], {}, {}, tol.nearTie, w);
                if (!ok.defined())
                    return;
                const QString e = closeOn(res.y, Y[p], ok, tol.y * c.vScale, 0, w + " y");
                QVERIFY2(e.isEmpty(), qPrintable(e));
            }
        });
    }

    void h2o_data() { addCaseRows(); }
    void h2o() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            // §4.4.1 accumulation, then the single step of §4.4.2 on the golden acc.
            const at::Tensor acc = att::h2oAccumulate(c.qHist, c.k, c.valid, toVector(c.histPos));
            const at::Tensor accGold = c.group->read("h2o_accumulate/acc");
            QString e = sparqlab::test::compareClose(acc, accGold, 1e-300, tol.acc, what + " acc");
            QVERIFY2(e.isEmpty(), qPrintable(e));
            const h5::Group g = c.group->group("h2o");
            const h5::Group prm = g.group("params");
            const auto k = toVector(prm.read("k")), l = toVector(prm.read("l"));
            const at::Tensor Y = g.read("y"), I = g.read("indices"), M = g.read("margin_rel"),
                             MG = g.read("margin");
            for (size_t p = 0; p < k.size(); ++p) {
                att::AttentionConfig cfg;
                cfg.method = att::Method::H2O;
                cfg.k = k[p];
                cfg.local = l[p];
                const att::AttentionResult res =
                    att::attend({c.q, c.k, c.v, c.valid, accGold.to(c.q.scalar_type())}, cfg);
                const QString w =
                    QStringLiteral("%1 h2o[%2] k=%3 l=%4").arg(what).arg(p).arg(k[p]).arg(l[p]);
                const at::Tensor ok =
                    checkIndices(c, res.indices, I[p], M[p], MG[p], tol.nearTie, w);
                if (!ok.defined())
                    return;
                e = closeOn(res.y, Y[p], ok, tol.y * c.vScale, 0, w + " y");
                QVERIFY2(e.isEmpty(), qPrintable(e));
            }
        });
    }

    void h2oStateful_data() { addCaseRows(); }
    void h2oStateful() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("h2o_stateful");
            const at::Tensor acc0 =
                att::h2oAccumulate(c.qPrefill, c.k, c.valid, toVector(c.prefillPos));
            QString e =
                sparqlab::test::compareClose(acc0, g.read("acc0"), 1e-300, tol.acc, what + " acc0");
            QVERIFY2(e.isEmpty(), qPrintable(e));
            const h5::Group prm = g.group("params");
            const auto k = toVector(prm.read("k")), l = toVector(prm.read("l"));
            const auto stepPos = toVector(g.read("step_pos"));
            const at::Tensor qSteps = at::cat({c.qHist, c.q.unsqueeze(2)}, 2);
            const at::Tensor Y = g.read("y"), I = g.read("indices"), ALIVE = g.read("alive"),
                             ACC = g.read("acc");
            for (size_t p = 0; p < k.size(); ++p) {
                att::H2OState state(g.read("acc0").to(c.q.scalar_type()), c.valid);
                std::vector<at::Tensor> ys;
                att::AttentionResult last;
                for (size_t t = 0; t < stepPos.size(); ++t) {
                    last = state.step(qSteps.select(2, static_cast<int64_t>(t)), c.k, c.v,
                                      stepPos[t], k[p], l[p]);
                    ys.push_back(last.y);
                }
                const QString w = QStringLiteral("%1 h2o_stateful[%2]").arg(what).arg(p);
                e = sparqlab::test::compareClose(at::stack(ys, 2), Y[p], tol.y * c.vScale, 0,
                                                 w + " y");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                const at::Tensor ok = checkIndices(c, last.indices, I[p], {}, {}, tol.nearTie, w);
                QVERIFY(ok.defined());
                const at::Tensor alive = state.alive().logical_and(c.valid.unsqueeze(1));
                QVERIFY2(alive.equal(ALIVE[p].to(at::kBool)), qPrintable(w + " alive differs"));
                e = sparqlab::test::compareClose(state.acc(), ACC[p], 1e-300, tol.acc, w + " acc");
                QVERIFY2(e.isEmpty(), qPrintable(e));
            }
        });
    }

    void transferTable() {
        const auto file = std::find_if(m_files.begin(), m_files.end(), [](const auto& f) {
            return f->root().has("transfer_table");
        });
        QVERIFY2(file != m_files.end(), "no golden file holds a transfer_table");
        const h5::Group t = (*file)->root().group("transfer_table");
        const auto S = toVector(t.read("S")), d = toVector(t.read("d_h")),
                   k = toVector(t.read("k")), r = toVector(t.read("r"));
        const auto dense = toVector(t.read("count_dense")), sparq = toVector(t.read("count_sparq")),
                   h2o = toVector(t.read("count_h2o")),
                   lminf = toVector(t.read("count_lm_infinite")),
                   flexgen = toVector(t.read("count_flexgen"));
        const at::Tensor ratioSparq = t.read("ratio_sparq");
        QVERIFY(!S.empty());
        for (size_t i = 0; i < S.size(); ++i) {
            const att::TransferCounts c = att::transferCounts(S[i], d[i], k[i], r[i]);
            QCOMPARE(c.dense, dense[i]);
            QCOMPARE(c.sparq, sparq[i]);
            QCOMPARE(c.h2o, h2o[i]);
            QCOMPARE(c.lminf, lminf[i]);
            QCOMPARE(c.flexgen, flexgen[i]);
            QVERIFY(std::abs(att::compressionRatio(att::Method::Sparq, S[i], d[i], k[i], r[i]) -
                             ratioSparq[static_cast<int64_t>(i)].item<double>()) < 1e-15);
        }
    }
};

QTEST_GUILESS_MAIN(TestAttentionGolden)
#include "test_attention_golden.moc"
