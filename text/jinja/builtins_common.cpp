// What the builtins share (builtins_common.h).

#include "builtins_common.h"

#include "text/tokenizer.h"

#include <QString>

#include <algorithm>
#include <clocale>
#include <cmath>
#include <ctime>
#include <functional>
#include <locale.h>
#include <map>

namespace sparqlab::text::jinja {

Value takeArg(Args& args, size_t index, const char* name, Value def) {
    for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it)
        if (it->first == name) {
            Value v = it->second;
            args.keyword.erase(it);
            return v;
        }
    if (index < args.positional.size()) {
        args.usedPositional = std::max(args.usedPositional, index + 1);
        return args.positional[index];
    }
    return def;
}

void noMoreArgs(const Interpreter& in, const Args& args, const std::string& what) {
    if (!args.keyword.empty())
        in.fail(what + "() got an unexpected keyword argument '" + args.keyword.front().first +
                "'");
    if (args.positional.size() > args.usedPositional)
        in.fail(what + "() takes " + std::to_string(args.usedPositional) + " arguments, got " +
                std::to_string(args.positional.size()));
}

} // namespace sparqlab::text::jinja

namespace sparqlab::text::jinja::builtin {

std::string str(const Value& v) {
    return toStr(v);
}

bool isInt(const Value& v) {
    return v.kind == Kind::Int || v.kind == Kind::Bool;
}

int64_t intArg(Interpreter& in, const Value& v, const char* what) {
    if (v.kind == Kind::Int)
        return v.i;
    if (v.kind == Kind::Bool)
        return v.b ? 1 : 0;
    in.fail(std::string(what) + " must be an integer, not '" + v.typeName() + "'");
}

double number(const Value& v) {
    return v.kind == Kind::Float  ? v.f
           : v.kind == Kind::Bool ? (v.b ? 1.0 : 0.0)
                                  : static_cast<double>(v.i);
}

/// Python's str.lower()/upper()/title()/capitalize() (Unicode through Qt).
std::string lower(const std::string& s) {
    return text::lowerCase(s);
}
std::string upper(const std::string& s) {
    return QString::fromStdString(s).toUpper().toStdString();
}

bool isSpaceCp(char32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || c == 0x1c || c == 0x1d || c == 0x1e ||
           c == 0x1f || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/// Python's str.strip/lstrip/rstrip with optional characters.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
    const std::u32string u = toUtf32(s);
    const std::u32string set = chars.isString() ? toUtf32(*chars.s) : std::u32string();
    auto drop = [&](char32_t c) {
        return chars.isString() ? set.find(c) != std::u32string::npos : isSpaceCp(c);
    };
    size_t b = 0, e = u.size();
    if (left)
        while (b < e && drop(u[b]))
            ++b;
    if (right)
        while (e > b && drop(u[e - 1]))
            --e;
    return toUtf8(u.substr(b, e - b));
}

namespace {
/// Python's "cased" characters: upper-, lower- or title-case letters.
bool isCased(char32_t c) {
    return QChar::isUpper(c) || QChar::isLower(c) || QChar::isTitleCase(c);
}
} // namespace

std::string titleCase(char32_t c) {
    const char32_t t = QChar::toTitleCase(c);
    if (t != c)
        return toUtf8(t);
    const std::u32string up = toUtf32(upper(toUtf8(c)));
    std::string out; // a full mapping (ß: Ss, ﬁ: Fi): the first cased character upper
    bool cased = false;
    for (const char32_t u : up) {
        out += cased && isCased(u) ? lower(toUtf8(u)) : toUtf8(u);
        cased = cased || isCased(u);
    }
    return out;
}

std::string pyTitle(const std::string& s) {
    std::string out;
    bool prevCased = false;
    for (const char32_t c : toUtf32(s)) {
        out += prevCased ? lower(toUtf8(c)) : titleCase(c);
        prevCased = isCased(c);
    }
    return out;
}

std::string capitalize(const std::string& s) {
    const std::u32string u = toUtf32(s);
    if (u.empty())
        return s;
    return titleCase(u[0]) + lower(toUtf8(u.substr(1)));
}

bool pyIsCase(const std::string& s, bool upperCase) {
    bool cased = false;
    for (const char32_t c : toUtf32(s)) {
        const bool up = QChar::isUpper(c), low = QChar::isLower(c);
        if (QChar::isTitleCase(c) || (upperCase ? low : up))
            return false;
        cased = cased || (upperCase ? up : low);
    }
    return cased;
}

std::vector<std::string> splitLines(const std::string& s, bool keepEnds) {
    const std::u32string u = toUtf32(s);
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t i = 0; i < u.size();) {
        const char32_t c = u[i];
        const bool ends = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c ||
                          (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!ends) {
            ++i;
            continue;
        }
        const size_t next = i + (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n' ? 2 : 1);
        out.push_back(toUtf8(u.substr(start, (keepEnds ? next : i) - start)));
        start = i = next;
    }
    if (start < u.size())
        out.push_back(toUtf8(u.substr(start)));
    return out;
}

/// Python's str.split(sep=None, maxsplit=-1) (rsplit from the right).
List split(Interpreter& in, const std::string& s, const Value& sepV, int64_t maxsplit,
           bool fromRight) {
    List out;
    if (sepV.isString()) {
        const std::string& sep = *sepV.s;
        if (sep.empty())
            in.fail("empty separator");
        std::vector<std::string> parts;
        if (!fromRight) {
            size_t pos = 0;
            int64_t n = 0;
            while (maxsplit < 0 || n < maxsplit) {
                const size_t f = s.find(sep, pos);
                if (f == std::string::npos)
                    break;
                parts.push_back(s.substr(pos, f - pos));
                pos = f + sep.size();
                ++n;
            }
            parts.push_back(s.substr(pos));
        } else {
            size_t end = s.size();
            int64_t n = 0;
            while (maxsplit < 0 || n < maxsplit) {
                if (end < sep.size())
                    break;
                const size_t f = s.rfind(sep, end - sep.size());
                if (f == std::string::npos)
                    break;
                parts.insert(parts.begin(), s.substr(f + sep.size(), end - f - sep.size()));
                end = f;
                ++n;
            }
            parts.insert(parts.begin(), s.substr(0, end));
        }
        for (std::string& p : parts)
            out.push_back(Value::string(std::move(p)));
        return out;
    }
    // Runs of whitespace separate; none at the ends.
    const std::u32string u = toUtf32(s);
    std::vector<std::u32string> words;
    if (!fromRight) {
        size_t i = 0;
        int64_t n = 0;
        while (i < u.size()) {
            while (i < u.size() && isSpaceCp(u[i]))
                ++i;
            if (i >= u.size())
                break;
            if (maxsplit >= 0 && n >= maxsplit) { // the rest as it is, trailing spaces too
                words.push_back(u.substr(i));
                break;
            }
            size_t j = i;
            while (j < u.size() && !isSpaceCp(u[j]))
                ++j;
            words.push_back(u.substr(i, j - i));
            ++n;
            i = j;
        }
    } else {
        size_t e = u.size();
        int64_t n = 0;
        while (e > 0) {
            while (e > 0 && isSpaceCp(u[e - 1]))
                --e;
            if (e == 0)
                break;
            if (maxsplit >= 0 && n >= maxsplit) { // the rest as it is, leading spaces too
                words.insert(words.begin(), u.substr(0, e));
                break;
            }
            size_t b = e;
            while (b > 0 && !isSpaceCp(u[b - 1]))
                --b;
            words.insert(words.begin(), u.substr(b, e - b));
            ++n;
            e = b;
        }
    }
    for (const std::u32string& w : words)
        out.push_back(Value::string(toUtf8(w)));
    return out;
}

std::string replaceAll(const std::string& s, const std::string& old, const std::string& rep,
                       int64_t count) {
    std::string out;
    if (old.empty()) { // Python inserts between every character
        const std::u32string u = toUtf32(s);
        int64_t n = 0;
        for (size_t k = 0; k <= u.size(); ++k) {
            if (count < 0 || n < count) {
                out += rep;
                ++n;
            }
            if (k < u.size())
                out += toUtf8(u[k]);
        }
        return out;
    }
    size_t pos = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        const size_t f = s.find(old, pos);
        if (f == std::string::npos)
            break;
        out += s.substr(pos, f - pos) + rep;
        pos = f + old.size();
        ++n;
    }
    return out + s.substr(pos);
}

