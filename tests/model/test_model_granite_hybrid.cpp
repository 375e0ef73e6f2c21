// Granite 4.0 (GraniteMoeHybridForCausalLM, transformers' modeling_granitemoehybrid.py) against
// a reference forward written here in float64: its Mamba-2 layers as the plain recurrence, token
// by token (the model scans in chunks, as transformers' torch_forward does), NoPE or RoPE
// attention scaled by attention_multiplier, the shared MLP beside experts routed by a softmax of
// the top-k logits, and Granite's multipliers; logits, the attention layers' q, k and v, greedy
// steps through the cache (the convolution's and the scan's states carried), what a capture
// says of the layers, and one-line errors for bad configs (docs/learned-sparse-and-hybrid.md §9).
// Bamba (BambaForCausalLM, modeling_bamba.py), whose Mamba-2 layers Granite 4.0's are, against its
// own reference: RoPE on half of each head, attention at attn_layer_indices, no multipliers.

#include "float64_reference.h"
#include "test_support.h"

#include "capture/capture_file.h"
#include "model/model.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>

using namespace sparqlab;
using namespace sparqlab::test::f64;

namespace {

/// GraniteMoeHybridMambaLayer's shape: the recurrence of mamba2Ref, one norm group, the time
/// step clamped to time_step_limit.
Mamba2Shape mambaShape(const json& c) {
    Mamba2Shape m;
    m.heads = c["mamba_n_heads"];
    m.groups = c["mamba_n_groups"];
    m.state = c["mamba_d_state"];
    m.kernel = c["mamba_d_conv"];
    m.headDim = c["mamba_expand"].get<int64_t>() * c["hidden_size"].get<int64_t>() / m.heads;
    m.convBias = c.value("mamba_conv_bias", true);
    m.projBias = m.outBias = c.value("mamba_proj_bias", false);
    if (c.contains("time_step_limit")) {
        m.dtMin = c["time_step_limit"][0];
        m.dtMax = c["time_step_limit"][1];
    }
    m.eps = c["rms_norm_eps"];
    return m;
}

/// GraniteMoeHybridForCausalLM.forward on ids.
RefOut referenceGranite(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), L = c["num_hidden_layers"];
    const int64_t D = c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>();
    const double eps = c["rms_norm_eps"], rm = c["residual_multiplier"];
    const int64_t E = c["num_local_experts"];
    const bool rotary = c.value("position_embedding_type", "") == "rope";
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong)) *
                   c["embedding_multiplier"].get<double>();
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const at::Tensor h = rmsNorm(x, W(p + "input_layernorm.weight"), eps);
        at::Tensor y;
        if (c["layer_types"][l] == "mamba") {
            y = mamba2Ref(mambaShape(c), w, p + "mamba.", h);
        } else {
            const double scale = c["attention_multiplier"];
            y = attentionRef(c, w, p + "self_attn.", h, rotary ? D : 0, scale, out);
        }
        x = x + y * rm;
        const at::Tensor h2 = rmsNorm(x, W(p + "post_attention_layernorm.weight"), eps);
        const int64_t f = c["shared_intermediate_size"];
        const at::Tensor gu = at::linear(h2, W(p + "shared_mlp.input_linear.weight"));
        at::Tensor mlp = at::linear(at::silu(gu.narrow(1, 0, f)) * gu.narrow(1, f, f),
                                    W(p + "shared_mlp.output_linear.weight"));
        if (E > 0) { // GraniteMoeHybridTopKGating: softmax of the top k logits
            const std::string m = p + "block_sparse_moe.";
            const auto [top, idx] = at::linear(h2, W(m + "router.layer.weight"))
                                        .topk(c["num_experts_per_tok"].get<int64_t>(), -1);
            const at::Tensor gates = at::softmax(top, -1);
            const int64_t I = c["intermediate_size"];
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < idx.size(1); ++j) {
                    const int64_t e = idx[t][j].item<int64_t>();
                    const at::Tensor u = at::linear(h2[t], W(m + "input_linear.weight")[e]);
                    mlp[t] +=
                        gates[t][j] * at::linear(at::silu(u.narrow(0, 0, I)) * u.narrow(0, I, I),
                                                 W(m + "output_linear.weight")[e]);
                }
        }
        x = x + mlp * rm;
    }
    const bool tied = c.value("tie_word_embeddings", false);
    out.logits = at::linear(rmsNorm(x, W("model.norm.weight"), eps),
                            W(tied ? "model.embed_tokens.weight" : "lm_head.weight")) /
                 c["logits_scaling"].get<double>();
    return out;
}

