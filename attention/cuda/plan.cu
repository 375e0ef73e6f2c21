// The CUDA decode kernels' plan of a step (cuda/decode_cuda.h): the limits, the workspace layout,
// and the dispatch to the per-dtype launchers (kernels_*.cu). The device services are runtime.cu.

#include "attention/cuda/internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

namespace sparqlab::attention::cuda {
namespace detail {

const Device& device() {
    static std::mutex mu;
    static Device dev[16];
    static bool known[16] = {};
    int id = 0;
    check(cudaGetDevice(&id), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(mu);
    if (id < 0 || id >= 16)
        id = 0;
    if (!known[id]) {
        Device d;
        d.id = id;
        check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, id), "SM count");
        check(cudaDeviceGetAttribute(&d.l2, cudaDevAttrL2CacheSize, id), "L2 size");
        check(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, id),
              "compute capability");
        int optin = 0;
        check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, id),
              "shared memory limit");
        d.smemOptin = static_cast<size_t>(optin);
        dev[id] = d;
        known[id] = true;
    }
    return dev[id];
}

size_t selectSmemBytes() { // (the attention's merge buffer shares the strided maxima's room)
    return kCandMax * 8 + kMaxW * 4 + 256 * 4 + 3 * kMaxHeadsPerGroup * 4 + 64 * 8;
}

