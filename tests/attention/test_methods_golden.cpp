// Agreement of the successors of METHODS.md (Quest, Loki, Double Sparsity, the top-p methods,
// SnapKV, TOVA), their calibrations and the budget statistics with
// ../shared/refs/methods/golden_methods.h5, for every case and parameter set, in float32 and
// float64 with the tolerances of METHODS.md §12.5.

#include "golden_compare.h"
#include "test_support.h"

#include "attention/attention.h"
#include "attention/budget_stats.h"
#include "attention/method_table.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

using namespace sparqlab;
using sparqlab::test::asSet;
using sparqlab::test::closeOn;
using sparqlab::test::codeName;
using sparqlab::test::toVector;
namespace att = sparqlab::attention;

namespace {

/// METHODS.md §12.5, per precision.
struct Tolerances {
    double y;          // times max(1, max|V|)
    double scalar;     // mass, est_mass, alpha, recall
    double diag;       // relative: page_score, z_hat, votes, pooled, score_*
    double nearTie;    // index sets must match where margin_rel >= this
    double massTie;    // top-p counts and k_mass must match where their mass margin >= this
    double eig;        // loki eigenvalues, times λ_max
    double basis;      // loki basis columns
    double basisGap;   // … compared where both eigen-gaps >= this (relative to λ_max)
    double channelGap; // ds channels compared where adjacent scores differ >= this (relative)
};

Tolerances tolerancesFor(at::ScalarType t) {
    if (t == at::kDouble)
        return {1e-10, 1e-12, 1e-12, 1e-9, 1e-12, 1e-12, 1e-9, 1e-6, 1e-9};
    return {2e-5, 1e-5, 1e-5, 1e-4, 1e-5, 1e-6, 1e-4, 1e-3, 1e-5};
}

struct Case : sparqlab::test::GoldenInputs {
    at::Tensor qWin, qSteps, calibQ, calibK, basis, channels;
    std::vector<int64_t> stepPos;
    bool exactMass = false; // a ties case whose masses reach p exactly in this dtype (dyadicRows)
};

/// Where a count decided by a mass criterion (top-p, k_mass) must match: its mass margin is
/// clear, or the case's masses reach p exactly in this dtype (a ties case over rows of 2^n valid
/// positions: every one in float64; in float32 those the reference reaches exactly, margin 0 —
/// a head of non-uniform probabilities rounds there).
at::Tensor massDecided(const Case& c, const at::Tensor& margin, const Tolerances& tol) {
    const at::Tensor clear = margin.ge(tol.massTie);
    if (!c.exactMass)
        return clear;
    return c.float64() ? at::ones_like(clear) : clear.logical_or(margin.eq(0));
}

} // namespace

class TestMethodsGolden : public QObject {
    Q_OBJECT

private:
    /// The golden file shown and any kept-back one beside it (their cases whatever they are).
    std::vector<std::shared_ptr<h5::File>> m_files;

    Case loadCase(int file, const std::string& name, at::ScalarType dtype) const {
        Case c;
        c.load(*m_files[static_cast<size_t>(file)], name, dtype);
        c.exactMass = c.dyadic && (c.float64() || sparqlab::test::dyadicRows(c.valid));
        const h5::Group in = c.group->group("inputs");
        c.qWin = in.read("q_win").to(dtype);
        c.qSteps = in.read("q_steps").to(dtype);
        c.stepPos = toVector(in.read("step_pos"));
        c.calibQ = in.read("calib_q").to(dtype);
        c.calibK = in.read("calib_K").to(dtype);
        c.basis = in.read("loki_basis").to(dtype);
        c.channels = in.read("ds_channels").to(at::kLong);
        return c;
    }

