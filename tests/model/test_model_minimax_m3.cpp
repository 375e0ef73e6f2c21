// MiniMax-M3 (MiniMaxM3VLForCausalLM, transformers' modular_minimax_m3_vl.py) against a reference
// forward written here in float64: its block indexer, one selection per group of query heads,
// (1 + w) norms, SwiGLU-OAI and experts with a shared one; its logits, q, k, v, greedy steps
// through the cache and H2O's observation of a dense prefill; the hub's and the vision-language
// folders; and its block scores in a capture under the indexer method
// (docs/learned-sparse-and-hybrid.md §5, §6, §8).

#include "float64_reference.h"
#include "test_support.h"

#include "analysis/decode_traffic.h"
#include "attention/causal.h"
#include "attention/method_spec.h"
#include "attention/select.h"
#include "capture/capture_file.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <tuple>

using namespace sparqlab;
using namespace sparqlab::test::f64;

#define VERIFY_CLOSE SPARQLAB_VERIFY_CLOSE

namespace {

/// SwiGLU-OAI, gate and up in halves: (clamp(up, ±L) + 1)·g·σ(α·g), g = min(gate, L).
at::Tensor swigluOai(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up,
                     const at::Tensor& down, double limit, double alpha) {
    const at::Tensor g = at::linear(x, gate).clamp_max(limit);
    const at::Tensor u = at::linear(x, up).clamp(-limit, limit);
    return at::linear((u + 1) * (g * at::sigmoid(g * alpha)), down);
}

/// MiniMaxM3VLIndexer.forward and build_block_mask: per indexer head g, query s and key t, the
/// score q_g·k; a block's score the largest of its causal keys'; the query's own last `local`
/// blocks scored +inf; the top min(topk, blocks) blocks with a causal key kept. Returns the
/// mask [Hi, T, T] (kept and causal) and, in `blockScores`, the scores before the +inf.
at::Tensor m3BlockMask(const at::Tensor& iq, const at::Tensor& ik, int64_t block, int64_t topk,
                       int64_t local, at::Tensor& blockScores) {
    const int64_t Hi = iq.size(0), T = iq.size(1), nb = (T + block - 1) / block;
    at::Tensor z = at::matmul(iq, ik.transpose(1, 2)).expand({Hi, T, T}).clone();
    for (int64_t s = 0; s < T; ++s)
        for (int64_t t = s + 1; t < T; ++t)
            z.select(1, s).select(-1, t).fill_(-kInf);
    at::Tensor scores = at::full({Hi, T, nb}, -kInf, at::kDouble);
    for (int64_t t = 0; t < T; ++t) {
        at::Tensor b = scores.select(-1, t / block);
        b.copy_(at::maximum(b, z.select(-1, t)));
    }
    blockScores = scores.clone();
    for (int64_t s = 0; s < T; ++s)
        for (int64_t j = 0; j < local; ++j)
            scores.select(1, s).select(-1, std::max<int64_t>(s / block - j, 0)).fill_(kInf);
    const auto [top, idx] = scores.topk(std::min(topk, nb), -1);
    at::Tensor mask = at::zeros({Hi, T, T}, at::kBool);
    for (int64_t g = 0; g < Hi; ++g)
        for (int64_t s = 0; s < T; ++s)
            for (int64_t j = 0; j < top.size(-1); ++j) {
                if (top[g][s][j].item<double>() == -kInf)
                    continue;
                const int64_t b = idx[g][s][j].item<int64_t>();
                for (int64_t t = b * block; t < std::min((b + 1) * block, s + 1); ++t)
                    mask[g][s][t] = true;
            }
    return mask;
}

/// The text model's forward pass on ids (weights under the hub's names, no prefix).
RefOut referenceM3(const json& c, const Weights& w, const std::vector<int64_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), L = c["num_hidden_layers"],
                  H = c["num_attention_heads"], KV = c["num_key_value_heads"], D = c["head_dim"];
    const int64_t Hi = c["index_n_heads"], Di = c["index_head_dim"], rot = c["rotary_dim"];
    const double eps = c["rms_norm_eps"], limit = c["swiglu_limit"], alpha = c["swiglu_alpha"];
    auto W = [&](const std::string& n) { return w.at(n); };
    const at::Tensor inv = defaultInv(c["rope_parameters"]["rope_theta"], rot);
    at::Tensor x = at::embedding(W("model.embed_tokens.weight"), at::tensor(ids, at::kLong));
    RefOut out;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.";
        const at::Tensor h = rmsNorm(x, W(p + "input_layernorm.weight"), eps, true);
        at::Tensor q = rmsNorm(at::linear(h, W(a + "q_proj.weight")).view({T, H, D}),
                               W(a + "q_norm.weight"), eps, true)
                           .transpose(0, 1);
        at::Tensor k = rmsNorm(at::linear(h, W(a + "k_proj.weight")).view({T, KV, D}),
                               W(a + "k_norm.weight"), eps, true)
                           .transpose(0, 1);
        const at::Tensor v = at::linear(h, W(a + "v_proj.weight")).view({T, KV, D}).transpose(0, 1);
        q = rope(q, inv, rot, true);
        k = rope(k, inv, rot, true);
        out.q.push_back(q);
        out.k.push_back(k);
        out.v.push_back(v);
        at::Tensor z = at::matmul(q, k.repeat_interleave(H / KV, 0).transpose(1, 2)) /
                       std::sqrt(static_cast<double>(D));
        at::Tensor seen = at::ones({T, T}, at::kBool).tril().expand({H, T, T});
        if (c["layer_types"][l] == "minimax_m3_sparse") {
            const at::Tensor iq =
                rope(rmsNorm(at::linear(h, W(a + "index_q_proj.weight")).view({T, Hi, Di}),
                             W(a + "index_q_norm.weight"), eps, true)
                         .transpose(0, 1),
                     inv, rot, true);
            const at::Tensor ik =
                rope(rmsNorm(at::linear(h, W(a + "index_k_proj.weight")).view({T, 1, Di}),
                             W(a + "index_k_norm.weight"), eps, true)
                         .transpose(0, 1),
                     inv, rot, true);
            seen = m3BlockMask(iq, ik, c["index_block_size"], c["index_topk_blocks"],
                               c["index_local_blocks"], out.blockScores[l])
                       .repeat_interleave(H / Hi, 0);
        }
        out.masks.push_back(seen.contiguous());
        z = z.masked_fill(seen.logical_not(), -kInf);
        out.probs.push_back(at::softmax(z, -1));
        const at::Tensor attn = at::matmul(out.probs.back(), v.repeat_interleave(H / KV, 0));
        x = x + at::linear(attn.transpose(0, 1).reshape({T, H * D}), W(a + "o_proj.weight"));
        const at::Tensor h2 = rmsNorm(x, W(p + "post_attention_layernorm.weight"), eps, true);
        if (c["mlp_layer_types"][l] == "dense") {
            x = x + swigluOai(h2, W(p + "mlp.gate_proj.weight"), W(p + "mlp.up_proj.weight"),
                              W(p + "mlp.down_proj.weight"), limit, alpha);
            continue;
        }
        // MiniMaxM3VLTopKRouter: σ, the top k of σ + the correction bias, σ of those
        // renormalised; Laguna's block: Σ w·expert(x) × routed_scaling_factor + shared(x).
        const std::string m = p + "block_sparse_moe.";
        const at::Tensor sg = at::sigmoid(at::linear(h2, W(m + "gate.weight")));
        const at::Tensor idx = std::get<1>((sg + W(m + "e_score_correction_bias"))
                                               .topk(c["num_experts_per_tok"].get<int64_t>(), -1));
        const at::Tensor wts = sg.gather(1, idx) / sg.gather(1, idx).sum(-1, true);
        at::Tensor y = at::zeros_like(h2);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < idx.size(1); ++j) {
                const std::string e =
                    m + "experts." + std::to_string(idx[t][j].item<int64_t>()) + ".";
                y[t] += wts[t][j] * swigluOai(h2[t], W(e + "w1.weight"), W(e + "w3.weight"),
                                              W(e + "w2.weight"), limit, alpha);
            }
        const std::string sh = m + "shared_experts.";
        x = x + y * c["routed_scaling_factor"].get<double>() +
            swigluOai(h2, W(sh + "gate_proj.weight"), W(sh + "up_proj.weight"),
                      W(sh + "down_proj.weight"), limit, alpha);
    }
    x = rmsNorm(x, W("model.norm.weight"), eps, true);
    out.logits = at::linear(x, W("lm_head.weight"));
    return out;
}

