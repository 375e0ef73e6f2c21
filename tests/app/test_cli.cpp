// sparqlab-cli end to end: --version/--help, exit statuses, and `attend` on capture files
// built from the golden cases of ../shared/refs/sparq/golden.h5 (CONTRACTS.md §2, §3, §3b).

#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QSet>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <limits>
#include <memory>

using namespace sparqlab;
using sparqlab::test::runCli;
using sparqlab::test::toVector;

namespace {

/// A golden case written as a capture: one example per batch row, holding only the row's
/// valid positions, with the decode query at the last one.
struct CaseCapture {
    QString path;
    std::vector<at::Tensor> positions; // per row: original positions of the example's tokens
    int64_t D = 0;
    /// The longest example's positions.
    int64_t longest() const {
        int64_t n = 0;
        for (const at::Tensor& p : positions)
            n = std::max(n, p.numel());
        return n;
    }
};

CaseCapture writeCaseCapture(const h5::Group& cs, const QString& path) {
    const h5::Group in = cs.group("inputs");
    const at::Tensor q = in.read("q"), K = in.read("K"), V = in.read("V");
    const at::Tensor valid = in.read("valid").to(at::kBool);
    model::CaptureInfo info;
    info.model = "golden:" + cs.path();
    info.architecture = "golden";
    info.nLayers = 1;
    info.nHeads = q.size(1);
    info.nKvHeads = K.size(1);
    info.headDim = q.size(2);
    info.attnScale = 1.0 / std::sqrt(static_cast<double>(info.headDim));
    info.createdBy = "test_cli";
    capture::CaptureWriter w(path.toStdString(), info);
    CaseCapture cc;
    cc.path = path;
    cc.D = info.headDim;
    for (int64_t b = 0; b < q.size(0); ++b) {
        const at::Tensor pos = valid[b].nonzero().squeeze(1);
        const int64_t n = pos.numel();
        model::CaptureExample e;
        e.tokenIds = at::arange(n, at::kLong);
        e.qPositions = at::tensor({n - 1}, at::kLong);
        e.q = q[b].unsqueeze(0).unsqueeze(2);
        e.k = K[b].index_select(1, pos).unsqueeze(0);
        e.v = V[b].index_select(1, pos).unsqueeze(0);
        w.add(e);
        cc.positions.push_back(pos);
    }
    w.finish();
    return cc;
}

} // namespace

class TestCli : public QObject {
    Q_OBJECT
private:
    std::unique_ptr<h5::File> m_golden;
    QTemporaryDir m_dir;

    /// The Gaussian MHA case (S = 37, D = 64) of refs/sparq: its name in the file at hand.
    std::string gaussCase() const {
        return sparqlab::test::caseLike(m_golden->root().group("cases").children(),
                                        "mha_d64_S37_gauss");
    }

    /// Empty where the result file's y equals the case's dense y (float32 tolerance).
    static QString yAgainstDense(const QString& result, const h5::Group& cs) {
        const h5::File f = h5::File::openRead(result.toStdString());
        return sparqlab::test::compareClose(f.root().group("examples/0000").read("y"),
                                            cs.read("dense/y")[0].unsqueeze(0).unsqueeze(2),
                                            2e-5 * 4, 0, QStringLiteral("y vs dense"));
    }

private Q_SLOTS:
    void initTestCase() {
        const QString path =
            sparqlab::test::requireReference(QStringLiteral("refs/sparq/golden.h5"));
        m_golden = std::make_unique<h5::File>(h5::File::openRead(path.toStdString()));
        QVERIFY(m_dir.isValid());
    }

