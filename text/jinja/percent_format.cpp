// Python's printf-style formatting (`'%05.1f' % x`, the `format` filter): str.__mod__ as
// Python's Objects/unicodeobject.c does it, on the engine's values.

#include "builtins_common.h"
#include "interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

namespace sparqlab::text::jinja::builtin {

namespace {

struct Spec {
    bool left = false, plus = false, space = false, alt = false, zero = false;
    int64_t width = -1, precision = -1;
};

/// Pads `body` (its sign and prefix already in front) to the width: spaces on the left, on the
/// right with '-', or zeros after the sign and prefix with '0'. Widths count code points.
std::string fill(const std::string& body, const Spec& s, size_t signAndPrefix, bool numeric) {
    if (!s.left && s.zero && numeric)
        return body.substr(0, signAndPrefix) + pad(body.substr(signAndPrefix),
                                                   s.width - static_cast<int64_t>(signAndPrefix),
                                                   U'0', 1);
    return pad(body, s.width, U' ', s.left ? -1 : 1);
}

/// The sign and digits of an integer for %d, %o and %x: int and bool as they are, a float
/// truncated (%d only; a whole double's exact digits, as Python's int(x) has them).
std::pair<bool, std::string> integerDigits(Interpreter& in, const Value& v, char type) {
    const bool decimal = type == 'd' || type == 'i' || type == 'u';
    if (v.kind == Value::Kind::Float && decimal) {
        if (!std::isfinite(v.f))
            in.fail("cannot convert float " + toStr(v) + " to integer");
        char buf[400];
        std::snprintf(buf, sizeof buf, "%.0f", std::abs(std::trunc(v.f)));
        return {std::trunc(v.f) < 0, buf};
    }
    if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
        in.fail(std::string("%") + type + " format: " + (decimal ? "a real number" : "an integer") +
                " is required, not " + v.typeName());
    const int64_t x = v.kind == Value::Kind::Bool ? v.b : v.i;
    return {x < 0, magnitudeDigits(x, type)};
}

std::string formatInteger(Interpreter& in, const Value& v, char type, const Spec& s) {
    auto [negative, digits] = integerDigits(in, v, type);
    if (s.precision > static_cast<int64_t>(digits.size()))
        digits.insert(0, static_cast<size_t>(s.precision) - digits.size(), '0');
    std::string prefix = negative ? "-" : s.plus ? "+" : s.space ? " " : "";
    if (s.alt && (type == 'o' || type == 'x' || type == 'X'))
        prefix += type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
    return fill(prefix + digits, s, prefix.size(), true);
}

std::string formatFloat(Interpreter& in, const Value& v, char type, const Spec& s) {
    if (!v.isNumber())
        in.fail(std::string("must be real number, not ") + v.typeName());
    const double x = number(v);
    const std::string body = cFormat(type, s.alt, s.precision < 0 ? 6 : s.precision, std::abs(x));
    const bool negative = std::signbit(x) && !std::isnan(x);
    const std::string sign = negative ? "-" : s.plus ? "+" : s.space ? " " : "";
    return fill(sign + body, s, sign.size(), true); // (Python pads inf and nan with zeros too)
}

} // namespace

std::string magnitudeDigits(int64_t x, char type) {
    const uint64_t m = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    if (type == 'b') {
        std::string digits;
        do
            digits.insert(digits.begin(), static_cast<char>('0' + ((m >> digits.size()) & 1)));
        while (digits.size() < 64 && (m >> digits.size()) != 0);
        return digits;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf,
                  type == 'o'   ? "%llo"
                  : type == 'x' ? "%llx"
                  : type == 'X' ? "%llX"
                                : "%llu",
                  static_cast<unsigned long long>(m));
    return buf;
}

std::string cFormat(char type, bool alt, int64_t precision, double x) {
    const std::string spec = std::string("%") + (alt ? "#" : "") + ".*" + type;
    const int p = static_cast<int>(std::min<int64_t>(precision, 1000000));
    const int n = std::max(std::snprintf(nullptr, 0, spec.c_str(), p, x), 0);
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), spec.c_str(), p, x);
    out.resize(static_cast<size_t>(n));
    return out;
}

} // namespace sparqlab::text::jinja::builtin

