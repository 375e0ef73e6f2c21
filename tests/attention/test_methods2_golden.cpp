// Expected Attention, PQCache (its codebook build too) and MagicPIG against the float64
// reference of METHODS2.md: every case and parameter set of ../shared/refs/methods2's golden
// files (the shown one and a kept-back one when it is there), through the library, in float64
// and float32 with §9's tolerances; and §7's transfer table.

#include "golden_compare.h"
#include "test_support.h"

#include "attention/attention.h"
#include "attention/budget_stats.h"
#include "attention/method_table.h"
#include "attention/methods/pqcache/pqcache.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <cmath>
#include <memory>

using namespace sparqlab;
using namespace sparqlab::test;
namespace att = sparqlab::attention;

namespace {

/// METHODS2.md §9, per precision.
struct Tolerances {
    double y, scalar, diag, nearTie, hashTie;
};

Tolerances tolerancesFor(at::ScalarType t) {
    if (t == at::kDouble)
        return {1e-10, 1e-12, 1e-12, 1e-9, 1e-9};
    return {2e-5, 1e-5, 1e-5, 1e-4, 1e-5};
}

struct Case : sparqlab::test::GoldenInputs {
    std::shared_ptr<h5::File> file;
    at::Tensor qAll, invFreq;
};

/// A parameter set's JSON objects, from the method group's params_json.
std::vector<QJsonObject> paramSets(const h5::Group& g) {
    std::vector<QJsonObject> out;
    const QJsonArray a =
        QJsonDocument::fromJson(QByteArray::fromStdString(g.attrString("params_json"))).array();
    for (const QJsonValue& v : a)
        out.push_back(v.toObject());
    return out;
}

int64_t intOr(const QJsonObject& o, const char* key, int64_t fallback) {
    return sparqlab::test::jsonIntOr(o, key, fallback);
}

att::GroupSelect gqaOf(const QJsonObject& o) {
    return att::parseGroupSelect(o.value(QStringLiteral("group_select"))
                                     .toString(QStringLiteral("sum_probs"))
                                     .toStdString());
}

} // namespace

class TestMethods2Golden : public QObject {
    Q_OBJECT

private:
    std::vector<std::shared_ptr<h5::File>> m_files;

    void addCaseRows() { addGoldenCaseRows(m_files); }

    Case loadCase() const {
        QFETCH(int, file);
        QFETCH(QString, caseName);
        QFETCH(int, dtype);
        Case c;
        c.file = m_files[static_cast<size_t>(file)];
        c.load(*c.file, caseName.toStdString(), static_cast<at::ScalarType>(dtype));
        const h5::Group in = c.group->group("inputs");
        c.qAll = in.read("q_all").to(c.dtype);
        c.invFreq = in.read("inv_freq").to(at::kDouble);
        return c;
    }

    /// indices, count, mass and y of parameter set p; the comparable entries (or undefined
    /// after failing).
    at::Tensor checkCommon(const Case& c, const Tolerances& tol, const h5::Group& g, int64_t p,
                           const att::AttentionResult& r, const QString& w, const at::Tensor& setOk,
                           double nearTie, const at::Tensor& marginRel) {
        QString error;
        at::Tensor ok =
            compareSets(r.indices, g.read("indices")[p], marginRel, nearTie, w + " indices", error);
        if (!ok.defined()) {
            QTest::qFail(qPrintable(error), __FILE__, __LINE__);
            return {};
        }
        if (setOk.defined())
            ok = ok.logical_and(setOk);
        for (const auto& [name, got, atol] :
             {std::tuple<const char*, at::Tensor, double>{"count", r.count, 0.0},
              {"mass", r.mass, tol.scalar},
              {"y", r.y, tol.y * c.vScale}}) {
            const QString e = closeOn(got, g.read(name)[p], ok, atol, 0, w + " " + name);
            if (!e.isEmpty()) {
                QTest::qFail(qPrintable(e), __FILE__, __LINE__);
                return {};
            }
        }
        return ok;
    }

private Q_SLOTS:
    void initTestCase() {
        openGoldenFiles(m_files, QStringLiteral("refs/methods2"), QStringLiteral("golden_methods2"),
                        QStringLiteral("refs/methods2/golden_methods2.h5"));
    }

