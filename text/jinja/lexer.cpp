// The template's lexer (lexer.h).

#include "lexer.h"

#include "builtins_common.h"

#include "text/text_pieces.h"

#include <algorithm>
#include <cstring>

namespace sparqlab::text::jinja::lex {

void fail(int line, const std::string& what) {
    throw EvalError("line " + std::to_string(line) + ": " + what);
}

namespace {

/// Python's whitespace (str.isspace, and `\s` of Jinja2's patterns): ASCII's, U+001C…U+001F,
/// U+0085, U+00A0, U+3000 and the other Unicode spaces. The length of the one at `i`, or 0.
size_t spaceAt(const std::string& s, size_t i) {
    const size_t n = pieces::utf8Length(s, i);
    if (n == 0)
        return 0;
    return builtin::isSpaceCp(pieces::decodeUtf8(s, i, n)) ? n : 0;
}

/// Past the whitespace from `i` on.
size_t skipSpace(const std::string& s, size_t i) {
    while (i < s.size())
        if (const size_t n = spaceAt(s, i))
            i += n;
        else
            break;
    return i;
}

/// Python's str.rstrip().
void rstripSpace(std::string& text) {
    while (!text.empty()) {
        const size_t b = pieces::previousCharacter(text, 0, text.size());
        if (spaceAt(text, b) != text.size() - b)
            break;
        text.erase(b);
    }
}

/// lstrip_blocks: the whitespace after the text's last newline, where only whitespace follows it
/// (Jinja2's `\s+` up to the tag), and the newline starts a line (or the text does).
void lstripLine(std::string& text, bool lineStarting) {
    const size_t nl = text.rfind('\n');
    const size_t from = nl == std::string::npos ? 0 : nl + 1;
    if ((nl != std::string::npos || lineStarting) && skipSpace(text, from) == text.size())
        text.erase(from);
}

void appendUtf8(std::string& out, uint32_t cp) {
    out += pieces::encodeUtf8(cp);
}

/// A string literal's value: Python's escapes (unicode-escape after backslashreplace).
std::string unescape(const std::string& raw, int line) {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] != '\\' || i + 1 >= raw.size()) {
            out += raw[i];
            continue;
        }
        const char e = raw[++i];
        auto hex = [&](size_t n) {
            uint32_t v = 0;
            for (size_t k = 1; k <= n; ++k) {
                if (i + k >= raw.size() || !std::isxdigit(static_cast<unsigned char>(raw[i + k])))
                    fail(line, "truncated \\" + std::string(1, e) + " escape in a string");
                const char h = raw[i + k];
                v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                       ? h - '0'
                                                       : std::tolower(h) - 'a' + 10);
            }
            i += n;
            return v;
        };
        switch (e) {
        case 'n':
            out += '\n';
            break;
        case 't':
            out += '\t';
            break;
        case 'r':
            out += '\r';
            break;
        case '\\':
            out += '\\';
            break;
        case '\'':
            out += '\'';
            break;
        case '"':
            out += '"';
            break;
        case 'a':
            out += '\a';
            break;
        case 'b':
            out += '\b';
            break;
        case 'f':
            out += '\f';
            break;
        case 'v':
            out += '\v';
            break;
        case '\n': // a line continuation
            break;
        case 'x':
            appendUtf8(out, hex(2));
            break;
        case 'u':
            appendUtf8(out, hex(4));
            break;
        case 'U': {
            const uint32_t v = hex(8);
            if (v > 0x10ffff)
                fail(line, "a \\U escape beyond U+10FFFF in a string");
            appendUtf8(out, v);
            break;
        }
        default:
            if (e >= '0' && e <= '7') { // octal, up to three digits
                uint32_t v = static_cast<uint32_t>(e - '0');
                for (int k = 0;
                     k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++k)
                    v = v * 8 + static_cast<uint32_t>(raw[++i] - '0');
                appendUtf8(out, v);
            } else { // an unknown escape stays as written
                out += '\\';
                out += e;
            }
        }
    }
    return out;
}

class Lexer {
public:
    Lexer(std::string src) : m_src(std::move(src)) {}

