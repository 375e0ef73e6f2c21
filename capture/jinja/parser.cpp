// The lexer and parser (ast.h): Jinja2's syntax and whitespace control as transformers sets its
// environment up (trim_blocks, lstrip_blocks, the template's one trailing newline dropped), its
// operator precedence, and the statements chat templates use.

#include "ast.h"

#include <algorithm>
#include <cstring>

namespace sparqlab::capture::jinja {

namespace {

/// Nesting a template may reach (parentheses, blocks): deeper is refused, not a stack overflow.
constexpr int kMaxNesting = 200;

[[noreturn]] void fail(int line, const std::string& what) {
    throw EvalError("line " + std::to_string(line) + ": " + what);
}

// --- lexer ------------------------------------------------------------------------------------

struct Token {
    enum class Kind { Name, String, Int, Float, Op, End };
    Kind kind = Kind::End;
    std::string text; ///< the name, the operator, the string's value, the number as written
    int line = 0;
};

/// A piece of the template: text, or the tokens of a {{ }} or {% %} tag.
struct Piece {
    enum class Kind { Text, Var, Block };
    Kind kind;
    std::string text;
    std::vector<Token> tokens;
    int line = 0;
};

bool isSpace(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void appendUtf8(std::string& out, uint32_t cp) {
    std::u32string u(1, static_cast<char32_t>(cp));
    out += toUtf8(u);
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
                const size_t k = text.find_first_not_of(" \t\n\r\f\v");
                text = k == std::string::npos ? std::string() : text.substr(k);
                stripNext = false;
            }
            if (tag >= m_src.size()) {
                if (!text.empty())
                    out.push_back({Piece::Kind::Text, text, {}, textLine});
                break;
            }
            const char kind = m_src[tag + 1]; // '{', '%' or '#'
            const char sign = tag + 2 < m_src.size() ? m_src[tag + 2] : 0;
            if (sign == '-') {
                while (!text.empty() && isSpace(text.back()))
                    text.pop_back();
            } else if (kind != '{' && sign != '+') {
                // lstrip_blocks: spaces and tabs from the line's start up to a block or comment.
                const size_t nl = text.rfind('\n');
                const size_t from = nl == std::string::npos ? 0 : nl + 1;
                if ((nl != std::string::npos || lineStarting) &&
                    text.find_first_not_of(" \t", from) == std::string::npos)
                    text.erase(from);
            }
            if (!text.empty())
                out.push_back({Piece::Kind::Text, text, {}, textLine});
            m_pos = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            lineStarting = false;
            if (kind == '#') {
                const size_t end = m_src.find("#}", m_pos);
                if (end == std::string::npos)
                    fail(m_line, "a comment {# is never closed");
                const bool minus = end > m_pos && m_src[end - 1] == '-';
                advanceLines(m_pos, end + 2);
                m_pos = end + 2;
                closeTag(minus, true, stripNext, lineStarting);
                continue;
            }
            Piece p{kind == '{' ? Piece::Kind::Var : Piece::Kind::Block, {}, {}, m_line};
            bool minus = false, plus = false;
            tokens(p, kind == '{' ? "}}" : "%}", minus, plus);
            if (p.kind == Piece::Kind::Block && !p.tokens.empty() &&
                p.tokens[0].kind == Token::Kind::Name && p.tokens[0].text == "raw") {
                if (p.tokens.size() != 1)
                    fail(p.line, "{% raw %} takes nothing after it");
                closeTag(minus, true, stripNext, lineStarting);
                out.push_back(rawBlock(stripNext));
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
            size_t k = m_pos;
            while (k < m_src.size() && isSpace(m_src[k]))
                ++k;
            lineStarting = k > m_pos && m_src[k - 1] == '\n';
            return;
        }
        if (block && m_pos < m_src.size() && m_src[m_pos] == '\n') {
            ++m_pos;
            ++m_line;
            lineStarting = true;
        }
    }

