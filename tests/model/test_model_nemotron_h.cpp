// Nemotron-H (NemotronHForCausalLM, transformers' modeling_nemotron_h.py) against a reference
// forward written here in float64: blocks of one mixer each, x + f(norm(x)); Mamba-2 as the plain
// recurrence token by token (the model scans in chunks) with its gated norm over each group and
// the time step clamped to time_step_limit; NoPE attention; relu² MLPs; experts behind
// DeepSeek-V3's sigmoid router with the shared expert
// beside them and a latent around them. Logits, the attention layers' q, k and v, greedy steps
// through the cache, the checkpoint as published (backbone, one module per expert) and as
// transformers 5 saves it (model, packed experts), what a capture says of the blocks, and
// one-line errors for bad configs (docs/learned-sparse-and-hybrid.md §10).

#include "float64_reference.h"
#include "test_support.h"

#include "analysis/decode_traffic.h"
#include "capture/capture_file.h"
#include "model/model.h"
#include "model/transformer.h"
#include "model/transformer_layer.h"

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

/// The blocks' kinds as hybrid_override_pattern writes them.
std::string pattern(const json& c) {
    if (c.contains("hybrid_override_pattern"))
        return c["hybrid_override_pattern"];
    std::string p;
    for (const json& k : c["layers_block_type"]) {
        const std::string s = k;
        p += s == "mamba" || s == "linear_attention"     ? 'M'
             : s == "attention" || s == "full_attention" ? '*'
             : s == "mlp"                                ? '-'
                                                         : 'E';
    }
    return p;
}

/// NemotronHMamba2Mixer.torch_forward's shape: n_groups groups of B and C and of the gated norm,
/// the time step clamped to time_step_limit (mamba_dt_limit, the older name, winning).
Mamba2Shape mambaShape(const json& c) {
    Mamba2Shape m;
    m.heads = c["mamba_num_heads"];
    m.headDim = c["mamba_head_dim"];
    m.groups = c.value("n_groups", c.value("mamba_n_groups", int64_t{8}));
    m.state = c["ssm_state_size"];
    m.kernel = c.value("conv_kernel", int64_t{4});
    m.convBias = c.value("use_conv_bias", true);
    m.projBias = m.outBias = c.value("use_bias", false);
    const char* limit = c.contains("mamba_dt_limit") ? "mamba_dt_limit" : "time_step_limit";
    if (c.contains(limit)) {
        m.dtMin = c[limit][0];
        m.dtMax = c[limit][1].is_string() ? kInf : c[limit][1].get<double>(); // "Infinity"
    }
    m.normGroups = m.groups;
    m.eps = c["layer_norm_epsilon"];
    return m;
}

/// down(relu(up(x))²) (+ biases with mlp_bias), weights under p.
at::Tensor relu2Mlp(const Weights& w, const std::string& p, const at::Tensor& x, bool bias) {
    at::Tensor u = at::linear(x, w.at(p + "up_proj.weight"));
    if (bias)
        u = u + w.at(p + "up_proj.bias");
    at::Tensor y = at::linear(at::relu(u).square(), w.at(p + "down_proj.weight"));
    return bias ? y + w.at(p + "down_proj.bias") : y;
}

