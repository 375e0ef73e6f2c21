#include "capture_file.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sparqlab::capture {

namespace {

/// What is wrong with a hybrid capture's layer_kinds and model_layers (empty: nothing): one kind
/// per model layer, each a known one; one model layer per captured layer, ascending, each an
/// attention layer, and every attention layer captured.
std::string hybridLayersProblem(const model::CaptureInfo& info) {
    std::string known;
    for (const model::LayerKind k : model::kLayerKinds)
        known += (known.empty() ? "" : ", ") + std::string(model::layerKindLabel(k));
    if (info.layerKinds.size() > 4096)
        return "layer_kinds lists more than 4096 layers";
    std::vector<int64_t> attention;
    for (size_t l = 0; l < info.layerKinds.size(); ++l) {
        model::LayerKind kind{};
        if (!model::layerKindOfLabel(info.layerKinds[l], kind))
            return "layer_kinds holds '" + info.layerKinds[l].substr(0, 40) + "' (known: " + known +
                   ")";
        if (model::hasAttentionKind(kind))
            attention.push_back(static_cast<int64_t>(l));
    }
    if (info.modelLayers != attention || static_cast<int64_t>(attention.size()) != info.nLayers)
        return "model_layers must list the attention layers of layer_kinds, one per captured layer "
               "(n_layers = " +
               std::to_string(info.nLayers) + ")";
    if (info.linearStateElements < 0)
        return "linear_state_elements must be >= 0";
    return {};
}

/// What is wrong with a capture's indexer attributes (empty: nothing): a key dimension in
/// 1..65536, heads and top-k >= 0; a block indexer's block size in 1..65536 with local blocks
/// >= 0, 1..nHeads indexer heads dividing the query heads and layer_indexed, one 0 or 1 per
/// captured layer (a per-key indexer has neither).
std::string indexerProblem(const model::CaptureInfo& info) {
    if (info.indexHeadDim < 1 || info.indexHeadDim > 65536 || info.indexHeads < 0 ||
        info.indexTopK < 0)
        return "index_head_dim, index_n_heads and index_topk must describe an indexer "
               "(1 <= index_head_dim <= 65536, the others >= 0)";
    if (info.indexBlockSize < 0 || info.indexBlockSize > 65536 || info.indexLocalBlocks < 0 ||
        info.indexLocalBlocks > 65536)
        return "index_block_size must be in 1..65536 and index_local_blocks in 0..65536";
    if (info.indexBlockSize > 0 && (info.indexHeads < 1 || info.indexHeads > info.nHeads ||
                                    info.nHeads % info.indexHeads != 0))
        return "a block indexer's index_n_heads must divide the " + std::to_string(info.nHeads) +
               " query heads";
    if (info.indexBlockSize > 0 && info.layerIndexed.empty())
        return "a block indexer needs layer_indexed (which layers have an indexer)";
    if (info.indexBlockSize == 0 && (info.indexLocalBlocks > 0 || !info.layerIndexed.empty()))
        return "index_local_blocks and layer_indexed need index_block_size (a block indexer)";
    if (!info.layerIndexed.empty() &&
        (static_cast<int64_t>(info.layerIndexed.size()) != info.nLayers ||
         std::any_of(info.layerIndexed.begin(), info.layerIndexed.end(),
                     [](int64_t v) { return v != 0 && v != 1; })))
        return "layer_indexed must hold a 0 or 1 for each of the " + std::to_string(info.nLayers) +
               " layers";
    return {};
}

/// What is wrong with a capture's compressed entries' attributes (empty: nothing): one rate
/// >= 0 per layer (0: a sliding layer) up to 2^20, one 0 or 1 per layer saying where the indexer
/// picks (only on a layer with entries), and its picks per query >= 1 where it does.
std::string compressedProblem(const model::CaptureInfo& info) {
    const auto& rates = info.layerCompressRate;
    const auto& indexed = info.layerEntryIndexed;
    if (static_cast<int64_t>(rates.size()) != info.nLayers ||
        static_cast<int64_t>(indexed.size()) != info.nLayers)
        return "layer_compress_rate and layer_entry_indexed must hold one value per layer "
               "(n_layers = " +
               std::to_string(info.nLayers) + ")";
    for (size_t l = 0; l < rates.size(); ++l) {
        if (rates[l] < 0 || rates[l] > (int64_t{1} << 20))
            return "layer_compress_rate must hold positions per entry in 0..1048576 (0: none)";
        if (indexed[l] != 0 && (indexed[l] != 1 || rates[l] == 0))
            return "layer_entry_indexed must hold 0, or 1 on a layer with entries";
    }
    const bool any = std::any_of(indexed.begin(), indexed.end(), [](int64_t v) { return v; });
    if (info.entryTopK < 0 || (any && info.entryTopK < 1))
        return "entry_topk must be >= 1 where a layer's indexer picks entries";
    if (info.entryIndexDim < 0 || info.entryIndexDim > 65536)
        return "entry_index_dim must lie in 0..65536 (0: not recorded)";
    return {};
}

[[noreturn]] void fail(const std::string& msg) {
    throw h5::H5Error(msg);
}

std::string exampleName(int64_t i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04lld", static_cast<long long>(i));
    return buf;
}

std::string sizesOf(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); ++d)
        s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
}

} // namespace

