// The engine's builtins (interpreter.h): Jinja2's filters and tests with transformers' tojson,
// the Python methods the sandbox lets templates call, and the globals transformers adds
// (raise_exception, strftime_now) beside Jinja2's (range, namespace, dict, joiner).

#include "interpreter.h"

#include <QString>

#include <algorithm>
#include <clocale>
#include <cmath>
#include <ctime>
#include <functional>
#include <locale.h>
#include <map>

namespace sparqlab::capture::jinja {

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

namespace {

using Kind = Value::Kind;

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
    return QString::fromStdString(s).toLower().toStdString();
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

/// Python's str.title(): upper after a non-letter, lower after a letter.
std::string pyTitle(const std::string& s) {
    QString q = QString::fromStdString(s), out;
    bool prevCased = false;
    for (const QChar c : q) {
        if (c.isLetter()) {
            out += prevCased ? c.toLower() : c.toUpper();
            prevCased = true;
        } else {
            out += c;
            prevCased = false;
        }
    }
    return out.toStdString();
}

std::string capitalize(const std::string& s) {
    const QString q = QString::fromStdString(s);
    if (q.isEmpty())
        return s;
    return (q.left(1).toUpper() + q.mid(1).toLower()).toStdString();
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
            if (maxsplit >= 0 && n >= maxsplit) {
                size_t e = u.size();
                while (e > i && isSpaceCp(u[e - 1]))
                    --e;
                words.push_back(u.substr(i, e - i));
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
            if (maxsplit >= 0 && n >= maxsplit) {
                size_t b = 0;
                while (b < e && isSpaceCp(u[b]))
                    ++b;
                words.insert(words.begin(), u.substr(b, e - b));
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
                out += toUtf8(std::u32string(1, u[k]));
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

List sorted(Interpreter& in, List items, bool reverse, bool caseSensitive, const Value& attribute) {
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
        return reverse ? less(in, y.first, x.first) : less(in, x.first, y.first);
    });
    List out;
    for (auto& [k, v] : keyed)
        out.push_back(std::move(v));
    return out;
}

/// select/reject and selectattr/rejectattr.
Value selectItems(Interpreter& in, const Value& v, Args& args, bool byAttr, bool keep) {
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
    if (s.empty())
        return false;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (end != s.c_str() + s.size() || errno == ERANGE)
        return false;
    out = v;
    return true;
}

std::string strftimeIn(const std::string& fmt, const std::tm& tm) {
    // Python's datetime.strftime formats with C's strftime; English names (the C locale).
    static locale_t c = newlocale(LC_ALL_MASK, "C", nullptr);
    std::string buf(256 + fmt.size() * 8, '\0');
    const size_t n = strftime_l(buf.data(), buf.size(), fmt.c_str(), &tm, c);
    if (n == 0 && !fmt.empty())
        return {};
    buf.resize(n);
    return buf;
}

// --- filters ------------------------------------------------------------------------------------

using FilterFn = std::function<Value(Interpreter&, const Value&, Args&)>;

const std::map<std::string, FilterFn>& filterTable() {
    static const std::map<std::string, FilterFn> table = [] {
        std::map<std::string, FilterFn> t;
        t["abs"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "abs");
            if (v.kind == Kind::Float)
                return Value::number(std::fabs(v.f));
            if (isInt(v))
                return Value::integer(std::llabs(v.kind == Kind::Bool ? v.b : v.i));
            in.fail("bad operand type for abs(): '" + v.typeName() + "'");
        };
        t["attr"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value name = takeArg(a, 0, "name");
            noMoreArgs(in, a, "attr");
            return in.getAttr(v, str(name));
        };
        t["batch"] = [](Interpreter& in, const Value& v, Args& a) {
            const int64_t n = intArg(in, takeArg(a, 0, "linecount"), "batch's size");
            const Value fill = takeArg(a, 1, "fill_with", Value::none());
            noMoreArgs(in, a, "batch");
            if (n < 1)
                in.fail("batch's size must be at least 1");
            List out, cur;
            for (const Value& x : in.iterate(v)) {
                cur.push_back(x);
                if (static_cast<int64_t>(cur.size()) == n) {
                    out.push_back(Value::makeList(std::move(cur)));
                    cur.clear();
                }
            }
            if (!cur.empty()) {
                if (!fill.isNone())
                    while (static_cast<int64_t>(cur.size()) < n)
                        cur.push_back(fill);
                out.push_back(Value::makeList(std::move(cur)));
            }
            return Value::makeList(std::move(out));
        };
        t["capitalize"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "capitalize");
            return Value::string(capitalize(str(v)));
        };
        t["center"] = [](Interpreter& in, const Value& v, Args& a) {
            const int64_t w = intArg(in, takeArg(a, 0, "width", Value::integer(80)), "width");
            noMoreArgs(in, a, "center");
            const std::u32string u = toUtf32(str(v));
            const int64_t n = static_cast<int64_t>(u.size());
            if (w <= n)
                return Value::string(str(v));
            const int64_t pad = w - n, left = pad / 2 + (pad & w & 1);
            return Value::string(std::string(static_cast<size_t>(left), ' ') + str(v) +
                                 std::string(static_cast<size_t>(pad - left), ' '));
        };
        t["length"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "length");
            return Value::integer(length(in, v));
        };
        t["count"] = t["length"];
        t["default"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value def = takeArg(a, 0, "default_value", Value::string(""));
            const bool boolean = takeArg(a, 1, "boolean", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "default");
            return v.isUndefined() || (boolean && !v.truthy()) ? def : v;
        };
        t["d"] = t["default"];
        t["dictsort"] = [](Interpreter& in, const Value& v, Args& a) {
            const bool cs = takeArg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
            const std::string by = str(takeArg(a, 1, "by", Value::string("key")));
            const bool reverse = takeArg(a, 2, "reverse", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "dictsort");
            if (!v.isMapping())
                in.fail("dictsort needs a mapping, not '" + v.typeName() + "'");
            if (by != "key" && by != "value")
                in.fail("dictsort: by must be 'key' or 'value'");
            List pairs;
            for (const auto& [k, x] : v.entries())
                pairs.push_back(Value::makeTuple({Value::string(k), x}));
            return Value::makeList(
                sorted(in, std::move(pairs), reverse, cs, Value::integer(by == "key" ? 0 : 1)));
        };
        t["escape"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "escape");
            return Value::string(htmlEscape(str(v)));
        };
        t["e"] = t["escape"];
        t["forceescape"] = t["escape"];
        t["first"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "first");
            const std::vector<Value> items = in.iterate(v);
            return items.empty() ? Value::undefined("first of an empty sequence") : items.front();
        };
        t["last"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "last");
            const std::vector<Value> items = in.iterate(v);
            return items.empty() ? Value::undefined("last of an empty sequence") : items.back();
        };
        t["float"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value def = takeArg(a, 0, "default", Value::number(0.0));
            noMoreArgs(in, a, "float");
            if (v.isNumber())
                return Value::number(number(v));
            double x;
            if (v.isString() && parseFloat(*v.s, x))
                return Value::number(x);
            return def;
        };
        t["int"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value def = takeArg(a, 0, "default", Value::integer(0));
            const int64_t base = intArg(in, takeArg(a, 1, "base", Value::integer(10)), "base");
            noMoreArgs(in, a, "int");
            if (isInt(v))
                return Value::integer(v.kind == Kind::Bool ? v.b : v.i);
            if (v.kind == Kind::Float)
                return std::isfinite(v.f) && std::fabs(v.f) < 9.2e18
                           ? Value::integer(static_cast<int64_t>(std::trunc(v.f)))
                           : def;
            if (v.isString()) {
                int64_t i;
                if (parseInt(*v.s, base, i))
                    return Value::integer(i);
                double x;
                if (parseFloat(*v.s, x) && std::isfinite(x) && std::fabs(x) < 9.2e18)
                    return Value::integer(static_cast<int64_t>(std::trunc(x)));
            }
            return def;
        };
        t["indent"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value width = takeArg(a, 0, "width", Value::integer(4));
            const bool first = takeArg(a, 1, "first", Value::boolean(false)).truthy();
            const bool blank = takeArg(a, 2, "blank", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "indent");
            const std::string ind =
                width.isString()
                    ? *width.s
                    : std::string(
                          static_cast<size_t>(std::max<int64_t>(0, intArg(in, width, "width"))),
                          ' ');
            std::string s = str(v) + "\n"; // Jinja2's quirk for splitlines
            std::vector<std::string> lines;
            size_t pos = 0;
            while (pos < s.size()) {
                const size_t nl = s.find('\n', pos);
                lines.push_back(s.substr(pos, nl - pos));
                pos = nl + 1;
            }
            std::string rv;
            if (blank) {
                for (size_t k = 0; k < lines.size(); ++k)
                    rv += (k ? "\n" + ind : std::string()) + lines[k];
            } else {
                rv = lines.empty() ? std::string() : lines[0];
                for (size_t k = 1; k < lines.size(); ++k)
                    rv += "\n" + (lines[k].empty() ? lines[k] : ind + lines[k]);
            }
            if (first)
                rv = ind + rv;
            return Value::string(rv);
        };
        t["items"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "items");
            if (v.isUndefined())
                return Value::makeList({});
            if (!v.isMapping())
                in.fail("Can only get item pairs from a mapping.");
            List out;
            for (const auto& [k, x] : v.entries())
                out.push_back(Value::makeTuple({Value::string(k), x}));
            return Value::makeList(std::move(out));
        };
        t["join"] = [](Interpreter& in, const Value& v, Args& a) {
            const std::string sep = str(takeArg(a, 0, "d", Value::string("")));
            const Value attribute = takeArg(a, 1, "attribute", Value::none());
            noMoreArgs(in, a, "join");
            std::string out;
            bool firstItem = true;
            for (const Value& x : in.iterate(v)) {
                out += (firstItem ? "" : sep) +
                       str(attribute.isNone() ? x : attributeOf(in, x, str(attribute)));
                firstItem = false;
                in.checkSize(out.size());
            }
            return Value::string(std::move(out));
        };
        t["list"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "list");
            return Value::makeList(in.iterate(v));
        };
        t["lower"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "lower");
            return Value::string(lower(str(v)));
        };
        t["upper"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "upper");
            return Value::string(upper(str(v)));
        };
        t["map"] = [](Interpreter& in, const Value& v, Args& a) {
            List out;
            const Value attribute = takeArg(a, 99, "attribute");
            if (!attribute.isUndefined()) {
                const Value def = takeArg(a, 99, "default");
                noMoreArgs(in, a, "map");
                for (const Value& x : in.iterate(v)) {
                    Value y = attributeOf(in, x, str(attribute));
                    out.push_back(y.isUndefined() && !def.isUndefined() ? def : y);
                }
                return Value::makeList(std::move(out));
            }
            if (a.positional.empty() || !a.positional[0].isString())
                in.fail("map needs a filter name or attribute=");
            const std::string filter = *a.positional[0].s;
            for (const Value& x : in.iterate(v)) {
                Args fa;
                fa.positional.assign(a.positional.begin() + 1, a.positional.end());
                fa.keyword = a.keyword;
                out.push_back(in.applyFilter(filter, x, fa));
            }
            return Value::makeList(std::move(out));
        };
        auto extreme = [](bool wantMax) {
            return [wantMax](Interpreter& in, const Value& v, Args& a) {
                const bool cs = takeArg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
                const Value attribute = takeArg(a, 1, "attribute", Value::none());
                noMoreArgs(in, a, wantMax ? "max" : "min");
                List items = sorted(in, in.iterate(v), false, cs, attribute);
                if (items.empty())
                    return Value::undefined("the extreme of an empty sequence");
                return wantMax ? items.back() : items.front();
            };
        };
        t["max"] = extreme(true);
        t["min"] = extreme(false);
        t["reject"] = [](Interpreter& in, const Value& v, Args& a) {
            return selectItems(in, v, a, false, false);
        };
        t["select"] = [](Interpreter& in, const Value& v, Args& a) {
            return selectItems(in, v, a, false, true);
        };
        t["rejectattr"] = [](Interpreter& in, const Value& v, Args& a) {
            return selectItems(in, v, a, true, false);
        };
        t["selectattr"] = [](Interpreter& in, const Value& v, Args& a) {
            return selectItems(in, v, a, true, true);
        };
        t["replace"] = [](Interpreter& in, const Value& v, Args& a) {
            const std::string old = str(takeArg(a, 0, "old")), rep = str(takeArg(a, 1, "new"));
            const Value count = takeArg(a, 2, "count", Value::none());
            noMoreArgs(in, a, "replace");
            std::string out =
                replaceAll(str(v), old, rep, count.isNone() ? -1 : intArg(in, count, "count"));
            in.checkSize(out.size());
            return Value::string(std::move(out));
        };
        t["reverse"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "reverse");
            if (v.isString()) {
                std::u32string u = toUtf32(*v.s);
                std::reverse(u.begin(), u.end());
                return Value::string(toUtf8(u));
            }
            List items = in.iterate(v);
            std::reverse(items.begin(), items.end());
            return Value::makeList(std::move(items));
        };
        t["round"] = [](Interpreter& in, const Value& v, Args& a) {
            const int64_t precision =
                intArg(in, takeArg(a, 0, "precision", Value::integer(0)), "precision");
            const std::string method = str(takeArg(a, 1, "method", Value::string("common")));
            noMoreArgs(in, a, "round");
            if (!v.isNumber())
                in.fail("round needs a number, not '" + v.typeName() + "'");
            const double m = std::pow(10.0, static_cast<double>(precision));
            const double x = number(v) * m;
            double r;
            if (method == "common")
                r = std::round(x); // half away from zero
            else if (method == "ceil")
                r = std::ceil(x);
            else if (method == "floor")
                r = std::floor(x);
            else
                in.fail("round: method must be 'common', 'ceil' or 'floor'");
            return Value::number(r / m);
        };
        t["safe"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "safe");
            return v.isString() ? v : Value::string(str(v));
        };
        t["sort"] = [](Interpreter& in, const Value& v, Args& a) {
            const bool reverse = takeArg(a, 0, "reverse", Value::boolean(false)).truthy();
            const bool cs = takeArg(a, 1, "case_sensitive", Value::boolean(false)).truthy();
            const Value attribute = takeArg(a, 2, "attribute", Value::none());
            noMoreArgs(in, a, "sort");
            return Value::makeList(sorted(in, in.iterate(v), reverse, cs, attribute));
        };
        t["string"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "string");
            return Value::string(str(v));
        };
        t["pprint"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "pprint");
            return Value::string(toRepr(v));
        };
        t["striptags"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "striptags");
            std::string s = str(v), out;
            bool tag = false;
            for (const char c : s) {
                if (c == '<')
                    tag = true;
                else if (c == '>' && tag)
                    tag = false;
                else if (!tag)
                    out += c;
            }
            List words = split(in, out, Value::none(), -1, false);
            std::string joined;
            for (size_t k = 0; k < words.size(); ++k)
                joined += (k ? " " : "") + *words[k].s;
            return Value::string(joined);
        };
        t["sum"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value attribute = takeArg(a, 0, "attribute", Value::none());
            Value total = takeArg(a, 1, "start", Value::integer(0));
            noMoreArgs(in, a, "sum");
            for (const Value& x : in.iterate(v)) {
                const Value y = attribute.isNone() ? x : attributeOf(in, x, str(attribute));
                if (!total.isNumber() || !y.isNumber())
                    in.fail("sum needs numbers");
                total = total.kind == Kind::Float || y.kind == Kind::Float
                            ? Value::number(number(total) + number(y))
                            : Value::integer(static_cast<int64_t>(number(total)) +
                                             (y.kind == Kind::Bool ? y.b : y.i));
            }
            return total;
        };
        t["title"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "title");
            // Jinja2: a word starts after whitespace, '-', or an opening bracket.
            const QString s = QString::fromStdString(str(v));
            QString out;
            bool start = true;
            for (const QChar c : s) {
                const bool sep = c.isSpace() || c == QLatin1Char('-') || c == QLatin1Char('(') ||
                                 c == QLatin1Char('{') || c == QLatin1Char('[') ||
                                 c == QLatin1Char('<');
                if (sep) {
                    out += c;
                    start = true;
                } else {
                    out += start ? c.toUpper() : c.toLower();
                    start = false;
                }
            }
            return Value::string(out.toStdString());
        };
        t["tojson"] = [](Interpreter& in, const Value& v, Args& a) {
            // transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
            // separators=None, sort_keys=False).
            const bool ascii = takeArg(a, 0, "ensure_ascii", Value::boolean(false)).truthy();
            const Value indent = takeArg(a, 1, "indent", Value::none());
            const Value seps = takeArg(a, 2, "separators", Value::none());
            const bool sortKeys = takeArg(a, 3, "sort_keys", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "tojson");
            int ind = -1;
            if (!indent.isNone()) {
                if (indent.isString())
                    in.fail("tojson: a string indent is not supported");
                ind = static_cast<int>(std::clamp<int64_t>(intArg(in, indent, "indent"), 0, 64));
            }
            std::string item = ind >= 0 ? "," : ", ", key = ": ";
            if (!seps.isNone()) {
                if (!seps.isSequence() || seps.list->size() != 2 || !(*seps.list)[0].isString() ||
                    !(*seps.list)[1].isString())
                    in.fail("tojson: separators must be a pair of strings");
                item = *(*seps.list)[0].s;
                key = *(*seps.list)[1].s;
            }
            try {
                std::string out = toJson(v, ascii, ind, item, key, sortKeys);
                in.checkSize(out.size());
                return Value::string(std::move(out));
            } catch (const EvalError& e) {
                in.fail(e.what());
            }
        };
        t["trim"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value chars = takeArg(a, 0, "chars", Value::none());
            noMoreArgs(in, a, "trim");
            return Value::string(strip(str(v), chars, true, true));
        };
        t["truncate"] = [](Interpreter& in, const Value& v, Args& a) {
            const int64_t len = intArg(in, takeArg(a, 0, "length", Value::integer(255)), "length");
            const bool killwords = takeArg(a, 1, "killwords", Value::boolean(false)).truthy();
            const std::string end = str(takeArg(a, 2, "end", Value::string("...")));
            const Value leewayV = takeArg(a, 3, "leeway", Value::none());
            noMoreArgs(in, a, "truncate");
            const int64_t leeway = leewayV.isNone() ? 5 : intArg(in, leewayV, "leeway");
            const std::u32string s = toUtf32(str(v)), e = toUtf32(end);
            const int64_t n = static_cast<int64_t>(s.size());
            if (n <= len + leeway)
                return Value::string(str(v));
            const int64_t keep = std::max<int64_t>(0, len - static_cast<int64_t>(e.size()));
            std::u32string cut = s.substr(0, static_cast<size_t>(keep));
            if (!killwords) {
                const size_t sp = cut.rfind(U' ');
                cut = sp == std::u32string::npos ? cut : cut.substr(0, sp);
            }
            return Value::string(toUtf8(cut + e));
        };
        t["unique"] = [](Interpreter& in, const Value& v, Args& a) {
            const bool cs = takeArg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
            const Value attribute = takeArg(a, 1, "attribute", Value::none());
            noMoreArgs(in, a, "unique");
            List out, seen;
            for (const Value& x : in.iterate(v)) {
                const Value k =
                    foldCase(attribute.isNone() ? x : attributeOf(in, x, str(attribute)), cs);
                if (std::none_of(seen.begin(), seen.end(),
                                 [&](const Value& s) { return equals(s, k); })) {
                    seen.push_back(k);
                    out.push_back(x);
                }
            }
            return Value::makeList(std::move(out));
        };
        t["wordcount"] = [](Interpreter& in, const Value& v, Args& a) {
            noMoreArgs(in, a, "wordcount");
            return Value::integer(
                static_cast<int64_t>(split(in, str(v), Value::none(), -1, false).size()));
        };
        t["groupby"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value attribute = takeArg(a, 0, "attribute");
            const Value def = takeArg(a, 1, "default", Value::none());
            const bool cs = takeArg(a, 2, "case_sensitive", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "groupby");
            List items = sorted(in, in.iterate(v), false, cs, attribute);
            List groups;
            for (const Value& x : items) {
                Value k = attributeOf(in, x, str(attribute));
                if (k.isUndefined())
                    k = def;
                if (!groups.empty() &&
                    equals(foldCase((*groups.back().list)[0], cs), foldCase(k, cs))) {
                    List members = *(*groups.back().list)[1].list;
                    members.push_back(x);
                    groups.back() = Value::makeTuple(
                        {(*groups.back().list)[0], Value::makeList(std::move(members))});
                } else {
                    groups.push_back(Value::makeTuple({k, Value::makeList({x})}));
                }
            }
            return Value::makeList(std::move(groups));
        };
        return t;
    }();
    return table;
}

