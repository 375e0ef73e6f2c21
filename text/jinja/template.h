#pragma once
/// \file template.h
/// A Jinja engine for the subset of Jinja that Hugging Face chat templates use, with the
/// semantics of Python's Jinja2 as transformers sets it up for apply_chat_template:
/// trim_blocks, lstrip_blocks, loop controls, the {% generation %} tag, an immutable sandbox,
/// transformers' tojson, raise_exception and strftime_now (docs/chat-templates.md). A template
/// it cannot render is one error naming the template, the line and the construct; a hostile
/// template meets bounds on steps, output, nesting and recursion.
///
/// Threading: a Template is immutable after parsing; render() is reentrant.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace sparqlab::text::jinja {

/// A template that cannot be parsed or rendered: "NAME: line N: what".
class TemplateError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct RenderOptions {
    /// The instant strftime_now formats, ISO-8601 in UTC ("2025-07-10T12:00:00Z"); empty: now.
    std::string now;
    int64_t maxSteps = 20'000'000;       ///< expressions and statements evaluated
    size_t maxOutput = size_t{64} << 20; ///< bytes of output (and of any one value)
    int maxDepth = 100;                  ///< macros calling one another, recursive loops
};

struct Program;

class Template {
public:
    /// Parses `source`; `name` starts every error. Unknown filters and tests are refused here.
    /// Throws TemplateError.
    static Template parse(const std::string& source, const std::string& name);
    /// Renders with the context's variables (an object; its key order is kept). Throws
    /// TemplateError.
    std::string render(const nlohmann::ordered_json& context,
                       const RenderOptions& options = {}) const;
    const std::string& name() const;

private:
    std::shared_ptr<const Program> m_program;
};

} // namespace sparqlab::text::jinja