/// BambaForCausalLM.forward on ids: Granite 4.0's Mamba-2 layers, attention at
/// attn_layer_indices with RoPE on half of each head, a SwiGLU MLP under feed_forward, no
/// multipliers.
RefOut referenceBamba(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const int64_t L = c["num_hidden_layers"];
    const int64_t D = c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>();
    const double eps = c["rms_norm_eps"];
    const json& attention = c["attn_layer_indices"];
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const at::Tensor h = rmsNorm(x, W(p + "input_layernorm.weight"), eps);
        const bool attends = std::find(attention.begin(), attention.end(), l) != attention.end();
        x = x + (attends ? attentionRef(c, w, p + "self_attn.", h, D / 2, 1.0 / std::sqrt(D), out)
                         : mamba2Ref(mambaShape(c), w, p + "mamba.", h));
        const at::Tensor h2 = rmsNorm(x, W(p + "pre_ff_layernorm.weight"), eps);
        x = x + swigluRef(w, p + "feed_forward.", h2);
    }
    out.logits = jambaLogitsRef(c, w, x, eps);
    return out;
}

/// Granite 4.0-H Tiny's shape in small: 4 layers, Mamba-2 and NoPE attention alternating, 8 SSM
/// heads in 2 groups, chunks of 16 (the prompts cross them), 4 experts (2 per token) beside the
/// shared MLP, the multipliers all away from 1.
json graniteConfig() {
    return {{"architectures", {"GraniteMoeHybridForCausalLM"}},
            {"model_type", "granitemoehybrid"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"intermediate_size", 32},
            {"shared_intermediate_size", 48},
            {"num_hidden_layers", 4},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"max_position_embeddings", 512},
            {"rms_norm_eps", 1e-5},
            {"num_local_experts", 4},
            {"num_experts_per_tok", 2},
            {"layer_types", {"mamba", "attention", "mamba", "attention"}},
            {"position_embedding_type", "nope"},
            {"mamba_n_heads", 8},
            {"mamba_n_groups", 2},
            {"mamba_d_state", 16},
            {"mamba_d_head", 16},
            {"mamba_d_conv", 4},
            {"mamba_expand", 2},
            {"mamba_chunk_size", 16},
            {"embedding_multiplier", 6.0},
            {"attention_multiplier", 0.125},
            {"residual_multiplier", 0.5},
            {"logits_scaling", 2.0},
            {"tie_word_embeddings", true},
            {"dtype", "float32"}};
}

/// Granite 4.0-Micro's kind in small: no experts, RoPE, one group; the projections with biases
/// and the convolution without, the time step clamped at 0.3 (a limit that bites).
json microConfig() {
    json c = graniteConfig();
    c["num_local_experts"] = 0;
    c["position_embedding_type"] = "rope";
    c["rope_theta"] = 10000.0;
    c["mamba_n_groups"] = 1;
    c["mamba_d_head"] = "auto";
    c["mamba_proj_bias"] = true;
    c["mamba_conv_bias"] = false;
    c["time_step_limit"] = {0.0, 0.3};
    c["layer_types"] = {"mamba", "mamba", "attention", "mamba"};
    return c;
}

