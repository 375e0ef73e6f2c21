#include "select.h"

#include "method_kit.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <limits>

namespace sparqlab::attention {

using detail::kInf;

namespace {
at::Tensor stableSortIndices(const at::Tensor& x) {
    return std::get<1>(at::sort(x, /*stable=*/true, /*dim=*/-1, /*descending=*/true));
}
} // namespace

at::Tensor rankOrder(const at::Tensor& score, const at::Tensor& category) {
    // NaN ranks as −∞ (§2.3). Two stable sorts: by score, then by category.
    const at::Tensor s =
        at::where(at::isnan(score), at::scalar_tensor(-kInf, score.options()), score);
    at::Tensor order = stableSortIndices(s);
    if (!category.defined())
        return order;
    const at::Tensor byCategory = stableSortIndices(category.gather(-1, order));
    return order.gather(-1, byCategory);
}

namespace {

/// The selection mask row by row on the CPU: the forced positions, then the m best other
/// candidates by (score descending, index ascending) with a partial sort of the candidates
/// only — O(S) a row, where sorting whole rows costs O(S log S) twice.
/// The margins of SPARQ.md §2.3 of a selection mask.
Selection withMargins(const at::Tensor& score, const at::Tensor& candB, const at::Tensor& forcedB,
                      const at::Tensor& mask);

/// Element offsets of each row of `t` (a view whose last axis is contiguous, any leading
/// strides, broadcast ones included).
std::vector<int64_t> rowOffsets(const at::Tensor& t) {
    const int64_t dims = t.dim() - 1;
    int64_t rows = 1;
    for (int64_t d = 0; d < dims; ++d)
        rows *= t.size(d);
    std::vector<int64_t> off(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        int64_t rest = r, o = 0;
        for (int64_t d = dims - 1; d >= 0; --d) {
            o += (rest % t.size(d)) * t.stride(d);
            rest /= t.size(d);
        }
        off[static_cast<size_t>(r)] = o;
    }
    return off;
}

/// A view with a contiguous last axis (copied only when it has none).
at::Tensor lastContiguous(const at::Tensor& t) {
    return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}

/// The selection mask row by row on the CPU: the forced candidates, then the m best other
/// candidates by (score descending, index ascending) with a partial sort of the candidates
/// only — O(S) a row, where sorting whole rows costs O(S log S) twice. cand and forced may be
/// broadcast views of score's shape; n holds one count per row.
template <typename T>
at::Tensor selectRows(const at::Tensor& score, const at::Tensor& candB, const at::Tensor& forcedB,
                      const at::Tensor& n) {
    const int64_t S = score.size(-1), rows = score.numel() / std::max<int64_t>(1, S);
    const at::Tensor sc = score.contiguous();
    const at::Tensor cc = lastContiguous(candB), fc = lastContiguous(forcedB);
    const std::vector<int64_t> cOff = rowOffsets(cc), fOff = rowOffsets(fc);
    const at::Tensor nc = n.contiguous();
    at::Tensor mask = at::zeros(score.sizes(), score.options().dtype(at::kBool));
    const T* sp = sc.data_ptr<T>();
    const bool* cp = cc.data_ptr<bool>();
    const bool* fp = fc.data_ptr<bool>();
    const int64_t* np = nc.data_ptr<int64_t>();
    bool* mp = mask.data_ptr<bool>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        std::vector<int32_t> other;
        other.reserve(static_cast<size_t>(S));
        for (int64_t r = begin; r < end; ++r) {
            const T* s = sp + r * S;
            const bool* c = cp + cOff[static_cast<size_t>(r)];
            const bool* f = fp + fOff[static_cast<size_t>(r)];
            bool* m = mp + r * S;
            other.clear();
            int64_t forcedCount = 0;
            for (int64_t j = 0; j < S; ++j) {
                if (!c[j])
                    continue;
                if (f[j]) {
                    m[j] = true;
                    ++forcedCount;
                } else {
                    other.push_back(static_cast<int32_t>(j));
                }
            }
            const int64_t want = std::max<int64_t>(0, np[r] - forcedCount);
            if (want == 0)
                continue;
            // NaN ranks as −∞ (§2.3); ties → the lower index.
            auto key = [s](int32_t j) {
                const T x = s[j];
                return std::isnan(x) ? -std::numeric_limits<T>::infinity() : x;
            };
            auto better = [&key](int32_t a, int32_t b) {
                const T ka = key(a), kb = key(b);
                return ka > kb || (ka == kb && a < b);
            };
            if (static_cast<int64_t>(other.size()) > want)
                std::nth_element(other.begin(), other.begin() + want - 1, other.end(), better);
            const size_t take = std::min(other.size(), static_cast<size_t>(want));
            for (size_t i = 0; i < take; ++i)
                m[other[i]] = true;
        }
    });
    return mask;
}

} // namespace

