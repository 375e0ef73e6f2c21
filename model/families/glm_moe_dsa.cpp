// GLM-5 (GlmMoeDsaForCausalLM): DeepSeek-V3.2's MLA, experts and lightning indexer with GLM's
// sizes, RoPE interleaved in the MLA and the indexer alike (transformers 5.x ignores
// rope_interleave and indexer_rope_interleave), and shared-indexer layers: a layer whose
// indexer_types entry is "shared" has no indexer and attends to the keys the most recent "full"
// layer picked (docs/learned-sparse-and-hybrid.md).

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void readDsaIndexer(const ConfigKeys& t, ModelConfig& c, const IndexerSpec& d); // deepseek_v32.cpp

namespace {

/// Which layers run their own indexer: indexer_types ("full"/"shared"), else HF's derivation
/// from index_topk_pattern ("F"/"S" per layer) or index_topk_freq and index_skip_topk_offset
/// (every layer full when none is given).
std::vector<bool> readSharedLayers(const ConfigKeys& t, int64_t layers) {
    std::vector<bool> shared(static_cast<size_t>(layers), false);
    auto fromList = [&](const json& list, const char* key, const char* full, const char* share) {
        if (!list.is_array() || list.size() != shared.size())
            t.fail(key, "must list one entry per layer (" + std::to_string(layers) + ")");
        for (size_t l = 0; l < list.size(); ++l) {
            if (!list[l].is_string() || (list[l] != full && list[l] != share))
                t.fail(key, std::string("must hold \"") + full + "\" or \"" + share + "\"");
            shared[l] = list[l] == share;
        }
    };
    if (t.has("indexer_types") && !t.isNull("indexer_types")) {
        fromList(t.raw("indexer_types"), "indexer_types", "full", "shared");
    } else if (t.has("index_topk_pattern") && !t.isNull("index_topk_pattern")) {
        const json& p = t.raw("index_topk_pattern");
        if (p.is_string()) {
            json list = json::array();
            for (char ch : p.get<std::string>())
                list.push_back(std::string(1, ch));
            fromList(list, "index_topk_pattern", "F", "S");
        } else {
            fromList(p, "index_topk_pattern", "full", "shared");
        }
    } else {
        // As GlmMoeDsaConfig: a frequency below 1 counts as 1, any offset (|x| ≤ 2^40 keeps
        // i − offset + 1 in range).
        constexpr int64_t kLow = -(int64_t{1} << 40);
        const int64_t freq = std::max<int64_t>(t.integer("index_topk_freq", 1, kLow), 1);
        const int64_t offset = t.integer("index_skip_topk_offset", 2, kLow);
        for (int64_t i = 0; i < layers; ++i)
            shared[static_cast<size_t>(i)] = std::max<int64_t>(i - offset + 1, 0) % freq != 0;
    }
    if (!shared.empty() && shared.front())
        t.fail(t.has("indexer_types") ? "indexer_types" : "index_topk_pattern",
               "must make layer 0 a \"full\" indexer layer (a shared layer reuses an earlier "
               "layer's selection)");
    return shared;
}

void parseGlmMoeDsa(const ConfigKeys& t, ModelConfig& c) {
    DeepseekDefaults d;
    d.core = {.vocab = 154880,
              .hidden = 6144,
              .intermediate = 12288,
              .layers = 78,
              .heads = 64,
              .kvHeads = 64,
              .maxPositions = 202752,
              .normEps = 1e-5};
    d.qLoraRank = 2048;
    d.kvLoraRank = 512;
    d.nopeDim = 192;
    d.ropeDim = 64;
    d.vHeadDim = 256;
    d.moe.intermediate = 2048;
    d.moe.groups = 1;
    d.moe.topKGroups = 1;
    d.moe.firstDense = 3;
    parseDeepseekV3(t, c, d);
    if (t.has("num_experts") && !t.isNull("num_experts")) // HF: overrides n_routed_experts
        c.moe.experts = t.integer("num_experts", c.moe.experts);
    c.ropeLayout = RopeLayout::InterleavedToHalf; // rope_interleave is not read
    IndexerSpec ix;
    ix.heads = 32;
    ix.dim = 128;
    ix.topK = 2048;
    ix.ropeLayout = RopeLayout::InterleavedToHalf;
    readDsaIndexer(t, c, ix);
    c.indexer.reuse = readSharedLayers(t, c.nLayers);
    std::vector<std::string> kinds(static_cast<size_t>(c.nLayers), "deepseek_sparse_attention");
    readLayerKinds(t, c, kinds, {"deepseek_sparse_attention", "indexed_attention"});
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(glm_moe_dsa) {
    return {.name = "glm_moe_dsa",
            .label = "GLM-5",
            .examples = "GLM-5, GLM-5.1, GLM-5.2 (MLA, MoE, the lightning indexer with shared "
                        "layers)",
            .architectures = {"GlmMoeDsaForCausalLM"},
            .parse = parseGlmMoeDsa};
}
