#pragma once
// Step 2 of the selecting methods: the rank kernel of a rule combining a group's heads, and the
// select kernel — the exact top-k / top-p / Quest's pages on chip, the gather of the chosen
// rows of K and V with the exact softmax, SparQ's mean-value term (CUDA.md §2.2).
// Compiled by nvcc through kernels.cuh (or as host C++ under tests/cuda/simt).

#include "attention/cuda/kernels/common.cuh"

namespace sparqlab::attention::cuda::detail {
namespace {

struct SelectParams {
    const void* k;
    const void* v;
    const double* vsum;
    int64_t stride, D;
    int S, g;
    const float* q;
    float scaleLog2;
    float* y;
    float* alpha;
    const float* Z;
    int64_t Spad;
    const float* stats;
    int chunks;
    float* rankBuf; ///< [B·H, Spad] (SumLogits, SumProbs with g > 1)
    int gqa, units, select;
    int nRank, want, lEff, kEff;
    double p;
    int pageSize, f0, pages;
    int meanValue;
    int32_t* selOut;
    int32_t* selCount;
    int64_t selStride;
    int64_t rowBase;          ///< the first (batch row × KV head) of this launch
    const uint32_t* groupMax; ///< step 1's group maxima (ScoreParams::groupMax), or null
    int64_t Gpad;
    int rankReady; ///< rankKernel wrote rankBuf and groupMax (a rule combining the group's heads)
    int fewPasses; ///< Layout::fewPasses
    int prefetch;  ///< Layout::prefetch
    /// Blocks a unit attends its chosen rows with (Layout::selectSplits). With more than one,
    /// the select kernel lists the unit's attended rows (list [B·H·units, listStride], their
    /// count listCount) and each head's α (listAlpha [B·Hq]); selectAttendKernel's blocks each
    /// attend a share of the list into part [B·Hq, splits, D + 2] (o, m, l), and
    /// selectMergeKernel merges them into y.
    int splits;
    float* part;
    int32_t* list;
    int32_t* listCount;
    float* listAlpha;
    int64_t listStride;
};

/// The natural-log softmax state (m, 1/Z) of each of the group's heads over every item of `row`,
/// step 1's chunk states merged — a warp a head, a lane a chunk (a long row has tens of chunks:
/// one thread merging them in turn would wait on each load) — into m[0, g) and invZ[0, g).
__device__ void headStates(const SelectParams& p, int64_t row, float* m, float* invZ) {
    const int lw = threadIdx.x & 31;
    for (int h = threadIdx.x >> 5; h < p.g; h += kWarps) {
        SoftmaxState s;
        for (int c = lw; c < p.chunks; c += 32) {
            const float* st = p.stats + ((row * p.chunks + c) * p.g + h) * 2;
            mergeNat(s, st[0], st[1]);
        }
        warpMergeNat(s);
        if (lw == 0) {
            m[h] = s.m;
            invZ[h] = 1.0f / s.l;
        }
    }
}

/// The group's ranking score of a position from its heads' scores z (SPARQ.md §2.6): the sum of
/// the logits, or of the probabilities under each head's softmax (m, 1/Z).
__device__ __forceinline__ float combinedScore(const float* Zrow, int64_t Spad, int g, int64_t i,
                                               bool probs, const float* m, const float* invZ) {
    float s = 0.0f;
    for (int h = 0; h < g; ++h) {
        const float z = Zrow[h * Spad + i];
        s += probs ? expf(z - m[h]) * invZ[h] : z;
    }
    return s;
}

/// Where the GQA rule combines the group's heads (sum of logits or of probabilities): each
/// position's combined score into rankBuf and the best key of each group of 8 ranked positions
/// into groupMax, a thread a group, over every block of rows × groups — the pass step 2 would
/// otherwise make alone with one block a row; step 2 then reads only the groups whose maximum
/// reaches its threshold, as with one head a group.
__global__ void __launch_bounds__(kThreads) rankKernel(SelectParams p, uint32_t* groupMax) {
    startAfterPrior();
    SPARQLAB_SHARED(float, headM, kMaxHeadsPerGroup);
    SPARQLAB_SHARED(float, headInvZ, kMaxHeadsPerGroup);
    const int64_t row = p.rowBase + blockIdx.y;
    headStates(p, row, headM, headInvZ);
    __syncthreads();
    const int64_t grp = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (grp >= p.Spad / 8) // (Gpad may hold up to 3 groups more: 16-byte rows)
        return;
    const float* Zrow = p.Z + row * p.g * p.Spad;
    const bool probs = p.gqa == static_cast<int>(Gqa::SumProbs);
    float x[8];
    uint32_t gm = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const int64_t i = grp * 8 + e;
        x[e] = i < p.nRank ? combinedScore(Zrow, p.Spad, p.g, i, probs, headM, headInvZ)
                           : -INFINITY; // (past the ranked items Z may be unwritten)
        gm = i < p.nRank ? max(gm, orderedKey(x[e])) : gm;
    }
    float4* out = reinterpret_cast<float4*>(p.rankBuf + row * p.Spad + grp * 8);
    out[0] = make_float4(x[0], x[1], x[2], x[3]);
    out[1] = make_float4(x[4], x[5], x[6], x[7]);
    groupMax[row * p.Gpad + grp] = gm;
}

/// Sorts a[0, n) descending (n a power of two; every thread calls it).
__device__ void bitonicSortDesc(uint64_t* a, int n) {
    for (int size = 2; size <= n; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n / 2; i += kThreads) {
                const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
                const bool desc = (lo & size) == 0;
                const uint64_t x = a[lo], y = a[hi];
                if ((x < y) == desc) {
                    a[lo] = y;
                    a[hi] = x;
                }
            }
            __syncthreads();
        }
}

