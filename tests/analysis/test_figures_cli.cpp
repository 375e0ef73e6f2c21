// `sparqlab-cli figures` writes every figure of the paper in PNG, SVG and PDF with a CSV of the
// plotted numbers, from a capture built from golden.h5's stats_L3 case; the CSVs carry the
// golden statistics.

#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace sparqlab;

class TestFiguresCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    void writesEveryFigure() {
        SPARQLAB_SKIP_UNLESS(sparqlab::test::hasStatsL3(), sparqlab::test::kStatsL3);
        const QString path = sparqlab::test::sharedFile(QStringLiteral("refs/sparq/golden.h5"));
        const h5::File gf = h5::File::openRead(path.toStdString());
        const h5::Group g = gf.root().group(sparqlab::test::statsCase());
        const QString cap = m_dir.filePath(QStringLiteral("cap.h5"));
        sparqlab::test::writeStatsL3Capture(cap);
        const QString out = m_dir.filePath(QStringLiteral("figs"));
        const auto r = sparqlab::test::runCli({"figures", "--capture", cap, "--out", out}, 300000);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QStringList ids{"fig2_arithmetic_intensity",
                              "fig4a_coverage_histogram",
                              "fig4b_coverage_grid",
                              "fig4c_q_density",
                              "fig4d_kurtosis",
                              "fig4e_agreement_vs_r",
                              "fig4f_alpha_agreement",
                              "figE1_kurtosis_by_layer",
                              "figE1_zmass_by_layer",
                              "figE2_agreement_selectors",
                              "table1_eta"};
        for (const QString& id : ids) {
            for (const char* ext : {"png", "svg", "pdf"})
                QVERIFY2(QFileInfo(out + "/" + id + "." + ext).size() > 1000,
                         qPrintable(id + "." + ext));
            QVERIFY2(QFileInfo(out + "/" + id + ".csv").size() > 20, qPrintable(id + ".csv"));
            const QImage img(out + "/" + id + ".png");
            QVERIFY2(!img.isNull() && img.width() >= 800, qPrintable(id));
            QSet<QRgb> colours;
            for (int y = 0; y < img.height(); y += 9)
                for (int x = 0; x < img.width(); x += 9)
                    colours.insert(img.pixel(x, y));
            QVERIFY2(colours.size() > 8, qPrintable(id + " looks blank"));
        }
        QVERIFY(QDir(out).entryList({"*.tmp*"}, QDir::Files).isEmpty()); // nothing half-written
        // Table 1's CSV holds the golden excess η (axes in the order example, layer, head,
        // sequence, dim).
        QFile csv(out + "/table1_eta.csv");
        QVERIFY(csv.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(csv.readAll()).trimmed().split('\n');
        QCOMPARE(lines.size(), 6);
        const at::Tensor ex = g.read("stats/eta_excess");
        for (int a = 0; a < 5; ++a)
            QVERIFY(std::abs(lines[a + 1].section(',', 2).toDouble() - ex[a].item<double>()) <
                    1e-6);
    }

