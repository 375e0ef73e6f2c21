// sparqlab-cli chat-template: a chat template rendered byte for byte (docs/chat-templates.md),
// from a file and a context (the goldens' form) or from a model's own template and messages.

#include "commands.h"

#include "model/model.h"
#include "text/chat_template.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace sparqlab::cli {

int runChatTemplate(const std::vector<std::string>& argv) {
    const Args a(argv, {"template", "context", "model", "messages", "now"},
                 {"add-generation-prompt"});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    text::jinja::RenderOptions o;
    o.now = a.get("now").value_or("");
    std::string out;
    if (const auto file = a.get("template")) {
        if (a.has("model") || a.has("messages"))
            throw UsageError("--template takes --context, not --model or --messages");
        const std::string contextPath = a.required("context");
        nlohmann::ordered_json context;
        try {
            context = nlohmann::ordered_json::parse(readTextFile(contextPath));
        } catch (const nlohmann::ordered_json::exception& e) {
            throw std::runtime_error(contextPath + ": malformed JSON: " + e.what());
        }
        if (!context.is_object())
            throw std::runtime_error(contextPath + ": the context must be a JSON object");
        const auto t = text::jinja::Template::parse(readTextFile(*file), *file);
        out = t.render(context, o);
    } else {
        const std::string model = a.required("model");
        const std::string folder = model::resolveModelFolder(model);
        const text::ChatTemplate t = text::requireChatTemplate(folder);
        const std::string messagesPath = a.required("messages");
        const nlohmann::ordered_json messages =
            text::parseMessages(readTextFile(messagesPath), messagesPath);
        out =
            t.render(messages, a.has("add-generation-prompt"), nlohmann::ordered_json::object(), o)
                .text;
    }
    std::fwrite(out.data(), 1, out.size(), stdout); // byte for byte, nothing added
    return 0;
}

} // namespace sparqlab::cli
