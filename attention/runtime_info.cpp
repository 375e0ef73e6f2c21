#include "runtime_info.h"

#include "cuda/decode_cuda.h"
#include "decode/engine.h"

#include <unistd.h>

#ifdef SPARQLAB_TORCH_CUDA // a CUDA libtorch (attention/CMakeLists.txt)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <malloc.h>
#include <thread>
#include <vector>

namespace sparqlab::attention {

namespace {

/// The paths of the files this process has mapped (/proc/self/maps), in map order.
std::vector<std::string> mappedFiles() {
    std::vector<std::string> out;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        const size_t slash = line.find('/');
        if (slash != std::string::npos && (out.empty() || out.back() != line.substr(slash)))
            out.push_back(line.substr(slash));
    }
    return out;
}

} // namespace

BlasInfo loadedBlas() {
    BlasInfo info;
    for (const std::string& path : mappedFiles()) {
        const std::string file = std::filesystem::path(path).filename().string();
        const bool isBlas = file.rfind("libblas.so", 0) == 0 || file.rfind("libopenblas", 0) == 0 ||
                            file.rfind("libblis", 0) == 0 || file.rfind("libmkl_rt", 0) == 0;
        if (!isBlas)
            continue;
        std::error_code ec;
        const std::filesystem::path real = std::filesystem::canonical(path, ec);
        info.library = ec ? path : real.string();
        // Debian's reference BLAS lives in .../blas/libblas.so.3; OpenBLAS in .../openblas-*/.
        info.slow = info.library.find("openblas") == std::string::npos &&
                    info.library.find("blis") == std::string::npos &&
                    info.library.find("mkl") == std::string::npos;
        if (!info.slow)
            break;
    }
    return info;
}

void restartWithPassiveOpenMP(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY") || !argv || !argv[0])
        return;
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv); // returns only on failure: then run as we are
}

void initRuntime() {
    constexpr int kKeepBytes = 1 << 30; // blocks up to 1 GiB stay in the heap for reuse
    mallopt(M_MMAP_THRESHOLD, kKeepBytes);
    mallopt(M_TRIM_THRESHOLD, kKeepBytes);
    const char* omp = std::getenv("OMP_NUM_THREADS");
    if (!omp || !*omp) {
        const unsigned n = std::thread::hardware_concurrency();
        if (n > 0)
            at::set_num_threads(static_cast<int>(n));
    }
}

std::string runtimeSummary() {
    const BlasInfo blas = loadedBlas();
    return std::string("libtorch ") + TORCH_VERSION + ", " + std::to_string(at::get_num_threads()) +
           " threads, BLAS " +
           (blas.library.empty() ? std::string("(none loaded)") : blas.library) +
           (blas.slow ? " (reference, slow)" : "") + ", decode kernels " + decodeKernelIsa() +
           ", CUDA " + (at::hasCUDA() ? "available" : "not available");
}

std::string slowBlasWarning() {
    const BlasInfo blas = loadedBlas();
    if (!blas.slow)
        return {};
    return "warning: libtorch uses the reference BLAS (" + blas.library +
           "), about ten times slower; install libopenblas0-pthread";
}

bool libtorchHasCuda() {
    for (const std::string& path : mappedFiles())
        if (path.find("libtorch_cuda") != std::string::npos ||
            path.find("libc10_cuda") != std::string::npos)
            return true;
    return false;
}

bool cudaUsable() {
    return at::hasCUDA();
}

void* currentCudaStream() {
#ifdef SPARQLAB_TORCH_CUDA
    return c10::cuda::getCurrentCUDAStream().stream();
#else
    return nullptr;
#endif
}

int64_t cudaFreeBytes() {
#ifdef SPARQLAB_TORCH_CUDA
    if (cudaUsable())
        c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    return cuda::memoryInfo().freeBytes;
}

c10::Device requireDevice(const std::string& name) {
    if (name == "cpu")
        return c10::Device(c10::kCPU);
    if (name != "cuda")
        throw std::invalid_argument("--device takes cpu or cuda, got '" + name + "'");
    if (cudaUsable())
        return c10::Device(c10::kCUDA, 0);
    if (!libtorchHasCuda())
        throw DeviceError(std::string("--device cuda: this libtorch (") + TORCH_VERSION +
                          ") is a CPU build; build against a CUDA libtorch, such as a pip "
                          "PyTorch's (README, \"With PyTorch and a GPU\")");
    throw DeviceError(
        "--device cuda: no CUDA device is visible to this process (" + cuda::deviceSummary() +
        "; CUDA_VISIBLE_DEVICES='" +
        (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "") + "')");
}

} // namespace sparqlab::attention
