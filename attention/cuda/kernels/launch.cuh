#pragma once
// The launchers: occupancy, shared memory limits, the side stream, and the launches of a
// step from its plan (CUDA.md §3).
// Compiled by nvcc through kernels.cuh (or as host C++ under tests/cuda/simt).

#include "attention/cuda/kernels/dense.cuh"
#include "attention/cuda/kernels/score.cuh"
#include "attention/cuda/kernels/select.cuh"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sparqlab::attention::cuda::detail {
namespace {

/// The dense kernel's blocks a GPU holds at once (per device: they may differ in kind).
template <typename T, int L, int GT> int denseResident() {
    static std::mutex mu;
    static std::map<int, int> perSm; // by device
    const Device& dev = device();
    std::lock_guard<std::mutex> lock(mu);
    int& n = perSm[dev.id];
    if (n < 1) {
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, denseKernel<T, L, GT>, kThreads,
                                                            kWarps * (256 + 2) * sizeof(float)),
              "occupancy");
        n = std::max(n, 1);
    }
    return n * dev.sms;
}

template <typename T, int L> int denseResidentL(int gt) {
    switch (gt) {
    case 1:
        return denseResident<T, L, 1>();
    case 2:
        return denseResident<T, L, 2>();
    case 4:
        return denseResident<T, L, 4>();
    default:
        return denseResident<T, L, 8>();
    }
}
template <typename T> int denseResidentForT(int lanes, int gt) {
    return lanes == 8    ? denseResidentL<T, 8>(gt)
           : lanes == 16 ? denseResidentL<T, 16>(gt)
                         : denseResidentL<T, 32>(gt);
}

/// Raises a kernel's dynamic shared memory limit to `bytes` (beyond the default 48 KiB), once per
/// kernel, device and size (the attribute is the current device's alone). `maxShared`: the kernel
/// also asks for the largest shared memory carveout, so that the blocks its registers allow fit
/// (the staged step 1 and the select kernel: four blocks of 36 and 52 KiB; the default is a hint
/// the driver may settle otherwise), its L1 the smaller for it (their loads of K and V read once).
template <typename F> void setSmem(F* kernel, size_t bytes, bool maxShared = false) {
    if (bytes <= 48 * 1024 && !maxShared)
        return;
    const int dev = device().id;
    struct Set {
        size_t bytes = 0;
        bool maxShared = false;
    };
    // Each kernel's attributes as this thread set them (no lock on the way of every launch; a
    // second thread sets them again, which is harmless).
    static thread_local std::map<std::pair<int, const void*>, Set> done;
    Set& at = done[{dev, reinterpret_cast<const void*>(kernel)}];
    if (bytes > 48 * 1024 && bytes > at.bytes) {
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)),
              "shared memory attribute");
        at.bytes = bytes;
    }
    if (maxShared && !at.maxShared) {
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   static_cast<int>(cudaSharedmemCarveoutMaxShared)),
              "shared memory carveout");
        at.maxShared = true;
    }
}

template <typename T, int L, int GT>
void launchDenseT(const DenseParams& p, int64_t rows, cudaStream_t s) {
    const size_t smem = kWarps * (p.D + 2) * sizeof(float);
    SPARQLAB_LAUNCH_AFTER(dim3(p.splits, static_cast<unsigned>(rows)), kThreads, smem, s,
                          denseKernel<T, L, GT>)
    (p);
    check(cudaGetLastError(), "dense kernel");
    if (p.splits > 1) {
        SPARQLAB_LAUNCH_AFTER(static_cast<unsigned>(rows * p.g), 128, 0, s, denseMergeKernel)(p);
        check(cudaGetLastError(), "dense merge kernel");
    }
}

template <typename T, int L>
void launchDenseL(const DenseParams& p, int64_t rows, int gt, cudaStream_t s) {
    switch (gt) {
    case 1:
        return launchDenseT<T, L, 1>(p, rows, s);
    case 2:
        return launchDenseT<T, L, 2>(p, rows, s);
    case 4:
        return launchDenseT<T, L, 4>(p, rows, s);
    default:
        return launchDenseT<T, L, 8>(p, rows, s);
    }
}