/// The want-th largest of n keys (1 ≤ want ≤ n) by four 8-bit radix passes, and how many keys
/// equal to it belong to the best `want` (the lowest indices first). keyAt(i) for i < n. With
/// lastShift 16 it stops after two passes: kthOut is then the least key of the want-th largest's
/// 16-bit bucket, a threshold at least `want` keys reach (remainingOut is not defined).
template <typename KeyAt>
__device__ void radixKth(KeyAt keyAt, int n, uint32_t want, uint32_t* hist, uint32_t* warpSums,
                         uint32_t* shared2, uint32_t* kthOut, uint32_t* remainingOut,
                         int lastShift = 0) {
    uint32_t prefix = 0, mask = 0, remaining = want;
    const int lw = threadIdx.x & 31;
    for (int shift = 24; shift >= lastShift; shift -= 8) {
        hist[threadIdx.x] = 0;
        __syncthreads();
#pragma unroll 4
        for (int i0 = 0; i0 < n; i0 += kThreads) {
            const int i = i0 + threadIdx.x;
            uint32_t digit = 256;
            if (i < n) {
                const uint32_t key = keyAt(i);
                if ((key & mask) == prefix)
                    digit = (key >> shift) & 0xFFu;
            }
            const unsigned peers = __match_any_sync(0xffffffffu, digit);
            if (digit < 256 && lw == __ffs(peers) - 1)
                atomicAdd(&hist[digit], static_cast<uint32_t>(__popc(peers)));
        }
        __syncthreads();
        const uint32_t c = hist[255 - threadIdx.x];
        uint32_t total;
        const uint32_t above = blockExclusiveScan(c, warpSums, &total);
        if (digitHolds(above + c, c, remaining)) {
            shared2[0] = 255 - threadIdx.x;
            shared2[1] = remaining - above;
        }
        __syncthreads();
        prefix |= shared2[0] << shift;
        mask |= 0xFFu << shift;
        remaining = shared2[1];
        __syncthreads();
    }
    *kthOut = prefix;
    *remainingOut = remaining;
}

/// Loads of the ranking scores (or their group maxima) a thread has in flight at a time.
constexpr int kIlp = 8;

/// Group maxima a thread holds in the two-stage threshold (G ≤ kThreads · kGroupsPerThread), and
/// the most groups its list of those at or above the first stage's threshold keeps.
constexpr int kGroupsPerThread = 16;
constexpr int kGroupListMax = 1024;

/// Whether the two-stage threshold applies: with `passes` 2, want ≤ kThreads and G ≤ kThreads ·
/// kGroupsPerThread.
__device__ __forceinline__ bool twoStageApplies(int passes, int want, int G) {
    return passes >= 2 && want <= kThreads && G <= kThreads * kGroupsPerThread;
}

/// Where the select kernel's entry copies a row's group maxima for the two-stage threshold: the
/// second half of cand's room (twoStageGroups' own lists take its first 9 KiB).
constexpr int kGroupCopyAt = kCandMax * 8 / 2; // bytes into the dynamic shared memory
static_assert(kGroupCopyAt >= (kThreads + 2 * kGroupListMax) * 4 &&
                  kGroupCopyAt + kThreads * kGroupsPerThread * 4 <= kCandMax * 8,
              "the copied group maxima lie in cand's room, past twoStageGroups' lists");

/// The asynchronous copy of gsrc[0, G) (16-byte aligned) into `to`, 16 bytes a copy, the last
/// one's words past G zeros (the row's Gpad holds them, but no kernel writes them); what it
/// writes is there after the thread's wait (SPARQLAB_COPY_ASYNC_WAIT_ALL) and a barrier.
__device__ __forceinline__ void copyGroupMaxima(const uint32_t* gsrc, int G, uint32_t* to) {
    for (int c = threadIdx.x; 4 * c < G; c += kThreads)
        SPARQLAB_COPY_ASYNC_ZFILL(to + 4 * c, gsrc + 4 * c, 4 * min(4, G - 4 * c));
}

