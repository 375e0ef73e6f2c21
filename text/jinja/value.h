#pragma once
/// \file value.h
/// The values of the Jinja engine (template.h), with Python's semantics as Jinja2 gives them
/// under transformers: None, booleans, 64-bit integers, floats, strings (UTF-8, indexed by code
/// point), lists and tuples, dicts that keep their key order, namespaces (the one mutable
/// object), callables (macros, globals, bound methods) and Undefined. str() and repr() print as
/// Python does; toJson is transformers' tojson (json.dumps). Internal to the engine.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::text::jinja {

/// A render-time error; the interpreter adds the template's name and the line.
class EvalError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Value;
using List = std::vector<Value>;
/// A dict: keys in insertion order (Python 3.7+). A string key is itself; a number or None
/// (`{0: 'zero', 512: 'half'}`, Seed-OSS's template) is kept as dictKey spells it.
using Dict = std::vector<std::pair<std::string, Value>>;

/// Arguments of a call: positional, then keyword in the order given.
struct Args {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    size_t usedPositional = 0; ///< how many positional arguments a builtin has read
};

class Interpreter;
/// A callable: a macro, a global function or a value's bound method.
using Function = std::function<Value(Interpreter&, Args&)>;

/// How deep lists, tuples and dicts may nest (JSON contexts included).
constexpr int kMaxValueDepth = 256;

struct Value {
    enum class Kind {
        Undefined,
        None,
        Bool,
        Int,
        Float,
        String,
        List,
        Tuple,
        Dict,
        Namespace,
        Callable
    };

    Kind kind = Kind::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::shared_ptr<const std::string> s; ///< String
    std::shared_ptr<const List> list;     ///< List, Tuple (values are immutable in templates)
    std::shared_ptr<const Dict> dict;     ///< Dict
    std::shared_ptr<Dict> ns;             ///< Namespace: shared and mutable (set ns.x = …)
    std::shared_ptr<const Function> call; ///< Callable; a for loop's `loop` dict too
    /// Lists, tuples and dicts inside one another (0 for the rest), at most kMaxValueDepth:
    /// every recursive walk (repr, tojson, ==, <, destruction) stays shallow.
    int depth = 0;
    /// A namespace, or a list or dict holding one: a namespace attribute refuses it, so no
    /// namespace reaches itself (no cycle).
    bool holdsNamespace = false;
    /// A tuple groupby made (Jinja2's _GroupTuple): its items are also .grouper and .list.
    bool grouped = false;
    std::string undefinedName; ///< Undefined: what was looked up, for messages
    std::string callableName;  ///< Callable: for messages and str()

    static Value undefined(std::string name = {});
    static Value none();
    static Value boolean(bool v);
    static Value integer(int64_t v);
    static Value number(double v);
    static Value string(std::string v);
    static Value makeList(List v);
    static Value makeTuple(List v);
    static Value makeDict(Dict v);
    static Value makeNamespace(Dict v);
    static Value function(std::string name, Function fn);
    /// A JSON value (the render context), keys in their order.
    static Value fromJson(const nlohmann::ordered_json& j);

    bool isUndefined() const { return kind == Kind::Undefined; }
    bool isNone() const { return kind == Kind::None; }
    bool isString() const { return kind == Kind::String; }
    bool isNumber() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
    bool isSequence() const { return kind == Kind::List || kind == Kind::Tuple; }
    bool isMapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
    const std::string& str() const { return *s; }
    /// The entries of a dict or namespace.
    const Dict& entries() const { return kind == Kind::Namespace ? *ns : *dict; }
    /// The value under the string `key` of a dict or namespace; nullptr if none.
    const Value* find(const std::string& key) const;
    /// The value under a key as the dict keeps it (dictKey's spelling); nullptr if none.
    const Value* findStored(const std::string& stored) const;

    /// Python's bool(x).
    bool truthy() const;
    /// A Python type name, for messages ("str", "int", "list", …).
    std::string typeName() const;
};

/// Python's d[key] = v on an ordered dict: a key already there keeps its place and takes v
/// (a JSON object's repeated key, a dict literal's, namespace() and dict()'s keywords, set
/// ns.x); a new one goes last.
void setEntry(Dict& d, const std::string& key, Value v);

/// Python's str(x): what {{ x }} prints (Undefined prints nothing).
std::string toStr(const Value& v);
/// Python's repr(x) (how list and dict elements print).
std::string toRepr(const Value& v);
/// Python's ascii(x): repr with every non-ASCII character escaped (\xNN, \uNNNN, \UNNNNNNNN).
std::string toAscii(const Value& v);
/// Python's float repr: the shortest round trip, "1.0", "1e-05", "1.5e+16", "inf", "nan".
std::string floatRepr(double x);

/// transformers' tojson: json.dumps(x, ensure_ascii, indent (the unit of one level; none: one
/// line), separators (empty: the defaults), sort_keys). Throws EvalError for what JSON cannot
/// hold (Undefined, callables).
std::string toJson(const Value& v, bool ensureAscii, const std::optional<std::string>& indent,
                   const std::string& itemSep, const std::string& keySep, bool sortKeys);

/// A dict's key for `key`, Python's hash equality kept (1, 1.0 and True are one key): a string
/// itself, an integer, a float or None behind a "\x1f" mark no JSON key of a real context holds;
/// false where the engine keeps no such key (a tuple).
bool dictKey(const Value& key, std::string& out);
/// The key a dict entry was made with (the inverse of dictKey).
Value keyValue(const std::string& key);

/// Python's ==.
bool equals(const Value& a, const Value& b);
/// Whether Python can hash the value (a set member, a dict key): not a list or dict, nor a tuple
/// holding one.
bool hashable(const Value& v);
/// Python's <, for sorting and comparisons; throws EvalError for values without an order.
bool lessThan(const Value& a, const Value& b);

/// The code points of a UTF-8 string (invalid bytes kept as U+FFFD), and back.
std::u32string toUtf32(const std::string& s);
std::string toUtf8(const std::u32string& s);
std::string toUtf8(char32_t c);
/// Where a string stops being UTF-8 (the byte offset), or npos when it is UTF-8 throughout.
size_t invalidUtf8At(const std::string& s);

} // namespace sparqlab::text::jinja