// --- writer ---------------------------------------------------------------------------------

CaptureWriter::CaptureWriter(const std::string& path, const model::CaptureInfo& info, bool float16)
    : m_file(h5::File::create(path)), m_info(info), m_float16(float16) {
    if (info.nLayers < 1 || info.nHeads < 1 || info.nKvHeads < 1 || info.headDim < 1 ||
        info.nHeads % info.nKvHeads != 0)
        fail(path + ": invalid capture shape (layers, heads, KV heads, head_dim)");
    const h5::Group root = m_file.root();
    root.setAttr("format", kCaptureFormat);
    root.setAttr("format_version", info.formatVersion());
    root.setAttr("model", info.model);
    root.setAttr("architecture", info.architecture);
    root.setAttr("n_layers", info.nLayers);
    root.setAttr("n_heads", info.nHeads);
    root.setAttr("n_kv_heads", info.nKvHeads);
    root.setAttr("head_dim", info.headDim);
    root.setAttr("attn_scale", info.attnScale);
    root.setAttr("created_by", info.createdBy);
    // Version 2: what attend, stats and the lab need to recompute the model's own attention.
    auto perLayer = [&](const auto& v, const char* name) {
        if (!v.empty() && static_cast<int64_t>(v.size()) != info.nLayers)
            fail(path + ": " + name + " needs one value per layer");
    };
    perLayer(info.layerAttnScale, "layer_attn_scale");
    perLayer(info.layerSlidingWindow, "layer_sliding_window");
    if (!info.uniformScale())
        root.setAttr("layer_attn_scale", info.layerAttnScale);
    if (std::any_of(info.layerSlidingWindow.begin(), info.layerSlidingWindow.end(),
                    [](int64_t w) { return w > 0; }))
        root.setAttr("layer_sliding_window", info.layerSlidingWindow);
    if (info.attnSoftcap > 0)
        root.setAttr("attn_softcap", info.attnSoftcap);
    // Version 3: sinks, chunks, d_v; and what any version may carry for people.
    perLayer(info.layerChunk, "layer_chunk_size");
    perLayer(info.layerUsesRope, "layer_uses_rope");
    if (info.vHeadDim > 0 && info.vHeadDim != info.headDim)
        root.setAttr("v_head_dim", info.vHeadDim);
    if (std::any_of(info.layerChunk.begin(), info.layerChunk.end(),
                    [](int64_t c) { return c > 0; }))
        root.setAttr("layer_chunk_size", info.layerChunk);
    if (!info.layerUsesRope.empty())
        root.setAttr("layer_uses_rope", info.layerUsesRope);
    if (info.sinks.defined()) {
        if (info.sinks.dim() != 2 || info.sinks.size(0) != info.nLayers ||
            info.sinks.size(1) != info.nHeads)
            fail(path + ": attention_sinks must be [n_layers, n_heads]");
        root.write("attention_sinks", info.sinks.to(at::kFloat).contiguous());
    }
    if (info.kvLoraRank > 0) {
        root.setAttr("kv_lora_rank", info.kvLoraRank);
        root.setAttr("qk_rope_head_dim", info.qkRopeHeadDim);
    }
    if (info.ropeInvFreq.defined()) {
        if (info.ropeInvFreq.dim() != 2 || info.ropeInvFreq.size(0) != info.nLayers ||
            info.ropeInvFreq.size(1) * 2 != info.headDim)
            fail(path + ": rope_inv_freq must be [n_layers, head_dim / 2]");
        root.write("rope_inv_freq", info.ropeInvFreq.to(at::kDouble).contiguous());
    }
    if (!info.layerKinds.empty()) {
        if (const std::string why = hybridLayersProblem(info); !why.empty())
            fail(path + ": " + why);
        std::string kinds;
        for (const std::string& k : info.layerKinds)
            kinds += (kinds.empty() ? "" : ",") + k;
        root.setAttr("layer_kinds", kinds);
        root.setAttr("model_layers", info.modelLayers);
        root.setAttr("linear_state_elements", info.linearStateElements);
    }
    if (info.indexHeadDim > 0) {
        if (const std::string why = indexerProblem(info); !why.empty())
            fail(path + ": " + why);
        root.setAttr("index_head_dim", info.indexHeadDim);
        root.setAttr("index_n_heads", info.indexHeads);
        root.setAttr("index_topk", info.indexTopK);
        if (info.indexBlockSize > 0) { // a block indexer (MiniMax-M3)
            root.setAttr("index_block_size", info.indexBlockSize);
            root.setAttr("index_local_blocks", info.indexLocalBlocks);
        }
        if (!info.layerIndexed.empty())
            root.setAttr("layer_indexed", info.layerIndexed);
    }
    if (info.compressed()) { // version 6: DeepSeek-V4's compressed entries
        if (const std::string why = compressedProblem(info); !why.empty())
            fail(path + ": " + why);
        root.setAttr("layer_compress_rate", info.layerCompressRate);
        root.setAttr("layer_entry_indexed", info.layerEntryIndexed);
        root.setAttr("entry_topk", info.entryTopK);
        root.setAttr("entry_index_dim", info.entryIndexDim);
    }
    root.createGroup("examples");
}

