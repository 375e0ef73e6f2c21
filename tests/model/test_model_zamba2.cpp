// Zamba2 (Zamba2ForCausalLM, transformers' modular_zamba2.py) against a reference forward written
// here in float64: Mamba-2 layers as their token-by-token recurrence (mamba2Ref), and at each
// hybrid layer the shared block of its position (block j mod num_mem_blocks, stored under the
// block's first hybrid layer) on [x | the token embeddings], with that layer's own adapters and
// no residual, its output through the layer's linear into the Mamba-2 layer's input; logits,
// the hybrid layers' q, k and v, greedy steps through the states and the cache, what the model
// says of itself, and one-line errors for bad configs (docs/learned-sparse-and-hybrid.md §15).

#include "float64_reference.h"
#include "test_support.h"

#include "analysis/decode_traffic.h"
#include "attention/method_table.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

using namespace sparqlab;
using namespace sparqlab::test::f64;

namespace {

/// Low-rank adapter slot `j` of the list under `list`: up(down(x)).
at::Tensor adapterRef(const Weights& w, const std::string& list, int64_t j, const at::Tensor& x) {
    const std::string p = list + "." + std::to_string(j) + ".";
    return at::linear(at::linear(x, w.at(p + "0.weight")), w.at(p + "1.weight"));
}

/// Zamba2ForCausalLM.forward on ids as transformers computes it, with its knobs explicit so that
/// a test can show each one matters: `attnScale` the scores' factor ((head_dim / 2)^-½),
/// `embeddingsFirst` the shared block's input [embeddings | x] (transformers: [x | embeddings]),
/// `residualT` adding the block's output to the residual stream too (transformers: only to the
/// Mamba-2 layer's input), `gateEps` the gated norm's eps (transformers: 1e-5).
RefOut referenceZamba2(const json& c, const Weights& w, const std::vector<int64_t>& ids,
                       double attnScale = 0, bool embeddingsFirst = false, bool residualT = false,
                       double gateEps = 1e-5) {
    const int64_t L = c["num_hidden_layers"], h = c["hidden_size"], H = c["num_attention_heads"];
    const int64_t KV = c.value("num_key_value_heads", json(nullptr)).is_null()
                           ? H
                           : c["num_key_value_heads"].get<int64_t>();
    const int64_t D = 2 * h / H, F = c["intermediate_size"], T = static_cast<int64_t>(ids.size());
    const int64_t blocks = c.value("num_mem_blocks", 1);
    const double eps = c["rms_norm_eps"];
    const bool adapters = c.value("use_shared_attention_adapter", false);
    const bool rotates = c.value("use_mem_rope", false);
    const std::vector<std::string> types = c["layers_block_type"];
    std::vector<int64_t> hybrid;
    for (int64_t l = 0; l < L; ++l)
        if (types[static_cast<size_t>(l)] == "hybrid")
            hybrid.push_back(l);
    Mamba2Shape m;
    m.heads = c["n_mamba_heads"];
    m.headDim = c["mamba_expand"].get<int64_t>() * h / m.heads;
    m.groups = m.normGroups = c["mamba_ngroups"];
    m.state = c["mamba_d_state"];
    m.kernel = c["mamba_d_conv"];
    m.dtMin = c.value("time_step_min", 0.001);
    m.eps = gateEps; // (Zamba2RMSNormGated's 1e-5, not rms_norm_eps)
    auto W = [&](const std::string& n) { return w.at(n); };
    const at::Tensor e =
        at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong)); // [T, h]
    at::Tensor x = e;
    RefOut out;
    for (int64_t l = 0, j = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        if (types[static_cast<size_t>(l)] != "hybrid") {
            x = x + mamba2Ref(m, w, p + "mamba.", rmsNorm(x, W(p + "input_layernorm.weight"), eps));
            continue;
        }
        const std::string s = "model.layers." +
                              std::to_string(hybrid[static_cast<size_t>(j % blocks)]) +
                              ".shared_transformer.";
        const at::Tensor in = rmsNorm(embeddingsFirst ? at::cat({e, x}, -1) : at::cat({x, e}, -1),
                                      W(s + "input_layernorm.weight"), eps);
        auto proj = [&](const char* n) {
            at::Tensor y = at::linear(in, W(s + "self_attn." + n + "_proj.weight"));
            if (adapters)
                y = y + adapterRef(w, s + "self_attn.linear_" + n + "_adapter_list", j, in);
            return y;
        };
        at::Tensor q = proj("q").view({T, H, D}).transpose(0, 1);
        at::Tensor k = proj("k").view({T, KV, D}).transpose(0, 1);
        const at::Tensor v = proj("v").view({T, KV, D}).transpose(0, 1);
        if (rotates) { // the whole head, rotate_half
            const at::Tensor inv = defaultInv(c.value("rope_theta", 10000.0), D);
            q = rope(q, inv, D, true);
            k = rope(k, inv, D, true);
        }
        out.q.push_back(q);
        out.k.push_back(k);
        out.v.push_back(v);
        const double scale = attnScale > 0 ? attnScale : 1.0 / std::sqrt(D / 2.0);
        const at::Tensor a =
            at::linear(causalAttention(q, k, v, scale).transpose(0, 1).reshape({T, H * D}),
                       W(s + "self_attn.o_proj.weight"));
        const at::Tensor f = rmsNorm(a, W(s + "pre_ff_layernorm.weight"), eps);
        const at::Tensor g = at::linear(f, W(s + "feed_forward.gate_up_proj.weight")) +
                             adapterRef(w, s + "feed_forward.gate_up_proj_adapter_list", j, f);
        const at::Tensor mlp = at::linear(at::gelu(g.narrow(1, 0, F)) * g.narrow(1, F, F),
                                          W(s + "feed_forward.down_proj.weight"));
        const at::Tensor t = at::linear(mlp, W(p + "linear.weight"));
        x = x + (residualT ? t : at::zeros_like(t)) +
            mamba2Ref(m, w, p + "mamba_decoder.mamba.",
                      rmsNorm(x + t, W(p + "mamba_decoder.input_layernorm.weight"), eps));
        ++j;
    }
    out.logits = at::linear(rmsNorm(x, W("model.final_layernorm.weight"), eps),
                            W("model.embed_tokens.weight"));
    return out;
}

