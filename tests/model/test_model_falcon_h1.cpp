// Falcon-H1 (FalconH1ForCausalLM, transformers' modeling_falcon_h1.py) against a reference
// forward written here in float64: in every layer RoPE attention and a Mamba-2 layer (the plain
// recurrence, token by token) side by side on the same normed input, their outputs summed, then
// a SwiGLU MLP, with the µP multipliers where transformers applies them; logits, every layer's
// q, k and v, greedy steps through the cache, bf16's rounding of the µP vector, what a capture
// and a decode step say, and one-line errors for bad configs
// (docs/learned-sparse-and-hybrid.md §11).

#include "float64_reference.h"
#include "test_support.h"

#include "analysis/decode_traffic.h"
#include "capture/capture_file.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>

using namespace sparqlab;
using namespace sparqlab::test::f64;

namespace {

double num(const json& c, const char* key, double def) {
    return c.contains(key) ? c[key].get<double>() : def;
}

/// FalconH1Mixer's shape: mamba_d_ssm channels, one norm group per mamba_n_groups, the gate
/// by mamba_rms_norm and mamba_norm_before_gate, the µP vector from ssm_multipliers.
Mamba2Shape mambaShape(const json& c) {
    Mamba2Shape m;
    m.heads = c["mamba_n_heads"];
    m.groups = c["mamba_n_groups"];
    m.state = c["mamba_d_state"];
    m.kernel = c["mamba_d_conv"];
    m.headDim = c["mamba_d_ssm"].get<int64_t>() / m.heads;
    m.convBias = c.value("mamba_conv_bias", true);
    m.projBias = c.value("mamba_proj_bias", false);
    m.outBias = c.value("projectors_bias", false);
    if (c.contains("time_step_limit")) {
        m.dtMin = c["time_step_limit"][0];
        m.dtMax = c["time_step_limit"][1];
    }
    m.eps = c["rms_norm_eps"];
    m.normGroups = m.groups;
    m.gate = !c.value("mamba_rms_norm", false)         ? "none"
             : c.value("mamba_norm_before_gate", true) ? "after"
                                                       : "before";
    if (c.contains("ssm_multipliers"))
        for (size_t i = 0; i < 5; ++i)
            m.scale[i] = c["ssm_multipliers"][i];
    return m;
}

/// FalconH1ForCausalLM.forward on ids.
RefOut referenceFalcon(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), L = c["num_hidden_layers"];
    const int64_t H = c["num_attention_heads"], KV = c["num_key_value_heads"];
    const int64_t D = c.value("head_dim", c["hidden_size"].get<int64_t>() / H);
    const double eps = c["rms_norm_eps"];
    const bool attnBias = c.value("attention_bias", false), mlpBias = c.value("mlp_bias", false);
    const double gm = c.contains("mlp_multipliers") ? c["mlp_multipliers"][0].get<double>() : 1;
    const double dm = c.contains("mlp_multipliers") ? c["mlp_multipliers"][1].get<double>() : 1;
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong)) *
                   num(c, "embedding_multiplier", 1);
    const at::Tensor inv = defaultInv(c["rope_theta"], D);
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const at::Tensor h = rmsNorm(x, W(p + "input_layernorm.weight"), eps);
        const at::Tensor m =
            mamba2Ref(mambaShape(c), w, p + "mamba.", h * num(c, "ssm_in_multiplier", 1)) *
            num(c, "ssm_out_multiplier", 1);
        const std::string a = p + "self_attn.";
        auto proj = [&](const std::string& n, const at::Tensor& in, bool bias) {
            const at::Tensor y = at::linear(in, W(a + n + ".weight"));
            return bias ? y + W(a + n + ".bias") : y;
        };
        const at::Tensor ha = h * num(c, "attention_in_multiplier", 1);
        const at::Tensor q =
            rope(proj("q_proj", ha, attnBias).view({T, H, D}).transpose(0, 1), inv, D, true);
        const at::Tensor k = rope((proj("k_proj", ha, attnBias) * num(c, "key_multiplier", 1))
                                      .view({T, KV, D})
                                      .transpose(0, 1),
                                  inv, D, true);
        const at::Tensor v = proj("v_proj", ha, attnBias).view({T, KV, D}).transpose(0, 1);
        out.q.push_back(q);
        out.k.push_back(k);
        out.v.push_back(v);
        const at::Tensor o = causalAttention(q, k, v, 1 / std::sqrt(static_cast<double>(D)));
        const at::Tensor att = proj("o_proj", o.transpose(0, 1).reshape({T, H * D}), attnBias) *
                               num(c, "attention_out_multiplier", 1);
        x = x + (m + att);
        const at::Tensor h2 = rmsNorm(x, W(p + "pre_ff_layernorm.weight"), eps);
        const std::string f = p + "feed_forward.";
        auto lin = [&](const std::string& n, const at::Tensor& in) {
            const at::Tensor y = at::linear(in, W(f + n + ".weight"));
            return mlpBias ? y + W(f + n + ".bias") : y;
        };
        x = x + lin("down_proj", lin("up_proj", h2) * at::silu(lin("gate_proj", h2) * gm)) * dm;
    }
    const bool tied = c.value("tie_word_embeddings", false);
    out.logits = at::linear(rmsNorm(x, W("model.final_layernorm.weight"), eps),
                            W(tied ? "model.embed_tokens.weight" : "lm_head.weight")) *
                 num(c, "lm_head_multiplier", 1);
    return out;
}

