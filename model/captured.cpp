#include "captured.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace sparqlab::model {

int64_t CaptureInfo::formatVersion() const {
    const bool chunks =
        std::any_of(layerChunk.begin(), layerChunk.end(), [](int64_t c) { return c > 0; });
    // Version 4: a hybrid's captured layers are some of the model's; a DSA model's steps attend
    // to the indexer's keys (docs/learned-sparse-and-hybrid.md §5).
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
    return c;
}

at::Tensor CaptureExample::indexScoresByPosition(int64_t layer) const {
    if (!indexScores.defined())
        return {};
    const int64_t S = tokenIds.numel();
    at::Tensor out = at::full({1, S, S}, std::nan(""), at::kFloat);
    out[0].index_copy_(0, qPositions.to(at::kLong), indexScores[layer].to(at::kFloat));
    return out;
}

} // namespace sparqlab::model