/// The rest of the block's paths: residual_multiplier 1 (the residual adds fused with the next
/// norm), an untied lm_head, attention biases, chunks of 8, 16 SSM heads in 4 groups, no
/// position_embedding_type (NoPE).
json plainResidualConfig() {
    json c = graniteConfig();
    c["residual_multiplier"] = 1.0;
    c["tie_word_embeddings"] = false;
    c["attention_bias"] = true;
    c["mamba_chunk_size"] = 8;
    c["mamba_n_heads"] = 16;
    c["mamba_d_head"] = "auto";
    c["mamba_n_groups"] = 4;
    c.erase("position_embedding_type");
    return c;
}

/// Bamba 9B's shape in small: 5 layers, attention at 1 and 3 (and an index past the last
/// layer, which names none), RoPE on half of each 16-wide head, 8 SSM heads in 2 groups, chunks
/// of 16, untied.
json bambaConfig() {
    return {{"architectures", {"BambaForCausalLM"}},
            {"model_type", "bamba"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"num_hidden_layers", 5},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"max_position_embeddings", 512},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 500.0},
            {"attn_layer_indices", {1, 3, 7}},
            {"mamba_n_heads", 8},
            {"mamba_n_groups", 2},
            {"mamba_d_state", 16},
            {"mamba_d_head", "auto"},
            {"mamba_d_conv", 4},
            {"mamba_expand", 2},
            {"mamba_chunk_size", 16},
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

} // namespace

class TestModelGraniteHybrid : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    /// Logits, q, k and v of the attention layers and greedy steps through the cache against the
    /// reference, for one config.
    void followsReference(const json& config, const QString& name, uint64_t seed) {
        followsReference(config, name, seed, "granitemoehybrid", referenceGranite);
    }
    void followsReference(const json& config, const QString& name, uint64_t seed,
                          const std::string& family,
                          const std::function<RefOut(const json&, const Weights&,
                                                     const std::vector<int64_t>&)>& reference) {
        const QString dir = m_dir.filePath(name);
        const Weights w = makeModel(dir, config, seed);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, family);
        test::f64::followsReference(
            *model, [&](const std::vector<int64_t>& ids) { return reference(config, w, ids); },
            name, seed + 1);
    }