/// A stream of this thread's beside the caller's, and events to order them: step 2 of one part
/// of the rows runs there while step 1 of the next part runs on the caller's stream. Made once
/// per thread and device (outside any graph capture: a step runs once before it is recorded).
struct SideStream {
    static constexpr int kParts = 4;
    int device = -1;
    cudaStream_t stream = nullptr;
    cudaEvent_t part[kParts] = {}, join = nullptr;
};
SideStream& sideStream() {
    thread_local SideStream side;
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    if (side.device != dev) {
        check(cudaStreamCreateWithFlags(&side.stream, cudaStreamNonBlocking), "side stream");
        for (cudaEvent_t& e : side.part)
            check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
        check(cudaEventCreateWithFlags(&side.join, cudaEventDisableTiming), "event");
        side.device = dev;
    }
    return side;
}

/// f(L, GT) with the lanes per row (8, 16 or 32) and step 2's head tile (1 for one head a unit,
/// else 4) as compile-time constants: the select kernels' instantiations.
template <typename F> void byLanesAndTile(int lanes, bool one, F&& f) {
    auto tile = [&](auto L) {
        if (one)
            f(L, std::integral_constant<int, 1>{});
        else
            f(L, std::integral_constant<int, 4>{});
    };
    switch (lanes) {
    case 8:
        return tile(std::integral_constant<int, 8>{});
    case 16:
        return tile(std::integral_constant<int, 16>{});
    default:
        return tile(std::integral_constant<int, 32>{});
    }
}

