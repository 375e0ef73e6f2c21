#include "model_config.h"
#include "base/read_file.h"

#include "model/config_keys.h"
#include "model/model_family.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace sparqlab::model {

std::string supportedArchitectures() {
    std::string s;
    for (const ModelFamily* f : modelFamilies())
        for (const std::string& a : f->architectures)
            s += (s.empty() ? "" : ", ") + a;
    return s;
}

const RopeSpec& ModelConfig::ropeOf(int64_t layer) const {
    const size_t l = static_cast<size_t>(layer);
    return l < layerLocalRope.size() && layerLocalRope[l] ? localRope : rope;
}

namespace {
std::string shortNumber(double x) {
    std::ostringstream s;
    s << x;
    return s.str();
}
/// "0, 2, 4" for a few layers, "0, 2, 4, … 24 (13 layers)" for many.
std::string layerList(const std::vector<int64_t>& layers) {
    std::string out;
    const size_t shown = layers.size() > 6 ? 4 : layers.size();
    for (size_t i = 0; i < shown; ++i)
        out += (i ? ", " : "") + std::to_string(layers[i]);
    if (shown < layers.size())
        out += ", … " + std::to_string(layers.back()) + " (" + std::to_string(layers.size()) +
               " layers)";
    return out;
}
} // namespace

std::vector<std::pair<std::string, std::string>> attentionModifierSummary(const ModelConfig& c) {
    std::vector<std::pair<std::string, std::string>> rows;
    const double defaultScale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
    if (c.attnScale > 0 && std::abs(c.attnScale - defaultScale) > 1e-12 * defaultScale)
        rows.emplace_back("Attention scale",
                          "1/√" + shortNumber(std::round(1.0 / (c.attnScale * c.attnScale))) +
                              " (not 1/√" + std::to_string(c.headDim) + ")");
    if (c.attnSoftcap > 0)
        rows.emplace_back("Attention soft-cap", shortNumber(c.attnSoftcap) + ", every layer");
    if (c.finalSoftcap > 0)
        rows.emplace_back("Final-logit soft-cap", shortNumber(c.finalSoftcap));
    if (!c.layerWindow.empty()) {
        // One line per kind of layer, listing its layers: every layer appears once.
        std::vector<int64_t> kinds;
        for (int64_t w : c.layerWindow)
            if (std::find(kinds.begin(), kinds.end(), w) == kinds.end())
                kinds.push_back(w);
        for (int64_t w : kinds) {
            std::vector<int64_t> layers;
            for (size_t l = 0; l < c.layerWindow.size(); ++l)
                if (c.layerWindow[l] == w)
                    layers.push_back(static_cast<int64_t>(l));
            rows.emplace_back(w > 0 ? "Window " + std::to_string(w) : std::string("Global"),
                              "layers " + layerList(layers));
        }
    }
    if (!c.layerLocalRope.empty())
        rows.emplace_back(
            "RoPE base",
            shortNumber(c.rope.theta) + (c.compressed.active() ? " compressed layers" : " global") +
                (c.rope.scaling.empty()
                     ? std::string()
                     : " (" + c.rope.scaling + " ×" + shortNumber(c.rope.factor) + ")") +
                ", " + shortNumber(c.localRope.theta) + " sliding layers");
    const std::vector<int64_t> nope = c.nopeLayers();
    std::vector<int64_t> chunked;
    for (int64_t l = 0; l < c.nLayers; ++l)
        if (c.chunkOf(l) > 0)
            chunked.push_back(l);
    if (!chunked.empty())
        rows.emplace_back("Chunks of " + std::to_string(c.chunkOf(chunked.front())),
                          "layers " + layerList(chunked));
    if (!nope.empty())
        rows.emplace_back("No RoPE (NoPE)", "layers " + layerList(nope));
    if (c.attnTemperatureScale > 0) // (Llama 4's NoPE layers; Mistral's every layer)
        rows.emplace_back("Query scale",
                          "× 1 + " + shortNumber(c.attnTemperatureScale) + "·ln(1 + ⌊" +
                              (c.attnTemperatureShift != 0 ? "(pos + 1)" : "pos") + " / " +
                              shortNumber(c.attnTemperatureFloor) + "⌋), " +
                              (c.attnTemperatureEveryLayer ? "every layer" : "NoPE layers"));
    if (c.sinks)
        rows.emplace_back("Attention sinks", "one logit per head, every layer");
    if (c.compressed.active()) { // DeepSeek-V4 (docs/learned-sparse-and-hybrid.md §17)
        const CompressedAttentionSpec& v = c.compressed;
        rows.emplace_back("Key = value", "one head of " + std::to_string(c.headDim) +
                                             ", RoPE on its last " + std::to_string(c.rotaryDim) +
                                             " dims, undone on the output");
        std::vector<int64_t> csa, hca;
        for (int64_t l = 0; l < c.nLayers; ++l)
            if (v.rateOf(l) > 0)
                (v.indexed(l) ? csa : hca).push_back(l);
        if (!csa.empty())
            rows.emplace_back("Compressed, sparse (CSA)",
                              "an entry per " + std::to_string(v.rateOf(csa.front())) +
                                  " positions, the indexer's top " + std::to_string(v.indexTopK) +
                                  " (" + std::to_string(v.indexHeads) + " heads of " +
                                  std::to_string(v.indexDim) + "); layers " + layerList(csa));
        if (!hca.empty())
            rows.emplace_back("Compressed, all (HCA)",
                              "an entry per " + std::to_string(v.rateOf(hca.front())) +
                                  " positions, every one; layers " + layerList(hca));
        rows.emplace_back("Methods", "choose among the window's keys and every entry seen, in "
                                     "the indexer's place; captures hold both (the head view "
                                     "draws the entries as bars over the positions they "
                                     "pool)");
    }
    if (c.hyper.streams > 0)
        rows.emplace_back("Residual", std::to_string(c.hyper.streams) +
                                          " streams mixed by mHC (Sinkhorn-Knopp, " +
                                          std::to_string(c.hyper.sinkhornIters) + " steps)");
    if (c.mla.kvLoraRank > 0)
        rows.emplace_back(
            "MLA", "q·k " + std::to_string(c.headDim) + " (" + std::to_string(c.mla.nopeDim) +
                       " + " + std::to_string(c.mla.ropeDim) + " rotary), v " +
                       std::to_string(c.valueDim()) + "; latent " +
                       std::to_string(c.mla.kvLoraRank + c.mla.ropeDim) + " per position");
    if (c.moe.experts > 0) {
        int64_t sparse = 0;
        for (int64_t l = 0; l < c.nLayers; ++l)
            sparse += c.moe.sparse(l) ? 1 : 0;
        rows.emplace_back("Experts", std::to_string(c.moe.topK) + " of " +
                                         std::to_string(c.moe.experts) +
                                         (c.moe.sharedIntermediate > 0 ? " + a shared one" : "") +
                                         " on " + std::to_string(sparse) + " layers");
    }
    return rows;
}

