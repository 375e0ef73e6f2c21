// DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3's MLA and experts with DeepSeek Sparse
// Attention: on every layer a lightning indexer (index_n_heads heads of index_head_dim, RoPE in
// the rotate-half layout while the MLA's is interleaved, a LayerNorm'd key) picks the
// index_topk keys each query attends to (docs/learned-sparse-and-hybrid.md).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

/// The indexer's keys of DeepSeek-V3.2 and GLM-5, and mlp_layer_types where the config lists
/// them.
void readDsaIndexer(const ConfigKeys& t, ModelConfig& c, const IndexerSpec& d) {
    IndexerSpec& ix = c.indexer;
    ix.heads = t.integer("index_n_heads", d.heads);
    ix.dim = t.integer("index_head_dim", d.dim);
    ix.topK = t.integer("index_topk", d.topK);
    ix.ropeLayout = d.ropeLayout;
    if (c.mla.qLoraRank <= 0)
        t.fail("q_lora_rank", "must be set: the indexer reads the query latent");
    if (ix.dim < c.mla.ropeDim)
        t.fail("index_head_dim",
               "must be at least qk_rope_head_dim (" + std::to_string(c.mla.ropeDim) + ")");
    readMlpLayerTypes(t, c);
}

namespace {

void parseDeepseekV32(const ConfigKeys& t, ModelConfig& c) {
    parseDeepseekV3(t, c, deepseekV3Defaults());
    c.ropeLayout = RopeLayout::InterleavedToHalf; // transformers 5.x reads no rope_interleave here
    IndexerSpec d;
    d.heads = 64;
    d.dim = 128;
    d.topK = 2048;
    d.ropeLayout = RopeLayout::Half; // while the MLA's is interleaved
    readDsaIndexer(t, c, d);
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "deepseek_sparse_attention");
    readLayerKinds(t, c, kinds, {"deepseek_sparse_attention"});
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(deepseek_v32) {
    return {.name = "deepseek_v32",
            .label = "DeepSeek-V3.2",
            .examples = "DeepSeek-V3.2 (MLA, MoE, the lightning indexer's sparse attention)",
            .architectures = {"DeepseekV32ForCausalLM"},
            .parse = parseDeepseekV32};
}
