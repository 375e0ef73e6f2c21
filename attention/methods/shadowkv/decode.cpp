// ShadowKV decode attention on the CPU (METHODS3.md §3, decode/engine.h; --shadowkv-keys post): the
// chunks' landmarks, outlier chunks and the prompt's low-rank key factors A = X·V_r and V_rᵀ,
// made once for the positions held; a step scores the landmarks, takes the best chunks, rebuilds
// their keys from A's rows and the head's block of V_rᵀ (the query is folded in first: r numbers
// per head), and attends to them, the outliers and the local part. What it reads is the transfer
// formula's: the non-outlier landmarks, r·d of V_rᵀ, k·r of A, the values of the chosen chunks
// and the keys and values of the local and outlier chunks.

#include "shadowkv.h"

#include "attention/decode/selected.h"

namespace sparqlab::attention {
namespace decode {
namespace {

struct ShadowArgs {
    int64_t budget = 0, C = 1, nCh = 0, r = 0, nP = 0;
    GroupSelect gqa = GroupSelect::MaxProbs;
    const float* landmarks = nullptr; ///< [n_ch, D] of this task
    const uint8_t* outlier = nullptr; ///< [n_ch]
    const float* A = nullptr;         ///< [n_p, r] of this batch row
    const float* Vt = nullptr;        ///< [r, D] rows of this KV head's block (stride vtStride)
    int64_t vtStride = 0;
};

int64_t shadowWorkFloats(int64_t g, int64_t D, int64_t S, int64_t nCh, int64_t r) {
    return 4 * g * nCh + g * r + g * S + 2 * S + g * D + 4 * D + 64;
}

template <typename T>
SPARQLAB_INLINE void shadowGroupT(const GroupArgs& a, const ShadowArgs& p, float* work,
                                  std::vector<int64_t>& sel, int64_t* heapIdx, int32_t* cand) {
    const int64_t g = a.g, D = a.D, S = a.S, C = p.C, nCh = p.nCh, r = p.r;
    float* zl = work;              // [g, n_R] landmark logits of the non-outlier chunks
    float* G = zl + g * nCh;       // [g, n_R]
    float* heapVal = G + g * nCh;  // [2·n_ch]
    float* qt = heapVal + 2 * nCh; // [g, r] V_rᵀ·q per head
    float* zs = qt + g * r;        // [g, S] the attended logits
    float* rebuilt = zs + g * S;   // [S] 1 where the key is rebuilt
    float* yt = rebuilt + S;
    float* scratch = yt + g * D;
    const T* K = static_cast<const T*>(a.k);
    const T* V = static_cast<const T*>(a.v);
    // §3.3: the landmarks of the chunks that are not outliers, each head's logits.
    std::vector<int64_t>& rest = sel; // reused below for the positions
    rest.clear();
    for (int64_t c = 0; c < nCh; ++c)
        if (!p.outlier[c])
            rest.push_back(c);
    const auto nR = static_cast<int64_t>(rest.size());
    for (int64_t i = 0; i < nR; ++i) {
        const float* lm = p.landmarks + rest[static_cast<size_t>(i)] * D;
        for (int64_t h = 0; h < g; ++h)
            zl[h * nR + i] = dot(a.q + h * D, lm, D) * a.scale;
    }
    // (per thread, kept between tasks: the hot loop allocates nothing once warm)
    static thread_local std::vector<int32_t> chosen; // the chunks of the rest chosen, per unit
    // G: max_probs / sum_probs over the heads' softmaxes, per_head the logits.
    if (nR > 0) {
        if (p.gqa == GroupSelect::PerHead) {
            std::copy(zl, zl + g * nR, G);
        } else {
            for (int64_t h = 0; h < g; ++h) {
                float* zh = zl + h * nR;
                const float inv = 1.0f / expInPlace(zh, nR);
                for (int64_t i = 0; i < nR; ++i)
                    zh[i] *= inv;
            }
            for (int64_t i = 0; i < nR; ++i) {
                float x = zl[i];
                for (int64_t h = 1; h < g; ++h)
                    x = p.gqa == GroupSelect::MaxProbs ? std::max(x, zl[h * nR + i])
                                                       : x + zl[h * nR + i];
                G[i] = x;
            }
        }
    }
    const int64_t nSel = std::min(p.budget / C, nR);
    // Each head's query folded into the head's block of V_rᵀ: logit_j = scale·A[j]·qt.
    for (int64_t h = 0; h < g; ++h)
        for (int64_t i = 0; i < r; ++i)
            qt[h * r + i] = dot(p.Vt + i * p.vtStride, a.q + h * D, D) * a.scale;
    const bool perHead = p.gqa == GroupSelect::PerHead && g > 1;
    static thread_local std::vector<int64_t> top, pos;
    for (int64_t h0 = 0; h0 < g; h0 += perHead ? 1 : g) {
        const int64_t h1 = perHead ? h0 + 1 : g;
        top.clear();
        if (nR > 0)
            topByScore(G + (perHead ? h0 * nR : 0), nR, nSel, heapIdx, heapVal, top);
        std::sort(top.begin(), top.end());
        chosen.clear();
        for (const int64_t i : top)
            chosen.push_back(static_cast<int32_t>(rest[static_cast<size_t>(i)]));
        // The attended positions in order: the outlier and chosen chunks, the local part.
        pos.clear();
        size_t next = 0;
        for (int64_t c = 0; c < nCh; ++c) {
            const bool isChosen = next < chosen.size() && chosen[next] == c;
            if (isChosen)
                ++next;
            if (!isChosen && !p.outlier[c])
                continue;
            for (int64_t j = c * C; j < (c + 1) * C; ++j) {
                rebuilt[pos.size()] = isChosen ? 1.0f : 0.0f;
                pos.push_back(j);
            }
        }
        for (int64_t j = nCh * C; j < S; ++j) {
            rebuilt[pos.size()] = 0.0f;
            pos.push_back(j);
        }
        const auto n = static_cast<int64_t>(pos.size());
        // Ask for every row at once (into L2), as attendSelected does: A's rows of the rebuilt
        // keys, K's of the exact ones, V's of all.
        const auto prefetch = [](const void* row, int64_t bytes) {
            for (int64_t o = 0; o < bytes; o += 64)
                __builtin_prefetch(static_cast<const char*>(row) + o, 0, 1);
        };
        const int64_t rowBytes = D * static_cast<int64_t>(sizeof(T));
        for (int64_t jj = 0; jj < n; ++jj) {
            const int64_t j = pos[static_cast<size_t>(jj)];
            if (rebuilt[jj] != 0.0f)
                prefetch(p.A + j * r, r * static_cast<int64_t>(sizeof(float)));
            else
                prefetch(K + j * D, rowBytes);
            prefetch(V + j * D, rowBytes);
        }
        for (int64_t jj = 0; jj < n; ++jj) {
            const int64_t j = pos[static_cast<size_t>(jj)];
            if (rebuilt[jj] != 0.0f) {
                for (int64_t h = h0; h < h1; ++h)
                    zs[h * n + jj] = dot(p.A + j * r, qt + h * r, r);
            } else {
                const float* kr = rowF(K + j * D, scratch, D);
                for (int64_t h = h0; h < h1; ++h)
                    zs[h * n + jj] = dot(a.q + h * D, kr, D) * a.scale;
            }
        }
        softmaxValues<T>(a, pos, h0, h1, zs, yt, scratch);
        outputSelected(a, yt, h0, h1);
    }
    (void)cand;
}

SPARQLAB_SELECTING_KERNELS(shadowGroup, ShadowArgs)

std::string shadowKey(const AttentionConfig& c) {
    return "shadowkv C=" + std::to_string(c.integer(Param::ChunkSize)) +
           " rank=" + std::to_string(c.integer(Param::Rank)) +
           " L=" + std::to_string(c.integer(Param::LocalChunks)) +
           " O=" + std::to_string(c.integer(Param::OutlierChunks));
}

/// Every batch row's chunks (§3.1–3.2: the prompt is every position but the last) and the
/// low-rank factors of its prompt's keys (§3.4, all KV heads together).
void shadowPrepare(DecodeCache& cache, const AttentionConfig& c) {
    const std::string key = shadowKey(c);
    const int64_t S = cache.length();
    if (cache.methodState(key) || S < 1)
        return;
    const int64_t C = c.integer(Param::ChunkSize), L = c.integer(Param::LocalChunks);
    const int64_t B = cache.batch(), H = cache.kvHeads(), D = cache.headDim();
    const int64_t nP = S - 1, nCh = std::max<int64_t>(0, nP / C - L);
    const int64_t nOut = std::min(c.integer(Param::OutlierChunks), nCh);
    const at::Tensor keys = cache.keys().to(at::kFloat).cpu(); // [B, H, S, D]
    std::vector<at::Tensor> lms, outs, As, Vts;
    for (int64_t b = 0; b < B; ++b) {
        if (nCh > 0) {
            const detail::ShadowChunks ch =
                detail::shadowChunks(keys[b].narrow(1, 0, nCh * C).view({H, nCh, C, D}), nOut);
            lms.push_back(ch.landmarks);
            outs.push_back(ch.outliers.mask.to(at::kByte));
            const detail::LowRankFactors f = detail::lowRankFactors(
                keys[b].narrow(1, 0, nP).permute({1, 0, 2}).reshape({nP, H * D}),
                c.integer(Param::Rank));
            As.push_back(f.A);
            Vts.push_back(f.Vt);
        } else {
            lms.push_back(at::zeros({H, 0, D}));
            outs.push_back(at::zeros({H, 0}, at::kByte));
            As.push_back(at::zeros({std::max<int64_t>(nP, 0), 1}));
            Vts.push_back(at::zeros({1, H * D}));
        }
    }
    // Made on the CPU (the same SVD whatever the device); kept on the cache's device.
    const at::Device dev = cache.device();
    cache.setMethodState(key, {{"landmarks", at::stack(lms).to(dev).contiguous()},
                               {"outlier", at::stack(outs).to(dev).contiguous()},
                               {"A", at::stack(As).to(dev).contiguous()},
                               {"Vt", at::stack(Vts).to(dev).contiguous()}});
}

std::string shadowMissing(const DecodeCache& cache, const AttentionConfig& c) {
    return cache.methodState(shadowKey(c)) ? std::string()
                                           : "shadowkv decode needs the cache's landmarks and "
                                             "low-rank keys for its positions (prepareDecodeCache)";
}

int64_t shadowExtra(int64_t B, int64_t H, int64_t S, int64_t D, const AttentionConfig& c) {
    const int64_t r = std::min(c.integer(Param::Rank), std::min(S, H * D));
    return B * (H * (S / std::max<int64_t>(1, c.integer(Param::ChunkSize))) * (D + 1) + S * r +
                r * H * D);
}

int64_t shadowWork(const DecodeCall& c) {
    const int64_t C = std::max<int64_t>(1, c.config->integer(Param::ChunkSize));
    return shadowWorkFloats(c.g, c.D, c.S, c.S / C + 1,
                            std::min(c.config->integer(Param::Rank), c.S * c.H * c.D));
}

void shadowTask(const DecodeCall& c, const GroupArgs& a, int64_t task, DecodeScratch& s) {
    const AttentionConfig& config = *c.config;
    const auto& st = *c.cache->methodState(shadowKey(config));
    const at::Tensor &lm = st.at("landmarks"), &out = st.at("outlier"), &A = st.at("A"),
                     &Vt = st.at("Vt");
    const int64_t b = task / c.H, u = task % c.H;
    ShadowArgs p;
    p.budget = config.integer(Param::Budget);
    p.C = config.integer(Param::ChunkSize);
    p.nCh = lm.size(2);
    p.r = A.size(2);
    p.nP = A.size(1);
    p.gqa = config.gqa;
    p.landmarks = lm.data_ptr<float>() + task * p.nCh * c.D;
    p.outlier = out.data_ptr<uint8_t>() + task * p.nCh;
    p.A = A.data_ptr<float>() + b * p.nP * p.r;
    p.vtStride = Vt.size(2);
    p.Vt = Vt.data_ptr<float>() + b * p.r * p.vtStride + u * c.D;
    shadowGroup(c.storage, a, p, s.work, *s.sel, s.heap, s.cand);
}

/// The prepared landmarks, outliers and low-rank factors as attend()'s named inputs
/// (decodeOnDevice).
std::map<std::string, at::Tensor> shadowInputs(const DecodeCache& cache, const AttentionConfig& c) {
    const auto* st = cache.methodState(shadowKey(c));
    if (!st)
        fail(shadowMissing(cache, c));
    const at::Device dev = cache.device();
    return {{"landmarks", st->at("landmarks").to(dev)},
            {"outlier_mask", st->at("outlier").to(dev, at::kBool)},
            {"svd_a", st->at("A").to(dev)},
            {"svd_vt", st->at("Vt").to(dev)}};
}

bool shadowSupports(const AttentionConfig& c) {
    return c.integer(Param::ShadowKeys) == 0; // post-RoPE keys (pre needs the RoPE tables)
}

} // namespace
} // namespace decode

namespace detail {
const DecodeKernel& shadowkvDecodeKernel() {
    static const DecodeKernel kernel{.supports = decode::shadowSupports,
                                     .prepareCache = decode::shadowPrepare,
                                     .cacheMissing = decode::shadowMissing,
                                     .cacheExtraElements = decode::shadowExtra,
                                     .workFloats = decode::shadowWork,
                                     .task = decode::shadowTask,
                                     .deviceInputs = decode::shadowInputs};
    return kernel;
}
} // namespace detail
} // namespace sparqlab::attention
