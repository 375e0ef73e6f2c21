// Gemma 3 (text and vision-language folders), OLMo 2 and Phi-3 with longrope against a
// reference forward written here, line by line from transformers 4.51's modeling code
// (Gemma3ForCausalLM, Olmo2ForCausalLM, Phi3ForCausalLM, eager attention, no cache): the
// features ../shared/refs/hf has no golden for (local and global RoPE bases, linear scaling
// of the global layers only, the whole-projection q/k norm, norms after attention and MLP,
// partial rotary with longrope's short and long factors and attention factor, sliding
// windows), on small models with peaked attention whose weights the test draws itself.

#include "float64_reference.h"
#include "test_support.h"

#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>
#include <torch/types.h>

#include <cmath>
#include <functional>
#include <map>

using namespace sparqlab;

namespace {

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

using Weights = std::map<std::string, at::Tensor>;

/// What the reference needs, spelled out here rather than taken from ModelConfig.
struct Spec {
    std::string arch; // "gemma3", "olmo2", "phi3"
    int64_t layers = 0, heads = 0, kvHeads = 0, headDim = 0, hidden = 0, vocab = 0;
    double eps = 1e-6, theta = 10000;
    // Gemma 3
    double localTheta = 10000, linearFactor = 1, queryPreAttnScalar = 0;
    int64_t pattern = 6, window = 0;
    // Phi-3
    int64_t rotary = 0, originalMax = 0, maxPositions = 0;
    std::vector<double> shortFactor, longFactor;
    bool tied = false;
};

/// Draws weights for every parameter of a model (opened without weights): linear weights
/// N(0, 4/fan_in), embeddings N(0, 1), norm gains 1 + N(0, 0.1²) (N(0, 0.1²) for Gemma's
/// (1 + w) norms).
Weights drawWeights(const model::CausalLMImpl& shell, bool plusOne, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    Weights w;
    for (const auto& p : shell.named_parameters()) {
        const std::string& n = p.key();
        at::Tensor t = at::empty(p.value().sizes(), at::kFloat);
        if (n.find("norm") != std::string::npos)
            t.normal_(plusOne ? 0.0 : 1.0, 0.1, gen);
        else if (n.find("embed_tokens") != std::string::npos)
            t.normal_(0.0, 1.0, gen);
        else
            t.normal_(0.0, 2.0 / std::sqrt(static_cast<double>(t.size(1))), gen);
        w[n] = t;
    }
    return w;
}

/// Writes config.json and model.safetensors (weights drawn for the config) into `dir`.
Weights makeModel(const QString& dir, const QByteArray& config, bool plusOne, uint64_t seed) {
    QDir().mkpath(dir);
    sparqlab::test::writeFile(dir + "/config.json", config);
    // The parameter names and shapes the config implies, nothing loaded.
    const model::CausalLMImpl shell(model::readModelConfig((dir + "/config.json").toStdString()));
    Weights w = drawWeights(shell, plusOne, seed);
    std::vector<std::pair<std::string, at::Tensor>> list(w.begin(), w.end());
    model::writeSafetensors((dir + "/model.safetensors").toStdString(), list);
    return w;
}

// ---- the reference (HF 4.51, eager) ----

using sparqlab::test::f64::rmsNorm;

/// inv_freq = 1 / (ext · base^(2i/dim)) (ext = 1 without longrope), / factor for linear.
at::Tensor invFreq(double base, int64_t dim, const std::vector<double>& ext = {},
                   double linear = 1.0) {
    const at::Tensor e = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
    at::Tensor f = at::pow(at::scalar_tensor(base, at::kFloat), e);
    if (!ext.empty())
        f = at::tensor(ext, at::kDouble).to(at::kFloat) * f;
    return 1.0 / f / linear;
}

/// rotate_half RoPE on the first `rot` dims of x [H, T, D]; `inv` is [T, rot/2] (per position).
at::Tensor applyRope(const at::Tensor& x, const at::Tensor& inv, int64_t rot, double scale) {
    const int64_t T = x.size(1);
    const at::Tensor pos = at::arange(T, at::kLong).to(at::kFloat).unsqueeze(1);
    const at::Tensor freqs = pos * inv;
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    const at::Tensor cos = emb.cos() * scale, sin = emb.sin() * scale;
    const at::Tensor xr = x.narrow(-1, 0, rot);
    const at::Tensor half =
        at::cat({-xr.narrow(-1, rot / 2, rot / 2), xr.narrow(-1, 0, rot / 2)}, -1);
    return at::cat({xr * cos + half * sin, x.narrow(-1, rot, x.size(-1) - rot)}, -1);
}

/// Causal softmax attention of q [H, T, D] over k, v [KV, T, D]; a window w > 0 lets query i
/// see key j only when i − j < w.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                  int64_t window) {
    const int64_t H = q.size(0), T = q.size(1), g = H / k.size(0);
    const at::Tensor K = k.repeat_interleave(g, 0), V = v.repeat_interleave(g, 0);
    at::Tensor s = at::matmul(q, K.transpose(1, 2)) * scale;
    const at::Tensor i = at::arange(T, at::kLong).unsqueeze(1),
                     j = at::arange(T, at::kLong).unsqueeze(0);
    at::Tensor visible = j.le(i);
    if (window > 0)
        visible = visible.logical_and((i - j).lt(window));
    s = s.masked_fill(visible.logical_not(), -std::numeric_limits<float>::infinity());
    return at::matmul(at::softmax(s, -1), V).transpose(0, 1).reshape({T, -1}); // [T, H·D]
}

