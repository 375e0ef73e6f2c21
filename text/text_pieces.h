#pragma once
/// \file text_pieces.h
/// The text machinery the tokenizer, its trainer and the chat templates share: UTF-8 code points
/// and the maximal-subpart rule for invalid bytes, GPT-2's byte-to-character map, PCRE2 regular
/// expressions with Unicode properties and the tokenizers library's split behaviours. Internal to
/// the text layer.

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sparqlab::text::pieces {

// --- UTF-8 ------------------------------------------------------------------------------------

/// Length of the valid UTF-8 sequence at s[i], or 0 if it is invalid.
inline size_t utf8Length(const std::string& s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        n = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (i + n > s.size())
        return 0;
    for (size_t k = 1; k < n; ++k) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        if ((d & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/// Bytes of an invalid sequence at s[i] that form the longest prefix of some valid one (≥ 1).
inline size_t maximalSubpart(const std::string& s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF; // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    size_t k = 1;
    while (k <= need && i + k < s.size()) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF))
            break;
        ++k;
    }
    return k;
}

inline std::string encodeUtf8(uint32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
}

inline uint32_t decodeUtf8(const std::string& s, size_t i, size_t n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (n == 1)
        return c;
    uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    return cp;
}

/// Unicode's White_Space property: Rust's `char::is_whitespace`, which the tokenizers library's
/// strips use, and Oniguruma's `\s`.
inline bool isWhiteSpace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/// Where the character that ends at `end` (> begin) starts, not before `begin`.
inline size_t previousCharacter(const std::string& s, size_t begin, size_t end) {
    size_t b = end - 1;
    while (b > begin && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80)
        --b;
    return b;
}

/// Where the run of white space that ends at `end` begins (not before `begin`).
inline size_t whiteSpaceRunBefore(const std::string& s, size_t begin, size_t end) {
    while (end > begin) {
        const size_t b = previousCharacter(s, begin, end);
        const size_t n = utf8Length(s, b);
        if (n == 0 || b + n != end || !isWhiteSpace(decodeUtf8(s, b, n)))
            break;
        end = b;
    }
    return end;
}

/// Where the run of white space that begins at `i` ends.
inline size_t whiteSpaceRunAfter(const std::string& s, size_t i) {
    while (i < s.size()) {
        const size_t n = utf8Length(s, i);
        if (n == 0 || !isWhiteSpace(decodeUtf8(s, i, n)))
            break;
        i += n;
    }
    return i;
}

/// The characters (code points, as UTF-8 strings) of valid UTF-8 text.
inline std::vector<std::string> characters(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        const size_t n = std::max<size_t>(1, utf8Length(s, i));
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

/// GPT-2's reversible map from bytes to printable characters.
struct ByteMap {
    std::string toChar[256];
    std::unordered_map<uint32_t, unsigned char> toByte;
    ByteMap() {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            const uint32_t cp =
                printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
            toChar[b] = encodeUtf8(cp);
            toByte[cp] = static_cast<unsigned char>(b);
        }
    }
};
inline const ByteMap& byteMap() {
    static const ByteMap m;
    return m;
}

// --- regex (PCRE2 with Unicode properties) ---------------------------------------------------

/// The characters (PCRE2 class members) that the tokenizers library's Oniguruma (Unicode 16.0)
/// puts in the general category `name` ("L", "Nd", "L&", …) and PCRE2 10.42 (Unicode 14.0) does
/// not: letters, digits, marks and symbols added since (CJK Extensions H and I, Kawi, new emoji);
/// empty for other names. "C" has none: PCRE2 has them as Cn, inside C (so `\p{C}` and
/// `\p{Cn}` still take in the new characters: PCRE2 cannot take one away from a class).
inline std::string unicodeAdditions(const std::string& name) {
    static const std::pair<const char*, const char*> table[] = {
#include "text/unicode_additions.inc"
    };
    if (name.empty() || name == "C" || (name[0] == 'C' && name != "Cf"))
        return {};
    std::string out;
    for (const auto& [category, members] : table) {
        const std::string c = category;
        if (c == name || (name.size() == 1 && c[0] == name[0]) ||
            (name == "L&" && (c == "Lu" || c == "Ll" || c == "Lt")))
            out += members;
    }
    return out;
}

/// A general category's abbreviation ("L", "Lu", "L&") for a property name as Oniguruma reads
/// it (any case, spaces, '-' and '_' ignored: "letter", "Uppercase_Letter", "lu"); empty for
/// names that are not a general category (scripts, binary properties).
inline std::string generalCategory(const std::string& property) {
    static const std::unordered_map<std::string, std::string> names = [] {
        std::unordered_map<std::string, std::string> m;
        const char* const pairs[][2] = {{"L", "letter"},
                                        {"Lu", "uppercaseletter"},
                                        {"Ll", "lowercaseletter"},
                                        {"Lt", "titlecaseletter"},
                                        {"Lm", "modifierletter"},
                                        {"Lo", "otherletter"},
                                        {"L&", "casedletter"},
                                        {"M", "mark"},
                                        {"Mn", "nonspacingmark"},
                                        {"Mc", "spacingmark"},
                                        {"Me", "enclosingmark"},
                                        {"N", "number"},
                                        {"Nd", "decimalnumber"},
                                        {"Nl", "letternumber"},
                                        {"No", "othernumber"},
                                        {"P", "punctuation"},
                                        {"Pc", "connectorpunctuation"},
                                        {"Pd", "dashpunctuation"},
                                        {"Ps", "openpunctuation"},
                                        {"Pe", "closepunctuation"},
                                        {"Pi", "initialpunctuation"},
                                        {"Pf", "finalpunctuation"},
                                        {"Po", "otherpunctuation"},
                                        {"S", "symbol"},
                                        {"Sm", "mathsymbol"},
                                        {"Sc", "currencysymbol"},
                                        {"Sk", "modifiersymbol"},
                                        {"So", "othersymbol"},
                                        {"Z", "separator"},
                                        {"Zs", "spaceseparator"},
                                        {"Zl", "lineseparator"},
                                        {"Zp", "paragraphseparator"},
                                        {"C", "other"},
                                        {"Cc", "control"},
                                        {"Cf", "format"},
                                        {"Cs", "surrogate"},
                                        {"Co", "privateuse"},
                                        {"Cn", "unassigned"}};
        for (const auto& [abbreviation, name] : pairs) {
            std::string lower = abbreviation;
            std::transform(lower.begin(), lower.end(), lower.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            m[lower] = abbreviation;
            m[name] = abbreviation;
        }
        return m;
    }();
    std::string key;
    for (const char c : property)
        if (c != ' ' && c != '-' && c != '_')
            key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto it = names.find(key);
    return it == names.end() ? std::string() : it->second;
}

/// An Oniguruma pattern (the tokenizers library compiles its regexes with Oniguruma) in PCRE2's
/// dialect: the shorthands whose Unicode meaning differs are spelled out, and a general
/// category (`\p{L}`, `\p{N}`, `[^\s\p{L}]`) takes in the characters Unicode has given it
/// since PCRE2's tables (unicodeAdditions) — except `\P{..}` inside a class, which PCRE2 cannot
/// narrow: there a character new since Unicode 14 still counts as outside the category. Oniguruma's
/// `\s` is White_Space (PCRE2's adds U+180E), its `\w` is Alphabetic, marks, decimal digits and
/// connector punctuation (PCRE2's is letters, numbers and "_"; outside a class Oniguruma's
/// Latin-1 table adds ² ³ ¹ ¼ ½ ¾), its `\h` a hexadecimal digit (PCRE2's horizontal space).
/// POSIX brackets ([:alpha:]) inside a class are kept whole. `\W` and `\H` inside a class, and
/// classes nested in classes, have no PCRE2 spelling: such a pattern is refused.
inline std::string onigurumaToPcre2(const std::string& pattern, const std::string& where) {
    static const std::string word = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc})" + unicodeAdditions("L") +
                                    unicodeAdditions("M") + unicodeAdditions("Nd");
    static const std::string latin1Word = R"(\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";
    static const std::string hex = "0-9a-fA-F";
    const auto refuse = [&](const std::string& what) {
        throw TokenizerError(where + ": regex '" + pattern + "' uses " + what +
                             ", which is not supported");
    };
    std::string out;
    bool inClass = false;
    size_t classStart = 0; // where the class's first member is
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char e = pattern[++i];
            if ((e == 'W' || e == 'H') && inClass)
                refuse(std::string("\\") + e + " inside a class");
            // A general category: \p{Name}, \p{^Name} or \P{Name} (Oniguruma reads \pL as
            // no property; PCRE2 as one, left so).
            std::string body;
            size_t last = i; // the property's last character
            if ((e == 'p' || e == 'P') && i + 1 < pattern.size()) {
                const size_t close = pattern.find('}', i);
                if (pattern[i + 1] == '{' && close != std::string::npos) {
                    body = pattern.substr(i + 2, close - i - 2);
                    last = close;
                }
            }
            const bool caret = !body.empty() && body[0] == '^';
            const std::string name = generalCategory(caret ? body.substr(1) : body);
            const std::string adds = unicodeAdditions(name);
            if (!name.empty()) {
                const bool negated = (e == 'P') != caret;
                const std::string prop = "\\p{" + name + "}";
                if (inClass)
                    out += negated ? "\\P{" + name + "}" : prop + adds;
                else
                    out += (negated ? "[^" : "[") + prop + adds + "]";
                i = last;
                continue;
            }
            if (e == 's' || e == 'S')
                out += e == 's' ? R"(\p{White_Space})" : R"(\P{White_Space})";
            else if (e == 'w')
                out += inClass ? word : "[" + word + latin1Word + "]";
            else if (e == 'W')
                out += "[^" + word + latin1Word + "]";
            else if (e == 'h')
                out += inClass ? hex : "[" + hex + "]";
            else if (e == 'H')
                out += "[^" + hex + "]";
            else
                out += std::string{'\\', e};
            continue;
        }
        if (inClass && c == '[') {
            const size_t close =
                pattern.compare(i, 2, "[:") == 0 ? pattern.find(":]", i + 2) : std::string::npos;
            if (close == std::string::npos)
                refuse("a class inside a class");
            out.append(pattern, i, close + 2 - i); // a POSIX bracket, whole
            i = close + 1;
            continue;
        }
        if (!inClass && c == '[') {
            inClass = true;
            classStart = i + 1 < pattern.size() && pattern[i + 1] == '^' ? i + 2 : i + 1;
        } else if (inClass && c == ']' && i != classStart) {
            inClass = false;
        }
        out += c;
    }
    return out;
}

