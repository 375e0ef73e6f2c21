#include "decode_traffic.h"

#include "attention/method_table.h"

#include <nlohmann/json.hpp>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

DecodeTraffic decodeTraffic(const capture::ModelConfig& c, int64_t S,
                            const att::AttentionConfig& method, double bytesPerElement) {
    if (S < 1)
        throw att::AttentionError("traffic: the length must be at least 1");
    DecodeTraffic t;
    t.length = S;
    t.bytesPerElement = bytesPerElement;
    const double s = static_cast<double>(S);
    // One position of an attention layer's cache: MLA's latent (kv_lora + rope, every head's),
    // else every KV head's key and value.
    const double perPosition =
        c.mla.kvLoraRank > 0
            ? static_cast<double>(c.mla.kvLoraRank + c.mla.ropeDim)
            : static_cast<double>(c.nKvHeads) * static_cast<double>(c.headDim + c.valueDim());
    for (int64_t l = 0; l < c.nLayers; ++l) {
        if (c.isAttention(l)) {
            ++t.attentionLayers;
            t.attentionCache += perPosition * (s + 1); // S read, one written
            if (c.indexer.active()) {
                const double keys = static_cast<double>(c.indexer.dim) * (s + 1);
                t.indexerKeys += keys;
                t.attentionCache += keys;
            }
        } else {
            ++t.linearLayers;
            t.linearState += 2.0 * static_cast<double>(c.linear.stateElements());
        }
    }
    // The weights a token reaches: all but the routed experts it is not routed to.
    const double experts = static_cast<double>(c.expertParameterCount());
    const double active = c.moe.experts > 0
                              ? static_cast<double>(c.moe.topK) / static_cast<double>(c.moe.experts)
                              : 1.0;
    t.weights = static_cast<double>(c.parameterCount()) - experts * (1.0 - active);
    // The method's share of dense attention's transfer, per head at this length.
    const att::TransferArgs a = att::transferArgs(method, S, c.headDim, -1, c.valueDim());
    const double dense = att::transferElements(att::Method::Dense, a);
    t.methodRatio = dense > 0 ? att::transferElements(method.method, a) / dense : 1.0;
    return t;
}

std::string decodeTrafficJson(const DecodeTraffic& t, const capture::ModelConfig& c,
                              const att::AttentionConfig& method) {
    const double b = t.bytesPerElement;
    nlohmann::json j{{"format", "sparqlab.traffic"},
                     {"format_version", 1},
                     {"architecture", c.architectureName},
                     {"length", t.length},
                     {"bytes_per_element", b},
                     {"attention_layers", t.attentionLayers},
                     {"linear_layers", t.linearLayers},
                     {"attention_cache_bytes", t.attentionCache * b},
                     {"indexer_key_bytes", t.indexerKeys * b},
                     {"linear_state_bytes", t.linearState * b},
                     {"weight_bytes", t.weights * b},
                     {"step_bytes", t.total() * b},
                     {"attention_share_of_cache", t.attentionShareOfCache()},
                     {"attention_share_of_step", t.attentionShareOfStep()},
                     {"method", att::methodInfo(method.method).name},
                     {"method_transfer_ratio", t.methodRatio},
                     {"method_saves_of_cache", t.savedOfCache()},
                     {"method_saves_of_step", t.savedOfStep()}};
    return j.dump(1);
}

} // namespace sparqlab::analysis
