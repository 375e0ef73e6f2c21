// DeepSeek-V4 (DeepseekV4ForCausalLM): every layer a sliding window of one shared key-value head
// (the key is the value), most of them with compressed entries beside it: heavily compressed
// attention (HCA, one entry per 128 positions, all attended) or compressed sparse attention
// (CSA, one entry per 4 positions from overlapping windows, a lightning indexer picking the
// top 512); a sink per head, a grouped output projection, manifold-constrained
// hyper-connections in place of the residual, and experts routed by sqrt(softplus) or, on the
// first layers, by a fixed table of token ids (docs/learned-sparse-and-hybrid.md §17).

#include "model/family_common.h"
#include "model/model_family.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace sparqlab::model {

namespace {

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";

/// The layer kinds: layer_types, else the first releases' compress_ratios (0, 4, 128 per layer),
/// else DeepseekV4Config's default (two HCA layers, then CSA and HCA in turn).
std::vector<std::string> readV4LayerTypes(const ConfigKeys& t, const ModelConfig& c) {
    const auto n = static_cast<size_t>(c.nLayers);
    std::vector<std::string> kinds;
    for (size_t i = 0; i < n; ++i)
        kinds.push_back(i < 2 ? kHca : (i - 2) % 2 ? kCsa : kHca);
    if (t.has("layer_types")) {
        readLayerKinds(t, c, kinds, {kSliding, kCsa, kHca});
        return kinds;
    }
    if (!t.has("compress_ratios"))
        return kinds;
    const json& r = t.raw("compress_ratios");
    // (HF cuts a longer list to the layers; a shorter one leaves the rest to the default.)
    if (!r.is_array() || r.size() < n)
        t.fail("compress_ratios", "must list one ratio per layer (" + std::to_string(n) + ")");
    for (size_t i = 0; i < n; ++i) {
        const int64_t v = r[i].is_number_integer() ? r[i].get<int64_t>() : -1;
        if (v != 0 && v != 4 && v != 128)
            t.fail("compress_ratios", "must hold 0, 4 or 128 for each layer");
        kinds[i] = v == 0 ? kSliding : v == 4 ? kCsa : kHca;
    }
    return kinds;
}

/// The "main" RoPE (the sliding layers') and the "compress" one (the compressed layers', their
/// entries' and the indexer's): v5's rope_parameters {main, compress}, or the flat form
/// DeepseekV4Config folds into them (rope_theta for main; compress_rope_theta with the scaling
/// of rope_parameters or rope_scaling for compress, YaRN's attention factor 1 unless given).
void readV4Rope(const ConfigKeys& t, ModelConfig& c) {
    c.localRope = RopeSpec{};
    c.localRope.theta = ropeTheta(t, 10000.0);
    c.rope = RopeSpec{};
    c.rope.theta = t.number("compress_rope_theta", 160000.0);
    const char* key = t.has("rope_parameters") ? "rope_parameters"
                      : t.has("rope_scaling")  ? "rope_scaling"
                                               : nullptr;
    if (!key)
        return;
    if (!t.raw(key).is_object())
        t.fail(key, "must be an object");
    const ConfigKeys r = t.nested(key);
    const bool nested = r.has("main") || r.has("compress");
    if (nested) {
        for (const char* part : {"main", "compress"})
            if (!r.has(part) || !r.raw(part).is_object())
                r.fail(part, "must be an object (rope_parameters holds main and compress)");
        readRopeParameters(t, r.nested("main"), c, c.localRope);
        if (!c.localRope.scaling.empty())
            r.nested("main").fail("rope_type", "must be default (the sliding layers')");
    }
    const ConfigKeys comp = nested ? r.nested("compress") : r;
    // The flat form's base is compress_rope_theta whatever rope_theta it carries.
    const double theta = c.rope.theta;
    readRopeParameters(t, comp, c, c.rope);
    if (!nested)
        c.rope.theta = theta;
    if (c.rope.scaling == "yarn" && !comp.has("attention_factor"))
        c.rope.attentionFactor = 1.0;
    if (!c.rope.scaling.empty() && c.rope.scaling != "yarn")
        comp.fail("rope_type", "'" + c.rope.scaling + "' is not supported here (default, yarn)");
}

void parseDeepseekV4(const ConfigKeys& t, ModelConfig& c) {
    LlamaDefaults d;
    d.vocab = 129280;
    d.hidden = 4096;
    d.intermediate = 2048;
    d.layers = 43;
    d.heads = 64;
    d.kvHeads = 1;
    d.headDim = 512;
    d.maxPositions = 1048576;
    readLlamaCore(t, c, d); // (intermediate_size: an alias of moe_intermediate_size here)
    if (t.has("moe_intermediate_size"))
        c.intermediateSize = t.integer("moe_intermediate_size", 2048);
    c.nKvHeads = 1; // one key-value head, whatever num_key_value_heads says (HF broadcasts one)
    c.sinks = true;
    c.norms = NormPlacement::Pre;
    c.ropeLayout = RopeLayout::Interleaved; // (on the last rotaryDim dimensions of each head)
    // partial_rotary_factor, else the first releases' qk_rope_head_dim, else 64 / 512.
    const double factor = t.has("partial_rotary_factor") ? t.number("partial_rotary_factor", 0.125)
                          : t.has("qk_rope_head_dim")
                              ? static_cast<double>(t.integer("qk_rope_head_dim", 64)) / c.headDim
                              : 64.0 / 512.0;
    if (!(factor > 0 && factor <= 1))
        t.fail(t.has("partial_rotary_factor") ? "partial_rotary_factor" : "qk_rope_head_dim",
               "must give between 1 and head_dim rotary dimensions");
    c.rotaryDim = static_cast<int64_t>(static_cast<double>(c.headDim) * factor);
    if (c.rotaryDim < 2 || c.rotaryDim % 2 != 0)
        t.fail("partial_rotary_factor", "must give an even number of rotary dimensions");
    readV4Rope(t, c); // (an object's partial_rotary_factor may set rotaryDim too)

    CompressedAttentionSpec& a = c.compressed;
    a.qLoraRank = t.integer("q_lora_rank", 1024);
    a.outGroups = t.integer("o_groups", 8);
    a.outRank = t.integer("o_lora_rank", 1024);
    if ((c.nHeads * c.headDim) % a.outGroups != 0 || c.nHeads % a.outGroups != 0)
        t.fail("o_groups", "must divide num_attention_heads");
    a.indexHeads = t.integer("index_n_heads", 64);
    a.indexDim = t.integer("index_head_dim", 128);
    a.indexTopK = t.integer("index_topk", 512);
    if (a.indexDim < c.rotaryDim)
        t.fail("index_head_dim",
               "must be at least the rotary dimensions (" + std::to_string(c.rotaryDim) + ")");
    int64_t csaRate = 4, hcaRate = 128;
    if (t.has("compress_rates")) {
        if (!t.raw("compress_rates").is_object())
            t.fail("compress_rates", "must be an object");
        const ConfigKeys r = t.nested("compress_rates");
        csaRate = r.integer(kCsa, csaRate);
        hcaRate = r.integer(kHca, hcaRate);
    }
    csaRate = t.integer("compress_rate_csa", csaRate); // (the first releases' keys)
    hcaRate = t.integer("compress_rate_hca", hcaRate);
    const std::vector<std::string> kinds = readV4LayerTypes(t, c);
    c.layerLocalRope.assign(kinds.size(), false);
    for (size_t l = 0; l < kinds.size(); ++l) {
        const bool csa = kinds[l] == kCsa, hca = kinds[l] == kHca;
        a.layerRate.push_back(csa ? csaRate : hca ? hcaRate : 0);
        a.layerIndexed.push_back(csa);
        c.layerLocalRope[l] = !csa && !hca; // the sliding layers rotate by main's base
    }
    const int64_t window = t.integer("sliding_window", 128);
    c.layerWindow.assign(static_cast<size_t>(c.nLayers), window);

    HyperConnectionSpec& h = c.hyper;
    h.streams = t.integer("hc_mult", 4);
    h.sinkhornIters = t.integer("hc_sinkhorn_iters", 20);
    h.eps = t.number("hc_eps", 1e-6);
    if (!(h.eps >= 0))
        t.fail("hc_eps", "must be a number at or above 0");

    MoeSpec& m = c.moe;
    m.experts = readExpertCount(t, "n_routed_experts", 256);
    m.topK = t.integer("num_experts_per_tok", 6);
    m.intermediate = c.intermediateSize;
    m.router = MoeRouter::SqrtSoftplusTopK;
    m.normTopK = true; // (whatever norm_topk_prob says: the router always renormalises)
    m.routedScale = t.number("routed_scaling_factor", 1.5);
    m.scoreCorrection = true; // (on the routed layers; the hash layers hold their table instead)
    m.layout = ExpertLayout::FusedRows;
    // The shared expert is DeepseekV4MLP of intermediate_size, which maps to moe_intermediate_size.
    m.sharedIntermediate = c.intermediateSize;
    m.expertClamp = t.number("swiglu_limit", 10.0);
    if (!(m.expertClamp > 0))
        t.fail("swiglu_limit", "must be positive");
    if (m.topK > m.experts)
        t.fail("num_experts_per_tok", "must be at most n_routed_experts");
    const std::string scoring = t.string("scoring_func", "sqrtsoftplus");
    if (scoring != "sqrtsoftplus")
        t.fail("scoring_func", "'" + scoring + "' is not supported (sqrtsoftplus)");
    m.layers.assign(static_cast<size_t>(c.nLayers), true);
    std::vector<std::string> mlpKinds(static_cast<size_t>(c.nLayers), "moe");
    const int64_t hashed = t.integer("num_hash_layers", 3, /*min=*/0);
    for (int64_t l = 0; l < std::min(hashed, c.nLayers); ++l)
        mlpKinds[static_cast<size_t>(l)] = "hash_moe";
    readLayerKinds(t, c, mlpKinds, {"hash_moe", "moe"}, {}, "mlp_layer_types");
    for (const std::string& k : mlpKinds)
        m.hashLayers.push_back(k == "hash_moe");
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(deepseek_v4) {
    return {.name = "deepseek_v4",
            .label = "DeepSeek-V4",
            .examples = "DeepSeek-V4-Flash, DeepSeek-V4-Pro (compressed sparse attention, "
                        "hyper-connections, MoE)",
            .architectures = {"DeepseekV4ForCausalLM"},
            .parse = parseDeepseekV4};
}