// --- tests --------------------------------------------------------------------------------------

using TestFn = std::function<bool(Interpreter&, const Value&, Args&)>;

const std::map<std::string, TestFn>& testTable() {
    static const std::map<std::string, TestFn> table = [] {
        std::map<std::string, TestFn> t;
        auto simple = [](std::function<bool(const Value&)> f) {
            return [f](Interpreter&, const Value& v, Args&) { return f(v); };
        };
        t["defined"] = simple([](const Value& v) { return !v.isUndefined(); });
        t["undefined"] = simple([](const Value& v) { return v.isUndefined(); });
        t["none"] = simple([](const Value& v) { return v.isNone(); });
        t["boolean"] = simple([](const Value& v) { return v.kind == Kind::Bool; });
        t["true"] = simple([](const Value& v) { return v.kind == Kind::Bool && v.b; });
        t["false"] = simple([](const Value& v) { return v.kind == Kind::Bool && !v.b; });
        t["integer"] = simple([](const Value& v) { return v.kind == Kind::Int; });
        t["float"] = simple([](const Value& v) { return v.kind == Kind::Float; });
        t["number"] = simple([](const Value& v) { return v.isNumber(); });
        t["string"] = simple([](const Value& v) { return v.isString(); });
        t["mapping"] = simple([](const Value& v) { return v.kind == Kind::Dict; });
        t["sequence"] = simple(
            [](const Value& v) { return v.isString() || v.isSequence() || v.kind == Kind::Dict; });
        t["iterable"] = simple([](const Value& v) {
            return v.isString() || v.isSequence() || v.kind == Kind::Dict || v.isUndefined();
        });
        t["callable"] = simple([](const Value& v) { return v.kind == Kind::Callable; });
        t["lower"] = simple([](const Value& v) { return v.isString() && lower(*v.s) == *v.s; });
        t["upper"] = simple([](const Value& v) { return v.isString() && upper(*v.s) == *v.s; });
        t["escaped"] = simple([](const Value&) { return false; });
        t["even"] = [](Interpreter& in, const Value& v, Args&) {
            return intArg(in, v, "even's value") % 2 == 0;
        };
        t["odd"] = [](Interpreter& in, const Value& v, Args&) {
            return intArg(in, v, "odd's value") % 2 != 0;
        };
        t["divisibleby"] = [](Interpreter& in, const Value& v, Args& a) {
            const int64_t n = intArg(in, takeArg(a, 0, "num"), "divisibleby's number");
            if (n == 0)
                in.fail("divisibleby 0");
            return intArg(in, v, "divisibleby's value") % n == 0;
        };
        auto cmp = [](std::string op) {
            return [op](Interpreter& in, const Value& v, Args& a) {
                const Value other = takeArg(a, 0, "other");
                try {
                    if (op == "eq")
                        return equals(v, other);
                    if (op == "ne")
                        return !equals(v, other);
                    if (op == "lt")
                        return lessThan(v, other);
                    if (op == "le")
                        return lessThan(v, other) || equals(v, other);
                    if (op == "gt")
                        return lessThan(other, v);
                    return lessThan(other, v) || equals(v, other);
                } catch (const EvalError& e) {
                    in.fail(e.what());
                }
            };
        };
        for (const char* n : {"eq", "equalto", "=="})
            t[n] = cmp("eq");
        for (const char* n : {"ne", "!="})
            t[n] = cmp("ne");
        for (const char* n : {"lt", "lessthan", "<"})
            t[n] = cmp("lt");
        for (const char* n : {"le", "<="})
            t[n] = cmp("le");
        for (const char* n : {"gt", "greaterthan", ">"})
            t[n] = cmp("gt");
        for (const char* n : {"ge", ">="})
            t[n] = cmp("ge");
        t["sameas"] = [](Interpreter&, const Value& v, Args& a) {
            const Value o = takeArg(a, 0, "other");
            if (v.kind != o.kind)
                return false;
            if (v.isNone() || v.kind == Kind::Bool || v.isNumber())
                return equals(v, o);
            if (v.isString())
                return v.s == o.s;
            if (v.isSequence())
                return v.list == o.list;
            if (v.kind == Kind::Dict)
                return v.dict == o.dict;
            if (v.kind == Kind::Namespace)
                return v.ns == o.ns;
            return v.call == o.call;
        };
        t["in"] = [](Interpreter& in, const Value& v, Args& a) {
            const Value seq = takeArg(a, 0, "seq");
            if (seq.isString())
                return v.isString() && seq.s->find(*v.s) != std::string::npos;
            if (seq.isMapping())
                return v.isString() && seq.find(*v.s) != nullptr;
            for (const Value& x : in.iterate(seq))
                if (equals(x, v))
                    return true;
            return false;
        };
        t["filter"] = [](Interpreter&, const Value& v, Args&) {
            return v.isString() && hasFilter(*v.s);
        };
        t["test"] = [](Interpreter&, const Value& v, Args&) {
            return v.isString() && hasTest(*v.s);
        };
        return t;
    }();
    return table;
}

