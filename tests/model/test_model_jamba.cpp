// Jamba (JambaForCausalLM, transformers' modular_jamba.py) against a reference forward written
// here in float64: its Mamba (Mamba-1) layers as the plain recurrence, token by token, with the
// RMSNorms on dt, B and C (mamba1Ref), attention without positions at every attn_layer_period-th
// layer, experts on every expert_layer_period-th behind a softmax router whose top k are not
// renormalised; logits, the attention layers' q, k and v, greedy steps through the cache, the
// experts as published and packed, what a capture says, and one-line errors for bad configs
// (docs/learned-sparse-and-hybrid.md §13).

#include "float64_reference.h"
#include "test_support.h"

#include "model/model.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>

using namespace sparqlab;
using namespace sparqlab::test::f64;

namespace {

int64_t key(const json& c, const char* name, int64_t def) {
    return c.contains(name) ? c[name].get<int64_t>() : def;
}

/// JambaForCausalLM.forward on ids.
RefOut referenceJamba(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const int64_t L = c["num_hidden_layers"], hidden = c["hidden_size"];
    const int64_t D = hidden / c["num_attention_heads"].get<int64_t>();
    const double eps = c.value("rms_norm_eps", 1e-6);
    const int64_t attnPeriod = key(c, "attn_layer_period", 8);
    const int64_t attnOffset = key(c, "attn_layer_offset", 4);
    const int64_t expertPeriod = key(c, "expert_layer_period", 2);
    const int64_t expertOffset = key(c, "expert_layer_offset", 1);
    const int64_t E = key(c, "num_experts", 16);
    Mamba1Shape m;
    m.inner = key(c, "mamba_expand", 2) * hidden;
    m.state = key(c, "mamba_d_state", 16);
    m.rank = c.value("mamba_dt_rank", json("auto")) == "auto" ? (hidden + 15) / 16
                                                              : c["mamba_dt_rank"].get<int64_t>();
    m.convBias = c.value("mamba_conv_bias", true);
    m.projBias = c.value("mamba_proj_bias", false);
    m.eps = eps;
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const at::Tensor h = rmsNorm(x, W(p + "input_layernorm.weight"), eps);
        x = x + (l % attnPeriod == attnOffset
                     ? attentionRef(c, w, p + "self_attn.", h, 0, 1.0 / std::sqrt(D), out)
                     : mamba1Ref(m, w, p + "mamba.", h));
        const at::Tensor h2 = rmsNorm(x, W(p + "pre_ff_layernorm.weight"), eps);
        const std::string f = p + "feed_forward.";
        if (E > 1 && l % expertPeriod == expertOffset) { // softmax over all, the top k as they are
            const at::Tensor probs = at::softmax(at::linear(h2, W(f + "router.weight")), -1);
            const auto [top, idx] = probs.topk(c.value("num_experts_per_tok", 2), -1);
            at::Tensor moe = at::zeros_like(h2);
            for (int64_t t = 0; t < h2.size(0); ++t)
                for (int64_t j = 0; j < idx.size(1); ++j) {
                    const std::string e =
                        f + "experts." + std::to_string(idx[t][j].item<int64_t>());
                    moe[t] += top[t][j] * swigluRef(w, e + ".", h2[t]);
                }
            x = x + moe;
        } else {
            x = x + swigluRef(w, f, h2);
        }
    }
    out.logits = jambaLogitsRef(c, w, x, eps);
    return out;
}

/// Jamba's pattern in small: 6 layers, attention at 1 and 4 (period 3, offset 1), experts at 1,
/// 3 and 5 (4 of them, 2 per token), an inner width of 128 with a state of 8, dt's rank "auto"
/// (⌈64 / 16⌉ = 4).
json jambaConfig() {
    return {{"architectures", {"JambaForCausalLM"}},
            {"model_type", "jamba"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"intermediate_size", 48},
            {"num_hidden_layers", 6},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"max_position_embeddings", 512},
            {"rms_norm_eps", 1e-6},
            {"attn_layer_period", 3},
            {"attn_layer_offset", 1},
            {"expert_layer_period", 2},
            {"expert_layer_offset", 1},
            {"num_experts", 4},
            {"num_experts_per_tok", 2},
            {"mamba_d_state", 8},
            {"mamba_d_conv", 4},
            {"mamba_expand", 2},
            {"mamba_dt_rank", "auto"},
            {"use_mamba_kernels", false},
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

/// The rest of the layer's paths: tied, in_proj and out_proj with biases and the convolution
/// without, dt of rank 6, 3 taps, one expert (a dense MLP everywhere), num_key_value_heads null
/// (as many as the query heads), one attention layer (3 of period 4).
json plainConfig() {
    json c = jambaConfig();
    c["tie_word_embeddings"] = true;
    c["mamba_proj_bias"] = true;
    c["mamba_conv_bias"] = false;
    c["mamba_dt_rank"] = 6;
    c["mamba_d_conv"] = 3;
    c["num_experts"] = 1;
    c["num_key_value_heads"] = nullptr;
    c["attn_layer_period"] = 4;
    c["attn_layer_offset"] = 3;
    return c;
}

} // namespace

