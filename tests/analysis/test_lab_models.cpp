// The lab (head view, overview, statistics, attend, figures' inputs) on today's models
// (docs/sinks-chunks-nope-mla.md): gpt-oss's sinks and windows, DeepSeek-V3's MLA (d_v ≠ d_qk),
// SmolLM 3's and Command R7B's NoPE layers from refs/hf3, a small Llama 4 made here for its
// chunks, a small MiniMax-M3 for its block indexer (docs/learned-sparse-and-hybrid.md §8), a small
// Granite 4.0-H for its Mamba-2 hybrid's NoPE attention layers (§9), a small Nemotron-H for its
// single-mixer blocks (§10) and a small Falcon-H1 for its attention beside Mamba-2 (§11).
// Every method of the table draws the head view of every layer: it keeps only keys the layer lets
// the query see, its exact scores leave the sink's share to the sink, and the view names the
// layer's kind; the overview and the statistics are finite.

#include "test_support.h"

#include "analysis/lab.h"
#include "analysis/selection_overlap.h"
#include "analysis/stats_run.h"
#include "attention/method_table.h"
#include "capture/capture_file.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

using namespace sparqlab;

namespace {

/// A model of `config` in `dir`, its weights drawn (projections ×20: peaked attention).
QString madeModel(const QString& dir, const char* config) {
    QDir().mkpath(dir);
    sparqlab::test::writeFile(dir + "/config.json", config);
    const model::CausalLMImpl shell(model::readModelConfig((dir + "/config.json").toStdString()));
    std::vector<std::pair<std::string, at::Tensor>> w;
    shell.initialValues(3, [&](const std::string& n, const at::Tensor& t) {
        w.emplace_back(n, n.find("proj") != std::string::npos ? t * 20 : t);
    });
    model::writeSafetensors((dir + "/model.safetensors").toStdString(), w);
    return dir;
}

/// A small Llama 4 (chunks of 6 on layers 0–2, NoPE layer 3, experts on layers 1 and 3).
QString llama4(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "vocab_size": 97,
  "hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 96,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
  "no_rope_layers": [1, 1, 1, 0], "attention_chunk_size": 6, "floor_scale": 4,
  "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
  "max_position_embeddings": 256, "dtype": "float32"})");
}

/// A small MiniMax-M3: a full-attention layer, then two block-sparse ones whose 2 indexer heads
/// each keep the top 3 blocks of 4 keys (the query's own among them) for 2 of the 4 query heads.
QString miniMaxM3(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["MiniMaxM3VLForCausalLM"], "model_type": "minimax_m3_vl_text",
  "vocab_size": 97, "hidden_size": 64, "intermediate_size": 32, "dense_intermediate_size": 48,
  "shared_intermediate_size": 24, "num_hidden_layers": 3, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 16, "rotary_dim": 8, "max_position_embeddings": 256,
  "num_local_experts": 4, "num_experts_per_tok": 2, "hidden_act": "swigluoai",
  "mlp_layer_types": ["dense", "sparse", "sparse"],
  "layer_types": ["full_attention", "minimax_m3_sparse", "minimax_m3_sparse"],
  "index_n_heads": 2, "index_head_dim": 16, "index_block_size": 4, "index_topk_blocks": 3,
  "index_local_blocks": 1, "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0},
  "dtype": "float32"})");
}

/// A small Granite 4.0-H: Mamba-2 layers 0 and 2, NoPE attention layers 1 and 3, experts
/// beside the shared MLP (docs/learned-sparse-and-hybrid.md §9).
QString graniteHybrid(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
  "vocab_size": 97, "hidden_size": 64, "intermediate_size": 32, "shared_intermediate_size": 48,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 256, "num_local_experts": 4, "num_experts_per_tok": 2,
  "layer_types": ["mamba", "attention", "mamba", "attention"], "position_embedding_type": "nope",
  "mamba_n_heads": 8, "mamba_n_groups": 1, "mamba_d_state": 16, "mamba_chunk_size": 16,
  "attention_multiplier": 0.25, "residual_multiplier": 0.5, "embedding_multiplier": 4.0,
  "dtype": "float32"})");
}