    void expectedAttention_data() { addCaseRows(); }
    void expectedAttention() {
        const Case c = loadCase();
        const Tolerances tol = tolerancesFor(c.dtype);
        const h5::Group g = c.group->group("expected_attention");
        const std::vector<QJsonObject> sets = paramSets(g);
        for (size_t i = 0; i < sets.size(); ++i) {
            const QJsonObject& s = sets[i];
            const auto p = static_cast<int64_t>(i);
            att::AttentionConfig cfg = att::defaultConfig(att::Method::ExpectedAttention);
            if (s.contains(QLatin1String("k")))
                cfg.k = s.value(QLatin1String("k")).toInteger();
            else
                att::setParamValue(
                    cfg, att::Param::Ratio,
                    QString::number(s.value(QLatin1String("ratio")).toDouble(0.0), 'g', 17)
                        .toStdString());
            cfg.values[att::Param::Sink] = static_cast<double>(intOr(s, "n_sink", 4));
            cfg.values[att::Param::NFuture] = static_cast<double>(intOr(s, "n_future", 512));
            cfg.values[att::Param::NoCovariance] = intOr(s, "use_covariance", 1) ? 0 : 1;
            cfg.values[att::Param::NoVnorm] = intOr(s, "use_vnorm", 1) ? 0 : 1;
            cfg.values[att::Param::Epsilon] = s.value(QLatin1String("epsilon")).toDouble(0.0);
            cfg.gqa = gqaOf(s);
            cfg.ropeInvFreq = c.invFreq;
            att::AttentionInputs in{c.q, c.k, c.v, c.valid, {}, {}};
            in.extra["q_all"] = c.qAll;
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult r = att::attend(in, cfg, o);
            const QString w = QStringLiteral("%1 expected_attention[%2]").arg(c.what).arg(p);
            const at::Tensor ok =
                checkCommon(c, tol, g, p, r, w, {}, tol.nearTie, g.read("margin_rel")[p]);
            if (!ok.defined())
                return;
            GOLDEN_CHECK(closeOn(r.output("n_keep").select(1, 0), g.read("n_keep")[p],
                                 at::ones({c.q.size(0)}, at::kBool), 0, 0, w + " n_keep"));
            GOLDEN_CHECK(closeOn(r.output("mu_bar"), g.read("mu_bar")[p],
                                 at::ones({c.q.size(0), c.q.size(1)}, at::kBool), tol.diag,
                                 tol.diag, w + " mu_bar"));
            if (p == 1) { // debug outputs of parameter set 1
                GOLDEN_CHECK(
                    closeOn(r.zHat, g.read("debug/z_hat"), ok, tol.diag, tol.diag, w + " z_hat"));
                GOLDEN_CHECK(closeOn(r.output("score"), g.read("debug/score"), ok, tol.diag,
                                     tol.diag, w + " score"));
            }
        }
    }

    void pqBuild_data() { addCaseRows(); }
    void pqBuild() {
        const Case c = loadCase();
        const h5::Group g = c.group->group("pq_build");
        const std::vector<QJsonObject> sets = paramSets(g);
        for (size_t i = 0; i < sets.size(); ++i) {
            const QJsonObject& s = sets[i];
            const att::PqCodebook cb =
                att::pqBuild(c.k, c.valid, intOr(s, "m", 2), intOr(s, "b", 6), intOr(s, "sink", 32),
                             intOr(s, "iters", 10));
            const h5::Group b = g.group(std::to_string(i));
            const QString w = QStringLiteral("%1 pq_build[%2]").arg(c.what).arg(i);
            QVERIFY2(cb.fit.equal(b.read("fit").to(at::kBool)), qPrintable(w + " fit"));
            QVERIFY2(cb.nCentroids.equal(b.read("n_centroids").to(at::kLong)),
                     qPrintable(w + " n_centroids"));
            if (c.dtype != at::kDouble)
                continue; // a float32 k-means may take another trajectory (§9): float64 only
            // Codes exact and centroids within 1e-12 where every key's code is clear.
            const at::Tensor clear = b.read("code_gap_rel").ge(1e-9); // [B, Hkv, m]
            const at::Tensor want = b.read("codes").to(at::kLong);
            QVERIFY2(cb.codes.masked_select(clear.unsqueeze(-1).expand_as(want))
                         .equal(want.masked_select(clear.unsqueeze(-1).expand_as(want))),
                     qPrintable(w + " codes"));
            GOLDEN_CHECK(
                closeOn(cb.centroids, b.read("centroids"), clear, 1e-12, 0, w + " centroids"));
            GOLDEN_CHECK(closeOn(cb.codeGapRel, b.read("code_gap_rel"), clear, 1e-9, 1e-9,
                                 w + " code_gap_rel"));
        }
    }

