// The engine's filters and tests (interpreter.h): Jinja2's, with transformers' tojson.

#include "builtins_common.h"

#include <QString>

#include <algorithm>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <locale.h>
#include <map>

namespace sparqlab::text::jinja {

namespace {

using namespace builtin;

/// Python's round(x, digits) of a float: the decimal nearest to x's exact binary value at
/// `digits` places, ties to even.
double roundFloat(double x, int64_t digits) {
    if (!std::isfinite(x) || x == 0 || digits > 323)
        return x;
    if (digits < -308)
        return std::copysign(0.0, x);
    std::vector<char> buf(700);
    if (digits >= 0) { // glibc's printf rounds the exact binary value, ties to even
        std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(digits), x);
        return std::strtod(buf.data(), nullptr);
    }
    const double whole = std::trunc(std::fabs(x));
    std::snprintf(buf.data(), buf.size(), "%.0f", whole); // exact
    std::string d = buf.data();
    const size_t cut = static_cast<size_t>(-digits);
    if (d.size() < cut)
        d.insert(0, cut - d.size(), '0');
    const std::string head = "0" + d.substr(0, d.size() - cut), tail = d.substr(d.size() - cut);
    const std::string half = "5" + std::string(cut - 1, '0');
    const bool exactHalf = tail == half && whole == std::fabs(x);
    const bool up =
        tail > half || (tail == half && !exactHalf) || (exactHalf && (head.back() - '0') % 2 == 1);
    std::string r = head;
    for (size_t k = r.size(); up && k-- > 0;) { // add one to the kept digits
        if (r[k] < '9') {
            ++r[k];
            break;
        }
        r[k] = '0';
    }
    return std::copysign(std::strtod((r + std::string(cut, '0')).c_str(), nullptr), x);
}

/// Python's round(i, digits) of an integer: ties to even at 10^-digits.
int64_t roundInt(const Interpreter& in, int64_t i, int64_t digits) {
    if (digits >= 0)
        return i;
    if (digits < -38)
        return 0;
    __int128 p = 1;
    for (int64_t k = 0; k < -digits; ++k)
        p *= 10;
    const __int128 x = i, q = x / p, r = x % p, twice = 2 * (r < 0 ? -r : r);
    __int128 n = q;
    if (twice > p || (twice == p && q % 2 != 0))
        n += x < 0 ? -1 : 1;
    const __int128 out = n * p;
    if (out > INT64_MAX || out < INT64_MIN)
        in.fail("integer overflow");
    return static_cast<int64_t>(out);
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
            // Jinja2's attr is getattr alone: a dict's methods, never its keys.
            return v.kind == Kind::Dict ? method(in, v, str(name)) : in.getAttr(v, str(name));
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
            in.checkSize(static_cast<size_t>(std::max<int64_t>(0, w)));
            return Value::string(pad(str(v), w, U' ', 0));
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
                pairs.push_back(Value::makeTuple({keyValue(k), x}));
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
            in.failIfUndefined(v); // Python's int()/float() of Undefined raise
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
            in.failIfUndefined(v); // Python's int()/float() of Undefined raise
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
            if (!width.isString())
                in.checkSize(static_cast<size_t>(std::max<int64_t>(0, intArg(in, width, "width"))));
            const std::string ind =
                width.isString()
                    ? *width.s
                    : std::string(
                          static_cast<size_t>(std::max<int64_t>(0, intArg(in, width, "width"))),
                          ' ');
            // Jinja2 appends a newline before Python's splitlines (a quirk kept).
            const std::vector<std::string> lines = splitLines(str(v) + "\n", false);
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
                out.push_back(Value::makeTuple({keyValue(k), x}));
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
            if (!v.truthy()) // as select: nothing from a false value
                return Value::makeList({});
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
                // Python's min and max keep the first of equal items ("a" of ["a", "A"]).
                List items = sorted(in, in.iterate(v), wantMax, cs, attribute);
                if (items.empty())
                    return Value::undefined("the extreme of an empty sequence");
                return items.front();
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
            if (method == "common") // Python's round(value, precision)
                return isInt(v) ? Value::integer(roundInt(in, intArg(in, v, "round"), precision))
                                : Value::number(roundFloat(v.f, precision));
            const double m = std::pow(10.0, static_cast<double>(precision));
            if (method == "ceil")
                return Value::number(std::ceil(number(v) * m) / m);
            if (method == "floor")
                return Value::number(std::floor(number(v) * m) / m);
            in.fail("round: method must be 'common', 'ceil' or 'floor'");
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
            return Value::makeList(sorted(in, in.iterate(v), reverse, cs, attribute, true));
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
            // Jinja2: words split at runs of whitespace, '-' and opening brackets; each gets
            // its first character upper (the full mapping: ß gives SS) and the rest lower.
            std::string out;
            std::u32string word;
            auto flush = [&] {
                if (!word.empty())
                    out += upper(toUtf8(word.substr(0, 1))) + lower(toUtf8(word.substr(1)));
                word.clear();
            };
            for (const char32_t c : toUtf32(str(v))) {
                if (isSpaceCp(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
                    flush();
                    out += toUtf8(c);
                } else {
                    word += c;
                }
            }
            flush();
            return Value::string(std::move(out));
        };
        t["tojson"] = [](Interpreter& in, const Value& v, Args& a) {
            // transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
            // separators=None, sort_keys=False).
            const bool ascii = takeArg(a, 0, "ensure_ascii", Value::boolean(false)).truthy();
            const Value indent = takeArg(a, 1, "indent", Value::none());
            const Value seps = takeArg(a, 2, "separators", Value::none());
            const bool sortKeys = takeArg(a, 3, "sort_keys", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "tojson");
            // Python's indent: a string is one level's, a number that many spaces (none below 1).
            std::optional<std::string> ind;
            if (indent.isString())
                ind = *indent.s;
            else if (!indent.isNone())
                ind = std::string(
                    static_cast<size_t>(std::clamp<int64_t>(intArg(in, indent, "indent"), 0, 64)),
                    ' ');
            if (ind && ind->size() > 256)
                in.fail("tojson: an indent longer than 256 characters");
            std::string item = ind ? "," : ", ", key = ": ";
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
                if (!hashable(k)) // Jinja2 keeps the values seen in a set
                    in.fail("unhashable type: '" + k.typeName() + "'");
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
            int64_t words = 0; // runs of Python's \w: letters, digits and '_'
            bool inWord = false;
            for (const char32_t c : toUtf32(str(v))) {
                const bool w = QChar::isLetterOrNumber(c) || c == '_';
                words += w && !inWord;
                inWord = w;
            }
            return Value::integer(words);
        };
        t["slice"] = [](Interpreter& in, const Value& v, Args& a) {
            // Jinja2: `slices` columns, the first length % slices one item longer; fill_with
            // pads the shorter ones.
            const int64_t slices = intArg(in, takeArg(a, 0, "slices"), "slices");
            const Value fill = takeArg(a, 1, "fill_with", Value::none());
            noMoreArgs(in, a, "slice");
            if (slices <= 0)
                in.fail("slice needs a positive number of slices");
            const List seq = in.iterate(v);
            const int64_t n = static_cast<int64_t>(seq.size()), per = n / slices,
                          extra = n % slices;
            List out;
            int64_t offset = 0;
            for (int64_t k = 0; k < std::min<int64_t>(slices, 100'000); ++k) {
                const int64_t start = offset + k * per;
                if (k < extra)
                    ++offset;
                const int64_t end = offset + (k + 1) * per;
                List part(seq.begin() + start, seq.begin() + end);
                if (!fill.isNone() && k >= extra)
                    part.push_back(fill);
                out.push_back(Value::makeList(std::move(part)));
            }
            return Value::makeList(std::move(out));
        };
        t["filesizeformat"] = [](Interpreter& in, const Value& v, Args& a) {
            const bool binary = takeArg(a, 0, "binary", Value::boolean(false)).truthy();
            noMoreArgs(in, a, "filesizeformat");
            double bytes;
            if (v.isNumber())
                bytes = number(v);
            else if (!v.isString() || !parseFloat(*v.s, bytes))
                in.fail("filesizeformat needs a number, not '" + v.typeName() + "'");
            const double base = binary ? 1024 : 1000;
            static const char* const decimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
            static const char* const powers[] = {"KiB", "MiB", "GiB", "TiB",
                                                 "PiB", "EiB", "ZiB", "YiB"};
            if (bytes == 1)
                return Value::string("1 Byte");
            if (bytes < base)
                return Value::string(
                    std::to_string(static_cast<int64_t>(std::clamp(bytes, -9e18, 9e18))) +
                    " Bytes");
            char buf[64];
            double unit = base;
            for (int i = 0; i < 8; ++i) {
                unit *= base; // base ** (i + 2)
                if (bytes < unit || i == 7) {
                    std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit,
                                  (binary ? powers : decimal)[i]);
                    break;
                }
            }
            return Value::string(buf);
        };
        t["format"] = [](Interpreter& in, const Value& v, Args& a) {
            // Jinja2: str(value) % (kwargs or args), printf-style (the % operator's).
            if (!a.keyword.empty() && !a.positional.empty())
                in.fail("can't handle positional and keyword arguments at the same time");
            const Value args = a.keyword.empty()
                                   ? Value::makeTuple(a.positional)
                                   : Value::makeDict(Dict(a.keyword.begin(), a.keyword.end()));
            return Value::string(percentFormat(in, str(v), args));
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
            for (Value& g : groups)
                g.grouped = true;
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
        // Jinja2's Undefined has a length and items and can be called (each use fails).
        t["sequence"] = simple([](const Value& v) {
            return v.isString() || v.isSequence() || v.kind == Kind::Dict || v.isUndefined();
        });
        t["iterable"] = simple([](const Value& v) {
            return v.isString() || v.isSequence() || v.kind == Kind::Dict || v.isUndefined();
        });
        t["callable"] = simple([](const Value& v) { return v.call != nullptr || v.isUndefined(); });
        t["lower"] = simple([](const Value& v) { return pyIsCase(str(v), false); });
        t["upper"] = simple([](const Value& v) { return pyIsCase(str(v), true); });
        t["escaped"] = simple([](const Value&) { return false; });
        // Jinja2: value % 2 == 0, value % 2 == 1 and value % num == 0, Python's modulo.
        t["even"] = [](Interpreter& in, const Value& v, Args&) {
            return equals(in.binary("%", v, Value::integer(2)), Value::integer(0));
        };
        t["odd"] = [](Interpreter& in, const Value& v, Args&) {
            return equals(in.binary("%", v, Value::integer(2)), Value::integer(1));
        };
        t["divisibleby"] = [](Interpreter& in, const Value& v, Args& a) {
            return equals(in.binary("%", v, takeArg(a, 0, "num")), Value::integer(0));
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
            if (std::string key; seq.isMapping())
                return dictKey(v, key) && seq.findStored(key) != nullptr;
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

} // namespace sparqlab::text::jinja