/// The two-stage threshold over the group maxima (twoStageApplies), copied to gm[0, G) by
/// copyGroupMaxima at the kernel's entry: each thread waits for its copies, and after a barrier
/// reads its maxima (groups tid, tid + kThreads, …); T0, the want-th largest of the threads' own
/// maxima (each a distinct group: at least `want` groups reach it), lists the groups ≥ T0; T, the
/// want-th largest of those listed (the least key of its 16-bit bucket), is the threshold, and the
/// groups ≥ T go into keysW, *ngOut of them — the radix passes and the compaction over 256 keys and
/// a list of about `want` instead of all G maxima (4,096 at S = 32k: 16 trips each). False when
/// more than kGroupListMax groups reach T0 (a flat row; nothing written): the one-stage path then.
__device__ bool twoStageGroups(const uint32_t* gm, int G, int want, uint64_t* cand, uint32_t* keysW,
                               uint32_t* hist, uint32_t* warpSums, uint32_t* sh, uint32_t* thrOut,
                               uint32_t* ngOut) {
    const int tid = threadIdx.x, lw = tid & 31;
    uint32_t* own = reinterpret_cast<uint32_t*>(cand); // [kThreads] (cand is not in use yet)
    uint32_t* listKey = own + kThreads;                // [kGroupListMax]
    uint32_t* listGroup = listKey + kGroupListMax;     // [kGroupListMax]
    SPARQLAB_COPY_ASYNC_WAIT_ALL();
    __syncthreads();
    uint32_t v[kGroupsPerThread];
#pragma unroll
    for (int u = 0; u < kGroupsPerThread; ++u) {
        const int j = u * kThreads + tid;
        v[u] = j < G ? gm[j] : 0u;
    }
    uint32_t mine = 0;
#pragma unroll
    for (int u = 0; u < kGroupsPerThread; ++u)
        mine = max(mine, v[u]);
    own[tid] = mine;
    if (tid == 0)
        sh[3] = 0;
    __syncthreads();
    uint32_t t0, rem;
    radixKth([own](int j) { return own[j]; }, kThreads, static_cast<uint32_t>(want), hist, warpSums,
             sh, &t0, &rem, 16);
    uint32_t cnt = 0;
#pragma unroll
    for (int u = 0; u < kGroupsPerThread; ++u)
        cnt += u * kThreads + tid < G && v[u] >= t0;
    uint32_t slot = warpReserve(cnt, &sh[3]);
#pragma unroll
    for (int u = 0; u < kGroupsPerThread; ++u) {
        const int j = u * kThreads + tid;
        if (j < G && v[u] >= t0) {
            if (slot < static_cast<uint32_t>(kGroupListMax)) {
                listKey[slot] = v[u];
                listGroup[slot] = static_cast<uint32_t>(j);
            }
            ++slot;
        }
    }
    __syncthreads();
    const uint32_t nl = sh[3]; // ≥ want
    if (nl > static_cast<uint32_t>(kGroupListMax)) {
        __syncthreads();
        return false;
    }
    uint32_t thr;
    radixKth([listKey](int i) { return listKey[i]; }, static_cast<int>(nl),
             static_cast<uint32_t>(want), hist, warpSums, sh, &thr, &rem, 16);
    if (tid == 0) // (every thread read nl before radixKth's barriers)
        sh[3] = 0;
    __syncthreads();
    for (int i0 = 0; i0 < static_cast<int>(nl); i0 += kThreads) {
        const int i = i0 + tid;
        const bool in = i < static_cast<int>(nl) && listKey[i] >= thr;
        const unsigned b = __ballot_sync(0xffffffffu, in);
        uint32_t at = 0;
        if (lw == 0 && b)
            at = atomicAdd(&sh[3], static_cast<uint32_t>(__popc(b)));
        at = __shfl_sync(0xffffffffu, at, 0) + __popc(b & ((1u << lw) - 1u));
        if (in)
            keysW[at] = listGroup[i];
    }
    __syncthreads();
    *thrOut = thr;
    *ngOut = sh[3];
    __syncthreads();
    return true;
}

/// Candidates through step 1's group maxima (the best key of each group of 8 ranked positions,
/// gsrc[0, G), want ≤ G): T, the want-th largest of the maxima — with `passes` 1 the least key
/// of its 16-bit bucket, with 2 found in two stages where they apply (twoStageGroups) — leaves
/// at least `want` positions ≥ T, all in the groups whose maximum is ≥ T, and only those
/// groups' scores are read again: their positions ≥ T into cand (unordered, at most kCandMax
/// kept), *ncOut how many. False when more than kMaxW groups reach T (nothing collected;
/// *thrOut, a threshold at least `want` positions reach, still holds). Where twoStageApplies,
/// the kernel's entry has copied gsrc to `copied` (copyGroupMaxima).
__device__ bool groupCandidates(const uint32_t* gsrc, const uint32_t* copied, int G, int want,
                                const float* rank, int nRank, int passes, uint64_t* cand,
                                uint32_t* keysW, uint32_t* hist, uint32_t* warpSums, uint32_t* sh,
                                uint32_t* thrOut, uint32_t* ncOut) {
    const int tid = threadIdx.x;
    uint32_t thr = 0, ng = 0;
    const bool twoStage =
        twoStageApplies(passes, want, G) &&
        twoStageGroups(copied, G, want, cand, keysW, hist, warpSums, sh, &thr, &ng);
    if (tid == 0)
        SPARQLAB_NOTE_PATH(twoStage ? notedPath::kTwoStages : notedPath::kOneStage);
    if (!twoStage) {
        uint32_t* gm = reinterpret_cast<uint32_t*>(cand); // [G] (cand is not in use yet)
        for (int j0 = 0; j0 < G; j0 += kIlp * kThreads) {
            uint32_t v[kIlp];
#pragma unroll
            for (int u = 0; u < kIlp; ++u) {
                const int j = j0 + u * kThreads + tid;
                v[u] = j < G ? gsrc[j] : 0u;
            }
#pragma unroll
            for (int u = 0; u < kIlp; ++u) {
                const int j = j0 + u * kThreads + tid;
                if (j < G)
                    gm[j] = v[u];
            }
        }
        __syncthreads();
        uint32_t rem;
        radixKth([gm](int j) { return gm[j]; }, G, static_cast<uint32_t>(want), hist, warpSums, sh,
                 &thr, &rem, passes > 0 ? 16 : 0);
        // The groups at or above T, into keysW (at most kMaxW of them).
        if (tid == 0)
            sh[3] = 0;
        __syncthreads();
        const int lw = tid & 31;
        for (int j0 = 0; j0 < G; j0 += kThreads) {
            const int j = j0 + tid;
            const bool in = j < G && gm[j] >= thr;
            const unsigned b = __ballot_sync(0xffffffffu, in);
            uint32_t at = 0;
            if (lw == 0 && b)
                at = atomicAdd(&sh[3], static_cast<uint32_t>(__popc(b)));
            at = __shfl_sync(0xffffffffu, at, 0) + __popc(b & ((1u << lw) - 1u));
            if (in && at < static_cast<uint32_t>(kMaxW))
                keysW[at] = static_cast<uint32_t>(j);
        }
        __syncthreads();
        ng = sh[3];
    }
    *thrOut = thr;
    if (ng > static_cast<uint32_t>(kMaxW)) {
        __syncthreads();
        return false;
    }
    // Their positions ≥ T into cand (gm is done with).
    if (tid == 0)
        sh[2] = 0;
    __syncthreads();
#pragma unroll 2
    for (int j0 = 0; j0 < static_cast<int>(ng); j0 += kThreads) {
        const int j = j0 + tid;
        uint32_t k[8];
        bool ok[8];
        uint32_t cnt = 0;
        if (j < static_cast<int>(ng)) {
            const int base = 8 * static_cast<int>(keysW[j]);
            const float4 a = *reinterpret_cast<const float4*>(rank + base);
            const float4 b4 = *reinterpret_cast<const float4*>(rank + base + 4);
            const float x[8] = {a.x, a.y, a.z, a.w, b4.x, b4.y, b4.z, b4.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                k[e] = orderedKey(x[e]);
                ok[e] = base + e < nRank && k[e] >= thr;
                cnt += ok[e];
            }
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                k[e] = 0;
                ok[e] = false;
            }
        }
        uint32_t slot = warpReserve(cnt, &sh[2]);
        if (j < static_cast<int>(ng)) {
            const int base = 8 * static_cast<int>(keysW[j]);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (ok[e]) {
                    if (slot < static_cast<uint32_t>(kCandMax))
                        cand[slot] = rankedItem(k[e], static_cast<uint32_t>(base + e));
                    ++slot;
                }
        }
    }
    __syncthreads();
    *ncOut = sh[2];
    __syncthreads();
    return true;
}