    void pqcache_data() { addCaseRows(); }
    void pqcache() {
        const Case c = loadCase();
        const Tolerances tol = tolerancesFor(c.dtype);
        const h5::Group g = c.group->group("pqcache");
        const std::vector<QJsonObject> builds = paramSets(c.group->group("pq_build"));
        const std::vector<QJsonObject> sets = paramSets(g);
        for (size_t i = 0; i < sets.size(); ++i) {
            const QJsonObject& s = sets[i];
            const auto p = static_cast<int64_t>(i);
            const int64_t build = intOr(s, "build", 0);
            att::AttentionConfig cfg = att::defaultConfig(att::Method::PQCache);
            cfg.k = intOr(s, "k", 128);
            cfg.values[att::Param::Sink] =
                static_cast<double>(intOr(builds[static_cast<size_t>(build)], "sink", 32));
            if (s.contains(QLatin1String("l")))
                cfg.local = intOr(s, "l", 0);
            cfg.gqa = gqaOf(s);
            const h5::Group in5 = c.group->group("inputs");
            att::AttentionInputs in{c.q, c.k, c.v, c.valid, {}, {}};
            in.extra["pq_centroids"] = in5.read("pq_centroids_" + std::to_string(build));
            in.extra["pq_codes"] = in5.read("pq_codes_" + std::to_string(build)).to(at::kLong);
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult r = att::attend(in, cfg, o);
            const QString w = QStringLiteral("%1 pqcache[%2]").arg(c.what).arg(p);
            const at::Tensor ok =
                checkCommon(c, tol, g, p, r, w, {}, tol.nearTie, g.read("margin_rel")[p]);
            if (!ok.defined())
                return;
            if (p == 0) {
                const at::Tensor want = g.read("debug/z_hat");
                const double scale = at::where(at::isfinite(want), want.abs(), at::zeros_like(want))
                                         .max()
                                         .item<double>();
                GOLDEN_CHECK(
                    closeOn(r.zHat, want, ok, tol.diag * std::max(1.0, scale), 0, w + " z_hat"));
            }
        }
    }

    void magicpig_data() { addCaseRows(); }
    void magicpig() {
        const Case c = loadCase();
        const Tolerances tol = tolerancesFor(c.dtype);
        const h5::Group g = c.group->group("magicpig");
        const std::vector<QJsonObject> sets = paramSets(g);
        for (size_t i = 0; i < sets.size(); ++i) {
            const QJsonObject& s = sets[i];
            const auto p = static_cast<int64_t>(i);
            const int64_t K = intOr(s, "kbits", 10), L = intOr(s, "ltables", 150);
            att::AttentionConfig cfg = att::defaultConfig(att::Method::MagicPIG);
            cfg.values[att::Param::HashBits] = static_cast<double>(K);
            cfg.values[att::Param::HashTables] = static_cast<double>(L);
            cfg.values[att::Param::Sink] = static_cast<double>(intOr(s, "sink", 4));
            cfg.local = intOr(s, "l", 65);
            att::AttentionInputs in{c.q, c.k, c.v, c.valid, {}, {}};
            in.extra["hyperplanes"] = c.group->group("inputs").read(
                "hyperplanes_K" + std::to_string(K) + "_L" + std::to_string(L));
            att::AttendOptions o;
            o.keepScores = true;
            const att::AttentionResult r = att::attend(in, cfg, o);
            const QString w = QStringLiteral("%1 magicpig[%2]").arg(c.what).arg(p);
            // The sampled sets are exact where no projection is near a hyperplane.
            const at::Tensor hashOk = g.read("hash_margin_rel")[p].ge(tol.hashTie);
            QString error;
            const at::Tensor want = g.read("indices")[p];
            at::Tensor ok = at::ones({want.size(0), want.size(1)}, at::kBool);
            for (int64_t b = 0; b < want.size(0); ++b)
                for (int64_t h = 0; h < want.size(1); ++h) {
                    if (!hashOk[b][h].item<bool>()) {
                        ok[b][h] = false;
                        continue;
                    }
                    QVERIFY2(
                        asSet(r.indices[b][h]) == asSet(want[b][h]),
                        qPrintable(QStringLiteral("%1 indices at b=%2 h=%3").arg(w).arg(b).arg(h)));
                }
            for (const auto& [name, got, atol] :
                 {std::tuple<const char*, at::Tensor, double>{"count", r.count, 0.0},
                  {"n_sampled", r.output("n_sampled"), 0.0},
                  {"n_collide", r.output("n_collide"), 0.0},
                  {"mass", r.mass, tol.scalar},
                  {"y", r.y, tol.y * c.vScale}})
                GOLDEN_CHECK(closeOn(got, g.read(name)[p], ok, atol, 0, w + " " + name));
            GOLDEN_CHECK(closeOn(r.output("hash_margin_rel"), g.read("hash_margin_rel")[p],
                                 at::ones_like(ok), tol.diag, 1e-5, w + " hash_margin_rel"));
            if (p == 3) { // debug outputs of parameter set 3
                GOLDEN_CHECK(closeOn(r.output("collisions"), g.read("debug/collisions"), ok, 0, 0,
                                     w + " collisions"));
                GOLDEN_CHECK(closeOn(r.output("weight"), g.read("debug/weight"), ok, tol.diag,
                                     tol.diag, w + " weight"));
                GOLDEN_CHECK(closeOn(r.output("q_codes"), g.read("debug/q_codes_3"), ok, 0, 0,
                                     w + " q_codes"));
                // key codes and the key mean per KV head: the first head of each group.
                const int64_t Hkv = c.k.size(1), grp = c.q.size(1) / Hkv;
                const at::Tensor first = at::arange(Hkv, at::kLong) * grp;
                const at::Tensor okU = ok.index_select(1, first);
                GOLDEN_CHECK(closeOn(r.output("key_codes").index_select(1, first),
                                     g.read("debug/key_codes_3"), okU, 0, 0, w + " key_codes"));
            }
            if (p == 0) { // the key mean of parameter set 0
                const int64_t Hkv = c.k.size(1), grp = c.q.size(1) / Hkv;
                const at::Tensor first = at::arange(Hkv, at::kLong) * grp;
                GOLDEN_CHECK(closeOn(
                    r.output("key_mean").index_select(1, first), g.read("debug/key_mean"),
                    at::ones({c.q.size(0), Hkv}, at::kBool), tol.diag, tol.diag, w + " key_mean"));
            }
        }
    }