namespace {
/// A switch of the environment, read once per call site: an integer in [lo, hi] (else `def`), to
/// time one path of the kernels against another.
int envInt(const char* name, int lo, int hi, int def) {
    const char* e = std::getenv(name);
    const int v = e ? std::atoi(e) : def;
    return v >= lo && v <= hi ? v : def;
}
/// On unless the environment sets `name` to 0.
bool envOn(const char* name) {
    const char* e = std::getenv(name);
    return !(e && std::string(e) == "0");
}

int64_t round8(int64_t x) {
    return (x + 7) / 8 * 8;
}

int denseTile(int64_t g) {
    return g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : 8;
}

int denseResident(Storage s, int lanes, int gt) {
    return s == Storage::F32   ? denseResidentFor<float>(lanes, gt)
           : s == Storage::F16 ? denseResidentFor<__half>(lanes, gt)
                               : denseResidentFor<__nv_bfloat16>(lanes, gt);
}

Layout layoutOf(const CacheView& c, const Request& r, bool query) {
    Layout l;
    const int64_t rows = c.B * c.H, g = r.Hq / c.H;
    l.lanes = lanesPerRow(c.D);
    l.gtDense = denseTile(g);
    l.gtSelect = g <= 1 ? 1 : 4;
    size_t at = 0;
    auto take = [&at](size_t bytes) {
        const size_t here = at;
        at += (bytes + 255) / 256 * 256;
        return here;
    };
    if (r.score == Score::None) {
        const int resident = query ? denseResident(c.storage, l.lanes, l.gtDense) : 1 << 30;
        l.split = splitPlan(rows, c.S, resident);
        if (l.split.splits > 1)
            l.partBytes = static_cast<size_t>(rows * l.split.splits * g * (c.D + 2)) * 4;
        take(l.partBytes);
        l.total = at;
        return l;
    }
    if (r.select == Select::Pages) {
        l.pages = pagePlan(c.S, c.pageSize, r.k, r.local);
        l.nItems = l.pages.pages;
    } else {
        l.nItems = c.S;
    }
    l.Spad = round8(l.nItems);
    l.units = r.gqa == Gqa::PerHead && g > 1 ? g : 1;
    l.needRank = g > 1 && l.units == 1;
    const int sms = query ? device().sms : 132;
    const int64_t target = 4 * static_cast<int64_t>(sms);
    int64_t chunks = std::max<int64_t>(1, (target + rows - 1) / rows);
    if (r.score == Score::LowRank) {
        const int64_t most = (l.nItems + kLowRankPositions - 1) / kLowRankPositions;
        const int64_t least = (l.nItems + 4 * kLowRankPositions - 1) / (4 * kLowRankPositions);
        chunks = std::min(std::max(chunks, least), most);
        l.chunkLen = (l.nItems + chunks - 1) / chunks;
        l.chunkLen = (l.chunkLen + kLowRankPositions - 1) / kLowRankPositions * kLowRankPositions;
    } else {
        const int64_t unit = 512, most = (l.nItems + unit - 1) / unit;
        chunks = std::min(std::max<int64_t>(chunks, (l.nItems + 8 * unit - 1) / (8 * unit)), most);
        l.chunkLen = (l.nItems + chunks - 1) / chunks;
        l.chunkLen = (l.chunkLen + unit - 1) / unit * unit;
    }
    l.chunks = (l.nItems + l.chunkLen - 1) / l.chunkLen;
    static const int stages = envInt("SPARQLAB_CUDA_STAGES", 1, 3, 3);
    l.stages = stages;
    // With many rows (≥ 8 an SM) and SPARQLAB_CUDA_PARTS = 2 … 4: that many parts, step 2 of each
    // beside step 1 of the next. Off by default: on an H200 at B = 64, S = 4,096 four parts took
    // 320 µs where one took 284 µs (step 2's blocks crowd out step 1's).
    static const int maxParts = envInt("SPARQLAB_CUDA_PARTS", 1, 4, 1);
    l.parts = rows >= 8 * static_cast<int64_t>(sms) ? maxParts : 1;
    l.zBytes = static_cast<size_t>(rows * g * l.Spad) * 4;
    l.statsBytes = static_cast<size_t>(rows * l.chunks * g * 2) * 4;
    l.rankBytes = l.needRank ? static_cast<size_t>(rows * l.Spad) * 4 : 0;
    // A rule combining the group's heads: the rank kernel writes the combined scores and their
    // group maxima over many blocks (SPARQLAB_CUDA_RANK=0: step 2 computes them itself, one
    // block a row, as before it existed).
    static const bool rankKernelOn = envOn("SPARQLAB_CUDA_RANK");
    l.rankKernel = l.needRank && r.select != Select::Pages && rankKernelOn;
    l.groups = (r.score == Score::LowRank && r.select != Select::Pages &&
                (g == 1 || r.gqa == Gqa::PerHead)) ||
               l.rankKernel;
    // Each row's group maxima start 16-byte aligned: the select kernel copies them into shared
    // memory 16 bytes at a time (selectKernel's entry).
    l.Gpad = (l.Spad / 8 + 3) / 4 * 4;
    l.groupBytes = l.groups ? static_cast<size_t>(rows * l.units * l.Gpad) * 4 : 0;
    // Few units (B = 1): step 2's gather of the chosen rows, one block a unit, is bound by the
    // rows in flight in that block; several blocks a unit, each attending a share, fill the
    // device (SPARQLAB_CUDA_SPLITS = 1 turns it off, to time both; default at most 8).
    static const int maxSplits = envInt("SPARQLAB_CUDA_SPLITS", 1, 64, 8);
    static const int fewPasses = envInt("SPARQLAB_CUDA_FEW_PASSES", 0, 2, 2);
    l.fewPasses = fewPasses;
    static const bool prefetch = envOn("SPARQLAB_CUDA_PREFETCH");
    l.prefetch = prefetch;
    // The low-rank step 1 over 2-byte storage stages its loads in shared memory, the next batch's
    // in flight during this one's arithmetic (SPARQLAB_CUDA_STAGED=0: loads into registers, to
    // time both), where it fits a block's shared memory (with the static arrays' ~2 KiB).
    static const bool staged = envOn("SPARQLAB_CUDA_STAGED");
    const size_t smemLimit = query ? device().smemOptin : 227 * 1024;
    l.staged = staged && r.score == Score::LowRank && c.storage != Storage::F32 &&
               lowRankSmemBytes(g, r.r, r.rows == Rows::Channels, true) + 4096 <= smemLimit;
    const int64_t attended = maxSelection(c, r);
    l.selectSplits = selectSplitsFor(rows * l.units, sms, attended, maxSplits);
    take(l.zBytes);
    take(l.statsBytes);
    take(l.rankBytes);
    take(l.groupBytes);
    if (l.selectSplits > 1) {
        const size_t units = static_cast<size_t>(rows * l.units);
        l.listStride = round8(attended);
        l.listAt = take(units * static_cast<size_t>(l.listStride) * 4);
        l.listCountAt = take(units * 4);
        l.listAlphaAt = take(static_cast<size_t>(rows * g) * 4);
        l.selectPartAt = take(static_cast<size_t>(rows * g * l.selectSplits * (c.D + 2)) * 4);
    }
    l.total = at;
    return l;
}

} // namespace