/// The best `want` of nc ≤ kThreads distinct candidates cand[0, nc) (want ≤ nc), ranked in one
/// pass: each thread ranks its own among them by the 64-bit item (the key, then the lower index:
/// the CPU's order) and puts it at its rank — into sel[0, want) (int32 positions, top-k), or
/// cand[0, nc) reordered best first (top-p). sel aliases cand: every thread has read cand
/// before any writes.
__device__ void rankFewCandidates(uint64_t* cand, int32_t* sel, int nc, int want, bool topP) {
    const int tid = threadIdx.x;
    const bool mine = tid < nc;
    const uint64_t item = mine ? cand[tid] : 0;
    uint32_t at = 0;
    for (int j = 0; j < nc; ++j)
        at += cand[j] > item;
    __syncthreads();
    if (mine && topP)
        cand[at] = item;
    else if (mine && at < static_cast<uint32_t>(want))
        sel[at] = static_cast<int>(itemIndex(item));
    __syncthreads();
}

/// The best `want` of the nRank keys keyAt(i) by an exact radix select over the whole row, in
/// index order (the ties at the k-th value lowest index first): into sel[0, want) (top-k) or as
/// items into cand[0, want) (top-p, unsorted). Each thread takes a contiguous segment of the row
/// (a multiple of 8 positions: each 8 loads one 32-byte sector of the row, padded to 8) and
/// counts the keys above and at the k-th with its loads in flight together; one block scan of
/// each gives its offset; a second pass writes its chosen there.
template <typename KeyAt>
__device__ void wholeRowSelect(KeyAt keyAt, int nRank, int want, bool topP, uint64_t* cand,
                               int32_t* sel, uint32_t* hist, uint32_t* warpSums, uint32_t* sh) {
    uint32_t kth, remaining;
    radixKth(keyAt, nRank, static_cast<uint32_t>(want), hist, warpSums, sh, &kth, &remaining);
    const int per = ((nRank + kThreads - 1) / kThreads + 7) / 8 * 8;
    const int a0 = min(nRank, static_cast<int>(threadIdx.x) * per), a1 = min(nRank, a0 + per);
    uint32_t gtN = 0, eqN = 0;
#pragma unroll 8
    for (int i = a0; i < a1; ++i) {
        const uint32_t key = keyAt(i);
        gtN += key > kth;
        eqN += key == kth;
    }
    uint32_t eqTotal, takeTotal;
    const uint32_t eqBefore = blockExclusiveScan<uint32_t>(eqN, warpSums, &eqTotal);
    const uint32_t eqTake = eqBefore >= remaining ? 0u : min(eqN, remaining - eqBefore);
    uint32_t pos = blockExclusiveScan<uint32_t>(gtN + eqTake, warpSums, &takeTotal);
    uint32_t eqSeen = 0;
#pragma unroll 8
    for (int i = a0; i < a1; ++i) {
        const uint32_t key = keyAt(i);
        if (key > kth || (key == kth && eqSeen++ < eqTake)) {
            if (topP)
                cand[pos] = rankedItem(key, static_cast<uint32_t>(i));
            else
                sel[pos] = i;
            ++pos;
        }
    }
    __syncthreads();
}

