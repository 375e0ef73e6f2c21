// libFuzzer target: a safetensors file (header length, JSON header, offsets, data) opened and
// every tensor loaded. Any input must give a tensor or a CheckpointError, never a crash.
#include "fuzz_common.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = sparqlab::fuzz::writeTemp(data, size, "model.safetensors");
    try {
        sparqlab::model::SafetensorsFile f(path);
        for (const auto& [name, e] : f.entries())
            (void)f.load(name, at::kFloat);
    } catch (const std::exception&) {
    }
    return 0;
}
