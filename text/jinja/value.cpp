// The engine's values (value.h): construction, Python's truthiness, ==, <, str(), repr() and
// json.dumps.

#include "value.h"

#include "text/text_pieces.h"

#include <QChar>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

namespace sparqlab::text::jinja {

namespace {
/// The mark before a dict key that is not a string as it is (dictKey).
constexpr char kKeyMark = '\x1f';
} // namespace

Value Value::undefined(std::string name) {
    Value v;
    v.undefinedName = std::move(name);
    return v;
}
Value Value::none() {
    Value v;
    v.kind = Kind::None;
    return v;
}
Value Value::boolean(bool x) {
    Value v;
    v.kind = Kind::Bool;
    v.b = x;
    return v;
}
Value Value::integer(int64_t x) {
    Value v;
    v.kind = Kind::Int;
    v.i = x;
    return v;
}
Value Value::number(double x) {
    Value v;
    v.kind = Kind::Float;
    v.f = x;
    return v;
}
Value Value::string(std::string x) {
    Value v;
    v.kind = Kind::String;
    v.s = std::make_shared<const std::string>(std::move(x));
    return v;
}
namespace {

/// Depth and namespace flag of a container from its elements; EvalError beyond the limit.
template <typename Range, typename Get> void nest(Value& v, const Range& items, Get&& get) {
    int d = 0;
    bool ns = false;
    for (const auto& item : items) {
        const Value& x = get(item);
        d = std::max(d, x.kind == Value::Kind::Namespace ? 1 : x.depth);
        ns = ns || x.holdsNamespace;
    }
    v.depth = d + 1;
    v.holdsNamespace = ns;
    if (v.depth > kMaxValueDepth)
        throw EvalError("values nested more than " + std::to_string(kMaxValueDepth) + " deep");
}

} // namespace

Value Value::makeList(List x) {
    Value v;
    v.kind = Kind::List;
    nest(v, x, [](const Value& e) -> const Value& { return e; });
    v.list = std::make_shared<const List>(std::move(x));
    return v;
}
Value Value::makeTuple(List x) {
    Value v = makeList(std::move(x));
    v.kind = Kind::Tuple;
    return v;
}
Value Value::makeDict(Dict x) {
    Value v;
    v.kind = Kind::Dict;
    nest(v, x, [](const auto& e) -> const Value& { return e.second; });
    v.dict = std::make_shared<const Dict>(std::move(x));
    return v;
}
Value Value::makeNamespace(Dict x) {
    Value v;
    v.kind = Kind::Namespace;
    for (const auto& e : x)
        if (e.second.holdsNamespace)
            throw EvalError("a namespace cannot hold a namespace");
    v.holdsNamespace = true;
    v.ns = std::make_shared<Dict>(std::move(x));
    return v;
}
Value Value::function(std::string name, Function fn) {
    Value v;
    v.kind = Kind::Callable;
    v.callableName = std::move(name);
    v.call = std::make_shared<const Function>(std::move(fn));
    return v;
}

namespace {
Value fromJsonAt(const nlohmann::ordered_json& j, int depth);
}

Value Value::fromJson(const nlohmann::ordered_json& j) {
    return fromJsonAt(j, 0);
}

namespace {
Value fromJsonAt(const nlohmann::ordered_json& j, int depth) {
    if (depth > kMaxValueDepth) // before recursing further: a deep context is refused
        throw EvalError("the context nests more than " + std::to_string(kMaxValueDepth) + " deep");
    switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
        return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
        return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
        return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
        const uint64_t u = j.get<uint64_t>();
        return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                     : Value::number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
        return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
        return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
        List l;
        for (const auto& x : j)
            l.push_back(fromJsonAt(x, depth + 1));
        return Value::makeList(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
        Dict d;
        for (auto it = j.begin(); it != j.end(); ++it) {
            // JSON allows a key twice; Python's dict keeps the last value at the first place.
            std::string key;
            dictKey(Value::string(it.key()), key);
            setEntry(d, key, fromJsonAt(it.value(), depth + 1));
        }
        return Value::makeDict(std::move(d));
    }
    default:
        return Value::undefined();
    }
}
} // namespace

