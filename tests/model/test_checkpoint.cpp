// Checkpoints and config.json that are damaged or lie: each refused with one line naming the
// file and the problem (never a crash), and writeSafetensors round trips.

#include "test_support.h"

#include "model/model_family.h"

#include "model/model.h"
#include "model/safetensors.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace sparqlab;

namespace {

QByteArray readAll(const QString& path) {
    return sparqlab::test::readFile(path);
}

void writeAll(const QString& path, const QByteArray& data) {
    QVERIFY(sparqlab::test::writeFile(path, data));
}

/// A safetensors file with the given header JSON and `dataBytes` zero bytes of data.
QByteArray safetensors(const QByteArray& header, int dataBytes) {
    QByteArray out(8, '\0');
    const quint64 n = static_cast<quint64>(header.size());
    for (int i = 0; i < 8; ++i)
        out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
    return out + header + QByteArray(dataBytes, '\0');
}

} // namespace

// Kept outside the class: moc does not parse raw string literals.
static const char* kQwenV5Window =
    R"(, "use_sliding_window": true, "max_window_layers": 1, "layer_types": ["full_attention", "sliding_attention", "sliding_attention"])";
static const char* kQwenV4Window = R"(, "use_sliding_window": true, "max_window_layers": 1)";
static const char* kQwenNoWindow =
    R"(, "use_sliding_window": false, "layer_types": ["full_attention", "sliding_attention", "sliding_attention"])";
static std::vector<int64_t> qwenWindows(const char* arch, const char* extra) {
    return model::parseModelConfig(
               std::string(R"({"architectures": [")") + arch +
                   R"("], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3, "sliding_window": 7)" +
                   extra + "}",
               "c")
        .layerWindow;
}

#define SPARQLAB_FACTORS "[1, 1, 1, 1, 1, 1, 1, 1]"
static const char* kLongropeV4 =
    R"(, "original_max_position_embeddings": 256, "rope_scaling": {"type": "longrope", "factor": 3.0, "short_factor": )" SPARQLAB_FACTORS
    R"(, "long_factor": )" SPARQLAB_FACTORS "}";
static const char* kLongropeV5 =
    R"(, "original_max_position_embeddings": 256, "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 3.0, "short_factor": )" SPARQLAB_FACTORS
    R"(, "long_factor": )" SPARQLAB_FACTORS "}";
static const char* kLongropeV5Own =
    R"(, "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 128, "short_factor": )" SPARQLAB_FACTORS
    R"(, "long_factor": )" SPARQLAB_FACTORS "}";
#undef SPARQLAB_FACTORS
static model::RopeSpec longrope(const char* arch, const char* extra) {
    return model::parseModelConfig(
               std::string(R"({"architectures": [")") + arch +
                   R"("], "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 1024)" +
                   extra + "}",
               "c")
        .rope;
}

class TestCheckpoint : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;
    QString m_ref;

    /// Copies the llama_gqa reference model to a fresh folder and returns it.
    QString copyModel(const QString& name) {
        const QString dst = m_dir.filePath(name);
        QDir().mkpath(dst);
        for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
            QFile::copy(m_ref + "/" + f, dst + "/" + f);
        return dst;
    }

    static QString openError(const QString& folder) {
        try {
            model::Model::open(folder.toStdString());
        } catch (const std::exception& e) {
            return QString::fromUtf8(e.what());
        }
        return {};
    }