namespace {

/// Counts in double (exact below 2^53, no signed overflow for any size a config may name):
/// what parameterCount sums, saturated to the int64 range.
int64_t saturate(double x) {
    return x >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(x);
}

/// One sparse layer's routed experts.
double expertsOfLayer(const ModelConfig& c) {
    const MoeSpec& m = c.moe;
    const double E = static_cast<double>(m.experts),
                 h = static_cast<double>(m.latent > 0 ? m.latent : c.hiddenSize),
                 I = static_cast<double>(m.intermediate);
    double n = E * (c.gatedMlp ? 3 : 2) * h * I;
    if (m.layout == ExpertLayout::FusedInterleaved) // gate_up and down biases
        n += E * (2 * I + h);
    return n;
}

double sparseLayers(const ModelConfig& c) {
    int64_t n = 0;
    for (int64_t l = 0; l < c.nLayers; ++l)
        n += c.moe.sparse(l) ? 1 : 0;
    return static_cast<double>(n);
}

/// One linear-attention layer's mixer (the model's first linear kind), in place of attention.
double linearMixerParameters(const ModelConfig& c) {
    const double h = static_cast<double>(c.hiddenSize);
    double linearMixer = 0;
    if (c.linearLayerCount() > 0) {
        const LinearSpec& s = c.linear;
        const double Hk = static_cast<double>(s.keyHeads), Hv = static_cast<double>(s.valueHeads),
                     dk = static_cast<double>(s.keyDim), dv = static_cast<double>(s.valueDim),
                     K = static_cast<double>(s.convKernel);
        const double qk = Hk * dk, vv = Hv * dv, conv = (2 * qk + vv) * K;
        const LayerKind kind =
            *std::find_if(c.layerKinds.begin(), c.layerKinds.end(), isLinearKind);
        if (kind == LayerKind::GatedDeltaNet) // q k v z, b a, conv, A_log, dt_bias, norm, out
            linearMixer = h * (2 * qk + 2 * vv) + h * 2 * Hv + conv + 2 * Hv + dv + vv * h;
        else if (isMamba2Kind(kind)) // in_proj [z | x B C | dt], conv, dt_bias A_log D, the
                                     // gated norm over every head (if any), out_proj
            linearMixer = h * (2 * vv + 2 * qk + Hv) + conv + 3 * Hv +
                          (s.gate != Mamba2Gate::NoNorm ? vv : 0) + vv * h +
                          (s.convBias ? 2 * qk + vv : 0) + (s.projBias ? 2 * vv + 2 * qk + Hv : 0) +
                          (s.outBias ? h : 0);
        else if (kind == LayerKind::Mamba1) { // in_proj [x | z], conv, x_proj, dt_proj (biased),
                                              // A_log [I, N], D, the norms, out_proj (+ biases)
            const double R = static_cast<double>(s.dtRank);
            linearMixer = 2 * vv * h + vv * K + (R + 2 * dk) * vv + vv * R + vv + vv * dk + vv +
                          (s.innerNorms ? R + 2 * dk : 0) + h * vv + (s.convBias ? vv : 0) +
                          (s.projBias ? 2 * vv + h : 0);
        } else if (kind == LayerKind::Lightning) // qkv_proj, output_gate, out_proj, the norm
            linearMixer = 3 * h * vv + h * vv + vv * h + vv;
        else if (kind == LayerKind::ShortConv) // in_proj [B | C | x], conv, out_proj (+ biases)
            linearMixer = 4 * h * h + h * K + (s.convBias ? 5 * h : 0);
        else // KDA: q k v, f_a f_b, g_a g_b (rank dv), b, convs, A_log, dt_bias, o_norm, o_proj
            linearMixer =
                h * (2 * qk + vv) + 2 * (h * dv + dv * qk) + h * Hv + conv + Hv + qk + dv + vv * h;
    }
    return linearMixer;
}

/// NormPlacement::SharedBlock's parameters (Zamba2): every layer's norm and Mamba-2 mixer, each
/// hybrid layer's linear and adapters, each shared block once (its two norms, attention on twice
/// the hidden width, the MLP), the embedding, the final norm and the head.
double sharedBlockParameters(const ModelConfig& c) {
    const double h = static_cast<double>(c.hiddenSize), f = static_cast<double>(c.intermediateSize),
                 r = static_cast<double>(c.shared.adapterRank), in = 2 * h;
    const double hybrid = static_cast<double>(c.attentionLayers().size());
    const double block = static_cast<double>(c.sharedBlockParameterCount());
    const double adapters = r * h + 2 * f * r + (c.shared.attentionAdapters ? 3 * 2 * r * in : 0);
    const double V = static_cast<double>(c.vocabSize);
    return static_cast<double>(c.nLayers) * (linearMixerParameters(c) + h) +
           hybrid * (h * h + adapters) + static_cast<double>(c.shared.blocks) * block + V * h + h +
           (c.tieEmbeddings ? 0 : V * h);
}

} // namespace