    /// Index sets per (b, h) against the golden ones; returns the mask of entries whose other
    /// outputs are comparable (false where a near-tie legitimately flipped the set), or an
    /// undefined tensor after failing.
    /// `decided` (optional, [B, H]) marks the entries whose set is decided at all: a top-p
    /// count near its mass criterion may legitimately differ by one, and its set with it
    /// (METHODS.md §12.5: counts exact where the mass margin is clear and margin_rel too).
    /// A ties case's ties (margin 0) follow the lower-index rule where they stay exact
    /// (Case::exactTies): in float64, and in float32 where 1/√D is a power of two. Otherwise
    /// float32 rounds them
    /// (D = 8 or 32), the reference run in float32 picks other sets too, and they are near-ties
    /// (docs/design/METHODS.md §12.5).
    at::Tensor checkSets(const Case& c, const at::Tensor& got, const at::Tensor& want,
                         const at::Tensor& marginRel, double nearTie, const QString& what,
                         bool exactTies, const at::Tensor& decided = {}) {
        const int64_t B = want.size(0), H = want.size(1);
        at::Tensor ok = at::ones({B, H}, at::kBool);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h) {
                if (asSet(got[b][h]) == asSet(want[b][h]))
                    continue;
                const double mr = marginRel.defined() ? marginRel[b][h].item<double>() : INFINITY;
                const bool undecided = decided.defined() && !decided[b][h].item<bool>();
                // (a margin above 0 but below the tolerance: a tie the reference's own
                // arithmetic rounded, SnapKV's average over a kernel of 3 or 5)
                const bool exactTie = exactTies && c.exactTies && mr == 0;
                if (undecided || (!exactTie && mr < nearTie)) {
                    ok[b][h] = false;
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

    /// The outputs every decode-step method shares (§1.3): indices, count, mass, y, recall.
    /// `extraOk` narrows the comparable entries (top-p counts near a mass tie).
    bool checkCommon(const Case& c, const Tolerances& tol, const h5::Group& g, int64_t p,
                     const att::AttentionResult& r, const QString& w, at::Tensor* okOut = nullptr,
                     const at::Tensor& extraOk = {}, bool exactTies = true) {
        const at::Tensor M = g.read("margin_rel")[p];
        at::Tensor ok =
            checkSets(c, r.indices, g.read("indices")[p], M, tol.nearTie, w, exactTies, extraOk);
        if (!ok.defined())
            return false;
        QString e = closeOn(r.count, g.read("count")[p], ok, 0, 0, w + " count");
        if (!e.isEmpty()) {
            QTest::qFail(qPrintable(e), __FILE__, __LINE__);
            return false;
        }
        for (const auto& [name, tensor, atol] :
             {std::tuple<const char*, at::Tensor, double>{"mass", r.mass, tol.scalar},
              {"y", r.y, tol.y * c.vScale}}) {
            e = closeOn(tensor, g.read(name)[p], ok, atol, 0, w + " " + name);
            if (!e.isEmpty()) {
                QTest::qFail(qPrintable(e), __FILE__, __LINE__);
                return false;
            }
        }
        // §9.2 recall of the set, where the oracle's own set is not decided by a near-tie.
        const att::Recall rec = att::recallAtK(c.q, c.k, c.valid, r.indices);
        const at::Tensor recMargin = g.read("recall_margin_rel")[p];
        const at::Tensor recOk = ok.logical_and(
            recMargin.ge(tol.nearTie)
                .logical_or(recMargin.eq(0).logical_and(at::full_like(ok, c.exactTies))));
        e = closeOn(rec.recall, g.read("recall")[p], recOk, tol.scalar, 0, w + " recall");
        if (!e.isEmpty()) {
            QTest::qFail(qPrintable(e), __FILE__, __LINE__);
            return false;
        }
        if (okOut)
            *okOut = ok;
        return true;
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

    static std::shared_ptr<att::Calibration> basisOf(const Case& c) {
        auto cal = std::make_shared<att::Calibration>();
        cal->method = att::Method::Loki;
        cal->tensors["basis"] = c.basis.unsqueeze(0);
        cal->source = "golden";
        return cal;
    }
    static std::shared_ptr<att::Calibration> channelsOf(const Case& c) {
        auto cal = std::make_shared<att::Calibration>();
        cal->method = att::Method::DoubleSparsity;
        cal->tensors["channels"] = c.channels.unsqueeze(0);
        cal->source = "golden";
        return cal;
    }

private Q_SLOTS:
    void initTestCase() {
        sparqlab::test::openGoldenFiles(m_files, QStringLiteral("refs/methods"),
                                        QStringLiteral("golden_methods"),
                                        QStringLiteral("refs/methods/golden_methods.h5"));
    }

    void dense_data() { addCaseRows(); }
    void dense() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("dense");
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult r = att::attend({c.q, c.k, c.v, c.valid, {}, {}}, {}, o);
            const at::Tensor all = at::ones({r.y.size(0), r.y.size(1)}, at::kBool);
            QString e = closeOn(r.y, g.read("y"), all, tol.y * c.vScale, 0, what + " y");
            QVERIFY2(e.isEmpty(), qPrintable(e));
            e = closeOn(r.probs, g.read("probs"), all, tol.scalar, 0, what + " probs");
            QVERIFY2(e.isEmpty(), qPrintable(e));
        });
    }