    std::vector<Piece> run() {
        std::vector<Piece> out;
        bool stripNext = false;   // the previous tag ended with '-'
        bool lineStarting = true; // Jinja2's line_starting
        while (m_pos <= m_src.size()) {
            const size_t tag = findTag(m_pos);
            std::string text = m_src.substr(m_pos, tag - m_pos);
            const int textLine = m_line;
            advanceLines(m_pos, tag);
            if (stripNext) {
                text.erase(0, skipSpace(text, 0));
                stripNext = false;
            }
            if (tag >= m_src.size()) {
                if (!text.empty())
                    out.push_back({Piece::Kind::Text, text, {}, textLine});
                break;
            }
            const char kind = m_src[tag + 1]; // '{', '%' or '#'
            const char sign = tag + 2 < m_src.size() ? m_src[tag + 2] : 0;
            if (sign == '-')
                rstripSpace(text);
            else if (kind != '{' && sign != '+')
                lstripLine(text, lineStarting); // (up to a block or comment)
            if (!text.empty())
                out.push_back({Piece::Kind::Text, text, {}, textLine});
            m_pos = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            lineStarting = false;
            if (kind == '#') {
                const size_t end = m_src.find("#}", m_pos);
                if (end == std::string::npos)
                    fail(m_line, "a comment {# is never closed");
                const bool minus = end > m_pos && m_src[end - 1] == '-';
                const bool plus = end > m_pos && m_src[end - 1] == '+'; // "+#}": keep the newline
                advanceLines(m_pos, end + 2);
                m_pos = end + 2;
                closeTag(minus, !plus, stripNext, lineStarting);
                continue;
            }
            Piece p{kind == '{' ? Piece::Kind::Var : Piece::Kind::Block, {}, {}, m_line};
            bool minus = false, plus = false;
            tokens(p, kind == '{' ? "}}" : "%}", minus, plus);
            if (p.kind == Piece::Kind::Block && !p.tokens.empty() &&
                p.tokens[0].kind == Token::Kind::Name && p.tokens[0].text == "raw") {
                if (p.tokens.size() != 1)
                    fail(p.line, "{% raw %} takes nothing after it");
                if (plus) // (Jinja2's raw tag ends in "%}" or "-%}" only)
                    fail(p.line, "unknown tag 'raw' ({% raw +%} is no raw block)");
                // (Jinja2's raw tag takes no trim_blocks newline after it)
                closeTag(minus, false, stripNext, lineStarting);
                out.push_back(rawBlock(stripNext, lineStarting));
                stripNext = false;
                continue;
            }
            out.push_back(std::move(p));
            closeTag(minus, kind == '%' && !plus, stripNext, lineStarting);
        }
        return out;
    }

private:
    /// The next "{{", "{%" or "{#" at or after `from`; the end of the source if none.
    size_t findTag(size_t from) const {
        for (size_t i = from; i + 1 < m_src.size(); ++i)
            if (m_src[i] == '{' &&
                (m_src[i + 1] == '{' || m_src[i + 1] == '%' || m_src[i + 1] == '#'))
                return i;
        return m_src.size();
    }

    void advanceLines(size_t from, size_t to) {
        for (size_t i = from; i < to && i < m_src.size(); ++i)
            if (m_src[i] == '\n')
                ++m_line;
    }

    /// After a tag's closer: '-' strips what follows; trim_blocks drops one newline after a
    /// block or comment.
    void closeTag(bool minus, bool block, bool& stripNext, bool& lineStarting) {
        if (minus) {
            stripNext = true;
            // Jinja2's line_starting: the closer's match (with its stripped whitespace) ended
            // a line.
            const size_t k = skipSpace(m_src, m_pos);
            lineStarting = k > m_pos && m_src[k - 1] == '\n';
            return;
        }
        if (block && m_pos < m_src.size() && m_src[m_pos] == '\n') {
            ++m_pos;
            ++m_line;
            lineStarting = true;
        }
    }

    /// {% raw %}…{% endraw %}: the text as it is, but for the whitespace control of the endraw
    /// tag: `{%-` strips before it, `{%+` keeps, and otherwise lstrip_blocks; `-%}` strips after
    /// it, `+%}` keeps its newline, and otherwise trim_blocks.
    Piece rawBlock(bool stripFirst, bool& lineStarting) {
        const int line = m_line;
        for (size_t i = m_pos; i + 1 < m_src.size(); ++i) {
            if (m_src[i] != '{' || m_src[i + 1] != '%')
                continue;
            size_t k = i + 2;
            const char sign = k < m_src.size() ? m_src[k] : 0;
            if (sign == '-' || sign == '+')
                ++k;
            k = skipSpace(m_src, k);
            if (m_src.compare(k, 6, "endraw") != 0)
                continue;
            k = skipSpace(m_src, k + 6);
            const char endSign = k < m_src.size() ? m_src[k] : 0;
            if (endSign == '-' || endSign == '+')
                ++k;
            if (m_src.compare(k, 2, "%}") != 0)
                continue;
            std::string text = m_src.substr(m_pos, i - m_pos);
            if (stripFirst)
                text.erase(0, skipSpace(text, 0));
            if (sign == '-')
                rstripSpace(text);
            else if (sign != '+')
                lstripLine(text, lineStarting);
            advanceLines(m_pos, k + 2);
            m_pos = k + 2;
            bool strip = false;
            lineStarting = false;
            closeTag(endSign == '-', endSign != '+', strip, lineStarting);
            if (strip) {
                const size_t to = skipSpace(m_src, m_pos);
                advanceLines(m_pos, to);
                m_pos = to;
            }
            return {Piece::Kind::Text, text, {}, line};
        }
        fail(line, "{% raw %} is never closed with {% endraw %}");
    }

