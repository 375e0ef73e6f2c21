#pragma once
/// \file tests/cuda/simt/simt.h
/// A host emulation of the CUDA execution model, so that the decode kernels of attention/cuda/
/// run on a machine without a GPU (CI) and their results are checked against the CPU decode
/// kernels there (tests/cuda/test_cuda_emulated.cpp). Included before kernels.cuh by a
/// translation unit that g++ compiles (tests/cuda/simt/emulated_*.cpp), it makes the CUDA
/// keywords plain C++ and gives the intrinsics the kernels use a host meaning:
/// - every thread of a block is a fiber (its own stack, a guard page under it) of one OS thread;
///   the blocks of a launch run one after another, in a drawn order; between two waits the
///   threads run one at a time in a random order drawn afresh at each round (SIMT_SEED; 0: the
///   blocks in index order and thread 0 first);
/// - __syncthreads() waits until every thread of the block that has not returned reaches a
///   barrier; a warp intrinsic (__shfl*_sync, __ballot_sync, __match_any_sync)
///   waits until every lane of its mask reaches a warp intrinsic, and all of them must be the
///   same one with the same mask. A wait that can never end (a barrier some threads never
///   reach, a mask naming a lane that returned or does not exist, two lanes at different
///   intrinsics) is reported as the CUDA programming error it is and aborts the test;
/// - shared arrays (SPARQLAB_SHARED: the k-th a thread declares is the block's k-th) and dynamic
///   shared memory (SPARQLAB_DYNAMIC_SHARED) are buffers of the block, filled with 0xFF bytes
///   (NaN as floats) before it runs, so a read of what the block did not write shows;
/// - an asynchronous copy to shared memory (SPARQLAB_COPY_ASYNC_16) reads its source when it is
///   issued, poisons its destination (0xFF) and writes it only when its thread waits for its
///   copies, so a read between the issue and the wait finds poison; it must be 16 bytes,
///   aligned, into the block's shared memory, and waited for before the thread returns; one that
///   reads fewer bytes (SPARQLAB_COPY_ASYNC_ZFILL) reads no byte of `src` past them;
/// - a launch is checked as a GPU checks it: at most 1,024 threads a block, gridDim.y and .z at
///   most 65,535, dynamic shared memory above 48 KiB only after cudaFuncSetAttribute raised the
///   kernel's limit, static and dynamic shared memory together at most 227 KiB;
/// - a kernel launched to overlap the one before it (SPARQLAB_LAUNCH_AFTER, internal.h) runs after
///   it like any other, but each of its threads must call SPARQLAB_WAIT_FOR_PRIOR() before it
///   reaches a barrier, a warp intrinsic or its return: on a GPU it could otherwise read what the
///   kernel before it has not written yet;
/// - the runtime calls the launchers make (streams, events, attributes, occupancy) succeed and
///   order nothing: a launch runs to its end before it returns. The device has
///   SIMT_SMS multiprocessors (read at start; 4 by default, so that small inputs already split);
/// - only the intrinsics the kernels use are given: another one does not compile here.
/// What it cannot show: timing; races between threads (a fiber runs until it waits, so every
/// interleaving it makes is one a GPU may make, but not every one a GPU makes; the device script
/// runs compute-sanitizer's racecheck for that); barriers that all threads reach, but at
/// different __syncthreads (accepted here, undefined on a GPU); and the memory ordering of a warp
/// intrinsic, which here also orders shared memory (on a GPU it does not).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// A kernel declares its shared arrays with SPARQLAB_SHARED (cuda/internal.h), never __shared__
// itself: the emulation must know them to give each block its own, poisoned copy.
#define __shared__                                                                                 \
    static_assert(false, "declare shared memory with SPARQLAB_SHARED (cuda/internal.h)");