/// A small Nemotron 3 Nano: blocks of one mixer each, Mamba-2 blocks 0 and 3, NoPE attention
/// blocks 2 and 5, expert blocks 1 and 4 (docs/learned-sparse-and-hybrid.md §10).
QString nemotronH(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
  "vocab_size": 97, "hidden_size": 64, "intermediate_size": 48, "hybrid_override_pattern": "ME*ME*",
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "max_position_embeddings": 256, "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16,
  "n_groups": 2, "chunk_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
  "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 24, "dtype": "float32"})");
}

/// A small Falcon-H1: attention and Mamba-2 side by side in each of 3 layers, µP multipliers
/// (docs/learned-sparse-and-hybrid.md §11).
QString falconH1(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1",
  "vocab_size": 97, "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "max_position_embeddings": 256, "mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_state": 16,
  "mamba_n_groups": 2, "mamba_chunk_size": 16, "key_multiplier": 0.39, "ssm_out_multiplier": 0.24,
  "ssm_multipliers": [0.35, 0.25, 0.35, 0.5, 0.35], "dtype": "float32"})");
}

/// A small Jamba: Mamba (Mamba-1) layers, attention without positions at layers 1 and 3,
/// experts on every other layer (docs/learned-sparse-and-hybrid.md §13).
QString jamba(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["JambaForCausalLM"], "model_type": "jamba",
  "vocab_size": 97, "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "attn_layer_period": 2, "attn_layer_offset": 1, "num_experts": 4, "num_experts_per_tok": 2,
  "mamba_d_state": 8, "dtype": "float32"})");
}

/// A small MiniMax-01: lightning attention at layers 0 and 2, softmax attention with RoPE on
/// half of each head and a window of 24 at 1 and 3, DeepNorm-like residual weights
/// (docs/learned-sparse-and-hybrid.md §14).
QString miniMax01(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["MiniMaxForCausalLM"], "model_type": "minimax",
  "vocab_size": 97, "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
  "partial_rotary_factor": 0.5, "block_size": 16, "num_local_experts": 4,
  "num_experts_per_tok": 2, "full_attn_alpha_factor": 2.8, "linear_attn_alpha_factor": 2.8,
  "mlp_alpha_factor": 2.8, "sliding_window": 24, "dtype": "float32"})");
}

/// A small Zamba2: Mamba-2 layers, hybrid at 1 and 3 running one shared attention block on
/// [x | embeddings] with RoPE and adapters of their own (docs/learned-sparse-and-hybrid.md §15).
QString zamba2(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2",
  "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 256,
  "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"], "num_mem_blocks": 1,
  "use_shared_attention_adapter": true, "adapter_rank": 4, "use_mem_rope": true,
  "mamba_d_state": 8, "mamba_ngroups": 2, "n_mamba_heads": 4, "chunk_size": 16,
  "dtype": "float32"})");
}

/// A small OLMo Hybrid: Gated DeltaNet layers, NoPE attention with OLMo 3's norms at 2 and 5
/// (docs/learned-sparse-and-hybrid.md §16).
QString olmoHybrid(const QString& dir) {
    return madeModel(dir, R"({
  "architectures": ["OlmoHybridForCausalLM"], "model_type": "olmo_hybrid",
  "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 6,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention",
                  "linear_attention", "full_attention"],
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
  "linear_value_head_dim": 16, "rope_parameters": {"rope_theta": null, "rope_type": "default"},
  "dtype": "float32"})");
}

} // namespace