template <typename T>
void launchSelectingT(const CacheView& c, const Request& r, const Layout& l, char* ws,
                      cudaStream_t s) {
    const int64_t rows = c.B * c.H, g = r.Hq / c.H;
    float* Z = reinterpret_cast<float*>(ws);
    float* stats = reinterpret_cast<float*>(ws + (l.zBytes + 255) / 256 * 256);
    auto up = [](size_t b) { return (b + 255) / 256 * 256; };
    float* rankBuf = reinterpret_cast<float*>(ws + up(l.zBytes) + up(l.statsBytes));
    uint32_t* groupMax =
        l.groups
            ? reinterpret_cast<uint32_t*>(ws + up(l.zBytes) + up(l.statsBytes) + up(l.rankBytes))
            : nullptr;
    const int64_t nRankAll =
        r.select == Select::Pages ? l.pages.f0 : c.S - std::min(r.local, std::min(r.k, c.S));

    ScoreParams sp{};
    sp.q = r.q;
    sp.stride = c.stride;
    sp.D = c.D;
    sp.S = static_cast<int>(c.S);
    sp.g = static_cast<int>(g);
    sp.H = static_cast<int>(c.H);
    sp.r = static_cast<int>(r.r);
    sp.rowsKind = static_cast<int>(r.rows);
    sp.tau = r.tau;
    sp.tauValue = r.tauValue;
    sp.defaultScale = r.defaultScale;
    sp.scale = r.scale;
    sp.basis = c.basis;
    sp.channels = r.channels;
    sp.Z = Z;
    sp.Spad = l.Spad;
    sp.nItems = static_cast<int>(l.nItems);
    sp.stats = stats;
    sp.chunks = static_cast<int>(l.chunks);
    sp.chunkLen = static_cast<int>(l.chunkLen);
    const bool bound = r.score == Score::PageBound;
    sp.bound = bound;
    sp.items = bound ? c.pmax : c.k;
    sp.items2 = bound ? c.pmin : nullptr;
    sp.itemStride = bound ? c.pagesCap : c.stride;
    sp.rows = r.rows == Rows::Basis ? c.kp : c.kt;
    sp.groupMax = l.rankKernel ? nullptr : groupMax; // (else the rank kernel writes them)
    sp.Gpad = l.Gpad;
    sp.nRank = static_cast<int>(nRankAll);
    sp.gUnits = static_cast<int>(l.units);
    const bool staged = l.staged; // (2-byte storage only: layoutOf)
    const size_t lowRankSmem = lowRankSmemBytes(g, r.r, r.rows == Rows::Channels, staged);
    // Timing step 2 alone (SPARQLAB_CUDA_STAGES=2) needs a real step 1's output in the workspace,
    // or step 2 would read whatever memory held: step 1 still runs at the first launch into each
    // workspace at each shape.
    bool leaveOut1 = false;
    if (!(l.stages & 1)) {
        static thread_local std::set<std::tuple<const char*, int64_t, int64_t, int64_t>> primed;
        leaveOut1 = !primed.insert({ws, c.S, rows, g}).second;
    }
    // Step 1 of rows [row0, row0 + n) on stream st.
    auto step1 = [&](int64_t row0, int64_t n, cudaStream_t st) {
        if (leaveOut1)
            return; // (left out: timing step 2 alone)
        ScoreParams pp = sp;
        pp.rowBase = row0;
        const dim3 grid(static_cast<unsigned>(l.chunks), static_cast<unsigned>(n));
        if (r.score == Score::LowRank) {
            auto go = [&](auto kernel) {
                setSmem(kernel, lowRankSmem, staged);
                SPARQLAB_LAUNCH_AFTER(grid, kThreads, lowRankSmem, st, kernel)(pp);
            };
            auto tile = [&](auto stage) {
                constexpr bool S = decltype(stage)::value;
                if (g <= 1)
                    go(lowRankKernel<T, 1, S>);
                else if (g <= 4)
                    go(lowRankKernel<T, 4, S>);
                else
                    go(lowRankKernel<T, 8, S>);
            };
            if constexpr (sizeof(T) == 2) {
                if (staged)
                    tile(std::true_type{});
                else
                    tile(std::false_type{});
            } else {
                tile(std::false_type{});
            }
        } else {
            auto go = [&](auto kernel) {
                SPARQLAB_LAUNCH_AFTER(grid, kThreads, 0, st, kernel)(pp);
            };
            const bool one = g <= 1;
            switch (l.lanes) {
            case 8:
                one ? go(rowScoreKernel<T, 8, 1>) : go(rowScoreKernel<T, 8, 4>);
                break;
            case 16:
                one ? go(rowScoreKernel<T, 16, 1>) : go(rowScoreKernel<T, 16, 4>);
                break;
            default:
                one ? go(rowScoreKernel<T, 32, 1>) : go(rowScoreKernel<T, 32, 4>);
            }
        }
        check(cudaGetLastError(), "step 1 kernel");
    };

    SelectParams q{};
    q.k = c.k;
    q.v = c.v;
    q.vsum = c.vsum;
    q.stride = c.stride;
    q.D = c.D;
    q.S = static_cast<int>(c.S);
    q.g = static_cast<int>(g);
    q.q = r.q;
    q.scaleLog2 = r.scale * kLog2e;
    q.y = r.y;
    q.alpha = r.alpha;
    q.Z = Z;
    q.Spad = l.Spad;
    q.stats = stats;
    q.chunks = static_cast<int>(l.chunks);
    q.rankBuf = rankBuf;
    q.gqa = static_cast<int>(r.gqa);
    q.units = static_cast<int>(l.units);
    q.select = static_cast<int>(r.select);
    q.meanValue = r.meanValue;
    q.p = r.p;
    q.pageSize = static_cast<int>(c.pageSize);
    if (r.select == Select::Pages) {
        q.nRank = static_cast<int>(l.pages.f0);
        q.want = static_cast<int>(l.pages.want);
        q.f0 = static_cast<int>(l.pages.f0);
        q.pages = static_cast<int>(l.pages.pages);
        q.lEff = 0;
        q.kEff = static_cast<int>(r.k);
    } else {
        const int64_t kEff = std::min(r.k, c.S), lEff = std::min(r.local, kEff);
        q.kEff = static_cast<int>(kEff);
        q.lEff = static_cast<int>(lEff);
        q.nRank = static_cast<int>(c.S - lEff);
        q.want = static_cast<int>(kEff - lEff);
    }
    q.selOut = r.selOut;
    q.selCount = r.selCount;
    q.selStride = r.selStride;
    q.groupMax = groupMax;
    q.Gpad = l.Gpad;
    q.rankReady = l.rankKernel;
    q.splits = l.selectSplits;
    q.fewPasses = l.fewPasses;
    q.prefetch = l.prefetch;
    if (l.selectSplits > 1) {
        q.part = reinterpret_cast<float*>(ws + l.selectPartAt);
        q.list = reinterpret_cast<int32_t*>(ws + l.listAt);
        q.listCount = reinterpret_cast<int32_t*>(ws + l.listCountAt);
        q.listAlpha = reinterpret_cast<float*>(ws + l.listAlphaAt);
        q.listStride = l.listStride;
    }
    const bool one = g <= 1 || l.units > 1;
    // Step 2 of rows [row0, row0 + n) on stream st.
    auto step2 = [&](int64_t row0, int64_t n, cudaStream_t st) {
        if (!(l.stages & 2))
            return; // (left out: timing step 1 alone)
        SelectParams pp = q;
        pp.rowBase = row0;
        if (l.rankKernel) {
            const dim3 grid(static_cast<unsigned>((l.Gpad + kThreads - 1) / kThreads),
                            static_cast<unsigned>(n));
            SPARQLAB_LAUNCH_AFTER(grid, kThreads, 0, st, rankKernel)(pp, groupMax);
            check(cudaGetLastError(), "rank kernel");
        }
        const unsigned blocks = static_cast<unsigned>(n * l.units);
        byLanesAndTile(l.lanes, one, [&](auto L, auto GT) {
            auto kernel = selectKernel<T, decltype(L)::value, decltype(GT)::value>;
            setSmem(kernel, selectSmemBytes(), true);
            SPARQLAB_LAUNCH_AFTER(blocks, kThreads, selectSmemBytes(), st, kernel)(pp);
        });
        check(cudaGetLastError(), "step 2 kernel");
        if (l.selectSplits > 1) {
            const dim3 grid(static_cast<unsigned>(l.selectSplits),
                            static_cast<unsigned>(n * l.units));
            const size_t smem = kWarps * (c.D + 2) * sizeof(float);
            byLanesAndTile(l.lanes, one, [&](auto L, auto GT) {
                auto kernel = selectAttendKernel<T, decltype(L)::value, decltype(GT)::value>;
                setSmem(kernel, smem);
                SPARQLAB_LAUNCH_AFTER(grid, kThreads, smem, st, kernel)(pp);
            });
            check(cudaGetLastError(), "step 2 attend kernel");
            SPARQLAB_LAUNCH_AFTER(static_cast<unsigned>(n * g), 128, 0, st, selectMergeKernel)(pp);
            check(cudaGetLastError(), "step 2 merge kernel");
        }
    };

    // With many rows, step 2 of each part runs beside step 1 of the next (a side stream), so
    // that step 2's latency-bound selection hides behind step 1's bandwidth-bound reads.
    const int parts = l.parts;
    if (parts <= 1) {
        step1(0, rows, s);
        step2(0, rows, s);
        return;
    }
    SideStream& side = sideStream();
    for (int i = 0; i < parts; ++i) {
        const int64_t r0 = rows * i / parts, r1 = rows * (i + 1) / parts;
        step1(r0, r1 - r0, s);
        check(cudaEventRecord(side.part[i], s), "event record");
        check(cudaStreamWaitEvent(side.stream, side.part[i], 0), "stream wait");
        step2(r0, r1 - r0, side.stream);
    }
    check(cudaEventRecord(side.join, side.stream), "event record");
    check(cudaStreamWaitEvent(s, side.join, 0), "stream wait");
}

template <typename T>
void launchT(const CacheView& c, const Request& r, const Layout& l, char* ws, cudaStream_t s) {
    if (r.score != Score::None)
        return launchSelectingT<T>(c, r, l, ws, s);
    DenseParams p{};
    p.k = c.k;
    p.v = c.v;
    p.q = r.q;
    p.y = r.y;
    p.alpha = r.alpha;
    p.part = reinterpret_cast<float*>(ws);
    p.stride = c.stride;
    p.D = c.D;
    p.S = static_cast<int>(c.S);
    p.g = static_cast<int>(r.Hq / c.H);
    p.splits = static_cast<int>(l.split.splits);
    p.splitLen = static_cast<int>(l.split.len);
    p.scaleLog2 = r.scale * kLog2e;
    const int64_t rows = c.B * c.H;
    switch (l.lanes) {
    case 8:
        return launchDenseL<T, 8>(p, rows, l.gtDense, s);
    case 16:
        return launchDenseL<T, 16>(p, rows, l.gtDense, s);
    default:
        return launchDenseL<T, 32>(p, rows, l.gtDense, s);
    }
}

} // namespace
} // namespace sparqlab::attention::cuda::detail