struct RefOut {
    at::Tensor logits;               // [T, vocab]
    std::vector<at::Tensor> q, k, v; // per layer, q [H, T, D] after norm and RoPE
};

/// The forward pass of `s` on ids; `longAt[t]` says whether position t was computed in a call
/// that reached past original_max_position_embeddings (Phi-3's longrope).
RefOut reference(const Spec& s, const Weights& w, const std::string& prefix,
                 const std::vector<int64_t>& ids, const std::vector<bool>& longAt = {}) {
    const int64_t T = static_cast<int64_t>(ids.size()), H = s.heads, KV = s.kvHeads, D = s.headDim;
    auto W = [&](const std::string& n) { return w.at(prefix + n); };
    const bool gemma = s.arch == "gemma3", olmo = s.arch == "olmo2", phi = s.arch == "phi3";
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    if (gemma) // Gemma3TextScaledWordEmbedding: × sqrt(hidden) in the weights' dtype
        x = x * at::scalar_tensor(std::sqrt(static_cast<double>(s.hidden)), at::kFloat);
    RefOut out;
    for (int64_t l = 0; l < s.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        auto norm = [&](const at::Tensor& t, const std::string& n) {
            return rmsNorm(t, W(p + n + ".weight"), s.eps, gemma);
        };
        at::Tensor q, k, v, inv;
        double scale = 1.0 / std::sqrt(static_cast<double>(D)), ropeScale = 1.0;
        int64_t window = 0, rot = D;
        if (gemma) {
            const at::Tensor a = norm(x, "input_layernorm");
            q = at::linear(a, W(p + "self_attn.q_proj.weight")).view({T, H, D});
            k = at::linear(a, W(p + "self_attn.k_proj.weight")).view({T, KV, D});
            v = at::linear(a, W(p + "self_attn.v_proj.weight")).view({T, KV, D});
            q = norm(q, "self_attn.q_norm"); // Gemma3RMSNorm(head_dim) on each head
            k = norm(k, "self_attn.k_norm");
            const bool sliding = (l + 1) % s.pattern != 0;
            inv = sliding ? invFreq(s.localTheta, D) : invFreq(s.theta, D, {}, s.linearFactor);
            inv = inv.unsqueeze(0).expand({T, -1});
            scale = 1.0 / std::sqrt(s.queryPreAttnScalar);
            window = sliding ? s.window : 0;
        } else if (olmo) {
            q = norm(at::linear(x, W(p + "self_attn.q_proj.weight")), "self_attn.q_norm")
                    .view({T, H, D});
            k = norm(at::linear(x, W(p + "self_attn.k_proj.weight")), "self_attn.k_norm")
                    .view({T, KV, D});
            v = at::linear(x, W(p + "self_attn.v_proj.weight")).view({T, KV, D});
            inv = invFreq(s.theta, D).unsqueeze(0).expand({T, -1});
        } else { // phi3
            const at::Tensor qkv =
                at::linear(norm(x, "input_layernorm"), W(p + "self_attn.qkv_proj.weight"));
            q = qkv.narrow(-1, 0, H * D).view({T, H, D});
            k = qkv.narrow(-1, H * D, KV * D).view({T, KV, D});
            v = qkv.narrow(-1, (H + KV) * D, KV * D).view({T, KV, D});
            rot = s.rotary;
            const at::Tensor shortInv = invFreq(s.theta, rot, s.shortFactor);
            const at::Tensor longInv = invFreq(s.theta, rot, s.longFactor);
            std::vector<at::Tensor> rows;
            for (int64_t t = 0; t < T; ++t)
                rows.push_back(!longAt.empty() && longAt[static_cast<size_t>(t)] ? longInv
                                                                                 : shortInv);
            inv = at::stack(rows);
            const double factor =
                static_cast<double>(s.maxPositions) / static_cast<double>(s.originalMax);
            ropeScale = factor <= 1
                            ? 1.0
                            : std::sqrt(1 + std::log(factor) /
                                                std::log(static_cast<double>(s.originalMax)));
            window = s.window;
        }
        q = applyRope(q.transpose(0, 1), inv, rot, ropeScale);
        k = applyRope(k.transpose(0, 1), inv, rot, ropeScale);
        v = v.transpose(0, 1);
        out.q.push_back(q);
        out.k.push_back(k);
        out.v.push_back(v);
        const at::Tensor o =
            at::linear(attend(q, k, v, scale, window), W(p + "self_attn.o_proj.weight"));
        auto gatedMlp = [&](const at::Tensor& in) {
            if (phi) { // gate_up_proj rows: gate, then up
                const at::Tensor gu = at::linear(in, W(p + "mlp.gate_up_proj.weight"));
                const auto parts = gu.chunk(2, -1);
                return at::linear(parts[1] * at::silu(parts[0]), W(p + "mlp.down_proj.weight"));
            }
            const at::Tensor g = at::linear(in, W(p + "mlp.gate_proj.weight"));
            const at::Tensor act = gemma ? at::gelu(g, "tanh") : at::silu(g);
            return at::linear(act * at::linear(in, W(p + "mlp.up_proj.weight")),
                              W(p + "mlp.down_proj.weight"));
        };
        if (gemma) {
            x = x + norm(o, "post_attention_layernorm");
            x = x +
                norm(gatedMlp(norm(x, "pre_feedforward_layernorm")), "post_feedforward_layernorm");
        } else if (olmo) {
            x = x + norm(o, "post_attention_layernorm");
            x = x + norm(gatedMlp(x), "post_feedforward_layernorm");
        } else {
            x = x + o;
            x = x + gatedMlp(norm(x, "post_attention_layernorm"));
        }
    }
    x = rmsNorm(x, W("model.norm.weight"), s.eps, gemma);
    out.logits = at::linear(x, s.tied ? W("model.embed_tokens.weight") : W("lm_head.weight"));
    return out;
}

