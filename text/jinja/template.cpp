// The engine's entry points (template.h): parse, check the filters and tests it names, render.

#include "template.h"

#include "ast.h"
#include "interpreter.h"

namespace sparqlab::text::jinja {

namespace {

/// Every filter and test a template names must exist (Jinja2 refuses them when compiling).
void checkNames(const Expr& e);
void checkNames(const Body& body);

void checkArgs(const ArgExprs& a) {
    for (const ExprPtr& x : a.positional)
        checkNames(*x);
    for (const auto& [k, x] : a.keyword)
        checkNames(*x);
    if (a.star)
        checkNames(*a.star);
    if (a.dstar)
        checkNames(*a.dstar);
}

void checkNames(const Expr& e) {
    if (e.kind == Expr::Kind::Filter && !hasFilter(e.name))
        throw EvalError("line " + std::to_string(e.line) + ": no filter named '" + e.name + "'");
    if (e.kind == Expr::Kind::Test && !hasTest(e.name))
        throw EvalError("line " + std::to_string(e.line) + ": no test named '" + e.name + "'");
    for (const Expr* x : {e.a.get(), e.b.get(), e.c.get()})
        if (x)
            checkNames(*x);
    for (const ExprPtr& x : e.items)
        if (x)
            checkNames(*x);
    for (const auto& [op, x] : e.compares)
        checkNames(*x);
    checkArgs(e.args);
}

void checkNames(const Body& body) {
    for (const StmtPtr& s : body) {
        for (const Expr* x : {s->expr.get(), s->cond.get()})
            if (x)
                checkNames(*x);
        for (const ExprPtr& x : s->conds)
            checkNames(*x);
        for (const ExprPtr& x : s->filters)
            checkNames(*x);
        for (const Param& p : s->params)
            if (p.defaultValue)
                checkNames(*p.defaultValue);
        for (const Body& b : s->bodies)
            checkNames(b);
        checkNames(s->body);
        checkNames(s->elseBody);
    }
}

} // namespace

Template Template::parse(const std::string& source, const std::string& name) {
    Template t;
    try {
        std::unique_ptr<Program> p = jinja::parse(source, name);
        checkNames(p->body);
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
