#pragma once
/// \file builtins_common.h
/// What the builtins share (internal to text/jinja/): Python's str(), numbers and string
/// helpers, sorting, attribute paths, selection, parsing and strftime. builtins_common.cpp
/// defines them; filters.cpp (filters and tests) and methods.cpp (methods and globals) use them.

#include "interpreter.h"

#include <ctime>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::text::jinja::builtin {

using Kind = Value::Kind;

std::string str(const Value& v);

bool isInt(const Value& v);

int64_t intArg(Interpreter& in, const Value& v, const char* what);

double number(const Value& v);

/// Python's str.lower()/upper()/title()/capitalize() (Unicode through Qt).
std::string lower(const std::string& s);

std::string upper(const std::string& s);

bool isSpaceCp(char32_t c);

/// Python's str.strip/lstrip/rstrip with optional characters.
std::string strip(const std::string& s, const Value& chars, bool left, bool right);

/// Python's title case of one character, the full mapping where Unicode has one (ß: Ss, ﬁ: Fi).
std::string titleCase(char32_t c);

/// Python's str.title(): title case after a character that is not cased, lower case after one
/// that is.
std::string pyTitle(const std::string& s);

/// Python's str.capitalize(): the first character in title case, the rest lower.
std::string capitalize(const std::string& s);

/// Python's str.isupper() (`upperCase`) or str.islower(): at least one cased character, and none
/// of the other case or in title case.
bool pyIsCase(const std::string& s, bool upperCase);

/// Python's str.splitlines(keepends): lines end at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85,
/// U+2028 and U+2029.
std::vector<std::string> splitLines(const std::string& s, bool keepEnds);

/// Python's str.split(sep=None, maxsplit=-1) (rsplit from the right).
List split(Interpreter& in, const std::string& s, const Value& sepV, int64_t maxsplit,
           bool fromRight);

std::string replaceAll(const std::string& s, const std::string& old, const std::string& rep,
                       int64_t count);

int64_t length(Interpreter& in, const Value& v);

/// `attribute` of a sort, map or sum: a dotted path ("a.b", "items.0").
Value attributeOf(Interpreter& in, const Value& v, const std::string& path);

/// The sort key of case-insensitive comparisons: strings lowered.
Value foldCase(const Value& v, bool caseSensitive);

bool less(Interpreter& in, const Value& a, const Value& b);

/// Items in the order of their keys (the attribute's, case folded unless case-sensitive), stable;
/// `listKeys`: compared as the sort filter's one-item lists, so equal keys are never ordered
/// (`[none, none]|sort` renders; min, max and groupby compare the keys themselves).
List sorted(Interpreter& in, List items, bool reverse, bool caseSensitive, const Value& attribute,
            bool listKeys = false);

/// select/reject and selectattr/rejectattr.
Value selectItems(Interpreter& in, const Value& v, Args& args, bool byAttr, bool keep);

/// Python's str.ljust (align < 0), center (0) and rjust (> 0) to `width` characters.
std::string pad(const std::string& s, int64_t width, char32_t fill, int align);

/// Python's str.find-style start and end (None for the defaults) over `length` characters:
/// negative ones count from the end; a start beyond the end is kept (nothing is found there).
std::pair<int64_t, int64_t> sliceBounds(Interpreter& in, int64_t length, const Value& start,
                                        const Value& end);

std::string htmlEscape(const std::string& s);

/// The digits of |x| in the base of a format type: b, o, x, X, or decimal for any other.
std::string magnitudeDigits(int64_t x, char type);
/// C's printf of one float: `%[#].<precision><type>` (e, E, f, F, g, G), any precision.
std::string cFormat(char type, bool alt, int64_t precision, double x);

/// Python's str.format (str_format.cpp): {}, {0}, {name}, {0[1]}, {a.b}, !r/!s/!a and the
/// format-spec mini-language on strings, integers and floats.
std::string strFormat(Interpreter& in, const std::string& format, const Args& args);

/// Python's float(str).
bool parseFloat(const std::string& s0, double& out);

/// Python's int(str, base).
bool parseInt(const std::string& s0, int64_t base, int64_t& out);

std::string strftimeIn(const std::string& fmt, const std::tm& tm);

} // namespace sparqlab::text::jinja::builtin