/// Zamba2 in small, as transformers names it: 5 layers, hybrid at 1, 2 and 4 sharing 2 blocks
/// (layers 1 and 2 hold them; 4 runs block 0 again with adapters of its own, slot 2), 4 heads
/// of 2·32/4 = 16 with RoPE and attention adapters of rank 8; Mamba-2 of 4 heads of 16 in
/// 2 groups of state 8, scans of 16 tokens; the time step clamped at 0.6 (about half of the drawn
/// steps fall below) and rms_norm_eps away from the gated norm's 1e-5, so that both show.
json zamba2Config() {
    return {{"architectures", {"Zamba2ForCausalLM"}},
            {"model_type", "zamba2"},
            {"vocab_size", 101},
            {"hidden_size", 32},
            {"intermediate_size", 48},
            {"num_hidden_layers", 5},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 4},
            {"layers_block_type", {"mamba", "hybrid", "hybrid", "mamba", "hybrid"}},
            {"num_mem_blocks", 2},
            {"use_shared_attention_adapter", true},
            {"adapter_rank", 8},
            {"use_mem_rope", true},
            {"rope_theta", 10000.0},
            {"mamba_d_state", 8},
            {"mamba_d_conv", 4},
            {"mamba_expand", 2},
            {"mamba_ngroups", 2},
            {"n_mamba_heads", 4},
            {"chunk_size", 16},
            {"time_step_min", 0.6},
            {"hidden_act", "gelu"},
            {"rms_norm_eps", 0.02},
            {"max_position_embeddings", 512},
            {"tie_word_embeddings", true},
            {"dtype", "float32"}};
}

/// The other form in small: one block, no attention adapters, no RoPE (as Zamba2-2.7B), grouped
/// KV heads, the first layer hybrid.
json plainConfig() {
    json c = zamba2Config();
    c["num_mem_blocks"] = 1;
    c["use_shared_attention_adapter"] = false;
    c["use_mem_rope"] = false;
    c["num_key_value_heads"] = 2;
    c["layers_block_type"] = {"hybrid", "mamba", "mamba", "hybrid", "mamba"};
    return c;
}

