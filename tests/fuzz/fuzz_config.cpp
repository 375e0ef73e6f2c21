// libFuzzer target: config.json text parsed into a ModelConfig (every family, v4 and v5 RoPE
// keys, experts, MLA, NoPE and chunk lists), then what is computed from it before any weight is
// read: the parameter counts, the attention features and the summary the GUI shows.
#include "fuzz_common.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const sparqlab::model::ModelConfig c = sparqlab::model::parseModelConfig(
            std::string(reinterpret_cast<const char*>(data), size), "config.json");
        (void)c.parameterCount();
        (void)c.expertParameterCount();
        (void)sparqlab::model::attentionFeaturesJson(c);
        (void)sparqlab::model::attentionModifierSummary(c);
    } catch (const std::exception&) {
    }
    return 0;
}