void CaptureWriter::add(const model::CaptureExample& e) {
    const int64_t S = e.tokenIds.numel();
    const int64_t T = e.qPositions.numel();
    const model::CaptureInfo& n = m_info;
    auto check = [&](bool ok, const std::string& what) {
        if (!ok)
            fail(m_file.path() + ": example " + std::to_string(m_count) + ": " + what);
    };
    check(e.tokenIds.dim() == 1 && S >= 1, "token_ids must be [S] with S >= 1");
    check(e.tokens.empty() || static_cast<int64_t>(e.tokens.size()) == S,
          "tokens must have one entry per token id");
    check(e.qPositions.dim() == 1 && T >= 1, "q_positions must be [T] with T >= 1");
    check(e.q.dim() == 4 && e.q.size(0) == n.nLayers && e.q.size(1) == n.nHeads &&
              e.q.size(2) == T && e.q.size(3) == n.headDim,
          "q must be [L, Hq, T, d_h], got " + sizesOf(e.q));
    check(e.k.dim() == 4 && e.k.size(0) == n.nLayers && e.k.size(1) == n.nKvHeads &&
              e.k.size(2) == S && e.k.size(3) == n.headDim,
          "k must be [L, Hkv, S, d_h], got " + sizesOf(e.k));
    check(e.v.dim() == 4 && e.v.size(0) == n.nLayers && e.v.size(1) == n.nKvHeads &&
              e.v.size(2) == S && e.v.size(3) == n.valueDim(),
          "v must be [L, Hkv, S, d_v], got " + sizesOf(e.v));
    const at::Tensor pos = e.qPositions.to(at::kLong);
    check(pos.min().item<int64_t>() >= 0 && pos.max().item<int64_t>() < S,
          "q_positions must lie in 0..S-1");
    check(T == 1 || (pos.slice(0, 1) - pos.slice(0, 0, T - 1)).gt(0).all().item<bool>(),
          "q_positions must be strictly increasing");

    const h5::Group g = m_file.root().group("examples").createGroup(exampleName(m_count));
    g.write("token_ids", e.tokenIds.to(at::kLong));
    g.writeStrings("tokens",
                   e.tokens.empty() ? std::vector<std::string>(static_cast<size_t>(S)) : e.tokens);
    g.write("q_positions", pos);
    g.setDatasetAttr("token_ids", "dims", "position"); // every dataset says its axes (§3)
    g.setDatasetAttr("tokens", "dims", "position");
    g.setDatasetAttr("q_positions", "dims", "query");
    h5::WriteOptions o;
    o.float16 = m_float16;
    o.chunk = {1, 1, T, n.headDim}; // one chunk per (layer, head)
    g.write("q", e.q.to(at::kFloat), o);
    g.setDatasetAttr("q", "dims", "layer,head,query,dim");
    o.chunk = {1, 1, S, n.headDim};
    g.write("k", e.k.to(at::kFloat), o);
    g.setDatasetAttr("k", "dims", "layer,head,position,dim");
    o.chunk = {1, 1, S, n.valueDim()};
    g.write("v", e.v.to(at::kFloat), o);
    g.setDatasetAttr("v", "dims", "layer,head,position,dim");
    if (e.indexScores.defined()) { // the model's indexer scores, NaN after each query
        const std::vector<int64_t> shape = n.indexScoresShape(T, S);
        const bool blocks = n.indexBlockSize > 0;
        check(n.indexHeadDim > 0 && e.indexScores.sizes().vec() == shape,
              std::string("index_scores must be ") + (blocks ? "[L, Hi, T, blocks]" : "[L, T, S]") +
                  ", got " + sizesOf(e.indexScores));
        h5::WriteOptions io;
        io.chunk = shape;
        io.chunk[0] = 1;
        g.write("index_scores", e.indexScores.to(at::kFloat).contiguous(), io);
        g.setDatasetAttr("index_scores", "dims",
                         blocks ? "layer,index_head,query,block" : "layer,query,position");
    }
    check(n.compressed() == e.entries.defined() &&
              (!e.entryScores.defined() || e.entries.defined()),
          n.compressed() ? "a capture with compressed layers needs each example's entries"
                         : "entries need the compressed layers' attributes");
    if (e.entries.defined()) { // the layers' entries one after another, and the indexer's scores
        const int64_t C = n.entryOffset(n.nLayers, S);
        check(e.entries.dim() == 2 && e.entries.size(0) == C && e.entries.size(1) == n.headDim,
              "entries must be [" + std::to_string(C) + ", d_h] (each layer's ⌊S / rate⌋), got " +
                  sizesOf(e.entries));
        check(!e.entryScores.defined() || e.entryScores.sizes().vec() == std::vector<int64_t>{T, C},
              "entry_scores must be [T, " + std::to_string(C) + "], got " + sizesOf(e.entryScores));
        h5::WriteOptions eo;
        eo.float16 = m_float16;
        g.write("entries", e.entries.to(at::kFloat).contiguous(), eo);
        g.setDatasetAttr("entries", "dims", "entry,dim");
        if (e.entryScores.defined()) {
            g.write("entry_scores", e.entryScores.to(at::kFloat).contiguous());
            g.setDatasetAttr("entry_scores", "dims", "query,entry");
        }
    }
    ++m_count;
}