class TestModelJamba : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    void followsReference(const json& config, const QString& name, uint64_t seed) {
        const QString dir = m_dir.filePath(name);
        const Weights w = makeModel(dir, config, seed);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("jamba"));
        test::f64::followsReference(
            *model, [&](const std::vector<int64_t>& ids) { return referenceJamba(config, w, ids); },
            name, seed + 1);
    }

private Q_SLOTS:
    /// Jamba follows the reference (logits, the attention layers' q, k and v in one pass and in
    /// chunks, greedy steps through the convolution's and the scan's states); so does the plain
    /// variant, and so do experts packed as transformers 5 saves them, on 150 tokens too (the
    /// scan's chunks of 64 crossed). (The reference does not
    /// renormalise the top k; a model that did would fail here.)
    void jambaFollowsTransformers() {
        followsReference(jambaConfig(), QStringLiteral("jamba"), 31);
        followsReference(plainConfig(), QStringLiteral("jamba-plain"), 37);
        const QString dir = m_dir.filePath(QStringLiteral("jamba-packed"));
        const Weights w = makeModel(dir, jambaConfig(), 41);
        writePackedExperts(dir, w, "gate_proj", "up_proj", "down_proj");
        auto model = model::Model::open(dir.toStdString());
        QVERIFY(model->config().moe.layout == model::ExpertLayout::FusedRows);
        test::f64::followsReference(
            *model,
            [&](const std::vector<int64_t>& ids) { return referenceJamba(jambaConfig(), w, ids); },
            QStringLiteral("jamba-packed"), 43);
        // 150 tokens: the scan's chunks of 64 carry the state from one to the next.
        const std::vector<int64_t> ids = randomIds(150, 101, 7);
        SPARQLAB_VERIFY_CLOSE_REL(model->logits(ids), referenceJamba(jambaConfig(), w, ids).logits,
                                  1e-4, 1e-4, QStringLiteral("jamba, 150 tokens"));
    }

    /// The model's description and a capture's: the layers' kinds ("Mamba" for the Mamba-1
    /// layers), the attention layers captured, without positions, the state per layer, the
    /// parameter count, dt's rank from "auto".
    void whatTheModelSays() {
        const QString dir = m_dir.filePath(QStringLiteral("jamba-info"));
        verifyParameterCount(dir, jambaConfig(), 47);
        verifyParameterCount(m_dir.filePath(QStringLiteral("jamba-info-plain")), plainConfig(), 53);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.layerKinds, (std::vector<std::string>{"Mamba", "attention", "Mamba", "Mamba",
                                                            "attention", "Mamba"}));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{1, 4}));
        QCOMPARE(info.linearKind(), std::string("Mamba"));
        QCOMPARE(info.uncapturedKinds(), std::string("4 Mamba"));
        // the state [I, N] + the convolution's last 3 inputs of x
        QCOMPARE(info.linearStateElements, int64_t{128 * 8 + 3 * 128});
        QCOMPARE(info.layerUsesRope, (std::vector<int64_t>{0, 0}));
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("jamba.h5")).toStdString());
        for (const auto& [hidden, rank] : {std::pair{64, 4}, {100, 7}, {4096, 256}}) {
            json c = jambaConfig();
            c["hidden_size"] = hidden;
            c["num_attention_heads"] = 4;
            QCOMPARE(model::parseModelConfig(c.dump(), "c.json").linear.dtRank, int64_t{rank});
        }
        // info says the router's top k are not renormalised.
        const auto info2 = json::parse(model::attentionFeaturesJson(model->config()));
        QCOMPARE(info2["experts"]["router"], json("softmax, top k"));
        // Attention on every layer: no hybrid, no kinds.
        json attentionOnly = jambaConfig();
        attentionOnly["attn_layer_period"] = 1;
        attentionOnly["attn_layer_offset"] = 0;
        QVERIFY(model::parseModelConfig(attentionOnly.dump(), "c.json").layerKinds.empty());
    }

    /// Configs JambaConfig refuses, or that leave nothing to capture: one line naming the key.
    void badJambaConfigs() {
        verifyBadConfigs(jambaConfig(), "jamba/config.json",
                         {
                             {[](json& c) { c["attn_layer_offset"] = 3; }, "attn_layer_offset"},
                             {[](json& c) { c["attn_layer_period"] = 0; }, "attn_layer_period"},
                             {[](json& c) {
                                  c["attn_layer_period"] = 8;
                                  c["attn_layer_offset"] = 7;
                              },
                              "attn_layer_offset"},
                             {[](json& c) { c["expert_layer_offset"] = 2; }, "expert_layer_offset"},
                             {[](json& c) { c["num_experts_per_tok"] = 5; }, "num_experts_per_tok"},
                             {[](json& c) { c["mamba_dt_rank"] = "half"; }, "mamba_dt_rank"},
                             {[](json& c) { c["mamba_d_conv"] = 0; }, "mamba_d_conv"},
                             {[](json& c) { c["hidden_act"] = "swish2"; }, "hidden_act"},
                         });
    }
};

QTEST_GUILESS_MAIN(TestModelJamba)
#include "test_model_jamba.moc"
