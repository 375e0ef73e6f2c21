// libFuzzer target: config.json text parsed into a ModelConfig.
#include "capture/model_config.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        (void)sparqlab::capture::parseModelConfig(
            std::string(reinterpret_cast<const char*>(data), size), "config.json");
    } catch (const std::exception&) {
    }
    return 0;
}