void setEntry(Dict& d, const std::string& key, Value v) {
    for (auto& [k, x] : d)
        if (k == key) {
            x = std::move(v);
            return;
        }
    d.emplace_back(key, std::move(v));
}

const Value* Value::find(const std::string& key) const {
    if (key.empty() || key[0] != kKeyMark) // (a string key is kept as it is: no copy)
        return findStored(key);
    std::string stored;
    dictKey(Value::string(key), stored);
    return findStored(stored);
}

const Value* Value::findStored(const std::string& stored) const {
    if (!isMapping())
        return nullptr;
    for (const auto& [k, v] : entries())
        if (k == stored)
            return &v;
    return nullptr;
}

bool Value::truthy() const {
    switch (kind) {
    case Kind::Undefined:
    case Kind::None:
        return false;
    case Kind::Bool:
        return b;
    case Kind::Int:
        return i != 0;
    case Kind::Float:
        return f != 0;
    case Kind::String:
        return !s->empty();
    case Kind::List:
    case Kind::Tuple:
        return !list->empty();
    case Kind::Dict:
        return !dict->empty();
    case Kind::Namespace:
    case Kind::Callable:
        return true;
    }
    return false;
}

std::string Value::typeName() const {
    switch (kind) {
    case Kind::Undefined:
        return "Undefined";
    case Kind::None:
        return "NoneType";
    case Kind::Bool:
        return "bool";
    case Kind::Int:
        return "int";
    case Kind::Float:
        return "float";
    case Kind::String:
        return "str";
    case Kind::List:
        return "list";
    case Kind::Tuple:
        return "tuple";
    case Kind::Dict:
        return "dict";
    case Kind::Namespace:
        return "Namespace";
    case Kind::Callable:
        return "function";
    }
    return "object";
}

// --- UTF-8 ----------------------------------------------------------------------------------

std::u32string toUtf32(const std::string& s) {
    // Invalid sequences become U+FFFD, one per byte, as Python's errors="replace" reading bytes.
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const size_t n = pieces::utf8Length(s, i);
        out.push_back(n ? static_cast<char32_t>(pieces::decodeUtf8(s, i, n)) : U'\ufffd');
        i += n ? n : 1;
    }
    return out;
}

size_t invalidUtf8At(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        const size_t n = pieces::utf8Length(s, i);
        if (n == 0)
            return i;
        i += n;
    }
    return std::string::npos;
}

std::string toUtf8(char32_t c) {
    return toUtf8(std::u32string(1, c));
}

std::string toUtf8(const std::u32string& s) {
    std::string out;
    out.reserve(s.size());
    for (const char32_t c : s)
        out += pieces::encodeUtf8(static_cast<uint32_t>(c));
    return out;
}

// --- printing ---------------------------------------------------------------------------------

std::string floatRepr(double x) {
    if (std::isnan(x))
        return "nan";
    if (std::isinf(x))
        return x > 0 ? "inf" : "-inf";
    char buf[64];
    // The shortest digits that round trip, as Python's repr chooses them.
    const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string sci(buf, r.ptr);
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    const size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int exp = std::stoi(sci.substr(e + 1));
    const int n = static_cast<int>(digits.size());
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp >= 0) {
            std::string whole = digits.substr(0, static_cast<size_t>(std::min(n, exp + 1)));
            whole.append(static_cast<size_t>(std::max(0, exp + 1 - n)), '0');
            const std::string frac =
                n > exp + 1 ? digits.substr(static_cast<size_t>(exp + 1)) : "0";
            out = whole + "." + frac;
        } else {
            out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
        }
        return sign + out;
    }
    std::string out = digits.substr(0, 1);
    if (n > 1)
        out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return sign + out + ebuf;
}