bool overlapLaunches(const void* kernel) {
    static const bool on = envOn("SPARQLAB_CUDA_PDL");
    if (!on)
        return false;
    // Asked at every launch: each thread keeps its own answers (no lock on the way to a launch).
    int id = 0;
    check(cudaGetDevice(&id), "cudaGetDevice");
    thread_local std::map<std::pair<int, const void*>, bool> known; // for sm_90+, on sm_90+
    const auto [it, fresh] = known.try_emplace({id, kernel}, false);
    if (fresh) {
        cudaFuncAttributes a{};
        const bool read = cudaFuncGetAttributes(&a, kernel) == cudaSuccess;
        if (!read)
            (void)cudaGetLastError(); // (the launch reports what is wrong with the kernel)
        it->second = read && a.ptxVersion >= 90 && device().major >= 9;
    }
    return it->second;
}

} // namespace detail

using namespace detail;

std::string unsupported(const CacheView& c, const Request& r) {
    const int64_t g = c.H > 0 ? r.Hq / c.H : 0;
    if (lanesPerRow(c.D) == 0)
        return "the CUDA kernels take a head dimension that is a multiple of 8 up to 256, not " +
               std::to_string(c.D);
    if (g < 1 || g > kMaxHeadsPerGroup || r.Hq % c.H != 0)
        return "the CUDA kernels take 1 to 64 query heads per KV head";
    if (c.S < 1 || c.S > (int64_t{1} << 30))
        return "the CUDA kernels take 1 to 2^30 positions";
    if (c.stride % 8 != 0)
        return "the CUDA kernels need a cache whose rows hold a multiple of 8 positions";
    if (c.B * c.H > kMaxGridY) // the rows are a launch's second grid dimension
        return "the CUDA kernels take at most " + std::to_string(kMaxGridY) +
               " rows (batch × KV heads), not " + std::to_string(c.B * c.H);
    if (r.score == Score::None)
        return {};
    if (r.score == Score::LowRank) {
        if (r.r < 1 || r.r > c.D)
            return "r must lie in 1..D";
        if (lowRankSmemBytes(g, r.r, r.rows == Rows::Channels, false) > 96 * 1024)
            return "the CUDA step 1 keeps g·r coefficients on chip: too many for g = " +
                   std::to_string(g) + ", r = " + std::to_string(r.r);
    }
    if (r.select == Select::Pages) {
        const PagePlan pp = pagePlan(c.S, c.pageSize, r.k, r.local);
        if (pp.np > kSelMax)
            return "the CUDA kernels attend at most " + std::to_string(kSelMax) +
                   " positions of Quest's pages";
        return {};
    }
    const int64_t kEff = std::min(r.k, c.S), lEff = std::min(r.local, kEff);
    if (r.select == Select::TopP && kEff - lEff > kCandMax)
        return "the CUDA top-p budget ranks at most " + std::to_string(kCandMax) +
               " positions (k ≤ " + std::to_string(kCandMax) + " + the local window)";
    if (kEff - lEff > kSelMax)
        return "the CUDA kernels select at most " + std::to_string(kSelMax) + " positions";
    return {};
}

size_t workspaceBytes(const CacheView& c, const Request& r) {
    return layoutOf(c, r, built() && deviceAvailable()).total;
}

int64_t maxSelection(const CacheView& c, const Request& r) {
    if (r.select == Select::Pages && r.score != Score::None) {
        const PagePlan pp = pagePlan(c.S, c.pageSize, r.k, r.local);
        return pp.np * c.pageSize;
    }
    return std::min(r.k, c.S);
}

void launch(const CacheView& c, const Request& r, void* workspace, size_t workspaceSize,
            void* stream) {
    const std::string why = unsupported(c, r);
    if (!why.empty())
        throw std::runtime_error(why);
    const Layout l = layoutOf(c, r, true);
    if (workspaceSize < l.total)
        throw std::runtime_error("CUDA decode: workspace of " + std::to_string(workspaceSize) +
                                 " bytes, " + std::to_string(l.total) + " needed");
    char* ws = static_cast<char*>(workspace);
    const cudaStream_t s = asStream(stream);
    switch (c.storage) {
    case Storage::F32:
        return launchStorage<float>(c, r, l, ws, s);
    case Storage::F16:
        return launchStorage<__half>(c, r, l, ws, s);
    case Storage::BF16:
        return launchStorage<__nv_bfloat16>(c, r, l, ws, s);
    }
}

} // namespace sparqlab::attention::cuda