class TestLabModels : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    void theLabOnTodaysModels_data() {
        QTest::addColumn<QString>("folder");
        QTest::addColumn<QString>("note"); // what the head view names some layer
        const QString hf3 = sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/");
        QTest::newRow("gpt_oss") << hf3 + "gpt_oss" << QStringLiteral("sinks");
        QTest::newRow("deepseek_v3") << hf3 + "deepseek_v3" << QStringLiteral("d_v 32");
        QTest::newRow("smollm3") << hf3 + "smollm3" << QStringLiteral("NoPE");
        QTest::newRow("cohere2") << hf3 + "cohere2" << QStringLiteral("window 16");
        QTest::newRow("llama4_text")
            << llama4(m_dir.filePath("llama4")) << QStringLiteral("chunks of 6");
        // DeepSeek-V3.2: the lab runs its own indexer beside the other methods.
        QTest::newRow("deepseek_v32")
            << sparqlab::test::sharedDir() + QStringLiteral("/refs/hf4/deepseek_v32")
            << QStringLiteral("d_v 32");
        // MiniMax-M3: its block indexer beside the other methods; the view names its layers.
        QTest::newRow("minimax_m3")
            << miniMaxM3(m_dir.filePath("minimax_m3")) << QStringLiteral("full attention");
        // Granite 4.0-H: the attention layers of a Mamba-2 hybrid, NoPE.
        QTest::newRow("granite_h")
            << graniteHybrid(m_dir.filePath("granite_h")) << QStringLiteral("NoPE");
        // Nemotron-H: the attention blocks among Mamba-2 and expert blocks, NoPE.
        QTest::newRow("nemotron_h")
            << nemotronH(m_dir.filePath("nemotron_h")) << QStringLiteral("NoPE");
        // Falcon-H1: every layer attention beside a Mamba-2 mixer.
        QTest::newRow("falcon_h1")
            << falconH1(m_dir.filePath("falcon_h1")) << QStringLiteral("with Mamba-2");
        // Jamba: attention without positions among Mamba (Mamba-1) layers.
        QTest::newRow("jamba") << jamba(m_dir.filePath("jamba")) << QStringLiteral("NoPE");
        // MiniMax-01: windowed softmax attention among lightning-attention layers.
        QTest::newRow("minimax") << miniMax01(m_dir.filePath("minimax"))
                                 << QStringLiteral("window 24");
        // Zamba2: two hybrid layers running one shared block, among Mamba-2 layers.
        QTest::newRow("zamba2") << zamba2(m_dir.filePath("zamba2"))
                                << QStringLiteral("with Mamba-2");
        // OLMo Hybrid: NoPE attention among Gated DeltaNet layers.
        QTest::newRow("olmo_hybrid")
            << olmoHybrid(m_dir.filePath("olmo_hybrid")) << QStringLiteral("NoPE");
    }

    void theLabOnTodaysModels() {
        QFETCH(QString, folder);
        QFETCH(QString, note);
        if (folder.contains(QStringLiteral("/refs/hf3/"))) // not the Llama 4 made here
            SPARQLAB_NEED_REFERENCE("refs/hf3/" + QFileInfo(folder).fileName() + "/config.json");
        if (folder.contains(QStringLiteral("/refs/hf4/")))
            SPARQLAB_NEED_REFERENCE("refs/hf4/" + QFileInfo(folder).fileName() + "/config.json");
        auto model = model::Model::open(folder.toStdString());
        std::vector<int64_t> ids;
        for (int64_t i = 0; i < 40; ++i)
            ids.push_back((i * 37 + 11) % 90 + 3);
        const int64_t S = static_cast<int64_t>(ids.size());
        const model::CaptureExample e = model->capture(ids, false, -1, {}, /*recent=*/S);
        const auto capPtr = analysis::LabCapture::from(e, model->captureInfo());
        const analysis::LabCapture& cap = *capPtr;
        const model::CaptureInfo& info = cap.info;
        if (QTest::currentDataTag() == QLatin1String("granite_h")) { // its two attention layers
            QCOMPARE(info.modelLayers, (std::vector<int64_t>{1, 3}));
            QCOMPARE(info.linearKind(), std::string("Mamba-2"));
            QCOMPARE(info.linearStateElements, int64_t{8 * 16 * 16 + 3 * (128 + 2 * 16)});
        }
        if (QTest::currentDataTag() == QLatin1String("nemotron_h")) { // its two attention blocks
            QCOMPARE(info.modelLayers, (std::vector<int64_t>{2, 5}));
            QCOMPARE(info.linearLayerCount(), int64_t{2});
            QCOMPARE(info.linearStateElements, int64_t{8 * 16 * 8 + 3 * (64 + 2 * 2 * 16)});
        }
        if (QTest::currentDataTag() == QLatin1String("falcon_h1")) { // every layer, each a state
            QCOMPARE(info.modelLayers, (std::vector<int64_t>{0, 1, 2}));
            QCOMPARE(info.linearLayerCount(), int64_t{3});
            QCOMPARE(info.linearKind(), std::string("Mamba-2"));
        }
        if (QTest::currentDataTag() == QLatin1String("jamba")) { // [I, N] + 3 inputs of x
            QCOMPARE(info.modelLayers, (std::vector<int64_t>{1, 3}));
            QCOMPARE(info.linearKind(), std::string("Mamba"));
            QCOMPARE(info.linearStateElements, int64_t{128 * 8 + 3 * 128});
            // what the Layers view says of the layers it cannot show
            QCOMPARE(analysis::layerReuse(cap, attention::defaultConfig(attention::Method::Sparq))
                         .otherLayers,
                     std::string("2 Mamba"));
        }
        if (QTest::currentDataTag() == QLatin1String("minimax")) { // a state [H, d, d] a layer
            QCOMPARE(info.modelLayers, (std::vector<int64_t>{1, 3}));
            QCOMPARE(info.linearKind(), std::string("lightning attention"));
            QCOMPARE(info.linearStateElements, int64_t{4 * 16 * 16});
            QCOMPARE(analysis::layerReuse(cap, attention::defaultConfig(attention::Method::Sparq))
                         .otherLayers,
                     std::string("2 lightning attention"));
        }
        if (QTest::currentDataTag() == QLatin1String("zamba2")) { // heads of 2·32/4
            QCOMPARE(info.modelLayers, (std::vector<int64_t>{1, 3}));
            QCOMPARE(info.headDim, int64_t{16});
            QCOMPARE(info.linearLayerCount(), int64_t{4});
            QCOMPARE(analysis::layerReuse(cap, attention::defaultConfig(attention::Method::Sparq))
                         .otherLayers,
                     std::string("2 Mamba-2"));
        }
        if (QTest::currentDataTag() == QLatin1String("olmo_hybrid")) { // [Hv, dk, dv] + inputs
            QCOMPARE(info.modelLayers, (std::vector<int64_t>{2, 5}));
            QCOMPARE(info.linearKind(), std::string("Gated DeltaNet"));
            QCOMPARE(info.linearStateElements, int64_t{4 * 8 * 16 + 3 * (2 * 16 + 64)});
            QCOMPARE(analysis::layerReuse(cap, attention::defaultConfig(attention::Method::Sparq))
                         .otherLayers,
                     std::string("4 Gated DeltaNet"));
        }
        bool noted = false;
        for (int64_t layer = 0; layer < cap.layers(); ++layer) {
            const attention::AttentionConfig mods = info.layerConfig(layer);
            // The keys the last query may see: its window or its chunk.
            int64_t from = 0;
            if (mods.slidingWindow > 0)
                from = std::max<int64_t>(0, S - mods.slidingWindow);
            if (mods.chunk > 0)
                from = std::max(from, (S - 1) / mods.chunk * mods.chunk);
            for (const attention::MethodInfo& m : attention::methods()) {
                attention::AttentionConfig c;
                c.method = m.id;
                c.k = 8;
                c.r = 8;
                c.p = 0.8;
                c.snapWindow = 8;
                const QString where =
                    QString::fromUtf8(m.name) + QStringLiteral(", layer %1").arg(layer);
                analysis::HeadState h;
                try {
                    h = analysis::headState(cap, layer, 1, c);
                } catch (const std::exception& ex) {
                    // The model's own indexer needs a DSA model's scores: one line saying so.
                    if (m.id == attention::Method::Indexer && cap.indexScores.empty() &&
                        QString::fromUtf8(ex.what()).contains(QStringLiteral("indexer needs")))
                        continue;
                    QFAIL(qPrintable(where + ": " + ex.what()));
                }
                QVERIFY2(m.id != attention::Method::Indexer || !cap.indexScores.empty(),
                         qPrintable(where + ": ran without a DSA model's scores"));
                for (const int64_t j : h.chosen)
                    QVERIFY2(j >= from && j < S, qPrintable(where + ": a key it may not see"));
                double real = 0;
                for (const float s : h.exact)
                    real += s;
                QVERIFY2(std::abs(real + h.sinkShare - 1) < 1e-4, qPrintable(where));
                QCOMPARE(h.sinkShare > 0, mods.sinks.defined());
                QVERIFY2(std::isfinite(h.outputError) && h.chosenMass <= 1 + 1e-5,
                         qPrintable(where));
                noted = noted || QString::fromStdString(h.layerNote).contains(note);
            }
        }
        QVERIFY2(noted, qPrintable("no layer named '" + note + "'"));
        // The overview's grids, every measure finite where defined.
        attention::AttentionConfig sparq;
        sparq.method = attention::Method::Sparq;
        sparq.k = 8;
        sparq.r = 8;
        const analysis::Overview o = analysis::overview(cap, sparq);
        for (const auto& [measure, grid] : o.grids)
            for (const float x : grid)
                QVERIFY(std::isfinite(x) || std::isnan(x));
        // The statistics of a capture file of it (version 3 where sinks, chunks or d_v need it).
        const QString path = m_dir.filePath(QFileInfo(folder).fileName() + ".h5");
        {
            capture::CaptureWriter w(path.toStdString(), model->captureInfo());
            w.add(model->capture(ids, /*allQueries=*/true));
            w.finish();
        }
        analysis::StatsOptions so;
        so.capturePath = path.toStdString();
        so.coverageK = 8;
        so.alphaR = 8;
        so.alphaK = 8;
        so.agreementR = {8};
        so.agreementK = {8};
        const analysis::StatsResult r = analysis::runStats(so);
        QVERIFY(r.coverage.defined() && at::isfinite(r.coverage).all().item<bool>());
        QVERIFY(r.coverage.le(1 + 1e-6).all().item<bool>());
        // One example: η along the example axis is 1 and its excess 0 exactly (SPARQ.md §6.6).
        // (The demo model's capture gave −1.1e-16 at 2 and 4 threads; these models' sums are
        // too small to be split between threads: test_lab's paper view compares the GUI's
        // Table 1 with the command line's exactly.)
        QCOMPARE(r.examples, int64_t{1});
        QVERIFY2(r.eta[0] == 1.0 && r.etaExcess[0] == 0.0, // exactly (QCOMPARE is fuzzy)
                 qPrintable(QString::number(r.etaExcess[0], 'g', 17)));
        // The command line's defaults fitted to this head_dim (the paper's r up to 64 suit
        // d = 128: `stats` refused every model with a smaller head), each method's long-context
        // defaults fitted as `attend` fits them, and a method whose budget is not k measured once.
        const int64_t D = cap.headDim();
        analysis::StatsOptions fitted = analysis::statsDefaultsFor(model->captureInfo());
        fitted.capturePath = path.toStdString();
        fitted.recall = analysis::defaultRecallConfigs();
        QVERIFY(!fitted.agreementR.empty() && fitted.alphaR <= D);
        for (const int64_t rr : fitted.agreementR)
            QVERIFY(rr <= D);
        const analysis::StatsResult all = analysis::runStats(fitted);
        int shadowkv = 0;
        for (const analysis::RecallEntry& e : all.recall)
            if (e.config.method == attention::Method::ShadowKV) {
                ++shadowkv;
                QVERIFY2(e.config.integer(attention::Param::Budget) < 2048,
                         "ShadowKV's budget left at its long-context default of 2,048");
            }
        QCOMPARE(shadowkv, 1);
    }

    /// The head view's step 1 draws what SparQ ranks (SPARQ.md §3.1): under the group rule the
    /// r components are the largest of |q| summed over the query heads sharing the KV head, for
    /// every head of the group alike; per head, of the head's own |q|.
    void stepOneShowsWhatSparqRanks() {
        auto model = model::Model::open(llama4(m_dir.filePath("llama4-step1")).toStdString());
        std::vector<int64_t> ids;
        for (int64_t i = 0; i < 24; ++i)
            ids.push_back((i * 29 + 5) % 90 + 3);
        const model::CaptureExample e =
            model->capture(ids, false, -1, {}, static_cast<int64_t>(ids.size()));
        const auto cap = analysis::LabCapture::from(e, model->captureInfo());
        const int64_t Hq = cap->heads(), g = Hq / cap->kvHeads(), D = cap->headDim(), r = 5;
        QCOMPARE(g, int64_t{2});
        for (const auto cs :
             {attention::ComponentSelect::Group, attention::ComponentSelect::PerHead})
            for (int64_t layer = 0; layer < cap->layers(); ++layer)
                for (int64_t head = 0; head < Hq; ++head) {
                    attention::AttentionConfig c;
                    c.method = attention::Method::Sparq;
                    c.r = r;
                    c.k = 8;
                    c.components = cs;
                    const analysis::HeadState h = analysis::headState(*cap, layer, head, c);
                    const bool group = cs == attention::ComponentSelect::Group;
                    const int64_t first = group ? head / g * g : head, n = group ? g : 1;
                    const QString where = QStringLiteral("layer %1 head %2 %3")
                                              .arg(layer)
                                              .arg(head)
                                              .arg(group ? "group" : "per head");
                    QCOMPARE(h.rankedHeads, n);
                    QCOMPARE(h.firstRankedHead, first);
                    QCOMPARE(static_cast<int64_t>(h.qRanked.size()), D);
                    const at::Tensor q = cap->q[static_cast<size_t>(layer)];
                    std::vector<std::pair<float, int64_t>> order;
                    for (int64_t i = 0; i < D; ++i) {
                        float want = 0;
                        for (int64_t x = first; x < first + n; ++x)
                            want += std::abs(q[x][i].item<float>());
                        const float got = h.qRanked[static_cast<size_t>(i)];
                        QVERIFY2(std::abs(got - want) <= 1e-6f * std::max(1.0f, want),
                                 qPrintable(where));
                        QCOMPARE(h.qAbs[static_cast<size_t>(i)],
                                 std::abs(q[head][i].item<float>()));
                        order.emplace_back(-got, i);
                    }
                    std::sort(order.begin(), order.end()); // descending, ties to the lower index
                    std::vector<int64_t> top;
                    for (int64_t j = 0; j < r; ++j)
                        top.push_back(order[static_cast<size_t>(j)].second);
                    std::sort(top.begin(), top.end());
                    QVERIFY2(h.components == top, qPrintable(where));
                    // The positions: one set for the group under the default rule (the step 2
                    // caption says so), each head's own under the per-head rule.
                    QCOMPARE(h.positionHeads, g);
                    QCOMPARE(h.gqaRule, attention::groupSelectName(c.gqa));
                    if (head % g == 1)
                        QVERIFY2(h.chosen == analysis::headState(*cap, layer, head - 1, c).chosen,
                                 qPrintable(where));
                    c.gqa = attention::GroupSelect::PerHead;
                    QCOMPARE(analysis::headState(*cap, layer, head, c).positionHeads, int64_t{1});
                }
        // A method without SparQ's components: step 1 shows the head's own |q|.
        attention::AttentionConfig quest;
        quest.method = attention::Method::Quest;
        quest.k = 8;
        const analysis::HeadState h = analysis::headState(*cap, 0, 1, quest);
        QCOMPARE(h.rankedHeads, int64_t{1});
        QVERIFY(h.qRanked == h.qAbs && h.components.empty());
    }
};

QTEST_GUILESS_MAIN(TestLabModels)
#include "test_lab_models.moc"
