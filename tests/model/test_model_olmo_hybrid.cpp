// OLMo Hybrid (OlmoHybridForCausalLM, transformers' modular_olmo_hybrid.py) against a reference
// forward written here in float64: Gated DeltaNet layers as their token-by-token recurrence in
// Llama's pre-norm block, attention layers as OLMo 3's post-norm block; logits, the attention
// layers' q, k and v, greedy steps through the states and the cache, the published layout of
// three convolutions and a joined one, what the model says of itself, and one-line errors for
// bad configs (docs/learned-sparse-and-hybrid.md §16).

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

#include <cmath>

using namespace sparqlab;
using namespace sparqlab::test::f64;

namespace {

/// The reference's knobs, each what transformers does by default, so that a test can show that
/// it matters: β's factor (linear_allow_neg_eigval: 2), the output norm's eps (1e-5, not
/// rms_norm_eps), the attention layers' norms after attention and the MLP (OLMo 3's).
struct Knobs {
    double betaScale = 0; ///< 0: as the config says
    double gateEps = 1e-5;
    bool attentionPostNorm = true;
};

/// OlmoHybridGatedDeltaNet on h [T, hidden] (weights under `p`): q, k and v each through its
/// causal convolution and SiLU (or one conv1d over [q | k | v] where the weights hold it), q and
/// k repeated to the value heads, l2-normalised (eps 1e-6 inside the root), q × dk^-½; per value
/// head the state S [dk, dv] decays by exp(g), takes k ⊗ β(v − Sᵀk), reads Sᵀq; each head's
/// output RMS-normalised with o_norm's weight, × SiLU(g_proj(h)), through o_proj.
at::Tensor gatedDeltaNetRef(const json& c, const Weights& w, const std::string& p,
                            const at::Tensor& h, const Knobs& knobs) {
    const int64_t T = h.size(0), hidden = c["hidden_size"];
    const int64_t Hk = c["linear_num_key_heads"], Hv = c["linear_num_value_heads"];
    const int64_t dk = c.value("linear_key_head_dim", 3 * hidden / (4 * Hk));
    const int64_t dv = c.value("linear_value_head_dim", 2 * dk);
    auto W = [&](const std::string& n) { return w.at(p + n); };
    const at::Tensor qp = at::linear(h, W("q_proj.weight")), kp = at::linear(h, W("k_proj.weight")),
                     vp = at::linear(h, W("v_proj.weight"));
    at::Tensor q, k, v;
    if (w.count(p + "conv1d.weight")) {
        const at::Tensor all =
            at::silu(causalConvRef(at::cat({qp, kp, vp}, -1), W("conv1d.weight"), {}));
        q = all.narrow(1, 0, Hk * dk);
        k = all.narrow(1, Hk * dk, Hk * dk);
        v = all.narrow(1, 2 * Hk * dk, Hv * dv);
    } else {
        q = at::silu(causalConvRef(qp, W("q_conv1d.weight"), {}));
        k = at::silu(causalConvRef(kp, W("k_conv1d.weight"), {}));
        v = at::silu(causalConvRef(vp, W("v_conv1d.weight"), {}));
    }
    const int64_t r = Hv / Hk;
    auto l2 = [](const at::Tensor& x) { return x * at::rsqrt(x.pow(2).sum(-1, true) + 1e-6); };
    q = l2(q.view({T, Hk, dk}).repeat_interleave(r, 1)) / std::sqrt(static_cast<double>(dk));
    k = l2(k.view({T, Hk, dk}).repeat_interleave(r, 1));
    v = v.view({T, Hv, dv});
    const double scale = knobs.betaScale > 0                        ? knobs.betaScale
                         : c.value("linear_allow_neg_eigval", true) ? 2.0
                                                                    : 1.0;
    const at::Tensor beta = at::sigmoid(at::linear(h, W("b_proj.weight"))) * scale; // [T, Hv]
    const at::Tensor g =
        -W("A_log").exp() * at::softplus(at::linear(h, W("a_proj.weight")) + W("dt_bias"));
    at::Tensor S = at::zeros({Hv, dk, dv}, h.options()); // (float32 for roundingTolerance)
    at::Tensor o = at::zeros({T, Hv, dv}, h.options());
    for (int64_t t = 0; t < T; ++t) {
        S = S * g[t].exp().view({Hv, 1, 1});
        const at::Tensor kt = k[t], u = at::matmul(kt.unsqueeze(1), S).squeeze(1); // Sᵀk
        const at::Tensor delta = (v[t] - u) * beta[t].unsqueeze(-1);
        S = S + kt.unsqueeze(-1) * delta.unsqueeze(1);
        o[t] = at::matmul(q[t].unsqueeze(1), S).squeeze(1); // Sᵀq
    }
    const at::Tensor gate = at::linear(h, W("g_proj.weight")).view({T, Hv, dv});
    const at::Tensor y = rmsNorm(o, W("o_norm.weight"), knobs.gateEps) * at::silu(gate);
    return at::linear(y.reshape({T, Hv * dv}), W("o_proj.weight"));
}

/// OlmoHybridForCausalLM.forward on ids as transformers computes it: a linear layer
/// x + gdn(input_layernorm(x)), then + mlp(post_attention_layernorm(·)); an attention layer
/// x + post_attention_layernorm(attention(x)) with q and k RMS-normalised over the whole
/// projection (RoPE where `theta`, its base, is above 0), then +
/// post_feedforward_layernorm(mlp(·)).
RefOut referenceOlmoHybrid(const json& c, const Weights& w, const std::vector<int64_t>& ids,
                           double theta, const Knobs& knobs = {}) {
    const int64_t L = c["num_hidden_layers"], h = c["hidden_size"], H = c["num_attention_heads"];
    const int64_t KV = c["num_key_value_heads"], D = h / H, T = static_cast<int64_t>(ids.size());
    const double eps = c["rms_norm_eps"];
    const std::vector<std::string> types = c["layer_types"];
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        if (types[static_cast<size_t>(l)] == "linear_attention") {
            x = x + gatedDeltaNetRef(c, w, p + "linear_attn.",
                                     rmsNorm(x, W(p + "input_layernorm.weight"), eps), knobs);
            x = x +
                swigluRef(w, p + "mlp.", rmsNorm(x, W(p + "post_attention_layernorm.weight"), eps));
            continue;
        }
        const std::string a = p + "self_attn.";
        at::Tensor q = rmsNorm(at::linear(x, W(a + "q_proj.weight")), W(a + "q_norm.weight"), eps)
                           .view({T, H, D})
                           .transpose(0, 1);
        at::Tensor k = rmsNorm(at::linear(x, W(a + "k_proj.weight")), W(a + "k_norm.weight"), eps)
                           .view({T, KV, D})
                           .transpose(0, 1);
        const at::Tensor v = at::linear(x, W(a + "v_proj.weight")).view({T, KV, D}).transpose(0, 1);
        if (theta > 0) {
            q = rope(q, defaultInv(theta, D), D, true);
            k = rope(k, defaultInv(theta, D), D, true);
        }
        out.q.push_back(q);
        out.k.push_back(k);
        out.v.push_back(v);
        const at::Tensor att =
            at::linear(causalAttention(q, k, v, 1.0 / std::sqrt(static_cast<double>(D)))
                           .transpose(0, 1)
                           .reshape({T, H * D}),
                       W(a + "o_proj.weight"));
        if (!knobs.attentionPostNorm) { // (Llama's block on the same weights, for contrast)
            x = x + att;
            x = x + swigluRef(w, p + "mlp.", x);
            continue;
        }
        x = x + rmsNorm(att, W(p + "post_attention_layernorm.weight"), eps);
        x = x +
            rmsNorm(swigluRef(w, p + "mlp.", x), W(p + "post_feedforward_layernorm.weight"), eps);
    }
    out.logits = at::linear(
        rmsNorm(x, W("model.norm.weight"), eps),
        W(c.value("tie_word_embeddings", false) ? "model.embed_tokens.weight" : "lm_head.weight"));
    return out;
}