int64_t ModelConfig::sharedBlockParameterCount() const {
    if (shared.blocks <= 0)
        return 0;
    // its input norm (2h) and pre_ff_layernorm (h), q, k, v on 2h, o_proj, gate_up_proj, down_proj
    const double h = static_cast<double>(hiddenSize), f = static_cast<double>(intermediateSize),
                 in = static_cast<double>(attentionInput()),
                 q = static_cast<double>(nHeads * headDim),
                 kv = static_cast<double>(nKvHeads * headDim),
                 vw = static_cast<double>(nKvHeads * valueDim()),
                 o = static_cast<double>(nHeads * valueDim());
    return saturate(in + h + in * (q + kv + vw) + o * h + 2 * f * h + f * h);
}

namespace {

/// DeepSeek-V4's parameters (transformer.cpp registers them): per layer the attention (q's
/// latent and norm, q_b, kv and its norm, the grouped output, the sinks), a compressed layer's
/// compressor (and a CSA layer's indexer), mHC's two mappings, the two norms, the router (its
/// correction bias, or a hash layer's table), the experts and the shared expert; then the
/// embedding, hc_head, the final norm and the head.
double compressedModelParameters(const ModelConfig& c) {
    const CompressedAttentionSpec& s = c.compressed;
    const double h = static_cast<double>(c.hiddenSize), D = static_cast<double>(c.headDim),
                 H = static_cast<double>(c.nHeads), ql = static_cast<double>(s.qLoraRank),
                 G = static_cast<double>(s.outGroups), r = static_cast<double>(s.outRank),
                 n = static_cast<double>(c.hyper.streams), E = static_cast<double>(c.moe.experts),
                 k = static_cast<double>(c.moe.topK), V = static_cast<double>(c.vocabSize),
                 Hi = static_cast<double>(s.indexHeads), Di = static_cast<double>(s.indexDim);
    const double attention =
        h * ql + ql + ql * H * D + h * D + D + G * r * (H * D / G) + h * G * r + H;
    const double hyper = 2 * ((2 + n) * n * n * h + (2 + n) * n + 3);
    double total = 0;
    for (int64_t l = 0; l < c.nLayers; ++l) {
        const double rate = static_cast<double>(s.rateOf(l));
        double layer = attention + hyper + 2 * h;
        if (rate > 0) {
            const double series = s.indexed(l) ? 2 : 1;
            layer += 2 * series * D * h + rate * series * D + D;
            if (s.indexed(l))
                layer += 2 * 2 * Di * h + rate * 2 * Di + Di + ql * Hi * Di + h * Hi;
        }
        layer += E * h + (c.moe.hashed(l) ? V * k : E) + expertsOfLayer(c) +
                 3 * h * static_cast<double>(c.moe.sharedIntermediate);
        total += layer;
    }
    return total + V * h + n * n * h + n + 1 + h + (c.tieEmbeddings ? 0 : V * h);
}

} // namespace

int64_t ModelConfig::expertParameterCount() const {
    return saturate(sparseLayers(*this) * expertsOfLayer(*this));
}

int64_t ModelConfig::cacheBytesPerToken(int64_t elementSize) const {
    const int64_t layers = static_cast<int64_t>(attentionLayers().size());
    return layers * nKvHeads * (2 * headDim + valueDim()) * elementSize;
}