void CaptureWriter::finish() {
    if (m_count == 0)
        fail(m_file.path() + ": a capture needs at least one example");
    m_file.commit();
}

// --- reader ---------------------------------------------------------------------------------

CaptureReader::CaptureReader(const std::string& path)
    : m_path(path), m_file(h5::File::openRead(path)) {
    const h5::Group root = m_file.root();
    if (!root.hasAttribute("format"))
        fail(path + ": not a SparQ Lab capture (no 'format' attribute)");
    const std::string format = root.attrString("format");
    if (format != kCaptureFormat)
        fail(path + ": not a capture file (format is '" + format + "', expected '" +
             kCaptureFormat + "')");
    const int64_t version = root.attrInt("format_version");
    if (version < 1 || version > 6)
        fail(path + ": capture format_version " + std::to_string(version) +
             " is not supported (this build reads versions 1 to 6)");
    m_info.model = root.hasAttribute("model") ? root.attrString("model") : "";
    m_info.architecture = root.hasAttribute("architecture") ? root.attrString("architecture") : "";
    m_info.nLayers = root.attrInt("n_layers");
    m_info.nHeads = root.attrInt("n_heads");
    m_info.nKvHeads = root.attrInt("n_kv_heads");
    m_info.headDim = root.attrInt("head_dim");
    m_info.attnScale = root.attrDouble("attn_scale");
    m_info.createdBy = root.hasAttribute("created_by") ? root.attrString("created_by") : "";
    if (m_info.nLayers < 1 || m_info.nHeads < 1 || m_info.nKvHeads < 1 || m_info.headDim < 1 ||
        m_info.nHeads % m_info.nKvHeads != 0)
        fail(path + ": invalid shape attributes (n_layers, n_heads, n_kv_heads, head_dim)");
    if (!(m_info.attnScale > 0) || !std::isfinite(m_info.attnScale))
        fail(path + ": attn_scale must be a finite positive number");
    // Version 2's per-layer attributes (a version 1 file has none: scale attn_scale, no window,
    // no soft-cap).
    if (version >= 2 && root.hasAttribute("layer_attn_scale")) {
        m_info.layerAttnScale = root.attrDoubles("layer_attn_scale");
        if (static_cast<int64_t>(m_info.layerAttnScale.size()) != m_info.nLayers)
            fail(path + ": layer_attn_scale must hold one value per layer (n_layers = " +
                 std::to_string(m_info.nLayers) + ")");
        for (double x : m_info.layerAttnScale)
            if (!(x > 0) || !std::isfinite(x))
                fail(path + ": layer_attn_scale must hold finite positive numbers");
    }
    if (version >= 2 && root.hasAttribute("layer_sliding_window")) {
        m_info.layerSlidingWindow = root.attrInts("layer_sliding_window");
        if (static_cast<int64_t>(m_info.layerSlidingWindow.size()) != m_info.nLayers)
            fail(path + ": layer_sliding_window must hold one value per layer (n_layers = " +
                 std::to_string(m_info.nLayers) + ")");
        for (int64_t w : m_info.layerSlidingWindow)
            if (w < 0)
                fail(path + ": layer_sliding_window must hold windows >= 0 (0: global)");
    }
    if (version >= 2 && root.hasAttribute("attn_softcap")) {
        m_info.attnSoftcap = root.attrDouble("attn_softcap");
        if (!(m_info.attnSoftcap >= 0) || !std::isfinite(m_info.attnSoftcap))
            fail(path + ": attn_softcap must be a finite number >= 0 (0: none)");
    }
    readVersion3(root, version);
    m_names = root.group("examples").children();
    if (m_names.empty())
        fail(path + ": the capture holds no examples");
}