class Regex {
public:
    /// `pattern` in Oniguruma's dialect (onigurumaToPcre2).
    Regex(const std::string& onigPattern, const std::string& where) {
        int err = 0;
        PCRE2_SIZE off = 0;
        const std::string pattern = onigurumaToPcre2(onigPattern, where);
        // Oniguruma's ^ and $ match at every line's start and end.
        m_code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &off, nullptr);
        if (!m_code) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(err, buf, sizeof buf);
            throw TokenizerError(where + ": regex '" + onigPattern +
                                 "' does not compile: " + reinterpret_cast<const char*>(buf));
        }
        pcre2_jit_compile(m_code, PCRE2_JIT_COMPLETE); // optional speed-up
    }
    ~Regex() { pcre2_code_free(m_code); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    /// Non-overlapping matches [begin, end) of valid UTF-8 text, empty ones included, as the
    /// onig crate's find_iter gives them: an empty match right where the previous match ended
    /// is passed over by one character.
    std::vector<std::pair<size_t, size_t>> findAll(const std::string& s) const {
        std::vector<std::pair<size_t, size_t>> out;
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(m_code, nullptr);
        size_t start = 0;
        std::optional<size_t> lastEnd;
        while (start <= s.size()) {
            const int rc = pcre2_match(m_code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(),
                                       start, PCRE2_NO_UTF_CHECK, md, nullptr);
            if (rc < 0)
                break;
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            const size_t b = ov[0], e = ov[1];
            if (e == b && lastEnd == e) {
                start += std::max<size_t>(1, start < s.size() ? utf8Length(s, start) : 1);
                continue;
            }
            out.emplace_back(b, e);
            start = e;
            lastEnd = e;
        }
        pcre2_match_data_free(md);
        return out;
    }

private:
    pcre2_code* m_code = nullptr;
};

