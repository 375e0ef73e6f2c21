// The model subcommands of sparqlab-cli end to end on the Hugging Face references:
// logits, generate, capture, tokenize/detokenize (--jsonl), bpc, init-model, and their errors.

#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace sparqlab;
using sparqlab::test::runCli;

namespace {
QString idsArg(const at::Tensor& ids) {
    QStringList s;
    const at::Tensor c = ids.to(at::kLong).contiguous();
    for (int64_t i = 0; i < c.numel(); ++i)
        s << QString::number(c[i].item<int64_t>());
    return s.join(QLatin1Char(','));
}
void expectError(const sparqlab::test::ProcessResult& r, const QString& message) {
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.startsWith(QStringLiteral("error: ")) && r.err.contains(message),
             qPrintable(r.err));
    QCOMPARE(r.err.count(QLatin1Char('\n')), 1);
}
} // namespace

class TestCliModel : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_hf;

private Q_SLOTS:
    void initTestCase() {
        // tests/data's compact references hold llama_gqa alone; ../shared all six.
        sparqlab::test::requireReference(sparqlab::test::fullReferences()
                                             ? QStringLiteral("refs/hf/gpt2/golden.h5")
                                             : QStringLiteral("refs/hf/llama_gqa/golden.h5"));
        m_hf = sparqlab::test::sharedDir() + QStringLiteral("/refs/hf");
    }

    void logitsGenerateCapture_data() {
        QTest::addColumn<QString>("name");
        QTest::newRow("llama_gqa") << QStringLiteral("llama_gqa");
        QTest::newRow("gpt2") << QStringLiteral("gpt2");
    }
    void logitsGenerateCapture() {
        QFETCH(QString, name);
        SPARQLAB_NEED_REFERENCE("refs/hf/" + name + "/golden.h5");
        const QString model = m_hf + "/" + name;
        const h5::File gf = h5::File::openRead((model + "/golden.h5").toStdString());
        const at::Tensor ids = gf.root().read("input_ids");
        const QString out = m_dir.filePath(name + QStringLiteral("_logits.h5"));
        auto r = runCli({"logits", "--model", model, "--ids", idsArg(ids), "--out", out});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QString e = sparqlab::test::compareClose(
            h5::File::openRead(out.toStdString()).root().read("logits"), gf.root().read("logits"),
            1e-4, 0, "logits");
        QVERIFY2(e.isEmpty(), qPrintable(e));

        // generate with the id-level form, through a JSON file.
        const int64_t promptLen = gf.root().attrInt("prompt_len");
        const QString idsFile = m_dir.filePath(name + QStringLiteral("_ids.json"));
        QFile f(idsFile);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("[" + idsArg(ids.slice(0, 0, promptLen)).toUtf8() + "]");
        f.close();
        r = runCli({"generate", "--model", model, "--ids-file", idsFile, "--max-new-tokens", "16",
                    "--json"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
        QStringList got;
        for (const QJsonValue v : j.value(QStringLiteral("new_ids")).toArray())
            got << QString::number(v.toInteger());
        QCOMPARE(got.join(QLatin1Char(',')), idsArg(gf.root().read("gen_ids")));

        // capture --all-queries: q after RoPE, K and V as transformers computes them.
        const QString cap = m_dir.filePath(name + QStringLiteral("_cap.h5"));
        r = runCli(
            {"capture", "--model", model, "--ids", idsArg(ids), "--out", cap, "--all-queries"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const capture::CaptureReader reader(cap.toStdString());
        QCOMPARE(reader.info().architecture, gf.root().attrString("architecture"));
        const model::CaptureExample ex = reader.read(0);
        for (int64_t l = 0; l < reader.info().nLayers; ++l) {
            const std::string n = std::to_string(l);
            QVERIFY(
                sparqlab::test::compareClose(ex.q[l], gf.root().read("q/" + n), 5e-5).isEmpty());
            QVERIFY(
                sparqlab::test::compareClose(ex.k[l], gf.root().read("k/" + n), 5e-5).isEmpty());
            QVERIFY(
                sparqlab::test::compareClose(ex.v[l], gf.root().read("v/" + n), 5e-5).isEmpty());
        }
        // Default: only the last prompt position's query; --generate extends K and V.
        r = runCli({"capture", "--model", model, "--ids", idsArg(ids.slice(0, 0, 10)), "--out", cap,
                    "--generate", "5"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const model::CaptureExample g = capture::CaptureReader(cap.toStdString()).read(0);
        QCOMPARE(g.tokenIds.numel(), int64_t{15});
        QVERIFY(g.qPositions.equal(at::tensor({int64_t{9}})));
    }

    void gemma2AttendDenseIsGoldenAttentionTimesValues() {
        // Gemma 2's soft-capped, windowed attention, recomputed by `attend --method dense`
        // from an --all-queries capture, is the golden attn (HF's own) times the golden v, for
        // every layer, head and position.
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf/gemma2/golden.h5"));
        const QString model = m_hf + "/gemma2";
        const h5::File gf = h5::File::openRead((model + "/golden.h5").toStdString());
        const h5::Group g = gf.root();
        const QString cap = m_dir.filePath(QStringLiteral("gemma2_all.h5"));
        const QString res = m_dir.filePath(QStringLiteral("gemma2_dense.h5"));
        auto r = runCli({"capture", "--model", model, "--ids", idsArg(g.read("input_ids")),
                         "--all-queries", "--out", cap});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        r = runCli({"attend", "--capture", cap, "--method", "dense", "--out", res});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const h5::File rf = h5::File::openRead(res.toStdString());
        const at::Tensor y = rf.root().group("examples/0000").read("y"); // [L, Hq, T, D]
        const int64_t L = g.attrInt("num_layers");
        const int64_t group = g.attrInt("num_heads") / g.attrInt("num_kv_heads");
        QCOMPARE(y.size(0), L);
        for (int64_t l = 0; l < L; ++l) {
            const at::Tensor attn = g.read("attn/" + std::to_string(l)).to(at::kDouble);
            const at::Tensor v =
                g.read("v/" + std::to_string(l)).to(at::kDouble).repeat_interleave(group, 0);
            const QString e = sparqlab::test::compareClose(y[l], at::matmul(attn, v), 1e-4, 0,
                                                           QStringLiteral("layer %1").arg(l));
            QVERIFY2(e.isEmpty(), qPrintable(e));
        }
        // Without the model's window and soft-cap, the outputs would differ.
        const at::Tensor noMods = at::matmul(
            at::softmax(at::matmul(g.read("q/0"),
                                   g.read("k/0").repeat_interleave(group, 0).transpose(1, 2)) *
                                g.attrDouble("attn_scale") +
                            at::full({48, 48}, -INFINITY).triu(1),
                        -1),
            g.read("v/0").repeat_interleave(group, 0));
        QVERIFY(sparqlab::test::maxAbsDiff(y[0], noMods) > 1e-2);
    }

    void tokenizeBatchForms() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/tokenizers/mistral7b/tokenizer.json"));
        const QString tok =
            sparqlab::test::sharedDir() + QStringLiteral("/refs/tokenizers/mistral7b");
        const QString in = m_dir.filePath(QStringLiteral("texts.jsonl"));
        QFile f(in);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("\"Hello world\"\n\"caf\\u00e9 \\ud83d\\udc4d\"\n");
        f.close();
        auto r = runCli({"tokenize", "--model", tok, "--jsonl", in});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QStringList outLines = r.out.trimmed().split(QLatin1Char('\n'));
        QCOMPARE(outLines.size(), 2);
        const QJsonObject first = QJsonDocument::fromJson(outLines[0].toUtf8()).object();
        QCOMPARE(first.value(QStringLiteral("ids")).toArray(),
                 (QJsonArray{1, 22557, 1526})); // tokenizers library
        // detokenize --jsonl inverts it (special tokens skipped on request).
        const QString idsIn = m_dir.filePath(QStringLiteral("ids.jsonl"));
        QFile g(idsIn);
        QVERIFY(g.open(QIODevice::WriteOnly));
        for (const QString& l : outLines)
            g.write(QJsonDocument(QJsonDocument::fromJson(l.toUtf8())
                                      .object()
                                      .value(QStringLiteral("ids"))
                                      .toArray())
                        .toJson(QJsonDocument::Compact) +
                    "\n");
        g.close();
        r = runCli({"detokenize", "--model", tok, "--jsonl", idsIn, "--skip-special"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(r.out, QStringLiteral(
                            "{\"text\":\"Hello world\"}\n{\"text\":\"caf\u00e9 \U0001F44D\"}\n"));
        r = runCli({"tokenize", "--model", tok, "--text", "Hello world", "--no-special"});
        QCOMPARE(
            QJsonDocument::fromJson(r.out.toUtf8()).object().value(QStringLiteral("ids")).toArray(),
            (QJsonArray{22557, 1526}));
    }

    void bpcEqualsTheLogitsItComesFrom() {
        // A small random GPT-2 with the real GPT-2 tokenizer, written by init-model.
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/tokenizers/gpt2/tokenizer.json"));
        const QString cfgPath = m_dir.filePath(QStringLiteral("cfg.json"));
        QFile c(cfgPath);
        QVERIFY(c.open(QIODevice::WriteOnly));
        c.write(
            R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 32, "n_head": 2, "n_layer": 2, "n_positions": 64, "vocab_size": 50257})");
        c.close();
        const QString model = m_dir.filePath(QStringLiteral("tiny"));
        auto r =
            runCli({"init-model", "--config", cfgPath, "--out", model, "--seed", "3", "--tokenizer",
                    sparqlab::test::sharedDir() + "/refs/tokenizers/gpt2/tokenizer.json"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        // The size the config leaves out is said, with the default taken (4 × n_embd).
        QVERIFY2(r.err.contains(QStringLiteral(
                     "cfg.json gives no intermediate_size: Hugging Face's default 128 is used")),
                 qPrintable(r.err));
        QCOMPARE(r.err.count(QStringLiteral("gives no")), 1);
        const QString text = m_dir.filePath(QStringLiteral("text.txt"));
        QFile t(text);
        QVERIFY(t.open(QIODevice::WriteOnly));
        t.write("The quick brown fox jumps over the lazy dog. ");
        t.close();
        r = runCli({"bpc", "--model", model, "--text-file", text, "--json"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
        QCOMPARE(j.value(QStringLiteral("chars")).toInt(), 45);
        // The same from `logits`: −Σ log2 p(next token) / characters.
        r = runCli({"tokenize", "--model", model, "--text-file", text});
        const QJsonArray ids =
            QJsonDocument::fromJson(r.out.toUtf8()).object().value(QStringLiteral("ids")).toArray();
        QCOMPARE(j.value(QStringLiteral("tokens")).toInt(), ids.size());
        QStringList idList;
        for (const QJsonValue v : ids)
            idList << QString::number(v.toInteger());
        const QString lg = m_dir.filePath(QStringLiteral("bpc_logits.h5"));
        r = runCli({"logits", "--model", model, "--ids", idList.join(','), "--out", lg});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const at::Tensor logp = at::log_softmax(
            h5::File::openRead(lg.toStdString()).root().read("logits").to(at::kDouble), -1);
        double bits = 0;
        for (int i = 1; i < ids.size(); ++i)
            bits -= logp[i - 1][ids[i].toInteger()].item<double>() / std::log(2.0);
        QVERIFY(std::abs(j.value(QStringLiteral("bpc")).toDouble() - bits / 45) < 1e-4);
        // [B1] SparQ with r = head_dim and k = S scores the same.
        r = runCli({"bpc", "--model", model, "--text-file", text, "--json", "--method", "sparq",
                    "--r", "16", "--k", "64"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(std::abs(QJsonDocument::fromJson(r.out.toUtf8())
                             .object()
                             .value(QStringLiteral("bpc"))
                             .toDouble() -
                         bits / 45) < 1e-4);
        // Without --r the default 32 is more than this model's 16 dimensions: all of them, said
        // in a note (as attend, stats and eval do), in bpc and in generate; an r given above
        // them stays an error.
        r = runCli({"bpc", "--model", model, "--text-file", text, "--json", "--method", "sparq",
                    "--k", "64"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("note: r = 16, the head dimension")),
                 qPrintable(r.err));
        QVERIFY(std::abs(QJsonDocument::fromJson(r.out.toUtf8())
                             .object()
                             .value(QStringLiteral("bpc"))
                             .toDouble() -
                         bits / 45) < 1e-4);
        r = runCli({"generate", "--model", model, "--ids", "464,2068", "--max-new-tokens", "3",
                    "--method", "sparq", "--json"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8())
                     .object()
                     .value(QStringLiteral("new_ids"))
                     .toArray()
                     .size(),
                 3);
        QVERIFY2(r.err.contains(QStringLiteral("note: r = 16, the head dimension")),
                 qPrintable(r.err));
        r = runCli({"generate", "--model", model, "--ids", "464,2068", "--max-new-tokens", "3",
                    "--method", "sparq", "--r", "32"});
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains(QStringLiteral("--r: r must be between 1 and the head dimension")),
                 qPrintable(r.err));
        QCOMPARE(r.err.count(QLatin1Char('\n')), 1);
    }

    // The trainer is seeded and resumable: a run stopped after 2 steps and resumed to 4 ends
    // with the same weights, to the bit, as 4 steps in one go (batch n depends only on the seed
    // and n; the optimiser state is saved; steps 0-3 lie in the warm-up, whose learning rate
    // does not depend on the total). The folder it writes loads as a Llama model.
    void trainDemoIsSeededAndResumable() {
        const QDir root(m_dir.filePath(QStringLiteral("train")));
        QVERIFY(QDir().mkpath(root.filePath(QStringLiteral("data"))));
        const QByteArray text = sparqlab::test::readFile(
            sparqlab::test::sourcePath(QStringLiteral("tests/data/sotu_2012_excerpt.txt")));
        QVERIFY(text.size() > 1000);
        QVERIFY(sparqlab::test::writeFile(root.filePath("data/1901_a.txt"), text + text));
        QVERIFY(sparqlab::test::writeFile(root.filePath("data/1902_b.txt"), text + text));
        QVERIFY(sparqlab::test::writeFile(root.filePath("data/2011_c.txt"), text));
        auto train = [&](const QString& name, int steps, bool resume, const QString& stateName = {},
                         const QString& data = "data") {
            QStringList a{"train-demo",
                          "--data",
                          root.filePath(data),
                          "--out",
                          root.filePath(name),
                          "--state",
                          root.filePath((stateName.isEmpty() ? name : stateName) + "-state"),
                          "--steps",
                          QString::number(steps),
                          "--seed",
                          "5",
                          "--batch",
                          "2",
                          "--seq",
                          "96",
                          "--context",
                          "160",
                          "--vocab",
                          "300",
                          "--copy-fraction",
                          "0.5",
                          "--random-copy",
                          "0.5",
                          "--save-every",
                          "1"};
            if (resume)
                a << "--resume";
            return runCli(a, 300000);
        };
        auto r = train(QStringLiteral("once"), 4, false);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).object().value("steps").toInt(), 4);
        r = train(QStringLiteral("twice"), 2, false);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        r = train(QStringLiteral("twice"), 4, true);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("resumed at step 2")), qPrintable(r.err));
        const QByteArray once = sparqlab::test::readFile(root.filePath("once/model.safetensors"));
        QVERIFY(once.size() > 100000);
        QVERIFY(once == sparqlab::test::readFile(root.filePath("twice/model.safetensors")));
        // The state folder holds the last step's pair only, named by state.json.
        QStringList state = QDir(root.filePath("once-state")).entryList(QDir::Files);
        state.sort();
        QCOMPARE(state, (QStringList{"optimizer-4.pt", "state.json", "tokenizer.json",
                                     "weights-4.safetensors"}));
        // Resumed into a new --out, from other text: the tokenizer stays the one the saved
        // weights were trained with (a retrained one would give their rows other meanings).
        QVERIFY(QDir().mkpath(root.filePath(QStringLiteral("other"))));
        QVERIFY(sparqlab::test::writeFile(root.filePath("other/1903_d.txt"),
                                          text.left(text.size() / 3).toLower()));
        r = train(QStringLiteral("moved"), 5, true, QStringLiteral("twice"),
                  QStringLiteral("other"));
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("resumed at step 4")), qPrintable(r.err));
        QVERIFY(!r.err.contains(QStringLiteral("tokenizer trained")));
        QVERIFY(sparqlab::test::readFile(root.filePath("moved/tokenizer.json")) ==
                sparqlab::test::readFile(root.filePath("once/tokenizer.json")));
        QCOMPARE(QDir(root.filePath("once")).entryList(QDir::Files).size(), 4); // no temporaries
        QVERIFY(sparqlab::test::writeFile(root.filePath("once-state/state.json"), "{\"step\": "));
        r = train(QStringLiteral("once"), 6, true); // (its progress lines come first)
        QCOMPARE(r.exitCode, 1);
        const QString last = r.err.trimmed().split(QLatin1Char('\n')).last();
        QVERIFY2(last.startsWith("error: " + root.filePath("once-state/state.json") +
                                 ": not a trainer state"),
                 qPrintable(r.err));

        r = runCli({"info", "--model", root.filePath("once")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject info = QJsonDocument::fromJson(r.out.toUtf8()).object();
        QCOMPARE(info.value("architecture").toString(), QStringLiteral("LlamaForCausalLM"));
        QCOMPARE(info.value("max_positions").toInt(), 160); // --context, not --seq
        QCOMPARE(info.value("vocab_size").toInt(), 300);
        QVERIFY(info.value("n_kv_heads").toInt() < info.value("n_heads").toInt()); // GQA

        r = runCli({"train-demo", "--data", root.filePath("data"), "--out", root.filePath("bad"),
                    "--seq", "96", "--context", "64"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(QStringLiteral("--context must be at least --seq")),
                 qPrintable(r.err));
        r = runCli({"train-demo", "--data", root.filePath("data"), "--out", root.filePath("bad"),
                    "--random-copy", "1.5"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(QStringLiteral("--random-copy must be in [0, 1]")),
                 qPrintable(r.err));
    }

    void generateChatIsTheTemplatesIds() {
        // A small random Qwen 2 with the real GPT-2 tokenizer and Qwen2.5-7B-Instruct's own
        // chat template (from refs/chat) in its tokenizer_config.json.
        const QString model = m_dir.filePath(QStringLiteral("qwen_chat"));
        const QString made = sparqlab::test::makeChatModel(model);
        if (made.startsWith(QStringLiteral("skip: ")))
            QSKIP(qPrintable(made));
        QVERIFY2(made.isEmpty(), qPrintable(made));
        sparqlab::test::ProcessResult r;

        // The rendering: the template's system/user turns and its generation prompt.
        const QString messages = m_dir.filePath(QStringLiteral("messages.json"));
        QFile mf(messages);
        QVERIFY(mf.open(QIODevice::WriteOnly));
        mf.write(
            R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}])");
        mf.close();
        r = runCli(
            {"chat-template", "--model", model, "--messages", messages, "--add-generation-prompt"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QString rendering = r.out;
        QCOMPARE(rendering,
                 QStringLiteral("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                                "Why is the sky blue?<|im_end|>\n<|im_start|>assistant\n"));
        // Its ids without added special tokens, as apply_chat_template(tokenize=True) makes them.
        const QString renderingFile = m_dir.filePath(QStringLiteral("rendering.txt"));
        QFile rf(renderingFile);
        QVERIFY(rf.open(QIODevice::WriteOnly));
        rf.write(rendering.toUtf8());
        rf.close();
        r = runCli({"tokenize", "--model", model, "--text-file", renderingFile, "--no-special"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonArray want =
            QJsonDocument::fromJson(r.out.toUtf8()).object().value(QStringLiteral("ids")).toArray();
        QVERIFY(want.size() > 20);
        // generate --chat: --system and --prompt, and --messages, give exactly those ids.
        for (const QStringList& prompt :
             {QStringList{"--chat", "--system", "Be brief.", "--prompt", "Why is the sky blue?"},
              QStringList{"--messages", messages}}) {
            r = runCli(
                QStringList{"generate", "--model", model, "--max-new-tokens", "3", "--json"} +
                prompt);
            QVERIFY2(r.exitCode == 0, qPrintable(r.err));
            const QJsonObject g = QJsonDocument::fromJson(r.out.toUtf8()).object();
            QCOMPARE(g.value(QStringLiteral("prompt_ids")).toArray(), want);
            QCOMPARE(g.value(QStringLiteral("new_ids")).toArray().size(), 3);
            QVERIFY(!g.contains(QStringLiteral("healed"))); // a chat prompt is not healed
        }
        // Without --chat the prompt is the text alone.
        r = runCli({"generate", "--model", model, "--max-new-tokens", "1", "--json", "--prompt",
                    "Why is the sky blue?"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(QJsonDocument::fromJson(r.out.toUtf8())
                    .object()
                    .value(QStringLiteral("prompt_ids"))
                    .toArray()
                    .size() < want.size());
        // A model without a template says so.
        const QString plain = m_dir.filePath(QStringLiteral("qwen_plain"));
        QVERIFY(QDir().mkpath(plain));
        for (const QString& f : {QStringLiteral("config.json"), QStringLiteral("tokenizer.json"),
                                 QStringLiteral("model.safetensors")})
            QVERIFY(QFile::copy(model + '/' + f, plain + '/' + f));
        expectError(runCli({"generate", "--model", plain, "--max-new-tokens", "1", "--chat",
                            "--prompt", "hi"}),
                    QStringLiteral(": the model has no chat template"));
    }

    void badInputIsOneLine() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf/gpt2/config.json")); // its context, its D
        const QString gpt2 = m_hf + QStringLiteral("/gpt2");
        QStringList longIds;
        for (int i = 0; i < 257; ++i)
            longIds << QStringLiteral("5");
        expectError(runCli({"logits", "--model", gpt2, "--ids", longIds.join(','), "--out",
                            m_dir.filePath("x.h5")}),
                    QStringLiteral("longer than the model's context of 256 positions"));
        QVERIFY(!QFile::exists(m_dir.filePath("x.h5")));
        expectError(
            runCli({"generate", "--model", gpt2, "--prompt", "hi", "--max-new-tokens", "3"}),
            gpt2 + QStringLiteral(": no tokenizer.json"));
        expectError(runCli({"generate", "--model", gpt2, "--ids", "1,2", "--max-new-tokens", "3",
                            "--method", "sparq", "--r", "33"}),
                    QStringLiteral("r must be between 1 and the head dimension 32"));
        expectError(runCli({"logits", "--model", gpt2, "--ids", "1,2", "--out",
                            "/nonexistent-folder/x.h5"}),
                    QStringLiteral("/nonexistent-folder/x.h5: cannot create the file: the folder "
                                   "/nonexistent-folder does not exist"));
        expectError(runCli({"info", "--model", m_dir.filePath("nothing")}),
                    QStringLiteral("no such model folder"));
        expectError(runCli({"info", "--model", "no-such-org/no-such-model"}),
                    QStringLiteral("not in the local Hugging Face cache"));
        const QString jl = m_dir.filePath(QStringLiteral("bad.jsonl"));
        QFile f(jl);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"ids\": [1, 2]}\n{\"ids\": [1, \"x\"]}\n");
        f.close();
        expectError(runCli({"capture", "--model", gpt2, "--prompts-file", jl, "--out",
                            m_dir.filePath("c.h5")}),
                    jl + QStringLiteral(" line 2: token ids must be integers"));
        QVERIFY(!QFile::exists(m_dir.filePath("c.h5")));
        expectError(runCli({"logits", "--model", gpt2, "--ids", "1,99999", "--out",
                            m_dir.filePath("y.h5")}),
                    QStringLiteral("token id 99999 is outside the vocabulary"));
    }
};

QTEST_GUILESS_MAIN(TestCliModel)
#include "test_cli_model.moc"