Selection select(const at::Tensor& score, const at::Tensor& cand, const at::Tensor& forced,
                 const at::Tensor& n, bool margins) {
    const int64_t S = score.size(-1);
    const at::Tensor candB = cand.expand_as(score);
    // n broadcasts to the leading shape of score (a single count applies to every row).
    const std::vector<int64_t> rows(score.sizes().begin(), score.sizes().end() - 1);
    const at::Tensor nB = (n.numel() == 1 ? n.reshape({}) : n)
                              .to(score.device(), at::kLong)
                              .expand(rows)
                              .unsqueeze(-1);
    if (score.device().is_cpu() && S > 0 && S < (int64_t{1} << 31) &&
        cand.scalar_type() == at::kBool && forced.scalar_type() == at::kBool &&
        (score.scalar_type() == at::kFloat || score.scalar_type() == at::kDouble)) {
        const at::Tensor forcedView = forced.expand_as(score);
        const at::Tensor counts = nB.squeeze(-1).contiguous();
        const at::Tensor mask = score.scalar_type() == at::kFloat
                                    ? selectRows<float>(score, candB, forcedView, counts)
                                    : selectRows<double>(score, candB, forcedView, counts);
        if (!margins)
            return {mask, {}, {}};
        return withMargins(score, candB, forcedView.logical_and(candB), mask);
    }
    const at::Tensor forcedB = forced.expand_as(score).logical_and(candB);
    const at::Tensor s =
        at::where(at::isnan(score), at::scalar_tensor(-kInf, score.options()), score);
    // The same set as ranking by (category, score, −index) and taking the first n, without a
    // sort of the whole row: every forced position, then the m = n − |forced| best other
    // candidates, found from the m-th largest score v: all above v, and of those equal to v
    // the lowest indices (a partial top-m and a cumulative sum).
    const at::Tensor other = candB.logical_and(forcedB.logical_not());
    const at::Tensor m = (nB - forcedB.sum(-1, /*keepdim=*/true)).clamp_min(0);
    const int64_t mMax = std::min<int64_t>(S, m.numel() > 0 ? m.max().item<int64_t>() : 0);
    at::Tensor mask = forcedB.clone();
    if (mMax > 0) {
        const at::Tensor key = at::where(other, s, at::scalar_tensor(-kInf, s.options()));
        const at::Tensor top = std::get<0>(at::topk(key, mMax, -1, /*largest=*/true,
                                                    /*sorted=*/true));
        const at::Tensor v = top.gather(-1, (m - 1).clamp(0, mMax - 1));
        const at::Tensor above = other.logical_and(key.gt(v));
        const at::Tensor atV = other.logical_and(key.eq(v));
        const at::Tensor need = m - above.sum(-1, /*keepdim=*/true);
        const at::Tensor take = atV.logical_and(atV.to(at::kLong).cumsum(-1).le(need));
        mask = mask.logical_or(above.logical_or(take).logical_and(m.gt(0)));
    }
    if (!margins)
        return {mask, {}, {}};
    return withMargins(score, candB, forcedB, mask);
}

namespace {
Selection withMargins(const at::Tensor& score, const at::Tensor& candB, const at::Tensor& forcedB,
                      const at::Tensor& mask) {
    const at::Tensor s =
        at::where(at::isnan(score), at::scalar_tensor(-kInf, score.options()), score);
    const at::Tensor ranked = mask.logical_and(forcedB.logical_not());
    const at::Tensor unselected = candB.logical_and(mask.logical_not());
    const at::Tensor lo = at::where(ranked, s, at::scalar_tensor(kInf, s.options())).amin(-1);
    const at::Tensor hi = at::where(unselected, s, at::scalar_tensor(-kInf, s.options())).amax(-1);
    const at::Tensor hasBoth = ranked.any(-1).logical_and(unselected.any(-1));
    const at::Tensor inf = at::scalar_tensor(kInf, lo.options());
    const at::Tensor margin = at::where(hasBoth, lo - hi, inf);
    const at::Tensor scaleAbs = at::maximum(lo.abs(), hi.abs());
    const at::Tensor usable =
        hasBoth.logical_and(scaleAbs.gt(0)).logical_and(at::isfinite(scaleAbs));
    const at::Tensor safeScale = at::where(scaleAbs.gt(0), scaleAbs, at::ones_like(scaleAbs));
    const at::Tensor rel =
        at::where(margin.eq(0), at::zeros_like(margin), at::where(usable, margin / safeScale, inf));
    return {mask, margin, rel};
}
} // namespace

