// METHODS2.md's and METHODS3.md's golden cases through the command line: each case of
// ../shared/refs/methods2 and methods3 written as capture files (one example per batch row,
// holding the row's valid positions; the decode query alone, every position's query for
// Expected Attention, the window's 32 for RocketKV and AdaKV; the layer's RoPE recorded),
// MagicPIG's hyperplanes as an --inputs file, and `sparqlab-cli attend` run for the parameter sets
// (every sixth one; SPARQLAB_FULL_GOLDEN=1 runs them all), compared within the specs' float32
// tolerances. PQCache builds its own codebook from the keys here: its rows are compared where
// the golden build's codes are clear (the same codebook).

#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

using namespace sparqlab;
using sparqlab::test::runCli;
using sparqlab::test::toVector;

namespace {

constexpr double kYTol = 2e-5, kScalarTol = 1e-5, kNearTie = 1e-4;

/// A case as captures: `last` holds the decode query alone, `all` every position's query,
/// `window` the last 32 (slot i of q_win at the position with cidx = 31 − i).
struct CaseFiles {
    QString last, all, window;
    std::vector<at::Tensor> positions; ///< per row: the case's positions of the example's
    int64_t B = 0, Hq = 0, Hkv = 0;
    double vScale = 1;
};

CaseFiles writeCase(const h5::Group& cs, const QString& dir, const std::string& name,
                    bool methods2) {
    const h5::Group in = cs.group("inputs");
    const at::Tensor q = in.read("q"), K = in.read("K"), V = in.read("V");
    const at::Tensor valid = in.read("valid").to(at::kBool);
    const int64_t D = q.size(2);
    model::CaptureInfo info;
    info.model = "golden:" + name;
    info.architecture = "golden";
    info.nLayers = 1;
    info.nHeads = q.size(1);
    info.nKvHeads = K.size(1);
    info.headDim = D;
    info.attnScale = 1.0 / std::sqrt(static_cast<double>(D));
    info.createdBy = "test_attend_methods23";
    // The layer's RoPE: the case's inv_freq (methods2), θ = 10000 as HF computes it (methods3).
    const at::Tensor invFreq =
        methods2
            ? in.read("inv_freq").to(at::kDouble)
            : (1.0 / at::pow(at::scalar_tensor(10000.0, at::kFloat),
                             at::arange(0, D, 2, at::kLong).to(at::kFloat) / static_cast<float>(D)))
                  .to(at::kDouble);
    // (the ties cases rotate by nothing: their tables are the identity)
    const bool identity =
        !methods2 && in.read("rope_sin")
                         .masked_select(in.read("valid").to(at::kBool).unsqueeze(-1).expand(
                             {q.size(0), K.size(2), D}))
                         .eq(0)
                         .all()
                         .item<bool>();
    info.ropeInvFreq = (identity ? at::zeros_like(invFreq) : invFreq).unsqueeze(0);
    CaseFiles f;
    f.B = q.size(0);
    f.Hq = q.size(1);
    f.Hkv = K.size(1);
    const QString stem = dir + "/" + QString::fromStdString(name);
    f.last = stem + "_last.h5";
    f.all = stem + "_all.h5";
    f.window = stem + "_window.h5";
    capture::CaptureWriter wl(f.last.toStdString(), info), wa(f.all.toStdString(), info),
        ww(f.window.toStdString(), info);
    for (int64_t b = 0; b < f.B; ++b) {
        const at::Tensor pos = valid[b].nonzero().squeeze(1);
        const int64_t n = pos.numel();
        model::CaptureExample e;
        e.tokenIds = at::arange(n, at::kLong);
        e.k = K[b].index_select(1, pos).unsqueeze(0);
        e.v = V[b].index_select(1, pos).unsqueeze(0);
        e.qPositions = at::tensor({n - 1}, at::kLong);
        e.q = q[b].unsqueeze(1).unsqueeze(0); // [1, Hq, 1, D]
        wl.add(e);
        if (methods2) { // every position's query, the decode query last
            at::Tensor qa = in.read("q_all")[b].index_select(1, pos).clone();
            qa.select(1, n - 1).copy_(q[b]);
            e.qPositions = at::arange(n, at::kLong);
            e.q = qa.unsqueeze(0);
            wa.add(e);
        } else {                                         // the window's queries
            const at::Tensor qWin = in.read("q_win")[b]; // [Hq, 32, D]
            const int64_t have = std::min<int64_t>(n, qWin.size(1));
            e.qPositions = at::arange(n - have, n, at::kLong);
            e.q = qWin.narrow(1, qWin.size(1) - have, have).unsqueeze(0);
            ww.add(e);
        }
        f.positions.push_back(pos);
        f.vScale = std::max(f.vScale, V[b].index_select(1, pos).abs().max().item<double>());
    }
    wl.finish();
    if (methods2)
        wa.finish();
    else
        ww.finish();
    return f;
}

std::vector<int64_t> setOf(const at::Tensor& row, const at::Tensor& pos) {
    std::vector<int64_t> s;
    for (int64_t j : toVector(row))
        if (j >= 0)
            s.push_back(pos.defined() ? pos[j].item<int64_t>() : j);
    std::sort(s.begin(), s.end());
    return s;
}

std::vector<QJsonObject> paramSets(const h5::Group& g) {
    std::vector<QJsonObject> out;
    for (const QJsonValue& v :
         QJsonDocument::fromJson(QByteArray::fromStdString(g.attrString("params_json"))).array())
        out.push_back(v.toObject());
    return out;
}

QString code(const h5::Group& prm, const std::string& param, int64_t v) {
    return QString::fromStdString(prm.datasetAttrString(param, "codes"))
        .split(QLatin1Char(','))
        .value(static_cast<int>(v))
        .replace(QLatin1Char('_'), QLatin1Char('-'));
}

/// Entries a near-tie leaves undecided: 0 < margin_rel < 1e-4 (an exact tie must match).
at::Tensor nearTie(const at::Tensor& marginRel) {
    return marginRel.gt(0).logical_and(marginRel.lt(kNearTie));
}

} // namespace