void CaptureReader::readVersion3(const h5::Group& root, int64_t version) {
    const std::string& path = m_path;
    auto perLayer = [&](const char* name) {
        std::vector<int64_t> v = root.attrInts(name);
        if (static_cast<int64_t>(v.size()) != m_info.nLayers)
            fail(path + ": " + name + " must hold one value per layer (n_layers = " +
                 std::to_string(m_info.nLayers) + ")");
        return v;
    };
    if (root.hasAttribute("layer_uses_rope")) {
        m_info.layerUsesRope = perLayer("layer_uses_rope");
        for (int64_t x : m_info.layerUsesRope)
            if (x != 0 && x != 1)
                fail(path + ": layer_uses_rope must hold 0 (NoPE) or 1 per layer");
    }
    if (root.hasAttribute("kv_lora_rank")) {
        m_info.kvLoraRank = root.attrInt("kv_lora_rank");
        m_info.qkRopeHeadDim =
            root.hasAttribute("qk_rope_head_dim") ? root.attrInt("qk_rope_head_dim") : 0;
        if (m_info.kvLoraRank < 1 || m_info.qkRopeHeadDim < 0 ||
            m_info.qkRopeHeadDim > m_info.headDim)
            fail(path + ": kv_lora_rank and qk_rope_head_dim must describe an MLA latent "
                        "(kv_lora_rank >= 1, 0 <= qk_rope_head_dim <= head_dim)");
    }
    if (root.hasAttribute("layer_kinds")) {
        const std::string kinds = root.attrString("layer_kinds");
        for (size_t from = 0; from <= kinds.size();) {
            const size_t comma = std::min(kinds.find(',', from), kinds.size());
            m_info.layerKinds.push_back(kinds.substr(from, comma - from));
            from = comma + 1;
        }
        m_info.modelLayers = root.hasAttribute("model_layers") ? root.attrInts("model_layers")
                                                               : std::vector<int64_t>{};
        m_info.linearStateElements =
            root.hasAttribute("linear_state_elements") ? root.attrInt("linear_state_elements") : 0;
        if (const std::string why = hybridLayersProblem(m_info); !why.empty())
            fail(path + ": " + why);
    }
    if (root.hasAttribute("index_head_dim")) {
        m_info.indexHeadDim = root.attrInt("index_head_dim");
        m_info.indexHeads = root.hasAttribute("index_n_heads") ? root.attrInt("index_n_heads") : 0;
        m_info.indexTopK = root.hasAttribute("index_topk") ? root.attrInt("index_topk") : 0;
        m_info.indexBlockSize =
            root.hasAttribute("index_block_size") ? root.attrInt("index_block_size") : 0;
        if (root.hasAttribute("index_block_size") && m_info.indexBlockSize < 1)
            fail(path + ": index_block_size must be in 1..65536");
        m_info.indexLocalBlocks =
            root.hasAttribute("index_local_blocks") ? root.attrInt("index_local_blocks") : 0;
        m_info.layerIndexed = root.hasAttribute("layer_indexed") ? root.attrInts("layer_indexed")
                                                                 : std::vector<int64_t>{};
        if (const std::string why = indexerProblem(m_info); !why.empty())
            fail(path + ": " + why);
        if (m_info.indexBlockSize > 0 && version < 5)
            fail(path + ": index_block_size needs format_version 5, the file says " +
                 std::to_string(version));
    }
    if (root.hasAttribute("layer_compress_rate")) {
        if (version < 6)
            fail(path + ": layer_compress_rate needs format_version 6, the file says " +
                 std::to_string(version));
        m_info.layerCompressRate = root.attrInts("layer_compress_rate");
        m_info.layerEntryIndexed = root.hasAttribute("layer_entry_indexed")
                                       ? root.attrInts("layer_entry_indexed")
                                       : std::vector<int64_t>{};
        m_info.entryTopK = root.hasAttribute("entry_topk") ? root.attrInt("entry_topk") : 0;
        m_info.entryIndexDim =
            root.hasAttribute("entry_index_dim") ? root.attrInt("entry_index_dim") : 0;
        if (const std::string why = compressedProblem(m_info); !why.empty())
            fail(path + ": " + why);
    }
    if (root.has("rope_inv_freq")) {
        const at::Tensor f = root.read("rope_inv_freq").to(at::kDouble);
        if (f.dim() != 2 || f.size(0) != m_info.nLayers || f.size(1) * 2 != m_info.headDim)
            fail(path + ": rope_inv_freq must be [n_layers, head_dim / 2] = [" +
                 std::to_string(m_info.nLayers) + ", " + std::to_string(m_info.headDim / 2) +
                 "], got " + std::to_string(f.dim()) + " dimensions of " +
                 std::to_string(f.numel()) + " values");
        const at::Tensor finite = at::isfinite(f);
        // A row is the layer's frequencies (finite, ≥ 0) or NaN throughout (none such).
        if (!finite.all(1).logical_or(at::isnan(f).all(1)).all().item<bool>() ||
            f.masked_select(finite).lt(0).any().item<bool>())
            fail(path + ": rope_inv_freq rows must be finite frequencies >= 0 or NaN throughout");
        m_info.ropeInvFreq = f;
    }
    if (version < 3)
        return;
    if (root.hasAttribute("v_head_dim")) {
        m_info.vHeadDim = root.attrInt("v_head_dim");
        if (m_info.vHeadDim < 1)
            fail(path + ": v_head_dim must be at least 1");
    }
    if (root.hasAttribute("layer_chunk_size")) {
        m_info.layerChunk = perLayer("layer_chunk_size");
        for (int64_t c : m_info.layerChunk)
            if (c < 0)
                fail(path + ": layer_chunk_size must hold chunks >= 0 (0: none)");
    }
    if (root.has("attention_sinks")) {
        if (root.shape("attention_sinks") != std::vector<int64_t>{m_info.nLayers, m_info.nHeads})
            fail(path + ": attention_sinks must be [n_layers, n_heads] = [" +
                 std::to_string(m_info.nLayers) + ", " + std::to_string(m_info.nHeads) + "]");
        m_info.sinks = root.read("attention_sinks", 2).to(at::kFloat);
        if (!at::isfinite(m_info.sinks).all().item<bool>())
            fail(path + ": attention_sinks must hold finite logits");
    }
}