    /// {% raw %}…{% endraw %}: the text as it is.
    Piece rawBlock(bool stripFirst) {
        const int line = m_line;
        for (size_t i = m_pos; i + 1 < m_src.size(); ++i) {
            if (m_src[i] != '{' || m_src[i + 1] != '%')
                continue;
            size_t k = i + 2;
            const bool minus = k < m_src.size() && m_src[k] == '-';
            if (minus || (k < m_src.size() && m_src[k] == '+'))
                ++k;
            while (k < m_src.size() && isSpace(m_src[k]))
                ++k;
            if (m_src.compare(k, 6, "endraw") != 0)
                continue;
            k += 6;
            while (k < m_src.size() && isSpace(m_src[k]))
                ++k;
            const bool endMinus = k < m_src.size() && m_src[k] == '-';
            if (endMinus)
                ++k;
            if (m_src.compare(k, 2, "%}") != 0)
                continue;
            std::string text = m_src.substr(m_pos, i - m_pos);
            if (stripFirst) {
                const size_t f = text.find_first_not_of(" \t\n\r\f\v");
                text = f == std::string::npos ? std::string() : text.substr(f);
            }
            if (minus)
                while (!text.empty() && isSpace(text.back()))
                    text.pop_back();
            advanceLines(m_pos, k + 2);
            m_pos = k + 2;
            bool strip = false, starting = false;
            closeTag(endMinus, true, strip, starting);
            if (strip) {
                while (m_pos < m_src.size() && isSpace(m_src[m_pos])) {
                    if (m_src[m_pos] == '\n')
                        ++m_line;
                    ++m_pos;
                }
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
            while (m_pos < m_src.size() && isSpace(m_src[m_pos])) {
                if (m_src[m_pos] == '\n')
                    ++m_line;
                ++m_pos;
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

// --- parser -----------------------------------------------------------------------------------

class Parser {
public:
    explicit Parser(std::vector<Piece> pieces) : m_pieces(std::move(pieces)) {}

    Body parseTemplate() {
        std::string end;
        Body b = parseBody({}, end);
        return b;
    }

private:
    // Statement level.

    /// Pieces up to a block tag whose first name is in `ends` (consumed; its name in `end`).
    Body parseBody(const std::vector<std::string>& ends, std::string& end) {
        if (++m_depth > kMaxNesting)
            fail(m_pieces.empty() ? 1 : m_pieces[std::min(m_at, m_pieces.size() - 1)].line,
                 "blocks nested too deeply");
        // The tag that opened this body (if, elif, else, for, …) is the piece before it.
        const int openedLine = m_at > 0 ? m_pieces[m_at - 1].line : 1;
        Body body;
        while (m_at < m_pieces.size()) {
            Piece& p = m_pieces[m_at];
            if (p.kind == Piece::Kind::Text) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::Text;
                s->line = p.line;
                s->text = std::move(p.text);
                body.push_back(std::move(s));
                ++m_at;
                continue;
            }
            beginTag(p);
            if (p.kind == Piece::Kind::Var) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::Output;
                s->line = p.line;
                s->expr = parseTupleOrExpression();
                expectEnd();
                body.push_back(std::move(s));
                ++m_at;
                continue;
            }
            const Token& head = cur();
            if (head.kind != Token::Kind::Name)
                fail(p.line, "a block tag must start with a name");
            const std::string name = head.text;
            if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
                end = name;
                --m_depth;
                return body; // the caller reads the rest of the tag
            }
            ++m_tok;
            ++m_at;
            body.push_back(statement(name, p.line));
        }
        if (!ends.empty())
            fail(openedLine, "this block is never closed (no {% " + ends.back() + " %} follows)");
        --m_depth;
        return body;
    }

    StmtPtr statement(const std::string& name, int line) {
        auto s = std::make_unique<Stmt>();
        s->line = line;
        if (name == "if") {
            s->kind = Stmt::Kind::If;
            s->conds.push_back(parseTupleOrExpression());
            expectEnd();
            while (true) {
                std::string end;
                s->bodies.push_back(parseBody({"elif", "else", "endif"}, end));
                ++m_tok;
                if (end == "elif") {
                    s->conds.push_back(parseTupleOrExpression());
                    expectEnd();
                    ++m_at;
                } else if (end == "else") {
                    expectEnd();
                    ++m_at;
                    s->elseBody = parseBody({"endif"}, end);
                    ++m_tok;
                    expectEnd();
                    ++m_at;
                    break;
                } else {
                    expectEnd();
                    ++m_at;
                    break;
                }
            }
        } else if (name == "for") {
            s->kind = Stmt::Kind::For;
            s->targets = parseTargets();
            expectName("in");
            s->expr = parseTupleOrExpression(/*noCondExpr=*/true);
            if (curIsName("if")) {
                ++m_tok;
                s->cond = parseExpression();
            }
            if (curIsName("recursive"))
                fail(line, "recursive for loops are not supported");
            expectEnd();
            std::string end;
            s->body = parseBody({"else", "endfor"}, end);
            ++m_tok;
            expectEnd();
            ++m_at;
            if (end == "else") {
                s->elseBody = parseBody({"endfor"}, end);
                ++m_tok;
                expectEnd();
                ++m_at;
            }
        } else if (name == "set") {
            std::vector<std::string> targets = parseTargets();
            if (targets.size() == 1 && curIsOp(".")) { // ns.attr = …
                ++m_tok;
                if (cur().kind != Token::Kind::Name)
                    fail(line, "expected an attribute name after '.' in set");
                s->attr = cur().text;
                ++m_tok;
            }
            if (curIsOp("=")) {
                ++m_tok;
                s->kind = Stmt::Kind::Set;
                s->targets = std::move(targets);
                s->expr = parseTupleOrExpression();
                expectEnd();
            } else {
                if (targets.size() != 1 || !s->attr.empty())
                    fail(line, "a block set names one variable");
                s->kind = Stmt::Kind::SetBlock;
                s->name = targets[0];
                while (curIsOp("|")) {
                    ++m_tok;
                    s->filters.push_back(parseFilterCall(nullptr));
                }
                expectEnd();
                std::string end;
                s->body = parseBody({"endset"}, end);
                ++m_tok;
                expectEnd();
                ++m_at;
            }
        } else if (name == "macro") {
            s->kind = Stmt::Kind::Macro;
            if (cur().kind != Token::Kind::Name)
                fail(line, "expected the macro's name");
            s->name = cur().text;
            ++m_tok;
            s->params = parseParams(true);
            expectEnd();
            std::string end;
            s->body = parseBody({"endmacro"}, end);
            ++m_tok;
            expectEnd();
            ++m_at;
        } else if (name == "call") {
            s->kind = Stmt::Kind::CallBlock;
            if (curIsOp("("))
                s->params = parseParams(false);
            s->expr = parseExpression();
            if (s->expr->kind != Expr::Kind::Call)
                fail(line, "{% call %} needs a macro call");
            expectEnd();
            std::string end;
            s->body = parseBody({"endcall"}, end);
            ++m_tok;
            expectEnd();
            ++m_at;
        } else if (name == "filter") {
            s->kind = Stmt::Kind::FilterBlock;
            s->filters.push_back(parseFilterCall(nullptr));
            while (curIsOp("|")) {
                ++m_tok;
                s->filters.push_back(parseFilterCall(nullptr));
            }
            expectEnd();
            std::string end;
            s->body = parseBody({"endfilter"}, end);
            ++m_tok;
            expectEnd();
            ++m_at;
        } else if (name == "break" || name == "continue") {
            s->kind = name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
            expectEnd();
        } else if (name == "generation") { // transformers' AssistantTracker: the body as is
            s->kind = Stmt::Kind::Scope;
            expectEnd();
            std::string end;
            s->body = parseBody({"endgeneration"}, end);
            ++m_tok;
            expectEnd();
            ++m_at;
        } else if (name == "include" || name == "import" || name == "from" || name == "extends" ||
                   name == "block" || name == "with" || name == "do" || name == "autoescape" ||
                   name == "trans") {
            fail(line, "the '" + name + "' tag is not supported in chat templates");
        } else {
            fail(line, "unknown tag '" + name + "'");
        }
        return s;
    }

    /// A for's or set's targets: one name, or names separated by commas (parentheses
    /// allowed).
    std::vector<std::string> parseTargets() {
        std::vector<std::string> names;
        const bool paren = curIsOp("(");
        if (paren)
            ++m_tok;
        while (true) {
            if (cur().kind != Token::Kind::Name)
                fail(cur().line, "expected a variable name");
            names.push_back(cur().text);
            ++m_tok;
            if (!curIsOp(","))
                break;
            ++m_tok;
            if (!paren && (curIsName("in") || curIsOp("=")))
                break;
        }
        if (paren)
            expectOp(")");
        return names;
    }

    /// A macro's parameters "(a, b=1)" (`required`: the parentheses), or a call block's.
    std::vector<Param> parseParams(bool required) {
        std::vector<Param> params;
        if (!curIsOp("(")) {
            if (required)
                fail(cur().line, "expected '(' after the macro's name");
            return params;
        }
        ++m_tok;
        while (!curIsOp(")")) {
            if (cur().kind != Token::Kind::Name)
                fail(cur().line, "expected a parameter name");
            Param p;
            p.name = cur().text;
            ++m_tok;
            if (curIsOp("=")) {
                ++m_tok;
                p.defaultValue = parseExpression();
            }
            params.push_back(std::move(p));
            if (!curIsOp(","))
                break;
            ++m_tok;
        }
        expectOp(")");
        return params;
    }

    // Token helpers.

    void beginTag(Piece& p) {
        m_tokens = &p.tokens;
        m_tok = 0;
        m_line = p.line;
    }
    const Token& cur() const {
        static const Token end{Token::Kind::End, "", 0};
        if (m_tok < m_tokens->size())
            return (*m_tokens)[m_tok];
        const_cast<Token&>(end).line = m_line;
        return end;
    }
    bool curIsOp(const char* op) const { return cur().kind == Token::Kind::Op && cur().text == op; }
    bool curIsName(const char* n) const {
        return cur().kind == Token::Kind::Name && cur().text == n;
    }
    void expectOp(const char* op) {
        if (!curIsOp(op))
            fail(cur().line, std::string("expected '") + op + "'" + found());
        ++m_tok;
    }
    void expectName(const char* n) {
        if (!curIsName(n))
            fail(cur().line, std::string("expected '") + n + "'" + found());
        ++m_tok;
    }
    void expectEnd() {
        if (cur().kind != Token::Kind::End)
            fail(cur().line, "unexpected '" + cur().text + "' at the end of a tag");
    }
    std::string found() const {
        return cur().kind == Token::Kind::End ? " at the end of the tag"
                                              : ", found '" + cur().text + "'";
    }

    // Expressions (Jinja2's precedence: condexpr < or < and < not < compare < + - < ~ <
    // * / // % < ** < unary; filters and tests bind to the unary operand).

    ExprPtr node(Expr::Kind k, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->line = line;
        return e;
    }

    struct Depth {
        Parser& p;
        explicit Depth(Parser& parser) : p(parser) {
            if (++p.m_exprDepth > kMaxNesting)
                fail(p.cur().line, "an expression nested too deeply");
        }
        ~Depth() { --p.m_exprDepth; }
    };

    /// An expression, or several separated by commas: a tuple ({{ a, b }}, set x = 1, 2).
    ExprPtr parseTupleOrExpression(bool noCondExpr = false) {
        const int line = cur().line;
        ExprPtr first = noCondExpr ? parseOr() : parseExpression();
        if (!curIsOp(","))
            return first;
        auto t = node(Expr::Kind::Tuple, line);
        t->items.push_back(std::move(first));
        while (curIsOp(",")) {
            ++m_tok;
            if (cur().kind == Token::Kind::End || curIsName("if"))
                break;
            t->items.push_back(noCondExpr ? parseOr() : parseExpression());
        }
        return t;
    }

    ExprPtr parseExpression() {
        Depth d(*this);
        ExprPtr e = parseOr();
        while (curIsName("if")) {
            const int line = cur().line;
            ++m_tok;
            auto c = node(Expr::Kind::Cond, line);
            c->a = parseOr(); // the condition
            c->b = std::move(e);
            if (curIsName("else")) {
                ++m_tok;
                c->c = parseExpression();
            }
            e = std::move(c);
        }
        return e;
    }

    ExprPtr parseOr() {
        ExprPtr e = parseAnd();
        while (curIsName("or")) {
            auto n = node(Expr::Kind::Or, cur().line);
            ++m_tok;
            n->a = std::move(e);
            n->b = parseAnd();
            e = std::move(n);
        }
        return e;
    }

    ExprPtr parseAnd() {
        ExprPtr e = parseNot();
        while (curIsName("and")) {
            auto n = node(Expr::Kind::And, cur().line);
            ++m_tok;
            n->a = std::move(e);
            n->b = parseNot();
            e = std::move(n);
        }
        return e;
    }

    ExprPtr parseNot() {
        if (curIsName("not")) {
            Depth d(*this);
            auto n = node(Expr::Kind::Not, cur().line);
            ++m_tok;
            n->a = parseNot();
            return n;
        }
        return parseCompare();
    }

    ExprPtr parseCompare() {
        const int line = cur().line;
        ExprPtr first = parseMath1();
        std::vector<std::pair<std::string, ExprPtr>> ops;
        while (true) {
            std::string op;
            if (cur().kind == Token::Kind::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                op = cur().text;
                ++m_tok;
            } else if (curIsName("in")) {
                op = "in";
                ++m_tok;
            } else if (curIsName("not") && m_tok + 1 < m_tokens->size() &&
                       (*m_tokens)[m_tok + 1].kind == Token::Kind::Name &&
                       (*m_tokens)[m_tok + 1].text == "in") {
                op = "not in";
                m_tok += 2;
            } else {
                break;
            }
            ops.emplace_back(op, parseMath1());
        }
        if (ops.empty())
            return first;
        auto c = node(Expr::Kind::Compare, line);
        c->a = std::move(first);
        c->compares = std::move(ops);
        return c;
    }

    ExprPtr binary(ExprPtr l, const std::string& op, ExprPtr r, int line) {
        auto n = node(Expr::Kind::Binary, line);
        n->name = op;
        n->a = std::move(l);
        n->b = std::move(r);
        return n;
    }

    ExprPtr parseMath1() {
        ExprPtr e = parseConcat();
        while (curIsOp("+") || curIsOp("-")) {
            const std::string op = cur().text;
            const int line = cur().line;
            ++m_tok;
            e = binary(std::move(e), op, parseConcat(), line);
        }
        return e;
    }

    ExprPtr parseConcat() {
        ExprPtr e = parseMath2();
        while (curIsOp("~")) {
            const int line = cur().line;
            ++m_tok;
            e = binary(std::move(e), "~", parseMath2(), line);
        }
        return e;
    }

    ExprPtr parseMath2() {
        ExprPtr e = parsePow();
        while (curIsOp("*") || curIsOp("/") || curIsOp("//") || curIsOp("%")) {
            const std::string op = cur().text;
            const int line = cur().line;
            ++m_tok;
            e = binary(std::move(e), op, parsePow(), line);
        }
        return e;
    }

    ExprPtr parsePow() {
        ExprPtr e = parseUnary(true);
        while (curIsOp("**")) {
            const int line = cur().line;
            ++m_tok;
            e = binary(std::move(e), "**", parseUnary(true), line);
        }
        return e;
    }

    ExprPtr parseUnary(bool withFilter) {
        Depth d(*this);
        ExprPtr e;
        if (curIsOp("-") || curIsOp("+")) {
            auto n = node(curIsOp("-") ? Expr::Kind::Neg : Expr::Kind::Pos, cur().line);
            ++m_tok;
            n->a = parseUnary(false);
            e = std::move(n);
        } else {
            e = parsePrimary();
        }
        e = parsePostfix(std::move(e));
        if (withFilter)
            e = parseFilterExpr(std::move(e));
        return e;
    }

    ExprPtr parsePrimary() {
        const Token t = cur();
        switch (t.kind) {
        case Token::Kind::Name: {
            ++m_tok;
            auto n = node(Expr::Kind::Literal, t.line);
            if (t.text == "true" || t.text == "True")
                n->value = Value::boolean(true);
            else if (t.text == "false" || t.text == "False")
                n->value = Value::boolean(false);
            else if (t.text == "none" || t.text == "None")
                n->value = Value::none();
            else {
                n->kind = Expr::Kind::Name;
                n->name = t.text;
            }
            return n;
        }
        case Token::Kind::String: {
            std::string s = t.text;
            ++m_tok;
            while (cur().kind == Token::Kind::String) { // adjacent literals concatenate
                s += cur().text;
                ++m_tok;
            }
            auto n = node(Expr::Kind::Literal, t.line);
            n->value = Value::string(s);
            return n;
        }
        case Token::Kind::Int:
        case Token::Kind::Float: {
            ++m_tok;
            auto n = node(Expr::Kind::Literal, t.line);
            try {
                n->value = t.kind == Token::Kind::Int ? Value::integer(std::stoll(t.text))
                                                      : Value::number(std::stod(t.text));
            } catch (const std::exception&) {
                fail(t.line, "the number " + t.text + " is out of range");
            }
            return n;
        }
        case Token::Kind::Op:
            if (t.text == "(") {
                ++m_tok;
                if (curIsOp(")")) { // ()
                    ++m_tok;
                    return node(Expr::Kind::Tuple, t.line);
                }
                ExprPtr e = parseExpression();
                if (curIsOp(",")) {
                    auto tup = node(Expr::Kind::Tuple, t.line);
                    tup->items.push_back(std::move(e));
                    while (curIsOp(",")) {
                        ++m_tok;
                        if (curIsOp(")"))
                            break;
                        tup->items.push_back(parseExpression());
                    }
                    e = std::move(tup);
                }
                expectOp(")");
                return e;
            }
            if (t.text == "[") {
                ++m_tok;
                auto l = node(Expr::Kind::List, t.line);
                while (!curIsOp("]")) {
                    l->items.push_back(parseExpression());
                    if (!curIsOp(","))
                        break;
                    ++m_tok;
                }
                expectOp("]");
                return l;
            }
            if (t.text == "{") {
                ++m_tok;
                auto d = node(Expr::Kind::DictLit, t.line);
                while (!curIsOp("}")) {
                    d->items.push_back(parseExpression());
                    expectOp(":");
                    d->items.push_back(parseExpression());
                    if (!curIsOp(","))
                        break;
                    ++m_tok;
                }
                expectOp("}");
                return d;
            }
            break;
        default:
            break;
        }
        fail(t.line, t.kind == Token::Kind::End ? "an expression is missing"
                                                : "unexpected '" + t.text + "'");
    }

    ExprPtr parsePostfix(ExprPtr e) {
        while (true) {
            const int line = cur().line;
            if (curIsOp(".")) {
                ++m_tok;
                const Token t = cur();
                if (t.kind == Token::Kind::Name) {
                    auto n = node(Expr::Kind::Attr, line);
                    n->a = std::move(e);
                    n->name = t.text;
                    ++m_tok;
                    e = std::move(n);
                } else if (t.kind == Token::Kind::Int) { // a.0: an item
                    auto n = node(Expr::Kind::Item, line);
                    n->a = std::move(e);
                    n->b = node(Expr::Kind::Literal, line);
                    try {
                        n->b->value = Value::integer(std::stoll(t.text));
                    } catch (const std::exception&) {
                        fail(line, "the index " + t.text + " is out of range");
                    }
                    ++m_tok;
                    e = std::move(n);
                } else {
                    fail(line, "expected an attribute name after '.'");
                }
            } else if (curIsOp("[")) {
                ++m_tok;
                ExprPtr parts[3];
                bool slice = false;
                for (int k = 0; k < 3; ++k) {
                    if (!curIsOp(":") && !curIsOp("]"))
                        parts[k] = parseExpression();
                    if (k < 2 && curIsOp(":")) {
                        slice = true;
                        ++m_tok;
                    } else {
                        break;
                    }
                }
                expectOp("]");
                auto n = node(slice ? Expr::Kind::Slice : Expr::Kind::Item, line);
                n->a = std::move(e);
                if (!slice && !parts[0])
                    fail(line, "an empty subscript []");
                n->b = std::move(parts[0]);
                n->c = std::move(parts[1]);
                if (slice)
                    n->items.push_back(std::move(parts[2])); // the step (may be null)
                e = std::move(n);
            } else if (curIsOp("(")) {
                auto n = node(Expr::Kind::Call, line);
                n->a = std::move(e);
                n->args = parseArgs();
                e = std::move(n);
            } else {
                return e;
            }
        }
    }

    ArgExprs parseArgs() {
        ArgExprs args;
        expectOp("(");
        while (!curIsOp(")")) {
            if (curIsOp("**")) {
                ++m_tok;
                args.dstar = parseExpression();
            } else if (curIsOp("*")) {
                ++m_tok;
                args.star = parseExpression();
            } else if (cur().kind == Token::Kind::Name && m_tok + 1 < m_tokens->size() &&
                       (*m_tokens)[m_tok + 1].kind == Token::Kind::Op &&
                       (*m_tokens)[m_tok + 1].text == "=") {
                const std::string key = cur().text;
                m_tok += 2;
                args.keyword.emplace_back(key, parseExpression());
            } else {
                if (!args.keyword.empty())
                    fail(cur().line, "a positional argument after a keyword argument");
                args.positional.push_back(parseExpression());
            }
            if (!curIsOp(","))
                break;
            ++m_tok;
        }
        expectOp(")");
        return args;
    }

    /// `name(args)` after a '|' (the object `a`, null in filter blocks).
    ExprPtr parseFilterCall(ExprPtr a) {
        const int line = cur().line;
        if (cur().kind != Token::Kind::Name)
            fail(line, "expected a filter name after '|'");
        auto f = node(Expr::Kind::Filter, line);
        f->name = cur().text;
        ++m_tok;
        while (curIsOp(".")) { // dotted filter names
            ++m_tok;
            f->name += "." + cur().text;
            ++m_tok;
        }
        f->a = std::move(a);
        if (curIsOp("("))
            f->args = parseArgs();
        return f;
    }

    ExprPtr parseFilterExpr(ExprPtr e) {
        while (true) {
            if (curIsOp("|")) {
                ++m_tok;
                e = parseFilterCall(std::move(e));
            } else if (curIsName("is")) {
                const int line = cur().line;
                ++m_tok;
                auto t = node(Expr::Kind::Test, line);
                if (curIsName("not")) {
                    t->negated = true;
                    ++m_tok;
                }
                if (cur().kind != Token::Kind::Name)
                    fail(line, "expected a test name after 'is'");
                t->name = cur().text;
                ++m_tok;
                t->a = std::move(e);
                if (curIsOp("(")) {
                    t->args = parseArgs();
                } else if ((cur().kind == Token::Kind::Name || cur().kind == Token::Kind::String ||
                            cur().kind == Token::Kind::Int || cur().kind == Token::Kind::Float ||
                            curIsOp("[") || curIsOp("{")) &&
                           !curIsName("else") && !curIsName("or") && !curIsName("and") &&
                           !curIsName("if") && !curIsName("in") && !curIsName("not")) {
                    // One argument without parentheses: "is divisibleby 3", "is sameas false".
                    t->args.positional.push_back(parsePostfix(parsePrimary()));
                }
                e = std::move(t);
            } else {
                return e;
            }
        }
    }

    std::vector<Piece> m_pieces;
    size_t m_at = 0;
    std::vector<Token>* m_tokens = nullptr;
    size_t m_tok = 0;
    int m_line = 1;
    int m_depth = 0;
    int m_exprDepth = 0;
};

} // namespace

std::unique_ptr<Program> parse(const std::string& source, const std::string& name) {
    // Jinja2 reads templates as text: bytes that are not UTF-8 are refused, with where.
    const size_t bad = invalidUtf8At(source);
    if (bad != std::string::npos)
        fail(1 + static_cast<int>(std::count(
                     source.begin(), source.begin() + static_cast<std::ptrdiff_t>(bad), '\n')),
             "the template is not UTF-8 (byte " + std::to_string(bad) + ")");
    // Jinja2: every newline sequence becomes "\n", and one trailing newline is dropped
    // (keep_trailing_newline=False).
    std::string src;
    src.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            src += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n')
                ++i;
        } else {
            src += source[i];
        }
    }
    if (!src.empty() && src.back() == '\n')
        src.pop_back();
    auto p = std::make_unique<Program>();
    p->name = name;
    Parser parser(Lexer(src).run());
    p->body = parser.parseTemplate();
    return p;
}

} // namespace sparqlab::capture::jinja