/// A pattern matching `literal` (none where it is empty: the library's string patterns find
/// nothing then).
inline std::string escapeRegex(const std::string& literal) {
    if (literal.empty())
        return "(?!)";
    std::string out;
    for (char c : literal) {
        if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos)
            out += '\\';
        out += c;
    }
    return out;
}

inline std::string replaceAll(const std::string& s, const Regex& re, const std::string& content) {
    std::string out;
    size_t last = 0;
    for (const auto& [b, e] : re.findAll(s)) {
        out.append(s, last, b - last);
        out += content;
        last = e;
    }
    out.append(s, last, std::string::npos);
    return out;
}

inline const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

/// Splits one piece by the matches of `re` with the tokenizers library's behaviours.
inline std::vector<std::string> splitBy(const std::string& s, const Regex& re, Behavior b,
                                        bool invert) {
    std::vector<std::pair<size_t, size_t>> m = re.findAll(s);
    // Segments with a flag: true = delimiter (a match, or a gap when inverted).
    std::vector<std::pair<std::string, bool>> seg;
    size_t last = 0;
    for (const auto& [mb, me] : m) {
        if (mb > last)
            seg.emplace_back(s.substr(last, mb - last), invert);
        seg.emplace_back(s.substr(mb, me - mb), !invert);
        last = me;
    }
    if (last < s.size())
        seg.emplace_back(s.substr(last), invert);
    std::vector<std::string> out;
    switch (b) {
    case Behavior::Removed:
        for (auto& [t, d] : seg)
            if (!d)
                out.push_back(t);
        break;
    case Behavior::Isolated:
        for (auto& [t, d] : seg)
            out.push_back(t);
        break;
    // A delimiter joins its neighbour only where that neighbour is not a delimiter itself: each
    // further delimiter of a run is a piece of its own (the library's `split`: three spaces
    // under Metaspace are "▁", "▁", "▁", not "▁▁▁").
    case Behavior::MergedWithPrevious: {
        bool previous = false;
        for (auto& [t, d] : seg) {
            if (d && !previous && !out.empty())
                out.back() += t;
            else
                out.push_back(t);
            previous = d;
        }
        break;
    }
    case Behavior::MergedWithNext: { // the same from the end
        bool next = false;
        std::vector<std::string> reversed;
        for (size_t i = seg.size(); i-- > 0;) {
            if (seg[i].second && !next && !reversed.empty())
                reversed.back() = seg[i].first + reversed.back();
            else
                reversed.push_back(seg[i].first);
            next = seg[i].second;
        }
        out.assign(reversed.rbegin(), reversed.rend());
        break;
    }
    // Neighbours of the same kind join, delimiters or not (the library's fold compares
    // is_match with the previous one): inverted, a run of matches is one piece too.
    case Behavior::Contiguous: {
        bool lastDelim = false;
        for (auto& [t, d] : seg) {
            if (d == lastDelim && !out.empty())
                out.back() += t;
            else
                out.push_back(t);
            lastDelim = d;
        }
        break;
    }
    }
    // Empty pieces (an empty match, a delimiter removed whole) are no pieces: the library's
    // PreTokenizedString::split drops them.
    out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());
    return out;
}

} // namespace sparqlab::text::pieces
