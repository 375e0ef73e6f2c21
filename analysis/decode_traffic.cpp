#include "decode_traffic.h"

#include "analysis/compressed_keys.h"
#include "attention/method_table.h"
#include "attention/select.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

/// MiniMax-M3's block-indexed layer at a step whose query sees `keys` keys (its own written
/// among them): each KV head reads the keys of the blocks its query heads' indexer group keeps
/// (docs/learned-sparse-and-hybrid.md §8). Where a KV head's query heads span several groups
/// it reads at most their union.
double blockIndexedReads(const model::ModelConfig& c, int64_t keys) {
    const int64_t H = c.nHeads, kv = c.nKvHeads, groups = c.indexer.heads;
    double reads = 0;
    for (int64_t h = 0; h < kv; ++h) {
        const int64_t first = h * (H / kv), last = (h + 1) * (H / kv) - 1;
        const int64_t spanned = last / (H / groups) - first / (H / groups) + 1;
        reads += static_cast<double>(att::keptBlockKeys(
            keys, c.indexer.blockSize, c.indexer.localBlocks, c.indexer.topK, spanned));
    }
    return reads * static_cast<double>(c.headDim + c.valueDim());
}

} // namespace

DecodeTraffic decodeTraffic(const model::ModelConfig& c, int64_t S,
                            const att::AttentionConfig& method, double bytesPerElement,
                            int64_t batch, double stateBytesPerElement) {
    if (S < 1)
        throw att::AttentionError("traffic: the length must be at least 1");
    if (batch < 1)
        throw att::AttentionError("traffic: the batch must be at least 1");
    DecodeTraffic t;
    t.length = S;
    t.batch = batch;
    t.bytesPerElement = bytesPerElement;
    t.stateBytesPerElement = stateBytesPerElement > 0 ? stateBytesPerElement : bytesPerElement;
    // One position of an attention layer's cache: MLA's latent (kv_lora + rope, every head's),
    // else every KV head's key and value.
    const double perPosition = static_cast<double>(c.cacheElementsPerPosition());
    // The method's reads of a step (METHODS.md §10); a layer whose k covers every key its query
    // sees reads them as dense attention does.
    const auto methodReads = [&](const att::TransferArgs& a) {
        return att::budgetCoversLength(method, a.S) ? att::transferElements(att::Method::Dense, a)
                                                    : att::transferElements(method.method, a);
    };
    // The method's share of dense attention's transfer, per head, at the positions a layer's
    // query attends; weighted below by each layer's cache traffic.
    const auto ratioAt = [&](int64_t positions) {
        const att::TransferArgs a =
            att::transferArgs(method, positions, c.headDim, -1, c.valueDim());
        const double dense = att::transferElements(att::Method::Dense, a);
        return dense > 0 ? methodReads(a) / dense : 1.0;
    };
    double methodCache = 0;
    const model::CompressedAttentionSpec& v4 = c.compressed;
    if (v4.active())
        if (const std::string why = att::positionFreeProblem(method.method); !why.empty())
            throw att::AttentionError("traffic: " + why);
    for (int64_t l = 0; l < c.nLayers && v4.active(); ++l) {
        // DeepSeek-V4: the window's keys, each its own value (one head), and a compressed
        // layer's entries: all of them (HCA), or the indexer's entries and the top k it picks
        // (CSA). (The compressors' own projections of the positions not yet pooled are left out.)
        // Another method chooses among every key the query sees, in the indexer's place, a key
        // and its value counted once (METHODS.md §10).
        ++t.attentionLayers;
        const int64_t window = c.layerWindow[static_cast<size_t>(l)];
        const int64_t attended = window > 0 ? std::min(S, window) : S;
        t.boundedLayers += attended < S ? 1 : 0;
        const int64_t rate = v4.rateOf(l);
        const int64_t entries = rate > 0 ? S / rate : 0;
        const int64_t indexed = v4.indexed(l) ? entries : 0;
        const int64_t keys = attended + (indexed > 0 ? std::min(v4.indexTopK, entries) : entries);
        t.indexerKeys += static_cast<double>(v4.indexDim * indexed);
        const double layer = compressedModelReads(keys, c.headDim, indexed, v4.indexDim);
        t.attentionCache += layer;
        if (method.method == att::Method::Dense) {
            methodCache += layer;
        } else {
            att::TransferArgs a = att::transferArgs(method, attended + entries, c.headDim);
            a.keyIsValue = true;
            methodCache += methodReads(a);
        }
    }
    for (int64_t l = 0; l < c.nLayers && !v4.active(); ++l) {
        if (c.isAttention(l)) {
            ++t.attentionLayers;
            // The positions the step's query attends: all S, or the last W of a sliding window,
            // or those of its chunk (Llama 4); the indexer scores every one.
            const int64_t window =
                static_cast<size_t>(l) < c.layerWindow.size() ? c.layerWindow[l] : 0;
            const int64_t chunk = c.chunkOf(l);
            int64_t attended = S;
            if (window > 0)
                attended = std::min(attended, window);
            if (chunk > 0)
                attended = std::min(attended, (S - 1) % chunk + 1);
            if (attended < S)
                ++t.boundedLayers;
            // What the cache holds for the positions attended (read, one written).
            const double cache = perPosition * (static_cast<double>(attended) + 1);
            // The model's own attention: on a DSA layer the indexer's key of every position,
            // read and one written (none on GLM-5's layers that take the previous selection),
            // and the index_topk positions it picks; on MiniMax-M3's block-indexed layers each
            // KV head the keys of the blocks kept for its query heads' group.
            double own = cache;
            if (c.indexer.on(l)) {
                const double keys = c.indexer.reuses(l) ? 0.0
                                                        : static_cast<double>(c.indexer.dim) *
                                                              (static_cast<double>(S) + 1);
                t.indexerKeys += keys;
                own = keys +
                      (c.indexer.blocks()
                           ? blockIndexedReads(c, attended + 1)
                           : perPosition *
                                 (static_cast<double>(std::min(attended, c.indexer.topK)) + 1));
            }
            t.attentionCache += own;
            // Another method chooses in the indexer's place, among every position attended.
            methodCache += method.method == att::Method::Dense ? own : cache * ratioAt(attended);
        }
        if (c.isLinear(l)) { // (not Nemotron-H's MLP blocks; Falcon-H1's beside the attention)
            ++t.linearLayers;
            t.linearState += 2.0 * static_cast<double>(c.linear.stateElements());
        }
    }
    // The caches per sequence.
    const double B = static_cast<double>(batch);
    t.attentionCache *= B;
    t.indexerKeys *= B;
    t.linearState *= B;
    // The weights, once: the routed experts the batch's tokens reach (at most all of them; each
    // token its top k, different tokens taken as reaching different experts), and of the
    // embedding only the batch's rows (a tied one is the head as well, read whole).
    const double experts = static_cast<double>(c.expertParameterCount());
    const double reached = c.moe.experts > 0 ? std::min(1.0, B * static_cast<double>(c.moe.topK) /
                                                                 static_cast<double>(c.moe.experts))
                                             : 1.0;
    const double embedding = static_cast<double>(c.vocabSize) * static_cast<double>(c.hiddenSize);
    t.weights = static_cast<double>(c.parameterCount()) - experts * (1.0 - reached) -
                (c.tieEmbeddings ? 0.0 : embedding - B * static_cast<double>(c.hiddenSize));
    // A hash layer's table of experts per token id (DeepSeek-V4): only the batch's rows.
    for (int64_t l = 0; l < c.nLayers; ++l)
        if (c.moe.hashed(l))
            t.weights -= (static_cast<double>(c.vocabSize) - B) * static_cast<double>(c.moe.topK);
    // A shared block (Zamba2) is read again at each hybrid layer that runs it after its first.
    if (c.shared.blocks > 0)
        t.weights += static_cast<double>(static_cast<int64_t>(c.attentionLayers().size()) -
                                         c.shared.blocks) *
                     static_cast<double>(c.sharedBlockParameterCount());
    t.methodRatio = t.attentionCache > 0 ? methodCache * B / t.attentionCache : 1.0;
    return t;
}