class TestAttendMethods23 : public QObject {
    Q_OBJECT
    std::vector<std::shared_ptr<h5::File>> m_golden2, m_golden3;
    QTemporaryDir m_dir;
    int m_runs = 0;

    /// Runs attend and checks the decode step of every row against parameter set p; `skip`
    /// [B, Hq] marks the entries a near-tie of the spec leaves undecided.
    void check(const CaseFiles& f, const QString& capture, const h5::Group& g, int64_t p,
               const QStringList& args, const at::Tensor& skip, const at::Tensor& yOk,
               const QString& what) {
        const QString out = m_dir.filePath(QStringLiteral("res_%1.h5").arg(m_runs++));
        const auto r =
            runCli(QStringList{"attend", "--capture", capture, "--out", out, "--json"} + args);
        QVERIFY2(r.exitCode == 0, qPrintable(what + ": " + r.err));
        const h5::File res = h5::File::openRead(out.toStdString());
        int64_t compared = 0;
        for (int64_t b = 0; b < f.B; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "%04lld", static_cast<long long>(b));
            const h5::Group e = res.root().group(std::string("examples/") + name);
            const int64_t T = e.shape("y")[2];
            for (int64_t h = 0; h < f.Hq; ++h) {
                if (skip[b][h].item<bool>())
                    continue;
                const QString at = QStringLiteral("%1 b=%2 h=%3").arg(what).arg(b).arg(h);
                QVERIFY2(setOf(e.read("indices")[0][h][T - 1], f.positions[b]) ==
                             setOf(g.read("indices")[p][b][h], {}),
                         qPrintable(at + " indices"));
                QCOMPARE(e.read("count")[0][h][T - 1].item<int64_t>(),
                         g.read("count")[p][b][h].item<int64_t>());
                QVERIFY2(std::abs(e.read("mass")[0][h][T - 1].item<double>() -
                                  g.read("mass")[p][b][h].item<double>()) <= kScalarTol,
                         qPrintable(at + " mass"));
                if (yOk.defined() && !yOk[b][h].item<bool>())
                    continue;
                const QString err = sparqlab::test::compareClose(
                    e.read("y")[0][h][T - 1], g.read("y")[p][b][h], kYTol * f.vScale, 0, at + " y");
                QVERIFY2(err.isEmpty(), qPrintable(err));
                ++compared;
            }
        }
        const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
        QVERIFY(j.value(QStringLiteral("compression_ratio")).toDouble() > 0);
        QVERIFY2(compared > 0 || skip.all().item<bool>(), qPrintable(what + ": nothing compared"));
    }

    std::vector<int64_t> thinned(size_t n) const { return sparqlab::test::goldenSubset(n); }

    void addRows(const std::vector<std::shared_ptr<h5::File>>& files) {
        QTest::addColumn<int>("file");
        QTest::addColumn<QString>("caseName");
        for (size_t i = 0; i < files.size(); ++i)
            for (const std::string& n : files[i]->root().group("cases").children())
                QTest::newRow((std::to_string(i) + "/" + n).c_str())
                    << static_cast<int>(i) << QString::fromStdString(n);
    }