namespace {

const char* ropeLayoutName(RopeLayout l) {
    switch (l) {
    case RopeLayout::Half:
        return "half";
    case RopeLayout::Interleaved:
        return "interleaved";
    case RopeLayout::InterleavedToHalf:
        return "interleaved_to_half";
    }
    return "?";
}

const char* routerKind(const MoeSpec& m) {
    switch (m.router) {
    case MoeRouter::SoftmaxTopK: // (Jamba keeps the top k's weights as they are)
        return m.normTopK ? "softmax, top k renormalised" : "softmax, top k";
    case MoeRouter::TopKSoftmax:
        return "top k, softmax";
    case MoeRouter::SigmoidGroups:
        return m.groups > 1 ? "sigmoid, group-limited top k" : "sigmoid, top k";
    case MoeRouter::SigmoidTopK:
        return "top k, sigmoid on the input";
    case MoeRouter::SoftmaxGroups:
        return m.groups > 1 ? "softmax, group-limited top k" : "softmax, top k renormalised";
    case MoeRouter::SqrtSoftplusTopK:
        return m.hashLayers.empty() ? "sqrt(softplus), top k renormalised"
                                    : "sqrt(softplus), top k renormalised; hash layers by token id";
    }
    return "?";
}

json ropeJson(const RopeSpec& r) {
    json j{{"type", r.scaling.empty() ? "default" : r.scaling}, {"theta", r.theta}};
    if (!r.scaling.empty())
        j["factor"] = r.factor;
    if (r.attentionFactor != 1.0)
        j["attention_factor"] = r.attentionFactor;
    return j;
}

} // namespace

