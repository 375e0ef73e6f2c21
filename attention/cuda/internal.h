#pragma once
// What the CUDA decode kernels' translation units share (nvcc only): the limits, the error
// check, the device's figures, the workspace layout of a step and the per-dtype launchers
// (kernels_f32.cu, kernels_f16.cu, kernels_bf16.cu; runtime.cu dispatches to them).

#include "attention/cuda/decode_cuda.h"
#include "attention/cuda/logic.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

// A launch, a kernel's shared array of `count` elements and its dynamic shared memory, written so
// that the same kernels also compile as host C++ under the emulation of tests/cuda/simt/simt.h
// (which defines all three first).
#ifndef SPARQLAB_LAUNCH
#define SPARQLAB_LAUNCH(grid, block, shared, stream, ...)                                          \
    __VA_ARGS__<<<grid, block, shared, stream>>>
#endif
#ifndef SPARQLAB_SHARED
#define SPARQLAB_SHARED(type, name, count) __shared__ type name[count]
#endif
#ifndef SPARQLAB_DYNAMIC_SHARED
#define SPARQLAB_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif
// Programmatic dependent launch (CUDA.md §3): SPARQLAB_LAUNCH_AFTER launches a kernel that may
// start while the kernel before it on the stream finishes; it calls SPARQLAB_WAIT_FOR_PRIOR()
// as its first statement, in every thread, before it reads or writes any global memory (the wait
// returns once its prerequisite grids — the kernel before it on the stream, in a graph the kernels
// of its programmatic edges — have completed and their writes are visible; at once where the
// launch was a plain one; since every kernel waits, the order carries down a chain).
// SPARQLAB_LET_NEXT_START() allows the next such launch to be scheduled once every block of this
// grid has issued it (its blocks then wait on chip, in the room this grid leaves). Both are no-ops
// below sm_90; under the emulation the launch is a plain one and the emulator checks that every
// thread waited (tests/cuda/simt/simt.h); test_cuda_ptx checks in the PTX that nothing but
// parameter loads and L2 prefetches comes before each kernel's wait.
#ifndef SPARQLAB_WAIT_FOR_PRIOR
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SPARQLAB_WAIT_FOR_PRIOR() asm volatile("griddepcontrol.wait;" ::: "memory")
#define SPARQLAB_LET_NEXT_START() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define SPARQLAB_WAIT_FOR_PRIOR() ((void)0)
#define SPARQLAB_LET_NEXT_START() ((void)0)
#endif
#endif

// A copy of 16 bytes from global into shared memory that the thread does not wait for
// (`cp.async`, sm_80 and later; a plain copy below), and the wait for all of the thread's copies:
// until it returns, what the copies write is not there. Step 1 stages its loads of K this way
// (CUDA.md §2.1). Under the emulation a copy's destination is poison from its issue to the wait,
// so a read between the two shows. SPARQLAB_COPY_ASYNC_ZFILL(dst, src, bytes) reads only the
// first `bytes` (0, 4, 8, 12 or 16: the fallback copies words) of src and writes zeros after them:
// the end of an array that is not a whole number of 16-byte pieces, without reading what no kernel
// wrote (compute-sanitizer's initcheck).
#ifndef SPARQLAB_COPY_ASYNC_16
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SPARQLAB_COPY_ASYNC_16(dst, src)                                                           \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(                                \
                     static_cast<unsigned>(__cvta_generic_to_shared(dst))),                        \
                 "l"(src)                                                                          \
                 : "memory")
#define SPARQLAB_COPY_ASYNC_WAIT_ALL() asm volatile("cp.async.wait_all;" ::: "memory")
#define SPARQLAB_COPY_ASYNC_ZFILL(dst, src, bytes)                                                 \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(                            \
                     static_cast<unsigned>(__cvta_generic_to_shared(dst))),                        \
                 "l"(src), "r"(static_cast<unsigned>(bytes))                                       \
                 : "memory")
#else
#define SPARQLAB_COPY_ASYNC_16(dst, src)                                                           \
    (*reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src))