/// Whether step 2's candidates come through step 1's group maxima (groupCandidates): a row
/// longer than `want` whose G maxima number at least `want` and at most 2 · kCandMax.
__device__ __forceinline__ bool viaGroupMaxima(const SelectParams& p) {
    const int G = (p.nRank + 7) / 8;
    return p.groupMax && p.want > 0 && p.want < p.nRank && p.want <= G && G <= 2 * kCandMax;
}

/// Blocks an SM (the registers' bound): with one head a tile over 2-byte storage 4 (64 registers;
/// ptxas spills 12–16 bytes, stored and loaded outside the gather's loop: scripts/sass.sh
/// --spills), so that with selectSmemBytes' ~51 KiB four blocks are resident where three were:
/// at B = 64 step 2 is ~5 waves of latency-bound blocks (CUDA.md §2.2, "Blocks an SM").
template <typename T, int GT>
constexpr int kSelectBlocks = sizeof(T) == 4 ? (GT == 1 ? 2 : 1) : (GT == 1 ? 4 : 2);

template <typename T, int L, int GT>
__global__ void __launch_bounds__(kThreads, kSelectBlocks<T, GT>) selectKernel(SelectParams p) {
    startAfterPrior();
    SPARQLAB_DYNAMIC_SHARED(unsigned char, smemRaw);
    uint64_t* cand = reinterpret_cast<uint64_t*>(smemRaw);
    int32_t* sel = reinterpret_cast<int32_t*>(smemRaw);
    uint32_t* keysW = reinterpret_cast<uint32_t*>(smemRaw + kCandMax * 8);
    // The attention's merge buffer shares keysW's room: the selection is done (and a barrier
    // passed) before the gather writes it.
    float* mergeBuf = reinterpret_cast<float*>(keysW);
    static_assert(kWarps * (256 + 2) <= kMaxW, "the merge buffer fits in keysW's room");
    uint32_t* hist = keysW + kMaxW;
    float* headM = reinterpret_cast<float*>(hist + 256);
    float* headInvZ = headM + kMaxHeadsPerGroup;
    float* headAlpha = headInvZ + kMaxHeadsPerGroup;
    SPARQLAB_SHARED(uint32_t, warpSums, kWarps);
    SPARQLAB_SHARED(double, warpSumsD, kWarps);
    SPARQLAB_SHARED(float, warpSumsF, kWarps);
    SPARQLAB_SHARED(uint32_t, sh, 8);
    SPARQLAB_SHARED(int, shInt, 4);

    const int tid = threadIdx.x;
    const int64_t row = p.rowBase + blockIdx.x / p.units;
    const int unit = blockIdx.x % p.units;
    const int g = p.g;
    const int hA = p.units > 1 ? unit : 0, nhU = p.units > 1 ? 1 : g;
    const int64_t D = p.D;
    // Where the candidates will come through step 1's group maxima with the two-stage threshold
    // (below), the row's maxima are copied into shared memory now, before the heads' states are
    // merged: the kernel's first two round trips to L2 overlap, and no register holds them.
    uint32_t* gCopy = reinterpret_cast<uint32_t*>(smemRaw + kGroupCopyAt);
    if (viaGroupMaxima(p) && twoStageApplies(p.fewPasses, p.want, (p.nRank + 7) / 8))
        copyGroupMaxima(p.groupMax + (row * p.units + unit) * p.Gpad, (p.nRank + 7) / 8, gCopy);

    // The heads' softmax normalisers over every item (the chunks' states merged).
    headStates(p, row, headM, headInvZ);
    __syncthreads();

    // The ranking score (SPARQ.md §2.6): one head's own scores, or the group's sum of logits or
    // of probabilities (written once to rankBuf).
    const float* Zrow = p.Z + row * g * p.Spad;
    const float* rank = Zrow + static_cast<int64_t>(hA) * p.Spad;
    const bool combined = g > 1 && p.units == 1 && p.gqa != static_cast<int>(Gqa::PerHead);
    if (combined) {
        float* R = p.rankBuf + row * p.Spad;
        if (!p.rankReady) {
            const bool probs = p.gqa == static_cast<int>(Gqa::SumProbs);
            for (int i = tid; i < p.nRank; i += kThreads)
                R[i] = combinedScore(Zrow, p.Spad, g, i, probs, headM, headInvZ);
            __syncthreads();
        }
        rank = R;
    }
    auto keyAt = [rank](int i) { return orderedKey(rank[i]); };

    // Step 2: the best `want` of the nRank ranked items (SPARQ.md §2.3), read four at a time.
    const int nRank = p.nRank, want = p.want;
    const int n4 = (nRank + 3) / 4;
    const bool topP = p.select == static_cast<int>(Select::TopP);
    // The keys of items 4c … 4c + 3 (0 and invalid past nRank; rank rows are padded to 8), read
    // kIlp chunks a thread at a time so that that many loads are in flight.
    auto load4 = [rank, n4](int c) {
        return c < n4 ? *reinterpret_cast<const float4*>(rank + 4 * static_cast<int64_t>(c))
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    };
    auto keys4 = [nRank](const float4& v, int c, uint32_t(&k)[4], bool(&ok)[4]) {
        const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            ok[e] = 4 * c + e < nRank;
            k[e] = ok[e] ? orderedKey(x[e]) : 0u;
        }
    };
    // Every ranked item with a key ≥ thr into cand (unordered, at most kCandMax kept); how many.
    auto collect = [&](uint32_t thr) -> uint32_t {
        if (tid == 0)
            sh[2] = 0;
        __syncthreads();
        for (int c0 = 0; c0 < n4; c0 += kIlp * kThreads) {
            float4 v[kIlp];
#pragma unroll
            for (int u = 0; u < kIlp; ++u)
                v[u] = load4(c0 + u * kThreads + tid);
            uint32_t k[kIlp][4];
            bool ok[kIlp][4];
            uint32_t cnt = 0;
#pragma unroll
            for (int u = 0; u < kIlp; ++u) {
                keys4(v[u], c0 + u * kThreads + tid, k[u], ok[u]);
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    cnt += ok[u][e] && k[u][e] >= thr;
            }
            uint32_t slot = warpReserve(cnt, &sh[2]);
#pragma unroll
            for (int u = 0; u < kIlp; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (ok[u][e] && k[u][e] >= thr) {
                        if (slot < static_cast<uint32_t>(kCandMax))
                            cand[slot] = rankedItem(
                                k[u][e], static_cast<uint32_t>(4 * (c0 + u * kThreads + tid) + e));
                        ++slot;
                    }
        }
        __syncthreads();
        const uint32_t nc = sh[2];
        __syncthreads();
        return nc;
    };
    auto sortCandidates = [&](int nc) { // cand[0, nc) best first
        int n2 = 1;
        while (n2 < nc)
            n2 <<= 1;
        for (int i = nc + tid; i < n2; i += kThreads)
            cand[i] = 0;
        __syncthreads();
        bitonicSortDesc(cand, n2);
    };
    bool sorted = false; // the chosen are cand[0, want), best first
    bool listed = false; // the chosen are sel[0, want), in any order
    if (want >= nRank) {
        if (topP) {
            for (int i = tid; i < nRank; i += kThreads)
                cand[i] = rankedItem(keyAt(i), static_cast<uint32_t>(i));
            __syncthreads();
            sortCandidates(nRank);
            sorted = true;
        } else {
            for (int i = tid; i < nRank; i += kThreads)
                sel[i] = i;
            listed = true;
        }
    } else if (want > 0) {
        // Candidates: every item of a short row; on a long one those ≥ T, the want-th largest
        // of the maxima of 2·want disjoint groups (the chunks of four items c ≡ j mod 2·want):
        // each such maximum is a distinct item ≥ T, so at least `want` items qualify (the CPU
        // kernels' threshold, topBySelection; here from n ≥ 1024 and n ≥ 8·want).
        uint32_t thr = 0;
        bool filtered = false;
        uint32_t nc = kCandMax + 1u;
        bool collected = false; // the candidates are in cand (nc of them)
        const int G = (nRank + 7) / 8;
        if (viaGroupMaxima(p)) {
            const uint32_t* gsrc = p.groupMax + (row * p.units + unit) * p.Gpad;
            filtered = collected = groupCandidates(gsrc, gCopy, G, want, rank, nRank, p.fewPasses,
                                                   cand, keysW, hist, warpSums, sh, &thr, &nc);
        }
        if (!filtered && 2 * want <= kMaxW && nRank >= 8 * want && nRank >= 1024) {
            const int W = 2 * want;
            for (int j = tid; j < W; j += kThreads)
                keysW[j] = 0;
            __syncthreads();
            for (int c0 = 0; c0 < n4; c0 += kIlp * kThreads) {
                float4 v[kIlp];
#pragma unroll
                for (int u = 0; u < kIlp; ++u)
                    v[u] = load4(c0 + u * kThreads + tid);
#pragma unroll
                for (int u = 0; u < kIlp; ++u) {
                    const int c = c0 + u * kThreads + tid;
                    if (c < n4) {
                        uint32_t k[4];
                        bool ok[4];
                        keys4(v[u], c, k, ok);
                        uint32_t m = 0;
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            m = ok[e] ? max(m, k[e]) : m;
                        atomicMax(&keysW[c % W], m);
                    }
                }
            }
            __syncthreads();
            uint32_t rem;
            radixKth([keysW](int j) { return keysW[j]; }, W, static_cast<uint32_t>(want), hist,
                     warpSums, sh, &thr, &rem, p.fewPasses ? 16 : 0);
            filtered = true;
        }
        if (collected && nc < static_cast<uint32_t>(want)) {
            // (Only when the group maxima do not match the scores — step 2 timed alone over a
            // stale workspace: never pick from fewer than `want` candidates.)
            collected = filtered = false;
            thr = 0;
            nc = kCandMax + 1u; // (a long row: the exact select over the whole row)
            if (tid == 0)
                SPARQLAB_NOTE_PATH(notedPath::kTooFew);
        }
        if (!collected && (filtered || nRank <= kCandMax))
            nc = collect(thr);
        // Few candidates, about `want` of them: their rows of K and V asked for into L2 now, so
        // that the ranking and α hide the wait the gather would have (not Quest's pages).
        if (p.prefetch && nc <= static_cast<uint32_t>(kThreads) && tid < static_cast<int>(nc) &&
            p.select != static_cast<int>(Select::Pages))
            prefetchRows(p.k, p.v, row, p.stride, D, static_cast<int>(sizeof(T)),
                         static_cast<int64_t>(itemIndex(cand[tid])));
        if (p.fewPasses && nc <= static_cast<uint32_t>(kThreads)) {
            if (tid == 0)
                SPARQLAB_NOTE_PATH(notedPath::kOnePass);
            rankFewCandidates(cand, sel, static_cast<int>(nc), want, topP);
            sorted = topP;
            listed = !topP;
        }
        if (nc <= static_cast<uint32_t>(kCandMax) && !sorted && !listed) {
            if (!topP) {
                // The want-th largest candidate; when the candidates equal to it are exactly the
                // ties to take (no tie to break by index), the chosen are those ≥ it, unsorted.
                uint32_t kth, rem;
                radixKth([cand](int i) { return itemKey(cand[i]); }, static_cast<int>(nc),
                         static_cast<uint32_t>(want), hist, warpSums, sh, &kth, &rem);
                constexpr int kPer = kCandMax / kThreads;
                int idx[kPer];
                bool take[kPer];
                uint32_t eq = 0, cnt = 0;
#pragma unroll
                for (int j = 0; j < kPer; ++j) {
                    const int i = tid + j * kThreads;
                    const uint64_t it = i < static_cast<int>(nc) ? cand[i] : 0;
                    const uint32_t key = itemKey(it);
                    take[j] = i < static_cast<int>(nc) && key >= kth;
                    eq += i < static_cast<int>(nc) && key == kth;
                    idx[j] = static_cast<int>(itemIndex(it));
                    cnt += take[j];
                }
                const uint32_t eqTotal = blockSum<uint32_t>(eq, warpSums);
                if (eqTotal == rem) {
                    uint32_t total;
                    uint32_t pos = blockExclusiveScan<uint32_t>(cnt, warpSums, &total);
#pragma unroll
                    for (int j = 0; j < kPer; ++j)
                        if (take[j])
                            sel[pos++] = idx[j];
                    listed = true;
                }
                __syncthreads();
            }
            if (!listed) {
                sortCandidates(static_cast<int>(nc));
                sorted = true;
            }
        }
        if (!sorted && !listed) { // exact radix select over the whole row, in index order
            if (tid == 0)
                SPARQLAB_NOTE_PATH(notedPath::kWholeRow);
            wholeRowSelect(keyAt, nRank, want, topP, cand, sel, hist, warpSums, sh);
            if (topP) { // the budget needs them best first
                sortCandidates(want);
                sorted = true;
            } else {
                listed = true;
            }
        }
    }
    __syncthreads();

    // The top-p budget (METHODS.md §6.1): the unit's mass of the local window first, then of
    // the chosen best first, until it reaches p; at least max(1, l), at most k.
    int nSel = want;
    const float wUnit = 1.0f / static_cast<float>(nhU);
    auto massOf = [&](int j) {
        float m = 0.0f;
        for (int h = hA; h < hA + nhU; ++h)
            m += expf(Zrow[h * p.Spad + j] - headM[h]) * headInvZ[h];
        return m * wUnit;
    };
    if (topP && p.p < 1.0) {
        double local = 0;
        for (int j = nRank + tid; j < p.S; j += kThreads)
            local += static_cast<double>(massOf(j));
        const double cum0 = blockSum<double>(local, warpSumsD);
        if (tid == 0)
            shInt[0] = 0x7fffffff; // the first rank reaching p (none yet)
        __syncthreads();
        const int per = (want + kThreads - 1) / kThreads;
        const int a0 = min(want, tid * per), a1 = min(want, a0 + per);
        double mine = 0;
        for (int t = a0; t < a1; ++t)
            mine += static_cast<double>(massOf(static_cast<int>(itemIndex(cand[t]))));
        double total;
        double run = cum0 + blockExclusiveScan<double>(mine, warpSumsD, &total);
        for (int t = a0; t < a1; ++t) {
            run += static_cast<double>(massOf(static_cast<int>(itemIndex(cand[t]))));
            if (run >= p.p) {
                atomicMin(&shInt[0], t);
                break;
            }
        }
        __syncthreads();
        const int first = shInt[0];
        const int64_t np = p.lEff > 0 && cum0 >= p.p ? p.lEff
                           : first != 0x7fffffff     ? p.lEff + first + 1
                                                     : -1;
        const int64_t count = topPCount(np, p.lEff, p.kEff);
        nSel = static_cast<int>(count - p.lEff);
        __syncthreads();
    }

    // The chosen as int32 positions (or pages) in sel[0, nSel).
    if (sorted) {
        int tmp[kCandMax / kThreads];
#pragma unroll
        for (int j = 0; j < kCandMax / kThreads; ++j) {
            const int t = tid + j * kThreads;
            tmp[j] = t < nSel ? static_cast<int>(itemIndex(cand[t])) : 0;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kCandMax / kThreads; ++j) {
            const int t = tid + j * kThreads;
            if (t < nSel)
                sel[t] = tmp[j];
        }
        __syncthreads();
    }
    const bool pages = p.select == static_cast<int>(Select::Pages);
    int n; // rows attended
    if (pages) {
        const int forced = p.pages - p.f0;
        for (int i = tid; i < forced; i += kThreads)
            sel[nSel + i] = p.f0 + i;
        __syncthreads();
        const int chosen = nSel + forced;
        n = (chosen - 1) * p.pageSize + (p.S - (p.pages - 1) * p.pageSize);
    } else {
        n = nSel + p.lEff;
    }
    const int P = p.pageSize, nS = nSel, nR = nRank;
    auto rowOf = [=](int t) -> int64_t {
        if (pages)
            return static_cast<int64_t>(sel[t / P]) * P + t % P;
        return t < nS ? sel[t] : nR + (t - nS);
    };

    if (p.selOut) {
        int32_t* out = p.selOut + (row * p.units + unit) * p.selStride;
        for (int t = tid; t < p.selStride; t += kThreads)
            out[t] = t < n ? static_cast<int32_t>(rowOf(t)) : -1;
        if (tid == 0)
            p.selCount[row * p.units + unit] = n;
    }

    // α (Eq. 10): each head's approximate mass on what is attended.
    for (int h = hA; h < hA + nhU; ++h) {
        float a = 1.0f;
        if (p.meanValue) {
            const float* zh = Zrow + h * p.Spad;
            float s = 0.0f;
#pragma unroll 4
            for (int t = tid; t < n; t += kThreads)
                s += expf(zh[rowOf(t)] - headM[h]);
            a = blockSum<float>(s, warpSumsF) * headInvZ[h];
        }
        if (tid == 0)
            headAlpha[h] = a;
    }
    __syncthreads();

    if (p.splits > 1) { // the attention is selectAttendKernel's, over the list
        const int64_t u = row * p.units + unit;
        int32_t* out = p.list + u * p.listStride;
        for (int t = tid; t < n; t += kThreads)
            out[t] = static_cast<int32_t>(rowOf(t));
        if (tid == 0)
            p.listCount[u] = n;
        for (int h = hA + tid; h < hA + nhU; h += kThreads)
            p.listAlpha[row * g + h] = headAlpha[h];
        return;
    }

    // Exact attention over the chosen rows (Eq. 8), then y = α·y_top + (1 − α)·v̄ (Eq. 10).
    const double invS = 1.0 / static_cast<double>(p.S);
    // v̄'s row asked for into L2 now, so that the merge's reads after the gather find it there
    // (a load into registers here would hold two of them through the gather).
    if (p.meanValue && tid * 16 < D)
        prefetchL2(p.vsum + row * D + tid * 16);
    attendHeads<T, L, GT>(p.k, p.v, p.q, p.scaleLog2, row, p.stride, D, g, hA, hA + nhU, rowOf, n,
                          mergeBuf, [&](int h, int d, float o, float l, float) {
                              const int64_t hq = row * g + h;
                              const float al = headAlpha[h];
                              // (v̄ read only with the mean value: without it vsum may be
                              // absent)
                              const double vs = p.meanValue ? p.vsum[row * D + d] : 0.0;
                              const float vbar = static_cast<float>(vs * invS);
                              p.y[hq * D + d] =
                                  p.meanValue ? al * (o / l) + (1.0f - al) * vbar : o / l;
                              if (d == 0 && p.alpha)
                                  p.alpha[hq] = al;
                          });
}

