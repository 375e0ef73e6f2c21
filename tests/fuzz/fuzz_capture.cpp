// libFuzzer target: a capture file (HDF5) opened and every example read.
#include "capture/capture_file.h"
#include "capture/h5.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // A file whose metadata takes libhdf5 longer than this is refused; 2 s rather than the
    // app's 20 keeps the fuzzer fast on inputs that make libhdf5 loop.
    sparqlab::h5::File::setProbeTimeLimit(std::chrono::seconds(2));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = sparqlab::fuzz::writeTemp(data, size, "capture.h5");
    try {
        sparqlab::capture::CaptureReader r(path);
        for (int64_t i = 0; i < r.count(); ++i)
            (void)r.read(i);
    } catch (const std::exception&) {
    }
    return 0;
}
