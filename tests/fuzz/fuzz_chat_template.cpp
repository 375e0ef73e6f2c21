// libFuzzer target: a chat template (the Jinja lexer, parser and evaluator) rendered with a
// conversation, tools and special tokens, or with the context after a "\n---\n" line when that
// is a JSON object. Low bounds (steps, output, depth) keep every input fast: a hostile template
// must end in a TemplateError, never hang, crash or exhaust memory.
#include "fuzz_common.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"

namespace {

const nlohmann::ordered_json& defaultContext() {
    static const nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({
  "messages": [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                 "function": {"name": "f", "arguments": {"a": 1}}}]},
               {"role": "tool", "name": "f", "content": "{\"r\": 2}"},
               {"role": "user", "content": [{"type": "text", "text": "Why?"}]}],
  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
    return c;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    std::string source = input;
    nlohmann::ordered_json context = defaultContext();
    if (const size_t sep = input.find("\n---\n"); sep != std::string::npos) {
        source = input.substr(0, sep);
        try {
            auto c = nlohmann::ordered_json::parse(input.substr(sep + 5));
            if (c.is_object())
                context = std::move(c);
        } catch (const std::exception&) {
        }
    }
    sparqlab::text::jinja::RenderOptions o;
    o.now = "2025-07-10T12:00:00Z";
    o.maxSteps = 200000;
    o.maxOutput = size_t{1} << 20;
    o.maxDepth = 50;
    try {
        const auto t = sparqlab::text::jinja::Template::parse(source, "fuzz.jinja");
        (void)t.render(context, o);
    } catch (const sparqlab::text::jinja::TemplateError&) {
    }
    return 0;
}