namespace {

/// Whether Python's str.isprintable() holds for the code point (repr keeps it as it is).
bool printable(char32_t c) {
    if (c < 0x20 || c == 0x7f)
        return false;
    if (c < 0x7f)
        return true;
    switch (QChar::category(static_cast<uint>(c))) {
    case QChar::Other_Control:
    case QChar::Other_Format:
    case QChar::Other_Surrogate:
    case QChar::Other_PrivateUse:
    case QChar::Other_NotAssigned:
    case QChar::Separator_Line:
    case QChar::Separator_Paragraph:
    case QChar::Separator_Space:
        return false;
    default:
        return true;
    }
}

std::string stringRepr(const std::string& s) {
    const bool single = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
    const char q = single ? '"' : '\'';
    std::u32string out;
    out.push_back(static_cast<char32_t>(q));
    for (const char32_t c : toUtf32(s)) {
        char buf[16];
        if (c == '\\' || c == static_cast<char32_t>(q)) {
            out.push_back('\\');
            out.push_back(c);
        } else if (c == '\n') {
            out += U"\\n";
        } else if (c == '\r') {
            out += U"\\r";
        } else if (c == '\t') {
            out += U"\\t";
        } else if (!printable(c)) {
            if (c < 0x100)
                std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
            else if (c < 0x10000)
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            else
                std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
            for (const char* p = buf; *p; ++p)
                out.push_back(static_cast<char32_t>(*p));
        } else {
            out.push_back(c);
        }
    }
    out.push_back(static_cast<char32_t>(q));
    return toUtf8(out);
}

std::string join(const List& l, const char* open, const char* close, bool tuple) {
    std::string out = open;
    for (size_t k = 0; k < l.size(); ++k)
        out += (k ? ", " : "") + toRepr(l[k]);
    if (tuple && l.size() == 1)
        out += ",";
    return out + close;
}

std::string dictRepr(const Dict& d) {
    std::string out = "{";
    for (size_t k = 0; k < d.size(); ++k)
        out += (k ? ", " : "") + toRepr(keyValue(d[k].first)) + ": " + toRepr(d[k].second);
    return out + "}";
}

} // namespace

std::string toAscii(const Value& v) {
    std::string out;
    for (const char32_t c : toUtf32(toRepr(v))) {
        char esc[16];
        if (c < 0x80) {
            out += static_cast<char>(c);
            continue;
        }
        std::snprintf(esc, sizeof esc,
                      c <= 0xff     ? "\\x%02x"
                      : c <= 0xffff ? "\\u%04x"
                                    : "\\U%08x",
                      static_cast<unsigned>(c));
        out += esc;
    }
    return out;
}

std::string toStr(const Value& v) {
    switch (v.kind) {
    case Value::Kind::Undefined:
        return "";
    case Value::Kind::String:
        return *v.s;
    default:
        return toRepr(v);
    }
}

std::string toRepr(const Value& v) {
    switch (v.kind) {
    case Value::Kind::Undefined:
        return "Undefined";
    case Value::Kind::None:
        return "None";
    case Value::Kind::Bool:
        return v.b ? "True" : "False";
    case Value::Kind::Int:
        return std::to_string(v.i);
    case Value::Kind::Float:
        return floatRepr(v.f);
    case Value::Kind::String:
        return stringRepr(*v.s);
    case Value::Kind::List:
        return join(*v.list, "[", "]", false);
    case Value::Kind::Tuple:
        return join(*v.list, "(", ")", true);
    case Value::Kind::Dict:
        return dictRepr(*v.dict);
    case Value::Kind::Namespace:
        return "<Namespace " + dictRepr(*v.ns) + ">";
    case Value::Kind::Callable:
        return "<function " + v.callableName + ">";
    }
    return "";
}

// --- JSON (json.dumps) ----------------------------------------------------------------------