/// Falcon-H1 0.5B's shape in small, its multipliers as published (every one away from 1): 3
/// layers, head_dim 24 (q wider than the hidden size), 8 SSM heads of 12 (mamba_d_ssm 96, not
/// expand × hidden) in 2 groups, chunks of 16, no gated norm (mamba_rms_norm false), untied.
json falconConfig() {
    return {{"architectures", {"FalconH1ForCausalLM"}},
            {"model_type", "falcon_h1"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"intermediate_size", 80},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 24},
            {"max_position_embeddings", 512},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 1e11},
            {"mamba_d_ssm", 96},
            {"mamba_n_heads", 8},
            {"mamba_d_head", 12},
            {"mamba_n_groups", 2},
            {"mamba_d_state", 16},
            {"mamba_d_conv", 4},
            {"mamba_expand", 2},
            {"mamba_chunk_size", 16},
            {"mamba_conv_bias", true},
            {"mamba_proj_bias", false},
            {"mamba_rms_norm", false},
            {"mamba_norm_before_gate", false},
            {"attention_in_multiplier", 1.0},
            {"attention_out_multiplier", 0.9375},
            {"embedding_multiplier", 5.656854249492381},
            {"key_multiplier", 0.390625},
            {"lm_head_multiplier", 0.0390625},
            {"mlp_multipliers", {0.8838834764831844, 0.5859375}},
            {"ssm_in_multiplier", 1.25},
            {"ssm_multipliers",
             {0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738}},
            {"ssm_out_multiplier", 0.23570226039551587},
            {"projectors_bias", false},
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

/// Falcon-H1 7B's and 34B's kind: the gated norm after the gate (mamba_rms_norm true,
/// mamba_norm_before_gate false), biases everywhere (attention, MLP, in_proj, out_proj), no
/// convolution bias, mamba_d_ssm null (expand × hidden), one group, a clamp that bites, tied.
json normedConfig() {
    json c = falconConfig();
    c["mamba_rms_norm"] = true;
    c["mamba_d_ssm"] = nullptr;
    c["mamba_n_heads"] = 16;
    c["mamba_d_head"] = "auto";
    c["mamba_n_groups"] = 1;
    c["attention_bias"] = true;
    c["mlp_bias"] = true;
    c["mamba_proj_bias"] = true;
    c["projectors_bias"] = true;
    c["mamba_conv_bias"] = false;
    c["time_step_limit"] = {0.6, 0.9};
    c["tie_word_embeddings"] = true;
    c["attention_in_multiplier"] = 0.75;
    return c;
}

/// The gated norm before the gate: norm(y)·w·SiLU(z) (mamba_norm_before_gate true, the config
/// class's default), in 4 groups of 2 heads.
json normFirstConfig() {
    json c = falconConfig();
    c["mamba_rms_norm"] = true;
    c.erase("mamba_norm_before_gate");
    c["mamba_n_groups"] = 4;
    return c;
}

} // namespace

class TestModelFalconH1 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    void followsReference(const json& config, const QString& name, uint64_t seed) {
        json c = config;
        if (c["mamba_d_ssm"].is_null()) // (for the reference: expand × hidden)
            c["mamba_d_ssm"] = c["mamba_expand"].get<int64_t>() * c["hidden_size"].get<int64_t>();
        const QString dir = m_dir.filePath(name);
        const Weights w = makeModel(dir, config, seed);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("falcon_h1"));
        test::f64::followsReference(
            *model, [&](const std::vector<int64_t>& ids) { return referenceFalcon(c, w, ids); },
            name, 5);
    }

