// The engine's entry points (template.h): parse, check the filters and tests it names, render.

#include "template.h"

#include "ast.h"
#include "interpreter.h"

namespace sparqlab::text::jinja {

namespace {

/// Every filter and test a template names must exist, as Jinja2 3 compiles them: a name it
/// does not know fails the template, but one inside an `if` (its tests, its bodies) or an inline
/// `… if … else …` fails only when it runs (its compiler's soft frames). A loop's, macro's, call
/// block's, filter block's, set block's and generation block's body is a frame of its own, hard
/// again.
void checkNames(const Expr& e, bool soft);
void checkNames(const Body& body, bool soft);

void checkArgs(const ArgExprs& a, bool soft) {
    for (const ExprPtr& x : a.positional)
        checkNames(*x, soft);
    for (const auto& [k, x] : a.keyword)
        checkNames(*x, soft);
    if (a.star)
        checkNames(*a.star, soft);
    if (a.dstar)
        checkNames(*a.dstar, soft);
}

void checkNames(const Expr& e, bool soft) {
    soft = soft || e.kind == Expr::Kind::Cond;
    if (!soft && e.kind == Expr::Kind::Filter && !hasFilter(e.name))
        throw EvalError("line " + std::to_string(e.line) + ": no filter named '" + e.name + "'");
    if (!soft && e.kind == Expr::Kind::Test && !hasTest(e.name))
        throw EvalError("line " + std::to_string(e.line) + ": no test named '" + e.name + "'");
    for (const Expr* x : {e.a.get(), e.b.get(), e.c.get()})
        if (x)
            checkNames(*x, soft);
    for (const ExprPtr& x : e.items)
        if (x)
            checkNames(*x, soft);
    for (const auto& [op, x] : e.compares)
        checkNames(*x, soft);
    checkArgs(e.args, soft);
}

void checkNames(const Body& body, bool soft) {
    for (const StmtPtr& s : body) {
        const bool own = s->kind == Stmt::Kind::For || s->kind == Stmt::Kind::Macro ||
                         s->kind == Stmt::Kind::CallBlock || s->kind == Stmt::Kind::FilterBlock ||
                         s->kind == Stmt::Kind::SetBlock ||
                         s->kind == Stmt::Kind::Scope; // (a frame of its own: hard; transformers
                                                       // compiles {% generation %} as a call block)
        const bool inIf = soft || s->kind == Stmt::Kind::If;
        if (s->expr)
            checkNames(*s->expr, s->kind == Stmt::Kind::SetBlock ? false : soft);
        if (s->cond)
            checkNames(*s->cond, false); // (a loop's filter: its own frame)
        for (const ExprPtr& x : s->conds)
            checkNames(*x, inIf);
        for (const ExprPtr& x : s->filters)
            checkNames(*x, own ? false : soft);
        for (const Param& p : s->params)
            if (p.defaultValue)
                checkNames(*p.defaultValue, false);
        for (const Body& b : s->bodies)
            checkNames(b, inIf);
        checkNames(s->body, own ? false : inIf);
        checkNames(s->elseBody, s->kind == Stmt::Kind::For ? false : inIf);
    }
}

} // namespace

Template Template::parse(const std::string& source, const std::string& name) {
    Template t;
    try {
        std::unique_ptr<Program> p = jinja::parse(source, name);
        checkNames(p->body, false);
        t.m_program = std::move(p);
    } catch (const EvalError& e) {
        throw TemplateError(name + ": " + e.what());
    }
    return t;
}

const std::string& Template::name() const {
    return m_program->name;
}

std::string Template::render(const nlohmann::ordered_json& context,
                             const RenderOptions& options) const {
    if (!context.is_object())
        throw TemplateError(name() + ": the context must be an object of variables");
    Limits limits;
    limits.maxSteps = options.maxSteps;
    limits.maxOutput = options.maxOutput;
    limits.maxDepth = options.maxDepth;
    try {
        Interpreter in(*m_program, Value::fromJson(context), limits, options.now);
        return in.run();
    } catch (const EvalError& e) {
        throw TemplateError(name() + ": " + e.what());
    }
}

} // namespace sparqlab::text::jinja