int64_t length(Interpreter& in, const Value& v) {
    switch (v.kind) {
    case Kind::Undefined:
        return 0;
    case Kind::String:
        return static_cast<int64_t>(toUtf32(*v.s).size());
    case Kind::List:
    case Kind::Tuple:
        return static_cast<int64_t>(v.list->size());
    case Kind::Dict:
    case Kind::Namespace:
        return static_cast<int64_t>(v.entries().size());
    default:
        in.fail("object of type '" + v.typeName() + "' has no len()");
    }
}

/// `attribute` of a sort, map or sum: a dotted path ("a.b", "items.0").
Value attributeOf(Interpreter& in, const Value& v, const std::string& path) {
    Value cur = v;
    size_t pos = 0;
    while (pos <= path.size()) {
        const size_t dot = path.find('.', pos);
        const std::string part =
            path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        // Digits are an index (Jinja2's environment.getitem with int(part)); 18 digits at most.
        const bool digits =
            !part.empty() && part.size() <= 18 &&
            std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        cur = digits ? in.getItem(cur, Value::integer(std::stoll(part)))
                     : in.getItem(cur, Value::string(part));
        if (dot == std::string::npos)
            break;
        pos = dot + 1;
    }
    return cur;
}

/// The sort key of case-insensitive comparisons: strings lowered.
Value foldCase(const Value& v, bool caseSensitive) {
    return !caseSensitive && v.isString() ? Value::string(lower(*v.s)) : v;
}

