// The model's own learned selection beside the training-free methods, and the decode traffic of
// hybrid models (docs/learned-sparse-and-hybrid.md), on the transformers 5.17 references of
// refs/hf4: the indexer method at the model's index_topk is HF's own attention output; overlap's
// rows keep their invariants (the indexer against itself, the oracle's mass); generation with
// the indexer at its own k is the model's, with SparQ in its place it runs; traffic counts each
// layer kind as its formula says; bad DSA and hybrid configs are one line naming the key.

#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"
#include "model/model.h"
#include "model/model_config.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <tuple>

using namespace sparqlab;
using sparqlab::test::cliOut;
using sparqlab::test::idsJson;
using sparqlab::test::runCli;
using sparqlab::test::toVector;

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

namespace {

QString refFolder(const char* name) {
    return sparqlab::test::sharedDir() + QStringLiteral("/refs/hf4/") + QString::fromLatin1(name);
}

} // namespace

class TestLearnedSparse : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    QString m_dsaCapture, m_hybridCapture;
    std::vector<int64_t> m_ids;

private Q_SLOTS:
    void initTestCase() {
        sparqlab::test::requireReference(QStringLiteral("refs/hf4/deepseek_v32/golden.h5"));
        const h5::File gf =
            h5::File::openRead((refFolder("deepseek_v32") + "/golden.h5").toStdString());
        m_ids = toVector(gf.root().read("input_ids"));
        const QString ids = m_tmp.filePath(QStringLiteral("ids.json"));
        QVERIFY(sparqlab::test::writeFile(ids, idsJson(m_ids).toUtf8()));
        m_dsaCapture = m_tmp.filePath(QStringLiteral("dsa.h5"));
        cliOut({"capture", "--model", refFolder("deepseek_v32"), "--ids-file", ids, "--all-queries",
                "--out", m_dsaCapture});
        if (QFile::exists(refFolder("qwen3_next") + "/golden.h5")) {
            m_hybridCapture = m_tmp.filePath(QStringLiteral("hybrid.h5"));
            cliOut({"capture", "--model", refFolder("qwen3_next"), "--ids-file", ids,
                    "--all-queries", "--out", m_hybridCapture});
        }
    }

    void theCaptureHoldsTheIndexerScores() {
        const capture::CaptureReader r(m_dsaCapture.toStdString());
        QCOMPARE(r.info().indexHeadDim, int64_t{32});
        QCOMPARE(r.info().indexTopK, int64_t{16});
        const model::CaptureExample e = r.read(0);
        const h5::File gf =
            h5::File::openRead((refFolder("deepseek_v32") + "/golden.h5").toStdString());
        const at::Tensor causal = at::ones({48, 48}, at::kBool).tril();
        for (int64_t l = 0; l < 3; ++l) {
            const at::Tensor want = gf.root().read("idx_scores/" + std::to_string(l));
            VERIFY_CLOSE(e.indexScores[l].masked_select(causal), want.masked_select(causal), 1e-4,
                         QStringLiteral("index scores, layer %1").arg(l));
            // After each query's position: NaN (no score).
            QVERIFY(
                at::isnan(e.indexScores[l].masked_select(causal.logical_not())).all().item<bool>());
        }
    }

    void theIndexerAtItsTopKIsTheModelsAttention() {
        // attend --method indexer at index_topk: each step's output is HF's probabilities
        // (index-masked) times V.
        const QString res = m_tmp.filePath(QStringLiteral("indexer.h5"));
        cliOut({"attend", "--capture", m_dsaCapture, "--method", "indexer", "--k", "16", "--out",
                res});
        const h5::File rf = h5::File::openRead(res.toStdString());
        const at::Tensor y = rf.root().group("examples").group("0000").read("y");
        const model::CaptureExample e = capture::CaptureReader(m_dsaCapture.toStdString()).read(0);
        const h5::File gf =
            h5::File::openRead((refFolder("deepseek_v32") + "/golden.h5").toStdString());
        for (int64_t l = 0; l < 3; ++l) {
            const at::Tensor p = gf.root().read("attn/" + std::to_string(l)); // [H, T, T]
            VERIFY_CLOSE(y[l], at::matmul(p, e.v[l]), 1e-4,
                         QStringLiteral("indexer output, layer %1").arg(l));
        }
        // The transfer reads one indexer key of Di = 32 per position (the capture sets it).
        const QString json = cliOut({"attend", "--capture", m_dsaCapture, "--method", "indexer",
                                     "--k", "16", "--out", res, "--json"});
        const h5::File again = h5::File::openRead(res.toStdString());
        QCOMPARE(again.root().attrInt("index_dim"), int64_t{32});
        // Per head and step t (t + 1 positions, d + d_v = 80): (t + 1)·32 + min(16, t + 1)·80 +
        // 80 against dense's (t + 1)·80 + 80, summed over the 48 queries.
        double method = 0, dense = 0;
        for (int S = 1; S <= 48; ++S) {
            method += 32.0 * S + 80.0 * std::min(16, S) + 80;
            dense += 80.0 * S + 80;
        }
        const nlohmann::json summary = nlohmann::json::parse(json.toStdString());
        QVERIFY2(std::abs(summary["compression_ratio"].get<double>() - method / dense) < 1e-12,
                 qPrintable(json.left(300)));
        // Without a DSA model's scores: one line saying what it needs.
        if (!m_hybridCapture.isEmpty()) {
            const auto r = runCli(
                {"attend", "--capture", m_hybridCapture, "--method", "indexer", "--out", res});
            QVERIFY(r.exitCode != 0);
            QVERIFY2(r.err.contains(QStringLiteral("indexer needs")) &&
                         r.err.trimmed().count('\n') == 0,
                     qPrintable(r.err));
        }
    }

    void overlapBesideTheIndexer() {
        const QString out = m_tmp.filePath(QStringLiteral("overlap.json"));
        cliOut({"overlap", "--capture", m_dsaCapture, "--json", out, "--methods",
                "indexer,oracle,sparq,quest", "--ks", "8,16", "--queries", "8", "--r", "16",
                "--page-size", "4"});
        const nlohmann::json j = nlohmann::json::parse(sparqlab::test::readFile(out).toStdString());
        QCOMPARE(j["format"].get<std::string>(), std::string("sparqlab.overlap"));
        QVERIFY(j["indexer"].get<bool>());
        std::map<std::tuple<int, std::string, int>, nlohmann::json> rows;
        for (const nlohmann::json& r : j["rows"])
            rows[{r["layer"].get<int>(), r["method"].get<std::string>(), r["k"].get<int>()}] = r;
        QCOMPARE(rows.size(), size_t{3 * 4 * 2});
        for (int l = 0; l < 3; ++l)
            for (int k : {8, 16}) {
                const nlohmann::json& ix = rows.at({l, "indexer", k});
                QCOMPARE(ix["indexer_overlap"].get<double>(), 1.0);
                if (k == 16) // the model's own attention
                    QVERIFY(ix["rel_error_model"].get<double>() < 1e-5);
                const nlohmann::json& oracle = rows.at({l, "oracle", k});
                QVERIFY(std::abs(oracle["topk_recall"].get<double>() - 1.0) < 1e-12);
                for (const char* m : {"indexer", "sparq", "quest"}) {
                    const nlohmann::json& r = rows.at({l, m, k});
                    QVERIFY2(r["mass"].get<double>() <= oracle["mass"].get<double>() + 1e-9, m);
                    const double o = r["indexer_overlap"].get<double>();
                    QVERIFY(o >= 0 && o <= 1);
                    QVERIFY(r["transfer_per_step"].get<double>() > 0);
                    QCOMPARE(r.contains("previous_layer_overlap"), l > 0);
                }
            }
    }

    void generationWithTheIndexerOrSparqInItsPlace() {
        const QString prompt = m_tmp.filePath(QStringLiteral("prompt.json"));
        QVERIFY(sparqlab::test::writeFile(prompt,
                                          idsJson({m_ids.begin(), m_ids.begin() + 32}).toUtf8()));
        auto gen = [&](const QStringList& extra) {
            QStringList a{"generate",   "--model", refFolder("deepseek_v32"),
                          "--ids-file", prompt,    "--max-new-tokens",
                          "16",         "--json"};
            a.append(extra);
            return nlohmann::json::parse(cliOut(a).toStdString())["new_ids"]
                .get<std::vector<int64_t>>();
        };
        const h5::File gf =
            h5::File::openRead((refFolder("deepseek_v32") + "/golden.h5").toStdString());
        const std::vector<int64_t> want = toVector(gf.root().read("gen_ids"));
        QCOMPARE(gen({}), want);
        QCOMPARE(gen({"--method", "indexer", "--k", "16"}), want); // index_topk
        // SparQ in the indexer's place at the same k: a continuation of its own.
        QCOMPARE(gen({"--method", "sparq", "--k", "16", "--r", "16"}).size(), size_t{16});
        // The indexer at every key is the dense MLA: another continuation than the model's.
        QVERIFY(gen({"--method", "indexer", "--k", "64"}) != want);
    }

    void aHybridPrefillServesSeveralContinuations() {
        // eval's dense prefill, continued with several methods: a hybrid's recurrent states are
        // restored from their copy each time (they cannot be rewound), so every dense
        // continuation is HF's.
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf4/qwen3_next/golden.h5"));
        auto model = model::Model::open(refFolder("qwen3_next").toStdString());
        const h5::File gf =
            h5::File::openRead((refFolder("qwen3_next") + "/golden.h5").toStdString());
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        const std::vector<int64_t> want = toVector(gf.root().read("gen_ids"));
        const auto prefill = model->prefillDense({ids.begin(), ids.begin() + 32}, 16, 8);
        attention::AttentionConfig sparq;
        sparq.method = attention::Method::Sparq;
        sparq.k = 8;
        sparq.r = 8;
        QCOMPARE(prefill->continueWith({}, 16, {}, false).newIds, want);
        QCOMPARE(prefill->continueWith(sparq, 16, {}, false).newIds.size(), size_t{16});
        QCOMPARE(prefill->continueWith({}, 16, {}, false).newIds, want);
    }

    /// A sliding layer reads its window, a chunked layer its chunk: a config-only folder of each
    /// (EXAONE 4.0's LLLG with a window of 6; Llama 4's three chunked layers of 6 and a NoPE
    /// one), 2 KV heads of 16 (64 elements a position), S = 100. The method's ratio is each
    /// layer's at the positions it attends, weighted by the layers' traffic.
    void trafficOfWindowsAndChunks() {
        const auto folder = [&](const QString& name, const char* config) {
            const QString d = m_tmp.filePath(name);
            QDir().mkpath(d);
            sparqlab::test::writeFile(d + "/config.json", config);
            return d;
        };
        const QString exaone = folder(QStringLiteral("exaone4"), R"({
  "architectures": ["Exaone4ForCausalLM"], "vocab_size": 97, "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 6, "sliding_window_pattern": 4})");
        const QString llama4 = folder(QStringLiteral("llama4"), R"({
  "architectures": ["Llama4ForCausalLM"], "vocab_size": 97, "hidden_size": 64,
  "intermediate_size": 32, "intermediate_size_mlp": 96, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4,
  "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "no_rope_layers": [1, 1, 1, 0],
  "attention_chunk_size": 6})");
        const double d = 16, r = 8, k = 4;
        // SparQ's reads at A positions (SPARQ.md §5) against dense's; where k covers the A
        // positions it keeps every one, read as dense reads them.
        const auto ratio = [&](double A) {
            return A <= k ? 1.0 : (A * r + 2 * k * d + 4 * d) / (2 * A * d + 2 * d);
        };
        // Three bounded layers attending A positions, one attending all S; each reads what it
        // attends and writes one position. (At S = 96 the query opens no new chunk: its chunk
        // holds 6 positions, (96 − 1) mod 6 + 1; at S = 100, 4.)
        for (const auto& [dir, S, A] :
             {std::tuple{exaone, 100.0, 6.0}, {llama4, 100.0, 4.0}, {llama4, 96.0, 6.0}}) {
            const nlohmann::json j = nlohmann::json::parse(
                cliOut({"traffic", "--model", dir, "--length", QString::number(S), "--method",
                        "sparq", "--k", "4", "--r", "8", "--json"})
                    .toStdString());
            const double bounded = 3 * 64 * (A + 1), full = 64 * (S + 1);
            QCOMPARE(j["bounded_layers"].get<int>(), 3);
            QCOMPARE(j["attention_cache_bytes"].get<double>(), 2 * (bounded + full));
            const double want = (bounded * ratio(A) + full * ratio(S)) / (bounded + full);
            QVERIFY2(std::abs(j["method_transfer_ratio"].get<double>() - want) < 1e-12,
                     j.dump().c_str());
            QVERIFY(std::abs(j["method_saves_of_cache"].get<double>() - (1 - want)) < 1e-12);
        }
        // The text says so, and shows no state row for a model without state.
        const QString text = cliOut({"traffic", "--model", exaone, "--length", "100"});
        QVERIFY2(text.contains(QStringLiteral("(3 of the layers read a window or a chunk)")),
                 qPrintable(text));
        QVERIFY2(!text.contains(QStringLiteral("of state")), qPrintable(text));
    }

    void trafficByLayerKind() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf4/qwen3_next/config.json"));
        // Qwen3-Next's reference: 3 GDN layers (Hk 2, Hv 4, dk = dv = 32, kernel 4) and one
        // attention layer (2 KV heads of 64).
        const int64_t S = 1000;
        const nlohmann::json j = nlohmann::json::parse(
            cliOut({"traffic", "--model", refFolder("qwen3_next"), "--length", QString::number(S),
                    "--method", "sparq", "--k", "125", "--r", "8", "--json"})
                .toStdString());
        const double state = 4 * 32 * 32 + 3 * (2 * 2 * 32 + 4 * 32); // one layer's
        QCOMPARE(j["linear_layers"].get<int>(), 3);
        QCOMPARE(j["attention_layers"].get<int>(), 1);
        QCOMPARE(j["linear_state_bytes"].get<double>(), 3 * 2 * state * 2);
        QCOMPARE(j["attention_cache_bytes"].get<double>(), 2.0 * 64 * 2 * (S + 1) * 2);
        const double cache =
            j["attention_cache_bytes"].get<double>() + j["linear_state_bytes"].get<double>();
        QVERIFY(std::abs(j["attention_share_of_cache"].get<double>() -
                         j["attention_cache_bytes"].get<double>() / cache) < 1e-12);
        // SparQ's reads (SPARQ.md §5): S·r + 2·k·d + 4·d against dense 2·S·d + 2·d (per head).
        const double d = 64, r = 8, k = 125;
        const double ratio = (S * r + 2 * k * d + 4 * d) / (2 * S * d + 2 * d);
        QVERIFY2(std::abs(j["method_transfer_ratio"].get<double>() - ratio) < 1e-9,
                 j.dump().c_str());
        QVERIFY(std::abs(j["method_saves_of_cache"].get<double>() -
                         j["attention_cache_bytes"].get<double>() * (1 - ratio) / cache) < 1e-12);
        // The state in float32 (--state-bytes 4): its bytes double, the shares are of bytes.
        const nlohmann::json f32 = nlohmann::json::parse(
            cliOut({"traffic", "--model", refFolder("qwen3_next"), "--length", QString::number(S),
                    "--method", "sparq", "--k", "125", "--r", "8", "--state-bytes", "4", "--json"})
                .toStdString());
        QCOMPARE(f32["state_bytes_per_element"].get<double>(), 4.0);
        QCOMPARE(f32["linear_state_bytes"].get<double>(), 3 * 2 * state * 4);
        QCOMPARE(f32["attention_cache_bytes"], j["attention_cache_bytes"]);
        const double cache32 = f32["attention_cache_bytes"].get<double>() + 3 * 2 * state * 4;
        QVERIFY(std::abs(f32["attention_share_of_cache"].get<double>() -
                         f32["attention_cache_bytes"].get<double>() / cache32) < 1e-12);
        QVERIFY(std::abs(f32["step_bytes"].get<double>() -
                         (j["step_bytes"].get<double>() + 3 * 2 * state * 2)) < 1e-6);
        // The text names the kind of layer that keeps the state, and the state's element size.
        const QString text =
            cliOut({"traffic", "--model", refFolder("qwen3_next"), "--length", QString::number(S)});
        QVERIFY2(text.contains(QStringLiteral("Gated DeltaNet layers (3):")), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("(2 bytes per element)")), qPrintable(text));
        const QString text32 = cliOut({"traffic", "--model", refFolder("qwen3_next"), "--length",
                                       QString::number(S), "--state-bytes", "4"});
        QVERIFY2(text32.contains(QStringLiteral("(2 bytes per element, the state 4)")),
                 qPrintable(text32));
        // stats on a hybrid's capture (48 tokens): the same counts at its length.
        const QString statsOut = m_tmp.filePath(QStringLiteral("stats.json"));
        cliOut({"stats", "--capture", m_hybridCapture, "--json", statsOut, "--methods", "sparq",
                "--recall-k", "8"});
        const nlohmann::json st = nlohmann::json::parse(
            sparqlab::test::readFile(statsOut).toStdString())["decode_traffic"];
        QCOMPARE(st["linear_layers"].get<int>(), 3);
        QCOMPARE(st["linear_state_elements"].get<double>(), 3 * 2 * state);
        QCOMPARE(st["attention_cache_elements"].get<double>(), 2.0 * 64 * 2 * 49);
        QVERIFY(std::abs(st["attention_share_of_cache"].get<double>() -
                         (2.0 * 64 * 2 * 49) / (2.0 * 64 * 2 * 49 + 3 * 2 * state)) < 1e-12);
        // A DSA model (3 layers, MLA's latent of 32 + 16 per position, index_topk 16) reads the
        // indexer's key (32 dims) of every position, read and one written, and the latent of the
        // 16 positions it picks and of the one written: its own attention. Another method reads
        // in the indexer's place among all 100: the oracle keeping k = 4 reads (k + 1)/(S + 1)
        // of the latents dense attention would.
        const auto d32 = [](const QStringList& method) {
            return nlohmann::json::parse(
                cliOut(QStringList{"traffic", "--model", refFolder("deepseek_v32"), "--length",
                                   "100", "--json"} +
                       method)
                    .toStdString());
        };
        const nlohmann::json own = d32({});
        const double ownReads = 3.0 * (32 * 101 + (32 + 16) * 17);
        QCOMPARE(own["indexer_key_bytes"].get<double>(), 3.0 * 32 * 101 * 2);
        QCOMPARE(own["attention_cache_bytes"].get<double>(), ownReads * 2);
        QCOMPARE(own["method_transfer_ratio"].get<double>(), 1.0);
        const nlohmann::json oracle = d32({"--method", "oracle", "--k", "4"});
        QCOMPARE(oracle["attention_cache_bytes"].get<double>(), ownReads * 2);
        QVERIFY(std::abs(oracle["method_transfer_ratio"].get<double>() -
                         3.0 * (32 + 16) * 5 / ownReads) < 1e-12);
        const QString said = cliOut({"traffic", "--model", refFolder("deepseek_v32"), "--length",
                                     "100", "--method", "oracle", "--k", "4"});
        QVERIFY2(
            said.contains(QStringLiteral("oracle: 0.059 of the model's own attention's reads")),
            qPrintable(said));
        // Without --method the step is the model's own selection, not dense attention over every
        // latent: said so, with no ratio of 1 to itself.
        const QString asRuns =
            cliOut({"traffic", "--model", refFolder("deepseek_v32"), "--length", "100"});
        QVERIFY2(asRuns.contains(QStringLiteral("the model's own selection, as it runs")) &&
                     !asRuns.contains(QStringLiteral("dense:")),
                 qPrintable(asRuns));
        // GLM-5: its second and third layers take the first's selection ("shared" in
        // indexer_types), and read no indexer key of their own.
        const QString glm = m_tmp.filePath(QStringLiteral("glm5-traffic"));
        QDir().mkpath(glm);
        QVERIFY(QFile::copy(
            sparqlab::test::sourcePath(QStringLiteral("tests/fuzz/corpus/config/glm_moe_dsa.json")),
            glm + QStringLiteral("/config.json")));
        const nlohmann::json g = nlohmann::json::parse(
            cliOut({"traffic", "--model", glm, "--length", "100", "--json"}).toStdString());
        QCOMPARE(g["indexer_key_bytes"].get<double>(), 1.0 * 32 * 101 * 2);
        QCOMPARE(g["attention_cache_bytes"].get<double>(), (32.0 * 101 + 3 * 48 * 17) * 2);
    }

    void badDsaAndHybridConfigs_data() {
        QTest::addColumn<QString>("folder");
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value");
        QTest::addColumn<QString>("named");
        QTest::newRow("dsa without a q latent") << "deepseek_v32"
                                                << "q_lora_rank"
                                                << "null"
                                                << "q_lora_rank";
        QTest::newRow("indexer narrower than its RoPE") << "deepseek_v32"
                                                        << "index_head_dim"
                                                        << "8"
                                                        << "index_head_dim";
        QTest::newRow("unknown dsa layer type") << "deepseek_v32"
                                                << "layer_types"
                                                << R"(["full_attention","full_attention","x"])"
                                                << "layer_types";
        QTest::newRow("mlp_layer_types of the wrong length") << "deepseek_v32"
                                                             << "mlp_layer_types"
                                                             << R"(["dense"])"
                                                             << "mlp_layer_types";
        QTest::newRow("hybrid without attention")
            << "qwen3_next"
            << "layer_types"
            << R"(["linear_attention","linear_attention","linear_attention","linear_attention"])"
            << "layer_types";
        QTest::newRow("value heads not a multiple of key heads") << "qwen3_next"
                                                                 << "linear_num_value_heads"
                                                                 << "3"
                                                                 << "linear_num_value_heads";
        QTest::newRow("kimi layer_types against kda_layers")
            << "kimi_linear"
            << "layer_types"
            << R"(["full_attention","linear_attention","linear_attention","full_attention"])"
            << "kda_layers";
        QTest::newRow("kimi kda layer out of range")
            << "kimi_linear"
            << "linear_attn_config"
            << R"({"num_heads":4,"head_dim":32,"kda_layers":[0,1,2],"short_conv_kernel_size":4})"
            << "kda_layers";
        QTest::newRow("kimi without linear_attn_config") << "kimi_linear"
                                                         << "linear_attn_config"
                                                         << "null"
                                                         << "linear_attn_config";
    }

    void badDsaAndHybridConfigs() {
        QFETCH(QString, folder);
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, named);
        SPARQLAB_NEED_REFERENCE("refs/hf4/" + folder + "/config.json");
        nlohmann::json c = nlohmann::json::parse(
            sparqlab::test::readFile(refFolder(folder.toLatin1().constData()) + "/config.json")
                .toStdString());
        c[key.toStdString()] = nlohmann::json::parse(value.toStdString());
        try {
            model::parseModelConfig(c.dump(), "config.json");
            QFAIL("accepted");
        } catch (const model::ConfigError& e) {
            const QString m = QString::fromUtf8(e.what());
            QVERIFY2(m.startsWith(QStringLiteral("config.json")) && m.contains(named) &&
                         !m.contains('\n'),
                     e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestLearnedSparse)
#include "test_learned_sparse.moc"