#define SPARQLAB_COPY_ASYNC_WAIT_ALL() ((void)0)
#define SPARQLAB_COPY_ASYNC_ZFILL(dst, src, bytes)                                                 \
    do {                                                                                           \
        for (int w_ = 0; w_ < 4; ++w_)                                                             \
            reinterpret_cast<uint32_t*>(dst)[w_] =                                                 \
                4 * w_ < static_cast<int>(bytes) ? reinterpret_cast<const uint32_t*>(src)[w_]      \
                                                 : 0u;                                             \
    } while (0)
#endif
#endif

// One more time a kernel took `path` (a string literal), where the host emulation counts them
// (tests/cuda/simt): a path that only costs time when it is not taken, such as a shortcut whose
// fallback gives the same result, is checked that way. Nothing on a GPU.
#ifndef SPARQLAB_NOTE_PATH
#define SPARQLAB_NOTE_PATH(path) ((void)0)
#endif

namespace sparqlab::attention::cuda::detail {

constexpr int kThreads = 256; // every kernel's block
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;            // rows a lane group has in flight (dense, the gather)
constexpr int kCandMax = 4096;        // candidates sorted on chip
constexpr int kSelMax = 2 * kCandMax; // positions (int32) a unit attends, in the same space
constexpr int kMaxW = 4096;           // strided maxima for the threshold (want ≤ 2048)
constexpr int kLowRankPositions = kThreads * 8; // positions of one pass of step 1
constexpr int kMaxHeadsPerGroup = 64;
constexpr int kMaxHeadDim = 256;     // lanesPerRow's bound (logic.h)
constexpr int64_t kMaxGridY = 65535; // a launch's second grid dimension: the rows
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kThreads == 256, "the radix step gives each of 256 bins a thread");

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

inline cudaStream_t asStream(void* s) {
    return static_cast<cudaStream_t>(s);
}

struct Device {
    int id = 0, sms = 0, l2 = 0, major = 0;
    size_t smemOptin = 0;
};
/// The current device's figures, read once.
const Device& device();

/// Whether SPARQLAB_LAUNCH_AFTER overlaps a launch of `kernel` with the one before it: on an
/// sm_90 or later device running the kernel's code built for sm_90 or later (code built for an
/// older architecture has no wait: run as such on a Hopper, it would race), unless
/// SPARQLAB_CUDA_PDL=0 (to time one against the other).
bool overlapLaunches(const void* kernel);

#ifndef SPARQLAB_LAUNCH_AFTER
/// A launch through cudaLaunchKernelEx, with the programmatic stream serialisation attribute
/// where overlapLaunches(). As with <<< >>>, its error is left for the caller's
/// check(cudaGetLastError(), "what it launched") (the runtime keeps it as the last error).
template <typename... A> struct LaunchAfter {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    void (*kernel)(A...);
    template <typename... P> void operator()(P&&... args) const {
        cudaLaunchConfig_t config = {};
        config.gridDim = grid;
        config.blockDim = block;
        config.dynamicSmemBytes = shared;
        config.stream = stream;
        cudaLaunchAttribute attribute[1] = {};
        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[0].val.programmaticStreamSerializationAllowed = 1;
        const bool overlap = overlapLaunches(reinterpret_cast<const void*>(kernel));
        config.attrs = overlap ? attribute : nullptr;
        config.numAttrs = overlap ? 1 : 0;
        (void)cudaLaunchKernelEx(&config, kernel, std::forward<P>(args)...);
    }
};
template <typename... A>
LaunchAfter<A...> launchAfter(dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                              void (*kernel)(A...)) {
    return LaunchAfter<A...>{grid, block, shared, stream, kernel};
}
#define SPARQLAB_LAUNCH_AFTER(grid, block, shared, stream, ...)                                    \
    ::sparqlab::attention::cuda::detail::launchAfter(grid, block, shared, stream, __VA_ARGS__)
#endif