namespace {

std::string jsonString(const std::string& s, bool ensureAscii) {
    std::string out = "\"";
    char buf[16];
    for (const char32_t c : toUtf32(s)) {
        switch (c) {
        case '"':
            out += "\\\"";
            continue;
        case '\\':
            out += "\\\\";
            continue;
        case '\n':
            out += "\\n";
            continue;
        case '\r':
            out += "\\r";
            continue;
        case '\t':
            out += "\\t";
            continue;
        case '\b':
            out += "\\b";
            continue;
        case '\f':
            out += "\\f";
            continue;
        default:
            break;
        }
        if (c < 0x20 || (ensureAscii && c > 0x7e)) {
            if (c < 0x10000) {
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
                out += buf;
            } else { // a surrogate pair
                const char32_t u = c - 0x10000;
                std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x",
                              static_cast<unsigned>(0xd800 + (u >> 10)),
                              static_cast<unsigned>(0xdc00 + (u & 0x3ff)));
                out += buf;
            }
        } else {
            out += toUtf8(c);
        }
    }
    return out + "\"";
}

void dumpJson(const Value& v, bool ensureAscii, const std::optional<std::string>& indent,
              const std::string& itemSep, const std::string& keySep, bool sortKeys, int level,
              std::string& out) {
    auto newline = [&](int l) {
        if (indent) {
            out += '\n';
            for (int k = 0; k < l; ++k)
                out += *indent;
            if (out.size() >
                (size_t{64} << 20)) // (an indent repeated at every level of every line)
                throw EvalError("tojson: the output passes 64 MiB");
        }
    };
    switch (v.kind) {
    case Value::Kind::None:
        out += "null";
        return;
    case Value::Kind::Bool:
        out += v.b ? "true" : "false";
        return;
    case Value::Kind::Int:
        out += std::to_string(v.i);
        return;
    case Value::Kind::Float:
        out += std::isnan(v.f)   ? "NaN"
               : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                                 : floatRepr(v.f);
        return;
    case Value::Kind::String:
        out += jsonString(*v.s, ensureAscii);
        return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
        if (v.list->empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
            if (k)
                out += itemSep;
            newline(level + 1);
            dumpJson((*v.list)[k], ensureAscii, indent, itemSep, keySep, sortKeys, level + 1, out);
        }
        newline(level);
        out += ']';
        return;
    }
    case Value::Kind::Dict: {
        if (v.dict->empty()) {
            out += "{}";
            return;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& e : *v.dict)
            items.push_back(&e);
        if (sortKeys)
            std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
                return lessThan(keyValue(a->first), keyValue(b->first)); // (mixed: TypeError)
            });
        out += '{';
        for (size_t k = 0; k < items.size(); ++k) {
            if (k)
                out += itemSep;
            newline(level + 1);
            // json.dumps writes a number's key as its text and None's as "null".
            const Value key = keyValue(items[k]->first);
            out += jsonString(key.isString() ? *key.s
                              : key.isNone() ? std::string("null")
                                             : toStr(key),
                              ensureAscii) +
                   keySep;
            dumpJson(items[k]->second, ensureAscii, indent, itemSep, keySep, sortKeys, level + 1,
                     out);
        }
        newline(level);
        out += '}';
        return;
    }
    default:
        throw EvalError("Object of type " + v.typeName() + " is not JSON serializable");
    }
}

} // namespace

std::string toJson(const Value& v, bool ensureAscii, const std::optional<std::string>& indent,
                   const std::string& itemSep, const std::string& keySep, bool sortKeys) {
    std::string out;
    dumpJson(v, ensureAscii, indent, itemSep, keySep, sortKeys, 0, out);
    return out;
}

// --- comparisons ------------------------------------------------------------------------------

namespace {
double asDouble(const Value& v) {
    return v.kind == Value::Kind::Float  ? v.f
           : v.kind == Value::Kind::Bool ? (v.b ? 1.0 : 0.0)
                                         : static_cast<double>(v.i);
}
int64_t asInt(const Value& v) {
    return v.kind == Value::Kind::Bool ? (v.b ? 1 : 0) : v.i;
}
} // namespace

