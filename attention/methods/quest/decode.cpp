// Quest decode attention on the CPU (METHODS.md §3, decode/engine.h): each page's bound from the
// cache's per-page min and max keys, the best pages, exact attention over their positions.

#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

struct QuestArgs {
    int64_t k = 0, local = 0, pageSize = 16;
    GroupSelect gqa = GroupSelect::SumProbs;
    const void* pmin = nullptr; ///< [pages, D] of this task
    const void* pmax = nullptr;
};

int64_t questWorkFloats(int64_t g, int64_t D, int64_t S, int64_t P) {
    const int64_t pages = (S + P - 1) / P;
    return 2 * g * pages + std::max(pages, D) + g * S + g * D + 2 * g * D +
           std::max(2 * D, 2 * pages);
}

template <typename T>
SPARQLAB_INLINE void questGroupT(const GroupArgs& a, const QuestArgs& p, float* work,
                                 std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, S = a.S, P = p.pageSize;
    const int64_t pages = (S + P - 1) / P;
    float* U = work;                // [g, pages]
    float* G = U + g * pages;       // [g, pages]
    float* heapVal = G + g * pages; // [max(pages, D)]
    float* zs = heapVal + std::max(pages, D);
    const int64_t kEff = std::min(p.k, S), lEff = std::min(p.local, kEff);
    const int64_t m = std::max<int64_t>(1, lEff);
    const int64_t f0 = (S - m) / P; // forced pages f0 … pages − 1
    const int64_t np = std::min(std::max((p.k + P - 1) / P, pages - f0), pages);
    float* yt = zs + g * S;
    float* qPos = yt + g * D;   // [g, D] max(q, 0)
    float* qNeg = qPos + g * D; // [g, D] min(q, 0)
    float* scratch = qNeg + g * D;
    const T* pmin = static_cast<const T*>(p.pmin);
    const T* pmax = static_cast<const T*>(p.pmax);
    // U_h[π] = scale·Σ_d max(q_d·m[π,d], q_d·M[π,d]) = scale·(max(q,0)·M + min(q,0)·m): each
    // page's two rows read once for the g heads, the streams asked for ahead as dense does.
    for (int64_t i = 0; i < g * D; ++i) {
        qPos[i] = a.q[i] > 0 ? a.q[i] : 0.0f;
        qNeg[i] = a.q[i] < 0 ? a.q[i] : 0.0f;
    }
    const int64_t rowBytes = D * static_cast<int64_t>(sizeof(T));
    for (int64_t pi = 0; pi < pages; ++pi) {
        prefetchRow(pmax + pi * D, rowBytes);
        prefetchRow(pmin + pi * D, rowBytes);
        const float* hi = rowF(pmax + pi * D, scratch, D);
        const float* lo = rowF(pmin + pi * D, scratch + D, D);
        for (int64_t h = 0; h < g; ++h)
            U[h * pages + pi] = (dot(qPos + h * D, hi, D) + dot(qNeg + h * D, lo, D)) * a.scale;
    }
    float invZ[64];
    rankScores(U, g, pages, p.gqa, G, invZ);
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        // The best np − (pages − f0) of the pages before f0, then the forced ones.
        sel.clear();
        topBySelection(rankOf(U, G, g, pages, p.gqa, h0), f0, np - (pages - f0), heapIdx, heapVal,
                       scratch, cand, sel);
        // The chosen pages (ascending) into cand, then their positions into sel.
        int64_t nChosen = 0;
        for (const int64_t pi : sel)
            cand[nChosen++] = static_cast<int32_t>(pi);
        for (int64_t pi = f0; pi < pages; ++pi)
            cand[nChosen++] = static_cast<int32_t>(pi);
        sel.clear();
        for (int64_t c = 0; c < nChosen; ++c)
            for (int64_t j = cand[c] * P; j < std::min(S, (cand[c] + 1) * P); ++j)
                sel.push_back(j);
        attendSelected<T>(a, sel, h0, h1, zs, yt, scratch);
        outputSelected(a, yt, h0, h1);
    }
}

SPARQLAB_SELECTING_KERNELS(questGroup, QuestArgs)

int64_t questWork(const DecodeCall& c) {
    return questWorkFloats(c.g, c.D, c.S, c.config->pageSize);
}

void questTask(const DecodeCall& c, const GroupArgs& a, int64_t task, DecodeScratch& s) {
    const AttentionConfig& config = *c.config;
    const int64_t P = config.pageSize;
    QuestArgs qa;
    qa.k = std::min(config.k, c.S + P);
    qa.local = c.local;
    qa.pageSize = P;
    qa.gqa = config.gqa;
    const int64_t pagesCap = (c.cap + P - 1) / P;
    const size_t poff = static_cast<size_t>(task * pagesCap * c.D) * c.es;
    qa.pmin = static_cast<const char*>(c.cache->pageMin().data_ptr()) + poff;
    qa.pmax = static_cast<const char*>(c.cache->pageMax().data_ptr()) + poff;
    questGroup(c.storage, a, qa, s.work, *s.sel, s.heap, s.cand);
}

void questPrepare(DecodeCache& cache, const AttentionConfig& c) {
    if (c.pageSize < 1 || cache.pageSize() != c.pageSize)
        cache.enablePages(c.pageSize);
}

int64_t questExtra(int64_t B, int64_t H, int64_t S, int64_t D, const AttentionConfig& c) {
    const int64_t P = std::max<int64_t>(1, c.pageSize);
    return 2 * B * H * ((S + P - 1) / P) * D; // the min and max key of every page
}

std::string questMissing(const DecodeCache& cache, const AttentionConfig& c) {
    if (cache.pageSize() == c.pageSize)
        return {};
    return "quest decode needs the cache's pages of size " + std::to_string(c.pageSize) +
           " (prepareDecodeCache)";
}

/// On CUDA: the pages' bounds, the best pages and the forced last ones (cuda/decode_cuda.h);
/// k as the CPU kernel takes it, min(k, S + P).
void questGpu(const DecodeCall& c, cuda::Request& r) {
    r.score = cuda::Score::PageBound;
    r.select = cuda::Select::Pages;
    r.k = std::min(c.config->k, c.S + c.config->pageSize);
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& questDecodeKernel() {
    static const DecodeKernel kernel{.prepareCache = decode::questPrepare,
                                     .cacheMissing = decode::questMissing,
                                     .cacheExtraElements = decode::questExtra,
                                     .workFloats = decode::questWork,
                                     .task = decode::questTask,
                                     .gpu = decode::questGpu};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