/// Step 2's attention over the select kernel's list of a unit's attended rows, split over
/// blocks (blockIdx.x: the split, each a contiguous share of the list; blockIdx.y: the unit of
/// the launch's rows): each split's partial state (o, m, l) of each of the unit's heads.
template <typename T, int L, int GT>
__global__ void __launch_bounds__(kThreads) selectAttendKernel(SelectParams p) {
    startAfterPrior();
    SPARQLAB_DYNAMIC_SHARED(float, mergeBuf);
    const int split = blockIdx.x;
    const int64_t u = p.rowBase * p.units + blockIdx.y, row = u / p.units;
    const int unit = static_cast<int>(u % p.units);
    const int g = p.g;
    const int hA = p.units > 1 ? unit : 0, nhU = p.units > 1 ? 1 : g;
    const int64_t D = p.D;
    const int n = p.listCount[u];
    const int t0 = static_cast<int>(static_cast<int64_t>(n) * split / p.splits);
    const int t1 = static_cast<int>(static_cast<int64_t>(n) * (split + 1) / p.splits);
    const int32_t* list = p.list + u * p.listStride + t0;
    attendHeads<T, L, GT>(
        p.k, p.v, p.q, p.scaleLog2, row, p.stride, D, g, hA, hA + nhU,
        [list](int t) { return static_cast<int64_t>(list[t]); }, t1 - t0, mergeBuf,
        [&](int h, int d, float o, float l, float M) {
            float* P = p.part + ((row * g + h) * p.splits + split) * (D + 2);
            P[d] = o;
            if (d == 0) {
                P[D] = M;
                P[D + 1] = l;
            }
        });
}

/// One query head's splits of step 2 merged (their partial states rescaled by exp2(m_s − m)),
/// then Eq. 10 with the head's α from the select kernel: a block a query head of the launch's
/// rows.
__global__ void __launch_bounds__(128) selectMergeKernel(SelectParams p) {
    startAfterPrior();
    const int64_t hq = p.rowBase * p.g + blockIdx.x, row = hq / p.g;
    const int64_t D = p.D, rec = D + 2;
    const float* base = p.part + hq * p.splits * rec;
    float M = -INFINITY;
    for (int s = 0; s < p.splits; ++s)
        M = fmaxf(M, base[s * rec + D]);
    const float al = p.listAlpha[hq];
    const double invS = 1.0 / static_cast<double>(p.S);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        const float yTop = mergedSplits(base, p.splits, rec, D, d, M);
        const float vbar = p.meanValue ? static_cast<float>(p.vsum[row * D + d] * invS) : 0.0f;
        p.y[hq * D + d] = p.meanValue ? al * yTop + (1.0f - al) * vbar : yTop;
    }
    if (threadIdx.x == 0 && p.alpha)
        p.alpha[hq] = al;
}

} // namespace
} // namespace sparqlab::attention::cuda::detail
