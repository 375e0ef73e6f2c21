// libFuzzer target: the demo model's tokenizer on arbitrary bytes (valid and invalid UTF-8):
// encoding never fails, and decoding gives back valid UTF-8.
#include "fuzz_common.h"
#include "text/tokenizer.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const auto tok = sparqlab::text::Tokenizer::fromFolder(SPARQLAB_DEMO_MODEL_DIR);
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto ids = tok->encode(text, false);
    const std::string back = tok->decode(ids);
    if (sparqlab::text::repairUtf8(back) != back)
        std::abort(); // decode must produce valid UTF-8
    return 0;
}