namespace simt {

/// Where the running fiber is.
const uint3& threadIndex();
const uint3& blockIndex();
const dim3& blockDimension();
const dim3& gridDimension();
/// The block's dynamic shared memory.
void* dynamicShared();
/// The block's copy of the calling thread's next shared array (SPARQLAB_SHARED).
void* staticShared(size_t bytes, size_t align);
/// cudaFuncSetAttribute's dynamic shared memory limit of a kernel, which the launch checks.
cudaError_t setMaxDynamicShared(const void* kernel, int attribute, int value);

void syncThreads();
/// The warp intrinsics: every lane of `mask` deposits `value` and waits for the others.
enum class WarpOp { Idx, Up, Down, Xor, Ballot, MatchAny };
uint64_t warp(WarpOp op, unsigned mask, uint64_t value, int arg, int width);

/// Blocks launched and fiber switches made since the start (the test reports them), and how
/// many times each path a kernel notes was taken (SPARQLAB_NOTE_PATH).
struct Counters {
    uint64_t launches = 0, blocks = 0, switches = 0;
    std::map<std::string, uint64_t> paths;
};
const Counters& counters();

/// Runs `body` once per thread of every block of `grid` (`kernel` names it in the checks).
/// `after`: a launch that may overlap the one before it on a GPU (SPARQLAB_LAUNCH_AFTER): each
/// thread must call SPARQLAB_WAIT_FOR_PRIOR() before a barrier, a warp intrinsic or its return.
void run(dim3 grid, dim3 block, size_t sharedBytes, const void* kernel,
         const std::function<void()>& body, bool after = false);
/// SPARQLAB_WAIT_FOR_PRIOR(): the calling thread has waited for the kernels before its own.
void waitForPrior();
/// SPARQLAB_COPY_ASYNC_16: 16 bytes read from `src` now, `dst` poisoned now and written only at
/// the thread's next copyAsyncWaitAll() (SPARQLAB_COPY_ASYNC_WAIT_ALL), the latest a GPU may
/// write it, so that a read of `dst` between the two finds neither the old bytes nor the new.
/// SPARQLAB_COPY_ASYNC_ZFILL: only the first `bytes` (0, 4, 8, 12 or 16) read, zeros written
/// after them.
void copyAsync16(void* dst, const void* src, int bytes = 16);
void copyAsyncWaitAll();
/// SPARQLAB_NOTE_PATH: one more time `path` was taken (counters().paths).
void notePath(const char* path);

template <typename... A> struct Launch {
    dim3 grid, block;
    size_t shared;
    void (*kernel)(A...);
    bool after = false;
    template <typename... P> void operator()(P&&... p) const {
        std::tuple<std::decay_t<A>...> args(std::forward<P>(p)...);
        auto k = kernel;
        run(
            grid, block, shared, reinterpret_cast<const void*>(k),
            [&args, k] { std::apply(k, args); }, after);
    }
};
template <typename... A>
Launch<A...> launch(dim3 grid, dim3 block, size_t shared, cudaStream_t, void (*kernel)(A...),
                    bool after = false) {
    return Launch<A...>{grid, block, shared, kernel, after};
}

template <typename T> uint64_t toBits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "a warp value of ≤ 8 bytes");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> T fromBits(uint64_t u) {
    T v;
    std::memcpy(&v, &u, sizeof v);
    return v;
}

} // namespace simt

#define threadIdx (::simt::threadIndex())
#define blockIdx (::simt::blockIndex())
#define blockDim (::simt::blockDimension())
#define gridDim (::simt::gridDimension())

#define SPARQLAB_SHARED(type, name, count)                                                         \
    type* name = static_cast<type*>(::simt::staticShared(sizeof(type) * (count), alignof(type)))
#define SPARQLAB_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::simt::dynamicShared())
#define SPARQLAB_LAUNCH(grid, block, shared, stream, ...)                                          \
    ::simt::launch(grid, block, shared, stream, __VA_ARGS__)
// A launch that may overlap the one before it (internal.h): here it runs after it, as every
// launch does, and the emulator checks that each thread waits for it before anything else.
#define SPARQLAB_LAUNCH_AFTER(grid, block, shared, stream, ...)                                    \
    ::simt::launch(grid, block, shared, stream, __VA_ARGS__, true)
