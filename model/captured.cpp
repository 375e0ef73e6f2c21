#include "captured.h"

#include "attention/method_table.h"
#include "attention/select.h"
#include "model/model_config.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace sparqlab::model {

int64_t CaptureInfo::formatVersion() const {
    const bool chunks =
        std::any_of(layerChunk.begin(), layerChunk.end(), [](int64_t c) { return c > 0; });
    // Version 4: a hybrid's captured layers are some of the model's; a DSA model's steps attend
    // to the indexer's keys (docs/learned-sparse-and-hybrid.md §5).
    // Version 5: a block indexer's scores are per indexer head and block (a version 4 reader
    // would take them for DSA's per-key scores).
    // Version 6: compressed entries beside the keys (a version 5 reader would take the sliding
    // window for the model's whole attention).
    if (compressed())
        return 6;
    if (indexBlockSize > 0)
        return 5;
    if (!layerKinds.empty() || indexHeadDim > 0)
        return 4;
    if (sinks.defined() || chunks || (vHeadDim > 0 && vHeadDim != headDim))
        return 3;
    // Version 2: a layer's own scale, a window or a soft-cap; without them the file is what
    // version 1 describes (CONTRACTS.md §3: a plain Llama's capture).
    const bool windows = std::any_of(layerSlidingWindow.begin(), layerSlidingWindow.end(),
                                     [](int64_t w) { return w > 0; });
    return !uniformScale() || windows || attnSoftcap > 0 ? 2 : 1;
}

bool CaptureInfo::uniformScale() const {
    return std::all_of(layerAttnScale.begin(), layerAttnScale.end(),
                       [&](double s) { return s == attnScale; });
}

attention::TransferArgs CaptureInfo::transferArgs(const attention::AttentionConfig& config,
                                                  int64_t S, double count) const {
    attention::TransferArgs a = attention::transferArgs(config, S, headDim, count, valueDim());
    a.keyIsValue = compressed(); // DeepSeek-V4: one tensor is the key and the value
    return a;
}

attention::AttentionConfig CaptureInfo::layerConfig(int64_t layer,
                                                    const attention::AttentionConfig& base) const {
    attention::AttentionConfig c = base;
    const size_t l = static_cast<size_t>(layer);
    const double scale = l < layerAttnScale.size() ? layerAttnScale[l] : attnScale;
    const double defaultScale = 1.0 / std::sqrt(static_cast<double>(headDim));
    // The default scale stays implicit: 1/sqrt(D) divides exactly as SPARQ.md writes it.
    if (std::abs(scale - defaultScale) > 1e-7 * defaultScale)
        c.scale = scale;
    c.softcap = attnSoftcap;
    c.slidingWindow = l < layerSlidingWindow.size() ? layerSlidingWindow[l] : 0;
    c.chunk = l < layerChunk.size() ? layerChunk[l] : 0;
    if (sinks.defined() && layer >= 0 && layer < sinks.size(0))
        c.sinks = sinks[layer].to(at::kFloat);
    if (ropeInvFreq.defined() && layer >= 0 && layer < ropeInvFreq.size(0) &&
        at::isfinite(ropeInvFreq[layer]).all().item<bool>())
        c.ropeInvFreq = ropeInvFreq[layer];
    c.layer = layer;
    // The indexer method reads the model's indexer keys: their dimension, unless given.
    if (indexHeadDim > 0 && !base.given(attention::Param::IndexDim))
        c.values[attention::Param::IndexDim] = static_cast<double>(indexHeadDim);
    c.indexBlock = indexBlockSize;
    c.indexLocalBlocks = indexLocalBlocks;
    // A layer without an indexer (MiniMax-M3's full attention) attends to every key, as in the
    // model: the indexer method is its dense attention there.
    if (c.method == attention::Method::Indexer && indexHeadDim > 0 && !indexed(layer))
        c.method = attention::Method::Dense;
    return c;
}

namespace {

bool linearLabel(const std::string& label) {
    LayerKind kind{};
    return layerKindOfLabel(label, kind) && isLinearKind(kind);
}

} // namespace

std::string CaptureInfo::linearKind() const {
    for (const std::string& k : layerKinds)
        if (linearLabel(k)) // (Falcon-H1's layers: the state is Mamba-2's)
            return k == layerKindLabel(LayerKind::AttentionMamba2)
                       ? layerKindLabel(LayerKind::Mamba2)
                       : k;
    return {};
}

std::string CaptureInfo::uncapturedKinds() const {
    std::map<std::string, int64_t> count;
    for (size_t l = 0; l < layerKinds.size(); ++l)
        if (std::find(modelLayers.begin(), modelLayers.end(), static_cast<int64_t>(l)) ==
            modelLayers.end())
            ++count[layerKinds[l]];
    std::string out;
    for (const auto& [kind, n] : count)
        out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
    return out;
}

int64_t CaptureInfo::linearLayerCount() const {
    return std::count_if(layerKinds.begin(), layerKinds.end(), linearLabel);
}

bool CaptureInfo::takesLocal(attention::Method method) const {
    return attention::takes(method, attention::Param::Local) &&
           !(method == attention::Method::Indexer && indexBlockSize > 0);
}

std::vector<int64_t> CaptureInfo::indexScoresShape(int64_t T, int64_t S) const {
    if (indexBlockSize > 0)
        return {nLayers, indexHeads, T, attention::blocksForKeys(S, indexBlockSize)};
    return {nLayers, T, S};
}

at::Tensor CaptureExample::indexScoresByPosition(int64_t layer) const {
    if (!indexScores.defined())
        return {};
    return model::indexScoresByPosition(indexScores[layer], qPositions, tokenIds.numel());
}

at::Tensor indexScoresByPosition(const at::Tensor& layerScores, const at::Tensor& positions,
                                 int64_t S) {
    const bool blocks = layerScores.dim() == 3; // [Hi, T, blocks]
    std::vector<int64_t> shape{1, S, S};
    if (blocks)
        shape = {1, layerScores.size(0), S, layerScores.size(2)};
    at::Tensor out = at::full(shape, std::nan(""), at::kFloat);
    out[0].index_copy_(blocks ? 1 : 0, positions.to(at::kLong), layerScores.to(at::kFloat));
    return out;
}

at::Tensor firstPositions(const at::Tensor& byPosition, int64_t n, int64_t blockSize) {
    if (byPosition.dim() == 4) // [1, Hi, S, blocks]
        return byPosition.narrow(2, 0, n).narrow(3, 0, attention::blocksForKeys(n, blockSize));
    return byPosition.narrow(1, 0, n).narrow(2, 0, n);
}

} // namespace sparqlab::model
