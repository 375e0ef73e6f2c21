// The emulation's own promises, checked on toy kernels before test_cuda_emulated trusts it with
// the real ones (emulated.h, selfCheck): a block's shared arrays arrive poisoned, never as the
// last block left them, also in a kernel template; an asynchronous copy leaves poison until its
// thread's wait, then lands; the warp intrinsics give CUDA's results; a launch a GPU refuses is
// refused.

#include "simt.h"

#include "emulated.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

/// Each block reads its shared array before writing it, then leaves a mark in it.
template <int N> __global__ void readsSharedFirst(uint32_t* seen) {
    SPARQLAB_SHARED(uint32_t, a, N);
    if (threadIdx.x == 0)
        seen[blockIdx.x] = a[N - 1];
    __syncthreads();
    if (threadIdx.x == 0)
        a[N - 1] = 42u;
}

/// Shuffles, the ballot and match_any of 64 threads, one result a thread and intrinsic.
__global__ void warpOps(int* out) {
    const int t = threadIdx.x, lane = t & 31;
    out[t * 6 + 0] = __shfl_xor_sync(0xffffffffu, t, 5);
    out[t * 6 + 1] = __shfl_up_sync(0xffffffffu, t, 3);
    out[t * 6 + 2] = __shfl_down_sync(0xffffffffu, t, 2, 8);
    out[t * 6 + 3] = __shfl_sync(0xffffffffu, t, 7, 16);
    out[t * 6 + 4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
    out[t * 6 + 5] = static_cast<int>(__match_any_sync(0xffffffffu, lane / 4));
}

/// Each thread writes its slot of shared memory, copies 16 bytes into it asynchronously and reads
/// the slot before and after waiting for the copy.
__global__ void copiesAsync(const uint4* in, uint32_t* before, uint32_t* after) {
    SPARQLAB_SHARED(uint4, slot, 32);
    const int t = threadIdx.x;
    slot[t] = uint4{7, 7, 7, 7};
    SPARQLAB_COPY_ASYNC_16(slot + t, in + t);
    before[t] = slot[t].x;
    SPARQLAB_COPY_ASYNC_WAIT_ALL();
    after[t] = slot[t].w;
}

/// Thread t copies the first 4·(t % 5) bytes of in + 4t into its slot (the rest zeros) and
/// writes the slot out after its wait.
__global__ void copiesAsyncPart(const uint32_t* in, uint32_t* after) {
    SPARQLAB_SHARED(uint4, slot, 32);
    const int t = threadIdx.x;
    SPARQLAB_COPY_ASYNC_ZFILL(slot + t, in + 4 * t, 4 * (t % 5));
    SPARQLAB_COPY_ASYNC_WAIT_ALL();
    const uint4 v = slot[t];
    after[4 * t] = v.x;
    after[4 * t + 1] = v.y;
    after[4 * t + 2] = v.z;
    after[4 * t + 3] = v.w;
}

__global__ void nothing(int) {}

} // namespace

namespace sparqlab::test::emulated {

std::vector<std::string> selfCheck() {
    std::vector<std::string> failed;
    uint32_t seen[3] = {0, 0, 0};
    SPARQLAB_LAUNCH(3, 32, 0, nullptr, readsSharedFirst<5>)(seen);
    for (int b = 0; b < 3; ++b)
        if (seen[b] != 0xFFFFFFFFu)
            failed.push_back("block " + std::to_string(b) +
                             " found its shared array as the last block left it, not poisoned");

    std::vector<uint4> in(32);
    for (uint32_t t = 0; t < 32; ++t)
        in[t] = uint4{t, t, t, 1000 + t};
    uint32_t before[32], after[32];
    SPARQLAB_LAUNCH(1, 32, 0, nullptr, copiesAsync)(in.data(), before, after);
    for (int t = 0; t < 32; ++t)
        if (before[t] != 0xFFFFFFFFu || after[t] != 1000u + static_cast<uint32_t>(t)) {
            failed.push_back("an asynchronous copy of thread " + std::to_string(t) +
                             " read before its wait " + std::to_string(before[t]) +
                             " (not the poison), after it " + std::to_string(after[t]));
            break;
        }

    // The last thread reads 4 · (31 % 5) = 4 bytes: `part` ends there, so that reading past them
    // is a heap overflow (AddressSanitizer's build).
    std::vector<uint32_t> part(4 * 31 + 1);
    for (size_t i = 0; i < part.size(); ++i)
        part[i] = static_cast<uint32_t>(i) + 1;
    std::vector<uint32_t> got(4 * 32);
    SPARQLAB_LAUNCH(1, 32, 0, nullptr, copiesAsyncPart)(part.data(), got.data());
    for (uint32_t i = 0; i < 4 * 32; ++i)
        if (got[i] != (i % 4 < (i / 4) % 5 ? i + 1 : 0u)) {
            failed.push_back("a copy of part of 16 bytes gave word " + std::to_string(i) + " " +
                             std::to_string(got[i]) + ": not the source's word, or not zero");
            break;
        }

    std::vector<int> out(64 * 6);
    SPARQLAB_LAUNCH(1, 64, 0, nullptr, warpOps)(out.data());
    for (int t = 0; t < 64; ++t) {
        const int lane = t & 31, warpBase = t & ~31;
        const int seg16 = lane & ~15;
        unsigned ballot = 0, match = 0;
        for (int l = 0; l < 32; ++l) {
            ballot |= (l % 3 == 0 ? 1u : 0u) << l;
            match |= (l / 4 == lane / 4 ? 1u : 0u) << l;
        }
        const int want[6] = {warpBase + (lane ^ 5),          lane >= 3 ? t - 3 : t,
                             (lane & 7) + 2 < 8 ? t + 2 : t, warpBase + seg16 + 7,
                             static_cast<int>(ballot),       static_cast<int>(match)};
        for (int k = 0; k < 6; ++k)
            if (out[t * 6 + k] != want[k]) {
                failed.push_back("warp intrinsic " + std::to_string(k) + " of thread " +
                                 std::to_string(t) + ": " + std::to_string(out[t * 6 + k]) +
                                 ", CUDA gives " + std::to_string(want[k]));
                break;
            }
    }

    auto refused = [&failed](const char* what, const auto& launch) {
        try {
            launch();
            failed.push_back(std::string("launched what a GPU refuses: ") + what);
        } catch (const std::runtime_error&) {
        }
    };
    refused("a grid of 65,536 blocks in y", [] {
        SPARQLAB_LAUNCH(dim3(1, 65536), 32, 0, nullptr, nothing)(0);
    });
    refused("64 KiB of dynamic shared memory without raising the kernel's limit", [] {
        SPARQLAB_LAUNCH(1, 32, 64 * 1024, nullptr, nothing)(0);
    });
    refused("a block of 1,025 threads", [] { SPARQLAB_LAUNCH(1, 1025, 0, nullptr, nothing)(0); });
    return failed;
}

} // namespace sparqlab::test::emulated
