// Python's str.format fields as Jinja2 runs them: `{0}`, `{name}`, `{0[1]}`, `{a.b}`, a
// conversion (`!r`, `!s`, `!a`) and the format-spec mini-language (`{:>8.2f}`, `{:,}`,
// `{:#x}`) of Python's format() on strings, integers and floats.

#include "builtins_common.h"
#include "interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace sparqlab::text::jinja::builtin {

namespace {

struct FormatSpec {
    char32_t fill = ' ';
    char align = 0; // '<', '>', '^', '=' or 0 (the type's default)
    char sign = 0;  // '+', '-', ' ' or 0 (not given)
    bool alt = false, zero = false;
    int64_t width = -1, precision = -1;
    char grouping = 0; // ',' or '_'
    char type = 0;
};

FormatSpec parseSpec(Interpreter& in, const std::string& spec) {
    FormatSpec s;
    const std::u32string u = toUtf32(spec);
    size_t k = 0;
    auto isAlign = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    if (u.size() >= 2 && isAlign(u[1])) {
        s.fill = u[0];
        s.align = static_cast<char>(u[1]);
        k = 2;
    } else if (!u.empty() && isAlign(u[0])) {
        s.align = static_cast<char>(u[0]);
        k = 1;
    }
    if (k < u.size() && (u[k] == '+' || u[k] == '-' || u[k] == ' '))
        s.sign = static_cast<char>(u[k++]);
    if (k < u.size() && u[k] == '#') {
        s.alt = true;
        ++k;
    }
    if (k < u.size() && u[k] == '0') {
        s.zero = true;
        ++k;
    }
    auto digits = [&](int64_t& into) {
        if (k >= u.size() || u[k] < '0' || u[k] > '9')
            return false;
        into = 0;
        while (k < u.size() && u[k] >= '0' && u[k] <= '9') {
            into = into * 10 + static_cast<int64_t>(u[k++] - '0');
            if (into > 1000000)
                in.fail("Too many decimal digits in format string");
        }
        return true;
    };
    digits(s.width);
    if (k < u.size() && (u[k] == ',' || u[k] == '_'))
        s.grouping = static_cast<char>(u[k++]);
    if (k < u.size() && u[k] == '.') {
        ++k;
        if (!digits(s.precision))
            in.fail("Format specifier missing precision");
    }
    if (k < u.size()) {
        if (u[k] > 0x7f)
            in.fail("Invalid format specifier '" + spec + "'");
        s.type = static_cast<char>(u[k++]);
    }
    if (k < u.size())
        in.fail("Invalid format specifier '" + spec + "'");
    return s;
}

/// Groups a run of digits by threes (or fours for b, o, x, X) with `sep`.
std::string grouped(const std::string& digits, char sep, size_t every) {
    if (!sep)
        return digits;
    std::string out;
    const size_t n = digits.size();
    for (size_t i = 0; i < n; ++i) {
        if (i && (n - i) % every == 0)
            out += sep;
        out += digits[i];
    }
    return out;
}

/// Pads `sign` + `body` to the width by the alignment ('=' puts the fill after the sign).
std::string aligned(const std::string& sign, const std::string& body, const FormatSpec& s,
                    char defaultAlign) {
    // A '0' before the width: zeros after the sign for numbers, zeros after the text for strings.
    const char32_t fill = s.zero && !s.align ? U'0' : s.fill;
    const char align = s.align ? s.align : s.zero && defaultAlign == '>' ? '=' : defaultAlign;
    if (align == '<' || align == '>')
        return pad(sign + body, s.width, fill, align == '<' ? -1 : 1);
    if (align == '=')
        return sign + pad(body, s.width - static_cast<int64_t>(toUtf32(sign).size()), fill, 1);
    // '^': the extra one on the right (str.center, pad's rule, puts it by the width's parity)
    const int64_t n = static_cast<int64_t>(toUtf32(sign + body).size());
    if (s.width <= n)
        return sign + body;
    const size_t room = static_cast<size_t>(s.width - n);
    return toUtf8(std::u32string(room / 2, fill)) + sign + body +
           toUtf8(std::u32string(room - room / 2, fill));
}

std::string formatString(Interpreter& in, const std::string& v, const FormatSpec& s) {
    if (s.type && s.type != 's')
        in.fail(std::string("Unknown format code '") + s.type + "' for object of type 'str'");
    if (s.sign)
        in.fail("Sign not allowed in string format specifier");
    if (s.alt)
        in.fail("Alternate form (#) not allowed in string format specifier");
    if (s.grouping)
        in.fail(std::string("Cannot specify '") + s.grouping + "' with 's'.");
    if (s.align == '=')
        in.fail("'=' alignment not allowed in string format specifier");
    std::string body = v;
    if (s.precision >= 0) {
        const std::u32string u = toUtf32(v);
        if (static_cast<int64_t>(u.size()) > s.precision)
            body = toUtf8(u.substr(0, static_cast<size_t>(s.precision)));
    }
    return aligned("", body, s, '<');
}

std::string signOf(bool negative, char sign) {
    return negative ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
}

std::string formatInt(Interpreter& in, int64_t x, const FormatSpec& s) {
    const char type = s.type ? s.type : 'd';
    if (s.precision >= 0)
        in.fail("Precision not allowed in integer format specifier");
    if (type == 'c') {
        if (x < 0 || x > 0x10ffff)
            in.fail("%c arg not in range(0x110000)");
        return aligned("", toUtf8(static_cast<char32_t>(x)), s, '<');
    }
    const std::string digits = magnitudeDigits(x, type);
    const std::string prefix = type == 'b'   ? "0b"
                               : type == 'o' ? "0o"
                               : type == 'x' ? "0x"
                               : type == 'X' ? "0X"
                                             : "";
    if (type != 'd' && type != 'b' && type != 'o' && type != 'x' && type != 'X' && type != 'n')
        in.fail(std::string("Unknown format code '") + type + "' for object of type 'int'");
    if (s.grouping == ',' && type != 'd')
        in.fail(std::string("Cannot specify ',' with '") + type + "'.");
    const std::string sign = signOf(x < 0, s.sign) + (s.alt ? prefix : "");
    return aligned(sign, grouped(digits, s.grouping, type == 'd' || type == 'n' ? 3 : 4), s, '>');
}

std::string formatFloat(Interpreter& in, double x, const FormatSpec& s) {
    char type = s.type;
    if (type && std::string("eEfFgG%n").find(type) == std::string::npos)
        in.fail(std::string("Unknown format code '") + type + "' for object of type 'float'");
    std::string body;
    const double a = std::abs(x);
    const int64_t precision = s.precision < 0 ? 6 : s.precision;
    if (!type && s.precision < 0) {
        body = floatRepr(a); // format(x, '') is str(x)
    } else if (!type && std::isfinite(a)) {
        // No type with a precision: 'g' with the exponent from p - 1 on (not p), and a digit
        // after the point in fixed notation.
        const int64_t p = std::max<int64_t>(precision, 1);
        const std::string e = cFormat('e', false, p - 1, a);
        const int64_t exp = std::strtoll(e.c_str() + e.find('e') + 1, nullptr, 10);
        if (exp < -4 || exp >= p - 1) {
            body = e;
            if (!s.alt) { // (trailing zeros of the mantissa go, as in 'g')
                const size_t ePos = body.find('e');
                std::string mantissa = body.substr(0, ePos);
                if (mantissa.find('.') != std::string::npos) {
                    mantissa.erase(mantissa.find_last_not_of('0') + 1);
                    if (mantissa.back() == '.')
                        mantissa.pop_back();
                }
                body = mantissa + body.substr(ePos);
            }
        } else {
            body = cFormat('f', s.alt, p - 1 - exp, a);
            if (!s.alt && body.find('.') != std::string::npos) {
                body.erase(body.find_last_not_of('0') + 1);
                if (body.back() == '.')
                    body.pop_back();
            }
            if (body.find('.') == std::string::npos)
                body += ".0";
        }
    } else if (type == '%') {
        body = cFormat('f', s.alt, precision, a * 100) + "%";
    } else {
        body = cFormat(type == 'n' || !type ? 'g' : type, s.alt, precision, a);
    }
    in.checkSize(body.size());
    if (s.grouping) {
        const size_t end = body.find_first_not_of("0123456789");
        body = grouped(body.substr(0, end), s.grouping, 3) +
               (end == std::string::npos ? "" : body.substr(end));
    }
    return aligned(signOf(std::signbit(x) && !std::isnan(x), s.sign), body, s, '>');
}

/// Python's format(value, spec).
std::string formatValue(Interpreter& in, const Value& v, const std::string& spec) {
    if (spec.empty())
        return toStr(v);
    const FormatSpec s = parseSpec(in, spec);
    switch (v.kind) {
    case Value::Kind::String:
        return formatString(in, *v.s, s);
    case Value::Kind::Bool: // (an int to format(): 1 and 0 under any spec but "")
    case Value::Kind::Int: {
        const int64_t x = v.kind == Value::Kind::Bool ? v.b : v.i;
        if (s.type && std::string("eEfFgG%").find(s.type) != std::string::npos)
            return formatFloat(in, static_cast<double>(x), s);
        if (s.type == 's')
            in.fail("Unknown format code 's' for object of type '" + v.typeName() + "'");
        return formatInt(in, x, s);
    }
    case Value::Kind::Float:
        return formatFloat(in, v.f, s);
    default:
        in.fail("unsupported format string passed to " + v.typeName() + ".__format__");
    }
}

/// A format string's fields in turn; a spec's nested fields share the numbering, at most two
/// levels deep (string.Formatter's recursion_depth).
struct Numbering {
    size_t next = 0;
    bool numbered = false, automatic = false;
};

std::string formatFields(Interpreter& in, const std::string& f, const Args& a, Numbering& n,
                         int depth) {
    if (depth < 0)
        in.fail("Max string recursion exceeded");
    std::string out;
    size_t& auto_ = n.next;
    bool &numbered = n.numbered, &automatic = n.automatic;
    for (size_t k = 0; k < f.size(); ++k) {
        if (f[k] == '{' && k + 1 < f.size() && f[k + 1] == '{') {
            out += '{';
            ++k;
            continue;
        }
        if (f[k] == '}') {
            if (k + 1 < f.size() && f[k + 1] == '}') {
                out += '}';
                ++k;
                continue;
            }
            in.fail("Single '}' encountered in format string");
        }
        if (f[k] != '{') {
            out += f[k];
            continue;
        }
        // The field up to its '}', a spec's nested {…} (`{:{width}}`) inside it.
        size_t e = k + 1;
        for (int depth = 1; e < f.size(); ++e) {
            depth += f[e] == '{' ? 1 : f[e] == '}' ? -1 : 0;
            if (depth == 0)
                break;
        }
        if (e >= f.size())
            in.fail("expected '}' before end of string");
        const std::string field = f.substr(k + 1, e - k - 1);
        k = e;
        const size_t colon = field.find(':'), bang = field.find('!');
        const size_t nameEnd = std::min(colon, bang);
        const std::string name = field.substr(0, nameEnd);
        char conversion = 0;
        if (bang < colon) {
            if (bang + 1 >= field.size() || (bang + 2 < field.size() && bang + 2 != colon))
                in.fail("expected ':' after conversion specifier");
            conversion = field[bang + 1];
            if (conversion != 'r' && conversion != 's' && conversion != 'a')
                in.fail(std::string("Unknown conversion specifier ") + conversion);
        }
        std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
        // The first part of the name: a number, a keyword or nothing; then .attr and [key].
        const size_t partEnd = name.find_first_of(".[");
        const std::string first = name.substr(0, partEnd);
        Value v;
        if (first.empty()) {
            if (numbered)
                in.fail("cannot switch from manual field specification to automatic field "
                        "numbering");
            automatic = true;
            if (auto_ >= a.positional.size())
                in.fail("Replacement index " + std::to_string(auto_) +
                        " out of range for positional args tuple");
            v = a.positional[auto_++];
        } else if (std::all_of(first.begin(), first.end(),
                               [](char c) { return c >= '0' && c <= '9'; })) {
            if (automatic)
                in.fail("cannot switch from manual field specification to automatic field "
                        "numbering");
            numbered = true;
            const size_t i = first.size() <= 9 ? std::stoul(first) : a.positional.size();
            if (i >= a.positional.size())
                in.fail("Replacement index " + first + " out of range for positional args tuple");
            v = a.positional[i];
        } else {
            const auto kw = std::find_if(a.keyword.begin(), a.keyword.end(),
                                         [&](const auto& p) { return p.first == first; });
            if (kw == a.keyword.end())
                in.fail("KeyError: '" + first + "' (str.format)");
            v = kw->second;
        }
        for (size_t p = partEnd; p != std::string::npos && p < name.size();) {
            if (name[p] == '.') {
                const size_t q = name.find_first_of(".[", p + 1);
                const std::string attr = name.substr(p + 1, q - p - 1);
                if (attr.empty())
                    in.fail("Empty attribute in format string");
                v = in.getAttr(v, attr); // (the sandbox's: a missing one is undefined)
                p = q;
            } else {
                const size_t q = name.find(']', p);
                if (q == std::string::npos)
                    in.fail("Missing ']' in format string");
                const std::string key = name.substr(p + 1, q - p - 1);
                const bool number = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
                    return c >= '0' && c <= '9';
                });
                v = in.getItem(v, number && key.size() <= 18 ? Value::integer(std::stoll(key))
                                                             : Value::string(key));
                p = q + 1;
                if (p < name.size() && name[p] != '.' && name[p] != '[')
                    in.fail("Only '.' or '[' may follow ']' in format field specifier");
            }
        }
        if (conversion == 'r')
            v = Value::string(toRepr(v));
        else if (conversion == 'a')
            v = Value::string(toAscii(v));
        else if (conversion == 's')
            v = Value::string(toStr(v));
        // The field's own value first, then its spec's nested fields (`{:{}.{}f}`).
        if (spec.find('{') != std::string::npos)
            spec = formatFields(in, spec, a, n, depth - 1);
        out += formatValue(in, v, spec);
        in.checkSize(out.size());
    }
    return out;
}

} // namespace

std::string strFormat(Interpreter& in, const std::string& f, const Args& a) {
    Numbering n;
    return formatFields(in, f, a, n, 2);
}

} // namespace sparqlab::text::jinja::builtin