namespace sparqlab::text::jinja {

using namespace builtin;

std::string percentFormat(Interpreter& in, const std::string& format, const Value& args) {
    const bool tuple = args.kind == Value::Kind::Tuple;
    // Python takes any object with items but a tuple or a string as the mapping of %(name)s;
    // such an argument (a dict, a list) is never "not converted".
    const bool mapping =
        !tuple && (args.kind == Value::Kind::Dict || args.kind == Value::Kind::List ||
                   args.kind == Value::Kind::Namespace);
    const std::vector<Value> values = tuple ? *args.list : std::vector<Value>{args};
    size_t next = 0;
    bool named = false; // (after a %(name)s, a mapping holds no positional arguments)
    auto take = [&]() -> const Value& {
        if (next >= values.size() || (named && mapping))
            in.fail("not enough arguments for format string");
        return values[next++];
    };
    std::string out;
    const std::string& f = format;
    for (size_t k = 0; k < f.size(); ++k) {
        if (f[k] != '%') {
            out += f[k];
            continue;
        }
        if (++k >= f.size())
            in.fail("incomplete format");
        Value byNameValue;
        bool byName = false;
        if (f[k] == '(') {
            int depth = 1;
            const size_t from = ++k;
            while (k < f.size() && depth > 0) {
                depth += f[k] == '(' ? 1 : f[k] == ')' ? -1 : 0;
                ++k;
            }
            if (depth > 0)
                in.fail("incomplete format key");
            if (args.kind != Value::Kind::Dict && args.kind != Value::Kind::Namespace)
                in.fail("format requires a mapping");
            const std::string key = f.substr(from, k - 1 - from);
            const Value* v = args.find(key);
            if (!v)
                in.fail("KeyError: '" + key + "'");
            byNameValue = *v;
            byName = named = true;
        }
        Spec s;
        for (; k < f.size(); ++k) {
            const char c = f[k];
            if (c == '-')
                s.left = true;
            else if (c == '+')
                s.plus = true;
            else if (c == ' ')
                s.space = true;
            else if (c == '#')
                s.alt = true;
            else if (c == '0')
                s.zero = true;
            else
                break;
        }
        auto readNumber = [&](int64_t& into) {
            if (k < f.size() && f[k] == '*') {
                const Value& v = take();
                if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
                    in.fail("* wants int");
                into = v.kind == Value::Kind::Bool ? v.b : v.i;
                if (into > 1000000 || into < -1000000)
                    in.fail("width too big");
                into = into == -1 ? -1000001 : into; // (-1 would read as "none given")
                ++k;
                return;
            }
            if (k < f.size() && f[k] >= '0' && f[k] <= '9') {
                into = 0;
                while (k < f.size() && f[k] >= '0' && f[k] <= '9') {
                    into = into * 10 + (f[k++] - '0');
                    if (into > 1000000)
                        in.fail("width too big");
                }
            }
        };
        readNumber(s.width);
        if (s.width < -1) { // a negative * width: left-aligned
            s.left = true;
            s.width = s.width == -1000001 ? 1 : -s.width;
        }
        if (k < f.size() && f[k] == '.') {
            ++k;
            s.precision = 0;
            readNumber(s.precision);
            s.precision = std::max<int64_t>(s.precision, 0); // (a negative * precision: 0)
        }
        while (k < f.size() && (f[k] == 'h' || f[k] == 'l' || f[k] == 'L'))
            ++k;
        if (k >= f.size())
            in.fail("incomplete format");
        const char type = f[k];
        if (type == '%') {
            out += '%';
            continue;
        }
        const Value& v = byName ? byNameValue : take();
        switch (type) {
        case 's':
        case 'r':
        case 'a': {
            std::string text = type == 's' ? toStr(v) : type == 'r' ? toRepr(v) : toAscii(v);
            if (s.precision >= 0) {
                const std::u32string u = toUtf32(text);
                if (static_cast<int64_t>(u.size()) > s.precision)
                    text = toUtf8(u.substr(0, static_cast<size_t>(s.precision)));
            }
            out += fill(text, s, 0, false);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'o':
        case 'x':
        case 'X':
            out += formatInteger(in, v, type, s);
            break;
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G':
            out += formatFloat(in, v, type, s);
            break;
        case 'c': {
            std::string ch;
            if (v.isString() && toUtf32(*v.s).size() == 1)
                ch = *v.s;
            else if ((v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool) &&
                     (v.kind == Value::Kind::Bool || (v.i >= 0 && v.i <= 0x10ffff)))
                ch = toUtf8(static_cast<char32_t>(v.kind == Value::Kind::Bool ? v.b : v.i));
            else
                in.fail("%c requires an int or a unicode character");
            out += fill(ch, s, 0, false);
            break;
        }
        default:
            in.fail(std::string("unsupported format character '") + type + "'");
        }
        in.checkSize(out.size()); // (every field may pad to a million characters)
    }
    if (next < values.size() && !mapping)
        in.fail("not all arguments converted during string formatting");
    return out;
}

} // namespace sparqlab::text::jinja