// --- methods ------------------------------------------------------------------------------------

Value bound(const Value& obj, const std::string& name,
            std::function<Value(Interpreter&, const Value&, Args&)> fn) {
    return Value::function(name, [obj, fn](Interpreter& in, Args& a) { return fn(in, obj, a); });
}

Value stringMethod(const Value& obj, const std::string& name) {
    using F = std::function<Value(Interpreter&, const Value&, Args&)>;
    static const std::map<std::string, F> table = [] {
        std::map<std::string, F> t;
        auto stripper = [](bool l, bool r, const char* n) {
            return [l, r, n](Interpreter& in, const Value& s, Args& a) {
                const Value chars = takeArg(a, 0, "chars", Value::none());
                noMoreArgs(in, a, n);
                return Value::string(strip(*s.s, chars, l, r));
            };
        };
        t["strip"] = stripper(true, true, "strip");
        t["lstrip"] = stripper(true, false, "lstrip");
        t["rstrip"] = stripper(false, true, "rstrip");
        auto splitter = [](bool right, const char* n) {
            return [right, n](Interpreter& in, const Value& s, Args& a) {
                const Value sep = takeArg(a, 0, "sep", Value::none());
                const Value max = takeArg(a, 1, "maxsplit", Value::integer(-1));
                noMoreArgs(in, a, n);
                return Value::makeList(split(in, *s.s, sep, intArg(in, max, "maxsplit"), right));
            };
        };
        t["split"] = splitter(false, "split");
        t["rsplit"] = splitter(true, "rsplit");
        t["splitlines"] = [](Interpreter& in, const Value& s, Args& a) {
            const bool keep = takeArg(a, 0, "keepends", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "splitlines");
            List out;
            const std::string& x = *s.s;
            size_t pos = 0;
            while (pos < x.size()) {
                size_t e = x.find_first_of("\n\r", pos);
                if (e == std::string::npos) {
                    out.push_back(Value::string(x.substr(pos)));
                    break;
                }
                size_t next = e + 1;
                if (x[e] == '\r' && next < x.size() && x[next] == '\n')
                    ++next;
                out.push_back(Value::string(x.substr(pos, (keep ? next : e) - pos)));
                pos = next;
            }
            return Value::makeList(std::move(out));
        };
        auto affix = [](bool start, const char* n) {
            return [start, n](Interpreter& in, const Value& s, Args& a) {
                const Value what = takeArg(a, 0, "prefix");
                noMoreArgs(in, a, n);
                std::vector<std::string> options;
                if (what.isString())
                    options.push_back(*what.s);
                else if (what.isSequence())
                    for (const Value& x : *what.list) {
                        if (!x.isString())
                            in.fail(std::string(n) + " needs strings");
                        options.push_back(*x.s);
                    }
                else
                    in.fail(std::string(n) + " needs a string or a tuple of strings");
                for (const std::string& o : options)
                    if (o.size() <= s.s->size() &&
                        (start ? s.s->compare(0, o.size(), o) == 0
                               : s.s->compare(s.s->size() - o.size(), o.size(), o) == 0))
                        return Value::boolean(true);
                return Value::boolean(false);
            };
        };
        t["startswith"] = affix(true, "startswith");
        t["endswith"] = affix(false, "endswith");
        t["replace"] = [](Interpreter& in, const Value& s, Args& a) {
            if (!a.keyword.empty())
                in.fail("str.replace() takes no keyword arguments");
            const std::string old = str(takeArg(a, 0, "old")), rep = str(takeArg(a, 1, "new"));
            const int64_t count = intArg(in, takeArg(a, 2, "count", Value::integer(-1)), "count");
            noMoreArgs(in, a, "replace");
            std::string out = replaceAll(*s.s, old, rep, count);
            in.checkSize(out.size());
            return Value::string(std::move(out));
        };
        auto unary = [](std::function<std::string(const std::string&)> f, const char* n) {
            return [f, n](Interpreter& in, const Value& s, Args& a) {
                noMoreArgs(in, a, n);
                return Value::string(f(*s.s));
            };
        };
        t["upper"] = unary(upper, "upper");
        t["lower"] = unary(lower, "lower");
        t["title"] = unary(pyTitle, "title");
        t["capitalize"] = unary(capitalize, "capitalize");
        t["casefold"] = unary(lower, "casefold");
        auto finder = [](bool right, bool count, const char* n) {
            return [right, count, n](Interpreter& in, const Value& s, Args& a) {
                const std::string sub = str(takeArg(a, 0, "sub"));
                noMoreArgs(in, a, n);
                const std::u32string u = toUtf32(*s.s), su = toUtf32(sub);
                if (count) {
                    if (su.empty())
                        return Value::integer(static_cast<int64_t>(u.size()) + 1);
                    int64_t c = 0;
                    for (size_t p = u.find(su); p != std::u32string::npos;
                         p = u.find(su, p + su.size()))
                        ++c;
                    return Value::integer(c);
                }
                const size_t p = right ? u.rfind(su) : u.find(su);
                return Value::integer(p == std::u32string::npos ? -1 : static_cast<int64_t>(p));
            };
        };
        t["find"] = finder(false, false, "find");
        t["rfind"] = finder(true, false, "rfind");
        t["count"] = finder(false, true, "count");
        t["join"] = [](Interpreter& in, const Value& s, Args& a) {
            const Value items = takeArg(a, 0, "iterable");
            noMoreArgs(in, a, "join");
            std::string out;
            bool first = true;
            for (const Value& x : in.iterate(items)) {
                if (!x.isString())
                    in.fail("sequence item: expected str instance, " + x.typeName() + " found");
                out += (first ? "" : *s.s) + *x.s;
                first = false;
                in.checkSize(out.size());
            }
            return Value::string(std::move(out));
        };
        auto pred = [](std::function<bool(char32_t)> f, const char* n) {
            return [f, n](Interpreter& in, const Value& s, Args& a) {
                noMoreArgs(in, a, n);
                const std::u32string u = toUtf32(*s.s);
                return Value::boolean(!u.empty() && std::all_of(u.begin(), u.end(), f));
            };
        };
        t["isdigit"] = pred([](char32_t c) { return QChar::isDigit(c); }, "isdigit");
        t["isnumeric"] = pred([](char32_t c) { return QChar::isDigit(c); }, "isnumeric");
        t["isalpha"] = pred([](char32_t c) { return QChar::isLetter(c); }, "isalpha");
        t["isalnum"] = pred([](char32_t c) { return QChar::isLetterOrNumber(c); }, "isalnum");
        t["isspace"] = pred(isSpaceCp, "isspace");
        t["islower"] = [](Interpreter& in, const Value& s, Args& a) {
            noMoreArgs(in, a, "islower");
            return Value::boolean(lower(*s.s) == *s.s && upper(*s.s) != *s.s);
        };
        t["isupper"] = [](Interpreter& in, const Value& s, Args& a) {
            noMoreArgs(in, a, "isupper");
            return Value::boolean(upper(*s.s) == *s.s && lower(*s.s) != *s.s);
        };
        auto removeAffix = [](bool prefix, const char* n) {
            return [prefix, n](Interpreter& in, const Value& s, Args& a) {
                const std::string x = str(takeArg(a, 0, "affix"));
                noMoreArgs(in, a, n);
                const std::string& v = *s.s;
                if (prefix && v.compare(0, x.size(), x) == 0)
                    return Value::string(v.substr(x.size()));
                if (!prefix && x.size() <= v.size() &&
                    v.compare(v.size() - x.size(), x.size(), x) == 0)
                    return Value::string(v.substr(0, v.size() - x.size()));
                return s;
            };
        };
        t["removeprefix"] = removeAffix(true, "removeprefix");
        t["removesuffix"] = removeAffix(false, "removesuffix");
        t["zfill"] = [](Interpreter& in, const Value& s, Args& a) {
            const int64_t w = intArg(in, takeArg(a, 0, "width"), "width");
            noMoreArgs(in, a, "zfill");
            const int64_t n = static_cast<int64_t>(toUtf32(*s.s).size());
            if (w <= n)
                return s;
            std::string v = *s.s;
            const bool sign = !v.empty() && (v[0] == '+' || v[0] == '-');
            v.insert(sign ? 1 : 0, std::string(static_cast<size_t>(w - n), '0'));
            return Value::string(v);
        };
        t["format"] = [](Interpreter& in, const Value& s, Args& a) {
            // str.format with {} / {0} / {name} fields and {{ }} escapes (no format specs).
            std::string out;
            const std::string& f = *s.s;
            size_t auto_ = 0;
            for (size_t k = 0; k < f.size(); ++k) {
                if (f[k] == '{' && k + 1 < f.size() && f[k + 1] == '{') {
                    out += '{';
                    ++k;
                } else if (f[k] == '}' && k + 1 < f.size() && f[k + 1] == '}') {
                    out += '}';
                    ++k;
                } else if (f[k] == '{') {
                    const size_t e = f.find('}', k);
                    if (e == std::string::npos)
                        in.fail("Single '{' encountered in format string");
                    const std::string field = f.substr(k + 1, e - k - 1);
                    if (field.find(':') != std::string::npos ||
                        field.find('!') != std::string::npos)
                        in.fail("format specs in str.format are not supported");
                    Value v;
                    if (field.empty()) {
                        if (auto_ >= a.positional.size())
                            in.fail("Replacement index out of range for format");
                        v = a.positional[auto_++];
                    } else if (field.size() <= 9 &&
                               std::all_of(field.begin(), field.end(),
                                           [](char c) { return c >= '0' && c <= '9'; })) {
                        const size_t i = std::stoul(field);
                        if (i >= a.positional.size())
                            in.fail("Replacement index out of range for format");
                        v = a.positional[i];
                    } else {
                        v = takeArg(a, 1000, field.c_str());
                    }
                    out += str(v);
                    k = e;
                } else {
                    out += f[k];
                }
            }
            return Value::string(out);
        };
        return t;
    }();
    const auto it = table.find(name);
    return it == table.end() ? Value::undefined(name) : bound(obj, name, it->second);
}

