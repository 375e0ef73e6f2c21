// LFM2 (Lfm2ForCausalLM, transformers' modular_lfm2.py) against a reference forward written here
// in float64: its short convolutions (in_proj [B | C | x], C·conv(B·x) with the convolution
// written out tap by tap, out_proj) and its attention with per-head q and k norms before RoPE,
// each layer a pre-norm block with a SwiGLU MLP of the width LFM2 derives from block_ff_dim;
// logits, the attention layers' q, k and v, greedy steps through the cache, LFM2-MoE's experts
// behind its sigmoid router, what a capture and a decode step say, and one-line errors for bad
// configs (docs/learned-sparse-and-hybrid.md §12).

#include "float64_reference.h"
#include "test_support.h"

#include "analysis/decode_traffic.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

using namespace sparqlab;
using namespace sparqlab::test::f64;

namespace {

/// The layers' kinds as the config gives them: layer_types, else full_attn_idxs.
std::vector<std::string> kindsOf(const json& c) {
    if (c.contains("layer_types"))
        return c["layer_types"].get<std::vector<std::string>>();
    std::vector<std::string> kinds(c["num_hidden_layers"].get<size_t>(), "conv");
    for (const int64_t l : c["full_attn_idxs"])
        kinds[static_cast<size_t>(l)] = "full_attention";
    return kinds;
}

/// Lfm2ForCausalLM.forward on ids.
RefOut referenceLfm2(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), Hd = c["hidden_size"];
    const int64_t H = c["num_attention_heads"], KV = c["num_key_value_heads"], D = Hd / H;
    const int64_t K = c.value("conv_L_cache", 3);
    const double eps = c["norm_eps"];
    const bool bias = c.value("conv_bias", false);
    auto W = [&](const std::string& n) { return w.at(n); };
    auto lin = [&](const std::string& n, const at::Tensor& in, bool b = false) {
        const at::Tensor y = at::linear(in, W(n + ".weight"));
        return b ? y + W(n + ".bias") : y;
    };
    const std::vector<std::string> kinds = kindsOf(c);
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    const at::Tensor inv = defaultInv(c["rope_theta"], D);
    RefOut out;
    for (size_t l = 0; l < kinds.size(); ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const at::Tensor h = rmsNorm(x, W(p + "operator_norm.weight"), eps);
        at::Tensor y;
        if (kinds[l] == "conv") { // out[t] = bias + Σ_j w[:, 0, j]·(B·x)[t − (K − 1) + j]
            const at::Tensor proj = lin(p + "conv.in_proj", h, bias);
            const at::Tensor bx = proj.narrow(1, 0, Hd) * proj.narrow(1, 2 * Hd, Hd);
            at::Tensor co = at::zeros({T, Hd}, at::kDouble);
            if (bias)
                co = co + W(p + "conv.conv.bias");
            const at::Tensor cw = W(p + "conv.conv.weight");
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < K; ++j)
                    if (t - (K - 1) + j >= 0)
                        co[t] += cw.select(2, j).select(1, 0) * bx[t - (K - 1) + j];
            y = lin(p + "conv.out_proj", proj.narrow(1, Hd, Hd) * co, bias);
        } else { // q and k normalised per head, then RoPE
            const std::string a = p + "self_attn.";
            auto heads = [&](const std::string& n, int64_t count, const char* norm) {
                at::Tensor t = lin(a + n, h).view({T, count, D});
                if (norm)
                    t = rmsNorm(t, W(a + norm + ".weight"), eps);
                return t.transpose(0, 1);
            };
            const at::Tensor q = rope(heads("q_proj", H, "q_layernorm"), inv, D, true);
            const at::Tensor k = rope(heads("k_proj", KV, "k_layernorm"), inv, D, true);
            const at::Tensor v = heads("v_proj", KV, nullptr);
            out.q.push_back(q);
            out.k.push_back(k);
            out.v.push_back(v);
            const at::Tensor o = causalAttention(q, k, v, 1 / std::sqrt(static_cast<double>(D)));
            y = lin(a + "out_proj", o.transpose(0, 1).reshape({T, H * D}));
        }
        x = x + y;
        const at::Tensor h2 = rmsNorm(x, W(p + "ffn_norm.weight"), eps);
        const std::string f = p + "feed_forward.";
        if (static_cast<int64_t>(l) < c.value("num_dense_layers", int64_t{1} << 30)) {
            x = x + lin(f + "w2", at::silu(lin(f + "w1", h2)) * lin(f + "w3", h2));
            continue;
        }
        // Lfm2MoeSparseMoeBlock: σ(gate·h); the top k of σ + expert_bias; those σ over their sum
        // + 1e-6, × routed_scaling_factor; each expert's w2(SiLU(w1·h)·w3·h) weighted
        const at::Tensor sig = at::sigmoid(lin(f + "gate", h2));
        const bool biased = c.value("use_expert_bias", true);
        const at::Tensor idx = std::get<1>((biased ? sig + W(f + "expert_bias") : sig)
                                               .topk(c["num_experts_per_tok"].get<int64_t>()));
        at::Tensor wt = sig.gather(1, idx);
        if (c.value("norm_topk_prob", true))
            wt = wt / (wt.sum(-1, true) + 1e-6);
        wt = wt * c.value("routed_scaling_factor", 1.0);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < idx.size(1); ++j) {
                const std::string e =
                    f + "experts." + std::to_string(idx[t][j].item<int64_t>()) + ".";
                x[t] +=
                    wt[t][j] * lin(e + "w2", at::silu(lin(e + "w1", h2[t])) * lin(e + "w3", h2[t]));
            }
    }
    const bool tied = c.value("tie_embedding", c.value("tie_word_embeddings", true));
    out.logits = at::linear(rmsNorm(x, W("model.embedding_norm.weight"), eps),
                            W(tied ? "model.embed_tokens.weight" : "lm_head.weight"));
    return out;
}