int64_t CaptureReader::seqLen(int64_t i) const {
    return m_file.root().group("examples").group(name(i)).shape("token_ids").at(0);
}

int64_t CaptureReader::queryCount(int64_t i) const {
    return m_file.root().group("examples").group(name(i)).shape("q_positions").at(0);
}

void CaptureReader::checkExample(int64_t i) const {
    const h5::Group g = m_file.root().group("examples").group(name(i));
    const std::string where = m_path + ": example " + name(i) + ": ";
    const auto ids = g.shape("token_ids");
    const auto qp = g.shape("q_positions");
    if (ids.size() != 1 || qp.size() != 1 || ids[0] < 1 || qp[0] < 1)
        fail(where + "token_ids and q_positions must be non-empty 1-D datasets");
    const int64_t S = ids[0], T = qp[0];
    const std::vector<int64_t> qShape{m_info.nLayers, m_info.nHeads, T, m_info.headDim};
    const std::vector<int64_t> kShape{m_info.nLayers, m_info.nKvHeads, S, m_info.headDim};
    const std::vector<int64_t> vShape{m_info.nLayers, m_info.nKvHeads, S, m_info.valueDim()};
    if (g.shape("q") != qShape)
        fail(where + "q does not have the shape [L, Hq, T, d_h] of the file's attributes");
    if (g.shape("k") != kShape)
        fail(where + "k does not have the shape [L, Hkv, S, d_h] of the file's attributes");
    if (g.shape("v") != vShape)
        fail(where + "v does not have the shape [L, Hkv, S, d_v] of the file's attributes");
    const at::Tensor pos = g.read("q_positions", 1).to(at::kLong);
    if (pos.min().item<int64_t>() < 0 || pos.max().item<int64_t>() >= S)
        fail(where + "q_positions outside 0..S-1");
    if (T > 1 && !(pos.slice(0, 1) - pos.slice(0, 0, T - 1)).gt(0).all().item<bool>())
        fail(where + "q_positions must be strictly increasing");
    if (g.has("index_scores") &&
        (m_info.indexHeadDim == 0 || g.shape("index_scores") != m_info.indexScoresShape(T, S)))
        fail(where + (m_info.indexHeadDim == 0 ? "index_scores without the indexer's attributes"
                      : m_info.indexBlockSize > 0
                          ? "index_scores does not have the shape [L, index_n_heads, T, "
                            "⌈S / index_block_size⌉] of its q and k"
                          : "index_scores does not have the shape [L, T, S] of its q and k"));
    const int64_t C = m_info.entryOffset(m_info.nLayers, S);
    if (m_info.compressed() != g.has("entries"))
        fail(where + (m_info.compressed() ? "entries missing (the file has compressed layers)"
                                          : "entries without layer_compress_rate"));
    if (g.has("entries") && g.shape("entries") != std::vector<int64_t>{C, m_info.headDim})
        fail(where + "entries does not have the shape [" + std::to_string(C) +
             ", d_h]: each layer's ⌊S / layer_compress_rate⌋ entries");
    if (g.has("entry_scores") &&
        (!g.has("entries") || g.shape("entry_scores") != std::vector<int64_t>{T, C}))
        fail(where + "entry_scores does not have the shape [T, " + std::to_string(C) +
             "] of its queries and entries");
}

