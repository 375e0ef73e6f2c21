// The transformer runtime against Hugging Face transformers' own outputs
// (../shared/refs/hf: logits, q/K/V after RoPE, attention, greedy generation, BF16 weights).

#include "test_support.h"

#include "attention/method_spec.h"

#include "capture/capture_file.h"
#include "capture/h5.h"
#include "model/input_error.h"
#include "model/model.h"
#include "model/safetensors.h"

#include <ATen/ATen.h>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>
#include <torch/types.h>

#include <numeric>
#include <thread>

using namespace sparqlab;
using sparqlab::test::toVector;

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

class TestModelHf : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        sparqlab::test::requireReference(QStringLiteral("refs/hf"));
        QVERIFY2(!sparqlab::test::referenceFolders(QStringLiteral("refs/hf")).isEmpty(),
                 "refs/hf holds no model folder");
    }

    /// The architectures of the set shown (a row that says so where one is not here) and every
    /// other folder of the set that is.
    static void addFolderRows(const QStringList& shown, const char* file) {
        QTest::addColumn<QString>("name");
        QStringList rows = shown;
        for (const QString& d : sparqlab::test::referenceFolders(QStringLiteral("refs/hf")))
            if (!rows.contains(d) &&
                (!file || !sparqlab::test::sharedFile("refs/hf/" + d + "/" + file).isEmpty()))
                rows << d;
        for (const QString& r : rows)
            QTest::newRow(qPrintable(r)) << r;
    }

    void matchesTransformers_data() {
        addFolderRows({"llama_gqa", "gptneox", "gpt2", "qwen3", "gemma2", "phi3"}, nullptr);
    }

    void matchesTransformers() {
        QFETCH(QString, name);
        SPARQLAB_NEED_REFERENCE("refs/hf/" + name + "/golden.h5");
        const std::string folder = (sparqlab::test::sharedDir() + "/refs/hf/" + name).toStdString();
        auto model = model::Model::open(folder);
        const h5::File gf = h5::File::openRead(folder + "/golden.h5");
        const h5::Group g = gf.root();
        const std::vector<int64_t> ids = toVector(g.read("input_ids"));
        const int64_t L = model->config().nLayers;

        // Logits of a full forward pass, within 1e-4 absolute.
        VERIFY_CLOSE(model->logits(ids), g.read("logits"), 1e-4, name + " logits");

        // q (after RoPE), K, V of every layer, within 5e-5, through the capture hook.
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        QCOMPARE(e.q.size(0), L);
        for (int64_t l = 0; l < L; ++l) {
            const std::string n = std::to_string(l);
            VERIFY_CLOSE(e.q[l], g.read("q/" + n), 5e-5, name + " q layer " + QString::number(l));
            VERIFY_CLOSE(e.k[l], g.read("k/" + n), 5e-5, name + " k layer " + QString::number(l));
            VERIFY_CLOSE(e.v[l], g.read("v/" + n), 5e-5, name + " v layer " + QString::number(l));
        }
        // The same in chunks of 5 queries against the keys so far (how long prompts run): the
        // last chunk ragged, windows and soft-caps crossing chunk borders; counted per chunk.
        int64_t calls = 0, lastTotal = 0;
        base::Job counted;
        counted.progress = [&](int64_t, int64_t total, const std::string&) {
            ++calls;
            lastTotal = total;
        };
        const model::CaptureExample chunked =
            model->capture(ids, /*allQueries=*/true, -1, counted, 0, /*chunk=*/5);
        const int64_t chunks = (static_cast<int64_t>(ids.size()) + 4) / 5;
        QCOMPARE(calls, chunks * L);
        QCOMPARE(lastTotal, chunks * L);
        for (int64_t l = 0; l < L; ++l) {
            const std::string n = std::to_string(l);
            const QString where = name + " chunked, layer " + QString::number(l);
            VERIFY_CLOSE(chunked.q[l], g.read("q/" + n), 5e-5, where + " q");
            VERIFY_CLOSE(chunked.k[l], g.read("k/" + n), 5e-5, where + " k");
            VERIFY_CLOSE(chunked.v[l], g.read("v/" + n), 5e-5, where + " v");
        }
        // Only the last 3 queries kept, in chunks: the same rows.
        const model::CaptureExample recent = model->capture(ids, false, -1, {}, 3, 4);
        QCOMPARE(recent.qPositions[0].item<int64_t>(), static_cast<int64_t>(ids.size()) - 3);
        VERIFY_CLOSE(recent.q, e.q.narrow(2, static_cast<int64_t>(ids.size()) - 3, 3), 5e-5,
                     name + " recent queries, chunked");
        // The attention probabilities those give with each layer's scale, soft-cap and window
        // (dense, causal), within 5e-5; where the golden file has the model's mask, it is ours.
        attention::AttendOptions keep;
        keep.keepScores = true;
        const int64_t T = static_cast<int64_t>(ids.size());
        for (int64_t l = 0; l < L; ++l) {
            const at::Tensor attn = g.read("attn/" + std::to_string(l)); // [H, T, T]
            const attention::AttentionConfig cfg = model->net()->layerAttention(l);
            for (int64_t t = 0; t < T; ++t) {
                attention::AttentionInputs in;
                in.q = e.q[l].select(1, t).unsqueeze(0);
                in.k = e.k[l].unsqueeze(0);
                in.v = e.v[l].unsqueeze(0);
                in.valid = at::arange(T).le(t).unsqueeze(0);
                const attention::AttentionResult r = attention::attend(in, cfg, keep);
                VERIFY_CLOSE(r.probs[0], attn.select(1, t), 5e-5,
                             name + QStringLiteral(" attention row %1 of layer %2").arg(t).arg(l));
                if (g.has("attn_mask"))
                    QVERIFY2(r.selected[0][0].equal(
                                 g.read("attn_mask/" + std::to_string(l))[t].to(at::kBool)),
                             qPrintable(name +
                                        QStringLiteral(" mask row %1 of layer %2").arg(t).arg(l)));
            }
        }
        // The capture file records what recomputes that attention (CONTRACTS.md §7).
        const model::CaptureInfo info = model->captureInfo();
        if (g.hasAttribute("attn_softcap")) {
            QCOMPARE(info.attnSoftcap, g.attrDouble("attn_softcap"));
            QVERIFY(std::abs(info.attnScale - g.attrDouble("attn_scale")) < 1e-12);
            QCOMPARE(info.layerConfig(0).slidingWindow, g.attrInts("layer_sliding_window")[0]);
            QCOMPARE(model->config().finalSoftcap, g.attrDouble("final_logit_softcap"));
        }

        // Greedy generation with the KV cache gives the golden tokens and logits.
        const int64_t promptLen = g.attrInt("prompt_len");
        const std::vector<int64_t> prompt(ids.begin(), ids.begin() + promptLen);
        const at::Tensor genIds = g.read("gen_ids");
        const model::Generation gen =
            model->generate(prompt, genIds.numel(), {}, /*stopAtEos=*/false);
        QCOMPARE(gen.newIds, toVector(genIds));
        VERIFY_CLOSE(at::stack(gen.stepLogits), g.read("gen_logits"), 1e-4, name + " gen_logits");
        if (g.has("gen_ids_p8")) { // from 8 tokens (for Gemma 2 well past its window of 16)
            const std::vector<int64_t> p8(ids.begin(), ids.begin() + g.attrInt("prompt_len_p8"));
            const at::Tensor ids8 = g.read("gen_ids_p8");
            const model::Generation gen8 = model->generate(p8, ids8.numel(), {}, false);
            QCOMPARE(gen8.newIds, toVector(ids8));
            VERIFY_CLOSE(at::stack(gen8.stepLogits), g.read("gen_logits_p8"), 1e-4,
                         name + " gen_logits_p8");
        }
    }

    void gptNeoXReadsTransformers5RopeParameters() {
        // transformers 5.x's GPTNeoXConfig keeps the base and the rotary share in
        // rope_parameters; top-level rotary_pct and rotary_emb_base only fill in what it lacks
        // (convert_rope_params_to_dict's setdefault). Stale top-level values must lose: the
        // golden logits need 8 rotary dimensions of 32 and base 10000.
        SPARQLAB_NEED_REFERENCE("refs/hf/gptneox/golden.h5");
        const QString from = sparqlab::test::sharedDir() + "/refs/hf/gptneox";
        QTemporaryDir dir;
        QVERIFY(QFile::copy(from + "/model.safetensors", dir.filePath("model.safetensors")));
        QFile in(from + "/config.json");
        QVERIFY(in.open(QIODevice::ReadOnly));
        QJsonObject c = QJsonDocument::fromJson(in.readAll()).object();
        c.remove("rope_scaling");
        c["rotary_pct"] = 0.5;
        c["rotary_emb_base"] = 20;
        c["rope_parameters"] = QJsonObject{
            {"rope_type", "default"}, {"rope_theta", 10000}, {"partial_rotary_factor", 0.25}};
        const auto write = [&](const QJsonObject& o) {
            QFile out(dir.filePath("config.json"));
            QVERIFY(out.open(QIODevice::WriteOnly | QIODevice::Truncate));
            out.write(QJsonDocument(o).toJson());
        };
        write(c);
        auto model = model::Model::open(dir.path().toStdString());
        const h5::File gf = h5::File::openRead((from + "/golden.h5").toStdString());
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        VERIFY_CLOSE(model->logits(ids), gf.root().read("logits"), 1e-4,
                     QStringLiteral("gptneox, 5.x rope_parameters"));
        // 4.x's rope_scaling is read too (GPTNeoXLinearScalingRotaryEmbedding), not ignored.
        c.remove("rope_parameters");
        c["rotary_pct"] = 0.25;
        c["rope_scaling"] = QJsonObject{{"type", "linear"}, {"factor", 2.0}};
        write(c);
        model = model::Model::open(dir.path().toStdString());
        QCOMPARE(model->config().rope.scaling, std::string("linear"));
        QCOMPARE(model->config().rope.factor, 2.0);
    }

    void bf16CheckpointMatchesBf16Reference_data() {
        addFolderRows({"llama_gqa", "qwen3"}, "model.bf16.safetensors");
    }

    void bf16CheckpointMatchesBf16Reference() {
        QFETCH(QString, name);
        SPARQLAB_NEED_REFERENCE("refs/hf/" + name + "/model.bf16.safetensors");
        const std::string folder = (sparqlab::test::sharedDir() + "/refs/hf/" + name).toStdString();
        model::ModelOpenOptions o;
        o.weightsFile = folder + "/model.bf16.safetensors";
        auto model = model::Model::open(folder, o);
        QCOMPARE(model->weightsDtype(), std::string("bfloat16"));
        const h5::File gf = h5::File::openRead(folder + "/golden.h5");
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        VERIFY_CLOSE(model->logits(ids), gf.root().read("logits_bf16_weights"), 1e-4,
                     QStringLiteral("bf16 logits"));
    }

    void sparqInsideTheModelIsDenseAtFullRankAndK() {
        // [B1] through the model: r = D and k ≥ S reproduce dense logits.
        const std::string folder =
            (sparqlab::test::sharedDir() + "/refs/hf/llama_gqa").toStdString();
        auto model = model::Model::open(folder);
        const h5::File gf = h5::File::openRead(folder + "/golden.h5");
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        attention::AttentionConfig c;
        c.method = attention::Method::Sparq;
        c.r = model->config().headDim;
        c.k = static_cast<int64_t>(ids.size());
        VERIFY_CLOSE(model->logits(ids, c), gf.root().read("logits"), 1e-4,
                     QStringLiteral("sparq r=D k=S"));
        // A real approximation changes the logits, but not beyond reason.
        c.r = 4;
        c.k = 8;
        const at::Tensor approx = model->logits(ids, c);
        QVERIFY(!approx.allclose(gf.root().read("logits"), 0, 1e-4));
        QVERIFY(at::isfinite(approx).all().item<bool>());
        // Every method runs through generation with the cache.
        for (attention::Method m : {attention::Method::H2O, attention::Method::LmInfinite,
                                    attention::Method::FlexGen, attention::Method::Oracle}) {
            c.method = m;
            const model::Generation gen =
                model->generate({ids.begin(), ids.begin() + 20}, 6, c, false);
            QCOMPARE(gen.newIds.size(), size_t{6});
        }
    }

    void fastDecodeEqualsTheReferencePath() {
        // Generation's decode steps run the fast engine (attention/decode/engine.h) for every
        // method it has; the teacher-forced logits of the same method (attendCausal) must agree,
        // step by step, in a real model with RoPE and GQA.
        const std::string folder =
            (sparqlab::test::sharedDir() + "/refs/hf/llama_gqa").toStdString();
        auto model = model::Model::open(folder);
        const model::ModelConfig& mc = model->config();
        const h5::File gf = h5::File::openRead(folder + "/golden.h5");
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 20);
        const int64_t D = mc.headDim;
        at::manual_seed(3);
        auto loki = std::make_shared<attention::Calibration>();
        loki->method = attention::Method::Loki;
        loki->tensors["basis"] =
            std::get<0>(at::linalg_qr(at::randn({mc.nLayers, mc.nKvHeads, D, D})));
        auto ds = std::make_shared<attention::Calibration>();
        ds->method = attention::Method::DoubleSparsity;
        ds->tensors["channels"] = std::get<1>(at::sort(at::rand({mc.nLayers, mc.nHeads, D}), -1));
        for (const attention::Method m :
             {attention::Method::Quest, attention::Method::Loki, attention::Method::DoubleSparsity,
              attention::Method::OracleTopP, attention::Method::SparqTopP}) {
            attention::AttentionConfig c;
            c.method = m;
            c.r = 4;
            c.k = 8;
            c.pageSize = 4;
            c.p = 0.8;
            c.calibration = m == attention::Method::Loki             ? loki
                            : m == attention::Method::DoubleSparsity ? ds
                                                                     : nullptr;
            QVERIFY(attention::decodeSupports(c));
            const model::Generation gen = model->generate(prompt, 6, c, false);
            std::vector<int64_t> all = prompt;
            all.insert(all.end(), gen.newIds.begin(), gen.newIds.end() - 1);
            const at::Tensor ref = model->logits(all, c); // [T, vocab]
            const int64_t first = static_cast<int64_t>(prompt.size()) - 1;
            VERIFY_CLOSE(at::stack(gen.stepLogits), ref.narrow(0, first, 6), 1e-4,
                         QString::fromStdString(attention::methodName(m)));
        }
    }

    void densePrefillThenAnyMethod() {
        // The paper's harness (eval): the prompt prefilled densely once, each method continuing.
        const std::string folder =
            (sparqlab::test::sharedDir() + "/refs/hf/llama_gqa").toStdString();
        auto model = model::Model::open(folder);
        const h5::File gf = h5::File::openRead(folder + "/golden.h5");
        const std::vector<int64_t> ids = toVector(gf.root().read("input_ids"));
        const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 24);
        auto prefill = model->prefillDense(prompt, 8);
        // Dense from the prefill is dense generation.
        const model::Generation dense = model->generate(prompt, 8, {}, false);
        const model::Generation again = prefill->continueWith({}, 8, {}, false);
        QCOMPARE(again.newIds, dense.newIds);
        VERIFY_CLOSE(at::stack(again.stepLogits), at::stack(dense.stepLogits), 1e-4,
                     QStringLiteral("dense from the prefill"));
        // The cache rewinds: SparQ twice gives the same; and not dense's logits.
        attention::AttentionConfig s;
        s.method = attention::Method::Sparq;
        s.r = 4;
        s.k = 6;
        const model::Generation a = prefill->continueWith(s, 8, {}, false);
        const model::Generation b = prefill->continueWith(s, 8, {}, false);
        QCOMPARE(a.newIds, b.newIds);
        QVERIFY(at::stack(a.stepLogits).equal(at::stack(b.stepLogits)));
        QVERIFY(!at::stack(a.stepLogits).allclose(at::stack(dense.stepLogits), 0, 1e-4));
        // H2O starts from the dense prefill's accumulated attention (SPARQ.md §4.4.1).
        const std::vector<int64_t> head(prompt.begin(), prompt.end() - 1);
        const model::CaptureExample e = model->capture(head, /*allQueries=*/true);
        std::vector<int64_t> pos(head.size());
        std::iota(pos.begin(), pos.end(), 0);
        for (int64_t l = 0; l < model->config().nLayers; ++l) {
            const at::Tensor want =
                attention::h2oAccumulate(e.q[l].unsqueeze(0), e.k[l].unsqueeze(0), {}, pos, {});
            VERIFY_CLOSE(prefill->prefillStates()[static_cast<size_t>(l)]
                             .methods.at(attention::Method::H2O)
                             ->tensors()
                             .at("acc"),
                         want, 1e-5,
                         QStringLiteral("H2O's accumulated attention, layer %1").arg(l));
        }
        attention::AttentionConfig h;
        h.method = attention::Method::H2O;
        h.k = 8;
        QCOMPARE(prefill->continueWith(h, 8, {}, false).newIds.size(), size_t{8});
        attention::AttentionConfig snap;
        snap.method = attention::Method::SnapKV;
        snap.k = 12;
        snap.snapWindow = 4;
        QCOMPARE(prefill->continueWith(snap, 8, {}, false).newIds.size(), size_t{8});
    }

    void aSecondThreadIsRefusedWhileTheModelRuns() {
        const std::string folder =
            (sparqlab::test::sharedDir() + "/refs/hf/llama_gqa").toStdString();
        auto model = model::Model::open(folder);
        const std::vector<int64_t> ids{1, 2, 3, 4, 5, 6, 7, 8};
        QString seen;
        int ran = 0;
        // While this thread is inside capture (its per-layer callback), another thread asks for
        // logits: it is told, with one line, instead of sharing the network's buffers.
        base::Job inside;
        inside.progress = [&](int64_t, int64_t, const std::string&) {
            if (ran++ == 0) {
                std::thread other([&] {
                    try {
                        model->logits(ids);
                        seen = QStringLiteral("ran");
                    } catch (const model::ModelBusyError& e) {
                        seen = QString::fromUtf8(e.what());
                    }
                });
                other.join();
            }
        };
        model->capture(ids, false, -1, inside);
        QVERIFY2(seen.contains(QStringLiteral("another thread")), qPrintable(seen));
        QVERIFY(!seen.contains(QLatin1Char('\n')));
        // Done: any thread may use it now, and the same thread may nest (generate → prefill).
        std::thread after([&] { QCOMPARE(model->logits(ids).size(0), 8); });
        after.join();
        QCOMPARE(model->generate(ids, 2, {}, false).newIds.size(), size_t{2});
    }

    void promptBeyondContextIsRefused() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/hf/gpt2/model.safetensors"));
        const std::string folder = (sparqlab::test::sharedDir() + "/refs/hf/gpt2").toStdString();
        auto model = model::Model::open(folder);
        const std::vector<int64_t> tooLong(static_cast<size_t>(model->config().maxPositions) + 1,
                                           5);
        try {
            model->logits(tooLong);
            QFAIL("a prompt beyond the context was accepted");
        } catch (const model::InputError& e) {
            QVERIFY(QString::fromUtf8(e.what()).contains(
                QStringLiteral("longer than the model's context of 256")));
        }
        QVERIFY_THROWS_EXCEPTION(model::InputError, model->logits({0, 512}));
    }
};

QTEST_GUILESS_MAIN(TestModelHf)
#include "test_model_hf.moc"
