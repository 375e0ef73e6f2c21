#pragma once
/// \file tests/cuda/simt/emulated.h
/// The CUDA decode kernels of attention/cuda/ compiled as host C++ under the emulation of simt.h
/// (emulated_*.cpp), behind the interface of cuda/decode_cuda.h. Those translation units rename
/// the project's namespace (`sparqlab` → `sparqlab_simt`) so that the emulated kernels link
/// beside the real ones (or the stub) of the attention library; their CacheView and Request are
/// the same definitions (the same header) under the other name, which is why they are passed
/// here as the caller's own types and converted by layout (this header names them without
/// including decode_cuda.h, which the emulated units include under the other name).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sparqlab::attention::cuda {
struct CacheView; // cuda/decode_cuda.h
struct Request;
struct RmsNormStep; // cuda/step.h
struct RopeStep;
struct AppendStep;
struct GemvStep;
} // namespace sparqlab::attention::cuda

namespace sparqlab::test::emulated {

std::string unsupported(const attention::cuda::CacheView& cache,
                        const attention::cuda::Request& request);
size_t workspaceBytes(const attention::cuda::CacheView& cache,
                      const attention::cuda::Request& request);
int64_t maxSelection(const attention::cuda::CacheView& cache,
                     const attention::cuda::Request& request);
/// Runs the step to its end (the emulation orders nothing: each launch completes before the
/// next; `stream` is not read). Throws std::runtime_error as cuda::launch does.
void launch(const attention::cuda::CacheView& cache, const attention::cuda::Request& request,
            void* workspace, size_t workspaceSize, void* stream);

/// The fused operations of a decode step (cuda/step.h; simt/emulated_step.cpp), run to their end.
void rmsNorm(const attention::cuda::RmsNormStep& step, void* stream);
void rope(const attention::cuda::RopeStep& step, void* stream);
void appendStep(const attention::cuda::AppendStep& step, void* stream);
void gemv(const attention::cuda::GemvStep& step, void* stream);

/// The emulation's own promises on toy kernels (simt/selfcheck.cpp): a block's shared arrays
/// arrive poisoned, the warp intrinsics give CUDA's results, a launch a GPU refuses is refused.
/// What failed, one line each (empty: none).
std::vector<std::string> selfCheck();

/// What the emulation ran since the start: launches, blocks and fiber switches, and how many
/// times the kernels took each path they note (SPARQLAB_NOTE_PATH, cuda/internal.h).
struct Work {
    uint64_t launches = 0, blocks = 0, switches = 0;
    std::map<std::string, uint64_t> paths;
    uint64_t path(const std::string& name) const {
        const auto it = paths.find(name);
        return it == paths.end() ? 0 : it->second;
    }
};
Work work();

} // namespace sparqlab::test::emulated
