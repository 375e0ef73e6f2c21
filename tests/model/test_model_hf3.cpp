// The 2025–26 architectures against Hugging Face transformers 5.17's own outputs
// (../shared/refs/hf3: gpt-oss, Qwen3-MoE, SmolLM 3, DeepSeek-V3, Command R7B here; every
// folder the directory holds is checked, the same way): through the command line, logits within
// 2e-4, the captured q, K, V of every layer within 1e-4, the dense attention probabilities of
// `attend --probs` on that capture within 1e-4 of HF's attention weights (sinks and chunks
// included), and the 16-token greedy continuations of both prompts; through the library, the
// per-layer plan (RoPE frequencies, NoPE layers, windows, chunks, scales, sinks), the cached
// decode's logits, the same model from the config's v4 form, and the parameter count against
// the checkpoint.

#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"
#include "model/model.h"
#include "model/safetensors.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

using namespace sparqlab;
using sparqlab::test::cliOut;
using sparqlab::test::idsJson;
using sparqlab::test::runCli;
using sparqlab::test::toVector;

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

namespace {

/// A transformers 5.x config.json in the v4 form: rope_theta and rope_scaling (the full layers'
/// when rope_parameters names layer types), partial_rotary_factor at the top, torch_dtype,
/// Qwen3-MoE's num_experts.
nlohmann::json v4Form(nlohmann::json c) {
    if (c.contains("rope_parameters")) {
        nlohmann::json r = c["rope_parameters"];
        c.erase("rope_parameters");
        if (r.contains("full_attention"))
            r = r["full_attention"];
        c["rope_theta"] = r["rope_theta"];
        r.erase("rope_theta");
        if (r.contains("partial_rotary_factor")) {
            c["partial_rotary_factor"] = r["partial_rotary_factor"];
            r.erase("partial_rotary_factor");
        }
        c["rope_scaling"] = r.value("rope_type", "default") == "default" ? nlohmann::json() : r;
    }
    if (c.contains("dtype")) {
        c["torch_dtype"] = c["dtype"];
        c.erase("dtype");
    }
    if (c.value("model_type", "") == "qwen3_moe" && c.contains("num_local_experts")) {
        c["num_experts"] = c["num_local_experts"];
        c.erase("num_local_experts");
    }
    return c;
}

} // namespace