/// LFM2 1.2B's kind in small, in its own checkpoint's names: 6 layers, attention at 2 and 4
/// (full_attn_idxs), the rest short convolutions of 3 taps; block_ff_dim 100, auto-adjusted to
/// 96 (⌊2·100/3⌋ = 66, rounded up to a multiple of 32); tied by tie_embedding.
json lfm2Config() {
    return {{"architectures", {"Lfm2ForCausalLM"}},
            {"model_type", "lfm2"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"block_ff_dim", 100},
            {"block_auto_adjust_ff_dim", true},
            {"block_ffn_dim_multiplier", 1.0},
            {"block_multiple_of", 32},
            {"num_hidden_layers", 6},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"max_position_embeddings", 512},
            {"norm_eps", 1e-5},
            {"full_attn_idxs", {2, 4}},
            {"conv_L_cache", 3},
            {"conv_bias", false},
            {"rope_theta", 1e6},
            {"tie_embedding", true},
            {"dtype", "float32"}};
}

/// transformers' names and the rest of the switches: layer_types, biased convolutions of 4
/// taps, intermediate_size 100 without a multiplier (66, not rounded), untied.
json biasedConfig() {
    json c = lfm2Config();
    for (const char* k : {"block_ff_dim", "full_attn_idxs", "tie_embedding"})
        c.erase(k);
    c["intermediate_size"] = 100;
    c["block_ffn_dim_multiplier"] = nullptr;
    c["layer_types"] = {"full_attention", "conv", "conv", "full_attention", "conv", "conv"};
    c["conv_L_cache"] = 4;
    c["conv_bias"] = true;
    c["tie_word_embeddings"] = false;
    return c;
}