/// OLMo Hybrid in small with RoPE (base 10000): 6 layers, attention at 2 and 5; 4 heads of 8 over
/// 2 KV heads; Gated DeltaNet of 2 key heads of 8 and 4 value heads of 16 (each key head read by
/// two value heads), kernel 4; rms_norm_eps 0.02, away from the output norm's 1e-5, so that
/// both show.
json roPEConfig() {
    return {{"architectures", {"OlmoHybridForCausalLM"}},
            {"model_type", "olmo_hybrid"},
            {"vocab_size", 101},
            {"hidden_size", 32},
            {"intermediate_size", 48},
            {"num_hidden_layers", 6},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"layer_types",
             {"linear_attention", "linear_attention", "full_attention", "linear_attention",
              "linear_attention", "full_attention"}},
            {"linear_num_key_heads", 2},
            {"linear_num_value_heads", 4},
            {"linear_key_head_dim", 8},
            {"linear_value_head_dim", 16},
            {"linear_conv_kernel_dim", 4},
            {"linear_allow_neg_eigval", true},
            {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}},
            {"hidden_act", "silu"},
            {"rms_norm_eps", 0.02},
            {"max_position_embeddings", 512},
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

/// The released form in small: rope_theta null (no position encoding anywhere), as many KV and
/// linear heads as heads, the linear heads' widths derived (int(0.75·32/4) = 6 and 12), the
/// default layer_types (attention at 3 and 7 of 8).
json releasedConfig() {
    json c = roPEConfig();
    for (const char* k : {"layer_types", "linear_num_key_heads", "linear_num_value_heads",
                          "linear_key_head_dim", "linear_value_head_dim"})
        c.erase(k);
    c["num_hidden_layers"] = 8;
    c["num_key_value_heads"] = 4;
    c["rope_parameters"] = {{"rope_theta", nullptr}, {"rope_type", "default"}};
    c["rms_norm_eps"] = 1e-6;
    return c;
}

