// Mistral 4 (Mistral4ForCausalLM, transformers' modular_mistral4.py) against a reference forward
// written here in float64: DeepSeek-V3's multi-head latent attention with YaRN on the rotary
// dimensions, every layer's q scaled by its position (llama_4_scaling_beta) and the softmax scale
// qk_head_dim^-½ without DeepSeek's mscale², experts behind a group-limited softmax router; the
// Mistral 3 vision-language folders that hold it (and Ministral 3's and Mistral's language
// models), in transformers 5's and 4.x's layouts; what the model says of itself; one-line errors
// (docs/sinks-chunks-nope-mla.md).

#include "float64_reference.h"
#include "test_support.h"

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

/// transformers' apply_rotary_pos_emb_interleave on x [., T, R]: pairs (2i, 2i + 1) rotated by
/// frequency i, written out as [rotated evens | rotated odds].
at::Tensor ropeInterleave(const at::Tensor& x, const at::Tensor& inv, double attentionFactor) {
    const int64_t T = x.size(-2);
    const at::Tensor angle = at::arange(T, at::kDouble).unsqueeze(-1) * inv.unsqueeze(0); // [T,R/2]
    const at::Tensor c = angle.cos() * attentionFactor, s = angle.sin() * attentionFactor;
    const at::Tensor x1 = x.slice(-1, 0, x.size(-1), 2), x2 = x.slice(-1, 1, x.size(-1), 2);
    return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

/// The knobs a test shows to matter: the softmax scale's DeepSeek mscale² (Mistral 4: none), and
/// the router (Mistral 4: softmax; DeepSeek-V3's sigmoid for contrast).
struct Knobs {
    bool deepseekMscale = false;
    bool sigmoidRouter = false;
};

/// Mistral4ForCausalLM.forward on ids as transformers computes it.
RefOut referenceMistral4(const json& c, const Weights& w, const std::vector<int64_t>& ids,
                         const Knobs& knobs = {}) {
    const int64_t T = static_cast<int64_t>(ids.size()), L = c["num_hidden_layers"],
                  H = c["num_attention_heads"];
    const int64_t nope = c["qk_nope_head_dim"], R = c["qk_rope_head_dim"], Dv = c["v_head_dim"];
    const int64_t kvr = c["kv_lora_rank"], D = nope + R;
    const double eps = c["rms_norm_eps"];
    const json& rp = c["rope_parameters"];
    const double factor = rp["factor"], original = rp["original_max_position_embeddings"];
    const at::Tensor inv = yarnInv(rp["rope_theta"], R, factor, original, 32, 1);
    // YaRN's attention factor: get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) = 1 here.
    const double beta = rp["llama_4_scaling_beta"];
    double scale = 1.0 / std::sqrt(static_cast<double>(D));
    if (knobs.deepseekMscale) {
        const double m = 0.1 * rp["mscale_all_dim"].get<double>() * std::log(factor) + 1.0;
        scale *= m * m;
    }
    auto W = [&](const std::string& n) { return w.at(n); };
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.";
        const at::Tensor h = rmsNorm(x, W(p + "input_layernorm.weight"), eps);
        // (q_a_layernorm and kv_a_layernorm: Mistral4RMSNorm's default eps, 1e-6)
        const at::Tensor q = at::linear(rmsNorm(at::linear(h, W(a + "q_a_proj.weight")),
                                                W(a + "q_a_layernorm.weight"), 1e-6),
                                        W(a + "q_b_proj.weight"))
                                 .view({T, H, D})
                                 .transpose(0, 1);
        const at::Tensor ckv = at::linear(h, W(a + "kv_a_proj_with_mqa.weight"));
        const at::Tensor kv =
            at::linear(rmsNorm(ckv.narrow(1, 0, kvr), W(a + "kv_a_layernorm.weight"), 1e-6),
                       W(a + "kv_b_proj.weight"))
                .view({T, H, nope + Dv})
                .transpose(0, 1);
        const at::Tensor kRot = ropeInterleave(ckv.narrow(1, kvr, R), inv, 1.0); // [T, R]
        at::Tensor qq =
            at::cat({q.narrow(-1, 0, nope), ropeInterleave(q.narrow(-1, nope, R), inv, 1.0)}, -1);
        // get_llama_4_attn_scale: 1 + β·log(1 + ⌊pos / original⌋), positions from 0
        const at::Tensor t =
            1 + beta * at::log(1 + at::floor(at::arange(T, at::kDouble) / original));
        qq = qq * t.view({1, T, 1});
        const at::Tensor k =
            at::cat({kv.narrow(-1, 0, nope), kRot.unsqueeze(0).expand({H, T, R})}, -1);
        const at::Tensor v = kv.narrow(-1, nope, Dv);
        out.q.push_back(qq);
        out.k.push_back(k);
        out.v.push_back(v);
        x = x + at::linear(causalAttention(qq, k, v, scale).transpose(0, 1).reshape({T, H * Dv}),
                           W(a + "o_proj.weight"));
        const at::Tensor h2 = rmsNorm(x, W(p + "post_attention_layernorm.weight"), eps);
        const std::string m = p + "mlp.";
        if (l < c["first_k_dense_replace"].get<int64_t>()) {
            x = x + swigluRef(w, m, h2);
            continue;
        }
        // Mistral4TopkRouter: softmax; a group's score its two best; the best topk_group groups;
        // the top k of their experts (the others 0); the softmax weights renormalised × scale.
        const int64_t E = c["n_routed_experts"], G = c["n_group"], K = c["num_experts_per_tok"];
        const at::Tensor logits = at::linear(h2, W(m + "gate.weight"));
        const at::Tensor s = knobs.sigmoidRouter ? at::sigmoid(logits) : at::softmax(logits, -1);
        const at::Tensor groups = std::get<0>(s.view({T, G, E / G}).topk(2, -1)).sum(-1);
        const at::Tensor keep = at::zeros_like(groups).scatter_(
            1, std::get<1>(groups.topk(c["topk_group"].get<int64_t>(), -1)), 1.0);
        const at::Tensor mask =
            keep.unsqueeze(-1).expand({T, G, E / G}).reshape({T, E}).to(at::kBool);
        const at::Tensor idx = std::get<1>(s.masked_fill(mask.logical_not(), 0.0).topk(K, -1));
        at::Tensor wts = s.gather(1, idx);
        wts = wts / (wts.sum(-1, true) + 1e-20) * c["routed_scaling_factor"].get<double>();
        at::Tensor y = swigluRef(w, m + "shared_experts.", h2);
        for (int64_t i = 0; i < T; ++i)
            for (int64_t j = 0; j < K; ++j) {
                const std::string e =
                    m + "experts." + std::to_string(idx[i][j].item<int64_t>()) + ".";
                y[i] += wts[i][j] * swigluRef(w, e, h2[i].unsqueeze(0)).squeeze(0);
            }
        x = x + y;
    }
    out.logits = at::linear(rmsNorm(x, W("model.norm.weight"), eps), W("lm_head.weight"));
    return out;
}