    void benchFiguresFromBenchJson() {
        QTemporaryDir dir;
        const QString bench = dir.filePath(QStringLiteral("bench.jsonl"));
        auto r = sparqlab::test::runCli({"bench", "--seq", "512,1024", "--heads", "4", "--head-dim",
                                         "64", "--r", "8,16", "--k", "32", "--repeats", "2",
                                         "--warmup", "0", "--bandwidth-mib", "16", "--out", bench});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        // Without a session's XDG_RUNTIME_DIR (ssh, a batch job) Qt's warning about it is not
        // passed on: the figures need no runtime folder.
        const QByteArray runtimeDir = qgetenv("XDG_RUNTIME_DIR");
        qunsetenv("XDG_RUNTIME_DIR");
        r = sparqlab::test::runCli(
            {"figures", "--bench", bench, "--out", dir.filePath("figs"), "--format", "png"});
        if (!runtimeDir.isEmpty())
            qputenv("XDG_RUNTIME_DIR", runtimeDir);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(!r.err.contains(QLatin1String("XDG_RUNTIME_DIR")), qPrintable(r.err));
        for (const char* f : {"fig8_time_vs_seq_batch1.png", "fig8_time_vs_seq_batch1.csv",
                              "figF1_speedup_vs_size.png", "figF1_speedup_vs_size.csv"})
            QVERIFY2(QFileInfo(dir.filePath(QStringLiteral("figs/") + f)).size() > 40, f);
        // The CSV holds what bench measured: 2 sequence lengths × (dense, SparQ) at r = 8.
        const QString csv = QString::fromUtf8(
            sparqlab::test::readFile(dir.filePath("figs/fig8_time_vs_seq_batch1.csv")));
        QCOMPARE(csv.count(QLatin1Char('\n')), 1 + 4);
        // A malformed line is named by file and line.
        QVERIFY(sparqlab::test::writeFile(dir.filePath("bad.jsonl"),
                                          sparqlab::test::readFile(bench) + "{\"device\": \n"));
        r = sparqlab::test::runCli(
            {"figures", "--bench", dir.filePath("bad.jsonl"), "--out", dir.filePath("figs2")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.startsWith(QStringLiteral("error: ")) && r.err.contains("bad.jsonl line 5"),
                 qPrintable(r.err));
    }

    /// bench-generate's rows: Fig. 10 (tokens per second with dense's bandwidth limit dashed)
    /// and each method's share of its own limit, with the numbers bench-generate wrote.
    void generationFiguresFromBenchGenerate() {
        QTemporaryDir dir;
        const QString rows = dir.filePath(QStringLiteral("fig10.jsonl"));
        auto r = sparqlab::test::runCli({"bench-generate", "--model", "demo", "--seq", "64,256",
                                         "--methods", "dense,sparq", "--r", "16", "--k", "32",
                                         "--steps", "2", "--warmup", "0", "--json"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(sparqlab::test::writeFile(rows, r.out.toUtf8()));
        r = sparqlab::test::runCli(
            {"figures", "--bench", rows, "--out", dir.filePath("figs"), "--format", "png"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QString stem = QStringLiteral("figs/fig10_tokens_per_s_demo_batch1_cpu_float32");
        for (const QString& f :
             {stem + ".png", stem + ".csv", stem + "_fraction.png", stem + "_fraction.csv"})
            QVERIFY2(QFileInfo(dir.filePath(f)).size() > 40, qPrintable(f));
        // series,x,y: dense and sparq at two lengths, then dense's limit at two.
        const QStringList csv =
            QString::fromUtf8(sparqlab::test::readFile(dir.filePath(stem + ".csv")))
                .trimmed()
                .split(QLatin1Char('\n'));
        QCOMPARE(csv.size(), 1 + 6);
        const QStringList json =
            QString::fromUtf8(sparqlab::test::readFile(rows)).trimmed().split(QLatin1Char('\n'));
        QCOMPARE(json.size(), 4);
        for (const QString& line : json) {
            const QJsonObject o = QJsonDocument::fromJson(line.toUtf8()).object();
            const QString row =
                QStringLiteral("\"%1\",%2,").arg(o["method"].toString()).arg(o["seq"].toInt());
            const auto hit = std::find_if(csv.begin(), csv.end(),
                                          [&](const QString& l) { return l.startsWith(row); });
            QVERIFY2(hit != csv.end(), qPrintable(row));
            QVERIFY(std::abs(hit->section(',', 2).toDouble() - o["tokens_per_s"].toDouble()) <
                    1e-6 * o["tokens_per_s"].toDouble());
        }
        // A file mixing bench and bench-generate rows, and a row without its speed, are one line
        // each naming the file.
        QVERIFY(sparqlab::test::writeFile(
            dir.filePath("mixed.jsonl"),
            sparqlab::test::readFile(rows) +
                R"({"device":"cpu","dtype":"f32","batch":1,"heads":4,"kv_heads":4,"seq":512,"head_dim":64,"r":8,"k":32,"dense_us":10,"sparq_us":5,"speedup":2,"theoretical_speedup":3,"dense_gbps":1,"sparq_gbps":1,"machine_gbps":10})"
                "\n"));
        r = sparqlab::test::runCli(
            {"figures", "--bench", dir.filePath("mixed.jsonl"), "--out", dir.filePath("figs2")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.trimmed().count(QLatin1Char('\n')) == 0 &&
                     r.err.contains(QStringLiteral("mixed.jsonl: mixes bench rows")),
                 qPrintable(r.err));
        QVERIFY(sparqlab::test::writeFile(
            dir.filePath("slow.jsonl"),
            R"({"device":"cuda","dtype":"bfloat16","batch":1,"seq":4096,"method":"dense","tokens_per_s":0,"limit_tokens_per_s":99})"
            "\n"));
        r = sparqlab::test::runCli(
            {"figures", "--bench", dir.filePath("slow.jsonl"), "--out", dir.filePath("figs3")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(
            r.err.contains(QStringLiteral("slow.jsonl line 1: tokens per second must be positive")),
            qPrintable(r.err));
        QVERIFY(!QFileInfo::exists(dir.filePath("figs3")));
    }

    void benchFiguresPerMethod() {
        // bench --methods: Fig. 8 and F1 with one line per method.
        QTemporaryDir dir;
        const QString bench = dir.filePath(QStringLiteral("methods.jsonl"));
        auto r = sparqlab::test::runCli({"bench",
                                         "--seq",
                                         "512,1024",
                                         "--heads",
                                         "4",
                                         "--head-dim",
                                         "32",
                                         "--r",
                                         "8",
                                         "--k",
                                         "32",
                                         "--repeats",
                                         "2",
                                         "--warmup",
                                         "0",
                                         "--bandwidth-mib",
                                         "16",
                                         "--methods",
                                         "dense,sparq,quest,loki",
                                         "--out",
                                         bench});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        r = sparqlab::test::runCli(
            {"figures", "--bench", bench, "--out", dir.filePath("figs"), "--format", "png"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        for (const char* f :
             {"fig8_methods_time_vs_seq_batch1_f32.png", "figF1_methods_speedup_vs_size.png",
              "figF1_methods_fraction_of_theory.csv"})
            QVERIFY2(QFileInfo(dir.filePath(QStringLiteral("figs/") + f)).size() > 40, f);
        // Fig. 8's CSV: 2 lengths × (dense, sparq, quest, loki).
        const QString csv = QString::fromUtf8(
            sparqlab::test::readFile(dir.filePath("figs/fig8_methods_time_vs_seq_batch1_f32.csv")));
        QCOMPARE(csv.count(QLatin1Char('\n')), 1 + 8);
        QVERIFY(csv.contains(QStringLiteral("quest")) && csv.contains(QStringLiteral("loki r=8")));
    }
};

QTEST_MAIN(TestFiguresCli)
#include "test_figures_cli.moc"