/// Draws the model of `config` into `dir` with its shared attention's q and k projections a
/// quarter of makeModel's: sharp attention on [x | embeddings] makes the drawn model so sensitive
/// that float32 rounding alone (the reference itself in float32) moves the logits by 5·10⁻⁴.
Weights makeZamba2(const QString& dir, const json& config, uint64_t seed) {
    return makeModel(dir, config, seed, 0.1, [](const std::string& n, at::Tensor& t) {
        if (n.find("q_proj.weight") != std::string::npos ||
            n.find("k_proj.weight") != std::string::npos)
            t.mul_(0.25);
    });
}

/// The tolerance for a model drawn as `w` from `c` (roundingTolerance): a drawn Zamba2 passes
/// float32 rounding from layer to layer with gains of up to 5 (a float32 reference is 10⁻⁴ to
/// 5·10⁻⁴ from the float64 one).
double tolerance(const json& c, const Weights& w) {
    return roundingTolerance(w, [&](const Weights& v, const std::vector<int64_t>& ids) {
        return referenceZamba2(c, v, ids);
    });
}

} // namespace

class TestModelZamba2 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    /// Zamba2 follows the reference: logits, the hybrid layers' q, k and v in one pass and in
    /// chunks, greedy steps through the Mamba-2 states and the KV cache; on 150 tokens too (ten
    /// scans of 16, the state carried). The reference with the scores scaled by head_dim^-½, the
    /// embeddings first in the block's input, or the block's output added to the residual stream
    /// differs from it (each knob matters on these weights).
    void zamba2FollowsTransformers() {
        const QString dir = m_dir.filePath(QStringLiteral("zamba2"));
        const json c = zamba2Config();
        const Weights w = makeZamba2(dir, c, 41);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("zamba2"));
        const auto ref = [&](const std::vector<int64_t>& ids) {
            return referenceZamba2(c, w, ids);
        };
        const double tol = tolerance(c, w);
        followsReference(*model, ref, QStringLiteral("zamba2"), 42, tol);
        const std::vector<int64_t> ids = randomIds(150, 101, 7);
        const at::Tensor logits = model->logits(ids);
        SPARQLAB_VERIFY_CLOSE(logits, referenceZamba2(c, w, ids).logits, 2 * tol,
                              QStringLiteral("zamba2, 150 tokens"));
        const std::vector<int64_t> few = randomIds(20, 101, 8);
        const at::Tensor exact = referenceZamba2(c, w, few).logits;
        for (const RefOut& other : {referenceZamba2(c, w, few, 1.0 / 4.0),
                                    referenceZamba2(c, w, few, 0, /*embeddingsFirst=*/true),
                                    referenceZamba2(c, w, few, 0, false, /*residualT=*/true)})
            QVERIFY(largestDifference(other.logits, exact) > 10 * tol);
    }

    /// A checkpoint re-saved with the shared block under every hybrid layer that runs it (block 0
    /// under layer 4 as well as 1) opens, and computes what the published layout does.
    void aResavedCheckpointOpens() {
        const QString dir = m_dir.filePath(QStringLiteral("zamba2-once"));
        const json c = zamba2Config();
        const Weights w = makeZamba2(dir, c, 45);
        std::vector<std::pair<std::string, at::Tensor>> list;
        int64_t copies = 0;
        for (const auto& [n, t] : w) {
            list.emplace_back(n, t.to(at::kFloat));
            const std::string from = "model.layers.1.shared_transformer.";
            if (n.rfind(from, 0) == 0 && n.find("adapter_list") == std::string::npos) {
                list.emplace_back("model.layers.4.shared_transformer." + n.substr(from.size()),
                                  t.to(at::kFloat));
                ++copies;
            }
        }
        // input_layernorm, pre_ff_layernorm, q, k, v, o, gate_up, down
        QCOMPARE(copies, int64_t{8});
        const QString resaved = m_dir.filePath(QStringLiteral("zamba2-resaved"));
        QVERIFY(QDir().mkpath(resaved));
        test::writeFile(resaved + "/config.json", QByteArray::fromStdString(c.dump(1)));
        model::writeSafetensors((resaved + "/model.safetensors").toStdString(), list);
        const std::vector<int64_t> ids = randomIds(20, 101, 4);
        const at::Tensor once = model::Model::open(dir.toStdString())->logits(ids);
        QVERIFY(at::equal(model::Model::open(resaved.toStdString())->logits(ids), once));
    }

    /// One block, no attention adapters, no RoPE, grouped KV heads, a hybrid first layer.
    void plainFormFollows() {
        const QString dir = m_dir.filePath(QStringLiteral("zamba2-plain"));
        const json c = plainConfig();
        const Weights w = makeZamba2(dir, c, 51);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().nKvHeads, int64_t{2});
        QCOMPARE(model->config().nopeLayers(), (std::vector<int64_t>{0, 3}));
        followsReference(
            *model, [&](const std::vector<int64_t>& ids) { return referenceZamba2(c, w, ids); },
            QStringLiteral("zamba2-plain"), 52, tolerance(c, w));
    }

    /// The clamp of the time step at time_step_min and the gated norm's own eps bite on these
    /// weights: a reference without the clamp, or with rms_norm_eps in the gated norms, is far
    /// from this one (ten tolerances), so the checks above see both.
    void clampAndEpsBite() {
        const QString dir = m_dir.filePath(QStringLiteral("zamba2-knobs"));
        json c = zamba2Config();
        const Weights w = makeZamba2(dir, c, 61);
        const std::vector<int64_t> ids = randomIds(20, 101, 3);
        const at::Tensor exact = referenceZamba2(c, w, ids).logits;
        json unclamped = c;
        unclamped["time_step_min"] = 0.0;
        const double tol = tolerance(c, w);
        QVERIFY(largestDifference(referenceZamba2(unclamped, w, ids).logits, exact) > 10 * tol);
        // A model with rms_norm_eps (0.02) in its gated norms would be the reference with that
        // eps: far from it too.
        QVERIFY(largestDifference(referenceZamba2(c, w, ids, 0, false, false, 0.02).logits, exact) >
                10 * tol);
        QCOMPARE(model::parseModelConfig(c.dump(), "c.json").linear.gateNormEps, 1e-5);
    }

    /// The model's description and a capture's: the kinds (hybrid layers "attention + Mamba-2"),
    /// head_dim 2·hidden/heads, the scale (head_dim / 2)^-½, the parameter count of blocks held
    /// once, the shared blocks in info, Zamba2Config's defaults.
    void whatTheModelSays() {
        const QString dir = m_dir.filePath(QStringLiteral("zamba2-info"));
        verifyParameterCount(dir, zamba2Config(), 71);
        verifyParameterCount(m_dir.filePath(QStringLiteral("zamba2-info-plain")), plainConfig(),
                             72);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        const std::string hyb = "attention + Mamba-2", mam = "Mamba-2";
        QCOMPARE(info.layerKinds, (std::vector<std::string>{mam, hyb, hyb, mam, hyb}));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{1, 2, 4}));
        QCOMPARE(info.uncapturedKinds(), std::string("2 Mamba-2"));
        QCOMPARE(info.linearStateElements, int64_t{4 * 8 * 16 + 3 * (2 * 2 * 8 + 64)});
        const model::ModelConfig& mc = model->config();
        QCOMPARE(mc.headDim, int64_t{16});
        QCOMPARE(mc.attnScale, 1.0 / std::sqrt(8.0));
        QCOMPARE(mc.attentionInput(), int64_t{64});
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("zamba2.h5")).toStdString());
        const auto j = json::parse(model::attentionFeaturesJson(mc));
        QCOMPARE(j["shared_blocks"]["blocks"], json(2));
        QCOMPARE(j["shared_blocks"]["adapter_rank"], json(8));
        QCOMPARE(j["shared_blocks"]["attention_adapters"], json(true));
        // Zamba2Config's defaults: 54 layers, hybrid at 6, 12, …, 42, 47 and 51; 4·hidden MLP.
        json d = {{"architectures", {"Zamba2ForCausalLM"}}, {"hidden_size", 64}};
        const model::ModelConfig dc = model::parseModelConfig(d.dump(), "c.json");
        QCOMPARE(dc.nLayers, int64_t{54});
        QCOMPARE(dc.attentionLayers(), (std::vector<int64_t>{6, 12, 18, 24, 30, 36, 42, 47, 51}));
        QCOMPARE(dc.intermediateSize, int64_t{256});
        QCOMPARE(dc.linear.dtMin, 0.001);
        QCOMPARE(dc.linear.valueDim, int64_t{16}); // 2·64 / 8 heads
        QCOMPARE(dc.hiddenAct, std::string("gelu"));
        QVERIFY(dc.tieEmbeddings);
        // transformers' newest name for the Mamba-2 layers, and layer_types for the list.
        json renamed = zamba2Config();
        renamed["layer_types"] = renamed["layers_block_type"];
        renamed.erase("layers_block_type");
        renamed["layer_types"][0] = "linear_attention";
        QCOMPARE(model::parseModelConfig(renamed.dump(), "c.json").attentionLayers(),
                 (std::vector<int64_t>{1, 2, 4}));
    }

    /// A decode step reads a shared block at every hybrid layer that runs it: traffic's weights
    /// are the checkpoint's tensors with block 0 (under layer 1, run by hybrid layers 1 and 4)
    /// counted twice, its adapters (each a layer's own) once. More blocks than hybrid layers: only
    /// as many exist.
    void trafficReadsTheBlockAtEachLayer() {
        const QString dir = m_dir.filePath(QStringLiteral("zamba2-traffic"));
        const Weights w = makeZamba2(dir, zamba2Config(), 81);
        const model::ModelConfig mc = model::Model::open(dir.toStdString())->config();
        double read = 0;
        for (const auto& [n, t] : w) {
            const bool block0 = n.rfind("model.layers.1.shared_transformer.", 0) == 0 &&
                                n.find("adapter_list") == std::string::npos;
            read += static_cast<double>(t.numel()) * (block0 ? 2 : 1);
        }
        const analysis::DecodeTraffic t =
            analysis::decodeTraffic(mc, 64, attention::defaultConfig(attention::Method::Dense));
        QCOMPARE(t.weights, read);
        json many = zamba2Config();
        many["num_mem_blocks"] = 5;
        QCOMPARE(model::parseModelConfig(many.dump(), "c.json").shared.blocks, int64_t{3});
    }

    /// Configs that Zamba2's classes refuse, or that SparQ Lab cannot follow: one line naming
    /// the key.
    void badZamba2Configs() {
        verifyBadConfigs(
            zamba2Config(), "zamba2/config.json",
            {
                {[](json& c) { c["layers_block_type"][1] = "g"; }, "layers_block_type"},
                {[](json& c) { c["layers_block_type"][1] = "attention"; }, "layers_block_type"},
                {[](json& c) { c["layers_block_type"].erase(0); }, "layers_block_type"},
                {[](json& c) { c["layers_block_type"] = std::vector<std::string>(5, "mamba"); },
                 "layers_block_type"},
                {[](json& c) {
                     c["hybrid_layer_ids"] = {1, 3, 4};
                 },
                 "hybrid_layer_ids"},
                {[](json& c) { c["num_key_value_heads"] = 2; }, "num_key_value_heads"},
                {[](json& c) { c["num_attention_heads"] = 5; }, "num_attention_heads"},
                {[](json& c) { c["attention_head_dim"] = 8; }, "attention_head_dim"},
                {[](json& c) { c["mamba_headdim"] = 8; }, "mamba_headdim"},
                {[](json& c) { c["n_mamba_heads"] = 5; }, "n_mamba_heads"},
                {[](json& c) { c["mamba_ngroups"] = 3; }, "mamba_ngroups"},
                {[](json& c) { c["use_conv_bias"] = false; }, "use_conv_bias"},
                {[](json& c) { c["add_bias_linear"] = true; }, "add_bias_linear"},
                {[](json& c) { c["use_long_context"] = true; }, "use_long_context"},
                {[](json& c) { c["time_step_min"] = -1; }, "time_step_min"},
                {[](json& c) { c["num_mem_blocks"] = 0; }, "num_mem_blocks"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelZamba2)
#include "test_model_zamba2.moc"