    void transferTable() {
        const h5::Group t = m_files.front()->root().group("transfer_table");
        const auto S = toVector(t.read("S")), d = toVector(t.read("d_h")),
                   k = toVector(t.read("k"));
        const std::vector<std::pair<const char*, att::Method>> methods{
            {"dense", att::Method::Dense},
            {"expected_attention", att::Method::ExpectedAttention},
            {"pqcache", att::Method::PQCache},
            {"magicpig", att::Method::MagicPIG}};
        QVERIFY(!S.empty());
        for (const auto& [name, m] : methods) {
            const auto count = toVector(t.read(std::string("count_") + name));
            const at::Tensor ratio = t.read(std::string("ratio_") + name);
            for (size_t i = 0; i < S.size(); ++i) {
                const att::AttentionConfig cfg = att::defaultConfig(m);
                att::TransferArgs a = att::transferArgs(cfg, S[i], d[i]);
                a.k = k[i];
                if (m == att::Method::MagicPIG) // §7's table: n = k, c = ⌈150·S/1024⌉
                    a.n = static_cast<double>(k[i]);
                QCOMPARE(static_cast<int64_t>(att::transferElements(m, a)), count[i]);
                QVERIFY(std::abs(att::transferRatio(m, a) -
                                 ratio[static_cast<int64_t>(i)].item<double>()) < 1e-15);
            }
        }
        // §7's checks (S = 4096, d = 128, k = 128).
        att::TransferArgs a;
        a.S = 4096;
        a.d = 128;
        a.k = 128;
        QCOMPARE(att::transferElements(att::Method::Dense, a), 1048832.0);
        QCOMPARE(att::transferElements(att::Method::ExpectedAttention, a), 33024.0);
        QCOMPARE(att::transferElements(att::Method::PQCache, a), 49408.0);
        const att::AttentionConfig mp = att::defaultConfig(att::Method::MagicPIG);
        att::TransferArgs b = att::transferArgs(mp, 4096, 128);
        b.k = 128;
        b.n = 69; // n_s = 0
        b.measured = 0;
        // 2·L + c + n_s + 2·n·d + 2·d: n = 69 = |E| (n_s = 0), c = 0
        QCOMPARE(att::transferElements(att::Method::MagicPIG, b), 300.0 + 2.0 * 69 * 128 + 256);
        b.n = 128; // n_s = 128 − 69 = 59
        b.measured = 1000;
        QCOMPARE(att::transferElements(att::Method::MagicPIG, b),
                 300.0 + 1000 + 59 + 2.0 * 128 * 128 + 256);
    }
};

QTEST_GUILESS_MAIN(TestMethods2Golden)
#include "test_methods2_golden.moc"