bool less(Interpreter& in, const Value& a, const Value& b) {
    try {
        return lessThan(a, b);
    } catch (const EvalError& e) {
        in.fail(e.what());
    }
}

List sorted(Interpreter& in, List items, bool reverse, bool caseSensitive, const Value& attribute,
            bool listKeys) {
    std::vector<std::string> attrs;
    if (attribute.isString()) {
        std::string a = *attribute.s;
        size_t pos = 0;
        while (true) {
            const size_t c = a.find(',', pos);
            std::string part = a.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
            part = strip(part, Value::undefined(), true, true);
            if (!part.empty())
                attrs.push_back(part);
            if (c == std::string::npos)
                break;
            pos = c + 1;
        }
    } else if (isInt(attribute)) {
        attrs.push_back(std::to_string(attribute.i));
    }
    auto key = [&](const Value& v) {
        if (attrs.empty())
            return foldCase(v, caseSensitive);
        if (attrs.size() == 1)
            return foldCase(attributeOf(in, v, attrs[0]), caseSensitive);
        List k;
        for (const std::string& a : attrs)
            k.push_back(foldCase(attributeOf(in, v, a), caseSensitive));
        return Value::makeTuple(std::move(k));
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (Value& v : items)
        keyed.emplace_back(key(v), std::move(v));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        if (listKeys && equals(x.first, y.first))
            return false; // ([None] < [None] is False: equal keys are never ordered)
        return reverse ? less(in, y.first, x.first) : less(in, x.first, y.first);
    });
    List out;
    for (auto& [k, v] : keyed)
        out.push_back(std::move(v));
    return out;
}