/// The config as the reference reads it: the defaults that transformers fills in written out.
json filled(json c) {
    const int64_t L = c["num_hidden_layers"], H = c["num_attention_heads"];
    if (!c.contains("layer_types")) {
        std::vector<std::string> kinds(static_cast<size_t>(L), "linear_attention");
        for (int64_t l = 3; l < L; l += 4)
            kinds[static_cast<size_t>(l)] = "full_attention";
        c["layer_types"] = kinds;
    }
    for (const char* k : {"linear_num_key_heads", "linear_num_value_heads"})
        if (!c.contains(k))
            c[k] = H;
    return c;
}

/// Draws the model of `config` into `dir` with its attention's q and k projections a quarter of
/// makeModel's (q and k norms of gain 2 after them make the scores sharp otherwise).
Weights makeOlmoHybrid(const QString& dir, const json& config, uint64_t seed) {
    return makeModel(dir, config, seed, 0.1, [](const std::string& n, at::Tensor& t) {
        if (n.find("self_attn.q_proj.weight") != std::string::npos ||
            n.find("self_attn.k_proj.weight") != std::string::npos)
            t.mul_(0.25);
    });
}

/// The tolerance against referenceOlmoHybrid (roundingTolerance): the drawn models' attention
/// layers read values a few times larger than the embeddings, whose float32 rounding alone moves
/// them by about 10⁻⁴.
double tolerance(const json& c, const Weights& w, double theta) {
    return roundingTolerance(w, [&](const Weights& v, const std::vector<int64_t>& ids) {
        return referenceOlmoHybrid(c, v, ids, theta);
    });
}

} // namespace

