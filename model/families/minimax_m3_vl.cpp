// MiniMax-M3 (the language model of MiniMaxM3VLForConditionalGeneration folders, and
// MiniMaxM3VLForCausalLM): softmax attention on every layer with per-head q/k norms and RoPE on
// the first rotary_dim of each head; on its sparse layers a lightning indexer picks, per indexer
// head, the blocks of keys that head's group of query heads attends to (the blocks with the
// largest q·k of any key in them, the query's own last block always kept:
// docs/learned-sparse-and-hybrid.md §8); Gemma's (1 + w) RMSNorms; SwiGLU-OAI in every MLP;
// MoE layers behind MiniMax-M2's sigmoid router × routed_scaling_factor, plus a shared expert;
// dense layers of dense_intermediate_size. The hub's checkpoint (weights under
// language_model.): experts as Mixtral's (block_sparse_moe.experts.E.w1, w3, w2), the
// indexer's self_attn.index_{q,k}_proj and index_{q,k}_norm. The vision tower and the
// multi-token-prediction modules are not read.

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>

namespace sparqlab::model {

namespace {

/// The indexer's settings: transformers' flat keys, or the hub's sparse_attention_config, whose
/// keys win where both are given (MiniMaxM3VLTextConfig.__post_init__).
void readIndexer(const ConfigKeys& t, ModelConfig& c) {
    IndexerSpec& ix = c.indexer;
    const bool nested = t.has("sparse_attention_config");
    if (nested && !t.raw("sparse_attention_config").is_object())
        t.fail("sparse_attention_config", "must be an object");
    const ConfigKeys s = nested ? t.nested("sparse_attention_config") : t;
    auto read = [&](const char* flat, const char* hub, int64_t def, int64_t min) {
        const int64_t v = t.integer(flat, def, min);
        return nested ? s.integer(hub, v, min) : v;
    };
    ix.heads = read("index_n_heads", "sparse_num_index_heads", 4, 1);
    ix.dim = read("index_head_dim", "sparse_index_dim", 128, 2);
    ix.blockSize = read("index_block_size", "sparse_block_size", 128, 1);
    ix.topK = read("index_topk_blocks", "sparse_topk_blocks", 16, 1);
    ix.localBlocks = read("index_local_blocks", "sparse_local_block", 1, 0);
    // Which layers select: layer_types, else sparse_attention_freq, else none.
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "full_attention");
    if (!t.has("layer_types") && nested && s.has("sparse_attention_freq")) {
        const std::vector<bool> f =
            readLayerFlags(s, c, "sparse_attention_freq",
                           std::vector<bool>(static_cast<size_t>(c.nLayers), false));
        for (size_t l = 0; l < f.size(); ++l)
            kinds[l] = f[l] ? "minimax_m3_sparse" : "full_attention";
    }
    readLayerKinds(t, c, kinds, {"full_attention", "minimax_m3_sparse"});
    ix.layers.assign(static_cast<size_t>(c.nLayers), false);
    for (size_t l = 0; l < kinds.size(); ++l)
        ix.layers[l] = kinds[l] == "minimax_m3_sparse";
    if (std::find(ix.layers.begin(), ix.layers.end(), true) == ix.layers.end()) {
        ix = IndexerSpec{}; // no sparse layer: plain attention everywhere
        return;
    }
    // A bad value is named by the key it came from.
    auto fail = [&](const char* flat, const char* hub, const std::string& what) {
        if (nested && s.has(hub))
            s.fail(hub, what);
        t.fail(flat, what);
    };
    if (c.nHeads % ix.heads != 0)
        fail("index_n_heads", "sparse_num_index_heads",
             "must divide num_attention_heads (" + std::to_string(c.nHeads) +
                 "): each indexer head selects for a group of query heads");
    if (ix.dim < c.rotaryDim) // its RoPE rotates the attention's rotary dimensions
        fail("index_head_dim", "sparse_index_dim",
             "must be at least the rotary dimensions (" + std::to_string(c.rotaryDim) + ")");
    // What implementations read differently is refused beyond the value they agree on:
    // transformers does not read first blocks always kept (vLLM does), nor another block score.
    if (nested && s.integer("sparse_init_block", 0, /*min=*/0) != 0)
        s.fail("sparse_init_block", "must be 0: transformers keeps no first blocks, vLLM "
                                    "keeps that many, and which the model was trained with is "
                                    "not known");
    if (nested && s.string("sparse_score_type", "max") != "max")
        s.fail("sparse_score_type", "must be \"max\" (a block's score: its best key's)");
}

void parseMiniMaxM3Text(const ConfigKeys& t, ModelConfig& c) {
    const LlamaDefaults d{.vocab = 200064,
                          .hidden = 6144,
                          .intermediate = 3072,
                          .layers = 60,
                          .heads = 64,
                          .kvHeads = 4,
                          .headDim = 128,
                          .maxPositions = 524288,
                          .normEps = 1e-6,
                          .ropeTheta = 5e6};
    readLlamaCore(t, c, d);
    if (c.eosIds.empty())
        c.eosIds = {200020};
    if (c.bosId < 0)
        c.bosId = 200034;
    c.normPlusOne = true;       // Gemma's RMSNorm, in float32, everywhere
    c.qkNorm = QkNorm::PerHead; // transformers norms each head whatever qk_norm_type says
    readMiniMaxRotaryDim(t, c, 64);
    readRopeScaling(t, c);
    c.hiddenAct = "silu"; // the checkpoint's "swigluoai" is the clamped unit below
    c.swigluLimit = t.number("swiglu_limit", 7.0);
    c.swigluAlpha = t.number("swiglu_alpha", 1.702);
    if (c.swigluLimit <= 0)
        t.fail("swiglu_limit", "must be positive");
    readMiniMaxMoe(t, c, 128, 4);
    MoeSpec& m = c.moe;
    c.intermediateSize = t.integer("dense_intermediate_size", 12288);
    m.sharedIntermediate = t.integer("shared_intermediate_size", 3072, /*min=*/0);
    if (t.integer("n_shared_experts", 1, /*min=*/0) != 1) // one revision widened the shared one
        t.fail("n_shared_experts", "must be 1 (one shared expert of shared_intermediate_size)");
    m.routedScale = t.number("routed_scaling_factor", 2.0);
    // Sparse layers: mlp_layer_types, else the hub's moe_layer_freq, else every layer.
    m.layers = readLayerFlags(t, c, "moe_layer_freq",
                              std::vector<bool>(static_cast<size_t>(c.nLayers), true));
    readMlpLayerTypes(t, c);
    readIndexer(t, c);
}

void parseMiniMaxM3(const ConfigKeys& k, ModelConfig& c) {
    readTextConfigFolder(k, c, parseMiniMaxM3Text);
    if (c.architectureName == "MiniMaxM3VLForConditionalGeneration")
        c.weightPrefix = "language_model."; // the hub's: language_model.model.layers.N.…
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(minimax_m3_vl) {
    return {.name = "minimax_m3_vl",
            .label = "MiniMax-M3",
            .examples = "MiniMax-M3 (block-sparse attention by its own indexer, MoE; the language "
                        "model of its VL folders)",
            .architectures = {"MiniMaxM3VLForConditionalGeneration", "MiniMaxM3VLForCausalLM"},
            .parse = parseMiniMaxM3};
}
