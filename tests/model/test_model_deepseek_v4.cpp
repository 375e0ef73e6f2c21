// DeepSeek-V4 (DeepseekV4ForCausalLM, transformers' modeling_deepseek_v4.py) against a reference
// forward written here in float64 from transformers' code: mHC's streams and Sinkhorn-Knopp
// mixing, the attention of one shared key-value head over a sliding window with a sink per head,
// the compressed entries of HCA layers (every ready one) and CSA layers (two overlapping series,
// the lightning indexer's top k), RoPE on each head's tail undone on the output, the grouped
// output projection, and experts routed by sqrt(softplus) or by a table of token ids. Logits,
// captured q and keys in one pass and in chunks, greedy steps through the compressors' state, a
// rewound cache, what each part changes, the older checkpoint names, methods among the entries,
// bad configs and tables (docs/learned-sparse-and-hybrid.md §17). The reference is
// deepseek_v4_reference.h; the entries in captures and what reads them are
// test_deepseek_v4_entries.

#include "deepseek_v4_reference.h"
#include "test_support.h"

#include "analysis/decode_traffic.h"
#include "attention/method_table.h"
#include "model/input_error.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>

using namespace sparqlab;
using namespace sparqlab::test::f64;
using namespace sparqlab::test::v4;

class TestModelDeepseekV4 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    /// Logits, every layer's q and keys in one pass and in chunks of 5 (the compressors' windows
    /// completed across chunks), greedy steps through the cache, against the float64 reference.
    void followsTransformers() {
        const QString dir = m_dir.filePath(QStringLiteral("v4"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 11);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("deepseek_v4"));
        followsReference(
            *model, [&](const std::vector<int64_t>& ids) { return referenceV4(c, w, ids); },
            QStringLiteral("deepseek_v4"), 12, tolerance(c, w));
    }

    /// Each part the reference follows changes these logits by far more than the tolerance: the
    /// compressed entries, the indexer's choice, the clamp, the sinks, the output's rotation
    /// undone, the hash tables and Sinkhorn-Knopp's steps.
    void everyPartBites() {
        const QString dir = m_dir.filePath(QStringLiteral("parts"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 21);
        const std::vector<int64_t> ids = randomIds(37, 101, 3);
        const at::Tensor exact = referenceV4(c, w, ids).logits;
        const std::vector<std::pair<const char*, Knobs>> parts = {
            {"compressed entries", Knobs{.compressed = false}},
            {"indexer", Knobs{.indexer = false}},
            {"clamp", Knobs{.clamp = false}},
            {"sinks", Knobs{.sinks = false}},
            {"undone rotation", Knobs{.undoRope = false}},
            {"hash routing", Knobs{.hashRouting = false}},
            {"sinkhorn", Knobs{.sinkhorn = false}}};
        for (const auto& [name, k] : parts) {
            const double d = largestDifference(referenceV4(c, w, ids, k).logits, exact);
            QVERIFY2(
                d > 1e-2,
                qPrintable(
                    QStringLiteral("%1 changes the logits by %2").arg(QLatin1String(name)).arg(d)));
        }
    }

    /// A cache rewound to an earlier position (the lab's replays) continues as a fresh one: the
    /// compressors' entries of the windows past it are dropped and pooled again.
    void rewoundCacheContinues() {
        const QString dir = m_dir.filePath(QStringLiteral("rewind"));
        makeV4(dir, smallConfig(), 31);
        auto model = model::Model::open(dir.toStdString());
        torch::NoGradGuard noGrad;
        const std::vector<int64_t> a = randomIds(30, 101, 5), b = randomIds(13, 101, 6);
        auto ids = [](const std::vector<int64_t>& v, int64_t from, int64_t to) {
            return at::tensor(std::vector<int64_t>(v.begin() + from, v.begin() + to), at::kLong)
                .unsqueeze(0);
        };
        model::KVCache cache;
        model->net()->forward(ids(a, 0, 30), &cache);
        cache.truncate(17);
        QCOMPARE(cache.length(), int64_t{17});
        const at::Tensor resumed = model->net()->forward(ids(b, 0, 13), &cache);
        std::vector<int64_t> joined(a.begin(), a.begin() + 17);
        joined.insert(joined.end(), b.begin(), b.end());
        const at::Tensor fresh = model->net()->forward(ids(joined, 0, 30), nullptr);
        SPARQLAB_VERIFY_CLOSE(resumed, fresh.narrow(1, 17, 13), 1e-4,
                              QStringLiteral("deepseek_v4, rewound"));
    }

    /// The first releases' names (the indexer's weights_proj beside q_b_proj, not under scorer)
    /// open to the same model; a hash table with an id past the experts is refused naming it.
    void checkpointForms() {
        const QString dir = m_dir.filePath(QStringLiteral("forms"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 41);
        auto scorer = model::Model::open(dir.toStdString());
        QVERIFY(scorer->config().compressed.scorerModule);
        auto rewrite = [&](const QString& to,
                           const std::function<void(std::string&, at::Tensor&)>& f) {
            QVERIFY(QDir().mkpath(to));
            test::writeFile(to + "/config.json", QByteArray::fromStdString(c.dump(1)));
            std::vector<std::pair<std::string, at::Tensor>> list;
            for (const auto& [n, t] : w) {
                std::string name = n;
                at::Tensor v = t.to(at::kFloat);
                f(name, v);
                list.emplace_back(name, v);
            }
            model::writeSafetensors((to + "/model.safetensors").toStdString(), list);
        };
        const QString old = m_dir.filePath(QStringLiteral("forms-old"));
        rewrite(old, [](std::string& n, at::Tensor&) {
            const size_t at = n.find("scorer.");
            if (at != std::string::npos)
                n.erase(at, 7);
        });
        auto first = model::Model::open(old.toStdString());
        QVERIFY(!first->config().compressed.scorerModule);
        const std::vector<int64_t> ids = randomIds(25, 101, 7);
        QVERIFY(at::equal(first->logits(ids), scorer->logits(ids)));
        // The tables as transformers saves them, int64 (and int32) safetensors.
        for (const at::ScalarType t : {at::kLong, at::kInt}) {
            const QString ints = m_dir.filePath(QStringLiteral("forms-int%1").arg(int(t)));
            rewrite(ints, [t](std::string& n, at::Tensor& v) {
                if (n.find(".tid2eid") != std::string::npos)
                    v = v.to(t);
            });
            QVERIFY(at::equal(model::Model::open(ints.toStdString())->logits(ids),
                              scorer->logits(ids)));
        }
        const QString bad = m_dir.filePath(QStringLiteral("forms-bad"));
        rewrite(bad, [](std::string& n, at::Tensor& t) {
            if (n == "model.layers.2.mlp.gate.tid2eid")
                t[7][1] = 6; // (6 experts: ids 0..5)
        });
        try {
            model::Model::open(bad.toStdString());
            QFAIL("opened a hash table with an expert id past the experts");
        } catch (const model::CheckpointError& e) {
            const std::string what = e.what();
            QVERIFY2(what.find("model.layers.2.mlp.gate.tid2eid") != std::string::npos &&
                         what.find("0..5") != std::string::npos &&
                         what.find('\n') == std::string::npos,
                     e.what());
        }
    }

    /// What the model says of itself: its parts from the config, DeepseekV4Config's defaults and
    /// its older keys, the parameter count, a capture's keys, and a method it cannot take.
    void whatTheModelSays() {
        const QString dir = m_dir.filePath(QStringLiteral("info"));
        const Weights w = makeV4(dir, smallConfig(), 51);
        auto model = model::Model::open(dir.toStdString());
        int64_t parameters = 0;
        for (const auto& [n, t] : w)
            parameters += t.numel();
        QCOMPARE(model->config().parameterCount(), parameters);
        const model::ModelConfig& mc = model->config();
        QCOMPARE(mc.compressed.layerRate, (std::vector<int64_t>{8, 4, 0, 4, 8}));
        QCOMPARE(mc.compressed.layerIndexed, (std::vector<bool>{false, true, false, true, false}));
        QCOMPARE(mc.layerLocalRope, (std::vector<bool>{false, false, true, false, false}));
        QCOMPARE(mc.moe.hashLayers, (std::vector<bool>{true, false, true, false, false}));
        QCOMPARE(mc.rotaryDim, int64_t{8});
        QCOMPARE(mc.rope.scaling, std::string("yarn"));
        QCOMPARE(mc.attentionLayers().size(), size_t{5});
        const model::CaptureExample e = model->capture(randomIds(12, 101, 2), true);
        QCOMPARE(e.k.sizes(), (std::vector<int64_t>{5, 1, 12, 16}));
        QVERIFY(at::equal(e.k, e.v)); // the key is the value
        // DeepseekV4Config's defaults (DeepSeek-V4-Flash): 43 layers, two HCA then CSA and HCA
        // in turn, the first three hash layers, YaRN's attention factor 1 on the compress RoPE.
        const json flash = {{"architectures", {"DeepseekV4ForCausalLM"}},
                            {"rope_theta", 10000},
                            {"compress_rope_theta", 160000},
                            {"rope_scaling",
                             {{"type", "yarn"},
                              {"factor", 16},
                              {"original_max_position_embeddings", 65536},
                              {"beta_fast", 32},
                              {"beta_slow", 1}}}};
        const model::ModelConfig d = model::parseModelConfig(flash.dump(), "c.json");
        QCOMPARE(d.nLayers, int64_t{43});
        QCOMPARE(d.compressed.layerRate[0], int64_t{128});
        QCOMPARE(d.compressed.layerRate[1], int64_t{128});
        QCOMPARE(d.compressed.layerRate[2], int64_t{128});
        QCOMPARE(d.compressed.layerRate[3], int64_t{4});
        QCOMPARE(d.moe.hashLayers[2], true);
        QCOMPARE(d.moe.hashLayers[3], false);
        QCOMPARE(d.rotaryDim, int64_t{64});
        QCOMPARE(d.rope.theta, 160000.0);
        QCOMPARE(d.rope.factor, 16.0);
        QCOMPARE(d.rope.attentionFactor, 1.0);
        QCOMPARE(d.localRope.theta, 10000.0);
        QVERIFY(d.localRope.scaling.empty());
        QCOMPARE(d.nKvHeads, int64_t{1});
        QCOMPARE(d.layerWindow[5], int64_t{128});
        QCOMPARE(d.moe.topK, int64_t{6});
        const int64_t hcMult = d.hyper.streams; // (hc_mult)
        QCOMPARE(hcMult, int64_t{4});
        // The first releases' keys: compress_ratios, num_hash_layers, qk_rope_head_dim.
        json older = flash;
        older["num_hidden_layers"] = 4;
        older["compress_ratios"] = {0, 4, 128, 4};
        older["num_hash_layers"] = 1;
        older["qk_rope_head_dim"] = 32;
        const model::ModelConfig o = model::parseModelConfig(older.dump(), "c.json");
        QCOMPARE(o.compressed.layerRate, (std::vector<int64_t>{0, 4, 128, 4}));
        QCOMPARE(o.moe.hashLayers, (std::vector<bool>{true, false, false, false}));
        QCOMPARE(o.rotaryDim, int64_t{32});
        // intermediate_size is moe_intermediate_size's alias (transformers' attribute_map).
        json alias = flash;
        alias["intermediate_size"] = 96;
        QCOMPARE(model::parseModelConfig(alias.dump(), "c.json").moe.intermediate, int64_t{96});
        alias["moe_intermediate_size"] = 80;
        QCOMPARE(model::parseModelConfig(alias.dump(), "c.json").moe.intermediate, int64_t{80});
        QCOMPARE(d.moe.intermediate, int64_t{2048});
        // A method that needs the keys to be positions is refused with one line.
        for (const attention::Method m : {attention::Method::H2O, attention::Method::Indexer}) {
            try {
                model->generate(randomIds(10, 101, 3), 2, attention::defaultConfig(m), false);
                QFAIL("ran a position-bound method on DeepSeek-V4's compressed entries");
            } catch (const model::InputError& err) {
                const std::string why = err.what();
                QVERIFY2(why.find("needs the keys to be positions") != std::string::npos &&
                             why.find('\n') == std::string::npos,
                         err.what());
            }
        }
    }

    /// Another method chooses among the window's keys and every entry a query sees, in the
    /// indexer's place (as on a DSA model): the oracle keeping them all is the reference without
    /// the indexer; SparQ at a small k is not; greedy steps through the cache follow the whole
    /// sequence's logits; traffic counts the model's own reads and a method's over every key seen.
    void methodsChooseAmongEntries() {
        const QString dir = m_dir.filePath(QStringLiteral("methods"));
        const json c = smallConfig();
        const Weights w = makeV4(dir, c, 71);
        auto model = model::Model::open(dir.toStdString());
        const std::vector<int64_t> ids = randomIds(27, 101, 5);
        attention::AttentionConfig all = attention::defaultConfig(attention::Method::Oracle);
        all.k = 1000;
        const at::Tensor everyEntry = model->logits(ids, all).to(at::kDouble);
        const at::Tensor own = referenceV4(c, w, ids).logits;
        const double tol = tolerance(c, w);
        SPARQLAB_VERIFY_CLOSE(everyEntry, referenceV4(c, w, ids, Knobs{.indexer = false}).logits,
                              tol, QStringLiteral("the oracle over every key seen"));
        QVERIFY(largestDifference(everyEntry, own) > 1e-2); // not the model's own
        attention::AttentionConfig sparq = attention::defaultConfig(attention::Method::Sparq);
        sparq.r = 4;
        sparq.k = 5;
        const at::Tensor sparse = model->logits(ids, sparq);
        QVERIFY(at::isfinite(sparse).all().item<bool>());
        QVERIFY(largestDifference(sparse.to(at::kDouble), everyEntry) > 1e-2);
        // Greedy steps through the cache (one query at a time) take the tokens the whole
        // sequence's logits choose: a prefill and its steps attend alike.
        const model::Generation g = model->generate(ids, 4, sparq, false);
        std::vector<int64_t> seq = ids;
        seq.insert(seq.end(), g.newIds.begin(), g.newIds.end());
        const at::Tensor whole = model->logits(seq, sparq);
        for (size_t i = 0; i < g.newIds.size(); ++i) {
            const at::Tensor row = whole[static_cast<int64_t>(ids.size() + i) - 1];
            const auto top = row.topk(2);
            const double gap = (std::get<0>(top)[0] - std::get<0>(top)[1]).item<double>();
            if (gap > 1e-3) // a near tie may go either way
                QCOMPARE(g.newIds[i], std::get<1>(top)[0].item<int64_t>());
        }
        // traffic at 64 positions: the model's own reads (per layer the window's 6 keys and one
        // written; an HCA layer's 8 entries; a CSA layer's 16 indexer entries of 8 dims and the 3
        // entries it picks); SparQ's in the indexer's place over every key seen, each key its
        // value (METHODS.md §10: r = 4 of each key, k = 5 keys, the one written and v̄ read and
        // written), against those.
        const model::ModelConfig& mc = model->config();
        const analysis::DecodeTraffic dense = analysis::decodeTraffic(mc, 64, {}, 2.0, 1, 2.0);
        QCOMPARE(dense.attentionCache, 16.0 * (5 * 7 + 8 + 8 + 3 + 3) + 2 * 8 * 16);
        QCOMPARE(dense.indexerKeys, 2.0 * 8 * 16);
        QCOMPARE(dense.methodRatio, 1.0);
        const double keysSeen = 5 * 6 + 2 * 8 + 2 * 16; // the window on each layer, the entries
        const double sparqReads = 4 * keysSeen + 5 * (5 * 16 + 3 * 16);
        const analysis::DecodeTraffic bySparq = analysis::decodeTraffic(mc, 64, sparq, 2.0, 1, 2.0);
        QCOMPARE(bySparq.attentionCache, dense.attentionCache);
        QVERIFY(std::abs(bySparq.methodRatio - sparqReads / dense.attentionCache) < 1e-12);
        // A method that needs positions is refused with one line.
        try {
            analysis::decodeTraffic(mc, 64, attention::defaultConfig(attention::Method::H2O), 2.0,
                                    1, 2.0);
            QFAIL("traffic counted H2O over DeepSeek-V4's entries");
        } catch (const attention::AttentionError& err) {
            QVERIFY2(
                std::string(err.what()).rfind("traffic: h2o needs the keys to be positions", 0) ==
                    0,
                err.what());
        }
    }

    /// Configs that DeepseekV4Config refuses, or that SparQ Lab cannot follow: one line naming
    /// the key.
    void badDeepseekV4Configs() {
        verifyBadConfigs(
            smallConfig(), "deepseek_v4/config.json",
            {
                {[](json& c) { c["layer_types"][2] = "full_attention"; }, "layer_types"},
                {[](json& c) { c["layer_types"].erase(0); }, "layer_types"},
                {[](json& c) { c["mlp_layer_types"][1] = "dense"; }, "mlp_layer_types"},
                {[](json& c) { c["o_groups"] = 3; }, "o_groups"},
                {[](json& c) { c["index_head_dim"] = 4; }, "index_head_dim"},
                {[](json& c) { c["scoring_func"] = "softmax"; }, "scoring_func"},
                {[](json& c) { c["swiglu_limit"] = 0; }, "swiglu_limit"},
                {[](json& c) { c["num_experts_per_tok"] = 7; }, "num_experts_per_tok"},
                {[](json& c) { c["partial_rotary_factor"] = 0.03; }, "partial_rotary_factor"},
                {[](json& c) { c["rope_parameters"]["compress"]["rope_type"] = "linear"; },
                 "rope_parameters.compress.rope_type"},
                {[](json& c) { c["rope_parameters"].erase("main"); }, "rope_parameters.main"},
                {[](json& c) { c["compress_rates"]["compressed_sparse_attention"] = 0; },
                 "compress_rates.compressed_sparse_attention"},
                {[](json& c) {
                     c.erase("layer_types");
                     c["compress_ratios"] = {0, 4, 128, 4, 8};
                 },
                 "compress_ratios"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelDeepseekV4)
#include "test_model_deepseek_v4.moc"