std::string attentionFeaturesJson(const ModelConfig& c) {
    json j = json::object();
    // (GraniteMoeHybrid without "rope": every attention layer NoPE, no RoPE to describe)
    const std::vector<int64_t> nope = c.nopeLayers();
    if (c.rotaryDim > 0 && c.layout != Layout::GPT2 && nope.size() < c.attentionLayers().size()) {
        json rope = ropeJson(c.rope);
        rope["layout"] = ropeLayoutName(c.ropeLayout);
        rope["rotary_dim"] = c.rotaryDim;
        if (!c.layerLocalRope.empty())
            rope["sliding_layers"] = ropeJson(c.localRope);
        j["rope"] = rope;
    }
    std::vector<int64_t> chunked;
    for (int64_t l = 0; l < c.nLayers; ++l)
        if (c.chunkOf(l) > 0)
            chunked.push_back(l);
    if (!c.layerWindow.empty())
        j["layer_sliding_window"] = c.layerWindow;
    if (!chunked.empty())
        j["layer_chunk_size"] = c.layerChunk;
    if (!nope.empty())
        j["nope_layers"] = nope;
    if (c.attnTemperatureScale > 0 && c.attnTemperatureEveryLayer) // (Mistral 4)
        j["attention_temperature"] = {{"scale", c.attnTemperatureScale},
                                      {"floor", c.attnTemperatureFloor},
                                      {"shift", c.attnTemperatureShift}};
    else if (c.attnTemperatureScale > 0) // (Llama 4)
        j["nope_temperature"] = {{"scale", c.attnTemperatureScale},
                                 {"floor", c.attnTemperatureFloor}};
    if (c.qkL2Norm)
        j["qk_l2_norm"] = true;
    if (c.sinks)
        j["sinks"] = true;
    if (c.mla.kvLoraRank > 0)
        j["mla"] = {{"q_lora_rank", c.mla.qLoraRank},
                    {"kv_lora_rank", c.mla.kvLoraRank},
                    {"qk_nope_head_dim", c.mla.nopeDim},
                    {"qk_rope_head_dim", c.mla.ropeDim},
                    {"v_head_dim", c.valueDim()},
                    {"latent_per_position", c.mla.kvLoraRank + c.mla.ropeDim},
                    {"per_head_kv_per_position", c.nKvHeads * (c.headDim + c.valueDim())}};
    else if (c.valueDim() != c.headDim)
        j["v_head_dim"] = c.valueDim();
    if (c.compressed.active()) { // DeepSeek-V4: per layer its entries' rate (0: the window alone)
        const CompressedAttentionSpec& v = c.compressed;
        j["compressed_attention"] = {{"q_lora_rank", v.qLoraRank},
                                     {"o_groups", v.outGroups},
                                     {"o_lora_rank", v.outRank},
                                     {"layer_rates", v.layerRate},
                                     {"layer_indexed", v.layerIndexed},
                                     {"index_n_heads", v.indexHeads},
                                     {"index_head_dim", v.indexDim},
                                     {"index_topk", v.indexTopK},
                                     {"key_is_value", true}};
        j["hyper_connections"] = {{"streams", c.hyper.streams},
                                  {"sinkhorn_iters", c.hyper.sinkhornIters}};
    }
    if (!c.layerKinds.empty()) {
        json kinds = json::array();
        for (int64_t l = 0; l < c.nLayers; ++l)
            kinds.push_back(layerKindLabel(c.kindOf(l)));
        j["layer_kinds"] = kinds;
    }
    const MupMultipliers& m = c.mup; // Falcon-H1's, where a model has them
    const std::array<double, 7> mup{m.attnIn,   m.attnOut, m.key, m.mambaIn,
                                    m.mambaOut, m.gate,    m.down};
    if (std::any_of(mup.begin(), mup.end(), [](double v) { return v != 1.0; }) ||
        c.linear.projScale != std::array<double, 5>{1, 1, 1, 1, 1})
        j["mup_multipliers"] = {{"attention_in", m.attnIn},
                                {"attention_out", m.attnOut},
                                {"key", m.key},
                                {"mamba_in", m.mambaIn},
                                {"mamba_out", m.mambaOut},
                                {"mamba_in_proj", c.linear.projScale},
                                {"mlp_gate", m.gate},
                                {"mlp_down", m.down}};
    if (c.norms == NormPlacement::NormedResidual) { // MiniMax-01: α·norm(x) + β·f(norm(x))
        const ResidualFactors& r = c.residual;
        j["residual"] = {{"from", r.fromNormed ? "the normed input" : "the input"},
                         {"attention_alpha", r.attnAlpha},
                         {"attention_beta", r.attnBeta},
                         {"linear_alpha", r.linearAlpha},
                         {"linear_beta", r.linearBeta},
                         {"mlp_alpha", r.mlpAlpha},
                         {"mlp_beta", r.mlpBeta}};
    }
    if (c.shared.blocks > 0) // Zamba2: the blocks hybrid layer j runs the (j mod blocks)-th of
        j["shared_blocks"] = {{"blocks", c.shared.blocks},
                              {"adapter_rank", c.shared.adapterRank},
                              {"attention_adapters", c.shared.attentionAdapters}};
    if (c.linearLayerCount() > 0) {
        const LinearSpec& s = c.linear;
        j["linear_attention"] = {
            {"key_heads", s.keyHeads},     {"value_heads", s.valueHeads},
            {"key_head_dim", s.keyDim},    {"value_head_dim", s.valueDim},
            {"conv_kernel", s.convKernel}, {"state_elements_per_layer", s.stateElements()}};
        if (s.dtRank > 0) // Mamba-1: dt's rank
            j["linear_attention"]["dt_rank"] = s.dtRank;
    }
    if (c.indexer.active()) {
        std::vector<int64_t> reusing;
        for (int64_t l = 0; l < c.nLayers; ++l)
            if (c.indexer.reuses(l))
                reusing.push_back(l);
        if (c.indexer.blocks()) {
            std::vector<int64_t> selecting;
            for (int64_t l = 0; l < c.nLayers; ++l)
                if (c.indexer.on(l))
                    selecting.push_back(l);
            j["indexer"] = {{"heads", c.indexer.heads},
                            {"head_dim", c.indexer.dim},
                            {"block_size", c.indexer.blockSize},
                            {"top_k_blocks", c.indexer.topK},
                            {"local_blocks", c.indexer.localBlocks},
                            {"layers", selecting}};
        } else {
            j["indexer"] = {{"heads", c.indexer.heads},
                            {"head_dim", c.indexer.dim},
                            {"top_k", c.indexer.topK},
                            {"layers_reusing_previous_selection", reusing}};
        }
    }
    if (c.gatedAttention)
        j["gated_attention"] = true;
    if (c.moe.experts > 0) {
        std::vector<int64_t> sparse;
        for (int64_t l = 0; l < c.nLayers; ++l)
            if (c.moe.sparse(l))
                sparse.push_back(l);
        json e{{"experts", c.moe.experts},
               {"top_k", c.moe.topK},
               {"expert_intermediate", c.moe.intermediate},
               {"router", routerKind(c.moe)},
               {"sparse_layers", sparse},
               {"expert_parameters", c.expertParameterCount()}};
        if (c.moe.sharedIntermediate > 0)
            e["shared_expert_intermediate"] = c.moe.sharedIntermediate;
        if (!c.moe.hashLayers.empty()) { // DeepSeek-V4: routed by a table of token ids
            std::vector<int64_t> hashed;
            for (int64_t l = 0; l < c.nLayers; ++l)
                if (c.moe.hashed(l))
                    hashed.push_back(l);
            e["hash_layers"] = hashed;
        }
        if (c.moe.expertClamp > 0)
            e["swiglu_limit"] = c.moe.expertClamp;
        j["experts"] = e;
    }
    return j.dump();
}