/// LFM2 8B-A1B's kind in small: 5 layers, the first dense, experts after it (8, 3 per token)
/// behind a sigmoid router with a wide expert_bias, × 1.5.
json moeConfig() {
    json c = lfm2Config();
    for (const char* k : {"block_ff_dim", "block_auto_adjust_ff_dim", "block_ffn_dim_multiplier",
                          "block_multiple_of"})
        c.erase(k);
    c["architectures"] = {"Lfm2MoeForCausalLM"};
    c["model_type"] = "lfm2_moe";
    c["num_hidden_layers"] = 5;
    c["intermediate_size"] = 80;
    c["moe_intermediate_size"] = 24;
    c["num_dense_layers"] = 1;
    c["num_experts"] = 8;
    c["num_experts_per_tok"] = 3;
    c["routed_scaling_factor"] = 1.5;
    c["full_attn_idxs"] = {1, 3};
    return c;
}

} // namespace

class TestModelLfm2 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    void followsReference(const json& config, const QString& name, uint64_t seed) {
        const QString dir = m_dir.filePath(name);
        const Weights w = makeModel(dir, config, seed, 0.1, wideBias("expert_bias"));
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, config["model_type"].get<std::string>());
        test::f64::followsReference(
            *model, [&](const std::vector<int64_t>& ids) { return referenceLfm2(config, w, ids); },
            name, 5);
    }

