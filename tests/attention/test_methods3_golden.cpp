// ShadowKV, RocketKV and AdaKV against the float64 reference of METHODS3.md: every case and
// parameter set of ../shared/refs/methods3's golden files (the shown one and a kept-back one
// when it is there), through the library, in float64 and float32 with §10.5's tolerances; and
// §6's transfer table.

#include "golden_compare.h"
#include "test_support.h"

#include "attention/attention.h"
#include "attention/method_table.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <memory>

using namespace sparqlab;
using namespace sparqlab::test;
namespace att = sparqlab::attention;

namespace {

/// METHODS3.md §10.5, per precision.
struct Tolerances {
    double y, mass, diag, nearTie, svGap;
};

Tolerances tolerancesFor(at::ScalarType t) {
    if (t == at::kDouble)
        return {1e-10, 1e-12, 1e-12, 1e-9, 1e-6};
    return {2e-5, 1e-5, 1e-5, 1e-4, 1e-4};
}

struct Case : sparqlab::test::GoldenInputs {
    at::Tensor qWin, kPre, cos, sin;
};

/// The first head of each KV group: [B, Hq, …] → [B, Hkv, …].
at::Tensor perKvHead(const at::Tensor& x, int64_t Hkv) {
    const int64_t g = x.size(1) / Hkv;
    return x.index_select(1, at::arange(Hkv, at::kLong) * g);
}

} // namespace

class TestMethods3Golden : public QObject {
    Q_OBJECT

private:
    std::vector<std::shared_ptr<h5::File>> m_files;

    void addCaseRows() { addGoldenCaseRows(m_files); }

    Case loadCase() const {
        QFETCH(int, file);
        QFETCH(QString, caseName);
        QFETCH(int, dtype);
        Case c;
        c.load(*m_files[static_cast<size_t>(file)], caseName.toStdString(),
               static_cast<at::ScalarType>(dtype));
        const h5::Group in = c.group->group("inputs");
        c.qWin = in.read("q_win").to(c.dtype);
        c.kPre = in.read("K_pre").to(c.dtype);
        c.cos = in.read("rope_cos").to(c.dtype);
        c.sin = in.read("rope_sin").to(c.dtype);
        return c;
    }

    /// indices (sets, near-ties by `marginRel`), count, mass and — where `yOk` — y.
    at::Tensor checkCommon(const Case& c, const Tolerances& tol, const h5::Group& g, int64_t p,
                           const att::AttentionResult& r, const QString& w,
                           const at::Tensor& marginRel, const at::Tensor& setOk = {},
                           const at::Tensor& yOk = {}) {
        QString error;
        at::Tensor ok = compareSets(r.indices, g.read("indices")[p], marginRel, tol.nearTie,
                                    w + " indices", error);
        if (!ok.defined()) {
            QTest::qFail(qPrintable(error), __FILE__, __LINE__);
            return {};
        }
        if (setOk.defined())
            ok = ok.logical_and(setOk);
        const at::Tensor okY = yOk.defined() ? ok.logical_and(yOk) : ok;
        for (const auto& [name, got, atol, mask] :
             {std::tuple<const char*, at::Tensor, double, at::Tensor>{"count", r.count, 0.0, ok},
              {"mass", r.mass, tol.mass, ok},
              {"y", r.y, tol.y * c.vScale, okY}}) {
            const QString e = closeOn(got, g.read(name)[p], mask, atol, 0, w + " " + name);
            if (!e.isEmpty()) {
                QTest::qFail(qPrintable(e), __FILE__, __LINE__);
                return {};
            }
        }
        return ok;
    }

private Q_SLOTS:
    void initTestCase() {
        openGoldenFiles(m_files, QStringLiteral("refs/methods3"), QStringLiteral("golden_methods3"),
                        QStringLiteral("refs/methods3/golden_methods3.h5"));
    }