    /// The tokens of a tag up to its closer ("}}" or "%}", optionally after '-').
    void tokens(Piece& p, const char* closer, bool& minus, bool& plus) {
        std::vector<char> balance;
        const char* opName = p.kind == Piece::Kind::Var ? "{{" : "{%";
        while (true) {
            {
                const size_t to = skipSpace(m_src, m_pos);
                advanceLines(m_pos, to);
                m_pos = to;
            }
            if (m_pos >= m_src.size())
                fail(p.line, std::string("a tag ") + opName + " is never closed");
            if (balance.empty()) {
                if (m_src[m_pos] == '-' && m_src.compare(m_pos + 1, 2, closer) == 0) {
                    minus = true;
                    m_pos += 3;
                    return;
                }
                if (m_src[m_pos] == '+' && m_src.compare(m_pos + 1, 2, closer) == 0) {
                    plus = true; // "+%}": this block keeps the newline after it
                    m_pos += 3;
                    return;
                }
                if (m_src.compare(m_pos, 2, closer) == 0) {
                    m_pos += 2;
                    return;
                }
            }
            Token t;
            t.line = m_line;
            const char c = m_src[m_pos];
            if (c == '\'' || c == '"') {
                size_t i = m_pos + 1;
                while (i < m_src.size() && m_src[i] != c) {
                    if (m_src[i] == '\\')
                        ++i;
                    ++i;
                }
                if (i >= m_src.size())
                    fail(m_line, "a string is never closed");
                const std::string raw = m_src.substr(m_pos + 1, i - m_pos - 1);
                t.kind = Token::Kind::String;
                t.text = unescape(raw, m_line);
                advanceLines(m_pos, i + 1);
                m_pos = i + 1;
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                const bool afterDot = m_pos > 0 && m_src[m_pos - 1] == '.';
                size_t i = m_pos;
                auto digits = [&] {
                    while (i < m_src.size() &&
                           (std::isdigit(static_cast<unsigned char>(m_src[i])) || m_src[i] == '_'))
                        ++i;
                };
                digits();
                bool isFloat = false;
                if (!afterDot && i + 1 < m_src.size() && m_src[i] == '.' &&
                    std::isdigit(static_cast<unsigned char>(m_src[i + 1]))) {
                    ++i;
                    digits();
                    isFloat = true;
                }
                if (!afterDot && i < m_src.size() && (m_src[i] == 'e' || m_src[i] == 'E')) {
                    size_t j = i + 1;
                    if (j < m_src.size() && (m_src[j] == '+' || m_src[j] == '-'))
                        ++j;
                    if (j < m_src.size() && std::isdigit(static_cast<unsigned char>(m_src[j]))) {
                        i = j;
                        digits();
                        isFloat = true;
                    }
                }
                t.kind = isFloat ? Token::Kind::Float : Token::Kind::Int;
                t.text = m_src.substr(m_pos, i - m_pos);
                t.text.erase(std::remove(t.text.begin(), t.text.end(), '_'), t.text.end());
                m_pos = i;
            } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t i = m_pos;
                while (i < m_src.size() &&
                       (std::isalnum(static_cast<unsigned char>(m_src[i])) || m_src[i] == '_'))
                    ++i;
                t.kind = Token::Kind::Name;
                t.text = m_src.substr(m_pos, i - m_pos);
                m_pos = i;
            } else {
                static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                                  "]",  "{",  "}",  ",",  ".",  ":",  "|"};
                const char* found = nullptr;
                for (const char* op : ops)
                    if (m_src.compare(m_pos, std::strlen(op), op) == 0) {
                        found = op;
                        break;
                    }
                if (!found)
                    fail(m_line, std::string("unexpected character '") + c + "' in a tag");
                t.kind = Token::Kind::Op;
                t.text = found;
                m_pos += t.text.size();
                if (t.text == "(" || t.text == "[" || t.text == "{") {
                    if (balance.size() > static_cast<size_t>(kMaxNesting))
                        fail(m_line, "brackets nested too deeply");
                    balance.push_back(t.text[0]);
                } else if (t.text == ")" || t.text == "]" || t.text == "}") {
                    const char open = t.text == ")" ? '(' : t.text == "]" ? '[' : '{';
                    if (balance.empty() || balance.back() != open)
                        fail(m_line, "unexpected '" + t.text + "'");
                    balance.pop_back();
                }
            }
            p.tokens.push_back(std::move(t));
        }
    }

    std::string m_src;
    size_t m_pos = 0;
    int m_line = 1;
};

} // namespace

std::vector<Piece> pieces(const std::string& src) {
    return Lexer(src).run();
}

} // namespace sparqlab::text::jinja::lex
