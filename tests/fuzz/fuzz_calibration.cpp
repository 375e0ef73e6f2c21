// libFuzzer target: a calibration file (HDF5, Loki's bases or Double Sparsity's channels)
// read and checked, then used by the method it calibrates on one small step.
#include "attention/attention.h"
#include "capture/calibration_file.h"
#include "capture/h5.h"
#include "fuzz_common.h"

#include <ATen/ATen.h>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    sparqlab::h5::File::setProbeTimeLimit(std::chrono::seconds(2)); // as fuzz_capture
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = sparqlab::fuzz::writeTemp(data, size, "calibration.h5");
    try {
        sparqlab::capture::CalibrationInfo info;
        const auto cal = sparqlab::capture::readCalibration(path, &info);
        if (info.nHeads > 8 || info.nKvHeads > 8 || info.headDim > 64 || info.nLayers > 4)
            return 0; // keep each input cheap; the checks above already ran
        namespace attn = sparqlab::attention;
        attn::AttentionConfig c;
        c.method = cal->method;
        c.calibration = cal;
        c.layer = info.nLayers - 1;
        c.r = std::max<int64_t>(1, info.headDim / 2);
        c.k = 4;
        attn::AttentionInputs in;
        in.q = at::randn({1, info.nHeads, info.headDim});
        in.k = at::randn({1, info.nKvHeads, 16, info.headDim});
        in.v = at::randn({1, info.nKvHeads, 16, info.headDim});
        (void)attn::attend(in, c);
    } catch (const std::exception&) {
    }
    return 0;
}