/// MiniMax-M3's text config as transformers 5.x names its keys: 3 layers (the first dense with
/// plain attention, then two sparse ones with the block indexer), 4 indexer heads each selecting
/// for 2 of the 8 query heads (which share 2 KV heads 4 by 4), blocks of 4 keys, the top 3 (the
/// query's own and the one before among them) of up to 6, a SwiGLU clamp that bites.
json m3Config() {
    return {{"architectures", {"MiniMaxM3VLForCausalLM"}},
            {"model_type", "minimax_m3_vl_text"},
            {"vocab_size", 97},
            {"hidden_size", 64},
            {"intermediate_size", 32},
            {"dense_intermediate_size", 48},
            {"shared_intermediate_size", 24},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 2},
            {"head_dim", 16},
            {"rotary_dim", 8},
            {"max_position_embeddings", 256},
            {"rms_norm_eps", 1e-6},
            {"num_local_experts", 8},
            {"num_experts_per_tok", 2},
            {"routed_scaling_factor", 2.0},
            {"swiglu_alpha", 1.702},
            {"swiglu_limit", 1.5},
            {"hidden_act", "swigluoai"},
            {"mlp_layer_types", {"dense", "sparse", "sparse"}},
            {"layer_types", {"full_attention", "minimax_m3_sparse", "minimax_m3_sparse"}},
            {"index_n_heads", 4},
            {"index_head_dim", 16},
            {"index_block_size", 4},
            {"index_topk_blocks", 3},
            {"index_local_blocks", 2},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5000000.0}}},
            {"dtype", "float32"},
            {"tie_word_embeddings", false}};
}

} // namespace