private Q_SLOTS:
    void initTestCase() {
        for (const auto& [dir, stem, files] :
             {std::tuple{"refs/methods2", "golden_methods2", &m_golden2},
              std::tuple{"refs/methods3", "golden_methods3", &m_golden3}}) {
            const QString base = sparqlab::test::requireReference(QString::fromUtf8(dir));
            for (const QString& fn :
                 QDir(base).entryList({QString::fromUtf8(stem) + "*.h5"}, QDir::Files))
                files->push_back(std::make_shared<h5::File>(
                    h5::File::openRead((base + QLatin1Char('/') + fn).toStdString())));
        }
        QVERIFY(!m_golden2.empty() && !m_golden3.empty());
        QVERIFY(m_dir.isValid());
    }

    void methods2_data() { addRows(m_golden2); }
    void methods2() {
        QFETCH(int, file);
        QFETCH(QString, caseName);
        const std::string name = caseName.toStdString();
        const h5::Group cs = m_golden2[static_cast<size_t>(file)]->root().group("cases/" + name);
        const CaseFiles f = writeCase(cs, m_dir.path(), std::to_string(file) + name, true);
        auto num = [](auto v) { return QString::number(v, 'g', 17); };
        auto intOr = sparqlab::test::jsonIntOr;
        {
            const h5::Group g = cs.group("expected_attention");
            const std::vector<QJsonObject> sets = paramSets(g);
            for (int64_t p : thinned(sets.size())) {
                const QJsonObject& s = sets[static_cast<size_t>(p)];
                QStringList args{"--method",
                                 "expected-attention",
                                 "--sink",
                                 num(intOr(s, "n_sink", 4)),
                                 "--n-future",
                                 num(intOr(s, "n_future", 512)),
                                 "--epsilon",
                                 num(s.value("epsilon").toDouble(0)),
                                 "--gqa",
                                 QString(s.value("group_select").toString("sum_probs"))
                                     .replace(QLatin1Char('_'), QLatin1Char('-'))};
                if (s.contains("k"))
                    args << "--k" << num(s.value("k").toInteger());
                else
                    args << "--ratio" << num(s.value("ratio").toDouble(0));
                if (intOr(s, "use_covariance", 1) == 0)
                    args << "--no-covariance";
                if (intOr(s, "use_vnorm", 1) == 0)
                    args << "--no-vnorm";
                check(f, f.all, g, p, args, nearTie(g.read("margin_rel")[p]), {},
                      caseName + " expected-attention");
            }
        }
        {
            const h5::Group g = cs.group("pqcache");
            const std::vector<QJsonObject> builds = paramSets(cs.group("pq_build"));
            const std::vector<QJsonObject> sets = paramSets(g);
            for (int64_t p : thinned(sets.size())) {
                const QJsonObject& s = sets[static_cast<size_t>(p)];
                const int64_t build = intOr(s, "build", 0);
                const QJsonObject& bs = builds[static_cast<size_t>(build)];
                QStringList args{"--method",
                                 "pqcache",
                                 "--k",
                                 num(intOr(s, "k", 128)),
                                 "--sink",
                                 num(intOr(bs, "sink", 32)),
                                 "--pq-subspaces",
                                 num(intOr(bs, "m", 2)),
                                 "--pq-bits",
                                 num(intOr(bs, "b", 6)),
                                 "--pq-iters",
                                 num(intOr(bs, "iters", 10)),
                                 "--gqa",
                                 QString(s.value("group_select").toString("sum_probs"))
                                     .replace(QLatin1Char('_'), QLatin1Char('-'))};
                if (s.contains("l"))
                    args << "--local" << num(intOr(s, "l", 1));
                // The same codebook where every code of the row is clear of a tie.
                const at::Tensor clear = cs.group("pq_build/" + std::to_string(build))
                                             .read("code_gap_rel")
                                             .ge(kNearTie)
                                             .flatten(1)
                                             .all(1); // [B]
                const at::Tensor skip =
                    nearTie(g.read("margin_rel")[p]).logical_or(clear.logical_not().unsqueeze(1));
                check(f, f.last, g, p, args, skip, {}, caseName + " pqcache");
            }
        }
        {
            const h5::Group g = cs.group("magicpig");
            const std::vector<QJsonObject> sets = paramSets(g);
            for (int64_t p : thinned(sets.size())) {
                const QJsonObject& s = sets[static_cast<size_t>(p)];
                const int64_t K = intOr(s, "kbits", 10), L = intOr(s, "ltables", 150);
                const QString hyper = m_dir.filePath(QStringLiteral("hyper_%1.h5").arg(m_runs));
                {
                    h5::File h = h5::File::create(hyper.toStdString());
                    h.root().createGroup("inputs").write(
                        "hyperplanes", cs.group("inputs").read("hyperplanes_K" + std::to_string(K) +
                                                               "_L" + std::to_string(L)));
                    h.commit();
                }
                check(f, f.last, g, p,
                      {"--method", "magicpig", "--hash-bits", num(K), "--hash-tables", num(L),
                       "--sink", num(intOr(s, "sink", 4)), "--local", num(intOr(s, "l", 65)),
                       "--inputs", hyper},
                      g.read("hash_margin_rel")[p].lt(kScalarTol), {}, caseName + " magicpig");
            }
        }
    }

    void methods3_data() { addRows(m_golden3); }
    void methods3() {
        QFETCH(int, file);
        QFETCH(QString, caseName);
        const std::string name = caseName.toStdString();
        const h5::Group cs = m_golden3[static_cast<size_t>(file)]->root().group("cases/" + name);
        const CaseFiles f = writeCase(cs, m_dir.path(), std::to_string(file) + name, false);
        auto num = [](auto v) { return QString::number(v); };
        {
            const h5::Group g = cs.group("shadowkv"), prm = g.group("params");
            const auto budget = toVector(prm.read("budget")), C = toVector(prm.read("chunk_size")),
                       rank = toVector(prm.read("rank")), L = toVector(prm.read("local_chunks")),
                       O = toVector(prm.read("outlier_chunks")),
                       gs = toVector(prm.read("group_select")), km = toVector(prm.read("key_mode"));
            for (int64_t p : thinned(budget.size())) {
                const at::Tensor outTie =
                    nearTie(g.read("outlier_margin_rel")[p]).repeat_interleave(f.Hq / f.Hkv, 1);
                const at::Tensor gap = g.read("sv_gap_rel")[p];
                const at::Tensor yOk =
                    at::isinf(gap).logical_or(gap.ge(1e-4)).unsqueeze(1).expand({f.B, f.Hq});
                check(f, f.last, g, p,
                      {"--method", "shadowkv", "--budget", num(budget[p]), "--chunk-size",
                       num(C[p]), "--rank", num(rank[p]), "--local-chunks", num(L[p]),
                       "--outlier-chunks", num(O[p]), "--gqa", code(prm, "group_select", gs[p]),
                       "--shadowkv-keys", code(prm, "key_mode", km[p])},
                      nearTie(g.read("margin_rel")[p]).logical_or(outTie), yOk,
                      caseName + " shadowkv");
            }
        }
        {
            const h5::Group g = cs.group("rocketkv"), prm = g.group("params");
            const auto k1 = toVector(prm.read("prompt_budget")), k = toVector(prm.read("k")),
                       C = toVector(prm.read("chunk_size")), r = toVector(prm.read("r")),
                       w = toVector(prm.read("w")), kernel = toVector(prm.read("kernel")),
                       gs = toVector(prm.read("group_select"));
            for (int64_t p : thinned(k.size()))
                check(f, f.window, g, p,
                      {"--method", "rocketkv", "--prompt-budget", num(k1[p]), "--k", num(k[p]),
                       "--chunk-size", num(C[p]), "--r", num(r[p]), "--window", num(w[p]),
                       "--kernel", num(kernel[p]), "--gqa", code(prm, "group_select", gs[p])},
                      nearTie(g.read("margin_rel")[p])
                          .logical_or(nearTie(g.read("stage1_margin_rel")[p])),
                      {}, caseName + " rocketkv");
        }
        {
            const h5::Group g = cs.group("adakv"), prm = g.group("params");
            const auto k = toVector(prm.read("k")), w = toVector(prm.read("w")),
                       kernel = toVector(prm.read("kernel")), pool = toVector(prm.read("pooling")),
                       gs = toVector(prm.read("group_select")),
                       norm = toVector(prm.read("normalize"));
            const at::Tensor alpha = prm.read("alpha").to(at::kDouble);
            for (int64_t p : thinned(k.size())) {
                QStringList args{
                    "--method",      "adakv",
                    "--k",           num(k[p]),
                    "--window",      num(w[p]),
                    "--kernel",      num(kernel[p]),
                    "--pooling",     code(prm, "pooling", pool[p]),
                    "--gqa",         code(prm, "group_select", gs[p]),
                    "--floor-alpha", QString::number(alpha[p].item<double>(), 'g', 17)};
                if (norm[p] != 0)
                    args << "--normalize";
                const at::Tensor amr = g.read("alloc_margin_rel")[p];
                const at::Tensor allocTie = nearTie(amr).unsqueeze(1).expand({f.B, f.Hq});
                check(f, f.window, g, p, args,
                      nearTie(g.read("margin_rel")[p]).logical_or(allocTie), {},
                      caseName + " adakv");
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestAttendMethods23)
#include "test_attend_methods23.moc"