/// NemotronHMoE on h [T, hidden]: σ(router) + correction bias chooses, n_group groups scored by
/// their two best, topk_group kept (the others' experts out of the running), the top k weighted by
/// σ renormalised × routed_scaling_factor; each expert down(relu²(up(·))) in the latent where one
/// is given; plus the shared expert on h.
at::Tensor moeRef(const json& c, const Weights& w, const std::string& p, const at::Tensor& h) {
    const int64_t T = h.size(0), E = c["n_routed_experts"], k = c["num_experts_per_tok"];
    const int64_t G = c.value("n_group", int64_t{1}), keep = c.value("topk_group", int64_t{1});
    const bool bias = c.value("mlp_bias", false), latent = c.contains("moe_latent_size");
    const at::Tensor s = at::sigmoid(at::linear(h, w.at(p + "gate.weight")));
    const at::Tensor choice = s + w.at(p + "gate.e_score_correction_bias");
    at::Tensor in = h;
    if (latent) {
        in = at::linear(h, w.at(p + "fc1_latent_proj.weight"));
        if (bias)
            in = in + w.at(p + "fc1_latent_proj.bias");
    }
    at::Tensor out = at::zeros({T, in.size(1)}, at::kDouble);
    for (int64_t t = 0; t < T; ++t) {
        at::Tensor ch = choice[t].clone();
        const at::Tensor groupScore = std::get<0>(ch.view({G, E / G}).topk(2, -1)).sum(-1);
        const at::Tensor kept = std::get<1>(groupScore.topk(keep));
        for (int64_t g = 0; g < G; ++g)
            if (!(kept == g).any().item<bool>())
                ch.narrow(0, g * (E / G), E / G).fill_(-kInf);
        const at::Tensor idx = std::get<1>(ch.topk(k));
        at::Tensor weights = s[t].index_select(0, idx);
        if (c.value("norm_topk_prob", true))
            weights = weights / (weights.sum() + 1e-20);
        weights = weights * c.value("routed_scaling_factor", 1.0);
        for (int64_t j = 0; j < k; ++j) {
            const std::string e = p + "experts." + std::to_string(idx[j].item<int64_t>()) + ".";
            out[t] += weights[j] * relu2Mlp(w, e, in[t].unsqueeze(0), false)[0];
        }
    }
    if (latent) {
        out = at::linear(out, w.at(p + "fc2_latent_proj.weight"));
        if (bias)
            out = out + w.at(p + "fc2_latent_proj.bias");
    }
    return out + relu2Mlp(w, p + "shared_experts.", h, bias);
}

/// NemotronHForCausalLM.forward on ids (the weights named as published, under backbone).
RefOut referenceNemotron(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const std::string body = "backbone.";
    const int64_t T = static_cast<int64_t>(ids.size());
    const int64_t H = c["num_attention_heads"], KV = c["num_key_value_heads"], D = c["head_dim"];
    const double eps = c["layer_norm_epsilon"];
    const std::string kinds = pattern(c);
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W(body + "embeddings.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (size_t l = 0; l < kinds.size(); ++l) {
        const std::string p = body + "layers." + std::to_string(l) + ".";
        const at::Tensor h = rmsNorm(x, W(p + "norm.weight"), eps);
        const std::string m = p + "mixer.";
        at::Tensor y;
        if (kinds[l] == 'M') {
            y = mamba2Ref(mambaShape(c), w, m, h);
        } else if (kinds[l] == '*') { // NoPE, scaled by head_dim^-½, no biases
            const at::Tensor q =
                at::linear(h, W(m + "q_proj.weight")).view({T, H, D}).transpose(0, 1);
            const at::Tensor k =
                at::linear(h, W(m + "k_proj.weight")).view({T, KV, D}).transpose(0, 1);
            const at::Tensor v =
                at::linear(h, W(m + "v_proj.weight")).view({T, KV, D}).transpose(0, 1);
            out.q.push_back(q);
            out.k.push_back(k);
            out.v.push_back(v);
            const at::Tensor o = causalAttention(q, k, v, 1 / std::sqrt(static_cast<double>(D)));
            y = at::linear(o.transpose(0, 1).reshape({T, H * D}), W(m + "o_proj.weight"));
        } else if (kinds[l] == '-') {
            y = relu2Mlp(w, m, h, c.value("mlp_bias", false));
        } else {
            y = moeRef(c, w, m, h);
        }
        x = x + y;
    }
    out.logits = at::linear(rmsNorm(x, W(body + "norm_f.weight"), eps), W("lm_head.weight"));
    return out;
}