/// Mistral 4 in small: 3 layers (the first dense), 4 heads of q·k 16 + 8 and values 12 over
/// latents of 16 (q: 32); 8 experts of 24 in 2 groups, the top 2 of the best group, scaled by 1.5,
/// one shared expert; YaRN of factor 4 over an original 8 positions (mscale = mscale_all_dim = 1,
/// as Mistral Small 4 gives them) and β = 0.5, so that 37 positions see the query scale grow
/// four times.
json mistral4Config() {
    return {{"architectures", {"Mistral4ForCausalLM"}},
            {"model_type", "mistral4"},
            {"vocab_size", 101},
            {"hidden_size", 64},
            {"intermediate_size", 48},
            {"moe_intermediate_size", 24},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 4},
            {"q_lora_rank", 32},
            {"kv_lora_rank", 16},
            {"qk_nope_head_dim", 16},
            {"qk_rope_head_dim", 8},
            {"v_head_dim", 12},
            {"head_dim", 24},
            {"n_routed_experts", 8},
            {"n_shared_experts", 1},
            {"num_experts_per_tok", 2},
            {"n_group", 2},
            {"topk_group", 1},
            {"norm_topk_prob", true},
            {"routed_scaling_factor", 1.5},
            {"first_k_dense_replace", 1},
            {"rope_interleave", true},
            {"rope_parameters",
             {{"rope_type", "yarn"},
              {"rope_theta", 10000.0},
              {"factor", 4.0},
              {"original_max_position_embeddings", 8},
              {"beta_fast", 32.0},
              {"beta_slow", 1.0},
              {"mscale", 1.0},
              {"mscale_all_dim", 1.0},
              {"llama_4_scaling_beta", 0.5},
              {"partial_rotary_factor", 8.0 / 24.0}}},
            {"max_position_embeddings", 512},
            {"rms_norm_eps", 0.05}, // (away from the latent norms' own 1e-6, so both show)
            {"tie_word_embeddings", false},
            {"dtype", "float32"}};
}

