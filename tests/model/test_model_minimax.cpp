// MiniMax-01 (MiniMaxForCausalLM, transformers' modular_minimax.py) against a reference forward
// written here in float64: its lightning attention as the plain recurrence, token by token
// (lightningRef), softmax attention with RoPE on part of each head, each layer's residual the
// normed input weighted by α and β, Mixtral's experts on every layer; logits, the softmax layers'
// q, k and v, greedy steps through the states, the experts as published and packed, the original
// folders' keys, what a capture says, and one-line errors for bad configs
// (docs/learned-sparse-and-hybrid.md §14).

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

/// The config's hidden_act of the two the tests use: SiLU (every release) or GELU (erf).
at::Tensor act(const json& c, const at::Tensor& x) {
    return c.value("hidden_act", std::string("silu")) == "gelu" ? at::gelu(x) : at::silu(x);
}

/// A lightning-attention layer (weights under `p`: qkv_proj, output_gate, out_proj, norm) of
/// layer `layer` of `layers` on h [T, hidden] as the recurrence it computes, per head i of H:
/// [q | k | v] = act(qkv_proj(h)), S ← exp(−s_i)·S + k_t ⊗ v_t, o_t = q_t·S with
/// s_i = 2^(−8(i+1)/H)·(1 − layer/(layers − 1 + 10⁻⁵) + 10⁻⁵); RMSNorm (eps 10⁻⁶) over every
/// head, × σ(output_gate(h)), out_proj.
at::Tensor lightningRef(const json& c, const Weights& w, const std::string& p, const at::Tensor& h,
                        int64_t H, int64_t layer, int64_t layers) {
    const int64_t T = h.size(0);
    const at::Tensor qkv = act(c, at::linear(h, w.at(p + "qkv_proj.weight")));
    const int64_t D = qkv.size(1) / (3 * H);
    const at::Tensor heads = qkv.view({T, H, 3 * D});
    const double depth = 1.0 - static_cast<double>(layer) / (layers - 1.0 + 1e-5) + 1e-5;
    at::Tensor o = at::zeros({T, H, D}, at::kDouble);
    for (int64_t i = 0; i < H; ++i) {
        const double decay = std::exp(-std::pow(2.0, -8.0 * (i + 1) / H) * depth);
        at::Tensor S = at::zeros({D, D}, at::kDouble);
        for (int64_t t = 0; t < T; ++t) {
            const at::Tensor q = heads[t][i].narrow(0, 0, D), k = heads[t][i].narrow(0, D, D),
                             v = heads[t][i].narrow(0, 2 * D, D);
            S = decay * S + at::outer(k, v);
            o[t][i] = at::matmul(q, S);
        }
    }
    const at::Tensor normed = rmsNorm(o.reshape({T, H * D}), w.at(p + "norm.weight"), 1e-6);
    return at::linear(at::sigmoid(at::linear(h, w.at(p + "output_gate.weight"))) * normed,
                      w.at(p + "out_proj.weight"));
}

/// Mixtral's experts under `f` (gate, experts.E.w1, w3, w2) on x [T, hidden]: a softmax over
/// every expert, the top k renormalised.
at::Tensor mixtralMoeRef(const json& c, const Weights& w, const std::string& f, const at::Tensor& x,
                         int64_t k) {
    const at::Tensor probs = at::softmax(at::linear(x, w.at(f + "gate.weight")), -1);
    const auto [top, idx] = probs.topk(k, -1);
    const at::Tensor weights = top / top.sum(-1, true);
    at::Tensor out = at::zeros_like(x);
    for (int64_t t = 0; t < x.size(0); ++t)
        for (int64_t j = 0; j < k; ++j) {
            const std::string e = f + "experts." + std::to_string(idx[t][j].item<int64_t>()) + ".";
            out[t] += weights[t][j] * at::linear(act(c, at::linear(x[t], w.at(e + "w1.weight"))) *
                                                     at::linear(x[t], w.at(e + "w3.weight")),
                                                 w.at(e + "w2.weight"));
        }
    return out;
}

