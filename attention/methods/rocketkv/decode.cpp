// RocketKV's second stage on the CPU (METHODS3.md §4.3, decode/engine.h): over the positions its
// first stage kept (the cache's input "rocketkv_kept", from the window's queries; without one the
// last k₁), a table of each chunk of c kept positions' largest and smallest key per channel, made
// once; a step takes the r channels of largest Σ_h |q_h|, scores each chunk on them against the
// table's larger or smaller key by the sign of the group's query (SparQ's temperature), and
// attends exactly to the best k positions. What it reads is the transfer formula's: r of the
// ⌈k₁/c⌉ rows of the sign-chosen table, and the K and V rows of the k attended.

#include "rocketkv.h"

#include "attention/decode/selected.h"

#include <cmath>

namespace sparqlab::attention {
namespace decode {
namespace {

struct RocketArgs {
    int64_t k = 0, c = 1, r = 1, nA = 0;
    GroupSelect gqa = GroupSelect::SumProbs;
    bool defaultScale = true;
    const int32_t* pos = nullptr; ///< [n_A] ascending
    const float* tmax = nullptr;  ///< [D, stride] each chunk's largest key, channel-major
    const float* tmin = nullptr;  ///< [D, stride] its smallest
    int64_t stride = 0;           ///< the tables' row length (chunks held at most)
};

int64_t rocketWorkFloats(int64_t g, int64_t D, int64_t S) {
    return 4 * g * S + 3 * D + g + std::max(S, D) + g * D + 2 * std::max(S, 2 * D) + 64;
}

template <typename T>
SPARQLAB_INLINE void rocketGroupT(const GroupArgs& a, const RocketArgs& p, float* work,
                                  std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, nA = p.nA, c = p.c, nb = (nA + c - 1) / c;
    float* zc = work;                           // [g, n_b]
    float* z = zc + g * nA;                     // [g, n_A]
    float* G = z + g * nA;                      // [g, n_A]
    float* zs = G + g * nA;                     // [g, k]
    float* aq = zs + g * nA;                    // [D]
    float* heapVal = aq + D;                    // [max(S, D)]
    float* factor = heapVal + std::max(a.S, D); // [g]
    float* positive = factor + g;               // [D] 1 where the group's q sums above 0
    float* yt = positive + D;
    float* scratch = yt + g * D;
    // The group's sign per channel.
    for (int64_t d = 0; d < D; ++d) {
        float s = 0;
        for (int64_t h = 0; h < g; ++h)
            s += a.q[h * D + d];
        positive[d] = s > 0 ? 1.0f : 0.0f;
    }
    // SparQ's step-1 setup: the r channels of largest Σ_h |q_h| (ties → the lower channel),
    // ascending, and per head its temperature (Eq. 9) with the logit scale folded in.
    std::vector<int64_t>& comps = sel;
    sparqSetup(a, p.r, TauMode::Adaptive, 0.0f, p.defaultScale, aq, heapIdx, heapVal, comps,
               factor);
    // Each chunk's score on the r channels, against its larger or smaller key by the sign: r
    // rows of the channel-major tables, one of the two per channel (r·⌈k₁/c⌉ numbers read).
    std::fill(zc, zc + g * nb, 0.0f);
    for (const int64_t d : comps) {
        const float* row = (positive[d] != 0.0f ? p.tmax : p.tmin) + d * p.stride;
        for (int64_t h = 0; h < g; ++h) {
            const float qd = a.q[h * D + d];
            float* __restrict zh = zc + h * nb;
            for (int64_t b = 0; b < nb; ++b)
                zh[b] += qd * row[b];
        }
    }
    for (int64_t h = 0; h < g; ++h)
        for (int64_t b = 0; b < nb; ++b)
            zc[h * nb + b] *= factor[h];
    for (int64_t h = 0; h < g; ++h)
        for (int64_t m = 0; m < nA; ++m)
            z[h * nA + m] = zc[h * nb + m / c];
    float invZ[64];
    rankScores(z, g, nA, p.gqa, G, invZ);
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    const int64_t n2 = std::min(p.k, nA);
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        sel.clear();
        topBySelection(rankOf(z, G, g, nA, p.gqa, h0), nA, n2, heapIdx, heapVal, scratch, cand,
                       sel);
        for (int64_t& m : sel) // kept-set order → positions (both ascending)
            m = p.pos[m];
        attendSelected<T>(a, sel, h0, h1, zs, yt, scratch);
        outputSelected(a, yt, h0, h1);
    }
}

SPARQLAB_SELECTING_KERNELS(rocketGroup, RocketArgs)

std::string rocketKey(const AttentionConfig& c, int64_t S, int64_t D) {
    const detail::RocketParams rp = detail::rocketParams(c, S, D);
    return "rocketkv k1=" + std::to_string(rp.k1) + " c=" + std::to_string(rp.c);
}

/// The first stage's kept set of each (batch row, KV head) — the cache's input, or the last k₁
/// positions — and the chunk tables over it.
void rocketPrepare(DecodeCache& cache, const AttentionConfig& c) {
    const int64_t S = cache.length(), D = cache.headDim();
    const std::string key = rocketKey(c, S, D);
    if (cache.methodState(key) || S < 1)
        return;
    const detail::RocketParams rp = detail::rocketParams(c, S, D);
    const int64_t B = cache.batch(), H = cache.kvHeads(), k1 = std::min(rp.k1, S);
    at::Tensor kept = cache.input("rocketkv_kept");
    if (!kept.defined() || kept.sizes() != at::IntArrayRef(std::vector<int64_t>{B, H, S}))
        kept = at::arange(S, at::kLong).ge(S - k1).view({1, 1, S}).expand({B, H, S});
    kept = kept.cpu(); // (a CUDA cache's input may live on its device; the tables are made here)
    const at::Tensor keys = cache.keys().to(at::kFloat).cpu();
    const int64_t nbMax = (S + rp.c - 1) / rp.c;
    at::Tensor pos = at::full({B, H, S}, -1, at::kInt);
    at::Tensor nA = at::zeros({B, H}, at::kInt);
    at::Tensor tmax = at::zeros({B, H, D, nbMax}), tmin = at::zeros({B, H, D, nbMax});
    for (int64_t b = 0; b < B; ++b)
        for (int64_t u = 0; u < H; ++u) {
            const at::Tensor p = kept[b][u].to(at::kBool).nonzero().flatten();
            const int64_t n = p.numel(), nb = (n + rp.c - 1) / rp.c;
            nA[b][u] = n;
            if (n == 0)
                continue;
            pos[b][u].narrow(0, 0, n).copy_(p.to(at::kInt));
            // A partial last chunk: its missing rows pad with ∓inf (the original's finfo.min).
            const at::Tensor ku = keys[b][u].index_select(0, p);
            at::Tensor big = at::full({nb * rp.c, D}, -INFINITY);
            at::Tensor small = at::full({nb * rp.c, D}, INFINITY);
            big.narrow(0, 0, n).copy_(ku);
            small.narrow(0, 0, n).copy_(ku);
            tmax[b][u].narrow(1, 0, nb).copy_(std::get<0>(big.view({nb, rp.c, D}).max(1)).t());
            tmin[b][u].narrow(1, 0, nb).copy_(std::get<0>(small.view({nb, rp.c, D}).min(1)).t());
        }
    // Made on the CPU; kept on the cache's device.
    const at::Device dev = cache.device();
    cache.setMethodState(
        key,
        {{"pos", pos.to(dev)}, {"n", nA.to(dev)}, {"max", tmax.to(dev)}, {"min", tmin.to(dev)}});
}

std::string rocketMissing(const DecodeCache& cache, const AttentionConfig& c) {
    return cache.methodState(rocketKey(c, cache.length(), cache.headDim()))
               ? std::string()
               : "rocketkv decode needs the cache's chunk tables for its positions "
                 "(prepareDecodeCache)";
}

/// The kept set the chunk tables were made over, as attend()'s "rocketkv_kept" [B, H, S]
/// (decodeOnDevice: stage 2 alone over it; its tables are the exact maxima and minima of those
/// keys, the same made again).
std::map<std::string, at::Tensor> rocketInputs(const DecodeCache& cache, const AttentionConfig& c) {
    const int64_t S = cache.length();
    const auto* st = cache.methodState(rocketKey(c, S, cache.headDim()));
    if (!st)
        fail(rocketMissing(cache, c));
    const at::Tensor pos = st->at("pos").to(cache.device(), at::kLong); // [B, H, S], −1 padded
    const at::Tensor kept =
        at::zeros({cache.batch(), cache.kvHeads(), S + 1}, pos.options().dtype(at::kBool))
            .scatter_(-1, at::where(pos.ge(0), pos, at::full({}, S, pos.options())), true)
            .narrow(-1, 0, S);
    return {{"rocketkv_kept", kept}};
}

int64_t rocketExtra(int64_t B, int64_t H, int64_t S, int64_t D, const AttentionConfig& c) {
    const detail::RocketParams rp = detail::rocketParams(c, S, D);
    return B * H * (S + 2 * ((S + rp.c - 1) / rp.c) * D + 1);
}

int64_t rocketWork(const DecodeCall& c) {
    return rocketWorkFloats(c.g, c.D, c.S);
}

void rocketTask(const DecodeCall& c, const GroupArgs& a, int64_t task, DecodeScratch& s) {
    const AttentionConfig& config = *c.config;
    const auto& st = *c.cache->methodState(rocketKey(config, c.S, c.D));
    const detail::RocketParams rp = detail::rocketParams(config, c.S, c.D);
    const int64_t nbMax = st.at("max").size(3);
    RocketArgs p;
    p.k = rp.k;
    p.c = rp.c;
    p.r = rp.r;
    p.nA = st.at("n").data_ptr<int32_t>()[task];
    p.gqa = config.gqa;
    p.defaultScale = !config.scale.has_value();
    p.pos = st.at("pos").data_ptr<int32_t>() + task * c.S;
    p.stride = nbMax;
    p.tmax = st.at("max").data_ptr<float>() + task * nbMax * c.D;
    p.tmin = st.at("min").data_ptr<float>() + task * nbMax * c.D;
    rocketGroup(c.storage, a, p, s.work, *s.sel, s.heap, s.cand);
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& rocketkvDecodeKernel() {
    static const DecodeKernel kernel{.prepareCache = decode::rocketPrepare,
                                     .cacheMissing = decode::rocketMissing,
                                     .cacheExtraElements = decode::rocketExtra,
                                     .workFloats = decode::rocketWork,
                                     .task = decode::rocketTask,
                                     .deviceInputs = decode::rocketInputs};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
