#include "runtime_info.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>

namespace sparqlab::attention {

BlasInfo loadedBlas() {
    BlasInfo info;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        const size_t slash = line.find('/');
        if (slash == std::string::npos)
            continue;
        const std::string path = line.substr(slash);
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

std::string runtimeSummary() {
    const BlasInfo blas = loadedBlas();
    return std::string("libtorch ") + TORCH_VERSION + ", " + std::to_string(at::get_num_threads()) +
           " threads, BLAS " +
           (blas.library.empty() ? std::string("(none loaded)") : blas.library) +
           (blas.slow ? " (reference, slow)" : "") + ", CUDA " +
           (at::hasCUDA() ? "available" : "not available");
}

std::string slowBlasWarning() {
    const BlasInfo blas = loadedBlas();
    if (!blas.slow)
        return {};
    return "warning: libtorch uses the reference BLAS (" + blas.library +
           "), about ten times slower; install libopenblas0-pthread";
}

} // namespace sparqlab::attention
