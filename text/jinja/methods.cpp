// The engine's methods and globals (interpreter.h): the Python methods the sandbox lets
// templates call, and the globals transformers adds (raise_exception, strftime_now) beside
// Jinja2's (range, namespace, dict, joiner, cycler).

#include "builtins_common.h"

#include <QString>

#include <algorithm>
#include <clocale>
#include <cmath>
#include <ctime>
#include <functional>
#include <locale.h>
#include <map>

namespace sparqlab::text::jinja {

namespace {

using namespace builtin;

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
            for (std::string& line : splitLines(*s.s, keep))
                out.push_back(Value::string(std::move(line)));
            return Value::makeList(std::move(out));
        };
        auto affix = [](bool start, const char* n) {
            return [start, n](Interpreter& in, const Value& s, Args& a) {
                const Value what = takeArg(a, 0, "prefix");
                const Value from = takeArg(a, 1, "start", Value::none());
                const Value to = takeArg(a, 2, "end", Value::none());
                noMoreArgs(in, a, n);
                std::vector<std::u32string> options;
                if (what.isString())
                    options.push_back(toUtf32(*what.s));
                else if (what.isSequence())
                    for (const Value& x : *what.list) {
                        if (!x.isString())
                            in.fail(std::string(n) + " needs strings");
                        options.push_back(toUtf32(*x.s));
                    }
                else
                    in.fail(std::string(n) + " needs a string or a tuple of strings");
                const std::u32string u = toUtf32(*s.s);
                const auto [b, e] = sliceBounds(in, static_cast<int64_t>(u.size()), from, to);
                for (const std::u32string& o : options) {
                    const int64_t m = static_cast<int64_t>(o.size());
                    if (e - b >= m &&
                        u.compare(static_cast<size_t>(start ? b : e - m), o.size(), o) == 0)
                        return Value::boolean(true);
                }
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
        // find, rfind, index, rindex and count, over s[start:end].
        enum class Find { First, Last, Count };
        auto finder = [](Find what, bool raise, const char* n) {
            return [what, raise, n](Interpreter& in, const Value& s, Args& a) {
                const std::string sub = str(takeArg(a, 0, "sub"));
                const Value from = takeArg(a, 1, "start", Value::none());
                const Value to = takeArg(a, 2, "end", Value::none());
                noMoreArgs(in, a, n);
                const std::u32string u = toUtf32(*s.s), su = toUtf32(sub);
                const auto [b, e] = sliceBounds(in, static_cast<int64_t>(u.size()), from, to);
                const int64_t m = static_cast<int64_t>(su.size());
                if (what == Find::Count) {
                    if (e - b < m)
                        return Value::integer(0);
                    if (su.empty())
                        return Value::integer(e - b + 1);
                    int64_t c = 0;
                    const std::u32string part =
                        u.substr(static_cast<size_t>(b), static_cast<size_t>(e - b));
                    for (size_t p = part.find(su); p != std::u32string::npos;
                         p = part.find(su, p + su.size()))
                        ++c;
                    return Value::integer(c);
                }
                int64_t at = -1;
                if (e - b >= m) {
                    const std::u32string part =
                        u.substr(static_cast<size_t>(b), static_cast<size_t>(e - b));
                    const size_t p = what == Find::Last ? part.rfind(su) : part.find(su);
                    if (p != std::u32string::npos)
                        at = b + static_cast<int64_t>(p);
                }
                if (at < 0 && raise)
                    in.fail("substring not found");
                return Value::integer(at);
            };
        };
        t["find"] = finder(Find::First, false, "find");
        t["rfind"] = finder(Find::Last, false, "rfind");
        t["index"] = finder(Find::First, true, "index");
        t["rindex"] = finder(Find::Last, true, "rindex");
        t["count"] = finder(Find::Count, false, "count");
        auto padder = [](int align, const char* n) {
            return [align, n](Interpreter& in, const Value& s, Args& a) {
                const int64_t width = intArg(in, takeArg(a, 0, "width"), "width");
                const Value fill = takeArg(a, 1, "fillchar", Value::string(" "));
                noMoreArgs(in, a, n);
                const std::u32string f = fill.isString() ? toUtf32(*fill.s) : std::u32string();
                if (f.size() != 1)
                    in.fail("The fill character must be exactly one character long");
                in.checkSize(static_cast<size_t>(std::max<int64_t>(0, width)));
                return Value::string(pad(*s.s, width, f[0], align));
            };
        };
        t["ljust"] = padder(-1, "ljust");
        t["center"] = padder(0, "center");
        t["rjust"] = padder(1, "rjust");
        auto partitioner = [](bool right, const char* n) {
            return [right, n](Interpreter& in, const Value& s, Args& a) {
                const std::string sep = str(takeArg(a, 0, "sep"));
                noMoreArgs(in, a, n);
                if (sep.empty())
                    in.fail("empty separator");
                const std::string& x = *s.s;
                const size_t p = right ? x.rfind(sep) : x.find(sep);
                if (p == std::string::npos)
                    return right ? Value::makeTuple({Value::string(""), Value::string(""), s})
                                 : Value::makeTuple({s, Value::string(""), Value::string("")});
                return Value::makeTuple({Value::string(x.substr(0, p)), Value::string(sep),
                                         Value::string(x.substr(p + sep.size()))});
            };
        };
        t["partition"] = partitioner(false, "partition");
        t["rpartition"] = partitioner(true, "rpartition");
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
        t["isdecimal"] =
            pred([](char32_t c) { return QChar::category(c) == QChar::Number_DecimalDigit; },
                 "isdecimal");
        t["isascii"] = [](Interpreter& in, const Value& s, Args& a) { // "" is ASCII
            noMoreArgs(in, a, "isascii");
            return Value::boolean(
                std::all_of(s.s->begin(), s.s->end(), [](char c) { return (c & 0x80) == 0; }));
        };
        t["istitle"] = [](Interpreter& in, const Value& s, Args& a) {
            noMoreArgs(in, a, "istitle");
            // Python: upper and title case only after uncased characters, lower only after
            // cased ones, and at least one cased character.
            bool prevCased = false, cased = false;
            for (const char32_t c : toUtf32(*s.s)) {
                const bool up = QChar::isUpper(c) || QChar::isTitleCase(c);
                const bool low = QChar::isLower(c);
                if ((up && prevCased) || (low && !prevCased))
                    return Value::boolean(false);
                prevCased = up || low;
                cased = cased || prevCased;
            }
            return Value::boolean(cased);
        };
        t["swapcase"] = [](Interpreter& in, const Value& s, Args& a) {
            noMoreArgs(in, a, "swapcase");
            std::string out;
            for (const char32_t c : toUtf32(*s.s)) {
                const std::string one = toUtf8(c);
                out += QChar::isUpper(c) ? lower(one) : QChar::isLower(c) ? upper(one) : one;
            }
            return Value::string(std::move(out));
        };
        t["islower"] = [](Interpreter& in, const Value& s, Args& a) {
            noMoreArgs(in, a, "islower");
            return Value::boolean(pyIsCase(*s.s, false));
        };
        t["isupper"] = [](Interpreter& in, const Value& s, Args& a) {
            noMoreArgs(in, a, "isupper");
            return Value::boolean(pyIsCase(*s.s, true));
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
            in.checkSize(static_cast<size_t>(w));
            std::string v = *s.s;
            const bool sign = !v.empty() && (v[0] == '+' || v[0] == '-');
            v.insert(sign ? 1 : 0, std::string(static_cast<size_t>(w - n), '0'));
            return Value::string(v);
        };
        t["format"] = [](Interpreter& in, const Value& s, Args& a) {
            return Value::string(strFormat(in, *s.s, a)); // (str_format.cpp)
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
                out.push_back(name == "items"  ? Value::makeTuple({keyValue(k), v})
                              : name == "keys" ? keyValue(k)
                                               : v);
            return Value::makeList(std::move(out));
        });
    if (name == "get")
        return bound(obj, name, [](Interpreter& in, const Value& d, Args& a) {
            const Value key = takeArg(a, 0, "key");
            const Value def = takeArg(a, 1, "default", Value::none());
            noMoreArgs(in, a, "get");
            std::string name;
            const Value* v = dictKey(key, name) ? d.findStored(name) : nullptr;
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
                setEntry(d, e.first, e.second);
        }
        for (auto& kv : a.keyword)
            setEntry(d, kv.first, kv.second);
        return Value::makeNamespace(std::move(d));
    });
    // Jinja2's cycler(*items): .next() gives the current item and moves to the next, .current
    // and .items read it, .reset() goes back to the first. Its state is a namespace's (shared
    // and mutable); its methods hold it weakly (it holds them).
    g["cycler"] = Value::function("cycler", [](Interpreter& in, Args& a) {
        if (a.positional.empty())
            in.fail("cycler(): at least one item has to be provided");
        if (!a.keyword.empty())
            in.fail("cycler() takes no keyword arguments");
        const List items = a.positional;
        Value c = Value::makeNamespace({{"items", Value::makeTuple(items)}, {"current", items[0]}});
        const std::weak_ptr<Dict> state = c.ns;
        const auto at = std::make_shared<size_t>(0);
        const auto moveTo = [state, items, at](size_t i) {
            *at = i;
            if (const std::shared_ptr<Dict> d = state.lock())
                setEntry(*d, "current", items[i]);
        };
        c.ns->emplace_back("next",
                           Value::function("next", [items, at, moveTo](Interpreter&, Args&) {
                               const Value v = items[*at];
                               moveTo((*at + 1) % items.size());
                               return v;
                           }));
        c.ns->emplace_back("reset", Value::function("reset", [moveTo](Interpreter&, Args&) {
                               moveTo(0);
                               return Value::none();
                           }));
        return c;
    });
    g["dict"] = Value::function("dict", [](Interpreter& in, Args& a) {
        Dict d;
        if (a.positional.size() > 1)
            in.fail("dict expected at most 1 argument, got " + std::to_string(a.positional.size()));
        for (const Value& p : a.positional) {
            if (p.isMapping()) {
                for (const auto& e : p.entries())
                    setEntry(d, e.first, e.second);
                continue;
            }
            for (const Value& pair : in.iterate(p)) { // an iterable of key, value pairs
                const std::vector<Value> kv = in.iterate(pair);
                std::string key;
                if (kv.size() != 2)
                    in.fail("dictionary update sequence element has length " +
                            std::to_string(kv.size()) + "; 2 is required");
                if (!dictKey(kv[0], key))
                    in.fail("unhashable type: '" + kv[0].typeName() + "'");
                setEntry(d, key, kv[1]);
            }
        }
        for (auto& e : a.keyword)
            setEntry(d, e.first, e.second);
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

} // namespace sparqlab::text::jinja
