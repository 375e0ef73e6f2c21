// PQCache decode attention on the CPU (METHODS2.md §4, decode/engine.h): the query's dot products
// with every centroid of every sub-space (a table of m·2^b numbers), each ranked position's
// approximate logit as the sum of its m codes' entries, the best positions with the sinks and the
// window, exact attention over them. What a step reads is the transfer formula's: S·m codes, the
// codebook, and the K and V rows of the k attended.

#include "pqcache.h"

#include "attention/decode/selected.h"

#include <functional>

namespace sparqlab::attention {
namespace decode {
namespace {

struct PqArgs {
    int64_t k = 0, local = 0, sink = 0, m = 0, C = 0;
    GroupSelect gqa = GroupSelect::SumProbs;
    const float* cent = nullptr;    ///< [m, C, D/m] of this task
    const int16_t* codes = nullptr; ///< [m, S] of this task, read as unsigned
    int64_t codeStride = 0;         ///< the codes' row length (the cache's length)
};

int64_t pqWorkFloats(int64_t g, int64_t D, int64_t S, int64_t m, int64_t C) {
    return g * m * C + 3 * g * S + std::max(S, D) + g * D + 2 * std::max(S, 2 * D) + 64;
}

template <typename T>
SPARQLAB_INLINE void pqGroupT(const GroupArgs& a, const PqArgs& p, float* work,
                              std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, S = a.S, m = p.m, C = p.C, ds = D / m;
    const int64_t kEff = std::min(p.k, S);
    float* table = work;          // [g, m, C]
    float* z = table + g * m * C; // [g, n]
    float* G = z + g * S;         // [g, n]
    float* zs = G + g * S;        // [g, kEff]
    float* heapVal = zs + g * S;  // [max(S, D)]
    float* yt = heapVal + std::max(S, D);
    float* scratch = yt + g * D;
    if (S <= p.k) { // §4.3: dense
        sel.clear();
        for (int64_t j = 0; j < S; ++j)
            sel.push_back(j);
        attendSelected<T>(a, sel, 0, g, zs, yt, scratch);
        outputSelected(a, yt, 0, g);
        return;
    }
    const int64_t lEff = std::min(std::max<int64_t>(1, p.local), kEff);
    const int64_t sEff = std::min(p.sink, kEff - lEff);
    const int64_t nTop = kEff - sEff - lEff;
    const int64_t n = S - sEff - lEff; // the ranked positions sEff … S − lEff − 1
    // The table: each head's dot product with every centroid of each sub-space (the scale in).
    for (int64_t h = 0; h < g; ++h)
        for (int64_t s = 0; s < m; ++s)
            for (int64_t c = 0; c < C; ++c)
                table[(h * m + s) * C + c] =
                    dot(a.q + h * D + s * ds, p.cent + (s * C + c) * ds, ds) * a.scale;
    // Per head, the table entries of each ranked position's m codes combined by `op` over the
    // sub-spaces in order, into z [g, n].
    const auto combineCodes = [&](auto op) {
        for (int64_t h = 0; h < g; ++h) {
            float* zh = z + h * n;
            const float* t0 = table + h * m * C;
            const int16_t* c0 = p.codes + sEff;
            for (int64_t j = 0; j < n; ++j)
                zh[j] = t0[static_cast<uint16_t>(c0[j])];
            for (int64_t s = 1; s < m; ++s) {
                const float* ts = table + (h * m + s) * C;
                const int16_t* cs = p.codes + s * p.codeStride + sEff;
                for (int64_t j = 0; j < n; ++j)
                    zh[j] = op(zh[j], ts[static_cast<uint16_t>(cs[j])]);
            }
        }
    };
    const bool probs = p.gqa == GroupSelect::SumProbs && g > 1;
    if (!probs) {
        // ẑ of the ranked positions: the sum of the entries (per head, their sum over the
        // group, or — one head — ẑ itself ranks as its softmax does).
        combineCodes(std::plus<float>());
        if (p.gqa == GroupSelect::SumLogits) {
            std::copy(z, z + n, G);
            for (int64_t h = 1; h < g; ++h)
                for (int64_t j = 0; j < n; ++j)
                    G[j] += z[h * n + j];
        }
    } else {
        // Σ_h softmax(ẑ_h) without an exp per position: exp(ẑ − Σ_s M_s) is the product over
        // the sub-spaces of exp(table entry − M_s), each table exponentiated once (m·2^b exps).
        for (int64_t hs = 0; hs < g * m; ++hs)
            expInPlace(table + hs * C, C);
        combineCodes(std::multiplies<float>());
        for (int64_t h = 0; h < g; ++h) {
            const float* ph = z + h * n;
            const float inv = 1.0f / sumOf(ph, n);
            if (h == 0)
                for (int64_t j = 0; j < n; ++j)
                    G[j] = ph[j] * inv;
            else
                for (int64_t j = 0; j < n; ++j)
                    G[j] += ph[j] * inv;
        }
    }
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        sel.clear();
        for (int64_t j = 0; j < sEff; ++j) // the sinks
            sel.push_back(j);
        const size_t first = sel.size();
        const float* rank = p.gqa == GroupSelect::PerHead              ? z + h0 * n
                            : probs || p.gqa == GroupSelect::SumLogits ? G
                                                                       : z;
        topBySelection(rank, n, nTop, heapIdx, heapVal, scratch, cand, sel);
        for (size_t i = first; i < sel.size(); ++i)
            sel[i] += sEff;
        for (int64_t j = S - lEff; j < S; ++j) // the window, the current token in it
            sel.push_back(j);
        attendSelected<T>(a, sel, h0, h1, zs, yt, scratch);
        outputSelected(a, yt, h0, h1);
    }
}

SPARQLAB_SELECTING_KERNELS(pqGroup, PqArgs)

int64_t bitsOf(const AttentionConfig& c) {
    return c.integer(Param::PqBits);
}

std::string pqKey(const AttentionConfig& c) {
    return "pqcache m=" + std::to_string(c.integer(Param::PqSubspaces)) +
           " b=" + std::to_string(bitsOf(c)) + " sink=" + std::to_string(c.integer(Param::Sink)) +
           " iters=" + std::to_string(c.integer(Param::PqIters));
}

/// The codebook of each batch row from the keys held (§4.2: every position valid), its codes as
/// 16-bit integers.
void pqPrepare(DecodeCache& cache, const AttentionConfig& c) {
    const std::string key = pqKey(c);
    if (cache.methodState(key) || cache.length() < 1)
        return;
    std::vector<at::Tensor> cents, codes;
    const at::Tensor keys = cache.keys().to(at::kFloat).cpu();
    const at::Tensor valid = at::ones({cache.length()}, at::kBool);
    for (int64_t b = 0; b < cache.batch(); ++b) {
        const PqCodebook cb = pqBuildRow(keys[b], valid, c.integer(Param::PqSubspaces), bitsOf(c),
                                         c.integer(Param::Sink), c.integer(Param::PqIters));
        cents.push_back(cb.centroids.contiguous());
        codes.push_back(cb.codes.to(at::kShort));
    }
    // Built on the CPU (the same codebook whatever the device); kept on the cache's device.
    const at::Device dev = cache.device();
    cache.setMethodState(key, {{"centroids", at::stack(cents).to(dev).contiguous()},
                               {"codes", at::stack(codes).to(dev).contiguous()}});
}

std::string pqMissing(const DecodeCache& cache, const AttentionConfig& c) {
    return cache.methodState(pqKey(c)) ? std::string()
                                       : "pqcache decode needs the cache's codebook for its "
                                         "positions (prepareDecodeCache)";
}

int64_t pqExtra(int64_t B, int64_t H, int64_t S, int64_t D, const AttentionConfig& c) {
    const int64_t m = c.integer(Param::PqSubspaces);
    return B * H * ((int64_t{1} << bitsOf(c)) * D + m * S / 2 + 1); // codebook; 16-bit codes
}

int64_t pqWork(const DecodeCall& c) {
    return pqWorkFloats(c.g, c.D, c.S, c.config->integer(Param::PqSubspaces),
                        int64_t{1} << bitsOf(*c.config));
}

void pqTask(const DecodeCall& c, const GroupArgs& a, int64_t task, DecodeScratch& s) {
    const AttentionConfig& config = *c.config;
    const auto& state = *c.cache->methodState(pqKey(config));
    const at::Tensor& cent = state.at("centroids");
    const at::Tensor& codes = state.at("codes");
    PqArgs p;
    p.k = config.k;
    p.local = c.local;
    p.sink = config.integer(Param::Sink);
    p.m = cent.size(2);
    p.C = cent.size(3);
    p.gqa = config.gqa;
    p.cent = cent.data_ptr<float>() + task * p.m * p.C * cent.size(4);
    p.codeStride = codes.size(3);
    p.codes = codes.data_ptr<int16_t>() + task * p.m * p.codeStride;
    pqGroup(c.storage, a, p, s.work, *s.sel, s.heap, s.cand);
}

/// The prepared codebook as attend()'s "pq_centroids" and "pq_codes" (decodeOnDevice): the
/// 16-bit codes read as unsigned, as the kernel reads them.
std::map<std::string, at::Tensor> pqInputs(const DecodeCache& cache, const AttentionConfig& c) {
    const auto* state = cache.methodState(pqKey(c));
    if (!state)
        fail(pqMissing(cache, c));
    const at::Device dev = cache.device();
    return {{"pq_centroids", state->at("centroids").to(dev)},
            {"pq_codes", state->at("codes").to(dev, at::kInt).bitwise_and(0xFFFF)}};
}

bool pqSupports(const AttentionConfig& c) {
    return bitsOf(c) <= 16 && c.integer(Param::PqSubspaces) >= 1;
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& pqcacheDecodeKernel() {
    static const DecodeKernel kernel{.supports = decode::pqSupports,
                                     .prepareCache = decode::pqPrepare,
                                     .cacheMissing = decode::pqMissing,
                                     .cacheExtraElements = decode::pqExtra,
                                     .workFloats = decode::pqWork,
                                     .task = decode::pqTask,
                                     .deviceInputs = decode::pqInputs};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