    void lokiCalibrate_data() { addCaseRows(); }
    void lokiCalibrate() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            for (const bool center : {true, false}) {
                const h5::Group g =
                    c.group->group(center ? "loki_calibrate" : "loki_calibrate_uncentered");
                const att::LokiCalibration r = att::lokiCalibrate(c.calibK, center);
                const at::Tensor ev = g.read("eigenvalues"); // [Hkv, D]
                const QString w = what + (center ? " centred" : " uncentred");
                const at::Tensor all = at::ones({ev.size(0), 1}, at::kBool);
                for (int64_t u = 0; u < ev.size(0); ++u) {
                    const double lmax = ev[u].abs().max().item<double>();
                    QString e = closeOn(r.eigenvalues[u].unsqueeze(0), ev[u].unsqueeze(0),
                                        all.narrow(0, 0, 1), tol.eig * lmax, 0, w + " eigenvalues");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                    // Columns where both eigen-gaps are clear (§12.5), sign rule included.
                    const int64_t D = ev.size(1);
                    for (int64_t i = 0; i < D; ++i) {
                        const double li = ev[u][i].item<double>();
                        const double gapPrev =
                            i > 0 ? std::abs(ev[u][i - 1].item<double>() - li) : INFINITY;
                        const double gapNext =
                            i + 1 < D ? std::abs(ev[u][i + 1].item<double>() - li) : INFINITY;
                        if (gapPrev / lmax < tol.basisGap || gapNext / lmax < tol.basisGap)
                            continue;
                        const double d = (r.basis[u].select(1, i).to(at::kDouble) -
                                          g.read("basis")[u].select(1, i))
                                             .abs()
                                             .max()
                                             .item<double>();
                        QVERIFY2(d <= tol.basis, qPrintable(QStringLiteral("%1 basis column %2 "
                                                                           "of head %3: %4")
                                                                .arg(w)
                                                                .arg(i)
                                                                .arg(u)
                                                                .arg(d)));
                    }
                }
                QString e = closeOn(r.explainedVarianceRatio, g.read("explained_variance_ratio"),
                                    all, tol.eig, 0, w + " explained variance");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                e = closeOn(r.mean, g.read("mean"), all, tol.eig, tol.eig, w + " mean");
                QVERIFY2(e.isEmpty(), qPrintable(e));
            }
        });
    }

    void dsCalibrate_data() { addCaseRows(); }
    void dsCalibrate() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("ds_calibrate");
            for (const char* mode : {"qk", "q", "k"}) {
                const att::ChannelCalibration r =
                    att::dsCalibrate(c.calibQ, c.calibK, att::parseChannelMode(mode));
                const at::Tensor score = g.read(std::string("score_") + mode);
                const at::Tensor chans = g.read(std::string("channels_") + mode).to(at::kLong);
                const QString w = what + " " + mode;
                const at::Tensor all = at::ones({score.size(0), 1}, at::kBool);
                const QString e = closeOn(r.score, score, all, 1e-300, tol.diag, w + " score");
                QVERIFY2(e.isEmpty(), qPrintable(e));
                // Ranks match where the sorted scores around them are clearly apart.
                for (int64_t h = 0; h < score.size(0); ++h) {
                    const at::Tensor sorted = score[h].index_select(0, chans[h]);
                    const double scale = sorted.abs().max().item<double>();
                    for (int64_t i = 0; i < sorted.size(0); ++i) {
                        const double s = sorted[i].item<double>();
                        const bool clear =
                            (i == 0 || std::abs(sorted[i - 1].item<double>() - s) >=
                                           tol.channelGap * scale) &&
                            (i + 1 == sorted.size(0) ||
                             std::abs(sorted[i + 1].item<double>() - s) >= tol.channelGap * scale);
                        if (clear || c.exactTies)
                            QVERIFY2(r.channels[h][i].item<int64_t>() ==
                                         chans[h][i].item<int64_t>(),
                                     qPrintable(QStringLiteral("%1 channel rank %2 of head %3")
                                                    .arg(w)
                                                    .arg(i)
                                                    .arg(h)));
                    }
                }
            }
        });
    }

    void quest_data() { addCaseRows(); }
    void quest() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("quest");
            const h5::Group prm = g.group("params");
            const auto k = toVector(prm.read("k")), P = toVector(prm.read("page_size")),
                       l = toVector(prm.read("l")), gs = toVector(prm.read("group_select"));
            const int64_t debug = g.read("debug/param_index").item<int64_t>();
            for (size_t p = 0; p < k.size(); ++p) {
                att::AttentionConfig cfg;
                cfg.method = att::Method::Quest;
                cfg.k = k[p];
                cfg.pageSize = P[p];
                cfg.local = l[p];
                cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[p]));
                const att::AttentionResult r = att::attend({c.q, c.k, c.v, c.valid, {}, {}}, cfg);
                const QString w = QStringLiteral("%1 quest[%2]").arg(what).arg(p);
                at::Tensor ok;
                if (!checkCommon(c, tol, g, static_cast<int64_t>(p), r, w, &ok))
                    return;
                const at::Tensor pages = g.read("page_indices")[static_cast<int64_t>(p)];
                const at::Tensor okPages = checkSets(c, r.pageIndices, pages,
                                                     g.read("margin_rel")[static_cast<int64_t>(p)],
                                                     tol.nearTie, w + " pages", true);
                QVERIFY(okPages.defined());
                if (static_cast<int64_t>(p) == debug) {
                    // Relative to the largest bound: a bound near 0 carries the absolute
                    // error of its sum over D (as z_hat's check below).
                    const at::Tensor want = g.read("debug/page_score");
                    const at::Tensor finite = want.isfinite();
                    const double scale = std::max(
                        1.0,
                        at::where(finite, want.abs(), at::zeros_like(want)).max().item<double>());
                    const QString e =
                        closeOn(r.pageScore, want, ok, tol.diag * scale, 0, w + " page_score");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                }
            }
        });
    }

    void lowRank_data() { addCaseRows(); }
    void lowRank() { // loki and double-sparsity share the template of §2.1
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            for (const char* method : {"loki", "double_sparsity"}) {
                const bool loki = std::string(method) == "loki";
                const h5::Group g = c.group->group(method);
                const h5::Group prm = g.group("params");
                const auto r = toVector(prm.read("r")), k = toVector(prm.read("k")),
                           l = toVector(prm.read("l")), gs = toVector(prm.read("group_select"));
                const int64_t debug = g.read("debug/param_index").item<int64_t>();
                for (size_t p = 0; p < k.size(); ++p) {
                    att::AttentionConfig cfg;
                    cfg.method = loki ? att::Method::Loki : att::Method::DoubleSparsity;
                    cfg.calibration = loki ? basisOf(c) : channelsOf(c);
                    cfg.r = r[p];
                    cfg.k = k[p];
                    cfg.local = l[p];
                    cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[p]));
                    att::AttendOptions o;
                    o.keepScores = true;
                    const att::AttentionResult res =
                        att::attend({c.q, c.k, c.v, c.valid, {}, {}}, cfg, o);
                    const QString w = QStringLiteral("%1 %2[%3]").arg(what, method).arg(p);
                    at::Tensor ok;
                    // The loki basis is not dyadic: its ties in edge_ties are not exact.
                    if (!checkCommon(c, tol, g, static_cast<int64_t>(p), res, w, &ok, {}, !loki))
                        return;
                    if (static_cast<int64_t>(p) == debug) {
                        // Relative to the largest |ẑ|: entries near 0 are sums that cancel.
                        const at::Tensor want = g.read("debug/z_hat");
                        const double scale =
                            at::where(at::isfinite(want), want.abs(), at::zeros_like(want))
                                .max()
                                .item<double>();
                        const QString e =
                            closeOn(res.zHat, want, ok, tol.diag * scale, 0, w + " z_hat");
                        QVERIFY2(e.isEmpty(), qPrintable(e));
                    }
                }
            }
        });
    }

    void topP_data() { addCaseRows(); }
    void topP() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            for (const char* method : {"oracle_top_p", "sparq_top_p"}) {
                const bool sparq = std::string(method) == "sparq_top_p";
                const h5::Group g = c.group->group(method);
                const h5::Group prm = g.group("params");
                const auto kmax = toVector(prm.read("k_max")), l = toVector(prm.read("l")),
                           gs = toVector(prm.read("group_select"));
                const at::Tensor pv = prm.read("p").to(at::kDouble);
                std::vector<int64_t> r, tau, cs, re;
                if (sparq) {
                    r = toVector(prm.read("r"));
                    tau = toVector(prm.read("tau"));
                    cs = toVector(prm.read("component_select"));
                    re = toVector(prm.read("reallocate"));
                }
                for (size_t i = 0; i < kmax.size(); ++i) {
                    const int64_t p = static_cast<int64_t>(i);
                    att::AttentionConfig cfg;
                    cfg.method = sparq ? att::Method::SparqTopP : att::Method::OracleTopP;
                    cfg.p = pv[p].item<double>();
                    cfg.k = kmax[i];
                    cfg.local = l[i];
                    cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[i]));
                    if (sparq) {
                        cfg.r = r[i];
                        cfg.tau = att::parseTauMode(codeName(prm, "tau", tau[i]), nullptr);
                        cfg.components = codeName(prm, "component_select", cs[i]) == "per_head"
                                             ? att::ComponentSelect::PerHead
                                             : att::ComponentSelect::Group;
                        cfg.meanValue = re[i] != 0;
                    }
                    const att::AttentionResult res =
                        att::attend({c.q, c.k, c.v, c.valid, {}, {}}, cfg);
                    const QString w = QStringLiteral("%1 %2[%3]").arg(what, method).arg(p);
                    // Counts (and so the sets) are exact where the mass criterion is clearly
                    // decided, or reaches p exactly (a ties case whose masses are exact here).
                    const at::Tensor massOk = massDecided(c, g.read("mass_margin")[p], tol);
                    at::Tensor ok;
                    if (!checkCommon(c, tol, g, p, res, w, &ok, massOk, c.exactMass))
                        return;
                    QString e = closeOn(res.estMass, g.read("est_mass")[p], ok, tol.scalar, 0,
                                        w + " est_mass");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                    if (sparq) {
                        e = closeOn(res.alpha, g.read("alpha")[p], ok, tol.scalar, 0, w + " alpha");
                        QVERIFY2(e.isEmpty(), qPrintable(e));
                    }
                }
            }
        });
    }

    void snapkv_data() { addCaseRows(); }
    void snapkv() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("snapkv");
            const h5::Group prm = g.group("params");
            const auto k = toVector(prm.read("k")), wv = toVector(prm.read("w")),
                       kernel = toVector(prm.read("kernel")), pool = toVector(prm.read("pooling")),
                       gs = toVector(prm.read("group_select"));
            const int64_t debug = g.read("debug/param_index").item<int64_t>();
            for (size_t i = 0; i < k.size(); ++i) {
                const int64_t p = static_cast<int64_t>(i);
                att::AttentionConfig cfg;
                cfg.method = att::Method::SnapKV;
                cfg.k = k[i];
                cfg.snapWindow = wv[i];
                cfg.kernel = kernel[i];
                cfg.pooling = att::parsePooling(codeName(prm, "pooling", pool[i]));
                cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[i]));
                // Slots 32 − w … 31 of the stored window (§12.2).
                const at::Tensor qWin = c.qWin.narrow(2, c.qWin.size(2) - wv[i], wv[i]);
                const att::AttentionResult res =
                    att::attend({c.q, c.k, c.v, c.valid, {}, qWin}, cfg);
                const QString w = QStringLiteral("%1 snapkv[%2]").arg(what).arg(p);
                at::Tensor ok;
                if (!checkCommon(c, tol, g, p, res, w, &ok))
                    return;
                if (p == debug) {
                    for (const char* name : {"votes", "pooled"}) {
                        const at::Tensor& got =
                            std::string(name) == "votes" ? res.votes : res.pooled;
                        const QString e = closeOn(got, g.read(std::string("debug/") + name), ok,
                                                  tol.scalar, tol.diag, w + " " + name);
                        QVERIFY2(e.isEmpty(), qPrintable(e));
                    }
                }
            }
        });
    }

    void tova_data() { addCaseRows(); }
    void tova() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("tova");
            const auto k = toVector(g.group("params").read("k"));
            QCOMPARE(toVector(g.read("step_pos")), c.stepPos);
            for (size_t i = 0; i < k.size(); ++i) {
                const int64_t p = static_cast<int64_t>(i);
                att::AttentionConfig cfg;
                cfg.method = att::Method::Tova;
                cfg.k = k[i];
                const att::TovaResult r = att::tova(c.qSteps, c.k, c.v, c.valid, c.stepPos, cfg);
                const QString w = QStringLiteral("%1 tova[%2]").arg(what).arg(p);
                // Everything is comparable where every step's eviction is clearly decided.
                const at::Tensor rel = g.read("evict_margin_rel")[p]; // [B, T]
                for (int64_t b = 0; b < rel.size(0); ++b) {
                    const at::Tensor near = rel[b].lt(tol.nearTie);
                    if ((c.exactTies ? near.logical_and(rel[b].gt(0)) : near).any().item<bool>())
                        continue;
                    QVERIFY2(r.alive[b].equal(g.read("alive")[p][b].to(at::kBool)),
                             qPrintable(w + " alive"));
                    QVERIFY2(asSet(r.indices[b][0]) == asSet(g.read("indices")[p][b][0]),
                             qPrintable(w + " indices"));
                    QCOMPARE(toVector(r.count[b]), toVector(g.read("count")[p][b]));
                    const at::Tensor one = at::ones({1, 1}, at::kBool);
                    QString e = closeOn(r.y[b].unsqueeze(0), g.read("y")[p][b].unsqueeze(0), one,
                                        tol.y * c.vScale, 0, w + " y");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                    // §9.2 recall of the last step's set, with the current token's query.
                    const att::Recall rec =
                        att::recallAtK(c.q.narrow(0, b, 1), c.k.narrow(0, b, 1),
                                       c.valid.narrow(0, b, 1), r.indices.narrow(0, b, 1));
                    const at::Tensor recOk =
                        g.read("recall_margin_rel")[p][b].ge(tol.nearTie).unsqueeze(0);
                    e = closeOn(rec.recall, g.read("recall")[p][b].unsqueeze(0), recOk, tol.scalar,
                                0, w + " recall");
                    QVERIFY2(e.isEmpty(), qPrintable(e));
                }
            }
        });
    }

    void kMass_data() { addCaseRows(); }
    void kMass() {
        runCaseDtype([&](const Case& c, const Tolerances& tol, const QString& what) {
            const h5::Group g = c.group->group("stats");
            const at::Tensor ps = g.read("kmass_p").to(at::kDouble);
            std::vector<double> pv;
            for (int64_t i = 0; i < ps.size(0); ++i)
                pv.push_back(ps[i].item<double>());
            const att::KMass r = att::kMass(c.q, c.k, c.valid, pv);
            const at::Tensor want = g.read("k_mass").to(at::kLong);
            const at::Tensor ok = massDecided(c, g.read("kmass_margin"), tol);
            QVERIFY2(r.count.masked_select(ok).equal(want.masked_select(ok)),
                     qPrintable(what + " k_mass"));
        });
    }

    void transferTable() {
        const auto file = std::find_if(m_files.begin(), m_files.end(), [](const auto& f) {
            return f->root().has("transfer_table");
        });
        QVERIFY2(file != m_files.end(), "no golden file holds a transfer_table");
        const h5::Group t = (*file)->root().group("transfer_table");
        const auto S = toVector(t.read("S")), d = toVector(t.read("d_h")),
                   k = toVector(t.read("k")), r = toVector(t.read("r")),
                   P = toVector(t.read("page_size"));
        const std::vector<std::pair<const char*, att::Method>> methods{
            {"dense", att::Method::Dense},
            {"quest", att::Method::Quest},
            {"loki", att::Method::Loki},
            {"double_sparsity", att::Method::DoubleSparsity},
            {"oracle_top_p", att::Method::OracleTopP},
            {"sparq_top_p", att::Method::SparqTopP},
            {"snapkv", att::Method::SnapKV},
            {"tova", att::Method::Tova}};
        QVERIFY(!S.empty());
        for (const auto& [name, m] : methods) {
            const auto count = toVector(t.read(std::string("count_") + name));
            const at::Tensor ratio = t.read(std::string("ratio_") + name);
            for (size_t i = 0; i < S.size(); ++i) {
                att::TransferArgs a;
                a.S = S[i];
                a.d = d[i];
                a.k = k[i];
                a.r = r[i];
                a.pageSize = P[i];
                QCOMPARE(static_cast<int64_t>(att::transferElements(m, a)), count[i]);
                QVERIFY(std::abs(att::transferRatio(m, a) -
                                 ratio[static_cast<int64_t>(i)].item<double>()) < 1e-15);
            }
        }
        // METHODS.md §10's checks.
        att::TransferArgs a;
        a.S = 4096;
        a.d = 128;
        a.k = 128;
        a.r = 32;
        QCOMPARE(att::transferElements(att::Method::Dense, a), 1048832.0);
        QCOMPARE(att::transferElements(att::Method::Quest, a), 98560.0);
        QCOMPARE(att::transferElements(att::Method::Loki, a), 164096.0);
        QCOMPARE(att::transferElements(att::Method::SnapKV, a), 33024.0);
        QCOMPARE(att::transferElements(att::Method::SparqTopP, a),
                 att::transferElements(att::Method::Sparq, a));
    }
};

QTEST_GUILESS_MAIN(TestMethodsGolden)
#include "test_methods_golden.moc"