struct Layout {
    // dense
    SplitPlan split;
    size_t partBytes = 0;
    // selecting
    int64_t nItems = 0, Spad = 0, chunkLen = 0, chunks = 0, units = 1;
    bool needRank = false;
    size_t zBytes = 0, statsBytes = 0, rankBytes = 0;
    /// Group maxima of the ranked scores: written by step 1 where step 2 ranks on one head's
    /// scores, by the rank kernel where the GQA rule combines the group's heads (rankKernel).
    bool groups = false;
    bool rankKernel = false;
    int64_t Gpad = 0;
    size_t groupBytes = 0;
    size_t total = 0;
    int lanes = 0, gtDense = 1, gtSelect = 1;
    PagePlan pages;
    /// The steps a selecting method launches: 1 step 1, 2 step 2, 3 both (SPARQLAB_CUDA_STAGES,
    /// for timing each step alone in the benchmark; their output is then not y).
    int stages = 3;
    /// Parts of the rows whose step 2 runs beside the next part's step 1 (1: none).
    int parts = 1;
    /// Blocks a unit's step 2 attends its chosen rows with (1: one, in the select kernel; more
    /// where the units are too few to fill the device: the select kernel lists them and the
    /// select attend kernel's blocks each attend a share, CUDA.md §2.2). Their buffers: the
    /// list [B·H·units, listStride] int32 and its counts, each head's α, the partial states
    /// [B·Hq, selectSplits, D + 2].
    int selectSplits = 1;
    /// Step 2's shortcuts (CUDA.md §2.2; SPARQLAB_CUDA_FEW_PASSES = 0 or 1 turns them off or
    /// the second stage off, to time each): 1: the threshold from the group maxima's top 16 bits
    /// (two radix passes of four), and at most 256 candidates ranked by one pass over them
    /// instead of a radix select; 2 (the default): that threshold found in two stages, first
    /// over each thread's own maximum, then over the groups reaching that.
    int fewPasses = 2;
    /// Step 2 asks for its few candidates' rows of K and V into L2 while it ranks them
    /// (SPARQLAB_CUDA_PREFETCH=0 turns it off, to time both).
    bool prefetch = true;
    /// The low-rank step 1 stages its loads of K in shared memory by asynchronous copies, each
    /// batch of 8 rows' in flight while the one before is summed (CUDA.md §2.1; f16 and bf16
    /// storage; SPARQLAB_CUDA_STAGED=0 turns it off, to time both).
    bool staged = false;
    int64_t listStride = 0;
    size_t listAt = 0, listCountAt = 0, listAlphaAt = 0, selectPartAt = 0;
};

/// Shared memory of step 2 (the select kernel).
size_t selectSmemBytes();

/// Step 1's loads of a batch of 8 rows staged in shared memory (CUDA.md §2.1): 16 bytes a row and
/// thread, for 2-byte storage.
constexpr size_t kStageBytes = 8 * kThreads * 16;
/// The low-rank step 1's dynamic shared memory up to its staged loads: the coefficients [g][r],
/// the rows' indices ([r], or [g][r] for each head's channels), each head's factor [g] and the
/// block merge's buffer, as floats; rounded up to 16 bytes, where the stage begins.
__host__ __device__ inline size_t lowRankStageAt(int64_t g, int64_t r, bool channels) {
    const int64_t floats = g * r + (channels ? g * r : r) + g + kWarps * 8 * 2 + 8 * 2;
    return (4 * static_cast<size_t>(floats) + 15) / 16 * 16;
}
/// All of it, with the stage where `staged`.
__host__ __device__ inline size_t lowRankSmemBytes(int64_t g, int64_t r, bool channels,
                                                   bool staged) {
    return lowRankStageAt(g, r, channels) + (staged ? kStageBytes : 0);
}

/// The launchers of one storage type (explicitly instantiated per dtype).
template <typename T>
void launchStorage(const CacheView& c, const Request& r, const Layout& l, char* ws, cudaStream_t s);
/// Blocks of the dense kernel resident on the whole device at once, for lanes per row and head
/// tile.
template <typename T> int denseResidentFor(int lanes, int gt);

} // namespace sparqlab::attention::cuda::detail
