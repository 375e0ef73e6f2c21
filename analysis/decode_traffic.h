#pragma once
/// \file decode_traffic.h
/// What one decode step reads at a given length, by layer kind (docs/learned-sparse-and-hybrid.md
/// §3, `sparqlab-cli traffic`): the attention layers' KV cache (MLA: its latent; DSA: plus one
/// indexer key per position; DeepSeek-V4: its window and its compressed entries, §17), the linear
/// layers' recurrent and convolution state (read and written whole at every step), and the weights
/// a token reaches (an MoE's routed experts: the top k); and what an attention method saves of the
/// whole step.

#include "attention/attention.h"
#include "model/model_config.h"

#include <cstdint>
#include <string>

namespace sparqlab::analysis {

/// Elements moved by one decode step of `batch` sequences at length S: the caches per sequence,
/// the weights once. bytesPerElement converts the cache and the weights, stateBytesPerElement
/// the linear layers' state (SparQ Lab keeps it in float32; servers keep it in float32 or in the
/// model's dtype); shares and savings are of bytes.
struct DecodeTraffic {
    int64_t length = 0;
    int64_t batch = 1;
    int64_t attentionLayers = 0, linearLayers = 0;
    /// Of the attention layers, those whose query attends fewer than S positions: a sliding
    /// window or a chunk (their reads are bounded; the method's ratio is at their length).
    int64_t boundedLayers = 0;
    double attentionCache = 0; ///< the attention layers' KV reads (+ indexer keys) and writes
    double indexerKeys = 0;    ///< of which the indexers' keys (DSA's, DeepSeek-V4's entries)
    double linearState = 0;    ///< the linear layers' state, read and written
    double weights = 0;        ///< the parameters a token reaches
    /// The method's attention transfer / dense attention's, each layer's at the positions it
    /// attends (as dense's where k covers them), weighted by the layers' cache traffic.
    double methodRatio = 1;
    double bytesPerElement = 2;      ///< BF16 unless said otherwise
    double stateBytesPerElement = 2; ///< the linear layers' state's (bytesPerElement unless said)
    double attentionBytes() const { return attentionCache * bytesPerElement; }
    double stateBytes() const { return linearState * stateBytesPerElement; }
    double weightBytes() const { return weights * bytesPerElement; }
    double cacheBytes() const { return attentionBytes() + stateBytes(); }
    double totalBytes() const { return cacheBytes() + weightBytes(); }
    /// The share of the step's cache traffic (and of the whole step) in the attention layers.
    double attentionShareOfCache() const {
        return cacheBytes() > 0 ? attentionBytes() / cacheBytes() : 0;
    }
    double attentionShareOfStep() const {
        return totalBytes() > 0 ? attentionBytes() / totalBytes() : 0;
    }
    /// What the method saves of the whole step (and of the cache traffic).
    double savedOfStep() const { return attentionShareOfStep() * (1 - methodRatio); }
    double savedOfCache() const { return attentionShareOfCache() * (1 - methodRatio); }
};

/// The traffic of `c` at length S and `batch` sequences with `method` on its attention layers
/// (its transfer formula at the model's head dimension, METHODS.md §10); the state's elements of
/// `stateBytesPerElement` bytes (0: bytesPerElement). Throws AttentionError for S < 1 or
/// batch < 1, and for a method that needs the keys to be positions on DeepSeek-V4 (another one
/// chooses among the window's keys and every entry, in the indexer's place, each key its value:
/// METHODS.md §10; its ratio is then to the model's own reads, the indexer's included).
DecodeTraffic decodeTraffic(const model::ModelConfig& c, int64_t S,
                            const attention::AttentionConfig& method, double bytesPerElement = 2,
                            int64_t batch = 1, double stateBytesPerElement = 0);

/// As JSON text (format "sparqlab.traffic", version 1), bytes and shares.
std::string decodeTrafficJson(const DecodeTraffic& t, const model::ModelConfig& c,
                              const attention::AttentionConfig& method);

} // namespace sparqlab::analysis
