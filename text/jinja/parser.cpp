// The parser (ast.h): Jinja2's operator precedence and the statements chat templates use, over
// the lexer's pieces (lexer.h); the template's one trailing newline dropped as transformers'
// environment does.

#include "lexer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace sparqlab::text::jinja {

namespace {

using lex::fail;
using lex::kMaxNesting;
using lex::Piece;
using lex::Token;

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
            if (curIsName("recursive")) {
                ++m_tok;
                s->recursive = true;
            }
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
                // Python's float(): a subnormal, 0 or inf where the decimal is out of range
                n->value = t.kind == Token::Kind::Int
                               ? Value::integer(std::stoll(t.text))
                               : Value::number(std::strtod(t.text.c_str(), nullptr));
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
    Parser parser(lex::pieces(src));
    p->body = parser.parseTemplate();
    return p;
}

} // namespace sparqlab::text::jinja
