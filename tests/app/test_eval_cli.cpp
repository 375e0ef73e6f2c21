// sparqlab-cli eval end to end on a small model with the demo's tokenizer: the bpc task's dense
// line is `sparqlab-cli bpc`, a killed and resumed run writes what an uninterrupted one does,
// shards cover the study, and figures --eval draws it and writes the Table 2 layout.

#include "test_support.h"

#include "analysis/eval_run.h"
#include "analysis/eval_task_spec.h"
#include "model/model.h"
#include "model/resources.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

using sparqlab::test::runCli;

namespace {
QList<QJsonObject> jsonLines(const QString& path) {
    QList<QJsonObject> out;
    for (const QByteArray& line : sparqlab::test::readFile(path).split('\n'))
        if (!line.trimmed().isEmpty())
            out << QJsonDocument::fromJson(line).object();
    return out;
}
} // namespace

class TestEvalCli : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_model, m_text;

    QStringList evalArgs(const QString& task, const QString& out) const {
        return {"eval",
                "--model",
                m_model,
                "--task",
                task,
                "--data",
                m_text,
                "--out",
                out,
                "--methods",
                "dense,sparq,h2o,lminf",
                "--r",
                "4,16",
                "--limit",
                "3",
                "--seed",
                "7",
                "--reference-chars",
                "64",
                "--context-chars",
                "600"};
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        const auto demo = sparqlab::model::Model::open("demo", {});
        sparqlab::test::writeFile(
            m_dir.filePath("small.json"),
            R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96, )"
            R"("num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, )"
            R"("vocab_size": 4096, "max_position_embeddings": 512})");
        m_model = m_dir.filePath("small");
        const auto r =
            runCli({"init-model", "--config", m_dir.filePath("small.json"), "--out", m_model,
                    "--tokenizer", QString::fromStdString(demo->folder() + "/tokenizer.json")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        m_text = sparqlab::test::sourcePath(QStringLiteral("tests/data/sotu_2012_excerpt.txt"));
        QVERIFY(QFile::exists(m_text));
    }

    void bpcDenseLineIsTheBpcCommand() {
        const QString out = m_dir.filePath("bpc.jsonl");
        auto r = runCli({"eval", "--model", m_model, "--task", "bpc", "--data", m_text, "--out",
                         out, "--methods", "dense,sparq", "--r", "16", "--k", "32"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QList<QJsonObject> lines = jsonLines(out);
        QCOMPARE(lines.size(), 2);
        r = runCli({"bpc", "--model", m_model, "--text-file", m_text, "--json"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const double bpc = QJsonDocument::fromJson(r.out.toUtf8()).object()["bpc"].toDouble();
        QCOMPARE(lines[0]["method"].toString(), QStringLiteral("dense"));
        QCOMPARE(lines[0]["metric"].toString(), QStringLiteral("bpc"));
        QVERIFY(std::abs(lines[0]["value"].toDouble() - bpc) < 1e-6);
        QCOMPARE(lines[0]["compression"].toDouble(), 1.0);
        // SparQ's line is `bpc --method sparq` with the same parameters.
        r = runCli({"bpc", "--model", m_model, "--text-file", m_text, "--json", "--method", "sparq",
                    "--r", "16", "--k", "32", "--local", "8"});
        const double sparq = QJsonDocument::fromJson(r.out.toUtf8()).object()["bpc"].toDouble();
        QVERIFY(std::abs(lines[1]["value"].toDouble() - sparq) < 1e-6);
        QVERIFY(lines[1]["compression"].toDouble() < 1.0);
        const QJsonObject params = lines[1]["params"].toObject();
        QCOMPARE(params["r"].toInt(), 16);
        QCOMPARE(params["k"].toInt(), 32);
        QCOMPARE(params["local"].toInt(), 8); // k/4 by default (Table G1)
        for (const char* key : {"task", "data", "example", "method", "params", "metric", "value",
                                "seq_len", "compression", "model", "created_by"})
            QVERIFY2(lines[1].contains(QLatin1String(key)), key);
    }

    // A line's compression counts each attention layer at the keys its query sees (CONTRACTS.md
    // §8), as `traffic` does: a sliding window's, and DeepSeek-V4's window and entries, each key
    // its own value (METHODS.md §10), against the model's own reads.
    void compressionCountsTheKeysEachLayerSees() {
        const auto demo = sparqlab::model::Model::open("demo", {});
        const QString tokenizer = QString::fromStdString(demo->folder() + "/tokenizer.json");
        const int64_t r = 4, k = 8;
        // One line of `eval --task repetition` with SparQ; and `traffic` at its length.
        const auto line = [&](const QString& model, const QString& name) {
            const QString out = m_dir.filePath(name + ".jsonl");
            const auto run = runCli({"eval",
                                     "--model",
                                     model,
                                     "--task",
                                     "repetition",
                                     "--data",
                                     m_text,
                                     "--out",
                                     out,
                                     "--methods",
                                     "sparq",
                                     "--r",
                                     QString::number(r),
                                     "--k",
                                     QString::number(k),
                                     "--limit",
                                     "1",
                                     "--reference-chars",
                                     "32",
                                     "--context-chars",
                                     "600"});
            if (run.exitCode != 0)
                qWarning("%s", qPrintable(run.err));
            const QList<QJsonObject> lines = jsonLines(out);
            return lines.size() == 1 ? lines[0] : QJsonObject{};
        };
        const auto traffic = [&](const QString& model, int64_t S, int64_t kk) {
            const auto run =
                runCli({"traffic", "--model", model, "--length", QString::number(S), "--method",
                        "sparq", "--r", QString::number(r), "--k", QString::number(kk), "--json"});
            return QJsonDocument::fromJson(run.out.toUtf8())
                .object()["method_transfer_ratio"]
                .toDouble(-1);
        };

        // Mistral, every layer a window of W: SparQ's Eq. 11 over Eq. 3 at W, not at S.
        const int64_t W = 24, d = 16;
        sparqlab::test::writeFile(
            m_dir.filePath("window.json"),
            R"({"architectures": ["MistralForCausalLM"], "hidden_size": 64, )"
            R"("intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, )"
            R"("num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 512, )"
            R"("sliding_window": 24})");
        const QString window = m_dir.filePath("window");
        auto run = runCli({"init-model", "--config", m_dir.filePath("window.json"), "--out", window,
                           "--tokenizer", tokenizer});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        const QJsonObject w = line(window, "window");
        QVERIFY(!w.isEmpty());
        const int64_t S = w["seq_len"].toInteger();
        QVERIFY2(S > W, qPrintable(QString::number(S)));
        const auto sparq = [&](double n, double kk) { return n * r + 2 * kk * d + 4 * d; };
        const auto dense = [&](double n) { return 2 * n * d + 2 * d; };
        QVERIFY(std::abs(w["compression"].toDouble() - sparq(W, k) / dense(W)) < 1e-12);
        QVERIFY(std::abs(sparq(S, k) / dense(S) - sparq(W, k) / dense(W)) > 0.05);
        QVERIFY(std::abs(w["compression"].toDouble() - traffic(window, S, k)) < 1e-12);
        // A k that covers the window keeps every key there: read as dense reads them.
        QCOMPARE(traffic(window, S, W), 1.0);
        QVERIFY(traffic(window, S, W - 1) > 1.0); // SparQ's step 1 costs more than it saves

        // DeepSeek-V4 (docs/bench/learned-sparse/deepseek_v4_lab.json: a window of 16; layers
        // HCA at rate 32, CSA at rate 4 with the indexer's top 8 of dimension 32, a window only,
        // CSA; d = 64): the model reads its window, all of an HCA layer's entries, and on a CSA
        // layer the indexer's 8 picks and the indexer key of every entry, d·(keys + 1) + 32·
        // entries; SparQ reads among the window and every entry, each key its value:
        // n·r + k·d + 3·d, or n·d + d where k covers the n keys.
        const QString v4 = m_dir.filePath("v4");
        run = runCli({"init-model", "--config",
                      sparqlab::test::sourcePath("docs/bench/learned-sparse/deepseek_v4_lab.json"),
                      "--out", v4, "--seed", "1", "--tokenizer", tokenizer});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        const QJsonObject v = line(v4, "v4");
        QVERIFY(!v.isEmpty());
        const int64_t S4 = v["seq_len"].toInteger(), D = 64, window4 = 16;
        QVERIFY2(S4 > 64, qPrintable(QString::number(S4)));
        double model = 0, method = 0;
        for (const auto& [rate, indexed] :
             std::vector<std::pair<int64_t, bool>>{{32, false}, {4, true}, {0, false}, {4, true}}) {
            const int64_t seen = std::min(S4, window4), entries = rate > 0 ? S4 / rate : 0;
            const int64_t keys = seen + (indexed ? std::min<int64_t>(8, entries) : entries);
            model += static_cast<double>(D * (keys + 1) + (indexed ? 32 * entries : 0));
            const int64_t n = seen + entries;
            method += static_cast<double>(k >= n ? n * D + D : n * r + k * D + 3 * D);
        }
        QVERIFY2(std::abs(v["compression"].toDouble() - method / model) < 1e-12,
                 qPrintable(QString::number(v["compression"].toDouble()) + " " +
                            QString::number(method / model)));
        QVERIFY(std::abs(v["compression"].toDouble() - traffic(v4, S4, k)) < 1e-12);
    }

    void killedAndResumedEqualsUninterrupted() {
        const QString whole = m_dir.filePath("whole.jsonl");
        auto r = runCli(evalArgs("repetition", whole));
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QByteArray expected = sparqlab::test::readFile(whole);
        QVERIFY(expected.count('\n') > 6);
        // Kill a run after its first lines, then resume it.
        const QString resumed = m_dir.filePath("resumed.jsonl");
        QProcess p;
        p.start(sparqlab::test::cliPath(), evalArgs("repetition", resumed));
        const QString partial = resumed + ".partial";
        QElapsedTimer t;
        t.start();
        while (sparqlab::test::readFile(partial).count('\n') < 3 && t.elapsed() < 120000)
            QTest::qWait(20);
        p.kill();
        p.waitForFinished();
        QVERIFY(!QFile::exists(resumed)); // nothing final until the run completes
        const int before = sparqlab::test::readFile(partial).count('\n');
        QVERIFY2(before >= 3 && before < expected.count('\n'), qPrintable(QString::number(before)));
        r = runCli(evalArgs("repetition", resumed) << "--resume");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(r.err.contains(QStringLiteral("already there")));
        QCOMPARE(sparqlab::test::readFile(resumed), expected);
        QVERIFY(!QFile::exists(partial));
        // Resuming a complete file computes nothing and changes nothing.
        r = runCli(evalArgs("repetition", resumed) << "--resume");
        QVERIFY2(r.exitCode == 0 && r.err.contains(QStringLiteral("0 lines")), qPrintable(r.err));
        QCOMPARE(sparqlab::test::readFile(resumed), expected);
    }

    void shardsCoverTheStudy() {
        const QByteArray whole = sparqlab::test::readFile(m_dir.filePath("whole.jsonl"));
        QList<QByteArray> all = whole.split('\n');
        QList<QByteArray> parts;
        for (int i = 0; i < 2; ++i) {
            const QString out = m_dir.filePath(QStringLiteral("shard%1.jsonl").arg(i));
            auto r =
                runCli(evalArgs("repetition", out) << "--shard" << QStringLiteral("%1/2").arg(i));
            QVERIFY2(r.exitCode == 0, qPrintable(r.err));
            parts += sparqlab::test::readFile(out).split('\n');
        }
        all.removeAll(QByteArray());
        parts.removeAll(QByteArray());
        std::sort(all.begin(), all.end());
        std::sort(parts.begin(), parts.end());
        QCOMPARE(parts, all);
    }

    void figuresAndTable() {
        if (!SPARQLAB_TEST_HAS_GUI)
            QSKIP("figures needs the GUI libraries (SPARQLAB_GUI=OFF)");
        const QString fig = m_dir.filePath("fig");
        auto r = runCli(
            {"figures", "--eval", m_dir.filePath("whole.jsonl"), "--out", fig, "--format", "png"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        for (const char* f : {"eval_repetition.png", "eval_repetition.csv",
                              "eval_repetition_sparq_r.png", "table2.csv", "table2.md"})
            QVERIFY2(QFile::exists(QDir(fig).filePath(QLatin1String(f))), f);
        const QString md = QString::fromUtf8(sparqlab::test::readFile(fig + "/table2.md"));
        QVERIFY2(md.contains(QStringLiteral("| Dense |")) &&
                     md.contains(QStringLiteral("| SparQ |")),
                 qPrintable(md));
        // A results file with a bad line: one error line naming it.
        const QString bad = m_dir.filePath("bad.jsonl");
        sparqlab::test::writeFile(bad, "{\"task\": \"x\"}\n");
        r = runCli({"figures", "--eval", bad, "--out", fig});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.startsWith(QStringLiteral("error: ") + bad + " line 1"), qPrintable(r.err));
    }

    void rulerPromptsGoThroughTheChatTemplate() {
        // RULER through a real chat template (Qwen2.5-7B-Instruct's, GPT-2's tokenizer): the
        // task's prompt is the user turn, its answer prefix follows the assistant header (a
        // prefill), and the length L counts the template's tokens (LONGCONTEXT.md §1).
        const QString folder = m_dir.filePath(QStringLiteral("qwen_chat"));
        const QString made = sparqlab::test::makeChatModel(folder, 1024);
        if (made.startsWith(QStringLiteral("skip: ")))
            QSKIP(qPrintable(made));
        QVERIFY2(made.isEmpty(), qPrintable(made));
        namespace a = sparqlab::analysis;
        const auto model = sparqlab::model::Model::open(folder.toStdString(), {});
        const sparqlab::text::Tokenizer& tok = model->tokenizer();
        for (const a::EvalTask task : {a::EvalTask::RulerNiahSingle1, a::EvalTask::RulerVt}) {
            a::EvalOptions o;
            o.task = task;
            o.dataPath = sparqlab::model::resourcePath("eval/sotu-2010-2011.txt");
            o.data.haystackTokens = {1024, 2048}; // 2,048 is above the context: left out
            o.data.samples = 2;
            o.chat = std::make_shared<const sparqlab::text::ChatTemplate>(
                sparqlab::text::requireChatTemplate(model->folder()));
            const std::vector<a::EvalExample> examples = a::evalExamples(*model, o);
            QCOMPARE(examples.size(), size_t{2});
            for (const a::EvalExample& e : examples) {
                QCOMPARE(e.haystackTokens, int64_t{1024});
                const std::vector<int64_t> ids = a::evalPromptIds(tok, o, e.prompt, e.answerPrefix);
                const std::string text = tok.decode(ids);
                const std::string tail = "<|im_end|>\n<|im_start|>assistant\n" + e.answerPrefix;
                QVERIFY2(text.size() > tail.size() &&
                             text.compare(text.size() - tail.size(), tail.size(), tail) == 0,
                         qPrintable(QString::fromStdString(text.substr(text.size() - 200))));
                QVERIFY(text.find("<|im_start|>user\n" + e.prompt + "<|im_end|>") !=
                        std::string::npos);
                // The budget holds for what the model reads, template included, and the
                // haystack fills it (within one shrink step).
                const auto used = static_cast<int64_t>(ids.size()) + e.maxNewTokens;
                QVERIFY2(used <= 1024, qPrintable(QString::number(used)));
                QVERIFY2(used >= 1024 - 150, qPrintable(QString::number(used)));
            }
        }
    }

    void badInvocations() {
        auto bad = [&](QStringList args, const QString& want, int code) {
            const auto r = runCli(args);
            QCOMPARE(r.exitCode, code);
            QVERIFY2(r.err.startsWith(QStringLiteral("error: ")) && r.err.contains(want) &&
                         r.err.count('\n') == 1,
                     qPrintable(r.err));
        };
        const QString out = m_dir.filePath("x.jsonl");
        bad({"eval", "--model", m_model, "--task", "poetry", "--data", m_text, "--out", out},
            "--task", 2);
        bad({"eval", "--model", m_model, "--task", "bpc", "--data", m_text, "--out", out,
             "--methods", "sparq,nope"},
            "--methods", 2);
        bad({"eval", "--model", m_model, "--task", "bpc", "--data", m_text, "--out", out,
             "--methods", "sparq", "--r", "8,0"},
            "--r must be at least 1", 2);
        bad({"eval", "--model", m_model, "--task", "bpc", "--data", m_text, "--out", out, "--shard",
             "2/2"},
            "--shard", 2);
        bad({"eval", "--model", m_model, "--task", "bpc", "--data", m_text, "--out", out,
             "--methods", "sparq", "--r", "65"},
            "r", 1);
        bad({"eval", "--model", m_model, "--task", "squad", "--data", m_text, "--out", out}, m_text,
            1);
        QVERIFY(!QFile::exists(out));
    }
};

QTEST_GUILESS_MAIN(TestEvalCli)
#include "test_eval_cli.moc"