class TestModelHf3 : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        // The set's folders, whatever they hold (../shared's shown set: all of them; tests/data's
        // compact references: one).
        sparqlab::test::requireReference(QStringLiteral("refs/hf3"));
    }

    void matchesTransformers5_data() {
        QTest::addColumn<QString>("name");
        const QStringList folders = sparqlab::test::referenceFolders(QStringLiteral("refs/hf3"));
        for (const QString& d : folders)
            QTest::newRow(qPrintable(d)) << d;
        QVERIFY(!folders.isEmpty());
    }

    void matchesTransformers5() {
        QFETCH(QString, name);
        const QString folder = sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/") + name;
        const h5::File gf =
            h5::File::openRead((folder + QStringLiteral("/golden.h5")).toStdString());
        const h5::Group g = gf.root();
        const std::vector<int64_t> ids = toVector(g.read("input_ids"));
        const int64_t L = g.attrInt("num_layers");
        QTemporaryDir tmp;
        const QString idsFile = tmp.filePath(QStringLiteral("ids.json"));
        QVERIFY(sparqlab::test::writeFile(idsFile, idsJson(ids).toUtf8()));

        // logits, through the command line.
        const QString logits = tmp.filePath(QStringLiteral("logits.h5"));
        cliOut({QStringLiteral("logits"), QStringLiteral("--model"), folder,
                QStringLiteral("--ids-file"), idsFile, QStringLiteral("--out"), logits});
        VERIFY_CLOSE(h5::File::openRead(logits.toStdString()).root().read("logits"),
                     g.read("logits"), 2e-4, name + " logits");

        // q, K, V of every layer as HF dots them (after norms, RoPE, temperature tuning).
        const QString cap = tmp.filePath(QStringLiteral("cap.h5"));
        cliOut({QStringLiteral("capture"), QStringLiteral("--model"), folder,
                QStringLiteral("--ids-file"), idsFile, QStringLiteral("--all-queries"),
                QStringLiteral("--out"), cap});
        const capture::CaptureReader reader(cap.toStdString());
        const model::CaptureExample e = reader.read(0);
        QCOMPARE(e.q.size(0), L);
        for (int64_t l = 0; l < L; ++l) {
            const std::string n = std::to_string(l);
            const QString where = name + QStringLiteral(" layer %1 ").arg(l);
            VERIFY_CLOSE(e.q[l], g.read("q/" + n), 1e-4, where + "q");
            VERIFY_CLOSE(e.k[l], g.read("k/" + n), 1e-4, where + "k");
            VERIFY_CLOSE(e.v[l], g.read("v/" + n), 1e-4, where + "v");
        }
        // The file records what recomputes HF's attention: scale, window, chunk, sinks, d_v.
        const model::CaptureInfo& info = reader.info();
        QCOMPARE(info.valueDim(), g.attrInt("v_head_dim"));
        const std::vector<int64_t> windows = g.attrInts("layer_sliding_window");
        const std::vector<int64_t> chunks = g.attrInts("layer_chunk_size");
        const std::vector<double> scales = g.attrDoubles("layer_attn_scale");
        for (int64_t l = 0; l < L; ++l) {
            const attention::AttentionConfig c = info.layerConfig(l);
            QCOMPARE(c.slidingWindow, windows[static_cast<size_t>(l)]);
            QCOMPARE(c.chunk, chunks[static_cast<size_t>(l)]);
            const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(double(info.headDim));
            QVERIFY(std::abs(scale - scales[static_cast<size_t>(l)]) < 1e-9 * scale);
            QCOMPARE(c.sinks.defined(), g.has("sinks"));
            if (g.has("sinks"))
                VERIFY_CLOSE(c.sinks, g.read("sinks/" + std::to_string(l)), 0, name + " sinks");
        }
        const std::vector<int64_t> rope = g.attrInts("layer_uses_rope");
        QCOMPARE(info.layerUsesRope, rope);

        // attend --method dense --probs: HF's attention weights (sink column dropped).
        const QString res = tmp.filePath(QStringLiteral("res.h5"));
        cliOut({QStringLiteral("attend"), QStringLiteral("--capture"), cap,
                QStringLiteral("--method"), QStringLiteral("dense"), QStringLiteral("--probs"),
                QStringLiteral("--out"), res});
        const h5::File rf = h5::File::openRead(res.toStdString());
        const at::Tensor probs = rf.root().group("examples").group("0000").read("probs");
        for (int64_t l = 0; l < L; ++l) {
            const at::Tensor want = g.read("attn/" + std::to_string(l));
            VERIFY_CLOSE(probs[l], want, 1e-4,
                         name + QStringLiteral(" attention, layer %1").arg(l));
            // Where HF's mask hides a key, so does ours.
            const at::Tensor mask = g.read("attn_mask/" + std::to_string(l)).to(at::kBool);
            QVERIFY(probs[l]
                        .masked_select(mask.logical_not().unsqueeze(0).expand_as(probs[l]))
                        .abs()
                        .max()
                        .item<double>() == 0);
        }

        // Greedy continuations of both prompts, through the command line.
        for (const auto& [key, lenKey] :
             {std::pair<std::string, std::string>{"gen_ids", "prompt_len"},
              {"gen_ids_p8", "prompt_len_p8"}}) {
            const std::vector<int64_t> prompt(ids.begin(), ids.begin() + g.attrInt(lenKey));
            const QString p = tmp.filePath(QStringLiteral("prompt.json"));
            QVERIFY(sparqlab::test::writeFile(p, idsJson(prompt).toUtf8()));
            const QString out =
                cliOut({QStringLiteral("generate"), QStringLiteral("--model"), folder,
                        QStringLiteral("--ids-file"), p, QStringLiteral("--max-new-tokens"),
                        QStringLiteral("16"), QStringLiteral("--json")});
            const nlohmann::json j = nlohmann::json::parse(out.toStdString());
            QCOMPARE(j["new_ids"].get<std::vector<int64_t>>(), toVector(g.read(key)));
        }

        // Through the library: the cached decode's step logits, the RoPE plan, the parameters.
        auto model = model::Model::open(folder.toStdString());
        const int64_t P = g.attrInt("prompt_len");
        const model::Generation gen = model->generate({ids.begin(), ids.begin() + P}, 16, {},
                                                      /*stopAtEos=*/false);
        VERIFY_CLOSE(at::stack(gen.stepLogits), g.read("gen_logits"), 2e-4, name + " gen_logits");
        for (int64_t l = 0; l < L; ++l) {
            const at::Tensor mine = model->net()->ropeInverseFrequencies(l);
            QCOMPARE(mine.defined(), rope[static_cast<size_t>(l)] == 1);
            if (mine.defined()) {
                const at::Tensor want = g.read("rope_inv_freq/" + std::to_string(l));
                VERIFY_CLOSE(mine / want, at::ones_like(want), 1e-6,
                             name + QStringLiteral(" inverse frequencies, layer %1").arg(l));
            }
        }
        // The same folder's config in the v4 form: the same model.
        const QString v4 = tmp.filePath(QStringLiteral("v4"));
        QDir().mkpath(v4);
        const nlohmann::json v5 = nlohmann::json::parse(
            sparqlab::test::readFile(folder + QStringLiteral("/config.json")).toStdString());
        QVERIFY(sparqlab::test::writeFile(v4 + QStringLiteral("/config.json"),
                                          QByteArray::fromStdString(v4Form(v5).dump(1))));
        QVERIFY(QFile::link(folder + QStringLiteral("/model.safetensors"),
                            v4 + QStringLiteral("/model.safetensors")));
        QVERIFY2(model::Model::open(v4.toStdString())->logits(ids).equal(model->logits(ids)),
                 qPrintable(name + " read from its v4 config"));
        // The counts computed from config.json and from the checkpoint's headers equal the
        // elements of the tensors the model holds (an invariant, not a time).
        int64_t elements = 0;
        for (const auto& p : model->net()->parameters())
            elements += p.numel();
        QCOMPARE(model->config().parameterCount(), elements);
        QCOMPARE(model::Checkpoint(folder.toStdString()).parameterCount(), elements);
    }

    void bf16ShardsMappedExperts_data() {
        QTest::addColumn<QString>("name");
        for (const char* n : {"gpt_oss", "qwen3_moe", "deepseek_v3"})
            QTest::newRow(n) << QString::fromLatin1(n);
    }

    void bf16ShardsMappedExperts() {
        // The weights rounded to BF16, in three shards with an index: computed in float32 they
        // are the float32 checkpoint of the same values; computed in BF16 their pages are
        // mapped (the routed experts read when a token reaches them) and the logits stay close
        // at the typical position.
        QFETCH(QString, name);
        SPARQLAB_NEED_REFERENCE("refs/hf3/" + name + "/model.safetensors");
        const std::string folder =
            (sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/") + name).toStdString();
        QTemporaryDir tmp;
        const QString bf = tmp.filePath(QStringLiteral("bf16")), f32 = tmp.filePath("f32");
        QDir().mkpath(bf);
        QDir().mkpath(f32);
        const model::Checkpoint ck(folder);
        std::vector<std::pair<std::string, at::Tensor>> rounded, shard;
        nlohmann::json map = nlohmann::json::object();
        const std::vector<std::string> names = ck.names();
        for (size_t i = 0; i < names.size(); ++i) {
            const at::Tensor t =
                ck.load(names[i], at::kFloat, ck.shapeOf(names[i])).to(at::kBFloat16);
            rounded.emplace_back(names[i], t.to(at::kFloat));
            const int s = static_cast<int>(3 * i / names.size());
            const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00003.safetensors";
            map[names[i]] = file;
        }
        for (int s = 0; s < 3; ++s) {
            shard.clear();
            const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00003.safetensors";
            for (const auto& [n, t] : rounded)
                if (map[n] == file)
                    shard.emplace_back(n, t.to(at::kBFloat16));
            model::writeSafetensors((bf + "/").toStdString() + file, shard);
        }
        QVERIFY(sparqlab::test::writeFile(
            bf + "/model.safetensors.index.json",
            QByteArray::fromStdString(nlohmann::json{{"weight_map", map}}.dump())));
        model::writeSafetensors((f32 + "/model.safetensors").toStdString(), rounded);
        for (const QString& d : {bf, f32})
            QVERIFY(
                QFile::copy(QString::fromStdString(folder) + "/config.json", d + "/config.json"));
        const h5::File gf = h5::File::openRead(folder + "/golden.h5");
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        const at::Tensor ref = model::Model::open(f32.toStdString())->logits(ids);
        model::ModelOpenOptions asF32;
        asF32.compute = model::ComputeDtype::Float32;
        QVERIFY(model::Model::open(bf.toStdString(), asF32)->logits(ids).equal(ref));
        model::ModelOpenOptions stored;
        stored.compute = model::ComputeDtype::Stored;
        auto model = model::Model::open(bf.toStdString(), stored);
        QCOMPARE(model->computeDtype(), at::kBFloat16);
        const at::Tensor logits = model->logits(ids);
        QVERIFY(at::isfinite(logits).all().item<bool>());
        // BF16 activations move the logits a little everywhere and flip a router's choice at a
        // few positions (an expert more or less): the typical position stays close.
        const at::Tensor perPosition = (logits - ref).abs().amax(-1);
        const double typical = perPosition.median().item<double>();
        const double scale = ref.abs().max().item<double>();
        qInfo("%s: BF16 compute, median over positions of max |Δ logits| %.3g (logits up to "
              "%.3g, worst position %.3g)",
              qPrintable(name), typical, scale, perPosition.max().item<double>());
        QVERIFY2(typical < 0.05 * scale, qPrintable(name));
    }

    /// GLM-4.7-Flash is DeepSeek-V3's block (modular_glm4_moe_lite.py: DeepseekV3Attention, the
    /// same router and experts): the deepseek_v3 folder's weights under a Glm4MoeLiteConfig (its
    /// dense first layer named by mlp_layer_types) give transformers' DeepSeek-V3 logits.
    void glm47FlashOnDeepseekV3Weights() {
        SPARQLAB_NEED_REFERENCE("refs/hf3/deepseek_v3/model.safetensors");
        const QString folder =
            sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/deepseek_v3");
        nlohmann::json c = nlohmann::json::parse(
            sparqlab::test::readFile(folder + QStringLiteral("/config.json")).toStdString());
        c["architectures"] = {"Glm4MoeLiteForCausalLM"};
        c["model_type"] = "glm4_moe_lite";
        c["mlp_layer_types"] = {"dense", "sparse", "sparse"};
        c.erase("first_k_dense_replace");
        QTemporaryDir tmp;
        QVERIFY(sparqlab::test::writeFile(tmp.filePath(QStringLiteral("config.json")),
                                          QByteArray::fromStdString(c.dump(1))));
        QVERIFY(QFile::link(folder + QStringLiteral("/model.safetensors"),
                            tmp.filePath(QStringLiteral("model.safetensors"))));
        auto model = model::Model::open(tmp.path().toStdString());
        QCOMPARE(model->config().family, std::string("glm4_moe_lite"));
        const h5::File gf =
            h5::File::openRead((folder + QStringLiteral("/golden.h5")).toStdString());
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        VERIFY_CLOSE(model->logits(ids), gf.root().read("logits"), 2e-4,
                     QStringLiteral("GLM-4.7-Flash on DeepSeek-V3's weights"));
    }
};

QTEST_GUILESS_MAIN(TestModelHf3)
#include "test_model_hf3.moc"