private Q_SLOTS:
    void initTestCase() {
        m_ref = QFileInfo(sparqlab::test::requireReference(
                              QStringLiteral("refs/hf/llama_gqa/model.safetensors")))
                    .path();
    }

    void badSafetensorsFiles_data() {
        QTest::addColumn<QByteArray>("file");
        QTest::addColumn<QString>("message");
        QTest::newRow("shorter than 8 bytes")
            << QByteArray("abc") << QStringLiteral("shorter than the 8-byte header length");
        QTest::newRow("header past the end")
            << safetensors("{}", 0).left(8) +
                   QByteArray("{}").prepend(QByteArray()) // header length 2, but patched below
            << QStringLiteral("runs past the end");
        QTest::newRow("malformed JSON")
            << safetensors("{\"a\": ", 0) << QStringLiteral("malformed header JSON");
        QTest::newRow("unknown dtype")
            << safetensors(R"({"w": {"dtype": "F8", "shape": [2], "data_offsets": [0, 2]}})", 2)
            << QStringLiteral("unsupported dtype 'F8'");
        QTest::newRow("offsets outside the data")
            << safetensors(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8)
            << QStringLiteral("outside the data section");
        QTest::newRow("size does not match the shape")
            << safetensors(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16)
            << QStringLiteral("do not hold F32 [3]");
        QTest::newRow("overlapping tensors")
            << safetensors(
                   R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                   12)
            << QStringLiteral("overlap");
        QTest::newRow("negative shape")
            << safetensors(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", 0)
            << QStringLiteral("non-negative integers");
    }
    void badSafetensorsFiles() {
        QFETCH(QByteArray, file);
        QFETCH(QString, message);
        if (QString::fromLatin1(QTest::currentDataTag()) == QLatin1String("header past the end")) {
            file = QByteArray(8, '\0');
            file[0] = 100; // claims a 100-byte header
            file += "{}";
        }
        const QString path = m_dir.filePath(QStringLiteral("bad.safetensors"));
        writeAll(path, file);
        try {
            model::SafetensorsFile f(path.toStdString());
            QFAIL("a damaged file was accepted");
        } catch (const model::CheckpointError& e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.startsWith(path + ": ") && what.contains(message), qPrintable(what));
            QVERIFY(!what.contains(QLatin1Char('\n')));
        }
    }

    // A refused file gives back its mapping (a throwing constructor runs no destructor: each
    // bad file used to keep one, until the process ran out; found by fuzz_safetensors).
    void refusedFilesKeepNoMapping() {
        const QString path = m_dir.filePath(QStringLiteral("refused.safetensors"));
        writeAll(path, safetensors(
                           R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8));
        auto mappingsOf = [&] {
            const QByteArray maps = sparqlab::test::readFile(QStringLiteral("/proc/self/maps"));
            return maps.count(QFileInfo(path).fileName().toUtf8());
        };
        for (int i = 0; i < 50; ++i)
            QVERIFY_THROWS_EXCEPTION(model::CheckpointError,
                                     model::SafetensorsFile(path.toStdString()));
        QCOMPARE(mappingsOf(), 0);
    }

    void truncatedCheckpointIsRefused() {
        const QString folder = copyModel(QStringLiteral("truncated"));
        const QString st = folder + "/model.safetensors";
        QVERIFY(QFile::resize(st, QFileInfo(st).size() - 1000));
        const QString e = openError(folder);
        QVERIFY2(e.contains(QStringLiteral("outside the data section (")) &&
                     e.contains(QStringLiteral("truncated file?")),
                 qPrintable(e));
    }

    void missingOrMisshapenTensorIsNamed() {
        // A config that asks for a bigger MLP than the weights hold.
        const QString folder = copyModel(QStringLiteral("shape"));
        QByteArray cfg = readAll(folder + "/config.json");
        cfg.replace("\"intermediate_size\": 344", "\"intermediate_size\": 345");
        writeAll(folder + "/config.json", cfg);
        QString e = openError(folder);
        QVERIFY2(e.contains(QStringLiteral("has shape [344, 128], the config needs [345, 128]")),
                 qPrintable(e));
        // One layer more than the checkpoint has.
        cfg.replace("\"intermediate_size\": 345", "\"intermediate_size\": 344");
        cfg.replace("\"num_hidden_layers\": 4", "\"num_hidden_layers\": 5");
        writeAll(folder + "/config.json", cfg);
        e = openError(folder);
        QVERIFY2(e.contains(QStringLiteral("'model.layers.4.")) &&
                     e.contains(QStringLiteral("is missing")),
                 qPrintable(e));
    }

    void nonFiniteWeightsAreRefused() {
        const QString folder = m_dir.filePath(QStringLiteral("nan"));
        QDir().mkpath(folder);
        QFile::copy(m_ref + "/config.json", folder + "/config.json");
        const model::SafetensorsFile ref((m_ref + "/model.safetensors").toStdString());
        std::vector<std::pair<std::string, at::Tensor>> tensors;
        for (const auto& [n, entry] : ref.entries())
            tensors.emplace_back(n, ref.load(n, at::kFloat));
        QVERIFY(!tensors.empty());
        tensors[3].second.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
        model::writeSafetensors((folder + "/model.safetensors").toStdString(), tensors);
        const QString e = openError(folder);
        QVERIFY2(e.contains(QString::fromStdString(tensors[3].first)) &&
                     e.contains(QStringLiteral("NaN or infinite")),
                 qPrintable(e));
    }

    void badConfigs_data() {
        QTest::addColumn<QByteArray>("config");
        QTest::addColumn<QString>("message");
        QTest::newRow("malformed")
            << QByteArray("{\"architectures\": [") << QStringLiteral("malformed JSON");
        QTest::newRow("not an object")
            << QByteArray("[1, 2]") << QStringLiteral("must be a JSON object");
        QTest::newRow("no architectures") << QByteArray("{\"hidden_size\": 64}")
                                          << QStringLiteral("key 'architectures' is missing");
        QTest::newRow("unsupported")
            << QByteArray(R"({"architectures": ["BertForMaskedLM"]})")
            << QStringLiteral("unsupported architecture 'BertForMaskedLM' (supported: ");
        QTest::newRow("bad type")
            << QByteArray(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "big"})")
            << QStringLiteral("key 'hidden_size' must be an integer");
        QTest::newRow("heads do not divide")
            << QByteArray(
                   R"({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 96})")
            << QStringLiteral("must divide num_attention_heads");
        QTest::newRow("zero layers")
            << QByteArray(R"({"architectures": ["GPT2LMHeadModel"], "n_layer": 0})")
            << QStringLiteral("key 'n_layer' is out of range");
        // Found by fuzz_config: too large for int64 (a float, and an unsigned integer).
        QTest::newRow("huge float")
            << QByteArray(
                   R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 512777777777777777777})")
            << QStringLiteral("key 'vocab_size' is out of range");
        QTest::newRow("huge unsigned")
            << QByteArray(
                   R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 18446744073709551615})")
            << QStringLiteral("key 'vocab_size' is out of range");
        // MiniMax-M2: what its class does not compute is refused by name.
        const QByteArray mm =
            R"({"architectures": ["MiniMaxM2ForCausalLM"], "num_hidden_layers": 2, )";
        QTest::newRow("minimax lightning layer")
            << mm + R"("attn_type_list": [1, 0]})"
            << QStringLiteral("key 'attn_type_list' names a lightning-attention layer");
        QTest::newRow("minimax softmax router")
            << mm + R"("scoring_func": "softmax"})"
            << QStringLiteral("key 'scoring_func' must be \"sigmoid\"");
        QTest::newRow("minimax shared expert")
            << mm + R"("shared_intermediate_size": 1536})"
            << QStringLiteral("key 'shared_intermediate_size' must be 0");
        QTest::newRow("minimax odd rotary_dim")
            << mm + R"("rotary_dim": 63})" << QStringLiteral("key 'rotary_dim' must be even");
        QTest::newRow("minimax rotary_dim past head_dim")
            << mm + R"("rotary_dim": 256})" << QStringLiteral("key 'rotary_dim' is out of range");
        QTest::newRow("minimax qk_norm_type")
            << mm + R"("qk_norm_type": "per_head"})"
            << QStringLiteral("key 'qk_norm_type' must be \"per_layer\"");
        // MiniMax-M3: the indexer's shape and its layers, named by the key they came from.
        const QByteArray m3 =
            R"({"architectures": ["MiniMaxM3VLForCausalLM"], "num_hidden_layers": 2, )";
        QTest::newRow("minimax-m3 indexer heads")
            << m3 + R"("layer_types": ["full_attention", "minimax_m3_sparse"], )"
                    R"("index_n_heads": 3})"
            << QStringLiteral("key 'index_n_heads' must divide num_attention_heads (64)");
        QTest::newRow("minimax-m3 hub indexer heads")
            << m3 + R"("sparse_attention_config": {"sparse_attention_freq": [0, 1], )"
                    R"("sparse_num_index_heads": 5}})"
            << QStringLiteral("key 'sparse_attention_config.sparse_num_index_heads' must divide");
        QTest::newRow("minimax-m3 indexer narrower than RoPE")
            << m3 + R"("layer_types": ["full_attention", "minimax_m3_sparse"], )"
                    R"("index_head_dim": 32})"
            << QStringLiteral("key 'index_head_dim' must be at least the rotary dimensions (64)");
        QTest::newRow("minimax-m3 layer kind")
            << m3 + R"("layer_types": ["full_attention", "sliding_attention"]})"
            << QStringLiteral("key 'layer_types' must hold \"full_attention\", "
                              "\"minimax_m3_sparse\"");
        QTest::newRow("minimax-m3 sparse_attention_freq")
            << m3 + R"("sparse_attention_config": {"sparse_attention_freq": [1]}})"
            << QStringLiteral("key 'sparse_attention_config.sparse_attention_freq' must list "
                              "one 0 or 1 per layer (2)");
        QTest::newRow("minimax-m3 no blocks kept")
            << m3 + R"("index_topk_blocks": 0})"
            << QStringLiteral("key 'index_topk_blocks' is out of range (0)");
        QTest::newRow("minimax-m3 first blocks kept")
            << m3 + R"("sparse_attention_config": {"sparse_attention_freq": [0, 1], )"
                    R"("sparse_init_block": 1}})"
            << QStringLiteral("key 'sparse_attention_config.sparse_init_block' must be 0");
        QTest::newRow("minimax-m3 block score")
            << m3 + R"("sparse_attention_config": {"sparse_attention_freq": [0, 1], )"
                    R"("sparse_score_type": "mean"}})"
            << QStringLiteral("key 'sparse_attention_config.sparse_score_type' must be \"max\"");
        QTest::newRow("minimax-m3 shared experts")
            << m3 + R"("n_shared_experts": 2})"
            << QStringLiteral("key 'n_shared_experts' must be 1");
        QTest::newRow("minimax-m3 swiglu_limit")
            << m3 + R"("swiglu_limit": 0})"
            << QStringLiteral("key 'swiglu_limit' must be positive");
        QTest::newRow("activation")
            << QByteArray(R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "relu6"})")
            << QStringLiteral("'relu6' is not supported");
    }
    void badConfigs() {
        QFETCH(QByteArray, config);
        QFETCH(QString, message);
        try {
            model::parseModelConfig(config.toStdString(), "/m/config.json");
            QFAIL("a bad config was accepted");
        } catch (const model::ConfigError& e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.startsWith(QStringLiteral("/m/config.json: ")) && what.contains(message),
                     qPrintable(what));
            // An unknown architecture's message names every one of the family table.
            if (message.startsWith(QStringLiteral("unsupported architecture")))
                for (const model::ModelFamily* f : model::modelFamilies())
                    for (const std::string& a : f->architectures)
                        QVERIFY2(what.contains(QString::fromStdString(a)), a.c_str());
        }
    }

    void hfDefaultsApplyToMissingKeys() {
        // GPT-2 without tie_word_embeddings means tied (HF's default).
        const model::ModelConfig g =
            model::parseModelConfig(R"({"architectures": ["GPT2LMHeadModel"]})", "c");
        QVERIFY(g.tieEmbeddings);
        QCOMPARE(g.hiddenSize, int64_t{768});
        QCOMPARE(g.intermediateSize, int64_t{3072});
        const model::ModelConfig q = model::parseModelConfig(
            R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2})",
            "c");
        QVERIFY(q.qkvBias && !q.outBias);
        QCOMPARE(q.headDim, int64_t{16});
        const model::ModelConfig m =
            model::parseModelConfig(R"({"architectures": ["GemmaForCausalLM"]})", "c");
        QVERIFY(m.tieEmbeddings);
        QCOMPARE(m.headDim, int64_t{256});
        QCOMPARE(m.hiddenAct, std::string("gelu_pytorch_tanh"));
        // OLMo 3's default_theta is 500000 (OLMo 2's 10000), for both kinds of layers.
        const model::ModelConfig o =
            model::parseModelConfig(R"({"architectures": ["Olmo3ForCausalLM"]})", "c");
        QCOMPARE(o.rope.theta, 500000.0);
        QCOMPARE(o.localRope.theta, 500000.0);
        // Its v4 form: rope_theta and rope_scaling are the full layers' (YaRN's truncate unread
        // there), the sliding layers keep 500000.
        const model::ModelConfig v4 = model::parseModelConfig(
            R"({"architectures": ["Olmo3ForCausalLM"], "rope_theta": 10000.0,
                "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "truncate": false,
                                 "original_max_position_embeddings": 1024}})",
            "c");
        QCOMPARE(v4.rope.theta, 10000.0);
        QCOMPARE(v4.localRope.theta, 500000.0);
        QVERIFY(v4.rope.truncate && v4.localRope.truncate);
        QCOMPARE(v4.rope.scaling, std::string("yarn"));
        const model::ModelConfig o2 =
            model::parseModelConfig(R"({"architectures": ["Olmo2ForCausalLM"]})", "c");
        QCOMPARE(o2.rope.theta, 10000.0);
    }

    void glm5IndexerScheduleFollowsTheConfig() {
        // Without indexer_types, GlmMoeDsaConfig derives it: layer i runs its own indexer when
        // max(i − index_skip_topk_offset + 1, 0) % max(index_topk_freq, 1) == 0.
        const auto reuse = [](int freq, int offset) {
            const std::string text =
                R"({"architectures": ["GlmMoeDsaForCausalLM"], "num_hidden_layers": 6,
                    "index_topk_freq": )" +
                std::to_string(freq) + R"(, "index_skip_topk_offset": )" + std::to_string(offset) +
                "}";
            return model::parseModelConfig(text, "c").indexer.reuse;
        };
        using Flags = std::vector<bool>;
        QCOMPARE(reuse(2, 3), (Flags{false, false, false, true, false, true}));
        QCOMPARE(reuse(4, 2), (Flags{false, false, true, true, true, false}));
        QCOMPARE(reuse(0, 2), Flags(6, false)); // a frequency below 1 counts as 1
        QCOMPARE(reuse(-3, 2), Flags(6, false));
        QCOMPARE(reuse(3, -2), (Flags{false, true, true, false, true, true})); // (i + 3) % 3
    }

    void qwenWindowsFollowTheWriterOfTheConfig() {
        // transformers 5.x writes layer_types into every Qwen 2/3 config it saves (by default
        // the layers from max_window_layers on slide); a 4.x config has none and 4.51's mask
        // windows every layer. Either way only with use_sliding_window. Qwen3-MoE has no
        // layer_types: every layer.
        for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
            QCOMPARE(qwenWindows(arch, kQwenV5Window), (std::vector<int64_t>{0, 7, 7}));
            QCOMPARE(qwenWindows(arch, kQwenV4Window), (std::vector<int64_t>{7, 7, 7}));
            QVERIFY(qwenWindows(arch, kQwenNoWindow).empty());
        }
        QCOMPARE(qwenWindows("Qwen3MoeForCausalLM", kQwenV4Window),
                 (std::vector<int64_t>{7, 7, 7}));
    }

    void longropeFactorFollowsTheWriterOfTheConfig() {
        // _compute_longrope_parameters: 4.x (rope_scaling) takes the ratio of the context
        // lengths where original_max_position_embeddings is given (Phi-3 always has it), over a
        // given factor; 5.x (rope_parameters) takes the given factor, and without a top-level
        // original length the object's.
        const model::RopeSpec v4 = longrope("Phi3ForCausalLM", kLongropeV4);
        QCOMPARE(v4.factor, 4.0); // 1024 / 256
        QCOMPARE(v4.originalMax, int64_t{256});
        const model::RopeSpec v5 = longrope("Phi3ForCausalLM", kLongropeV5);
        QCOMPARE(v5.factor, 3.0);
        QCOMPARE(v5.originalMax, int64_t{256});
        QVERIFY(std::abs(v5.attentionFactor - std::sqrt(1 + std::log(3.0) / std::log(256.0))) <
                1e-12);
        const model::RopeSpec own = longrope("LlamaForCausalLM", kLongropeV5Own);
        QCOMPARE(own.originalMax, int64_t{128});
        QCOMPARE(own.factor, 8.0); // 1024 / 128, no factor given
    }

    void shardedCheckpointLoadsLikeOneFile() {
        const QString folder = m_dir.filePath(QStringLiteral("sharded"));
        QDir().mkpath(folder);
        QFile::copy(m_ref + "/config.json", folder + "/config.json");
        const model::SafetensorsFile ref((m_ref + "/model.safetensors").toStdString());
        std::vector<std::pair<std::string, at::Tensor>> shard[2];
        QJsonObject map;
        int i = 0;
        for (const auto& [n, entry] : ref.entries()) {
            const int s = i++ % 2;
            shard[s].emplace_back(n, ref.load(n, at::kFloat));
            map.insert(QString::fromStdString(n),
                       QStringLiteral("model-0000%1-of-00002.safetensors").arg(s + 1));
        }
        for (int s = 0; s < 2; ++s)
            model::writeSafetensors(
                (folder + QStringLiteral("/model-0000%1-of-00002.safetensors").arg(s + 1))
                    .toStdString(),
                shard[s]);
        writeAll(folder + "/model.safetensors.index.json",
                 QJsonDocument(QJsonObject{{"weight_map", map}}).toJson());
        auto a = model::Model::open(folder.toStdString());
        auto b = model::Model::open(m_ref.toStdString());
        const std::vector<int64_t> ids{1, 5, 9, 200, 3};
        QVERIFY(a->logits(ids).equal(b->logits(ids)));
        // A shard named in the index but absent is named in the error.
        QFile::remove(folder + "/model-00002-of-00002.safetensors");
        const QString e = openError(folder);
        QVERIFY2(e.contains(QStringLiteral("shard 'model-00002-of-00002.safetensors' is missing")),
                 qPrintable(e));
    }

    void writeSafetensorsRoundTrips() {
        const QString path = m_dir.filePath(QStringLiteral("rt.safetensors"));
        const at::Tensor a = at::randn({3, 5}), b = at::randn({7}).to(at::kBFloat16);
        model::writeSafetensors(path.toStdString(), {{"a", a}, {"b", b}});
        const model::SafetensorsFile f(path.toStdString());
        QVERIFY(f.load("a", at::kFloat).equal(a));
        QVERIFY(f.load("b", at::kBFloat16).equal(b));
        QCOMPARE(f.entries().at("b").dtype, std::string("BF16"));
    }
};

QTEST_GUILESS_MAIN(TestCheckpoint)
#include "test_checkpoint.moc"
