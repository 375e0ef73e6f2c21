// MagicPIG decode attention on the CPU (METHODS2.md §5, decode/engine.h): the keys outside the
// sinks and the window, centred, sit in L SimHash tables of 2^K buckets (position lists sorted by
// bucket, with each bucket's bounds), built once for the positions held; a step hashes the
// query, walks its bucket in each table counting collisions, samples the keys reached twice,
// weights them by the inverse of their sampling probability and attends to them with the sinks
// and the window. What it reads is the transfer formula's: 2·L bucket bounds, the c entries of
// the buckets, the n_s norms of the sampled keys, the K and V rows of the n attended.

#include "magicpig.h"

#include "attention/decode/selected.h"

#include <cmath>
#include <cstring>

namespace sparqlab::attention {
namespace decode {
namespace {

constexpr int64_t kMaxBits = 12; ///< 2^12 + 1 bucket bounds per table and head at most
constexpr double kPi = 3.14159265358979323846;

struct PigArgs {
    int64_t K = 0, L = 0, sink = 0, local = 1;
    const float* Wt = nullptr;        ///< [K·L, D]: hyperplane rows
    const float* kbar = nullptr;      ///< [D] the mean of the hashed keys of this task
    const float* knorm = nullptr;     ///< [S] ‖k_j − k̄‖
    const int32_t* offsets = nullptr; ///< [L, 2^K + 1]
    const int32_t* ids = nullptr;     ///< [L, nO] positions by bucket
    int64_t nO = 0;
};

int64_t pigWorkFloats(int64_t g, int64_t D, int64_t S, int64_t L) {
    return S / 4 + 1 + S + g * L + 2 * D + 64; // counts (bytes), λ, codes, rows
}

template <typename T>
SPARQLAB_INLINE void pigGroupT(const GroupArgs& a, const PigArgs& p, float* work,
                               std::vector<int64_t>& sel, int64_t*, int32_t*) {
    const int64_t g = a.g, D = a.D, S = a.S, K = p.K, L = p.L;
    auto* counts = reinterpret_cast<uint8_t*>(work);      // [S]
    float* lam = work + S / 4 + 1;                        // [S] λ of the attended, in sel's order
    int32_t* codes = reinterpret_cast<int32_t*>(lam + S); // [g, L]
    float* scratch = reinterpret_cast<float*>(codes + g * L); // [2·D]
    const T* Kp = static_cast<const T*>(a.k);
    const T* Vp = static_cast<const T*>(a.v);
    const int64_t l = std::max<int64_t>(1, p.local);
    const int64_t eLow = std::min(p.sink, S),
                  eHigh = std::max(eLow, S - l); // E = [0, eLow) ∪ [eHigh, S)
    const int64_t buckets = int64_t{1} << K;
    const double LD = static_cast<double>(L);
    // §5.1: every head's code in each table (strict > 0: a zero projection is bit 0), the
    // hyperplanes read once for the g heads (K·L rows of D: the weight dominates the reads).
    std::fill(codes, codes + g * L, 0);
    for (int64_t t = 0; t < L; ++t)
        for (int64_t i = 0; i < K; ++i) {
            const float* w = p.Wt + (t * K + i) * D;
            for (int64_t h = 0; h < g; ++h)
                codes[h * L + t] |= (dot(a.q + h * D, w, D) > 0.0f ? 1 : 0) << i;
        }
    for (int64_t h = 0; h < g; ++h) {
        const float* q = a.q + h * D;
        const int32_t* code = codes + h * L;
        // §5.2: the collisions of the keys in the query's buckets; sampled at the second.
        std::memset(counts, 0, static_cast<size_t>(S));
        sel.clear();
        for (int64_t j = 0; j < eLow; ++j)
            sel.push_back(j);
        const size_t firstSampled = sel.size();
        for (int64_t t = 0; t < L; ++t) {
            const int32_t* off = p.offsets + t * (buckets + 1);
            const int32_t* ids = p.ids + t * p.nO;
            for (int32_t e = off[code[t]], end = off[code[t] + 1]; e < end; ++e) {
                const int32_t j = ids[e];
                if (++counts[j] == detail::kMagicpigMinCollisions)
                    sel.push_back(j);
            }
        }
        std::sort(sel.begin() + static_cast<std::ptrdiff_t>(firstSampled), sel.end());
        const size_t lastSampled = sel.size();
        for (int64_t j = eHigh; j < S; ++j)
            sel.push_back(j);
        // §5.3: exact logits; the sampled ones less log of their sampling probability.
        const float qbar = dot(q, p.kbar, D), qn = std::sqrt(dot(q, q, D));
        const int64_t n = static_cast<int64_t>(sel.size());
        prefetchRows(Kp, Vp, sel, D);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t j = sel[static_cast<size_t>(i)];
            const float qk = dot(q, rowF(Kp + j * D, scratch, D), D);
            float z = qk * a.scale;
            if (static_cast<size_t>(i) >= firstSampled && static_cast<size_t>(i) < lastSampled) {
                const double den = static_cast<double>(qn) * p.knorm[j];
                double cos = den > 0 ? (static_cast<double>(qk) - qbar) / den : 0.0;
                cos = std::clamp(cos, -1.0, 1.0);
                const double pr = std::pow(1.0 - std::acos(cos) / kPi, static_cast<double>(K));
                const double w = 1.0 - std::pow(1.0 - pr, LD - 1) * (LD * pr + 1.0 - pr);
                z -= static_cast<float>(std::log(w + detail::kMagicpigWeightOffset));
            }
            lam[i] = z;
        }
        softmaxValues<T>(a, sel, 0, 1, lam, a.y + h * D, scratch + D);
        if (a.alpha)
            a.alpha[h] = 1.0f;
    }
}

SPARQLAB_SELECTING_KERNELS(pigGroup, PigArgs)

std::string pigKey(const AttentionConfig& c) {
    return "magicpig K=" + std::to_string(c.integer(Param::HashBits)) +
           " L=" + std::to_string(c.integer(Param::HashTables)) +
           " seed=" + std::to_string(c.integer(Param::HashSeed)) +
           " sink=" + std::to_string(c.integer(Param::Sink)) +
           " l=" + std::to_string(c.effectiveLocal());
}

/// The tables of each (batch row, KV head) for the positions held: the keys outside E centred
/// by their mean and hashed (§5.1–5.2, as magicpig.cpp hashes them), sorted by bucket.
void pigPrepare(DecodeCache& cache, const AttentionConfig& c) {
    const std::string key = pigKey(c);
    const int64_t S = cache.length();
    if (cache.methodState(key) || S < 1)
        return;
    const int64_t K = c.integer(Param::HashBits), L = c.integer(Param::HashTables);
    const int64_t B = cache.batch(), H = cache.kvHeads(), D = cache.headDim();
    const at::Tensor W = detail::magicpigHyperplanes(c, D);
    const int64_t l = std::max<int64_t>(1, c.effectiveLocal());
    const int64_t eLow = std::min(c.integer(Param::Sink), S), eHigh = std::max(eLow, S - l);
    const int64_t nO = eHigh - eLow, buckets = int64_t{1} << K;
    const at::Tensor keys = cache.keys().to(at::kFloat).cpu(); // [B, H, S, D]
    at::Tensor kbar = at::zeros({B, H, D});
    at::Tensor knorm = at::zeros({B, H, S});
    at::Tensor offsets = at::zeros({B, H, L, buckets + 1}, at::kInt);
    at::Tensor ids = at::zeros({B, H, L, std::max<int64_t>(nO, 1)}, at::kInt);
    if (nO > 0) {
        const at::Tensor O = keys.narrow(2, eLow, nO);
        kbar = O.sum(2) / static_cast<double>(nO);
        const at::Tensor Kc = O - kbar.unsqueeze(2);
        knorm.narrow(2, eLow, nO).copy_(Kc.norm(2, -1));
        const at::Tensor codes = detail::simhash(Kc, W, K, L).transpose(2, 3); // [B, H, L, nO]
        const at::Tensor order = std::get<1>(at::sort(codes, /*stable=*/true, -1, false));
        ids.copy_((order + eLow).to(at::kInt));
        const at::Tensor counts =
            at::zeros({B, H, L, buckets}, at::kLong).scatter_add_(-1, codes, at::ones_like(codes));
        offsets.narrow(-1, 1, buckets).copy_(counts.cumsum(-1).to(at::kInt));
    }
    // Built on the CPU (the same tables whatever the device); kept on the cache's device.
    const at::Device dev = cache.device();
    cache.setMethodState(key, {{"Wt", W.t().to(dev).contiguous()},
                               {"kbar", kbar.to(dev).contiguous()},
                               {"knorm", knorm.to(dev).contiguous()},
                               {"offsets", offsets.to(dev).contiguous()},
                               {"ids", ids.to(dev).contiguous()}});
}

std::string pigMissing(const DecodeCache& cache, const AttentionConfig& c) {
    return cache.methodState(pigKey(c)) ? std::string()
                                        : "magicpig decode needs the cache's hash tables for its "
                                          "positions (prepareDecodeCache)";
}

int64_t pigExtra(int64_t B, int64_t H, int64_t S, int64_t D, const AttentionConfig& c) {
    const int64_t K = c.integer(Param::HashBits), L = c.integer(Param::HashTables);
    return B * H * (L * ((int64_t{1} << K) + 1 + S) + S + D);
}

int64_t pigWork(const DecodeCall& c) {
    return pigWorkFloats(c.g, c.D, c.S, c.config->integer(Param::HashTables));
}

void pigTask(const DecodeCall& c, const GroupArgs& a, int64_t task, DecodeScratch& s) {
    const AttentionConfig& config = *c.config;
    const auto& st = *c.cache->methodState(pigKey(config));
    PigArgs p;
    p.K = config.integer(Param::HashBits);
    p.L = config.integer(Param::HashTables);
    p.sink = config.integer(Param::Sink);
    p.local = config.effectiveLocal();
    p.Wt = st.at("Wt").data_ptr<float>();
    p.kbar = st.at("kbar").data_ptr<float>() + task * c.D;
    p.knorm = st.at("knorm").data_ptr<float>() + task * c.S;
    const int64_t buckets = int64_t{1} << p.K;
    p.offsets = st.at("offsets").data_ptr<int32_t>() + task * p.L * (buckets + 1);
    p.nO = st.at("ids").size(3);
    p.ids = st.at("ids").data_ptr<int32_t>() + task * p.L * p.nO;
    pigGroup(c.storage, a, p, s.work, *s.sel, s.heap, s.cand);
}

/// The prepared tables as attend()'s named inputs (decodeOnDevice): the hyperplanes, and each
/// hashed key's code in each table, "key_codes" [B, H, L, S] (−1 in the sinks and the window),
/// read back from the tables (the bucket of each entry), so that the device path samples from
/// the very buckets the kernel walks.
std::map<std::string, at::Tensor> pigInputs(const DecodeCache& cache, const AttentionConfig& c) {
    const auto* st = cache.methodState(pigKey(c));
    if (!st)
        fail(pigMissing(cache, c));
    const at::Device dev = cache.device();
    const int64_t S = cache.length(), B = cache.batch(), H = cache.kvHeads();
    const int64_t K = c.integer(Param::HashBits), L = c.integer(Param::HashTables);
    const int64_t buckets = int64_t{1} << K;
    const int64_t l = std::max<int64_t>(1, c.effectiveLocal());
    const int64_t eLow = std::min(c.integer(Param::Sink), S), eHigh = std::max(eLow, S - l);
    const int64_t nO = eHigh - eLow;
    const auto longs = at::TensorOptions().dtype(at::kLong).device(dev);
    at::Tensor codes = at::full({B, H, L, S}, -1, longs);
    if (nO > 0) {
        // Entry e of a table lies in bucket b where offsets[b] ≤ e < offsets[b + 1]: the number
        // of bucket ends ≤ e.
        const at::Tensor ends = st->at("offsets").narrow(-1, 1, buckets).to(dev, at::kLong);
        const at::Tensor entries = at::arange(nO, longs).expand({B, H, L, nO}).contiguous();
        const at::Tensor bucket = at::searchsorted(ends.contiguous(), entries, /*out_int32=*/false,
                                                   /*right=*/true);
        codes.scatter_(-1, st->at("ids").narrow(-1, 0, nO).to(dev, at::kLong), bucket);
    }
    return {{"hyperplanes", st->at("Wt").to(dev).t()}, {"key_codes", codes}};
}

bool pigSupports(const AttentionConfig& c) {
    return c.integer(Param::HashBits) <= kMaxBits;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& magicpigDecodeKernel() {
    static const DecodeKernel kernel{.supports = decode::pigSupports,
                                     .prepareCache = decode::pigPrepare,
                                     .cacheMissing = decode::pigMissing,
                                     .cacheExtraElements = decode::pigExtra,
                                     .workFloats = decode::pigWork,
                                     .task = decode::pigTask,
                                     .deviceInputs = decode::pigInputs};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