    void versionAndHelp() {
        auto r = runCli({QStringLiteral("--version")});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.startsWith(QStringLiteral("sparqlab-cli ")));
        r = runCli({QStringLiteral("--help")});
        QCOMPARE(r.exitCode, 0);
        for (const char* sub : {"info", "tokenize", "detokenize", "logits", "generate", "capture",
                                "stats", "attend", "figures", "bpc", "bench"})
            QVERIFY2(r.out.contains(QStringLiteral("\n  %1 ").arg(QLatin1String(sub))), sub);
        r = runCli({QStringLiteral("attend"), QStringLiteral("--help")});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains(QStringLiteral("--capture")));
    }

    void everyOptionAUsageNamesIsTaken() {
        // Each subcommand's --help names only options it takes (eval's help offered
        // --max-new-tokens, stats' and overlap's the ATTN --method they refuse), in its usage,
        // its options block (command_help.h) and its ATTN lines. Each command runs
        // once with every option its usage and ATTN lines name, then an unknown one: the
        // command line is read before anything runs, so the error must name the unknown one; an
        // option it names is one the help offers and the command refuses.
#if defined(__SANITIZE_ADDRESS__)
        QSKIP("a start of the command line per subcommand: the Release run checks the options");
#endif
        const auto all = runCli({QStringLiteral("--help"), QStringLiteral("--all")});
        QCOMPARE(all.exitCode, 0);
        const QRegularExpression option(QStringLiteral("--([a-z][a-z0-9-]*)"));
        // "  --seq LIST   default 4096 …": the options block's lines and ATTN's, each its first.
        const QRegularExpression ownOption(QStringLiteral("^  --[a-z][a-z0-9-]*"));
        QCOMPARE(all.out.count(QStringLiteral("\noptions:\n")), 16);
        QCOMPARE(all.out.count(QStringLiteral("\nexample: sparqlab-cli ")), 16);
        int commands = 0, options = 0;
        QString cmd;
        QStringList args;
        QSet<QString> seen;
        const auto probe = [&] {
            if (cmd.isEmpty())
                return;
            const auto r = runCli(args << QStringLiteral("--zz-not-an-option"));
            QVERIFY2(r.err.contains(QStringLiteral("unknown option --zz-not-an-option")),
                     qPrintable(cmd + ": " + r.err.trimmed()));
            ++commands;
        };
        for (QString line : all.out.split('\n')) {
            if (line.startsWith(QStringLiteral("usage: sparqlab-cli "))) {
                probe(); // the previous command's
                cmd = line.section(' ', 2, 2);
                args = QStringList{cmd};
                seen = {QStringLiteral("help")};
            } else if (const auto own = ownOption.match(line); own.hasMatch()) {
                line = own.captured(0); // an options line names its option first
            } else if (!line.startsWith(QStringLiteral("ATTN:"))) {
                continue;
            }
            line.remove(QRegularExpression(QStringLiteral("ATTN except [^\\]]*"))); // not taken
            for (auto o = option.globalMatch(line); o.hasNext();) {
                const QString name = o.next().captured(1);
                if (seen.contains(name))
                    continue;
                seen.insert(name);
                args << QStringLiteral("--") + name << QStringLiteral("1");
                ++options;
            }
        }
        probe();
        QVERIFY2(commands >= 24 && options >= 200,
                 qPrintable(QStringLiteral("%1 commands, %2 options").arg(commands).arg(options)));
    }

    void readmeTableIsTheMethodTable() {
        // The README's method table is the method table (method_table.cpp), as the CLI prints it.
        const auto r = runCli({QStringLiteral("methods"), QStringLiteral("--markdown")});
        QCOMPARE(r.exitCode, 0);
        const QString readme = QString::fromUtf8(
            sparqlab::test::readFile(sparqlab::test::sourcePath(QStringLiteral("README.md"))));
        QVERIFY2(readme.contains(r.out),
                 "README.md's method table differs from `sparqlab-cli methods --markdown`");
        for (const char* name : {"quest", "loki", "double-sparsity", "oracle-top-p", "sparq-top-p",
                                 "snapkv", "tova", "h2o"})
            QVERIFY(r.out.contains(QStringLiteral("| `%1` |").arg(QLatin1String(name))));
    }

    void readmeListsAreTheTables() {
        // The README's model families and evaluation tasks are those tables, as the CLI prints
        // them (model/families/, analysis/tasks/).
        const QString readme = QString::fromUtf8(
            sparqlab::test::readFile(sparqlab::test::sourcePath(QStringLiteral("README.md"))));
        for (const char* table : {"families", "tasks"}) {
            const auto r = runCli({QLatin1String(table), QStringLiteral("--markdown")});
            QCOMPARE(r.exitCode, 0);
            QVERIFY2(r.out.count(QLatin1Char('\n')) > 4, table);
            QVERIFY2(readme.contains(r.out),
                     qPrintable(QStringLiteral("README.md's %1 table differs from "
                                               "`sparqlab-cli %1 --markdown`")
                                    .arg(QLatin1String(table))));
        }
    }

    void usageErrorsExitWith2() {
        auto r = runCli({QStringLiteral("frobnicate")});
        QCOMPARE(r.exitCode, 2);
        r = runCli({QStringLiteral("attend"), QStringLiteral("--method"), QStringLiteral("sparq")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.startsWith(QStringLiteral("error: missing required option --capture")));
        r = runCli({QStringLiteral("attend"), QStringLiteral("--capture"), QStringLiteral("x.h5"),
                    QStringLiteral("--out"), QStringLiteral("y.h5"), QStringLiteral("--method"),
                    QStringLiteral("sparq"), QStringLiteral("--r"), QStringLiteral("eight")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains(QStringLiteral("--r needs a whole number")));
        // CONTRACTS.md §2: (A | B | C) is one of them; two are a usage error, not one ignored.
        r = runCli({QStringLiteral("tokenize"), QStringLiteral("--model"), QStringLiteral("m"),
                    QStringLiteral("--text"), QStringLiteral("Hi"), QStringLiteral("--jsonl"),
                    QStringLiteral("t.jsonl")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(QStringLiteral("give --text or --jsonl, not both")),
                 qPrintable(r.err));
        r = runCli({QStringLiteral("detokenize"), QStringLiteral("--model"), QStringLiteral("m"),
                    QStringLiteral("--ids"), QStringLiteral("72"), QStringLiteral("--jsonl"),
                    QStringLiteral("d.jsonl")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(QStringLiteral("give --ids or --jsonl, not both")),
                 qPrintable(r.err));
    }

    void benchReportsTheContractFields() {
        auto r = runCli({QStringLiteral("bench"),
                         QStringLiteral("--json"),
                         QStringLiteral("--seq"),
                         QStringLiteral("300,600"),
                         QStringLiteral("--heads"),
                         QStringLiteral("4"),
                         QStringLiteral("--kv-heads"),
                         QStringLiteral("2"),
                         QStringLiteral("--head-dim"),
                         QStringLiteral("64"),
                         QStringLiteral("--r"),
                         QStringLiteral("16"),
                         QStringLiteral("--k"),
                         QStringLiteral("32"),
                         QStringLiteral("--repeats"),
                         QStringLiteral("2"),
                         QStringLiteral("--warmup"),
                         QStringLiteral("0"),
                         QStringLiteral("--bandwidth-mib"),
                         QStringLiteral("16")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QStringList lines = r.out.trimmed().split(QLatin1Char('\n'));
        QCOMPARE(lines.size(), 2);
        for (int i = 0; i < 2; ++i) {
            const QJsonObject o = QJsonDocument::fromJson(lines[i].toUtf8()).object();
            for (const char* key :
                 {"device", "dtype", "batch", "heads", "kv_heads", "seq", "head_dim", "r", "k",
                  "dense_us", "sparq_us", "speedup", "theoretical_speedup", "dense_gbps",
                  "sparq_gbps", "machine_gbps", "repeats", "stderr_us"})
                QVERIFY2(o.contains(QLatin1String(key)), key);
            const double S = i == 0 ? 300 : 600, d = 64, k = 32, rr = 16;
            QCOMPARE(o[QStringLiteral("seq")].toInt(), static_cast<int>(S));
            // CONTRACTS.md §5's formula, literally.
            const double want = (2 * S * d + 2 * d) / (S * rr + 2 * k * d + 4 * d);
            QVERIFY(std::abs(o[QStringLiteral("theoretical_speedup")].toDouble() - want) <
                    1e-4 * want);
            QVERIFY(o[QStringLiteral("dense_us")].toDouble() > 0);
            QVERIFY(o[QStringLiteral("machine_gbps")].toDouble() > 0);
            const double speedup =
                o[QStringLiteral("dense_us")].toDouble() / o[QStringLiteral("sparq_us")].toDouble();
            QVERIFY(std::abs(o[QStringLiteral("speedup")].toDouble() - speedup) < 1e-3 * speedup);
        }
        // Out-of-range parameters are usage errors naming the option.
        r = runCli({QStringLiteral("bench"), QStringLiteral("--r"), QStringLiteral("200")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.startsWith(QStringLiteral("error: --r 200 exceeds head_dim 128")));
        r = runCli({QStringLiteral("bench"), QStringLiteral("--seq"), QStringLiteral("100")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains(QStringLiteral("--k 128 exceeds --seq 100")));
        r = runCli({QStringLiteral("bench"), QStringLiteral("--dtype"), QStringLiteral("f64")});
        QCOMPARE(r.exitCode, 2);
    }

    void benchMethodsReportsEachMethod() {
        // bench --methods: one object per method with its own transfer formula's speed-up
        // (METHODS.md §10) and the time of dense measured in the same run.
        auto r = runCli({"bench",
                         "--json",
                         "--seq",
                         "512",
                         "--heads",
                         "4",
                         "--kv-heads",
                         "2",
                         "--head-dim",
                         "32",
                         "--r",
                         "8",
                         "--k",
                         "64",
                         "--repeats",
                         "2",
                         "--warmup",
                         "0",
                         "--bandwidth-mib",
                         "16",
                         "--methods",
                         "dense,sparq,quest,loki,double-sparsity,oracle-top-p,sparq-top-p",
                         "--page-size",
                         "8",
                         "--p",
                         "0.9"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QStringList lines = r.out.trimmed().split(QLatin1Char('\n'));
        QCOMPARE(lines.size(), 7);
        QStringList seen;
        double denseUs = -1;
        for (const QString& line : lines) {
            const QJsonObject o = QJsonDocument::fromJson(line.toUtf8()).object();
            for (const char* key :
                 {"device", "dtype", "batch", "heads", "kv_heads", "seq", "head_dim", "method",
                  "us", "stderr_us", "gbps", "theoretical_speedup", "speedup", "dense_us",
                  "dense_gbps", "machine_gbps", "repeats", "count"})
                QVERIFY2(o.contains(QLatin1String(key)), key);
            const QString m = o[QStringLiteral("method")].toString();
            seen << m;
            const double S = 512, d = 32, k = 64, rr = 8, P = 8;
            const double us = o[QStringLiteral("us")].toDouble();
            QVERIFY(us > 0);
            if (denseUs < 0)
                denseUs = o[QStringLiteral("dense_us")].toDouble();
            QCOMPARE(o[QStringLiteral("dense_us")].toDouble(), denseUs); // one dense per run
            QVERIFY(std::abs(o[QStringLiteral("speedup")].toDouble() - denseUs / us) <
                    1e-3 * denseUs / us);
            const double dense = 2 * S * d + 2 * d;
            double want = 1;
            const double n = o[QStringLiteral("count")].toDouble();
            if (m == QLatin1String("sparq"))
                want = dense / (S * rr + 2 * k * d + 4 * d);
            else if (m == QLatin1String("quest")) // 2·⌈S/P⌉·d + 2·P·⌈k/P⌉·d + 2·d
                want = dense / (2 * std::ceil(S / P) * d + 2 * P * std::ceil(k / P) * d + 2 * d);
            else if (m == QLatin1String("loki") || m == QLatin1String("double-sparsity"))
                want = dense / (S * rr + 2 * k * d + 2 * d);
            else if (m == QLatin1String("oracle-top-p"))
                want = dense / (S * d + n * d + 2 * d);
            else if (m == QLatin1String("sparq-top-p"))
                want = dense / (S * rr + 2 * n * d + 4 * d);
            QVERIFY2(std::abs(o[QStringLiteral("theoretical_speedup")].toDouble() - want) <
                         1e-4 * want,
                     qPrintable(m));
            if (m.endsWith(QLatin1String("top-p")))
                QVERIFY(n >= 1 && n <= k);
        }
        QCOMPARE(seen, (QStringList{"dense", "sparq", "quest", "loki", "double-sparsity",
                                    "oracle-top-p", "sparq-top-p"}));
        r = runCli({"bench", "--methods", "h2o"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(QStringLiteral("does not run 'h2o'")), qPrintable(r.err));
    }

    void attendReproducesGolden_data() {
        QTest::addColumn<QString>("caseName");
        // The shown file's three kinds, or the cases of those kinds of a kept-back one.
        const std::vector<std::string> cases = m_golden->root().group("cases").children();
        std::vector<std::string> rows;
        for (const char* shown : {"mha_d128_S512_t3", "gqa_d128_S37_t3_pad", "edge_ties"}) {
            const std::string c = sparqlab::test::caseLike(cases, shown);
            if (std::find(rows.begin(), rows.end(), c) == rows.end())
                rows.push_back(c);
        }
        for (const std::string& c : rows)
            QTest::newRow(c.c_str()) << QString::fromStdString(c);
    }

    void attendReproducesGolden() {
        QFETCH(QString, caseName);
        SPARQLAB_SKIP_UNLESS(m_golden->root().has("cases/" + caseName.toStdString()),
                             "refs/sparq/golden.h5: cases/" + caseName);
        const h5::Group cs = m_golden->root().group("cases/" + caseName.toStdString());
        const CaseCapture cc =
            writeCaseCapture(cs, m_dir.filePath(caseName + QStringLiteral(".h5")));
        const h5::Group g = cs.group("sparq");
        const h5::Group prm = g.group("params");
        const auto r = toVector(prm.read("r")), k = toVector(prm.read("k")),
                   l = toVector(prm.read("l")), tau = toVector(prm.read("tau")),
                   gs = toVector(prm.read("group_select")),
                   comp = toVector(prm.read("component_select")),
                   re = toVector(prm.read("reallocate"));
        const QStringList tauNames =
            QString::fromStdString(prm.datasetAttrString("tau", "codes")).split(',');
        const QStringList gsNames =
            QString::fromStdString(prm.datasetAttrString("group_select", "codes")).split(',');
        const at::Tensor Y = g.read("y"), A = g.read("alpha"), I = g.read("indices");
        const at::Tensor yDense = cs.read("dense/y");
        // max|V| over the valid positions (a padded case fills the others with NaN or 1e30).
        const at::Tensor V = cs.read("inputs/V");
        double vScale = 1;
        for (size_t b = 0; b < cc.positions.size(); ++b)
            vScale = std::max(vScale, V[static_cast<int64_t>(b)]
                                          .index_select(1, cc.positions[b])
                                          .abs()
                                          .max()
                                          .item<double>());
        // Every parameter set the CLI can express (it has no component switch and refuses an
        // r above the head dimension, which the library takes as D; k ≥ S means every
        // position), thinned to about a dozen runs per case to keep the suite quick.
        std::vector<size_t> eligible;
        for (size_t p = 0; p < r.size(); ++p)
            if (comp[p] == 0 && r[p] <= cc.D)
                eligible.push_back(p);
        QVERIFY(!eligible.empty());
        const size_t stride = std::max<size_t>(1, eligible.size() / 12);
        int runs = 0;
        for (size_t e = 0; e < eligible.size(); e += stride) {
            const size_t p = eligible[e];
            const QString t = tauNames[static_cast<int>(tau[p])];
            const QString tauArg = t == QLatin1String("eq9")       ? QStringLiteral("adaptive")
                                   : t == QLatin1String("sqrt_dh") ? QStringLiteral("sqrt-dh")
                                   : t == QLatin1String("sqrt_r")  ? QStringLiteral("sqrt-r")
                                                                   : QStringLiteral("1");
            const QString out = m_dir.filePath(QStringLiteral("res_%1_%2.h5").arg(caseName).arg(p));
            QStringList args{QStringLiteral("attend"),
                             QStringLiteral("--capture"),
                             cc.path,
                             QStringLiteral("--out"),
                             out,
                             QStringLiteral("--method"),
                             QStringLiteral("sparq"),
                             QStringLiteral("--r"),
                             QString::number(r[p]),
                             QStringLiteral("--k"),
                             QString::number(k[p]),
                             QStringLiteral("--local"),
                             QString::number(l[p]),
                             QStringLiteral("--tau"),
                             tauArg,
                             QStringLiteral("--gqa"),
                             QString(gsNames[static_cast<int>(gs[p])])
                                 .replace(QLatin1Char('_'), QLatin1Char('-')),
                             QStringLiteral("--json")};
            if (re[p] == 0)
                args << QStringLiteral("--no-mean-value");
            const auto res = runCli(args);
            QVERIFY2(res.exitCode == 0, qPrintable(res.err));
            ++runs;
            const h5::File f = h5::File::openRead(out.toStdString());
            QCOMPARE(f.root().attrString("format"), std::string("sparqlab.attend"));
            double relSum = 0;
            int64_t relCount = 0;
            for (size_t b = 0; b < cc.positions.size(); ++b) {
                char name[8];
                std::snprintf(name, sizeof name, "%04zu", b);
                const h5::Group e = f.root().group(std::string("examples/") + name);
                const at::Tensor y = e.read("y").select(0, 0).select(1, 0);         // [Hq, D]
                const at::Tensor alpha = e.read("alpha").select(0, 0).select(1, 0); // [Hq]
                const at::Tensor idx = e.read("indices").select(0, 0).select(1, 0); // [Hq, W]
                const at::Tensor pos = cc.positions[b];
                for (int64_t h = 0; h < y.size(0); ++h) {
                    std::vector<int64_t> got, want;
                    for (int64_t j : toVector(idx[h]))
                        if (j >= 0)
                            got.push_back(pos[j].item<int64_t>());
                    for (int64_t j : toVector(I[p][b][h]))
                        if (j >= 0)
                            want.push_back(j);
                    QVERIFY2(
                        got == want,
                        qPrintable(QStringLiteral("p=%1 b=%2 h=%3 indices").arg(p).arg(b).arg(h)));
                }
                QString err =
                    sparqlab::test::compareClose(y, Y[p][b], 2e-5 * vScale, 0, QStringLiteral("y"));
                QVERIFY2(err.isEmpty(), qPrintable(err));
                err =
                    sparqlab::test::compareClose(alpha, A[p][b], 1e-5, 0, QStringLiteral("alpha"));
                QVERIFY2(err.isEmpty(), qPrintable(err));
                const at::Tensor rel = (Y[p][b] - yDense[b]).norm(2, -1) / yDense[b].norm(2, -1);
                relSum += rel.sum().item<double>();
                relCount += rel.numel();
            }
            // --json: the mean relative error against dense, from the golden y.
            const QJsonObject j = QJsonDocument::fromJson(res.out.toUtf8()).object();
            QCOMPARE(j.value(QStringLiteral("method")).toString(), QStringLiteral("sparq"));
            const double relMean = j.value(QStringLiteral("rel_error"))
                                       .toObject()
                                       .value(QStringLiteral("mean"))
                                       .toDouble();
            QVERIFY2(std::abs(relMean - relSum / relCount) <=
                         1e-4 * std::max(1.0, relSum / relCount),
                     qPrintable(QStringLiteral("rel_error %1 vs golden %2")
                                    .arg(relMean)
                                    .arg(relSum / relCount)));
            const double agreement = j.value(QStringLiteral("topk_agreement"))
                                         .toObject()
                                         .value(QStringLiteral("mean"))
                                         .toDouble();
            // (0 is possible: k = 1 with l ≥ k keeps the current token alone.)
            QVERIFY(agreement >= 0 && agreement <= 1);
            // Compression ratio: the transfer model summed over the examples (SPARQ.md §5).
            double moved = 0, dense = 0;
            for (const at::Tensor& pos : cc.positions) {
                const int64_t n = pos.numel();
                // k counts the positions attended: at most the n there are (issue 36).
                moved += n * r[p] + 2 * std::min<int64_t>(k[p], n) * cc.D + 4 * cc.D;
                dense += 2 * n * cc.D + 2 * cc.D;
            }
            QVERIFY(std::abs(j.value(QStringLiteral("compression_ratio")).toDouble() -
                             moved / dense) < 1e-12);
        }
        QVERIFY(runs >= std::min<int>(10, static_cast<int>(eligible.size())));
    }

    void attendWithFullRankAndKIsDense() {
        const std::string name = gaussCase();
        SPARQLAB_SKIP_UNLESS(m_golden->root().has("cases/" + name),
                             QString::fromStdString("refs/sparq/golden.h5: cases/" + name));
        const h5::Group cs = m_golden->root().group("cases/" + name);
        const CaseCapture cc = writeCaseCapture(cs, m_dir.filePath(QStringLiteral("dense.h5")));
        const QString out = m_dir.filePath(QStringLiteral("dense_res.h5"));
        const auto res = runCli({QStringLiteral("attend"), QStringLiteral("--capture"), cc.path,
                                 QStringLiteral("--out"), out, QStringLiteral("--method"),
                                 QStringLiteral("sparq"), QStringLiteral("--r"),
                                 QString::number(cc.D), QStringLiteral("--k"),
                                 QString::number(cc.longest()), QStringLiteral("--json")});
        QVERIFY2(res.exitCode == 0, qPrintable(res.err));
        const QJsonObject j = QJsonDocument::fromJson(res.out.toUtf8()).object();
        QVERIFY(j.value(QStringLiteral("rel_error"))
                    .toObject()
                    .value(QStringLiteral("mean"))
                    .toDouble() < 1e-5);
        QCOMPARE(j.value(QStringLiteral("topk_agreement"))
                     .toObject()
                     .value(QStringLiteral("mean"))
                     .toDouble(),
                 1.0);
        const QString err = yAgainstDense(out, cs);
        QVERIFY2(err.isEmpty(), qPrintable(err));
    }

    void snapkvKeepsAnExampleShorterThanItsWindow() {
        // CONTRACTS.md §6: an example with fewer than W positions keeps everything, no error —
        // from a capture of the decode query alone (no earlier queries to vote with).
        const std::string name = gaussCase();
        SPARQLAB_SKIP_UNLESS(m_golden->root().has("cases/" + name),
                             QString::fromStdString("refs/sparq/golden.h5: cases/" + name));
        const h5::Group cs = m_golden->root().group("cases/" + name);
        const CaseCapture cc = writeCaseCapture(cs, m_dir.filePath(QStringLiteral("short.h5")));
        const QString out = m_dir.filePath(QStringLiteral("short_res.h5"));
        auto run = [&](int64_t window) { // (the window is within k)
            return runCli({QStringLiteral("attend"), QStringLiteral("--capture"), cc.path,
                           QStringLiteral("--out"), out, QStringLiteral("--method"),
                           QStringLiteral("snapkv"), QStringLiteral("--k"),
                           QString::number(std::max<int64_t>(64, window)),
                           QStringLiteral("--window"), QString::number(window)});
        };
        const auto res = run(cc.longest() + 11); // longer than every example
        QVERIFY2(res.exitCode == 0, qPrintable(res.err));
        const QString err = yAgainstDense(out, cs);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        // A window shorter than the example needs the queries it votes with.
        const int64_t shorter = std::max<int64_t>(1, cc.positions[0].numel() / 2);
        QVERIFY(shorter < cc.positions[0].numel());
        const auto shortWindow = run(shorter);
        QCOMPARE(shortWindow.exitCode, 1);
        QVERIFY2(shortWindow.err.contains(
                     QStringLiteral("needs the queries of the last %1").arg(shorter)),
                 qPrintable(shortWindow.err));
    }

    /// An option the method does not take is noted on stderr, once, naming what it takes, and
    /// the run goes on (a sweep over methods passes the same options to each); an option a
    /// method takes is not noted; a list notes only what none of its methods takes.
    void optionsAMethodDoesNotTakeAreNoted() {
        const std::string name = sparqlab::test::caseLike(
            m_golden->root().group("cases").children(), "mha_d64_S37_gauss");
        SPARQLAB_SKIP_UNLESS(m_golden->root().has("cases/" + name),
                             QString::fromStdString("refs/sparq/golden.h5: cases/" + name));
        const h5::Group cs = m_golden->root().group("cases/" + name);
        const CaseCapture cc = writeCaseCapture(cs, m_dir.filePath(QStringLiteral("note.h5")));
        const QString out = m_dir.filePath(QStringLiteral("note_res.h5"));
        const QString r16 = QString::number(std::min<int64_t>(16, cc.D)); // (r ≤ D)
        const auto attend = [&](const QStringList& extra) {
            return runCli(QStringList{QStringLiteral("attend"), QStringLiteral("--capture"),
                                      cc.path, QStringLiteral("--out"), out} +
                          extra);
        };
        const QString quest = QStringLiteral("note: --r does not apply to quest (it takes --k "
                                             "--page-size --local --gqa); ignored");
        auto r = attend({QStringLiteral("--method"), QStringLiteral("quest"), QStringLiteral("--r"),
                         r16, QStringLiteral("--k"), QStringLiteral("16")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(quest), qPrintable(r.err));
        QCOMPARE(r.err.count(QStringLiteral("does not apply")), 1); // --k it takes
        r = attend({QStringLiteral("--method"), QStringLiteral("sparq"), QStringLiteral("--r"), r16,
                    QStringLiteral("--k"), QStringLiteral("16")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(!r.err.contains(QStringLiteral("does not apply")), qPrintable(r.err));
        r = attend({QStringLiteral("--method"), QStringLiteral("dense"), QStringLiteral("--k"),
                    QStringLiteral("16"), QStringLiteral("--no-mean-value")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("note: --k does not apply to dense (it takes no "
                                               "parameters); ignored")),
                 qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("note: --no-mean-value does not apply to dense")),
                 qPrintable(r.err));
        // overlap's --methods: --r goes to sparq, --page-size to none of the list.
        const QString json = m_dir.filePath(QStringLiteral("note_overlap.json"));
        r = runCli({QStringLiteral("overlap"), QStringLiteral("--capture"), cc.path,
                    QStringLiteral("--json"), json, QStringLiteral("--methods"),
                    QStringLiteral("sparq,oracle"), QStringLiteral("--ks"), QStringLiteral("8"),
                    QStringLiteral("--r"), r16, QStringLiteral("--page-size"),
                    QStringLiteral("8")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("note: --page-size does not apply to sparq or "
                                               "oracle (none of them takes it); ignored")),
                 qPrintable(r.err));
        QCOMPARE(r.err.count(QStringLiteral("does not apply")), 1);
        // A device is written, not replaced: --json through a link to /dev/null leaves the link
        // (a rename of the finished file over it would have replaced it, or /dev/null itself).
        const QString null = m_dir.filePath(QStringLiteral("null-link"));
        QVERIFY(QFile::link(QStringLiteral("/dev/null"), null));
        r = runCli({QStringLiteral("overlap"), QStringLiteral("--capture"), cc.path,
                    QStringLiteral("--json"), null, QStringLiteral("--methods"),
                    QStringLiteral("oracle"), QStringLiteral("--ks"), QStringLiteral("8")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(QFileInfo(null).isSymLink());
        QVERIFY(!QFileInfo(QStringLiteral("/dev/null")).isFile());
    }

    /// What attend's compression ratio leaves out is said on stderr (k at or above the length,
    /// per-head selection in a GQA group), and its result file names the parameters the method
    /// used, with the local window as in effect (above k it is k).
    void attendSaysWhatItsRatioLeavesOut() {
        const QString cap = m_dir.filePath(QStringLiteral("demo40.h5"));
        QStringList ids;
        for (int i = 0; i < 40; ++i)
            ids << QString::number(5 + i);
        auto r = runCli({"capture", "--model", "demo", "--ids", ids.join(','), "--out", cap});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QString out = m_dir.filePath(QStringLiteral("said.h5"));
        r = runCli({"attend", "--capture", cap, "--out", out, "--method", "sparq", "--k", "64"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("k = 64 reaches the length at 4 of 4 decode steps")),
                 qPrintable(r.err)); // the demo's 4 layers, one query of 40 positions
        r = runCli({"attend", "--capture", cap, "--out", out, "--method", "sparq", "--k", "16",
                    "--gqa", "per-head"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("each of a KV group's 2 heads selects on its own")),
                 qPrintable(r.err));
        QVERIFY2(!r.err.contains(QStringLiteral("reaches the length")), qPrintable(r.err));
        r = runCli({"attend", "--capture", cap, "--out", out, "--method", "oracle", "--k", "16",
                    "--local", "30"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(!r.err.contains(QStringLiteral("selects on its own")), qPrintable(r.err));
        const h5::File f = h5::File::openRead(out.toStdString());
        QCOMPARE(f.root().attrString("params_used"), std::string("k,local,gqa"));
        QCOMPARE(f.root().attrInt("local"), int64_t{16}); // 30 above k = 16: 16 in effect
        QCOMPARE(f.root().attrInt("r"), int64_t{32});     // written as version 1 did
    }

    void attendRejectsBadInput() {
        const std::string name = sparqlab::test::caseLike(
            m_golden->root().group("cases").children(), "mha_d64_S37_gauss");
        SPARQLAB_SKIP_UNLESS(m_golden->root().has("cases/" + name),
                             QString::fromStdString("refs/sparq/golden.h5: cases/" + name));
        const h5::Group cs = m_golden->root().group("cases/" + name);
        const CaseCapture cc = writeCaseCapture(cs, m_dir.filePath(QStringLiteral("bad.h5")));
        const QString out = m_dir.filePath(QStringLiteral("never.h5"));
        auto attend = [&](const QString& capture, QStringList extra) {
            QStringList a{QStringLiteral("attend"),
                          QStringLiteral("--capture"),
                          capture,
                          QStringLiteral("--out"),
                          out,
                          QStringLiteral("--method"),
                          QStringLiteral("sparq")};
            return runCli(a + extra);
        };
        struct Bad {
            QStringList args;
            const char* message;
        };
        const QString golden = sparqlab::test::sharedFile(QStringLiteral("refs/sparq/golden.h5"));
        const QString notHdf5 = m_dir.filePath(QStringLiteral("text.h5"));
        QFile t(notHdf5);
        QVERIFY(t.open(QIODevice::WriteOnly));
        t.write("this is not HDF5\n");
        t.close();
        // A capture whose keys hold NaN at a position the query sees.
        const QString nanCapture = m_dir.filePath(QStringLiteral("nan.h5"));
        {
            capture::CaptureReader in(cc.path.toStdString());
            capture::CaptureWriter w(nanCapture.toStdString(), in.info());
            model::CaptureExample e = in.read(0);
            e.k[0][e.k.size(1) - 1][0][e.k.size(3) - 1] = std::numeric_limits<float>::quiet_NaN();
            w.add(e);
            w.finish();
        }
        const std::vector<std::pair<std::pair<QString, QStringList>, QString>> cases{
            {{nanCapture, {QStringLiteral("--k"), QStringLiteral("16")}},
             nanCapture + QStringLiteral(": example 0000, layer 0: K has non-finite entries")},
            {{cc.path, {QStringLiteral("--r"), QString::number(cc.D + 1)}},
             QStringLiteral("r must be between 1 and the head dimension %1").arg(cc.D)},
            {{golden, {}}, QStringLiteral("not a SparQ Lab capture")},
            {{notHdf5, {}}, QStringLiteral("not an HDF5 file")},
            {{m_dir.filePath(QStringLiteral("missing.h5")), {}}, QStringLiteral("no such file")},
        };
        for (const auto& [input, message] : cases) {
            const auto r = attend(input.first, input.second);
            QCOMPARE(r.exitCode, 1);
            QVERIFY2(r.err.startsWith(QStringLiteral("error: ")) && r.err.contains(message),
                     qPrintable(r.err));
            QCOMPARE(r.err.count(QLatin1Char('\n')), 1); // one line
            QVERIFY(!QFile::exists(out));                // nothing half-written
        }
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