std::vector<int64_t> randomIds(int64_t n, int64_t vocab, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const at::Tensor t = at::randint(vocab, {n}, gen, at::kLong);
    return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

/// Compares the model with the reference: logits, captured q/K/V, and greedy generation with
/// the cache from `prompt` tokens (each step's logits against the reference's at its position).
void compareWithReference(
    model::Model& model, const Spec& s, const Weights& w, const std::string& prefix,
    const std::vector<int64_t>& ids, int64_t prompt, const QString& name,
    const std::function<std::vector<bool>(int64_t, int64_t)>& longFlags = {}) {
    const int64_t T = static_cast<int64_t>(ids.size());
    const RefOut ref =
        reference(s, w, prefix, ids, longFlags ? longFlags(T, T) : std::vector<bool>{});
    VERIFY_CLOSE(model.logits(ids), ref.logits, 1e-4, name + " logits");
    const model::CaptureExample e = model.capture(ids, /*allQueries=*/true);
    for (int64_t l = 0; l < s.layers; ++l) {
        VERIFY_CLOSE(e.q[l], ref.q[static_cast<size_t>(l)], 5e-5,
                     name + " q layer " + QString::number(l));
        VERIFY_CLOSE(e.k[l], ref.k[static_cast<size_t>(l)], 5e-5,
                     name + " k layer " + QString::number(l));
        VERIFY_CLOSE(e.v[l], ref.v[static_cast<size_t>(l)], 5e-5,
                     name + " v layer " + QString::number(l));
    }
    const std::vector<int64_t> head(ids.begin(), ids.begin() + prompt);
    const model::Generation gen = model.generate(head, T - prompt, {}, /*stopAtEos=*/false);
    std::vector<int64_t> seq = head;
    seq.insert(seq.end(), gen.newIds.begin(), gen.newIds.end());
    // With the cache, each position's keys were computed in the call that first saw it.
    const RefOut chain =
        reference(s, w, prefix, seq, longFlags ? longFlags(T, prompt) : std::vector<bool>{});
    for (size_t i = 0; i < gen.stepLogits.size(); ++i)
        VERIFY_CLOSE(gen.stepLogits[i], chain.logits[prompt - 1 + static_cast<int64_t>(i)], 1e-4,
                     name + QStringLiteral(" generation step %1").arg(i));
}

/// 2 layers, 4 query and 2 KV heads of 16 dims, hidden 64, vocabulary 128.
Spec smallSpec(const std::string& arch) {
    Spec s;
    s.arch = arch;
    s.layers = 2;
    s.heads = 4;
    s.kvHeads = 2;
    s.headDim = 16;
    s.hidden = 64;
    s.vocab = 128;
    return s;
}

const char* kGemma3Text = R"({
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
  "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "query_pre_attn_scalar": 24, "sliding_window": 5, "sliding_window_pattern": 2,
  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
  "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "max_position_embeddings": 256,
  "torch_dtype": "float32"})";