private Q_SLOTS:
    /// Granite 4.0-H (experts, NoPE, two SSM groups) follows the reference; so does a dense one
    /// with RoPE, biased projections, no convolution bias and a clamped time step, where the
    /// clamp changes the logits.
    void graniteHybridFollowsTransformers() {
        followsReference(graniteConfig(), QStringLiteral("granite-h"), 31);
        followsReference(microConfig(), QStringLiteral("granite-micro"), 37);
        followsReference(plainResidualConfig(), QStringLiteral("granite-plain"), 43);
        json attentionOnly = microConfig(); // Granite 4.0-Micro: the class without Mamba-2
        attentionOnly["layer_types"] = {"attention", "attention", "attention", "attention"};
        followsReference(attentionOnly, QStringLiteral("granite-attention"), 47);
        verifyTheClampBites(m_dir.filePath(QStringLiteral("granite-clamp")), microConfig(), 37,
                            referenceGranite);
    }

    /// The model's description and a capture's: the layers' kinds ("Mamba-2" for the SSM
    /// layers), the attention layers captured, the SSM state per layer, the parameter count of
    /// the checkpoint, NoPE on every attention layer.
    void whatTheModelSays() {
        const json config = graniteConfig();
        const QString dir = m_dir.filePath(QStringLiteral("granite-info"));
        verifyParameterCount(dir, config, 41);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.layerKinds,
                 (std::vector<std::string>{"Mamba-2", "attention", "Mamba-2", "attention"}));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{1, 3}));
        QCOMPARE(info.linearKind(), std::string("Mamba-2"));        // what the transfer panel names
        QCOMPARE(info.uncapturedKinds(), std::string("2 Mamba-2")); // what the Layers view names
        // [heads, d_state, d_head] + the convolution's last 3 inputs of x, B and C
        QCOMPARE(info.linearStateElements, int64_t{8 * 16 * 16 + 3 * (128 + 2 * 2 * 16)});
        // NoPE on both attention layers: recorded so, no RoPE frequencies, none in the features
        QCOMPARE(info.layerUsesRope, (std::vector<int64_t>{0, 0}));
        QVERIFY(!info.ropeInvFreq.defined());
        const auto features = json::parse(model::attentionFeaturesJson(model->config()));
        QVERIFY(!features.contains("rope"));
        QCOMPARE(features["nope_layers"], json({1, 3}));
        const auto rows = model::attentionModifierSummary(model->config());
        QVERIFY(std::find(rows.begin(), rows.end(),
                          std::pair<std::string, std::string>{"No RoPE (NoPE)", "layers 1, 3"}) !=
                rows.end());
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("granite.h5")).toStdString());
        // Without a Mamba-2 layer the model is no hybrid: no kinds, no state.
        json attentionOnly = config;
        attentionOnly["layer_types"] = {"attention", "attention", "attention", "attention"};
        const model::ModelConfig plain = model::parseModelConfig(attentionOnly.dump(), "c.json");
        QVERIFY(plain.layerKinds.empty());
        QVERIFY(!json::parse(model::attentionFeaturesJson(plain)).contains("linear_attention"));
    }

    /// Python's json.dumps writes Infinity for time_step_limit's default bound: the file parses,
    /// the bound is ∞; the same literal where a number must be finite, or NaN, is one line naming
    /// the key; a string that holds the word stays as it is.
    void pythonsInfinity() {
        std::string text = graniteConfig().dump();
        text.insert(text.size() - 1, R"(,"time_step_limit": [0.001, Infinity])");
        text.insert(text.size() - 1, R"(,"note": "Infinity, NaN")");
        const model::ModelConfig c = model::parseModelConfig(text, "granite/config.json");
        QCOMPARE(c.linear.dtMin, 0.001);
        QVERIFY(std::isinf(c.linear.dtMax) && c.linear.dtMax > 0);
        for (const char* bad : {R"(,"rms_norm_eps": NaN)", R"(,"rms_norm_eps": -Infinity)",
                                R"(,"time_step_limit": [NaN, 1.0])"}) {
            json j = graniteConfig();
            j.erase("rms_norm_eps");
            std::string t = j.dump();
            t.insert(t.size() - 1, bad);
            try {
                model::parseModelConfig(t, "granite/config.json");
                QFAIL(bad);
            } catch (const model::ConfigError& e) {
                const std::string what = e.what();
                QVERIFY2(what.find("granite/config.json: key '") == 0 &&
                             what.find('\n') == std::string::npos,
                         e.what());
            }
        }
    }

    /// Configs transformers refuses, or that leave nothing to capture: one line naming the key;
    /// the layer kinds under their alias.
    void badGraniteConfigs() {
        verifyBadConfigs(
            graniteConfig(), "granite/config.json",
            {
                {[](json& c) { c["mamba_d_head"] = 12; }, "mamba_d_head"},
                {[](json& c) { c["mamba_n_heads"] = 7; }, "mamba_n_heads"},
                {[](json& c) { c["mamba_n_groups"] = 3; }, "mamba_n_groups"},
                {[](json& c) {
                     c["layer_types"] = {"mamba", "mamba", "mamba", "mamba"};
                 },
                 "layer_types"},
                {[](json& c) { c.erase("layer_types"); }, "layer_types"},
                {[](json& c) {
                     c["layer_types"] = {"mamba", "full_attention", "mamba", "attention"};
                 },
                 "layer_types"},
                {[](json& c) {
                     c["time_step_limit"] = {0.5, 0.1};
                 },
                 "time_step_limit"},
                {[](json& c) { c["time_step_limit"] = {0.1}; }, "time_step_limit"},
                {[](json& c) { c["num_experts_per_tok"] = 5; }, "num_experts_per_tok"},
                {[](json& c) { c["mamba_d_conv"] = 0; }, "mamba_d_conv"},
                {[](json& c) { c["logits_scaling"] = 0; }, "logits_scaling"},
                {[](json& c) {
                     c["layers_block_type"] = {"mamba", "mamba", "mamba", "mamba"};
                 },
                 "layers_block_type"},
            });
        // layers_block_type, transformers' alias of layer_types, is read, and wins over it.
        json alias = graniteConfig();
        alias["layers_block_type"] = {"attention", "mamba", "mamba", "attention"};
        const model::ModelConfig c = model::parseModelConfig(alias.dump(), "c.json");
        QCOMPARE(c.attentionLayers(), (std::vector<int64_t>{0, 3}));
        alias.erase("layer_types");
        QCOMPARE(model::parseModelConfig(alias.dump(), "c.json").attentionLayers(),
                 (std::vector<int64_t>{0, 3}));
    }
    /// Bamba follows its reference: attention with RoPE on half of each head at the listed
    /// layers, Granite 4.0's Mamba-2 layers between them; so does a tied one with biased
    /// projections, no convolution bias, one group and a time step clamped where it bites.
    void bambaFollowsTransformers() {
        followsReference(bambaConfig(), QStringLiteral("bamba"), 53, "bamba", referenceBamba);
        json biased = bambaConfig();
        biased["tie_word_embeddings"] = true;
        biased["attention_bias"] = true;
        biased["mamba_proj_bias"] = true;
        biased["mamba_conv_bias"] = false;
        biased["mamba_n_groups"] = 1;
        biased["time_step_limit"] = {0.0, 0.3};
        biased["attn_layer_indices"] = {0, 4};
        followsReference(biased, QStringLiteral("bamba-biased"), 59, "bamba", referenceBamba);
        verifyTheClampBites(m_dir.filePath(QStringLiteral("bamba-clamp")), biased, 59,
                            referenceBamba);
    }

    /// What a Bamba model says: RoPE on half of each head (8 of 16 dimensions), the layers'
    /// kinds, the attention layers captured; the layer list's bad forms, one line naming it.
    void whatBambaSays() {
        const model::ModelConfig c = model::parseModelConfig(bambaConfig().dump(), "c.json");
        QCOMPARE(c.rotaryDim, int64_t{8});
        QCOMPARE(c.attentionLayers(), (std::vector<int64_t>{1, 3}));
        const QString dir = m_dir.filePath(QStringLiteral("bamba-info"));
        verifyParameterCount(dir, bambaConfig(), 61);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(
            model->captureInfo().layerKinds,
            (std::vector<std::string>{"Mamba-2", "attention", "Mamba-2", "attention", "Mamba-2"}));
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("bamba.h5")).toStdString());
        verifyBadConfigs(
            bambaConfig(), "bamba/config.json",
            {
                {[](json& c) { c.erase("attn_layer_indices"); }, "attn_layer_indices"},
                {[](json& c) { c["attn_layer_indices"] = nullptr; }, "attn_layer_indices"},
                {[](json& c) {
                     c["attn_layer_indices"] = {5, -1};
                 },
                 "attn_layer_indices"},
                {[](json& c) { c["attn_layer_indices"] = "1,3"; }, "attn_layer_indices"},
                {[](json& c) { c["attn_layer_indices"] = {1.5}; }, "attn_layer_indices"},
                {[](json& c) { c["mamba_n_heads"] = 7; }, "mamba_n_heads"},
                {[](json& c) { c["mamba_d_head"] = 12; }, "mamba_d_head"},
                {[](json& c) { c["hidden_act"] = "swish2"; }, "hidden_act"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelGraniteHybrid)
#include "test_model_granite_hybrid.moc"