private Q_SLOTS:
    /// Both configs follow the reference: logits, q, k, v in one pass and in chunks, and greedy
    /// steps that continue each convolution from its last inputs.
    void lfm2FollowsTransformers() {
        followsReference(lfm2Config(), QStringLiteral("lfm2"), 31);
        followsReference(biasedConfig(), QStringLiteral("biased"), 37);
    }

    /// LFM2-MoE: its experts as published (one module each, w1, w3, w2), then packed as
    /// transformers 5 saves them (gate_up_proj [E, 2I, h] rows [w1 | w3], down_proj [E, h, I]);
    /// the expert bias chooses (it changes the logits) and, in bf16, stays float32.
    void lfm2MoeFollowsTransformers() {
        followsReference(moeConfig(), QStringLiteral("moe"), 43);
        const QString dir = m_dir.filePath(QStringLiteral("moe-packed"));
        const Weights w = makeModel(dir, moeConfig(), 47, 0.1, wideBias("expert_bias"));
        writePackedExperts(dir, w, "w1", "w3", "w2");
        auto model = model::Model::open(dir.toStdString());
        QVERIFY(model->config().moe.layout == model::ExpertLayout::FusedRows);
        test::f64::followsReference(
            *model,
            [&](const std::vector<int64_t>& ids) { return referenceLfm2(moeConfig(), w, ids); },
            QStringLiteral("moe-packed"), 5);
        // The bias chooses: without it the logits differ.
        json unbiased = moeConfig();
        unbiased["use_expert_bias"] = false;
        const std::vector<int64_t> ids = randomIds(20, 101, 3);
        QVERIFY(largestDifference(referenceLfm2(unbiased, w, ids).logits,
                                  referenceLfm2(moeConfig(), w, ids).logits) > 1e-3);
        // bf16: the expert bias stays float32, as transformers registers it
        const QString hdir = m_dir.filePath(QStringLiteral("moe-bf16"));
        QDir().mkpath(hdir);
        QFile::copy(dir + "/config.json", hdir + "/config.json");
        verifyBiasStaysFloat32(hdir, w, "model.layers.2.feed_forward.expert_bias",
                               "model.layers.2.feed_forward.gate.weight");
    }

    /// Lfm2MLP's width from block_ff_dim: ⌊2f/3⌋, × the multiplier, rounded up to
    /// block_multiple_of (only with a multiplier); as given without the adjustment.
    void mlpWidth() {
        auto width = [](json c) {
            return model::parseModelConfig(c.dump(), "config.json").intermediateSize;
        };
        json c = lfm2Config();
        QCOMPARE(width(c), int64_t{96});
        c["block_ff_dim"] = 12288; // LFM2 1.2B
        c["block_multiple_of"] = 256;
        QCOMPARE(width(c), int64_t{8192});
        c["block_ff_dim"] = 6656; // LFM2 350M: ⌊4437.3⌋ → 4608
        QCOMPARE(width(c), int64_t{4608});
        c["block_ffn_dim_multiplier"] = nullptr;
        QCOMPARE(width(c), int64_t{4437});
        c["block_ffn_dim_multiplier"] = 1.5;
        QCOMPARE(width(c), int64_t{6656}); // ⌊1.5·4437⌋ = 6655 → 6656
        c["block_auto_adjust_ff_dim"] = false;
        QCOMPARE(width(c), int64_t{6656});
        c["intermediate_size"] = 5000; // block_ff_dim wins, as transformers pops it over
        QCOMPARE(width(c), int64_t{6656});
        QCOMPARE(width(biasedConfig()), int64_t{66});
    }

    /// A capture holds the attention layers; the short convolutions keep a state of their last
    /// conv_L_cache − 1 inputs, which a decode step reads and writes; the parameter count is the
    /// checkpoint's.
    void whatTheModelSays() {
        for (const json& config : {lfm2Config(), biasedConfig(), moeConfig()})
            verifyParameterCount(m_dir.filePath(QStringLiteral("info")), config, 41);
        const QString dir = m_dir.filePath(QStringLiteral("info"));
        makeModel(dir, lfm2Config(), 41);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        const std::string conv = "short convolution";
        QCOMPARE(info.layerKinds,
                 (std::vector<std::string>{conv, conv, "attention", conv, "attention", conv}));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{2, 4}));
        QVERIFY(info.skipsLayers());
        QCOMPARE(info.linearKind(), conv);
        QCOMPARE(info.linearLayerCount(), int64_t{4});
        QCOMPARE(info.linearStateElements, int64_t{2 * 64}); // the last 2 of B·x, 64 channels
        const analysis::DecodeTraffic t = analysis::decodeTraffic(model->config(), 100, {}, 2.0, 1);
        QCOMPARE(t.attentionLayers, int64_t{2});
        QCOMPARE(t.linearLayers, int64_t{4});
        QCOMPARE(t.linearState, 2.0 * 4 * 128);
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("lfm2.h5")).toStdString());
        // Without a convolution the model is no hybrid: no kinds, no state.
        json attention = lfm2Config();
        attention["full_attn_idxs"] = {0, 1, 2, 3, 4, 5};
        QVERIFY(model::parseModelConfig(attention.dump(), "c.json").layerKinds.empty());
    }

    /// Configs transformers refuses, or that leave nothing to capture: one line naming the key.
    /// (An index of full_attn_idxs past the last layer names none, as in Lfm2Config.)
    void badLfm2Configs() {
        json past = lfm2Config();
        past["full_attn_idxs"] = {2, 6, 60};
        QCOMPARE(model::parseModelConfig(past.dump(), "c.json").attentionLayers(),
                 (std::vector<int64_t>{2}));
        verifyBadConfigs(
            lfm2Config(), "lfm2/config.json",
            {
                {[](json& c) { c["full_attn_idxs"] = json::array({6}); }, "full_attn_idxs"},
                {[](json& c) { c["full_attn_idxs"] = json::array(); }, "full_attn_idxs"},
                {[](json& c) { c["full_attn_idxs"] = json::array({"2"}); }, "full_attn_idxs"},
                {[](json& c) {
                     c["layer_types"] = {"conv", "attention"};
                 },
                 "layer_types"},
                {[](json& c) {
                     c["layer_types"] = {"conv", "conv", "conv", "conv", "conv", "conv"};
                 },
                 "layer_types"},
                {[](json& c) { c["conv_L_cache"] = 0; }, "conv_L_cache"},
                {[](json& c) { c["conv_bias"] = "no"; }, "conv_bias"},
                {[](json& c) { c["norm_eps"] = "1e-5"; }, "norm_eps"},
                {[](json& c) { c["block_multiple_of"] = 0; }, "block_multiple_of"},
                {[](json& c) { c["block_ffn_dim_multiplier"] = 0; }, "block_ffn_dim_multiplier"},
                {[](json& c) { c["block_ff_dim"] = "big"; }, "block_ff_dim"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelLfm2)
#include "test_model_lfm2.moc"