/// `w` rewritten into `dir` with names under `body` (the decoder) and `head` (lm_head's), and
/// `config` as its config.json.
void writeAs(const QString& dir, const json& config, const Weights& w, const std::string& body,
             const std::string& head) {
    QVERIFY(QDir().mkpath(dir));
    std::vector<std::pair<std::string, at::Tensor>> list;
    for (const auto& [n, t] : w)
        list.emplace_back(n.rfind("model.", 0) == 0 ? body + n.substr(6)
                          : n == "lm_head.weight"   ? head
                                                    : n,
                          t.to(at::kFloat));
    test::writeFile(dir + "/config.json", QByteArray::fromStdString(config.dump(1)));
    model::writeSafetensors((dir + "/model.safetensors").toStdString(), list);
}

/// The Mistral 3 vision-language config that holds `text` as its language model.
json vlConfig(json text) {
    json c = {{"architectures", {"Mistral3ForConditionalGeneration"}},
              {"model_type", "mistral3"},
              {"vision_config", {{"model_type", "pixtral"}}}};
    text.erase("architectures");
    c["text_config"] = text;
    return c;
}

} // namespace

class TestModelMistral4 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    /// Logits, the layers' q (after RoPE and the position's scale), k and v in one pass and in
    /// chunks, greedy steps through the cache; the reference with DeepSeek's mscale² in the
    /// softmax scale, or with DeepSeek's sigmoid router, is far from it (each knob matters).
    void followsTransformers() {
        const QString dir = m_dir.filePath(QStringLiteral("mistral4"));
        const json c = mistral4Config();
        const Weights w = makeModel(dir, c, 31);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("mistral4"));
        const auto ref = [&](const std::vector<int64_t>& ids) {
            return referenceMistral4(c, w, ids);
        };
        followsReference(*model, ref, QStringLiteral("mistral4"), 32);
        const std::vector<int64_t> ids = randomIds(20, 101, 33);
        const at::Tensor exact = referenceMistral4(c, w, ids).logits;
        QVERIFY(largestDifference(referenceMistral4(c, w, ids, {.deepseekMscale = true}).logits,
                                  exact) > 1e-2);
        QVERIFY(largestDifference(referenceMistral4(c, w, ids, {.sigmoidRouter = true}).logits,
                                  exact) > 1e-2);
    }

    /// Mistral Small 4's folders: Mistral3ForConditionalGeneration with the decoder under
    /// model.language_model and lm_head beside it (transformers 5), or under language_model.model
    /// with language_model.lm_head (4.x): the same logits as the text model's folder.
    void visionLanguageFoldersOpen() {
        const QString dir = m_dir.filePath(QStringLiteral("text"));
        const json c = mistral4Config();
        const Weights w = makeModel(dir, c, 41);
        const std::vector<int64_t> ids = randomIds(20, 101, 42);
        const at::Tensor text = model::Model::open(dir.toStdString())->logits(ids);
        const QString v5 = m_dir.filePath(QStringLiteral("vl5")), v4 = m_dir.filePath("vl4");
        writeAs(v5, vlConfig(c), w, "model.language_model.", "lm_head.weight");
        writeAs(v4, vlConfig(c), w, "language_model.model.", "language_model.lm_head.weight");
        for (const QString& d : {v5, v4}) {
            auto m = model::Model::open(d.toStdString());
            QCOMPARE(m->config().family, std::string("mistral3"));
            QCOMPARE(m->config().moe.router, model::MoeRouter::SoftmaxGroups);
            QVERIFY(at::equal(m->logits(ids), text));
        }
    }

    /// Ministral 3 (and the Mistral 3 folders that hold it): Mistral's block whose q is scaled by
    /// its position after RoPE. With β = 0 it is the Mistral model of the same weights; with β,
    /// layer 0's q at position p is that q × (1 + β·log(1 + ⌊p / original⌋)), exactly.
    void ministral3ScalesQueriesByPosition() {
        const json rope = {{"rope_type", "yarn"},
                           {"rope_theta", 1e6},
                           {"factor", 4.0},
                           {"original_max_position_embeddings", 8},
                           {"beta_fast", 32.0},
                           {"beta_slow", 1.0},
                           {"mscale", 1.0},
                           {"mscale_all_dim", 1.0},
                           {"llama_4_scaling_beta", 0.0}};
        json m3 = {{"architectures", {"Ministral3ForCausalLM"}},
                   {"model_type", "ministral3"},
                   {"vocab_size", 101},
                   {"hidden_size", 64},
                   {"intermediate_size", 96},
                   {"num_hidden_layers", 2},
                   {"num_attention_heads", 4},
                   {"num_key_value_heads", 2},
                   {"head_dim", 16},
                   {"rope_parameters", rope},
                   {"sliding_window", nullptr},
                   {"max_position_embeddings", 512},
                   {"rms_norm_eps", 1e-5},
                   {"tie_word_embeddings", false},
                   {"dtype", "float32"}};
        const QString flat = m_dir.filePath(QStringLiteral("ministral3-flat"));
        const Weights w = makeModel(flat, m3, 51);
        json asMistral = m3;
        asMistral["architectures"] = {"MistralForCausalLM"};
        asMistral["model_type"] = "mistral";
        const QString mis = m_dir.filePath(QStringLiteral("as-mistral"));
        writeAs(mis, asMistral, w, "model.", "lm_head.weight");
        const std::vector<int64_t> ids = randomIds(30, 101, 52);
        auto flatModel = model::Model::open(flat.toStdString());
        QVERIFY(
            at::equal(flatModel->logits(ids), model::Model::open(mis.toStdString())->logits(ids)));
        m3["rope_parameters"]["llama_4_scaling_beta"] = 0.3;
        const QString scaled = m_dir.filePath(QStringLiteral("ministral3"));
        writeAs(scaled, m3, w, "model.", "lm_head.weight");
        auto model = model::Model::open(scaled.toStdString());
        QCOMPARE(model->config().family, std::string("ministral3"));
        const at::Tensor q = model->capture(ids, true).q[0],
                         q0 = flatModel->capture(ids, true).q[0];
        const at::Tensor t =
            1 + 0.3 * at::log(1 + at::floor(at::arange(30, at::kFloat) / 8.0)); // [T]
        SPARQLAB_VERIFY_CLOSE(q, q0 * t.view({1, 30, 1}), 1e-5,
                              QStringLiteral("ministral3 layer 0 q"));
        QVERIFY(largestDifference(model->logits(ids), flatModel->logits(ids)) > 1e-3);
        // The same through a Mistral 3 folder (Ministral 3's own layout: the decoder under
        // model.language_model).
        const QString vl = m_dir.filePath(QStringLiteral("ministral3-vl"));
        writeAs(vl, vlConfig(m3), w, "model.language_model.", "lm_head.weight");
        QVERIFY(at::equal(model::Model::open(vl.toStdString())->logits(ids), model->logits(ids)));
    }

    /// What the model says of itself: Mistral4Config's and Ministral3Config's defaults, the
    /// router, the temperature, the rotary part (partial_rotary_factor of the whole head).
    void whatTheModelSays() {
        verifyParameterCount(m_dir.filePath(QStringLiteral("info")), mistral4Config(), 61);
        const model::ModelConfig mc = model::parseModelConfig(mistral4Config().dump(), "c.json");
        QCOMPARE(mc.rotaryDim, int64_t{8});
        QCOMPARE(mc.attnScale, 1.0 / std::sqrt(24.0));
        QCOMPARE(mc.attnTemperatureScale, 0.5);
        QCOMPARE(mc.attnTemperatureFloor, 8.0);
        QVERIFY(mc.attnTemperatureEveryLayer);
        QVERIFY(!mc.moe.scoreCorrection);
        const auto rows = model::attentionModifierSummary(mc); // (the lab's model panel)
        QVERIFY(std::find(rows.begin(), rows.end(),
                          std::pair<std::string, std::string>{
                              "Query scale", "× 1 + 0.5·ln(1 + ⌊pos / 8⌋), every layer"}) !=
                rows.end());
        const auto j = json::parse(model::attentionFeaturesJson(mc));
        QCOMPARE(j["attention_temperature"]["shift"], json(0.0));
        const model::ModelConfig d = model::parseModelConfig(
            json{{"architectures", {"Mistral4ForCausalLM"}}}.dump(), "c.json");
        QCOMPARE(d.nLayers, int64_t{36});
        QCOMPARE(d.headDim, int64_t{128});
        QCOMPARE(d.mla.kvLoraRank, int64_t{256});
        QCOMPARE(d.moe.experts, int64_t{128});
        QCOMPARE(d.moe.topK, int64_t{4});
        QVERIFY(d.moe.layers[0]); // (first_k_dense_replace 0: every layer's MLP is experts)
        // (no rope_parameters: Mistral4Config's own, YaRN of 128 over 8,192 and β 0.1)
        QCOMPARE(d.rope.scaling, std::string("yarn"));
        QCOMPARE(d.rope.factor, 128.0);
        QCOMPARE(d.attnTemperatureScale, 0.1);
        QCOMPARE(d.attnTemperatureFloor, 8192.0);
        QCOMPARE(d.rotaryDim, int64_t{64});
        const model::ModelConfig m3 = model::parseModelConfig(
            json{{"architectures", {"Ministral3ForCausalLM"}}}.dump(), "c.json");
        QCOMPARE(m3.nLayers, int64_t{34});
        QCOMPARE(m3.rope.scaling, std::string("yarn"));
        QCOMPARE(m3.rope.factor, 16.0);
        QCOMPARE(m3.rope.theta, 1e6);
        QCOMPARE(m3.attnTemperatureScale, 0.1);
        QCOMPARE(m3.attnTemperatureFloor, 16384.0);
        QVERIFY(m3.layerWindow.empty());
        // transformers 4.x's rope_scaling (with rope_theta beside it) carries β too.
        json legacy = {{"architectures", {"Ministral3ForCausalLM"}},
                       {"rope_theta", 1e6},
                       {"rope_scaling",
                        {{"type", "yarn"},
                         {"factor", 8.0},
                         {"original_max_position_embeddings", 4096},
                         {"llama_4_scaling_beta", 0.2}}}};
        const model::ModelConfig lm = model::parseModelConfig(legacy.dump(), "c.json");
        QCOMPARE(lm.rope.factor, 8.0);
        QCOMPARE(lm.attnTemperatureScale, 0.2);
        QCOMPARE(lm.attnTemperatureFloor, 4096.0);
        // A Mistral 3 folder's language model ties its embeddings as its own config says, over
        // the top-level key (transformers 5's Mistral3Config defaults it to true).
        json tied = vlConfig(mistral4Config());
        tied["tie_word_embeddings"] = true;
        QVERIFY(!model::parseModelConfig(tied.dump(), "c.json").tieEmbeddings);
        tied["text_config"].erase("tie_word_embeddings");
        QVERIFY(model::parseModelConfig(tied.dump(), "c.json").tieEmbeddings);
        // A Mistral 3 folder without a text model type holds Mistral's (Mistral Small 3.1).
        const model::ModelConfig small31 = model::parseModelConfig(
            json{{"architectures", {"Mistral3ForConditionalGeneration"}},
                 {"text_config", {{"hidden_size", 64}, {"num_attention_heads", 16}}}}
                .dump(),
            "c.json");
        QCOMPARE(small31.mla.kvLoraRank, int64_t{0});
        QCOMPARE(small31.nKvHeads, int64_t{8});
    }

    /// Bad configs: one line naming the key.
    void badConfigs() {
        verifyBadConfigs(
            mistral4Config(), "mistral4/config.json",
            {{[](json& c) { c["rope_parameters"]["llama_4_scaling_beta"] = -1; },
              "rope_parameters.llama_4_scaling_beta"},
             {[](json& c) { c["rope_parameters"].erase("original_max_position_embeddings"); },
              "rope_parameters.original_max_position_embeddings"},
             {[](json& c) { c["n_group"] = 3; }, "n_group"}});
        verifyBadConfigs(vlConfig(mistral4Config()), "mistral3/config.json",
                         {{[](json& c) { c["text_config"]["model_type"] = "pixtral"; },
                           "text_config.model_type"}});
    }
};

QTEST_GUILESS_MAIN(TestModelMistral4)
#include "test_model_mistral4.moc"