/// select/reject and selectattr/rejectattr.
Value selectItems(Interpreter& in, const Value& v, Args& args, bool byAttr, bool keep) {
    if (!v.truthy()) // Jinja2 yields nothing from a false value (None, undefined, 0, "")
        return Value::makeList({});
    std::string attr;
    size_t first = 0;
    if (byAttr) {
        if (args.positional.empty() || !args.positional[0].isString())
            in.fail("selectattr/rejectattr need an attribute name");
        attr = *args.positional[0].s;
        first = 1;
    }
    std::string test;
    std::vector<Value> testArgs;
    if (args.positional.size() > first) {
        if (!args.positional[first].isString())
            in.fail("a test name must be a string");
        test = *args.positional[first].s;
        testArgs.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first + 1),
                        args.positional.end());
    }
    List out;
    for (const Value& item : in.iterate(v)) {
        const Value x = byAttr ? attributeOf(in, item, attr) : item;
        bool ok;
        if (test.empty()) {
            ok = x.truthy();
        } else {
            Args a;
            a.positional = testArgs;
            ok = in.applyTest(test, x, a);
        }
        if (ok == keep)
            out.push_back(item);
    }
    return Value::makeList(std::move(out));
}

std::string pad(const std::string& s, int64_t width, char32_t fill, int align) {
    const std::u32string u = toUtf32(s);
    const int64_t n = static_cast<int64_t>(u.size());
    if (width <= n)
        return s;
    const int64_t margin = width - n;
    const int64_t left = align < 0 ? 0 : align > 0 ? margin : margin / 2 + (margin & width & 1);
    return toUtf8(std::u32string(static_cast<size_t>(left), fill)) + s +
           toUtf8(std::u32string(static_cast<size_t>(margin - left), fill));
}

std::pair<int64_t, int64_t> sliceBounds(Interpreter& in, int64_t length, const Value& start,
                                        const Value& end) {
    auto index = [&](const Value& v, int64_t def) {
        if (v.isNone() || v.isUndefined())
            return def;
        const int64_t i = intArg(in, v, "a slice index");
        return i < 0 ? std::max<int64_t>(0, i + length) : i;
    };
    // Python keeps a start beyond the end (so nothing, not even "", is found there).
    return {index(start, 0), std::min(index(end, length), length)};
}

std::string htmlEscape(const std::string& s) {
    std::string out;
    for (const char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&#34;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

/// Python's float(str).
bool parseFloat(const std::string& s0, double& out) {
    std::string s = strip(s0, Value::undefined(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty())
        return false;
    const std::string l = lower(s);
    const std::string body = (l[0] == '+' || l[0] == '-') ? l.substr(1) : l;
    if (body == "inf" || body == "infinity" || body == "nan") {
        out = body == "nan" ? NAN : (l[0] == '-' ? -INFINITY : INFINITY);
        return true;
    }
    char* end = nullptr;
    out = std::strtod(s.c_str(), &end);
    return end == s.c_str() + s.size() && body.find_first_of("xp") == std::string::npos;
}

/// Python's int(str, base).
bool parseInt(const std::string& s0, int64_t base, int64_t& out) {
    std::string s = strip(s0, Value::undefined(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    // Python's int(s, base) takes the base's prefix after the sign (0b, 0o, 0x; base 0 by it).
    const size_t at = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    const char p = s.size() > at + 1 && s[at] == '0' ? static_cast<char>(s[at + 1] | 0x20) : 0;
    const int64_t prefixed = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
    if (prefixed && (base == 0 || base == prefixed)) {
        s.erase(at, 2);
        base = prefixed;
    } else if (base == 0) {
        base = 10;
    }
    if (s.size() == at)
        return false;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (end != s.c_str() + s.size() || errno == ERANGE)
        return false;
    out = v;
    return true;
}

std::string strftimeIn(const std::string& format, const std::tm& tm) {
    // Python's datetime.strftime formats with C's strftime; English names (the C locale). The
    // time transformers formats has no zone (datetime.now() is naive): %Z and %z print nothing.
    std::string fmt;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] == '%' && i + 1 < format.size()) {
            const char next = format[++i];
            if (next != 'Z' && next != 'z')
                fmt += {'%', next};
            continue;
        }
        fmt += format[i];
    }
    static locale_t c = newlocale(LC_ALL_MASK, "C", nullptr);
    std::string buf(256 + fmt.size() * 8, '\0');
    const size_t n = strftime_l(buf.data(), buf.size(), fmt.c_str(), &tm, c);
    if (n == 0 && !fmt.empty())
        return {};
    buf.resize(n);
    return buf;
}

} // namespace sparqlab::text::jinja::builtin