Value mappingMethod(const Value& obj, const std::string& name) {
    if (name == "items" || name == "keys" || name == "values")
        return bound(obj, name, [name](Interpreter& in, const Value& d, Args& a) {
            noMoreArgs(in, a, name);
            List out;
            for (const auto& [k, v] : d.entries())
                out.push_back(name == "items"  ? Value::makeTuple({Value::string(k), v})
                              : name == "keys" ? Value::string(k)
                                               : v);
            return Value::makeList(std::move(out));
        });
    if (name == "get")
        return bound(obj, name, [](Interpreter& in, const Value& d, Args& a) {
            const Value key = takeArg(a, 0, "key");
            const Value def = takeArg(a, 1, "default", Value::none());
            noMoreArgs(in, a, "get");
            const Value* v = key.isString() ? d.find(*key.s) : nullptr;
            return v ? *v : def;
        });
    return Value::undefined(name);
}

Value listMethod(const Value& obj, const std::string& name) {
    if (name == "count" || name == "index")
        return bound(obj, name, [name](Interpreter& in, const Value& l, Args& a) {
            const Value x = takeArg(a, 0, "value");
            noMoreArgs(in, a, name);
            int64_t c = 0;
            for (size_t k = 0; k < l.list->size(); ++k)
                if (equals((*l.list)[k], x)) {
                    if (name == "index")
                        return Value::integer(static_cast<int64_t>(k));
                    ++c;
                }
            if (name == "index")
                in.fail(toRepr(x) + " is not in list");
            return Value::integer(c);
        });
    return Value::undefined(name);
}