std::string decodeTrafficJson(const DecodeTraffic& t, const model::ModelConfig& c,
                              const att::AttentionConfig& method) {
    const double b = t.bytesPerElement;
    nlohmann::json j{{"format", "sparqlab.traffic"},
                     {"format_version", 1},
                     {"architecture", c.architectureName},
                     {"length", t.length},
                     {"batch", t.batch},
                     {"bytes_per_element", b},
                     {"state_bytes_per_element", t.stateBytesPerElement},
                     {"attention_layers", t.attentionLayers},
                     {"bounded_layers", t.boundedLayers},
                     {"linear_layers", t.linearLayers},
                     {"attention_cache_bytes", t.attentionBytes()},
                     {"indexer_key_bytes", t.indexerKeys * b},
                     {"linear_state_bytes", t.stateBytes()},
                     {"weight_bytes", t.weightBytes()},
                     {"step_bytes", t.totalBytes()},
                     {"attention_share_of_cache", t.attentionShareOfCache()},
                     {"attention_share_of_step", t.attentionShareOfStep()},
                     {"method", att::methodInfo(method.method).name},
                     {"method_transfer_ratio", t.methodRatio},
                     {"method_saves_of_cache", t.savedOfCache()},
                     {"method_saves_of_step", t.savedOfStep()}};
    return j.dump(1);
}

} // namespace sparqlab::analysis