    void shadowkv_data() { addCaseRows(); }
    void shadowkv() {
        const Case c = loadCase();
        const Tolerances tol = tolerancesFor(c.dtype);
        const h5::Group g = c.group->group("shadowkv");
        const h5::Group prm = g.group("params");
        const auto budget = toVector(prm.read("budget")), C = toVector(prm.read("chunk_size")),
                   rank = toVector(prm.read("rank")), L = toVector(prm.read("local_chunks")),
                   O = toVector(prm.read("outlier_chunks")),
                   gs = toVector(prm.read("group_select")), km = toVector(prm.read("key_mode"));
        const int64_t debug = g.read("debug/param_index").item<int64_t>();
        const int64_t Hkv = c.k.size(1);
        for (size_t i = 0; i < budget.size(); ++i) {
            const auto p = static_cast<int64_t>(i);
            att::AttentionConfig cfg = att::defaultConfig(att::Method::ShadowKV);
            cfg.values[att::Param::Budget] = static_cast<double>(budget[i]);
            cfg.values[att::Param::ChunkSize] = static_cast<double>(C[i]);
            cfg.values[att::Param::Rank] = static_cast<double>(rank[i]);
            cfg.values[att::Param::LocalChunks] = static_cast<double>(L[i]);
            cfg.values[att::Param::OutlierChunks] = static_cast<double>(O[i]);
            cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[i]));
            const bool pre = codeName(prm, "key_mode", km[i]) == "pre";
            att::setParamValue(cfg, att::Param::ShadowKeys, pre ? "pre" : "post");
            att::AttentionInputs in{c.q, c.k, c.v, c.valid, {}, {}};
            if (pre) {
                in.extra["k_pre"] = c.kPre;
                in.extra["rope_cos"] = c.cos;
                in.extra["rope_sin"] = c.sin;
            }
            const att::AttentionResult r = att::attend(in, cfg);
            const QString w = QStringLiteral("%1 shadowkv[%2]").arg(c.what).arg(p);
            // y where the reconstruction is well conditioned (§10.5).
            const at::Tensor rankEff = g.read("rank_eff")[p]; // [B]
            const at::Tensor gap = g.read("sv_gap_rel")[p];   // [B]
            const at::Tensor yOk = at::isinf(gap)
                                       .logical_or(gap.ge(tol.svGap))
                                       .unsqueeze(1)
                                       .expand({c.q.size(0), c.q.size(1)});
            // Chunk sets: the outliers by their margin, then the selection by its own.
            QString error;
            const at::Tensor outOk = compareSets(
                perKvHead(r.output("outlier_chunks"), Hkv), g.read("outlier_chunks")[p],
                g.read("outlier_margin_rel")[p], tol.nearTie, w + " outlier_chunks", error);
            QVERIFY2(outOk.defined(), qPrintable(error));
            const at::Tensor setOk = outOk.repeat_interleave(c.q.size(1) / Hkv, 1); // [B, Hq]
            const at::Tensor ok =
                checkCommon(c, tol, g, p, r, w, g.read("margin_rel")[p], setOk, yOk);
            if (!ok.defined())
                return;
            const at::Tensor selOk =
                compareSets(r.output("selected_chunks"), g.read("selected_chunks")[p],
                            g.read("margin_rel")[p].masked_fill(setOk.logical_not(), 1e-300),
                            tol.nearTie, w + " selected_chunks", error);
            QVERIFY2(selOk.defined(), qPrintable(error));
            const at::Tensor rows = at::ones({c.q.size(0)}, at::kBool);
            GOLDEN_CHECK(closeOn(r.output("n_chunks").select(1, 0), g.read("n_chunks")[p], rows, 0,
                                 0, w + " n_chunks"));
            GOLDEN_CHECK(
                closeOn(r.output("rank_eff").select(1, 0), rankEff, rows, 0, 0, w + " rank_eff"));
            GOLDEN_CHECK(closeOn(r.output("sv_gap_rel").select(1, 0), gap, rows,
                                 c.dtype == at::kDouble ? 1e-9 : 1e-3, 1e-3, w + " sv_gap_rel"));
            if (p == debug) {
                GOLDEN_CHECK(closeOn(perKvHead(r.output("min_cos"), Hkv), g.read("debug/min_cos"),
                                     outOk, tol.diag, tol.diag, w + " min_cos"));
                GOLDEN_CHECK(closeOn(r.output("landmark_probs"), g.read("debug/landmark_probs"), ok,
                                     tol.diag, tol.diag, w + " landmark_probs"));
            }
        }
    }

    void rocketkv_data() { addCaseRows(); }
    void rocketkv() {
        const Case c = loadCase();
        const Tolerances tol = tolerancesFor(c.dtype);
        const h5::Group g = c.group->group("rocketkv");
        const h5::Group prm = g.group("params");
        const auto k1 = toVector(prm.read("prompt_budget")), k = toVector(prm.read("k")),
                   C = toVector(prm.read("chunk_size")), r = toVector(prm.read("r")),
                   wv = toVector(prm.read("w")), kernel = toVector(prm.read("kernel")),
                   gs = toVector(prm.read("group_select"));
        const int64_t debug = g.read("debug/param_index").item<int64_t>();
        for (size_t i = 0; i < k.size(); ++i) {
            const auto p = static_cast<int64_t>(i);
            att::AttentionConfig cfg = att::defaultConfig(att::Method::RocketKV);
            cfg.values[att::Param::PromptBudget] = static_cast<double>(k1[i]);
            cfg.k = k[i];
            cfg.values[att::Param::ChunkSize] = static_cast<double>(C[i]);
            cfg.r = r[i];
            cfg.snapWindow = wv[i];
            cfg.kernel = kernel[i];
            cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[i]));
            const at::Tensor qWin = c.qWin.narrow(2, c.qWin.size(2) - wv[i], wv[i]);
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult res =
                att::attend({c.q, c.k, c.v, c.valid, {}, qWin}, cfg, o);
            const QString w = QStringLiteral("%1 rocketkv[%2]").arg(c.what).arg(p);
            QString error;
            const at::Tensor keptOk =
                compareSets(res.output("kept"), g.read("kept")[p], g.read("stage1_margin_rel")[p],
                            tol.nearTie, w + " kept", error);
            QVERIFY2(keptOk.defined(), qPrintable(error));
            const at::Tensor ok = checkCommon(
                c, tol, g, p, res, w,
                g.read("margin_rel")[p].masked_fill(keptOk.logical_not(), 1e-300), keptOk);
            if (!ok.defined())
                return;
            GOLDEN_CHECK(
                closeOn(res.output("tau"), g.read("tau")[p], ok, tol.diag, tol.diag, w + " tau"));
            GOLDEN_CHECK(
                sameLists(res.output("comp_idx"), g.read("comp_idx")[p], ok, w + " comp_idx"));
            if (p == debug) {
                const at::Tensor want = g.read("debug/z_hat");
                const double scale = at::where(at::isfinite(want), want.abs(), at::zeros_like(want))
                                         .max()
                                         .item<double>();
                GOLDEN_CHECK(
                    closeOn(res.zHat, want, ok, tol.diag * std::max(1.0, scale), 0, w + " z_hat"));
                GOLDEN_CHECK(closeOn(res.pooled, g.read("debug/stage1_pooled"), keptOk, tol.diag,
                                     tol.diag, w + " stage1_pooled"));
            }
        }
    }

    void adakv_data() { addCaseRows(); }
    void adakv() {
        const Case c = loadCase();
        const Tolerances tol = tolerancesFor(c.dtype);
        const h5::Group g = c.group->group("adakv");
        const h5::Group prm = g.group("params");
        const auto k = toVector(prm.read("k")), wv = toVector(prm.read("w")),
                   kernel = toVector(prm.read("kernel")), pool = toVector(prm.read("pooling")),
                   gs = toVector(prm.read("group_select")), norm = toVector(prm.read("normalize"));
        const at::Tensor alpha = prm.read("alpha").to(at::kDouble);
        const int64_t debug = g.read("debug/param_index").item<int64_t>();
        for (size_t i = 0; i < k.size(); ++i) {
            const auto p = static_cast<int64_t>(i);
            att::AttentionConfig cfg = att::defaultConfig(att::Method::AdaKV);
            cfg.k = k[i];
            cfg.snapWindow = wv[i];
            cfg.kernel = kernel[i];
            cfg.pooling = att::parsePooling(codeName(prm, "pooling", pool[i]));
            cfg.gqa = att::parseGroupSelect(codeName(prm, "group_select", gs[i]));
            cfg.values[att::Param::Alpha] = alpha[p].item<double>();
            cfg.values[att::Param::Normalize] = norm[i] != 0 ? 1 : 0;
            const at::Tensor qWin = c.qWin.narrow(2, c.qWin.size(2) - wv[i], wv[i]);
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult res =
                att::attend({c.q, c.k, c.v, c.valid, {}, qWin}, cfg, o);
            const QString w = QStringLiteral("%1 adakv[%2]").arg(c.what).arg(p);
            // The allocation is exact where its own margin is clear (§10.5).
            const at::Tensor amr = g.read("alloc_margin_rel")[p]; // [B]
            const at::Tensor allocOk = amr.ge(tol.nearTie)
                                           .logical_or(amr.eq(0))
                                           .unsqueeze(1)
                                           .expand({c.q.size(0), c.q.size(1)});
            for (const char* name : {"alloc", "capacity"})
                GOLDEN_CHECK(
                    closeOn(res.output(name), g.read(name)[p], allocOk, 0, 0, w + " " + name));
            const at::Tensor ok = checkCommon(
                c, tol, g, p, res, w,
                g.read("margin_rel")[p].masked_fill(allocOk.logical_not(), 1e-300), allocOk);
            if (!ok.defined())
                return;
            if (p == debug)
                GOLDEN_CHECK(closeOn(res.pooled, g.read("debug/pooled"), ok, tol.diag, tol.diag,
                                     w + " pooled"));
        }
    }

    void transferTable() {
        const h5::Group t = m_files.front()->root().group("transfer_table");
        const auto S = toVector(t.read("S")), d = toVector(t.read("d_h")),
                   T = toVector(t.read("token_budget")), budget = toVector(t.read("budget")),
                   C = toVector(t.read("chunk_size")), rank = toVector(t.read("rank")),
                   L = toVector(t.read("local_chunks")), O = toVector(t.read("outlier_chunks")),
                   k1 = toVector(t.read("prompt_budget")), kr = toVector(t.read("k_rocket")),
                   cr = toVector(t.read("c_rocket")), rr = toVector(t.read("r_rocket")),
                   ka = toVector(t.read("k_ada"));
        QVERIFY(!S.empty());
        for (size_t i = 0; i < S.size(); ++i) {
            const auto check = [&](att::Method m, const att::AttentionConfig& cfg,
                                   const char* name) {
                // Literal (METHODS3.md §6): a k beyond S is counted as given.
                att::TransferArgs a = att::literalTransferArgs(cfg, S[i], d[i]);
                const int64_t want = toVector(t.read(std::string("count_") + name))[i];
                QCOMPARE(static_cast<int64_t>(att::transferElements(m, a)), want);
                QVERIFY(std::abs(att::transferRatio(m, a) -
                                 t.read(std::string("ratio_") + name)[static_cast<int64_t>(i)]
                                     .item<double>()) < 1e-15);
            };
            att::AttentionConfig sh = att::defaultConfig(att::Method::ShadowKV);
            sh.values[att::Param::Budget] = static_cast<double>(budget[i]);
            sh.values[att::Param::ChunkSize] = static_cast<double>(C[i]);
            sh.values[att::Param::Rank] = static_cast<double>(rank[i]);
            sh.values[att::Param::LocalChunks] = static_cast<double>(L[i]);
            sh.values[att::Param::OutlierChunks] = static_cast<double>(O[i]);
            check(att::Method::ShadowKV, sh, "shadowkv");
            // RocketKV from one token budget (§4.5 at L_seq = S) and from its four parameters.
            att::AttentionConfig rt = att::defaultConfig(att::Method::RocketKV);
            rt.values[att::Param::TokenBudget] = static_cast<double>(T[i]);
            check(att::Method::RocketKV, rt, "rocketkv");
            att::AttentionConfig rk = att::defaultConfig(att::Method::RocketKV);
            rk.values[att::Param::PromptBudget] = static_cast<double>(k1[i]);
            rk.k = kr[i];
            rk.values[att::Param::ChunkSize] = static_cast<double>(cr[i]);
            rk.r = rr[i];
            check(att::Method::RocketKV, rk, "rocketkv");
            att::AttentionConfig ad = att::defaultConfig(att::Method::AdaKV);
            ad.k = ka[i];
            check(att::Method::AdaKV, ad, "adakv");
            check(att::Method::Dense, att::AttentionConfig{}, "dense");
        }
        // §6's checks (S = 4096, d = 128).
        att::AttentionConfig sh = att::defaultConfig(att::Method::ShadowKV);
        QCOMPARE(att::transferElements(att::Method::ShadowKV, att::transferArgs(sh, 4096, 128)),
                 775936.0);
        sh.values[att::Param::Budget] = 256;
        QCOMPARE(att::transferElements(att::Method::ShadowKV, att::transferArgs(sh, 4096, 128)),
                 259840.0);
        att::AttentionConfig rt = att::defaultConfig(att::Method::RocketKV);
        rt.values[att::Param::TokenBudget] = 1024;
        QCOMPARE(att::transferElements(att::Method::RocketKV, att::transferArgs(rt, 4096, 128)),
                 261414.0);
        att::AttentionConfig ad = att::defaultConfig(att::Method::AdaKV);
        ad.k = 1024;
        QCOMPARE(att::transferElements(att::Method::AdaKV, att::transferArgs(ad, 4096, 128)),
                 262400.0);
        // k beyond S (a token budget of 4,096 at S = 1,024: k = 2,048, k₁ = 1,024, c = 1, r = 128):
        // the design note's count takes k as given, the application's the S positions there are.
        rt.values[att::Param::TokenBudget] = 4096;
        QCOMPARE(
            att::transferElements(att::Method::RocketKV, att::literalTransferArgs(rt, 1024, 128)),
            1024.0 * 128 + 2048.0 * 256 + 256);
        QCOMPARE(att::transferElements(att::Method::RocketKV, att::transferArgs(rt, 1024, 128)),
                 1024.0 * 128 + 1024.0 * 256 + 256);
        ad.k = 2048;
        QCOMPARE(att::transferElements(att::Method::AdaKV, att::literalTransferArgs(ad, 1024, 128)),
                 2048.0 * 256 + 256);
        QCOMPARE(att::transferElements(att::Method::AdaKV, att::transferArgs(ad, 1024, 128)),
                 1024.0 * 256 + 256);
    }
};

QTEST_GUILESS_MAIN(TestMethods3Golden)
#include "test_methods3_golden.moc"
