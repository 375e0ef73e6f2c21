#pragma once
/// \file runtime_info.h
/// Facts about the libtorch runtime a user should know: which BLAS is loaded, threads, CUDA.

#include <c10/core/Device.h>

#include <stdexcept>
#include <string>

namespace sparqlab::attention {

/// The BLAS library this process has loaded.
struct BlasInfo {
    std::string library; ///< resolved path of the loaded libblas (empty if none found)
    bool slow = false;   ///< true for the reference (netlib) BLAS, about ten times slower
};

/// Reads /proc/self/maps for the BLAS that libtorch resolved at load time.
BlasInfo loadedBlas();

/// Process-wide settings for speed, called once at start-up by each executable: libtorch's
/// intra-op threads to the cores available (OpenMP may default to one here) unless
/// OMP_NUM_THREADS is set, and glibc's malloc kept from returning large tensors' pages to the
/// system after each operation (page faults on every fresh 50 MB score matrix cost more than
/// the arithmetic).
void initRuntime();

/// Called first in main(): when OMP_WAIT_POLICY is unset, sets it to PASSIVE and restarts the
/// executable (libgomp reads it only when it loads). libtorch's OpenMP threads otherwise spin
/// between operations and starve OpenBLAS's own threads: on two cores a one-token decode step
/// of a 124M-parameter model ran 3× slower. Returns only when no restart happened.
void restartWithPassiveOpenMP(char** argv);

/// One line: libtorch version, threads, BLAS and CUDA availability.
std::string runtimeSummary();

/// A warning to print when the BLAS is slow (empty when it is fine).
std::string slowBlasWarning();

/// A device asked for (`--device`, the lab's device choice) that this process cannot use.
class DeviceError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Whether this libtorch was built with CUDA (its CUDA library is loaded in this process).
bool libtorchHasCuda();

/// Whether computing on the CUDA device works here: a CUDA libtorch and a visible device.
bool cudaUsable();

/// libtorch's current CUDA stream (cudaStream_t): the stream every CUDA kernel of ours is
/// launched on, the fused step operations' and the attention's alike, so that they keep
/// libtorch's order whatever stream a caller makes current. Null (the legacy default stream)
/// with a CPU libtorch.
void* currentCudaStream();

/// The CUDA device's free memory in bytes, counting what libtorch's caching allocator holds but
/// no tensor uses (it is handed back first); 0 where unknown (no device, or no kernels built).
int64_t cudaFreeBytes();

/// The device `name` names: "cpu" or "cuda". Throws std::invalid_argument for another name and
/// DeviceError, one line saying what is missing, when CUDA is asked for and this libtorch is a CPU
/// build or no CUDA device is visible.
c10::Device requireDevice(const std::string& name);

} // namespace sparqlab::attention