class TestModelOlmoHybrid : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    /// With RoPE and grouped heads: logits, the attention layers' q, k and v in one pass and in
    /// chunks, greedy steps through the Gated DeltaNet states and the KV cache; and 150 tokens.
    void followsTransformersWithRope() {
        const QString dir = m_dir.filePath(QStringLiteral("rope"));
        const json c = roPEConfig();
        const Weights w = makeOlmoHybrid(dir, c, 11);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("olmo_hybrid"));
        QCOMPARE(model->config().nopeLayers(), std::vector<int64_t>{});
        const double tol = tolerance(c, w, 10000.0);
        followsReference(
            *model,
            [&](const std::vector<int64_t>& ids) {
                return referenceOlmoHybrid(c, w, ids, 10000.0);
            },
            QStringLiteral("olmo_hybrid"), 12, tol);
        const std::vector<int64_t> ids = randomIds(150, 101, 13);
        SPARQLAB_VERIFY_CLOSE(model->logits(ids), referenceOlmoHybrid(c, w, ids, 10000.0).logits,
                              2 * tol, QStringLiteral("olmo_hybrid, 150 tokens"));
    }

    /// The released form: no position encoding, the derived widths, the default layer kinds.
    void followsTransformersReleasedForm() {
        const QString dir = m_dir.filePath(QStringLiteral("released"));
        const json c = releasedConfig();
        const Weights w = makeOlmoHybrid(dir, c, 21);
        auto model = model::Model::open(dir.toStdString());
        const model::ModelConfig& mc = model->config();
        QCOMPARE(mc.attentionLayers(), (std::vector<int64_t>{3, 7}));
        QCOMPARE(mc.nopeLayers(), (std::vector<int64_t>{3, 7}));
        QVERIFY(!mc.usesRope(3) && !mc.usesRope(7));
        QCOMPARE(mc.linear.keyDim, int64_t{6});
        QCOMPARE(mc.linear.valueDim, int64_t{12});
        const json f = filled(c);
        followsReference(
            *model,
            [&](const std::vector<int64_t>& ids) { return referenceOlmoHybrid(f, w, ids, 0); },
            QStringLiteral("olmo_hybrid released"), 22, tolerance(f, w, 0));
    }

    /// A checkpoint holding each linear layer's three convolutions joined in one conv1d
    /// ([q | k | v] rows, as transformers' newest module holds them) opens and computes exactly
    /// what the published three do.
    void joinedConvolutionsOpen() {
        const QString dir = m_dir.filePath(QStringLiteral("three"));
        const json c = roPEConfig();
        const Weights w = makeOlmoHybrid(dir, c, 31);
        std::vector<std::pair<std::string, at::Tensor>> list;
        Weights joinedW;
        for (const auto& [n, t] : w) {
            const size_t at = n.find("q_conv1d.weight");
            if (n.find("k_conv1d") != std::string::npos || n.find("v_conv1d") != std::string::npos)
                continue;
            if (at == std::string::npos) {
                list.emplace_back(n, t.to(at::kFloat));
                joinedW[n] = t;
                continue;
            }
            const std::string p = n.substr(0, at);
            const at::Tensor all =
                at::cat({t, w.at(p + "k_conv1d.weight"), w.at(p + "v_conv1d.weight")}, 0);
            list.emplace_back(p + "conv1d.weight", all.to(at::kFloat));
            joinedW[p + "conv1d.weight"] = all;
        }
        const QString joined = m_dir.filePath(QStringLiteral("joined"));
        QVERIFY(QDir().mkpath(joined));
        test::writeFile(joined + "/config.json", QByteArray::fromStdString(c.dump(1)));
        model::writeSafetensors((joined + "/model.safetensors").toStdString(), list);
        auto model = model::Model::open(joined.toStdString());
        QVERIFY(!model->config().linear.separateConvs);
        const std::vector<int64_t> ids = randomIds(20, 101, 4);
        QVERIFY(at::equal(model->logits(ids), model::Model::open(dir.toStdString())->logits(ids)));
        SPARQLAB_VERIFY_CLOSE(
            model->logits(ids), referenceOlmoHybrid(c, joinedW, ids, 10000.0).logits,
            tolerance(c, joinedW, 10000.0), QStringLiteral("olmo_hybrid, one conv1d"));
    }

    /// β doubled, the output norm's own eps and the attention layers' post-norms each bite on
    /// these weights: the reference without any one of them is far from it (a hundred times the
    /// tolerance), so the checks above see all three; linear_allow_neg_eigval false is β = σ(b).
    void knobsBite() {
        const QString dir = m_dir.filePath(QStringLiteral("knobs"));
        const json c = roPEConfig();
        const Weights w = makeOlmoHybrid(dir, c, 41);
        const std::vector<int64_t> ids = randomIds(20, 101, 3);
        const at::Tensor exact = referenceOlmoHybrid(c, w, ids, 10000.0).logits;
        for (const Knobs& k :
             {Knobs{.betaScale = 1.0}, Knobs{.gateEps = 0.02}, Knobs{.attentionPostNorm = false}})
            QVERIFY(largestDifference(referenceOlmoHybrid(c, w, ids, 10000.0, k).logits, exact) >
                    1e-2);
        json plain = c;
        plain["linear_allow_neg_eigval"] = false;
        QCOMPARE(model::parseModelConfig(plain.dump(), "c.json").linear.betaScale, 1.0);
        const QString pdir = m_dir.filePath(QStringLiteral("plain-beta"));
        const Weights pw = makeOlmoHybrid(pdir, plain, 42);
        SPARQLAB_VERIFY_CLOSE(model::Model::open(pdir.toStdString())->logits(ids),
                              referenceOlmoHybrid(plain, pw, ids, 10000.0).logits,
                              tolerance(plain, pw, 10000.0),
                              QStringLiteral("olmo_hybrid, β = σ(b)"));
    }

    /// What the model says of itself and of a capture: the kinds, the heads' width (hidden /
    /// heads, or head_dim where the file gives it), the norms' weight in float32, the parameter
    /// count, the recurrent state, OlmoHybridConfig's
    /// defaults, RoPE as transformers 5 decides it, the legacy layer names.
    void whatTheModelSays() {
        const QString dir = m_dir.filePath(QStringLiteral("info"));
        verifyParameterCount(dir, roPEConfig(), 51);
        verifyParameterCount(m_dir.filePath(QStringLiteral("info-released")), releasedConfig(), 52);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        const std::string gdn = "Gated DeltaNet", att = "attention";
        QCOMPARE(info.layerKinds, (std::vector<std::string>{gdn, gdn, att, gdn, gdn, att}));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{2, 5}));
        QCOMPARE(info.linearStateElements, int64_t{4 * 8 * 16 + 3 * (2 * 2 * 8 + 4 * 16)});
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("olmo.h5")).toStdString());
        json hd = roPEConfig();
        hd["head_dim"] = 16; // (set as an attribute, which the attention and RoPE read)
        QCOMPARE(model::parseModelConfig(hd.dump(), "c.json").headDim, int64_t{16});
        // OLMo's RMSNorm multiplies by its weight in float32 before the cast (bf16 models), in
        // OLMo 2 and 3 as here.
        QVERIFY(model->config().normWeightInFloat);
        for (const char* arch : {"Olmo2ForCausalLM", "Olmo3ForCausalLM"})
            QVERIFY(model::parseModelConfig(json{{"architectures", {arch}}}.dump(), "c.json")
                        .normWeightInFloat);
        // OlmoHybridConfig's defaults: 32 layers, attention at 3, 7, …, 31; 30 heads of 128;
        // Gated DeltaNet heads of 96 and 192; β doubled; no tied embeddings; RoPE of base 10000
        // where nothing names it (transformers 5 fills the base in).
        const json d = {{"architectures", {"OlmoHybridForCausalLM"}}};
        const model::ModelConfig dc = model::parseModelConfig(d.dump(), "c.json");
        QCOMPARE(dc.nLayers, int64_t{32});
        QCOMPARE(dc.attentionLayers(), (std::vector<int64_t>{3, 7, 11, 15, 19, 23, 27, 31}));
        QCOMPARE(dc.headDim, int64_t{128});
        QCOMPARE(dc.vocabSize, int64_t{100352});
        QCOMPARE(dc.linear.keyHeads, int64_t{30});
        QCOMPARE(dc.linear.keyDim, int64_t{96});
        QCOMPARE(dc.linear.valueDim, int64_t{192});
        QCOMPARE(dc.linear.betaScale, 2.0);
        QCOMPARE(dc.linear.gateNormEps, 1e-5);
        QVERIFY(!dc.tieEmbeddings);
        QVERIFY(dc.usesRope(3));
        QCOMPARE(dc.rope.theta, 10000.0);
        json nullTop = d;
        nullTop["rope_theta"] = nullptr;
        QVERIFY(!model::parseModelConfig(nullTop.dump(), "c.json").usesRope(3));
        json ropeNull = d; // (null rope_parameters are filled in as absent ones)
        ropeNull["rope_parameters"] = nullptr;
        QVERIFY(model::parseModelConfig(ropeNull.dump(), "c.json").usesRope(3));
        ropeNull["rope_theta"] = nullptr;
        QVERIFY(!model::parseModelConfig(ropeNull.dump(), "c.json").usesRope(3));
        // Fewer than four layers: the last one attention; the hybrids' legacy names.
        json two = roPEConfig();
        two.erase("layer_types");
        two["num_hidden_layers"] = 2;
        QCOMPARE(model::parseModelConfig(two.dump(), "c.json").attentionLayers(),
                 (std::vector<int64_t>{1}));
        json legacy = roPEConfig();
        legacy["layer_types"] = {"mamba", "attention", "mamba", "mamba", "mamba", "attention"};
        QCOMPARE(model::parseModelConfig(legacy.dump(), "c.json").attentionLayers(),
                 (std::vector<int64_t>{1, 5}));
    }

    /// A decode step reads every tensor of the checkpoint once (no layer shares one), of the
    /// embedding only the token's row.
    void trafficReadsTheCheckpoint() {
        const QString dir = m_dir.filePath(QStringLiteral("traffic"));
        const Weights w = makeOlmoHybrid(dir, roPEConfig(), 61);
        const model::ModelConfig mc = model::Model::open(dir.toStdString())->config();
        double read = 0;
        for (const auto& [n, t] : w)
            read += static_cast<double>(n == "model.embed_tokens.weight" ? t.size(1) : t.numel());
        const analysis::DecodeTraffic t =
            analysis::decodeTraffic(mc, 64, attention::defaultConfig(attention::Method::Dense));
        QCOMPARE(t.weights, read);
    }

    /// Configs that OlmoHybridConfig refuses, or that SparQ Lab cannot follow: one line naming
    /// the key.
    void badOlmoHybridConfigs() {
        verifyBadConfigs(
            roPEConfig(), "olmo_hybrid/config.json",
            {
                {[](json& c) { c["layer_types"][1] = "sliding_attention"; }, "layer_types"},
                {[](json& c) { c["layer_types"].erase(0); }, "layer_types"},
                {[](json& c) {
                     c["layer_types"] = std::vector<std::string>(6, "linear_attention");
                 },
                 "layer_types"},
                {[](json& c) { c["layer_types"] = std::vector<std::string>(6, "full_attention"); },
                 "layer_types"},
                {[](json& c) { c["linear_num_value_heads"] = 3; }, "linear_num_value_heads"},
                {[](json& c) { c["num_attention_heads"] = 5; }, "num_attention_heads"},
                {[](json& c) { c["linear_conv_kernel_dim"] = 0; }, "linear_conv_kernel_dim"},
                {[](json& c) { c["linear_key_head_dim"] = -8; }, "linear_key_head_dim"},
                {[](json& c) { c["linear_allow_neg_eigval"] = "yes"; }, "linear_allow_neg_eigval"},
                {[](json& c) { c["rope_parameters"]["rope_theta"] = 0.5; },
                 "rope_parameters.rope_theta"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelOlmoHybrid)
#include "test_model_olmo_hybrid.moc"