bool modifies(const std::string& name) {
    static const char* const names[] = {"append",  "extend", "insert",  "pop",    "remove",
                                        "clear",   "sort",   "reverse", "update", "setdefault",
                                        "popitem", "add",    "discard"};
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

} // namespace

bool hasFilter(const std::string& name) {
    return filterTable().count(name) > 0;
}

bool hasTest(const std::string& name) {
    return testTable().count(name) > 0;
}

Value runFilter(Interpreter& in, const std::string& name, const Value& v, Args& args) {
    const auto it = filterTable().find(name);
    if (it == filterTable().end())
        in.fail("no filter named '" + name + "'");
    return it->second(in, v, args);
}

bool runTest(Interpreter& in, const std::string& name, const Value& v, Args& args) {
    const auto it = testTable().find(name);
    if (it == testTable().end())
        in.fail("no test named '" + name + "'");
    return it->second(in, v, args);
}

Value method(Interpreter&, const Value& obj, const std::string& name) {
    if ((obj.isSequence() || obj.kind == Kind::Dict) && modifies(name)) {
        const std::string type = obj.typeName();
        return Value::function(name, [name, type](Interpreter& in, Args&) -> Value {
            in.fail("access to attribute '" + name + "' of '" + type + "' object is unsafe");
        });
    }
    if (obj.isString())
        return stringMethod(obj, name);
    if (obj.kind == Kind::Dict)
        return mappingMethod(obj, name);
    if (obj.isSequence())
        return listMethod(obj, name);
    return Value::undefined(name);
}