Spec gemma3Spec() {
    Spec s;
    s.arch = "gemma3";
    s.layers = 4;
    s.heads = 4;
    s.kvHeads = 2;
    s.headDim = 32;
    s.hidden = 64;
    s.vocab = 128;
    s.theta = 1e6;
    s.localTheta = 1e4;
    s.linearFactor = 4;
    s.queryPreAttnScalar = 24;
    s.pattern = 2;
    s.window = 5;
    s.tied = true;
    return s;
}

} // namespace

class TestModelFamilies : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    void gemma3TextFollowsTransformers() {
        const Spec s = gemma3Spec();
        const QString dir = m_dir.filePath("gemma3");
        const Weights w = makeModel(dir, kGemma3Text, /*plusOne=*/true, 11);
        auto model = model::Model::open(dir.toStdString());
        // Layers 0 and 2 slide over 5 keys with the local base; 1 and 3 are global.
        const model::ModelConfig& c = model->config();
        QCOMPARE(c.layerWindow, (std::vector<int64_t>{5, 0, 5, 0}));
        QCOMPARE(model->net()->layerAttention(0).slidingWindow, int64_t{5});
        QVERIFY(std::abs(model->net()->layerAttention(1).scale.value_or(0) - 1 / std::sqrt(24.0)) <
                1e-12);
        compareWithReference(*model, s, w, "", randomIds(20, s.vocab, 3), 8, "gemma3");
    }

    void gemma3VisionLanguageFolderIsItsTextModel() {
        // A Gemma3ForConditionalGeneration folder: the text config nested in text_config, the
        // weights under language_model. (vision tower weights present and ignored).
        const Spec s = gemma3Spec();
        const QString text = m_dir.filePath("gemma3-text");
        const Weights w = makeModel(text, kGemma3Text, true, 12);
        const QString vlm = m_dir.filePath("gemma3-vlm");
        QDir().mkpath(vlm);
        QByteArray nested = kGemma3Text;
        nested.replace("\"architectures\": [\"Gemma3ForCausalLM\"], ", "");
        sparqlab::test::writeFile(
            vlm + "/config.json",
            "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\", "
            "\"vision_config\": {\"hidden_size\": 16}, \"text_config\": " +
                nested + "}");
        std::vector<std::pair<std::string, at::Tensor>> renamed;
        for (const auto& [n, t] : w)
            renamed.emplace_back("language_model." + n, t);
        renamed.emplace_back("vision_tower.vision_model.embeddings.patch_embedding.weight",
                             at::ones({4, 3}));
        model::writeSafetensors((vlm + "/model.safetensors").toStdString(), renamed);
        auto a = model::Model::open(text.toStdString());
        auto b = model::Model::open(vlm.toStdString());
        const std::vector<int64_t> ids = randomIds(16, s.vocab, 4);
        QVERIFY(a->logits(ids).equal(b->logits(ids)));
        Weights prefixed;
        for (const auto& [n, t] : w)
            prefixed["language_model." + n] = t;
        compareWithReference(*b, s, prefixed, "language_model.", ids, 6, "gemma3 vlm");
    }

    void olmo2FollowsTransformers() {
        Spec s = smallSpec("olmo2");
        s.theta = 500000;
        s.eps = 1e-6;
        const QString dir = m_dir.filePath("olmo2");
        const Weights w = makeModel(dir, R"({
  "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 128,
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 500000,
  "rms_norm_eps": 1e-06, "max_position_embeddings": 128, "torch_dtype": "float32"})",
                                    false, 13);
        auto model = model::Model::open(dir.toStdString());
        QVERIFY(!model->config().tieEmbeddings); // Olmo2Config's default
        compareWithReference(*model, s, w, "", randomIds(24, s.vocab, 5), 10, "olmo2");
    }

    void phi3LongropeFollowsTransformers() {
        // Partial rotary (12 of 16 dims), longrope with a 4× longer context than the original
        // 16 positions, a sliding window of 10.
        Spec s = smallSpec("phi3");
        s.eps = 1e-5;
        s.rotary = 12;
        s.originalMax = 16;
        s.maxPositions = 64;
        s.window = 10;
        s.shortFactor = {1.0, 1.1, 1.3, 1.7, 2.2, 3.0};
        s.longFactor = {1.0, 1.5, 2.5, 4.0, 7.0, 12.0};
        const QString dir = m_dir.filePath("phi3");
        const Weights w = makeModel(dir, R"({
  "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 128,
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "partial_rotary_factor": 0.75,
  "max_position_embeddings": 64, "original_max_position_embeddings": 16,
  "sliding_window": 10, "rope_scaling": {"type": "longrope",
  "short_factor": [1.0, 1.1, 1.3, 1.7, 2.2, 3.0], "long_factor": [1.0, 1.5, 2.5, 4.0, 7.0, 12.0]},
  "torch_dtype": "float32"})",
                                    false, 14);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().rotaryDim, int64_t{12});
        QCOMPARE(model->config().rope.scaling, std::string("longrope"));
        // HF picks the factors per forward call: long once the call's last position passes 16.
        auto flags = [&s](int64_t total, int64_t prompt) {
            std::vector<bool> f(static_cast<size_t>(total));
            for (int64_t t = 0; t < total; ++t)
                f[static_cast<size_t>(t)] =
                    t < prompt ? prompt > s.originalMax : t + 1 > s.originalMax;
            return f;
        };
        // 12 tokens: within the original context, short factors throughout.
        compareWithReference(*model, s, w, "", randomIds(12, s.vocab, 6), 6, "phi3 short", flags);
        // 28 tokens: long factors; generation from 12 crosses 16 with the cache.
        compareWithReference(*model, s, w, "", randomIds(28, s.vocab, 7), 12, "phi3 long", flags);
    }
};

QTEST_GUILESS_MAIN(TestModelFamilies)
#include "test_model_families.moc"
