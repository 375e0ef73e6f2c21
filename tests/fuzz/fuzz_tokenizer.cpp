// libFuzzer target: tokenizer.json text parsed, then a fixed text encoded and decoded.
#include "fuzz_common.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto t = sparqlab::text::Tokenizer::fromJson(
            std::string(reinterpret_cast<const char*>(data), size), "tokenizer.json");
        const auto ids = t->encode("Hello, world! 123 \xc3\xa9\xf0\x9f\x98\x80 \xff", true);
        (void)t->decode(ids);
    } catch (const std::exception&) {
    }
    return 0;
}