std::unordered_map<std::string, Value> globals() {
    std::unordered_map<std::string, Value> g;
    g["range"] = Value::function("range", [](Interpreter& in, Args& a) {
        if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3)
            in.fail("range expects one to three integers");
        int64_t start = 0, stop, step = 1;
        if (a.positional.size() == 1) {
            stop = intArg(in, a.positional[0], "range's stop");
        } else {
            start = intArg(in, a.positional[0], "range's start");
            stop = intArg(in, a.positional[1], "range's stop");
            if (a.positional.size() == 3)
                step = intArg(in, a.positional[2], "range's step");
        }
        if (step == 0)
            in.fail("range() arg 3 must not be zero");
        // The sandbox's MAX_RANGE.
        const double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                   static_cast<double>(step));
        if (n > 100000)
            in.fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        List out;
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
            out.push_back(Value::integer(k));
        return Value::makeList(std::move(out));
    });
    g["namespace"] = Value::function("namespace", [](Interpreter& in, Args& a) {
        Dict d;
        for (const Value& p : a.positional) {
            if (!p.isMapping())
                in.fail("namespace() takes a mapping and keyword arguments");
            for (const auto& e : p.entries())
                d.push_back(e);
        }
        for (auto& kv : a.keyword) {
            auto f = std::find_if(d.begin(), d.end(),
                                  [&](const auto& e) { return e.first == kv.first; });
            if (f != d.end())
                f->second = kv.second;
            else
                d.emplace_back(kv.first, kv.second);
        }
        return Value::makeNamespace(std::move(d));
    });
    g["dict"] = Value::function("dict", [](Interpreter& in, Args& a) {
        Dict d;
        for (const Value& p : a.positional) {
            if (!p.isMapping())
                in.fail("dict() takes a mapping and keyword arguments");
            for (const auto& e : p.entries())
                d.push_back(e);
        }
        for (auto& e : a.keyword)
            d.push_back(e);
        return Value::makeDict(std::move(d));
    });
    g["raise_exception"] =
        Value::function("raise_exception", [](Interpreter& in, Args& a) -> Value {
            const Value msg = takeArg(a, 0, "message", Value::string(""));
            in.fail("raise_exception(): " + str(msg));
        });
    g["strftime_now"] = Value::function("strftime_now", [](Interpreter& in, Args& a) {
        const std::string fmt = str(takeArg(a, 0, "format"));
        noMoreArgs(in, a, "strftime_now");
        std::tm tm{};
        if (!in.now().empty()) { // a fixed instant, UTC
            int Y = 0, M = 0, D = 0, h = 0, m = 0, s = 0;
            if (std::sscanf(in.now().c_str(), "%d-%d-%dT%d:%d:%d", &Y, &M, &D, &h, &m, &s) < 3)
                in.fail("the fixed clock '" + in.now() + "' is not an ISO-8601 instant");
            tm.tm_year = Y - 1900;
            tm.tm_mon = M - 1;
            tm.tm_mday = D;
            tm.tm_hour = h;
            tm.tm_min = m;
            tm.tm_sec = s;
            const std::time_t t = timegm(&tm);
            gmtime_r(&t, &tm);
        } else {
            const std::time_t t = std::time(nullptr);
            localtime_r(&t, &tm);
        }
        return Value::string(strftimeIn(fmt, tm));
    });
    g["joiner"] = Value::function("joiner", [](Interpreter& in, Args& a) {
        const std::string sep = str(takeArg(a, 0, "sep", Value::string(", ")));
        noMoreArgs(in, a, "joiner");
        auto used = std::make_shared<bool>(false);
        return Value::function("joiner", [sep, used](Interpreter&, Args&) {
            if (!*used) {
                *used = true;
                return Value::string("");
            }
            return Value::string(sep);
        });
    });
    return g;
}

} // namespace sparqlab::capture::jinja