int64_t ModelConfig::parameterCount() const {
    if (norms == NormPlacement::SharedBlock)
        return saturate(sharedBlockParameters(*this));
    if (compressed.active())
        return saturate(compressedModelParameters(*this));
    const double h = static_cast<double>(hiddenSize), D = static_cast<double>(headDim),
                 Dv = static_cast<double>(valueDim()), H = static_cast<double>(nHeads),
                 KV = static_cast<double>(nKvHeads), f = static_cast<double>(intermediateSize),
                 L = static_cast<double>(nLayers), V = static_cast<double>(vocabSize);
    const double q = H * D, kv = KV * D, vw = KV * Dv;
    double perLayer = 0;
    if (mla.kvLoraRank > 0) {
        const double qa = static_cast<double>(mla.qLoraRank),
                     lora = static_cast<double>(mla.kvLoraRank),
                     kva = lora + static_cast<double>(mla.ropeDim);
        perLayer += qa > 0 ? h * qa + qa + qa * q + (qkvBias ? qa : 0) : h * q;
        perLayer += h * kva + (qkvBias ? kva : 0) + lora;
        perLayer += lora * H * (static_cast<double>(mla.nopeDim) + Dv);
        perLayer += H * Dv * h + (outBias ? h : 0);
    } else {
        perLayer += h * q + h * kv + h * vw + H * Dv * h; // q, k, v, o
        if (qkvBias)
            perLayer += q + kv + vw;
        if (outBias)
            perLayer += h;
    }
    if (sinks)
        perLayer += H;
    if (qkNorm == QkNorm::PerHead)
        perLayer += 2 * D;
    else if (qkNorm == QkNorm::Whole)
        perLayer += q + kv;
    if (gatedAttention) // q_proj's second half: the output gate
        perLayer += h * q;
    // DSA: wq_b from the q latent, wk, k_norm (weight, bias), weights_proj; MiniMax-M3:
    // index_q_proj, index_k_proj and their two norms.
    double indexerParameters = 0;
    if (indexer.active()) {
        const double Hi = static_cast<double>(indexer.heads), Di = static_cast<double>(indexer.dim);
        double own = 0; // the layers with an indexer of their own (GLM-5's shared ones have none)
        for (int64_t l = 0; l < nLayers; ++l)
            own += isAttention(l) && indexer.on(l) && !indexer.reuses(l) ? 1 : 0;
        indexerParameters = own * (indexer.blocks() ? h * Hi * Di + h * Di + 2 * Di
                                                    : static_cast<double>(mla.qLoraRank) * Hi * Di +
                                                          h * Di + 2 * Di + h * Hi);
    }
    // The linear-attention layers' mixer in place of the attention's.
    const double linearLayers = static_cast<double>(linearLayerCount());
    const double linearMixer = linearMixerParameters(*this);
    const bool layerNormBias = layout != Layout::Llama; // GPT-NeoX, GPT-2: LayerNorm with bias
    const double normsPerLayer =
        norms == NormPlacement::Sandwich || norms == NormPlacement::SandwichGlm4 ? 4
        : norms == NormPlacement::Parallel || norms == NormPlacement::Single     ? 1
                                                                                 : 2;
    const double blockNorms = normsPerLayer * h * (layerNormBias ? 2 : 1);
    const double attention = perLayer; // (Falcon-H1's layers: beside their Mamba-2 mixer)
    perLayer += blockNorms;
    // The dense MLP (gated in the Llama layout but Nemotron-H's), on the layers with an MLP that
    // are not sparse.
    const bool gated = layout == Layout::Llama && gatedMlp;
    double dense = (gated ? 3 : 2) * h * f;
    if (mlpBias)
        dense += (gated ? 2 : 1) * f + h;
    const double sparse = sparseLayers(*this);
    double moeLayer = 0;
    if (moe.experts > 0) {
        const double E = static_cast<double>(moe.experts), lat = static_cast<double>(moe.latent);
        moeLayer = E * h + (moe.routerBias ? E : 0) + (moe.scoreCorrection ? E : 0) +
                   expertsOfLayer(*this) +
                   (gated ? 3 : 2) * h * static_cast<double>(moe.sharedIntermediate) +
                   (!gatedMlp && mlpBias && moe.sharedIntermediate > 0
                        ? static_cast<double>(moe.sharedIntermediate) + h
                        : 0) +
                   (moe.sharedGate ? h : 0) + 2 * h * lat + (mlpBias && lat > 0 ? lat + h : 0);
    }
    if (moe.denseBeside) // GraniteMoeHybrid: the shared MLP beside the experts
        moeLayer += dense;
    // Nemotron-H's MLP blocks: a norm and the MLP or experts, no mixer.
    double mlpLayers = 0;
    for (int64_t l = 0; l < nLayers; ++l)
        mlpLayers += hasMlp(l) ? 1 : 0;
    const double mlpOnly =
        static_cast<double>(std::count(layerKinds.begin(), layerKinds.end(), LayerKind::Mlp));
    const double beside = static_cast<double>(
        std::count(layerKinds.begin(), layerKinds.end(), LayerKind::AttentionMamba2));
    double total = (L - linearLayers - mlpOnly) * perLayer +
                   linearLayers * (linearMixer + blockNorms) + beside * attention +
                   mlpOnly * blockNorms + indexerParameters + (mlpLayers - sparse) * dense +
                   sparse * moeLayer + V * h + (layerNormBias ? 2 : 1) * h;
    if (!tieEmbeddings)
        total += V * h;
    if (layout == Layout::GPT2)
        total += static_cast<double>(maxPositions) * h;
    return saturate(total);
}

bool ModelConfig::usesRope(int64_t layer) const {
    const size_t l = static_cast<size_t>(layer);
    return !(l < layerNoRope.size() && layerNoRope[l]);
}