/// MiniMaxForCausalLM.forward on ids; `full` says which layers are softmax attention, `rot` the
/// rotary dimensions, `r` the residual weights {attention α, β, lightning α, β, MLP α, β}, which
/// weigh the normed input (`normed`: postnorm) or the input.
RefOut referenceMiniMax(const json& c, const Weights& w, const std::vector<int64_t>& ids,
                        const std::vector<bool>& full, int64_t rot, const std::array<double, 6>& r,
                        bool normed = true) {
    const int64_t L = c["num_hidden_layers"], H = c["num_attention_heads"];
    const int64_t D = c["hidden_size"].get<int64_t>() / H;
    const double eps = c["rms_norm_eps"];
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const bool f = full[static_cast<size_t>(l)];
        const at::Tensor n = rmsNorm(x, W(p + "input_layernorm.weight"), eps);
        const at::Tensor a =
            f ? attentionRef(c, w, p + "self_attn.", n, rot, 1.0 / std::sqrt(D), out)
              : lightningRef(c, w, p + "self_attn.", n, H, l, L);
        const at::Tensor h = (normed ? n : x) * (f ? r[0] : r[2]) + a * (f ? r[1] : r[3]);
        const at::Tensor n2 = rmsNorm(h, W(p + "post_attention_layernorm.weight"), eps);
        x = (normed ? n2 : h) * r[4] +
            mixtralMoeRef(c, w, p + "block_sparse_moe.", n2, c["num_experts_per_tok"]) * r[5];
    }
    out.logits = at::linear(rmsNorm(x, W("model.norm.weight"), eps), W("lm_head.weight"));
    return out;
}

const std::vector<bool> kFull{false, false, true, false, false, true};
constexpr std::array<double, 6> kFactors{1.7, 0.9, 1.3, 1.1, 1.5, 0.8};

/// MiniMax-01's pattern in small, as transformers names it: 6 layers, softmax attention at 2
/// and 5, 4 heads of 16 (2 KV heads), RoPE on 8 of them, lightning blocks of 16 tokens, 4
/// experts with 2 per token, every residual weight away from 1.
json miniMaxConfig() {
    return {{"architectures", {"MiniMaxForCausalLM"}},
            {"model_type", "minimax"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"intermediate_size", 48},
            {"num_hidden_layers", 6},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"max_position_embeddings", 512},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0},
            {"partial_rotary_factor", 0.5},
            {"layer_types",
             {"linear_attention", "linear_attention", "full_attention", "linear_attention",
              "linear_attention", "full_attention"}},
            {"block_size", 16},
            {"num_local_experts", 4},
            {"num_experts_per_tok", 2},
            {"full_attn_alpha_factor", kFactors[0]},
            {"full_attn_beta_factor", kFactors[1]},
            {"linear_attn_alpha_factor", kFactors[2]},
            {"linear_attn_beta_factor", kFactors[3]},
            {"mlp_alpha_factor", kFactors[4]},
            {"mlp_beta_factor", kFactors[5]},
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

/// The same model as MiniMax's own folders write it: MiniMaxText01ForCausalLM, attn_type_list,
/// rotary_dim, the layernorm_*_alpha and _beta keys, postnorm.
json originalConfig() {
    json c = miniMaxConfig();
    c["architectures"] = {"MiniMaxText01ForCausalLM"};
    c["model_type"] = "minimax_text_01";
    c.erase("layer_types");
    c.erase("partial_rotary_factor");
    c["attn_type_list"] = {0, 0, 1, 0, 0, 1};
    c["rotary_dim"] = 8;
    c["postnorm"] = true;
    c["shared_intermediate_size"] = 0;
    const char* legacy[] = {"layernorm_full_attention_alpha",
                            "layernorm_full_attention_beta",
                            "layernorm_linear_attention_alpha",
                            "layernorm_linear_attention_beta",
                            "layernorm_mlp_alpha",
                            "layernorm_mlp_beta"};
    const char* hf[] = {"full_attn_alpha_factor",   "full_attn_beta_factor",
                        "linear_attn_alpha_factor", "linear_attn_beta_factor",
                        "mlp_alpha_factor",         "mlp_beta_factor"};
    for (size_t i = 0; i < 6; ++i) {
        c.erase(hf[i]);
        c[legacy[i]] = kFactors[i];
    }
    return c;
}

} // namespace

class TestModelMiniMax : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    RefOut reference(const Weights& w, const std::vector<int64_t>& ids) {
        return referenceMiniMax(miniMaxConfig(), w, ids, kFull, 8, kFactors);
    }