/// Nemotron 3 Nano's shape in small: 9 blocks of every kind (Mamba-2, experts, attention, MLP),
/// head_dim 24 (q wider than the hidden size), 8 SSM heads of 12 in 2 groups (an inner width
/// that is not expand × hidden), chunks of 16, 8 experts in 2 groups of which one is kept, 2 per
/// token, × 2.5; the correction biases drawn wide, so that they change which experts are chosen.
json nanoConfig() {
    return {{"architectures", {"NemotronHForCausalLM"}},
            {"model_type", "nemotron_h"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"intermediate_size", 80},
            {"num_hidden_layers", 9},
            {"hybrid_override_pattern", "MEM*EM-*E"},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 24},
            {"max_position_embeddings", 512},
            {"layer_norm_epsilon", 1e-5},
            {"mamba_num_heads", 8},
            {"mamba_head_dim", 12},
            {"ssm_state_size", 16},
            {"n_groups", 2},
            {"conv_kernel", 4},
            {"chunk_size", 16},
            {"expand", 2},
            {"mlp_hidden_act", "relu2"},
            {"n_routed_experts", 8},
            {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 32},
            {"moe_shared_expert_intermediate_size", 48},
            {"n_group", 2},
            {"topk_group", 1},
            {"routed_scaling_factor", 2.5},
            {"norm_topk_prob", true},
            {"time_step_limit", {0.0, "Infinity"}},
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

/// Nemotron-H 8B's kind in small, written with layers_block_type in the older names: no experts,
/// one group, biased projections and MLPs, no convolution bias, chunks of 8, and a
/// time_step_limit of [0.6, 0.9] that clamps both ways (it changes the logits).
json denseConfig() {
    json c = nanoConfig();
    c.erase("hybrid_override_pattern");
    c["layers_block_type"] = {"mamba", "mlp", "mamba", "attention", "mlp", "mamba", "attention"};
    for (const char* k : {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "moe_shared_expert_intermediate_size", "n_group", "topk_group",
                          "routed_scaling_factor", "norm_topk_prob", "n_groups"})
        c.erase(k);
    c["mamba_n_groups"] = 1; // (the older name, which transformers still reads)
    c["use_bias"] = true;
    c["use_conv_bias"] = false;
    c["mlp_bias"] = true;
    c["chunk_size"] = 8;
    c["mamba_num_heads"] = 16;
    c["mamba_head_dim"] = 8;
    c["time_step_limit"] = {0.6, 0.9};
    return c;
}

/// Nemotron 3 Super's kind in small, in transformers 5's names: experts in a latent of 24 with
/// biased latent projections, one routing group, unnormalised weights; the time step clamped to
/// [0.5, 1] by the older key mamba_dt_limit, which wins over time_step_limit.
json latentConfig() {
    json c = nanoConfig();
    c.erase("hybrid_override_pattern");
    c["layers_block_type"] = {"linear_attention", "moe", "full_attention", "moe",
                              "linear_attention", "mlp", "full_attention"};
    c["moe_latent_size"] = 24;
    c["mlp_bias"] = true;
    c["n_group"] = 1;
    c["norm_topk_prob"] = false;
    c["mamba_dt_limit"] = {0.5, 1.0};
    return c;
}

} // namespace

class TestModelNemotronH : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

    /// Logits, q, k and v of the attention layers and greedy steps through the cache against the
    /// reference, for one folder (its weights `w`).
    void followsReference(const QString& dir, const json& config, const Weights& w,
                          const QString& name) {
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("nemotron_h"));
        test::f64::followsReference(
            *model,
            [&](const std::vector<int64_t>& ids) { return referenceNemotron(config, w, ids); },
            name, 5);
    }

    void followsReference(const json& config, const QString& name, uint64_t seed) {
        const QString dir = m_dir.filePath(name);
        const Weights w = makeModel(dir, config, seed, 0.1, wideBias("e_score_correction_bias"));
        followsReference(dir, config, w, name);
    }