std::vector<int64_t> ModelConfig::nopeLayers() const {
    std::vector<int64_t> out;
    if (rotaryDim > 0 && layout != Layout::GPT2)
        for (int64_t l = 0; l < nLayers; ++l)
            if (isAttention(l) && !usesRope(l))
                out.push_back(l);
    return out;
}

int64_t ModelConfig::linearLayerCount() const {
    return std::count_if(layerKinds.begin(), layerKinds.end(), isLinearKind);
}

bool isActivation(const std::string& name) {
    const std::string all = std::string(", ") + kActivations + ", ";
    return !name.empty() && all.find(", " + name + ", ") != std::string::npos;
}

std::vector<int64_t> ModelConfig::attentionLayers() const {
    std::vector<int64_t> out;
    for (int64_t l = 0; l < nLayers; ++l)
        if (isAttention(l))
            out.push_back(l);
    return out;
}

const char* layerKindName(LayerKind kind) {
    switch (kind) {
    case LayerKind::Attention:
        return "full_attention";
    case LayerKind::GatedDeltaNet:
    case LayerKind::KimiDelta:
        return "linear_attention";
    case LayerKind::Mamba2:
        return "mamba";
    case LayerKind::Mlp:
        return "mlp";
    case LayerKind::AttentionMamba2:
        return "hybrid";
    case LayerKind::ShortConv:
        return "conv";
    case LayerKind::Mamba1:
        return "mamba1";
    case LayerKind::Lightning:
        return "lightning";
    }
    return "?";
}

const char* layerKindLabel(LayerKind kind) {
    switch (kind) {
    case LayerKind::Attention:
        return "attention";
    case LayerKind::GatedDeltaNet:
        return "Gated DeltaNet";
    case LayerKind::KimiDelta:
        return "Kimi Delta Attention";
    case LayerKind::Mamba2:
        return "Mamba-2";
    case LayerKind::Mlp:
        return "MLP";
    case LayerKind::AttentionMamba2:
        return "attention + Mamba-2";
    case LayerKind::ShortConv:
        return "short convolution";
    case LayerKind::Mamba1:
        return "Mamba";
    case LayerKind::Lightning:
        return "lightning attention";
    }
    return "?";
}

bool layerKindOfLabel(const std::string& label, LayerKind& kind) {
    for (const LayerKind k : kLayerKinds)
        if (label == layerKindLabel(k)) {
            kind = k;
            return true;
        }
    return false;
}

int64_t ModelConfig::chunkOf(int64_t layer) const {
    const size_t l = static_cast<size_t>(layer);
    return l < layerChunk.size() ? layerChunk[l] : 0;
}

std::string WeightQuantization::describe() const {
    if (method.empty())
        return {};
    if (method == "mxfp4")
        return "mxfp4, 4-bit e2m1 values with a power-of-two scale per 32";
    if (blockRows <= 0 && blockCols <= 0)
        return method + ", a scale per matrix";
    return method + ", " + std::to_string(blockRows) + "×" + std::to_string(blockCols) + " blocks";
}

namespace {

/// quantization_config: transformers' fine-grained "fp8" and gpt-oss's "mxfp4" are read; any
/// other method is refused, naming it (its weights are not plain matrices).
WeightQuantization readQuantization(const ConfigKeys& top) {
    if (!top.raw("quantization_config").is_object())
        top.fail("quantization_config", "must be an object");
    const ConfigKeys k = top.nested("quantization_config");
    WeightQuantization q;
    q.method = k.string("quant_method", "");
    // MXFP4: the checkpoint's _blocks and _scales say which weights (Checkpoint decodes them, as
    // transformers' Mxfp4Config(dequantize=True) does); modules_to_not_convert only lists the
    // others.
    if (q.method == "mxfp4")
        return q;
    if (q.method != "fp8")
        k.fail("quant_method", q.method.empty()
                                   ? std::string("is missing")
                                   : "'" + q.method +
                                         "' is not read: SparQ Lab opens float32, float16 and "
                                         "bfloat16 checkpoints, fp8 block-quantized ones and "
                                         "MXFP4 (gpt-oss) ones");
    // What FineGrainedFP8Config.post_init refuses. The activations are not quantized here
    // (transformers' dequantize path), whichever the scheme.
    const std::string scheme = k.string("activation_scheme", "dynamic");
    if (scheme != "dynamic" && scheme != "static")
        k.fail("activation_scheme", "'" + scheme + "' is neither 'dynamic' nor 'static'");
    const std::string scaleFormat = k.string("scale_fmt", "float");
    if (scaleFormat != "float" && scaleFormat != "ue8m0")
        k.fail("scale_fmt", "'" + scaleFormat + "' is neither 'float' nor 'ue8m0'");
    // transformers' FineGrainedFP8Config: 128×128 unless given; null, one scale per matrix.
    q.blockRows = q.blockCols = 128;
    if (k.isNull("weight_block_size")) {
        q.blockRows = q.blockCols = 0;
    } else if (k.has("weight_block_size")) {
        const json& b = k.raw("weight_block_size");
        if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() ||
            !b[1].is_number_integer() || b[0].get<int64_t>() < 1 || b[1].get<int64_t>() < 1 ||
            b[0].get<int64_t>() > (int64_t{1} << 20) || b[1].get<int64_t>() > (int64_t{1} << 20))
            k.fail("weight_block_size", "must be two positive integers (rows, columns)");
        q.blockRows = b[0].get<int64_t>();
        q.blockCols = b[1].get<int64_t>();
    }
    return q;
}

} // namespace

