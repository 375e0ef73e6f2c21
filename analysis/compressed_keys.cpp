#include "compressed_keys.h"

#include "attention/method_table.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

CompressedKeys compressedKeys(const model::CaptureInfo& info, const model::CaptureExample& ex,
                              int64_t layer, int64_t n) {
    if (!info.compressed() || !ex.entries.defined())
        throw att::AttentionError("the capture holds no compressed entries (format version 6, "
                                  "a DeepSeek-V4 model's)");
    const int64_t T = ex.qPositions.numel(), S = ex.k.size(1), C = ex.entries.size(0);
    n = std::clamp<int64_t>(n, 1, T);
    const int64_t rate = info.compressRate(layer);
    const size_t l = static_cast<size_t>(layer);
    const int64_t window = l < info.layerSlidingWindow.size() ? info.layerSlidingWindow[l] : 0;
    CompressedKeys out;
    out.entries = C;
    out.q = ex.q.narrow(1, T - n, n).unsqueeze(0);
    out.keys = at::cat({ex.entries, ex.k[0]}, 0).view({1, 1, C + S, ex.k.size(2)});
    const at::Tensor qPos = ex.qPositions.narrow(0, T - n, n).unsqueeze(1); // [n, 1]
    // Entry w pools positions up to (w + 1)·rate − 1: the query at p sees w < ⌊(p + 1) / rate⌋.
    const at::Tensor seen =
        rate > 0 ? at::arange(C, at::kLong).unsqueeze(0).lt((qPos + 1).div(rate, "floor"))
                 : at::zeros({n, C}, at::kBool);
    const at::Tensor keyPos = at::arange(S, at::kLong).unsqueeze(0);
    at::Tensor inWindow = keyPos.le(qPos);
    if (window > 0)
        inWindow = inWindow.logical_and(qPos.sub(keyPos).lt(window));
    out.visible = at::cat({seen, inWindow}, 1).unsqueeze(0);
    at::Tensor chosen = seen;
    if (info.entryIndexed(layer) && C > 0 && ex.entryScores.defined()) {
        // The indexer's top entry_topk of the entries the query sees (NaN: not seen).
        const at::Tensor scores = ex.entryScores.narrow(0, T - n, n);
        const at::Tensor ranked =
            scores.masked_fill(at::isnan(scores), -std::numeric_limits<float>::infinity());
        const int64_t top = std::min(info.entryTopK, C);
        chosen = at::zeros({n, C}, at::kBool)
                     .scatter_(1, std::get<1>(ranked.topk(top, 1)), true)
                     .logical_and(seen);
    }
    out.model = at::cat({chosen, inWindow}, 1).unsqueeze(0);
    return out;
}

att::AttentionInputs CompressedKeys::steps(int64_t from, int64_t n) const {
    att::AttentionInputs in;
    in.q = q.narrow(2, from, n);
    in.k = in.v = keys;
    in.valid = visible.narrow(1, from, n);
    return in;
}

int64_t CompressedKeys::chunk(int64_t elements) const {
    return std::max<int64_t>(1, elements / std::max<int64_t>(1, q.size(1) * keys.size(2)));
}

at::Tensor keysByPosition(const at::Tensor& byKey, int64_t C, int64_t rate) {
    const int64_t S = byKey.size(-1) - C;
    const at::Tensor own = byKey.narrow(-1, C, S);
    if (C == 0 || rate <= 0)
        return own;
    const at::Tensor entry = at::arange(S, at::kLong).div(rate, "floor"); // pooling each
    const at::Tensor pooled = byKey.index_select(byKey.dim() - 1, entry.clamp_max(C - 1));
    return at::maximum(own, pooled.masked_fill(entry.ge(C), 0));
}

att::AttentionConfig compressedConfig(const model::CaptureInfo& info, int64_t layer,
                                      const att::AttentionConfig& config) {
    if (const std::string why = att::positionFreeProblem(config.method); !why.empty())
        throw att::AttentionError(why);
    att::AttentionConfig c = info.layerConfig(layer, config);
    c.slidingWindow = 0; // the window is in the visible keys
    c.chunk = 0;
    c.ropeInvFreq = at::Tensor(); // entries are not rotated by a position's angle
    return c;
}

double compressedModelReads(int64_t modelKeys, int64_t d, int64_t indexedEntries,
                            int64_t indexDim) {
    return static_cast<double>(d) * static_cast<double>(modelKeys + 1) +
           static_cast<double>(indexDim) * static_cast<double>(indexedEntries);
}

} // namespace sparqlab::analysis
