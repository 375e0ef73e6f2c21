#pragma once
/// \file interpreter.h
/// Runs a parsed template (ast.h) over a context with Jinja2's semantics as transformers sets
/// it up (ImmutableSandboxedEnvironment: lists and dicts cannot be changed, namespaces can),
/// with bounds on steps, output, nesting and recursion so that a hostile template cannot hang
/// or exhaust memory. filters.cpp holds the filters and tests, methods.cpp the methods and globals,
/// builtins_common.h what they share. Internal to the engine.

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace sparqlab::text::jinja {

/// Bounds of one render (template.h's RenderOptions).
struct Limits {
    int64_t maxSteps = 20'000'000;       ///< expressions and statements evaluated
    size_t maxOutput = size_t{64} << 20; ///< bytes of output and of any one string or list
    int maxDepth = 100;                  ///< macro calls and recursive loops inside one another
};

class Interpreter {
public:
    Interpreter(const Program& program, Value context, Limits limits, std::string now);
    /// The whole template's output. Throws EvalError with "line N: …".
    std::string run();

    // What the builtins use.
    Value call(const Value& fn, Args& args);
    /// Counts one step; throws when the template has run too long.
    void step();
    /// Throws when a string or list would exceed the limits.
    void checkSize(size_t bytes);
    const std::string& now() const { return m_now; }
    [[noreturn]] void fail(const std::string& what) const;
    /// Fails with "'name' is undefined" (and what was being read) when `v` is Undefined: what
    /// Jinja2's Undefined raises on any use but printing, testing and iterating.
    void failIfUndefined(const Value& v, const std::string& reading = {}) const;
    /// Python's iter(x) as a list (a dict's keys, a string's characters; Undefined: none).
    std::vector<Value> iterate(const Value& v) const;
    /// Jinja2's getattr(obj, name) / getitem: an attribute or item, a bound method, or
    /// Undefined.
    Value getAttr(const Value& obj, const std::string& name);
    Value getItem(const Value& obj, const Value& key);
    /// Applies the filter or test named `name` (args after the value).
    Value applyFilter(const std::string& name, const Value& v, Args& args);
    bool applyTest(const std::string& name, const Value& v, Args& args);
    /// Python's binary operator `op` (+ - * / // % ** ~) on two values.
    Value binary(const std::string& op, const Value& a, const Value& b);

private:
    enum class Flow { Normal, Break, Continue };
    Flow exec(const Body& body);
    Flow exec(const Stmt& s);
    std::string capture(const Body& body);
    /// A for loop over `seq`, `depth` deep in its recursion (1: the loop itself; a recursive
    /// loop's loop(items) renders the loop again over items, one deeper).
    Flow execFor(const Stmt& s, const Value& seq, int64_t depth);
    Value eval(const Expr& e);
    bool compare(const std::string& op, const Value& a, const Value& b);
    Args evalArgs(const ArgExprs& a);
    void assign(const std::string& name, Value v);
    Value lookup(const std::string& name) const;
    Value makeMacro(const Stmt& s);
    void emit(const std::string& s);

    const Program& m_program;
    Limits m_limits;
    std::string m_now;
    std::string m_out;
    int64_t m_steps = 0;
    int m_depth = 0;
    int m_line = 0;
    /// Frames of variables: [0] the template's top level (over the context), then for loops
    /// and macro calls; a macro's body sees its own frames and [0] (m_base marks where they
    /// start). Shared: a macro holds the frames it was defined in (weakly: a frame holds the
    /// macro) and reads them as they are when it is called.
    using Frame = std::unordered_map<std::string, Value>;
    std::vector<std::shared_ptr<Frame>> m_frames;
    std::vector<size_t> m_base;
    std::unordered_map<std::string, Value> m_globals;
    Value m_context;
};

/// The builtins (filters.cpp, methods.cpp): whether a filter or test of that name exists (the
/// parser's check), and their application.
bool hasFilter(const std::string& name);
bool hasTest(const std::string& name);
Value runFilter(Interpreter& in, const std::string& name, const Value& v, Args& args);
bool runTest(Interpreter& in, const std::string& name, const Value& v, Args& args);
/// A value's method `name` bound to it (strings, dicts, lists), or Undefined.
Value method(Interpreter& in, const Value& obj, const std::string& name);
/// The globals: range, namespace, dict, raise_exception, strftime_now, joiner, cycler.
std::unordered_map<std::string, Value> globals();
/// Python's printf-style `format % args` (percent_format.cpp): a tuple's items in turn, a dict's
/// by %(name)s, any other value alone; flags, width, precision and every conversion.
std::string percentFormat(Interpreter& in, const std::string& format, const Value& args);

/// Reads argument `index` or keyword `name` of a call (`def` when absent), consuming it.
Value takeArg(Args& args, size_t index, const char* name, Value def = Value::undefined());
/// Fails when a call has arguments left over that it does not take.
void noMoreArgs(const Interpreter& in, const Args& args, const std::string& what);

} // namespace sparqlab::text::jinja
