// `sparqlab-cli stats` on a capture built from golden.h5's stats_L3 case (3 examples, 3 layers,
// GQA): every statistic equals the golden one within 1e-6 relative (kurtosis 1e-5).

#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QTemporaryDir>
#include <QtTest>

using namespace sparqlab;

namespace {
bool close(double a, double b, double rel) {
    return std::abs(a - b) <= rel * std::max(1.0, std::abs(b));
}
} // namespace

class TestStatsCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    void matchesGolden() {
        const QString path =
            sparqlab::test::requireReference(QStringLiteral("refs/sparq/golden.h5"));
        SPARQLAB_SKIP_UNLESS(sparqlab::test::hasStatsL3(), sparqlab::test::kStatsL3);
        const h5::File gf = h5::File::openRead(path.toStdString());
        const h5::Group g = gf.root().group(sparqlab::test::statsCase());
        const int64_t L = g.read("inputs/q").size(1), Hq = g.read("inputs/q").size(2);
        const QString cap = m_dir.filePath(QStringLiteral("cap.h5"));
        sparqlab::test::writeStatsL3Capture(cap);
        const QString out = m_dir.filePath(QStringLiteral("stats.json"));
        const auto r = sparqlab::test::runCli({"stats", "--capture", cap, "--json", out});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject j = QJsonDocument::fromJson(f.readAll()).object();
        QCOMPARE(j.value("format").toString(), QStringLiteral("sparqlab.stats"));
        QCOMPARE(j.value("format_version").toInt(), 1);
        const h5::Group st = g.group("stats");
        auto perHead = [&](const QJsonObject& o, const at::Tensor& want, double rel,
                           const char* what) {
            const QJsonArray rows = o.value("per_head").toArray();
            QCOMPARE(rows.size(), int(L));
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < Hq; ++h) {
                    const double got = rows[int(l)].toArray()[int(h)].toDouble();
                    QVERIFY2(close(got, want[l][h].item<double>(), rel),
                             qPrintable(QStringLiteral("%1 [%2][%3]: %4 vs %5")
                                            .arg(what)
                                            .arg(l)
                                            .arg(h)
                                            .arg(got)
                                            .arg(want[l][h].item<double>())));
                }
        };
        // coverage k = 32 (index 1 of golden's k = 16, 32, 64), averaged over examples.
        perHead(j.value("coverage").toObject(), st.read("coverage")[1].mean(0), 1e-6, "coverage");
        perHead(j.value("kurtosis").toObject(), st.read("kurtosis"), 1e-5, "kurtosis");
        perHead(j.value("zmass_ratio").toObject(), st.read("zmass_ratio"), 1e-6, "zmass_ratio");
        perHead(j.value("zmass_ratio_notebook").toObject(), st.read("zmass_ratio_notebook"), 1e-6,
                "zmass notebook");
        // Agreement grid points both files share: top-r and first-r at r ∈ {8, 16, 32}, k ∈ {32,
        // 64}.
        const at::Tensor AG = st.read("topk_agreement"), AGM = st.read("topk_agreement_margin_rel");
        int compared = 0;
        for (const QJsonValue e : j.value("topk_agreement").toArray()) {
            const QJsonObject o = e.toObject();
            const QString m = o.value("method").toString();
            const int r = o.value("r").toInt(), k = o.value("k").toInt();
            const int mi = m == "top-r" ? 0 : m == "first-r" ? 1 : -1;
            const int ri = r == 8 ? 0 : r == 16 ? 1 : r == 32 ? 2 : -1;
            const int ki = k == 32 ? 1 : k == 64 ? 2 : -1;
            if (mi < 0 || ri < 0 || ki < 0)
                continue;
            // Compared where no example's selection was decided by a near-tie (SPARQ.md §8.4).
            const at::Tensor decided = AGM[mi][ri][ki].ge(1e-4).all(0); // [L, Hq]
            const at::Tensor want = AG[mi][ri][ki].mean(0);
            const QJsonArray rows = o.value("per_head").toArray();
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < Hq; ++h)
                    if (decided[l][h].item<bool>())
                        QVERIFY(close(rows[int(l)].toArray()[int(h)].toDouble(),
                                      want[l][h].item<double>(), 1e-6));
            ++compared;
        }
        QCOMPARE(compared, 12);
        // α agreement at r = 32, k = 128: golden indices r 2, k 2; τ eq9, sqrt_dh, sqrt_r.
        const at::Tensor RMSE = st.read("alpha_rmse");
        const QJsonArray alpha = j.value("alpha_agreement").toArray();
        QCOMPARE(alpha.size(), 3);
        for (int t = 0; t < 3; ++t)
            QVERIFY(close(alpha[t].toObject().value("rmse").toDouble(),
                          RMSE[t][2][2].item<double>(), 1e-6));
        // η excess by axis (golden order B, L, H, S, D).
        const QJsonObject eta = j.value("eta_excess").toObject();
        const at::Tensor EX = st.read("eta_excess");
        const char* names[5] = {"example", "layer", "head", "sequence", "dim"};
        for (int a = 0; a < 5; ++a)
            QVERIFY2(std::abs(eta.value(names[a]).toDouble() - EX[a].item<double>()) < 1e-6,
                     names[a]);
    }

    /// Each recall row's method starts from its own defaults (LM-Infinite's 16 sinks,
    /// RocketKV's kernel of 63), then takes the options given: an option given wins over the
    /// method's default, and one not given leaves it (CONTRACTS.md §2, ATTN).
    void methodsTakeTheirDefaultsThenTheOptions() {
        SPARQLAB_SKIP_UNLESS(sparqlab::test::hasStatsL3(), sparqlab::test::kStatsL3);
        const QString cap = m_dir.filePath(QStringLiteral("defaults.h5"));
        sparqlab::test::writeStatsL3Capture(cap);
        const auto params = [&](const QStringList& extra) {
            const QString out = m_dir.filePath(QStringLiteral("defaults.json"));
            const auto r = sparqlab::test::runCli(QStringList{"stats", "--capture", cap, "--json",
                                                              out, "--methods", "lminf,rocketkv",
                                                              "--recall-k", "8"} +
                                                  extra);
            QMap<QString, QJsonObject> by;
            if (r.exitCode != 0) {
                qWarning("%s", qPrintable(r.err));
                return by;
            }
            QFile f(out);
            if (!f.open(QIODevice::ReadOnly))
                return by;
            for (const QJsonValue& e :
                 QJsonDocument::fromJson(f.readAll()).object().value("recall").toArray())
                by[e.toObject().value("method").toString()] =
                    e.toObject().value("params").toObject();
            return by;
        };
        auto p = params({});
        QCOMPARE(p.value("lminf").value("sink").toInt(), 16);
        QCOMPARE(p.value("rocketkv").value("kernel").toInt(), 63);
        QCOMPARE(p.value("rocketkv").value("chunk_size").toInt(), 2);
        p = params({"--sink", "8", "--kernel", "7"});
        QCOMPARE(p.value("lminf").value("sink").toInt(), 8);
        QCOMPARE(p.value("rocketkv").value("kernel").toInt(), 7);
        QCOMPARE(p.value("rocketkv").value("chunk_size").toInt(), 2);
        // A calibration file goes to the method of its option only: Loki's basis beside
        // Double Sparsity (which then calibrates on the capture), not to it as a wrong kind.
        const QString basis = m_dir.filePath(QStringLiteral("basis.h5"));
        auto r = sparqlab::test::runCli(
            {"calibrate", "--capture", cap, "--method", "loki", "--out", basis});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QString out = m_dir.filePath(QStringLiteral("calibrated.json"));
        r = sparqlab::test::runCli({"stats", "--capture", cap, "--json", out, "--methods",
                                    "loki,double-sparsity", "--recall-k", "8", "--basis", basis});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(!r.err.contains(QStringLiteral("does not apply")), qPrintable(r.err));
        r = sparqlab::test::runCli(
            {"stats", "--capture", cap, "--json", out, "--methods", "", "--sink", "4"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(QStringLiteral("--methods needs at least one method")),
                 qPrintable(r.err));
    }

    void jsonDashPrintsTheStatistics() {
        // --json - prints the file's JSON on stdout, and the summary line goes to stderr.
        SPARQLAB_SKIP_UNLESS(sparqlab::test::hasStatsL3(), sparqlab::test::kStatsL3);
        const QString cap = m_dir.filePath(QStringLiteral("dash.h5"));
        sparqlab::test::writeStatsL3Capture(cap);
        const QString out = m_dir.filePath(QStringLiteral("dash.json"));
        auto r = sparqlab::test::runCli({"stats", "--capture", cap, "--json", out});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject file = QJsonDocument::fromJson(f.readAll()).object();
        r = sparqlab::test::runCli({"stats", "--capture", cap, "--json", "-"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).object(), file);
        QVERIFY2(r.err.contains(QStringLiteral("wrote stdout")), qPrintable(r.err));
        QVERIFY(!QFile::exists(QDir::current().filePath(QStringLiteral("-"))));
    }

    void badInput() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/sparq/golden.h5"));
        const auto r = sparqlab::test::runCli({"stats", "--capture",
                                               sparqlab::test::sharedFile("refs/sparq/golden.h5"),
                                               "--json", m_dir.filePath("x.json")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY(r.err.contains(QStringLiteral("not a SparQ Lab capture")));
        QVERIFY(!QFile::exists(m_dir.filePath("x.json")));
    }
};

QTEST_GUILESS_MAIN(TestStatsCli)
#include "test_stats_cli.moc"