private Q_SLOTS:
    /// 0.5B's kind (no gated norm, every multiplier as published), 7B's (the norm after the gate,
    /// biases, tied, a clamp) and the norm before the gate follow the reference.
    void falconFollowsTransformers() {
        followsReference(falconConfig(), QStringLiteral("small"), 31);
        followsReference(normedConfig(), QStringLiteral("normed"), 37);
        followsReference(normFirstConfig(), QStringLiteral("norm-first"), 43);
        json sized = normedConfig(); // (the reference reads mamba_d_ssm)
        sized["mamba_d_ssm"] = 128;
        verifyTheClampBites(m_dir.filePath(QStringLiteral("clamp")), sized, 37, referenceFalcon);
    }

    /// Each multiplier changes the logits (so the reference check above sees where it is put).
    void everyMultiplierCounts() {
        const json base = falconConfig();
        const QString dir = m_dir.filePath(QStringLiteral("multipliers"));
        const Weights w = makeModel(dir, base, 41);
        const std::vector<int64_t> ids = randomIds(20, 101, 3);
        const at::Tensor logits = referenceFalcon(base, w, ids).logits;
        for (const char* key :
             {"attention_in_multiplier", "attention_out_multiplier", "embedding_multiplier",
              "key_multiplier", "ssm_in_multiplier", "ssm_out_multiplier"}) {
            json c = base;
            c[key] = c[key].get<double>() * 1.5;
            QVERIFY2(largestDifference(referenceFalcon(c, w, ids).logits, logits) > 1e-3, key);
        }
        for (size_t i = 0; i < 5; ++i) {
            json c = base;
            c["ssm_multipliers"][i] = c["ssm_multipliers"][i].get<double>() * 1.5;
            QVERIFY2(largestDifference(referenceFalcon(c, w, ids).logits, logits) > 1e-3,
                     qPrintable(QStringLiteral("ssm_multipliers[%1]").arg(i)));
        }
        for (size_t i = 0; i < 2; ++i) {
            json c = base;
            c["mlp_multipliers"][i] = c["mlp_multipliers"][i].get<double>() * 1.5;
            QVERIFY2(largestDifference(referenceFalcon(c, w, ids).logits, logits) > 1e-3,
                     qPrintable(QStringLiteral("mlp_multipliers[%1]").arg(i)));
        }
    }

    /// In bfloat16 the µP vector is a buffer of the model's dtype, so in_proj's output is
    /// multiplied by each multiplier rounded to bf16; the embedding multiplier and ssm_in are
    /// Python floats, not rounded. Layer 0's convolution input [x | B | C] is exactly that.
    void mupVectorRoundsInBf16() {
        const json config = falconConfig();
        const QString dir = m_dir.filePath(QStringLiteral("bf16"));
        const Weights w = makeModel(dir, config, 47);
        std::vector<std::pair<std::string, at::Tensor>> list;
        for (const auto& [n, t] : w)
            list.emplace_back(n, t.to(at::kBFloat16));
        QFile::remove(dir + "/model.safetensors");
        model::writeSafetensors((dir + "/model.safetensors").toStdString(), list);
        model::ModelOpenOptions o;
        o.compute = model::ComputeDtype::Stored;
        auto m = model::Model::open(dir.toStdString(), o);
        QCOMPARE(m->computeDtype(), at::kBFloat16);
        at::Tensor embedded, normed, convIn;
        m->net()->setTrace([&](int64_t layer, const std::string& what, const at::Tensor& t) {
            if (what == "embed")
                embedded = t.clone();
            if (layer == 0 && what == "mixer_in")
                normed = t.clone();
            if (layer == 0 && what == "lin_conv_in")
                convIn = t.clone();
        });
        const std::vector<int64_t> ids = randomIds(12, 101, 5);
        m->logits(ids);
        m->net()->setTrace({});
        QVERIFY(embedded.defined() && normed.defined() && convIn.defined());
        // The embedding × 5.6568… as a Python float, then RMSNorm (float32, rounded, × w).
        auto bf = [](const std::string& n, const Weights& ws) {
            return ws.at(n).to(at::kBFloat16);
        };
        const double em = config["embedding_multiplier"];
        auto embedding = [&](double scale) { // (in float32, as PyTorch 2 multiplies bf16)
            return (at::embedding(bf("model.embed_tokens.weight", w), at::tensor(ids, at::kLong))
                        .to(at::kFloat) *
                    scale)
                .to(at::kBFloat16);
        };
        QVERIFY2(at::equal(embedded.view_as(embedding(em)), embedding(em)),
                 "the embedding × embedding_multiplier differs from transformers' in bf16");
        QVERIFY(!at::equal(embedding(em),
                           embedding(at::scalar_tensor(em, at::kBFloat16).item<double>())));
        auto normedAt = [&](double scale) {
            const at::Tensor f = embedding(scale).to(at::kFloat);
            const at::Tensor n = (f * at::rsqrt(f.pow(2).mean(-1, true) + 1e-5)).to(at::kBFloat16);
            return bf("model.layers.0.input_layernorm.weight", w) * n;
        };
        QVERIFY(at::equal(normed.view_as(normedAt(em)), normedAt(em)));
        // in_proj(x × 1.25) × the µP vector of bf16, its x, B and C parts
        const at::Tensor proj =
            at::linear(normedAt(em) * 1.25, bf("model.layers.0.mamba.in_proj.weight", w));
        auto xbc = [&](bool rounded) {
            const int64_t ends[] = {0, 96, 192, 224, 256};
            std::vector<at::Tensor> parts;
            for (size_t p = 1; p < 4; ++p) {
                const double s = config["ssm_multipliers"][p];
                const at::Tensor part = proj.narrow(-1, ends[p], ends[p + 1] - ends[p]);
                parts.push_back(rounded ? part * at::scalar_tensor(s, at::kBFloat16)
                                        : (part.to(at::kFloat) * s).to(at::kBFloat16));
            }
            return at::cat(parts, -1).to(at::kFloat);
        };
        QVERIFY2(at::equal(convIn, xbc(true)), "in_proj × the µP vector differs from bf16's");
        QVERIFY(!at::equal(convIn, xbc(false)));
    }

    /// A capture holds every layer (each has attention), each also a Mamba-2 state; the
    /// description, the parameter count of the checkpoint, the multipliers, and a decode step
    /// reading both the cache and the state of every layer.
    void whatTheModelSays() {
        for (const json& config : {falconConfig(), normedConfig(), normFirstConfig()})
            verifyParameterCount(m_dir.filePath(QStringLiteral("info")), config, 41);
        const QString dir = m_dir.filePath(QStringLiteral("info"));
        makeModel(dir, falconConfig(), 41);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.nLayers, int64_t{3});
        QCOMPARE(info.layerKinds, std::vector<std::string>(3, "attention + Mamba-2"));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{0, 1, 2}));
        QCOMPARE(info.linearKind(), std::string("Mamba-2")); // the state's kind
        QCOMPARE(info.linearLayerCount(), int64_t{3});
        // [heads, d_state, d_head] + the convolution's last 3 inputs of x, B and C
        QCOMPARE(info.linearStateElements, int64_t{8 * 16 * 12 + 3 * (96 + 2 * 2 * 16)});
        // info names the multipliers (and a model without them has none to name)
        const auto features = json::parse(model::attentionFeaturesJson(model->config()));
        QCOMPARE(features["mup_multipliers"]["key"], json(0.390625));
        QCOMPARE(features["mup_multipliers"]["mamba_in_proj"], falconConfig()["ssm_multipliers"]);
        QCOMPARE(features["mup_multipliers"]["mlp_down"], json(0.5859375));
        QCOMPARE(features["rope"]["theta"], json(1e11));
        json plain = falconConfig();
        for (const char* k :
             {"attention_in_multiplier", "attention_out_multiplier", "key_multiplier",
              "ssm_in_multiplier", "ssm_out_multiplier", "ssm_multipliers", "mlp_multipliers"})
            plain.erase(k);
        QVERIFY(!json::parse(model::attentionFeaturesJson(
                                 model::parseModelConfig(plain.dump(), "config.json")))
                     .contains("mup_multipliers"));
        const analysis::DecodeTraffic t = analysis::decodeTraffic(model->config(), 100, {}, 2.0, 1);
        QCOMPARE(t.attentionLayers, int64_t{3});
        QCOMPARE(t.linearLayers, int64_t{3});
        QCOMPARE(t.linearState, 2.0 * 3 * static_cast<double>(info.linearStateElements));
        QCOMPARE(t.attentionCache, 3.0 * 2 * 2 * 24 * 101);
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("falcon.h5")).toStdString());
    }

    /// Configs transformers refuses (and an embedding multiplier of 0, which would make every
    /// input the same): one line naming the key.
    void badFalconConfigs() {
        verifyBadConfigs(
            falconConfig(), "falcon/config.json",
            {
                {[](json& c) { c["mamba_n_heads"] = 7; }, "mamba_n_heads"},
                {[](json& c) { c["mamba_d_head"] = 10; }, "mamba_d_head"},
                {[](json& c) { c["mamba_n_groups"] = 3; }, "mamba_n_groups"},
                {[](json& c) {
                     c["ssm_multipliers"] = {1, 1, 1};
                 },
                 "ssm_multipliers"},
                {[](json& c) { c["ssm_multipliers"] = "1"; }, "ssm_multipliers"},
                {[](json& c) { c["mlp_multipliers"] = {1}; }, "mlp_multipliers"},
                {[](json& c) { c["key_multiplier"] = "0.4"; }, "key_multiplier"},
                {[](json& c) { c["embedding_multiplier"] = 0; }, "embedding_multiplier"},
                {[](json& c) { c["hidden_act"] = "swiglu"; }, "hidden_act"},
                {[](json& c) {
                     c["time_step_limit"] = {0.5, 0.1};
                 },
                 "time_step_limit"},
                {[](json& c) { c["mamba_d_conv"] = 0; }, "mamba_d_conv"},
                {[](json& c) { c["mamba_rms_norm"] = "yes"; }, "mamba_rms_norm"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelFalconH1)
#include "test_model_falcon_h1.moc"