class TestModelMiniMaxM3 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    /// MiniMax-M3: logits, every layer's q, k and v, and greedy steps through the cache (the
    /// indexer's keys cached beside K and V) against the float64 reference; the hub's config
    /// (sparse_attention_config, moe_layer_freq) and its vision-language folder give the same
    /// model.
    void miniMaxM3FollowsTransformers() {
        const json config = m3Config();
        const QString dir = m_dir.filePath(QStringLiteral("minimax_m3"));
        const Weights w = makeModel(dir, config, 23);
        auto model = model::Model::open(dir.toStdString());
        QCOMPARE(model->config().family, std::string("minimax_m3_vl"));
        QVERIFY(model->config().indexer.blocks());
        // 22 positions: 6 blocks, the last one partial.
        const std::vector<int64_t> ids = randomIds(22, 97, 5);
        const RefOut ref = referenceM3(config, w, ids);
        // The selection bites: keeping every block gives other logits.
        json all = config;
        all["index_topk_blocks"] = 6;
        const double bite =
            (referenceM3(all, w, ids).logits - ref.logits).abs().max().item<double>();
        QVERIFY2(bite > 1e-2, qPrintable(QStringLiteral("the selection changes the logits by "
                                                        "only %1")
                                             .arg(bite)));
        VERIFY_CLOSE(model->logits(ids), ref.logits, 1e-4, "MiniMax-M3 logits");
        // The indexer method at k keys keeps ⌈k / 4⌉ blocks: 3 (k = 9, 12) is the model's own
        // selection, 6 (k = 24) every block; the dense first layer stays dense.
        attention::AttentionConfig byIndexer;
        byIndexer.method = attention::Method::Indexer;
        for (const int64_t k : {9, 12}) {
            byIndexer.k = k;
            VERIFY_CLOSE(model->logits(ids, byIndexer), ref.logits, 1e-4,
                         QStringLiteral("MiniMax-M3, the indexer method at k = %1").arg(k));
        }
        byIndexer.k = 24;
        VERIFY_CLOSE(model->logits(ids, byIndexer), referenceM3(all, w, ids).logits, 1e-4,
                     "MiniMax-M3, the indexer method keeping every block");
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        // In one pass, and in chunks of 5 queries against the keys so far (the indexer's keys
        // cached between them, chunks that start inside a block).
        const model::CaptureExample chunked =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/5);
        for (const model::CaptureExample* c : {&e, &chunked})
            for (int64_t l = 0; l < 3; ++l) {
                const QString where =
                    QStringLiteral("MiniMax-M3 layer %1%2 ").arg(l).arg(c == &e ? "" : ", chunked");
                VERIFY_CLOSE(c->q[l], ref.q[static_cast<size_t>(l)], 1e-4, where + "q");
                VERIFY_CLOSE(c->k[l], ref.k[static_cast<size_t>(l)], 1e-4, where + "k");
                VERIFY_CLOSE(c->v[l], ref.v[static_cast<size_t>(l)], 1e-4, where + "v");
            }
        // Greedy decoding with the cache from 7 tokens: the steps cross blocks of 4.
        const std::vector<int64_t> head(ids.begin(), ids.begin() + 7);
        const model::Generation gen = model->generate(head, 10, {}, /*stopAtEos=*/false);
        std::vector<int64_t> seq = head;
        seq.insert(seq.end(), gen.newIds.begin(), gen.newIds.end());
        const RefOut chain = referenceM3(config, w, seq);
        for (size_t i = 0; i < gen.stepLogits.size(); ++i)
            VERIFY_CLOSE(gen.stepLogits[i], chain.logits[6 + static_cast<int64_t>(i)], 1e-4,
                         QStringLiteral("MiniMax-M3 generation step %1").arg(i));
        // A dense prefill leaves H2O the attention the model paid (SPARQ.md §4.4.1: summed over
        // the queries, averaged over a KV head's query heads): on the sparse layers, that of its
        // own selection. The prefill observes all but the last token.
        const std::vector<int64_t> head21(ids.begin(), ids.end() - 1);
        const RefOut headRef = referenceM3(config, w, head21);
        const auto prefill = model->prefillDense(ids, 8);
        for (int64_t l = 0; l < 3; ++l) {
            const at::Tensor acc = prefill->prefillStates()[static_cast<size_t>(l)]
                                       .methods.at(attention::Method::H2O)
                                       ->tensors()
                                       .at("acc");
            const int64_t T = static_cast<int64_t>(head21.size());
            const at::Tensor want = headRef.probs[static_cast<size_t>(l)]
                                        .view({2, 4, T, T})
                                        .mean(1)
                                        .sum(1)
                                        .unsqueeze(0);
            VERIFY_CLOSE(acc.narrow(-1, 0, T), want, 1e-4,
                         QStringLiteral("MiniMax-M3 H2O's accumulated attention, layer %1").arg(l));
        }
        // The hub's keys: the indexer's and the sparse layers' in sparse_attention_config, the
        // MLPs' in moe_layer_freq.
        json hub = config;
        for (const char* k : {"layer_types", "mlp_layer_types", "index_n_heads", "index_head_dim",
                              "index_block_size", "index_topk_blocks", "index_local_blocks"})
            hub.erase(k);
        hub["moe_layer_freq"] = {0, 1, 1};
        hub["sparse_attention_config"] = {{"sparse_attention_freq", {0, 1, 1}},
                                          {"sparse_num_index_heads", 4},
                                          {"sparse_index_dim", 16},
                                          {"sparse_block_size", 4},
                                          {"sparse_topk_blocks", 3},
                                          {"sparse_local_block", 2},
                                          {"sparse_init_block", 0}};
        hub["index_topk_blocks"] = 6; // the nested key wins (MiniMaxM3VLTextConfig)
        const QString hubDir = m_dir.filePath(QStringLiteral("minimax_m3-hub"));
        QDir().mkpath(hubDir);
        QVERIFY(sparqlab::test::writeFile(hubDir + "/config.json",
                                          QByteArray::fromStdString(hub.dump(1))));
        QVERIFY(QFile::copy(dir + "/model.safetensors", hubDir + "/model.safetensors"));
        QVERIFY(model::Model::open(hubDir.toStdString())->logits(ids).equal(model->logits(ids)));
        // The vision-language folder: the text config in text_config (the hub bundles it as
        // minimax_m2's), the weights under language_model., a vision tower not read.
        json text = config;
        text.erase("architectures");
        text["model_type"] = "minimax_m2";
        const json vl{{"architectures", {"MiniMaxM3VLForConditionalGeneration"}},
                      {"model_type", "minimax_m3_vl"},
                      {"text_config", text},
                      {"vision_config", {{"hidden_size", 32}}}};
        const QString vlDir = m_dir.filePath(QStringLiteral("minimax_m3-vl"));
        QDir().mkpath(vlDir);
        QVERIFY(sparqlab::test::writeFile(vlDir + "/config.json",
                                          QByteArray::fromStdString(vl.dump(1))));
        std::vector<std::pair<std::string, at::Tensor>> prefixed;
        for (const auto& [n, t] : w)
            prefixed.emplace_back("language_model." + n, t.to(at::kFloat));
        prefixed.emplace_back("vision_tower.patch_embedding.weight", at::zeros({4, 4}));
        model::writeSafetensors((vlDir + "/model.safetensors").toStdString(), prefixed);
        QVERIFY(model::Model::open(vlDir.toStdString())->logits(ids).equal(model->logits(ids)));
    }

    /// MiniMax-M3 in a capture (docs/learned-sparse-and-hybrid.md §8): each sparse layer's block
    /// scores per indexer head are the reference's, NaN after the query and on the full-attention
    /// layer, in one pass or in chunks of 5; a version 5 file keeps them; the indexer method on the
    /// capture at the model's 3 blocks is the reference's attention on every layer; at k = 4 (one
    /// block, fewer than the 2 local ones) each query keeps its own block only.
    void miniMaxM3InACapture() {
        const json config = m3Config();
        const QString dir = m_dir.filePath(QStringLiteral("minimax_m3-capture"));
        const Weights w = makeModel(dir, config, 23);
        auto model = model::Model::open(dir.toStdString());
        const std::vector<int64_t> ids = randomIds(22, 97, 5);
        const RefOut ref = referenceM3(config, w, ids);
        const model::CaptureInfo info = model->captureInfo();
        QCOMPARE(info.indexBlockSize, int64_t{4});
        QCOMPARE(info.indexLocalBlocks, int64_t{2});
        QCOMPARE(info.indexTopKeys(), int64_t{12});
        QCOMPARE(info.layerIndexed, (std::vector<int64_t>{0, 1, 1}));
        QCOMPARE(info.formatVersion(), int64_t{5});
        const model::CaptureExample e = model->capture(ids, /*allQueries=*/true);
        const model::CaptureExample chunked =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/5);
        QCOMPARE(e.indexScores.sizes().vec(), (std::vector<int64_t>{3, 4, 22, 6}));
        QVERIFY(at::isnan(e.indexScores[0]).all().item<bool>()); // full attention: no indexer
        for (const model::CaptureExample* c : {&e, &chunked})
            for (const int64_t l : {1, 2}) {
                const at::Tensor want = ref.blockScores.at(l), seen = at::isfinite(want);
                QVERIFY(at::isnan(c->indexScores[l]).equal(seen.logical_not()));
                // Within 2e-5 of the largest score (about 50; float32 through the layers).
                const at::Tensor kept = want.masked_select(seen);
                VERIFY_CLOSE(c->indexScores[l].masked_select(seen), kept,
                             2e-5 * kept.abs().max().item<double>(),
                             QStringLiteral("block scores, layer %1").arg(l));
            }
        const std::string path = m_dir.filePath(QStringLiteral("m3.h5")).toStdString();
        capture::CaptureWriter writer(path, info);
        writer.add(e);
        writer.finish();
        const capture::CaptureReader reader(path);
        QCOMPARE(reader.info().layerIndexed, info.layerIndexed);
        QVERIFY(at::allclose(reader.read(0).indexScores, e.indexScores, 0, 0, /*nan=*/true));
        QVERIFY(at::allclose(reader.readLayer(0, 2).indexScores[0], e.indexScores[2], 0, 0, true));
        // The indexer method over the captured q, K and V of each layer, every query a step.
        auto run = [&](int64_t l, int64_t k, int64_t local = 0) {
            attention::AttentionConfig c;
            c.method = attention::Method::Indexer;
            c.k = k;
            if (local > 0)
                c.local = local;
            attention::CausalInputs in;
            in.q = e.q[l].unsqueeze(0);
            in.k = e.k[l].unsqueeze(0);
            in.v = e.v[l].unsqueeze(0);
            for (int64_t t = 0; t < 22; ++t)
                in.positions.push_back(t);
            in.extra["index_scores"] = e.indexScoresByPosition(l);
            return attention::runCausal(in, info.layerConfig(l, c));
        };
        for (int64_t l = 0; l < 3; ++l) { // the keys and the output of the model's attention
            const attention::AttentionResult r = run(l, 12);
            QVERIFY2(r.selected[0].equal(ref.masks[static_cast<size_t>(l)]),
                     qPrintable(QStringLiteral("the keys kept, layer %1").arg(l)));
            const at::Tensor want =
                at::matmul(ref.probs[static_cast<size_t>(l)],
                           ref.v[static_cast<size_t>(l)].repeat_interleave(4, 0));
            VERIFY_CLOSE(r.y[0], want, 1e-4,
                         QStringLiteral("the indexer method on the capture, layer %1").arg(l));
        }
        // k = 4 and 5 keep 1 and 2 blocks: the query's own (the most recent of the 2 local
        // ones), then the one before it; the indices list every key kept.
        const at::Tensor pos = at::arange(22, at::kLong), own = pos.remainder(4) + 1;
        QVERIFY(run(2, 4).count[0].equal(own.expand({8, 22})));
        const attention::AttentionResult five = run(2, 5);
        QVERIFY(five.count[0].equal((own + pos.ge(4).to(at::kLong) * 4).expand({8, 22})));
        QVERIFY(five.indices[0].ge(0).sum(-1).equal(five.count[0]));
        // --local is the local blocks' place.
        QVERIFY_THROWS_EXCEPTION(attention::AttentionError, run(2, 12, 2));
    }

    /// `traffic` on MiniMax-M3's block-indexed layers: each KV head reads the keys of the blocks
    /// kept for its query heads' indexer group, the last row of the reference's mask, at every
    /// length through 6 blocks. Exactly, where one group serves a KV head and the query's own
    /// block is forced; at most, reached at some length, where two groups share a KV head (the
    /// union) or no block is forced (the own block, partial, may lose to a whole one).
    void trafficReadsTheKeptBlocks() {
        for (const auto& [indexHeads, local, exact] :
             {std::tuple{2, 2, true}, std::tuple{2, 1, true}, std::tuple{4, 2, false},
              std::tuple{2, 0, false}}) {
            json config = m3Config();
            config["index_n_heads"] = indexHeads;
            config["index_local_blocks"] = local;
            const model::ModelConfig mc = model::parseModelConfig(config.dump(), "config.json");
            const int64_t H = 8, KV = 2, Di = 16, perKey = 16 + 16;
            bool reached = false;
            for (int64_t T = 2; T <= 24; ++T) {
                at::manual_seed(static_cast<uint64_t>(T * 10 + indexHeads + local));
                const at::Tensor iq = at::randn({indexHeads, T, Di}, at::kDouble);
                const at::Tensor ik = at::randn({1, T, Di}, at::kDouble);
                at::Tensor blockScores;
                const at::Tensor mask = m3BlockMask(iq, ik, 4, 3, local, blockScores);
                double reads = 0; // of one sparse layer, over its KV heads
                for (int64_t kv = 0; kv < KV; ++kv) {
                    at::Tensor read = at::zeros({T}, at::kBool);
                    for (int64_t h = kv * (H / KV); h < (kv + 1) * (H / KV); ++h)
                        read = read.logical_or(mask[h / (H / indexHeads)][T - 1]);
                    reads += static_cast<double>(read.sum().item<int64_t>() * perKey);
                }
                // The full-attention first layer reads every key; each sparse one the indexer's
                // key of every position and its kept blocks.
                const double model = KV * perKey * T + 2 * (Di * T + reads);
                const double counted =
                    analysis::decodeTraffic(mc, T - 1, attention::AttentionConfig{}).attentionCache;
                const QString at = QStringLiteral("%1 indexer heads, %2 local blocks, %3 keys")
                                       .arg(indexHeads)
                                       .arg(local)
                                       .arg(T);
                if (exact)
                    QVERIFY2(
                        counted == model,
                        qPrintable(
                            QStringLiteral("%1: %2, the mask %3").arg(at).arg(counted).arg(model)));
                else
                    QVERIFY2(counted >= model, qPrintable(QStringLiteral("%1: %2 < the mask %3")
                                                              .arg(at)
                                                              .arg(counted)
                                                              .arg(model)));
                reached = reached || (counted == model && T > 16);
            }
            // A bound is reached where it must be tight: past 4 blocks, where the union of two
            // groups' (4 blocks) or the whole blocks' (3) is fewer than every key.
            QVERIFY2(reached, "the count is never the mask's past 4 blocks");
        }
        // By hand (§8's rule): 22 keys are 6 blocks of 4, the own one holding 2; the top 3 keep
        // it and 2 whole ones; two groups sharing 2 forced blocks keep at most 2 + 2 · 1; with no
        // forced block, 3 whole ones at most; 10 keys (3 blocks) are all kept.
        QCOMPARE(attention::keptBlockKeys(22, 4, 2, 3), int64_t{2 + 2 * 4});
        QCOMPARE(attention::keptBlockKeys(22, 4, 1, 3), int64_t{2 + 2 * 4});
        QCOMPARE(attention::keptBlockKeys(22, 4, 2, 3, 2), int64_t{2 + 3 * 4});
        QCOMPARE(attention::keptBlockKeys(22, 4, 0, 3), int64_t{3 * 4});
        QCOMPARE(attention::keptBlockKeys(10, 4, 2, 3), int64_t{10});
    }

    /// A long prompt's sparse layers take their query rows a few at a time (maskedAttention keeps
    /// its scores under 2^26 elements): 1,100 positions of 64 heads go in 2 row chunks, and every
    /// layer's q, k and v (the later layers' made from the sparse layers' outputs) are those of a
    /// prefill in pieces of 100 positions, each attended in one piece.
    void longPromptsInRowChunks() {
        json config = m3Config();
        config["num_attention_heads"] = 64;
        config["num_key_value_heads"] = 8;
        config["head_dim"] = 8;
        config["rotary_dim"] = 4;
        config["index_n_heads"] = 8;
        config["index_head_dim"] = 8;
        config["index_block_size"] = 64;
        config["index_topk_blocks"] = 4;
        config["index_local_blocks"] = 1;
        config["max_position_embeddings"] = 2048;
        const QString dir = m_dir.filePath(QStringLiteral("minimax_m3-long"));
        makeModel(dir, config, 29);
        auto model = model::Model::open(dir.toStdString());
        const std::vector<int64_t> ids = randomIds(1100, 97, 7);
        QVERIFY2(model::kMaskedAttentionScores < int64_t{64} * 1100 * 1100 &&
                     model::kMaskedAttentionScores >= int64_t{64} * 100 * 1100,
                 "the whole prompt takes one row chunk, or a piece of 100 more");
        const model::CaptureExample whole =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/4096);
        const model::CaptureExample pieces =
            model->capture(ids, /*allQueries=*/true, -1, {}, 0, /*chunk=*/100);
        for (const auto& [name, a, b] :
             {std::tuple{"q", whole.q, pieces.q}, std::tuple{"k", whole.k, pieces.k},
              std::tuple{"v", whole.v, pieces.v}})
            SPARQLAB_VERIFY_CLOSE_REL(a, b, 1e-4, 1e-4,
                                      QStringLiteral("a long prompt's %1").arg(name));
        // The block scores (up to about 50) within 2e-5 of the largest.
        const at::Tensor a = whole.indexScores.nan_to_num(0), b = pieces.indexScores.nan_to_num(0);
        QVERIFY(at::isnan(whole.indexScores).equal(at::isnan(pieces.indexScores)));
        VERIFY_CLOSE(a, b, 2e-5 * b.abs().max().item<double>(), "a long prompt's block scores");
    }
};

QTEST_GUILESS_MAIN(TestModelMiniMaxM3)
#include "test_model_minimax_m3.moc"