#define SPARQLAB_WAIT_FOR_PRIOR() ::simt::waitForPrior()
#define SPARQLAB_LET_NEXT_START() ((void)0)
#define SPARQLAB_COPY_ASYNC_16(dst, src) ::simt::copyAsync16(dst, src)
#define SPARQLAB_COPY_ASYNC_WAIT_ALL() ::simt::copyAsyncWaitAll()
#define SPARQLAB_COPY_ASYNC_ZFILL(dst, src, bytes) ::simt::copyAsync16(dst, src, bytes)
#define SPARQLAB_NOTE_PATH(path) ::simt::notePath(path)

// --- intrinsics ----------------------------------------------------------------------------------

inline void __syncthreads() {
    simt::syncThreads();
}
template <typename T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return simt::fromBits<T>(simt::warp(simt::WarpOp::Idx, mask, simt::toBits(v), src, width));
}
template <typename T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return simt::fromBits<T>(
        simt::warp(simt::WarpOp::Up, mask, simt::toBits(v), static_cast<int>(delta), width));
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return simt::fromBits<T>(
        simt::warp(simt::WarpOp::Down, mask, simt::toBits(v), static_cast<int>(delta), width));
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
    return simt::fromBits<T>(simt::warp(simt::WarpOp::Xor, mask, simt::toBits(v), laneMask, width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
    return static_cast<unsigned>(
        simt::warp(simt::WarpOp::Ballot, mask, predicate != 0 ? 1 : 0, 0, 32));
}
template <typename T> unsigned __match_any_sync(unsigned mask, T v) {
    return static_cast<unsigned>(simt::warp(simt::WarpOp::MatchAny, mask, simt::toBits(v), 0, 32));
}

// Single roundings, never contracted into a fused multiply-add (the host build has no FMA).
inline float __fmul_rn(float a, float b) {
    return a * b;
}
inline float __fadd_rn(float a, float b) {
    return a + b;
}
inline int __popc(unsigned x) {
    return __builtin_popcount(x);
}
inline int __ffs(int x) {
    return __builtin_ffs(x);
}
template <typename T> T __ldg(const T* p) {
    return *p;
}
template <typename T> T __ldcg(const T* p) {
    return *p;
}
// The atomics: a fiber runs alone, so a read-modify-write is atomic as written.
template <typename T> T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
template <typename T> T atomicMin(T* p, T v) {
    const T old = *p;
    *p = v < old ? v : old;
    return old;
}
template <typename T> T atomicMax(T* p, T v) {
    const T old = *p;
    *p = v > old ? v : old;
    return old;
}
// CUDA's min and max of mixed integer and floating arguments.
template <typename A, typename B> std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B> std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

// --- the runtime calls of the launchers ----------------------------------------------------------

namespace simt {
cudaError_t deviceAttribute(int* value, cudaDeviceAttr attr, int device);
/// Blocks of a kernel resident on one multiprocessor: 2 for every kernel.
cudaError_t occupancy(int* blocks);
const char* errorString(cudaError_t);
} // namespace simt

#define cudaGetLastError() cudaSuccess
#define cudaPeekAtLastError() cudaSuccess
#define cudaGetErrorString(e) ::simt::errorString(e)
#define cudaGetDevice(p) (*(p) = 0, cudaSuccess)
#define cudaDeviceGetAttribute(value, attr, device) ::simt::deviceAttribute(value, attr, device)
#define cudaFuncSetAttribute(kernel, attribute, value)                                             \
    ::simt::setMaxDynamicShared(reinterpret_cast<const void*>(kernel), attribute, value)
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, ...) ::simt::occupancy(blocks)
#define cudaFuncGetAttributes(attributes, kernel) ((attributes)->ptxVersion = 90, cudaSuccess)
#define cudaEventCreate(e) (*(e) = nullptr, cudaSuccess)
#define cudaEventCreateWithFlags(e, flags) (*(e) = nullptr, cudaSuccess)
#define cudaEventRecord(...) cudaSuccess
#define cudaEventDestroy(e) cudaSuccess
#define cudaStreamCreate(s) (*(s) = nullptr, cudaSuccess)
#define cudaStreamCreateWithFlags(s, flags) (*(s) = nullptr, cudaSuccess)
#define cudaStreamDestroy(s) cudaSuccess
#define cudaStreamWaitEvent(...) cudaSuccess
#define cudaStreamSynchronize(s) cudaSuccess
#define cudaDeviceSynchronize() cudaSuccess