model::CaptureExample CaptureReader::read(int64_t i) const {
    checkExample(i);
    const h5::Group g = m_file.root().group("examples").group(name(i));
    model::CaptureExample e;
    e.tokenIds = g.read("token_ids", 1).to(at::kLong);
    if (g.has("tokens"))
        e.tokens = g.readStrings("tokens");
    e.qPositions = g.read("q_positions", 1).to(at::kLong);
    e.q = g.read("q", 4).to(at::kFloat);
    e.k = g.read("k", 4).to(at::kFloat);
    e.v = g.read("v", 4).to(at::kFloat);
    if (g.has("index_scores"))
        e.indexScores = checkedIndexScores(
            g.read("index_scores", m_info.indexBlockSize > 0 ? 4 : 3).to(at::kFloat), name(i));
    if (g.has("entries"))
        e.entries = checkedEntries(g.read("entries", 2).to(at::kFloat), name(i));
    if (g.has("entry_scores"))
        e.entryScores =
            checkedIndexScores(g.read("entry_scores", 2).to(at::kFloat), name(i), "entry_scores");
    return e;
}

at::Tensor CaptureReader::checkedEntries(const at::Tensor& t, const std::string& example) const {
    if (!at::isfinite(t).all().item<bool>())
        fail(m_path + ": example " + example + ": entries holds non-finite values");
    return t;
}