std::string pythonLiteralsAsStrings(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    bool inString = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char ch = text[i];
        if (inString) {
            out += ch;
            if (ch == '\\' && i + 1 < text.size())
                out += text[++i];
            else if (ch == '"')
                inString = false;
            continue;
        }
        if (ch == '"')
            inString = true;
        bool replaced = false;
        for (const char* literal : {"-Infinity", "Infinity", "NaN"}) {
            const size_t n = std::strlen(literal);
            if (text.compare(i, n, literal) == 0) {
                out += '"' + std::string(literal) + '"';
                i += n - 1;
                replaced = true;
                break;
            }
        }
        if (!replaced)
            out += ch;
    }
    return out;
}

ModelConfig parseModelConfig(const std::string& text, const std::string& path) {
    json j;
    try {
        j = json::parse(pythonLiteralsAsStrings(text));
    } catch (const json::exception& e) {
        throw ConfigError(path + ": malformed JSON: " + e.what());
    }
    if (!j.is_object())
        throw ConfigError(path + ": config.json must be a JSON object");
    const ConfigKeys k(j, path);
    ModelConfig c;
    if (!k.has("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
        !j["architectures"][0].is_string())
        k.fail("architectures", "is missing (a list naming the model class)");
    c.architectureName = j["architectures"][0].get<std::string>();
    // v5 writes "dtype", v4 "torch_dtype".
    c.torchDtype = k.string("dtype", k.string("torch_dtype", "float32"));
    if (k.has("quantization_config"))
        c.quantization = readQuantization(k);
    c.eosIds = k.ids("eos_token_id");
    const std::vector<int64_t> bos = k.ids("bos_token_id");
    c.bosId = bos.empty() ? -1 : bos.front();
    // The family table reads the rest (model/families/).
    const ModelFamily* family = findFamily(c.architectureName);
    if (!family)
        throw ConfigError(path + ": unsupported architecture '" + c.architectureName +
                          "' (supported: " + supportedArchitectures() + ")");
    c.family = family->name;
    c.layout = family->layout;
    family->parse(k, c);
    // A RoPE base of 1 or below gives NaN or constant angles, whichever key the family reads it
    // from (rope_theta, GPT-NeoX's rotary_emb_base, Gemma 3's rope_local_base_freq).
    if (!(c.rope.theta > 1))
        throw ConfigError(path + ": the RoPE base (rope_theta) " + shortNumber(c.rope.theta) +
                          " must be above 1");
    if (!c.layerLocalRope.empty() && !(c.localRope.theta > 1))
        throw ConfigError(path + ": the sliding layers' RoPE base " +
                          shortNumber(c.localRope.theta) + " must be above 1");
    if (c.nHeads % c.nKvHeads != 0)
        k.fail("num_key_value_heads", "must divide num_attention_heads");
    // Sizes no model has (a broken or hostile file): refused before anything is allocated.
    constexpr int64_t kMaxParameters = int64_t{1} << 50; // 10^15
    if (c.parameterCount() > kMaxParameters)
        throw ConfigError(path + ": the sizes give " + std::to_string(c.parameterCount()) +
                          " parameters, more than any model has (check hidden_size, "
                          "num_hidden_layers, vocab_size and the experts)");
    if (c.moe.experts > ConfigKeys::kMaxLayers)
        throw ConfigError(path + ": " + std::to_string(c.moe.experts) +
                          " experts per layer is out of range");
    if (c.moe.experts > 0 && (c.moe.topK < 1 || c.moe.topK > c.moe.experts))
        throw ConfigError(path + ": num_experts_per_tok (" + std::to_string(c.moe.topK) +
                          ") must lie in 1.." + std::to_string(c.moe.experts) + " (the experts)");
    if (c.layout != Layout::Llama && c.headDim * c.nHeads != c.hiddenSize)
        k.fail("num_attention_heads", "must divide the hidden size");
    const std::vector<int64_t> attending = c.attentionLayers();
    const bool rotates =
        std::any_of(attending.begin(), attending.end(), [&](int64_t l) { return c.usesRope(l); });
    if (rotates && (c.rotaryDim % 2 != 0 || c.rotaryDim > c.headDim)) // (no RoPE: any head_dim)
        k.fail("head_dim", "must give an even number of rotary dimensions, at most head_dim");
    if (!isActivation(c.hiddenAct))
        k.fail("hidden_act",
               "'" + c.hiddenAct + "' is not supported (" + std::string(kActivations) + ")");
    return c;
}

ModelConfig readModelConfig(const std::string& path) {
    const std::optional<std::string> text = base::readWholeFile(path);
    if (!text)
        throw ConfigError(path + ": cannot read (missing?)");
    return parseModelConfig(*text, path);
}

} // namespace sparqlab::model