private Q_SLOTS:
    /// Nano (every block kind, two routing groups), the dense 8B kind (biases, a clamp that
    /// bites) and Super's latent experts follow the reference.
    void nemotronFollowsTransformers() {
        followsReference(nanoConfig(), QStringLiteral("nano"), 31);
        followsReference(denseConfig(), QStringLiteral("dense"), 37);
        followsReference(latentConfig(), QStringLiteral("latent"), 43);
        // The clamp changes the logits (so the check above sees it).
        verifyTheClampBites(m_dir.filePath(QStringLiteral("dense-clamp")), denseConfig(), 37,
                            referenceNemotron);
    }

    /// The checkpoint as transformers 5 saves it (the body under model, each sparse block's
    /// experts packed as experts.up_proj [E, I, h] and experts.down_proj [E, h, I]), and an older
    /// one that names the embedding "embedding" (which transformers renames as it loads).
    void otherCheckpointNames() {
        const json config = nanoConfig();
        for (const bool v5 : {true, false}) {
            const QString dir =
                m_dir.filePath(v5 ? QStringLiteral("nano-v5") : QStringLiteral("nano-old"));
            const Weights w = makeModel(dir, config, 53, 0.1, wideBias("e_score_correction_bias"));
            std::vector<std::pair<std::string, at::Tensor>> list;
            std::map<std::string, std::vector<std::pair<int64_t, at::Tensor>>> packed;
            for (const auto& [n, t] : w) {
                const size_t at = n.find(".experts.");
                if (!v5) { // backbone.embedding.weight
                    list.emplace_back(
                        n == "backbone.embeddings.weight" ? "backbone.embedding.weight" : n,
                        t.to(at::kFloat));
                } else if (n.rfind("backbone.", 0) != 0) { // lm_head
                    list.emplace_back(n, t.to(at::kFloat));
                } else if (at == std::string::npos) {
                    list.emplace_back("model." + n.substr(9), t.to(at::kFloat));
                } else { // backbone.layers.L.mixer.experts.E.up_proj.weight
                    const std::string rest = n.substr(at + 9);
                    const int64_t e = std::stoll(rest.substr(0, rest.find('.')));
                    const std::string proj = rest.substr(rest.find('.') + 1);
                    packed["model." + n.substr(9, at) + proj.substr(0, proj.find('.'))]
                        .emplace_back(e, t);
                }
            }
            for (auto& [name, parts] : packed) {
                std::sort(parts.begin(), parts.end(),
                          [](const auto& a, const auto& b) { return a.first < b.first; });
                std::vector<at::Tensor> ts;
                for (const auto& [e, t] : parts)
                    ts.push_back(t.to(at::kFloat));
                list.emplace_back(name, at::stack(ts));
            }
            QFile::remove(dir + "/model.safetensors");
            model::writeSafetensors((dir + "/model.safetensors").toStdString(), list);
            followsReference(dir, config, w, QFileInfo(dir).fileName());
        }
    }

    /// In a bf16 model the routers' correction biases stay float32, as transformers keeps them
    /// (and saves them): rounded, they would flip near-tied experts.
    void correctionBiasStaysFloat32() {
        const QString dir = m_dir.filePath(QStringLiteral("nano-bf16"));
        const Weights w = makeModel(dir, nanoConfig(), 59);
        auto m =
            verifyBiasStaysFloat32(dir, w, "backbone.layers.1.mixer.gate.e_score_correction_bias",
                                   "backbone.layers.1.mixer.gate.weight");
        // and the model runs
        QVERIFY(at::isfinite(m->logits(randomIds(12, 101, 4))).all().item<bool>());
    }

    /// NemotronHExperts in bfloat16: each expert's output × its float32 routing weight, summed in
    /// float32 and rounded once; summing each product rounded (as the other families' experts do)
    /// differs here, so the test sees which one runs.
    void expertsSumInFloat32() {
        const model::ModelConfig c = model::parseModelConfig(nanoConfig().dump(), "config.json");
        QVERIFY(c.moe.sumInRouterDtype);
        auto gen = at::detail::createCPUGenerator(13);
        auto draw = [&](std::vector<int64_t> shape) {
            return at::randn(shape, gen).to(at::kBFloat16);
        };
        model::MoeWeights w;
        w.routerW = draw({8, 64});
        w.scoreBias = at::zeros({8});
        for (int64_t e = 0; e < 8; ++e) {
            model::Expert x;
            x.up = draw({32, 64});
            x.down = draw({64, 32});
            w.experts.push_back(x);
        }
        const int64_t N = 24;
        const at::Tensor xs = draw({N, 64});
        const at::Tensor mine = model::moeForward(c, w, xs.view({1, N, 64})).view({N, 64});
        const model::MoeRouting r = model::moeRoute(c, w, xs);
        QCOMPARE(r.weights.scalar_type(), at::kFloat);
        at::Tensor sum = at::zeros({N, 64}, at::kFloat),
                   eachRounded = at::zeros({N, 64}, at::kBFloat16);
        for (int64_t e = 0; e < 8; ++e) {
            const auto [ti, wt] = routedTo(r, e);
            if (ti.numel() == 0)
                continue;
            const model::Expert& f = w.experts[static_cast<size_t>(e)];
            const at::Tensor y =
                at::linear(at::relu(at::linear(xs.index_select(0, ti), f.up)).square(), f.down);
            sum.index_add_(0, ti, y * wt);
            eachRounded.index_add_(0, ti, (y * wt).to(at::kBFloat16));
        }
        QVERIFY2(mine.equal(sum.to(at::kBFloat16)), // (no shared expert in these weights)
                 "the experts' sum differs from transformers' float32 sum");
        QVERIFY(!eachRounded.equal(sum.to(at::kBFloat16)));
    }

    /// The model's description and a capture's: the blocks' kinds ("MLP" for the MLP and expert
    /// blocks), the attention blocks captured, the Mamba-2 state, the parameter count of the
    /// checkpoint, NoPE, and a decode step's traffic counting the Mamba-2 blocks' state only.
    void whatTheModelSays() {
        for (const json& config : {nanoConfig(), denseConfig(), latentConfig()})
            verifyParameterCount(m_dir.filePath(QStringLiteral("info")), config, 41);
        const QString dir = m_dir.filePath(QStringLiteral("info"));
        makeModel(dir, nanoConfig(), 41);
        auto model = model::Model::open(dir.toStdString());
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.layerKinds,
                 (std::vector<std::string>{"Mamba-2", "MLP", "Mamba-2", "attention", "MLP",
                                           "Mamba-2", "MLP", "attention", "MLP"}));
        QCOMPARE(info.modelLayers, (std::vector<int64_t>{3, 7}));
        QCOMPARE(info.linearKind(), std::string("Mamba-2")); // what the transfer panel names
        QCOMPARE(info.linearLayerCount(), int64_t{3});
        // [heads, d_state, d_head] + the convolution's last 3 inputs of x, B and C
        QCOMPARE(info.linearStateElements, int64_t{8 * 16 * 12 + 3 * (96 + 2 * 2 * 16)});
        QCOMPARE(info.layerUsesRope, (std::vector<int64_t>{0, 0}));
        const auto features = json::parse(model::attentionFeaturesJson(model->config()));
        QVERIFY(!features.contains("rope"));
        QCOMPARE(features["linear_attention"]["state_elements_per_layer"],
                 json(info.linearStateElements));
        QCOMPARE(features["experts"]["sparse_layers"], json({1, 4, 8}));
        // A decode step reads the two attention blocks' caches and three Mamba-2 states.
        const analysis::DecodeTraffic t = analysis::decodeTraffic(model->config(), 100, {}, 2.0, 1);
        QCOMPARE(t.attentionLayers, int64_t{2});
        QCOMPARE(t.linearLayers, int64_t{3});
        QCOMPARE(t.linearState, 2.0 * 3 * static_cast<double>(info.linearStateElements));
        verifyCaptureKeepsKinds(*model, m_dir.filePath(QStringLiteral("nano.h5")).toStdString());
    }

    /// Configs transformers refuses, or that leave nothing to capture: one line naming the key.
    void badNemotronConfigs() {
        verifyBadConfigs(
            nanoConfig(), "nemotron/config.json",
            {
                {[](json& c) { c["hybrid_override_pattern"] = "MEMxE"; },
                 "hybrid_override_pattern"},
                {[](json& c) { c["hybrid_override_pattern"] = "MEM-E"; },
                 "hybrid_override_pattern"},
                {[](json& c) { c["hybrid_override_pattern"] = ""; }, "hybrid_override_pattern"},
                {[](json& c) {
                     c["layers_block_type"] = {"mamba", "swa"};
                 },
                 "layers_block_type"},
                {[](json& c) { c["layer_types"] = "M*"; }, "layer_types"},
                {[](json& c) { c["n_groups"] = 3; }, "n_groups"},
                {[](json& c) { c["mamba_n_groups"] = 3; }, "mamba_n_groups"},
                {[](json& c) { c["mlp_hidden_act"] = "swiglu"; }, "mlp_hidden_act"},
                {[](json& c) { c["mamba_hidden_act"] = "tanh"; }, "mamba_hidden_act"},
                {[](json& c) { c["n_group"] = 3; }, "n_group"},
                {[](json& c) { c["topk_group"] = 3; }, "topk_group"},
                {[](json& c) { c["num_experts_per_tok"] = 9; }, "num_experts_per_tok"},
                {[](json& c) {
                     c["time_step_limit"] = {0.5, 0.1};
                 },
                 "time_step_limit"},
                {[](json& c) { c["mamba_dt_limit"] = {0.1}; }, "mamba_dt_limit"},
                {[](json& c) { c["conv_kernel"] = 0; }, "conv_kernel"},
                {[](json& c) { c["layer_norm_epsilon"] = "1e-5"; }, "layer_norm_epsilon"},
            });
        // The older keys win over the newer ones, as transformers pops them over the defaults.
        json older = nanoConfig();
        older["mamba_d_conv"] = 3;
        older["mamba_chunk_size"] = 4;
        const model::ModelConfig c = model::parseModelConfig(older.dump(), "c.json");
        QCOMPARE(c.linear.convKernel, int64_t{3});
        QCOMPARE(c.linear.chunk, int64_t{4});
        QCOMPARE(c.nLayers, int64_t{9}); // from the pattern, whatever num_hidden_layers says
    }
};

QTEST_GUILESS_MAIN(TestModelNemotronH)
#include "test_model_nemotron_h.moc"