at::Tensor topnIndices(const at::Tensor& x, int64_t n) {
    const at::Tensor order = rankOrder(x).narrow(-1, 0, n);
    return std::get<0>(at::sort(order, /*dim=*/-1));
}

at::Tensor maskToIndices(const at::Tensor& mask, int64_t width) {
    const int64_t S = mask.size(-1);
    const at::Tensor pos = at::arange(S, mask.options().dtype(at::kLong)).expand(mask.sizes());
    const at::Tensor key = at::where(mask, pos, at::scalar_tensor(S + 1, pos.options()));
    const at::Tensor sorted = std::get<0>(at::sort(key, /*dim=*/-1)).narrow(-1, 0, width);
    return at::where(sorted.gt(S), at::scalar_tensor(-1, sorted.options()), sorted);
}

at::Tensor causalIndex(const at::Tensor& valid) {
    if (valid.device().is_cpu() && valid.scalar_type() == at::kBool && valid.dim() >= 1) {
        // One backward pass a row (a cumulative sum of int64 is slow on the CPU).
        const at::Tensor vc = valid.contiguous();
        const int64_t S = vc.size(-1), rows = S > 0 ? vc.numel() / S : 0;
        at::Tensor out = at::empty(vc.sizes(), vc.options().dtype(at::kLong));
        const bool* vp = vc.data_ptr<bool>();
        int64_t* op = out.data_ptr<int64_t>();
        at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                int64_t after = 0;
                for (int64_t j = S - 1; j >= 0; --j) {
                    const bool v = vp[r * S + j];
                    op[r * S + j] = v ? after : -1;
                    after += v;
                }
            }
        });
        return out;
    }
    const at::Tensor v = valid.to(at::kLong);
    const at::Tensor after = v.flip({-1}).cumsum(-1).flip({-1}) - v;
    return at::where(valid, after, at::scalar_tensor(-1, after.options()));
}

at::Tensor forwardIndex(const at::Tensor& valid) {
    const at::Tensor v = valid.to(at::kLong);
    const at::Tensor before = v.cumsum(-1) - v;
    return at::where(valid, before, at::scalar_tensor(-1, before.options()));
}

int64_t blocksForKeys(int64_t k, int64_t blockSize) {
    const int64_t bs = std::max<int64_t>(1, blockSize);
    return std::max<int64_t>(1, k / bs + (k % bs != 0 ? 1 : 0));
}

int64_t keptBlockKeys(int64_t keys, int64_t blockSize, int64_t localBlocks, int64_t topBlocks,
                      int64_t selections) {
    const int64_t bs = std::max<int64_t>(1, blockSize), blocks = blocksForKeys(keys, bs);
    const int64_t top = std::max<int64_t>(1, topBlocks);
    const int64_t local = std::min(std::max<int64_t>(0, localBlocks), top);
    const int64_t kept = std::min(blocks, local + std::max<int64_t>(1, selections) * (top - local));
    if (kept >= blocks)
        return keys;
    // The own block's keys where it is forced, else the whole blocks' the most.
    return local > 0 ? keys - (blocks - 1) * bs + (kept - 1) * bs : kept * bs;
}

Selection keepBlocks(const at::Tensor& score, const at::Tensor& ownBlock, int64_t localBlocks,
                     int64_t topBlocks, bool margins) {
    const int64_t blocks = score.size(-1), top = std::max<int64_t>(1, topBlocks);
    // A block the query sees has a score (NaN or −inf: it does not).
    const at::Tensor s = at::nan_to_num(score, -kInf, kInf, -kInf);
    const at::Tensor cand = s.gt(-kInf);
    const at::Tensor block = at::arange(blocks, score.options().dtype(at::kLong));
    const at::Tensor own = ownBlock.to(at::kLong).unsqueeze(-1);
    const int64_t local = std::min(std::max<int64_t>(0, localBlocks), top);
    const at::Tensor forced = block.le(own).logical_and(block.gt(own - local)).logical_and(cand);
    // The forced blocks score +inf, then a top-k of the row as transformers takes it (no sync
    // with a GPU: the model calls this at every decode step); a −inf pick is no block.
    const auto [best, idx] = s.masked_fill(forced, kInf).topk(std::min(top, blocks), -1);
    std::vector<int64_t> wide = score.sizes().vec();
    wide.back() = blocks + 1;
    const at::Tensor mask = at::zeros(wide, score.options().dtype(at::kBool))
                                .scatter_(-1, idx.masked_fill(best.eq(-kInf), blocks), true)
                                .narrow(-1, 0, blocks);
    if (!margins)
        return {mask, {}, {}};
    return withMargins(s, cand, forced, mask);
}

} // namespace sparqlab::attention