private Q_SLOTS:
    /// MiniMax-01 follows the reference (logits, the softmax layers' q, k and v in one pass and
    /// in chunks, greedy steps through the lightning states); on 150 tokens too (nine blocks of
    /// 16, the state carried from one to the next); so does the original folder's config on the
    /// same weights, and so do experts packed as transformers 5 saves them (under mlp). (The
    /// reference's decay, depth scaling and α, β are its own; a model that got one wrong would
    /// fail here.)
    void miniMaxFollowsTransformers() {
        const QString dir = m_dir.filePath(QStringLiteral("minimax"));
        const Weights w = makeModel(dir, miniMaxConfig(), 61);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("minimax"));
        const auto ref = [&](const std::vector<int64_t>& ids) { return reference(w, ids); };
        followsReference(*model, ref, QStringLiteral("minimax"), 62);
        const std::vector<int64_t> ids = randomIds(150, 101, 7);
        SPARQLAB_VERIFY_CLOSE(model->logits(ids), reference(w, ids).logits, 1e-4,
                              QStringLiteral("minimax, 150 tokens"));

        // MiniMax's own folder: the same model under its older keys.
        const QString orig = m_dir.filePath(QStringLiteral("original"));
        QVERIFY(QDir().mkpath(orig));
        QVERIFY(QFile::copy(dir + "/model.safetensors", orig + "/model.safetensors"));
        test::writeFile(orig + "/config.json", QByteArray::fromStdString(originalConfig().dump(1)));
        auto original = model::Model::open(orig.toStdString());
        QCOMPARE(original->config().family, std::string("minimax"));
        followsReference(*original, ref, QStringLiteral("minimax-original"), 63);

        // transformers 5's own names: mlp.gate and the experts packed under mlp.experts.
        const QString packed = m_dir.filePath(QStringLiteral("minimax-packed"));
        makeModel(packed, miniMaxConfig(), 61);
        Weights renamed;
        for (const auto& [n, t] : w) {
            std::string m = n;
            if (const size_t at = m.find("block_sparse_moe."); at != std::string::npos)
                m.replace(at, 17, "mlp.");
            renamed[m] = t;
        }
        writePackedExperts(packed, renamed, "w1", "w3", "w2");
        auto fused = model::Model::open(packed.toStdString());
        QVERIFY(fused->config().moe.layout == model::ExpertLayout::FusedRows);
        QCOMPARE(fused->config().moe.module, std::string("mlp"));
        followsReference(*fused, ref, QStringLiteral("minimax-packed"), 64);
    }

    /// Every softmax layer: no hybrid, the residual weights still apply.
    void attentionOnlyFollows() {
        json c = miniMaxConfig();
        c["layer_types"] = std::vector<std::string>(6, "full_attention");
        const QString dir = m_dir.filePath(QStringLiteral("minimax-dense"));
        const Weights w = makeModel(dir, c, 71);
        auto model = model::Model::open(dir.toStdString());
        QVERIFY(model->config().layerKinds.empty());
        test::f64::followsReference(
            *model,
            [&](const std::vector<int64_t>& ids) {
                return referenceMiniMax(c, w, ids, std::vector<bool>(6, true), 8, kFactors);
            },
            QStringLiteral("minimax-dense"), 72);
    }

    /// MiniMax's own code with postnorm false: the residual is the input, not the normed input
    /// (transformers' class ignores the key); and hidden_act reaches the lightning layers' q, k
    /// and v as well as the experts.
    void postnormFalseAndTheActivation() {
        json c = originalConfig();
        c["postnorm"] = false;
        const QString dir = m_dir.filePath(QStringLiteral("minimax-prenorm"));
        const Weights w = makeModel(dir, c, 91);
        auto model = model::Model::open(dir.toStdString());
        QVERIFY(!model->config().residual.fromNormed);
        test::f64::followsReference(
            *model,
            [&](const std::vector<int64_t>& ids) {
                return referenceMiniMax(c, w, ids, kFull, 8, kFactors, /*normed=*/false);
            },
            QStringLiteral("minimax-prenorm"), 92);
        json hf = miniMaxConfig();
        hf["postnorm"] = false;
        QVERIFY(model::parseModelConfig(hf.dump(), "c.json").residual.fromNormed);
        c.erase("postnorm"); // (MiniMax's code: false unless said)
        QVERIFY(!model::parseModelConfig(c.dump(), "c.json").residual.fromNormed);

        json gelu = miniMaxConfig();
        gelu["hidden_act"] = "gelu";
        const QString gdir = m_dir.filePath(QStringLiteral("minimax-gelu"));
        const Weights gw = makeModel(gdir, gelu, 93);
        auto gmodel = model::Model::open(gdir.toStdString());
        test::f64::followsReference(
            *gmodel,
            [&](const std::vector<int64_t>& ids) {
                return referenceMiniMax(gelu, gw, ids, kFull, 8, kFactors);
            },
            QStringLiteral("minimax-gelu"), 94);
    }

    /// The model's description and a capture's: the layers' kinds ("lightning attention"), the
    /// softmax layers captured with RoPE, the state per layer (H·d·d, no convolution), the
    /// parameter count, the residual weights and the router in info, MiniMaxConfig's default
    /// pattern.
    void whatTheModelSays() {
        const QString dir = m_dir.filePath(QStringLiteral("minimax-info"));
        verifyParameterCount(dir, miniMaxConfig(), 81);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        const std::string lin = "lightning attention";
        QCOMPARE(info.layerKinds,
                 (std::vector<std::string>{lin, lin, "attention", lin, lin, "attention"}));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{2, 5}));
        QCOMPARE(info.linearKind(), lin);
        QCOMPARE(info.uncapturedKinds(), std::string("4 lightning attention"));
        QCOMPARE(info.linearStateElements, int64_t{4 * 16 * 16});
        QCOMPARE(info.layerUsesRope, (std::vector<int64_t>{1, 1}));
        QCOMPARE(model->config().rotaryDim, int64_t{8});
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("minimax.h5")).toStdString());
        const auto j = json::parse(model::attentionFeaturesJson(model->config()));
        QCOMPARE(j["experts"]["router"], json("softmax, top k renormalised"));
        QCOMPARE(j["residual"]["attention_alpha"].get<double>(), kFactors[0]);
        QCOMPARE(j["residual"]["mlp_beta"].get<double>(), kFactors[5]);
        QCOMPARE(j["linear_attention"]["state_elements_per_layer"], json(4 * 16 * 16));
        // No layer_types: MiniMaxConfig's default, softmax attention on every other layer from
        // the first; no rotary keys: the whole head.
        json plain = miniMaxConfig();
        plain.erase("layer_types");
        plain.erase("partial_rotary_factor");
        const model::ModelConfig pc = model::parseModelConfig(plain.dump(), "c.json");
        QCOMPARE(pc.attentionLayers(), (std::vector<int64_t>{0, 2, 4}));
        QVERIFY(pc.kindOf(1) == model::LayerKind::Lightning);
        QCOMPARE(pc.rotaryDim, int64_t{16});
        QCOMPARE(pc.linear.chunk, int64_t{16});
        // num_key_value_heads null: as many as the query heads (MiniMaxConfig).
        plain["num_key_value_heads"] = nullptr;
        QCOMPARE(model::parseModelConfig(plain.dump(), "c.json").nKvHeads, int64_t{4});
        plain["num_key_value_heads"] = 2;
        // MiniMax's own code without attn_type_list: softmax attention on every layer.
        json original = originalConfig();
        original.erase("attn_type_list");
        QVERIFY(model::parseModelConfig(original.dump(), "c.json").layerKinds.empty());
        // sliding_window windows the softmax layers only.
        plain["sliding_window"] = 32;
        const model::ModelConfig wc = model::parseModelConfig(plain.dump(), "c.json");
        QCOMPARE(wc.layerWindow, (std::vector<int64_t>{32, 0, 32, 0, 32, 0}));
    }

    /// Configs that MiniMax's classes refuse, or that SparQ Lab cannot follow: one line naming
    /// the key.
    void badMiniMaxConfigs() {
        verifyBadConfigs(
            miniMaxConfig(), "minimax/config.json",
            {
                {[](json& c) {
                     c["layer_types"] = std::vector<std::string>(6, "linear_attention");
                 },
                 "layer_types"},
                {[](json& c) { c["layer_types"][0] = "mamba"; }, "layer_types"},
                {[](json& c) { c["layer_types"].erase(0); }, "layer_types"},
                {[](json& c) {
                     c.erase("layer_types");
                     c["attn_type_list"] = {0, 1, 0};
                 },
                 "attn_type_list"},
                {[](json& c) { c["shared_intermediate_size"] = 128; }, "shared_intermediate_size"},
                {[](json& c) { c["block_size"] = 0; }, "block_size"},
                {[](json& c) { c["num_experts_per_tok"] = 5; }, "num_experts_per_tok"},
                {[](json& c) { c["mlp_alpha_factor"] = "deep"; }, "mlp_alpha_factor"},
                {[](json& c) {
                     c.erase("partial_rotary_factor");
                     c["rotary_dim"] = 7;
                 },
                 "rotary_dim"},
                {[](json& c) { c["hidden_act"] = "swish2"; }, "hidden_act"},
            });
        verifyBadConfigs(
            originalConfig(), "minimax/config.json",
            {
                {[](json& c) { c["postnorm"] = "yes"; }, "postnorm"},
                {[](json& c) { c["attn_type_list"] = {0, 0, 0, 0, 0, 0}; }, "attn_type_list"},
            });
    }
};

QTEST_GUILESS_MAIN(TestModelMiniMax)
#include "test_model_minimax.moc"
