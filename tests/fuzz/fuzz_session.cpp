// libFuzzer target: a lab session (HDF5: a capture and its /session group) read and checked,
// then drawn as the lab draws it at its query: the head view of its layer and head, the query ×
// key map and the overview.
#include "analysis/lab.h"
#include "analysis/lab_map.h"
#include "analysis/session.h"
#include "capture/h5.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    sparqlab::h5::File::setProbeTimeLimit(std::chrono::seconds(2)); // as fuzz_capture
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = sparqlab::fuzz::writeTemp(data, size, "session.h5");
    try {
        const sparqlab::analysis::Session s = sparqlab::analysis::readSession(path);
        const sparqlab::analysis::LabCapture& c = *s.capture;
        if (c.positions() > 256 || c.layers() > 4 || c.heads() > 8 || c.headDim() > 64)
            return 0; // keep each input cheap; the checks above already ran
        const auto shown = s.queryPosition >= 0                ? c.atPosition(s.queryPosition)
                           : s.step >= 0 && s.step < c.steps() ? c.atStep(s.step)
                                                               : s.capture;
        (void)sparqlab::analysis::headState(*shown, s.layer, s.head, s.config);
        (void)sparqlab::analysis::queryKeyMap(*shown, s.layer, s.head, s.config, 16, 64);
        (void)sparqlab::analysis::overview(*shown, s.config);
    } catch (const std::exception&) {
    }
    return 0;
}