at::Tensor CaptureReader::checkedIndexScores(const at::Tensor& t, const std::string& example,
                                             const char* name) const {
    if (at::isinf(t).any().item<bool>())
        fail(m_path + ": example " + example + ": " + name +
             " holds infinite values (finite scores, NaN where none)");
    return t;
}

model::CaptureExample CaptureReader::readLayer(int64_t i, int64_t layer) const {
    if (layer < 0 || layer >= m_info.nLayers)
        fail(m_path + ": layer " + std::to_string(layer) + " outside 0.." +
             std::to_string(m_info.nLayers - 1));
    checkExample(i);
    const h5::Group g = m_file.root().group("examples").group(name(i));
    const int64_t S = g.shape("token_ids")[0];
    const int64_t T = g.shape("q_positions")[0];
    const int64_t D = m_info.headDim;
    model::CaptureExample e;
    e.tokenIds = g.read("token_ids", 1).to(at::kLong);
    e.qPositions = g.read("q_positions", 1).to(at::kLong);
    e.q = g.readSlab("q", {layer, 0, 0, 0}, {1, m_info.nHeads, T, D}).squeeze(0).to(at::kFloat);
    e.k = g.readSlab("k", {layer, 0, 0, 0}, {1, m_info.nKvHeads, S, D}).squeeze(0).to(at::kFloat);
    e.v = g.readSlab("v", {layer, 0, 0, 0}, {1, m_info.nKvHeads, S, m_info.valueDim()})
              .squeeze(0)
              .to(at::kFloat);
    if (g.has("index_scores")) { // [1, T, S] or [1, Hi, T, blocks]: indexScoresByPosition(0)
        std::vector<int64_t> count = m_info.indexScoresShape(T, S), start(count.size(), 0);
        count[0] = 1;
        start[0] = layer;
        e.indexScores =
            checkedIndexScores(g.readSlab("index_scores", start, count).to(at::kFloat), name(i));
    }
    if (g.has("entries")) { // the layer's own: [C_l, d_h] and [T, C_l]
        const int64_t at0 = m_info.entryOffset(layer, S), C = m_info.entryCount(layer, S);
        e.entries =
            C > 0 ? checkedEntries(g.readSlab("entries", {at0, 0}, {C, D}).to(at::kFloat), name(i))
                  : at::empty({0, D}, at::kFloat);
        if (g.has("entry_scores"))
            e.entryScores = C > 0 ? checkedIndexScores(
                                        g.readSlab("entry_scores", {0, at0}, {T, C}).to(at::kFloat),
                                        name(i), "entry_scores")
                                  : at::empty({T, 0}, at::kFloat);
    }
    return e;
}

} // namespace sparqlab::capture