bool hashable(const Value& v) {
    if (v.kind == Value::Kind::List || v.kind == Value::Kind::Dict)
        return false;
    return v.kind != Value::Kind::Tuple ||
           std::all_of(v.list->begin(), v.list->end(), [](const Value& x) { return hashable(x); });
}

bool dictKey(const Value& key, std::string& out) {
    switch (key.kind) {
    case Value::Kind::String: // (one that starts with the mark is kept behind it too)
        out = key.s->empty() || (*key.s)[0] != kKeyMark ? *key.s
                                                        : std::string(1, kKeyMark) + "s" + *key.s;
        return true;
    case Value::Kind::Bool:
    case Value::Kind::Int:
        out = std::string(1, kKeyMark) + "i" +
              std::to_string(key.kind == Value::Kind::Bool ? key.b : key.i);
        return true;
    case Value::Kind::Float:
        if (std::isfinite(key.f) && key.f == std::floor(key.f) && std::abs(key.f) < 9.2e18)
            out = std::string(1, kKeyMark) + "i" + std::to_string(static_cast<int64_t>(key.f));
        else
            out = std::string(1, kKeyMark) + "f" + floatRepr(key.f);
        return true;
    case Value::Kind::None:
        out = std::string(1, kKeyMark) + "n";
        return true;
    default:
        return false;
    }
}

Value keyValue(const std::string& key) {
    if (key.size() < 2 || key[0] != kKeyMark)
        return Value::string(key);
    const std::string rest = key.substr(2);
    if (key[1] == 'i') {
        int64_t i = 0;
        std::from_chars(rest.data(), rest.data() + rest.size(), i);
        return Value::integer(i);
    }
    if (key[1] == 'f') // (floatRepr's text: a number, "inf", "-inf" or "nan")
        return Value::number(rest == "inf"    ? INFINITY
                             : rest == "-inf" ? -INFINITY
                             : rest == "nan"  ? NAN
                                              : std::strtod(rest.c_str(), nullptr));
    if (key[1] == 's')
        return Value::string(rest);
    return Value::none();
}

bool equals(const Value& a, const Value& b) {
    if (a.isNumber() && b.isNumber()) {
        if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float)
            return asDouble(a) == asDouble(b);
        return asInt(a) == asInt(b);
    }
    if (a.kind != b.kind) {
        const bool seqs = a.isSequence() && b.isSequence();
        if (!seqs)
            return false;
        return false; // Python: [1] != (1,)
    }
    switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
        return true;
    case Value::Kind::String:
        return *a.s == *b.s;
    case Value::Kind::List:
    case Value::Kind::Tuple:
        if (a.list->size() != b.list->size())
            return false;
        for (size_t k = 0; k < a.list->size(); ++k)
            if (!equals((*a.list)[k], (*b.list)[k]))
                return false;
        return true;
    case Value::Kind::Dict: {
        if (a.dict->size() != b.dict->size())
            return false;
        for (const auto& [k, v] : *a.dict) {
            const Value* o = b.findStored(k);
            if (!o || !equals(v, *o))
                return false;
        }
        return true;
    }
    case Value::Kind::Namespace:
        return a.ns == b.ns;
    case Value::Kind::Callable:
        return a.call == b.call;
    default:
        return false;
    }
}

bool lessThan(const Value& a, const Value& b) {
    if (a.isNumber() && b.isNumber()) {
        if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float)
            return asDouble(a) < asDouble(b);
        return asInt(a) < asInt(b);
    }
    if (a.isString() && b.isString())
        return *a.s < *b.s; // UTF-8 byte order is code point order
    if (a.kind == b.kind && a.isSequence()) {
        const size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k) {
            if (!equals((*a.list)[k], (*b.list)[k]))
                return lessThan((*a.list)[k], (*b.list)[k]);
        }
        return a.list->size() < b.list->size();
    }
    throw EvalError("'<' not supported between instances of '" + a.typeName() + "' and '" +
                    b.typeName() + "'");
}

} // namespace sparqlab::text::jinja
