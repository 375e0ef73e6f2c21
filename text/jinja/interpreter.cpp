// The interpreter (interpreter.h): statements, expressions and scopes with Jinja2's semantics.

#include "interpreter.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

namespace sparqlab::text::jinja {

namespace {

/// Python's integer floor division and modulo.
int64_t floorDiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        --q;
    return q;
}
int64_t floorMod(int64_t a, int64_t b) {
    const int64_t r = a % b;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

double toDouble(const Value& v) {
    return v.kind == Value::Kind::Float  ? v.f
           : v.kind == Value::Kind::Bool ? (v.b ? 1.0 : 0.0)
                                         : static_cast<double>(v.i);
}
int64_t toInt(const Value& v) {
    return v.kind == Value::Kind::Bool ? (v.b ? 1 : 0) : v.i;
}

/// Python's slice of n items: the indices start, start + step, … before stop.
std::vector<int64_t> sliceIndices(int64_t n, const Value* start, const Value* stop,
                                  const Value* step, const Interpreter& in) {
    auto bound = [&](const Value* v) -> std::optional<int64_t> {
        if (!v || v->isNone() || v->isUndefined())
            return std::nullopt;
        if (v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool)
            in.fail("slice indices must be integers or None");
        return toInt(*v);
    };
    const int64_t st = bound(step).value_or(1);
    if (st == 0)
        in.fail("slice step cannot be zero");
    auto clamp = [&](std::optional<int64_t> x, int64_t def) {
        if (!x)
            return def;
        int64_t v = *x < 0 ? *x + n : *x;
        if (st > 0)
            return std::clamp<int64_t>(v, 0, n);
        return std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t b = clamp(bound(start), st > 0 ? 0 : n - 1);
    const int64_t e = clamp(bound(stop), st > 0 ? n : -1);
    std::vector<int64_t> idx;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st)
        idx.push_back(k);
    return idx;
}

} // namespace

Interpreter::Interpreter(const Program& program, Value context, Limits limits, std::string now)
    : m_program(program), m_limits(limits), m_now(std::move(now)), m_context(std::move(context)) {
    m_frames.push_back(std::make_shared<Frame>());
    m_base.push_back(0);
    m_globals = globals();
}

[[noreturn]] void Interpreter::fail(const std::string& what) const {
    throw EvalError("line " + std::to_string(m_line) + ": " + what);
}

void Interpreter::step() {
    if (++m_steps > m_limits.maxSteps)
        fail("the template runs too long (more than " + std::to_string(m_limits.maxSteps) +
             " steps)");
}

void Interpreter::checkSize(size_t bytes) {
    if (bytes > m_limits.maxOutput)
        fail("the template makes a value or output of more than " +
             std::to_string(m_limits.maxOutput >> 20) + " MiB");
}

void Interpreter::emit(const std::string& s) {
    m_out += s;
    checkSize(m_out.size());
}

std::string Interpreter::run() {
    exec(m_program.body);
    return std::move(m_out);
}

std::string Interpreter::capture(const Body& body) {
    std::string saved;
    std::swap(saved, m_out);
    const Flow f = exec(body);
    std::swap(saved, m_out);
    if (f != Flow::Normal)
        fail("break or continue outside a loop");
    return saved;
}

Value Interpreter::lookup(const std::string& name) const {
    const size_t base = m_base.back();
    for (size_t k = m_frames.size(); k-- > base;) {
        const auto it = m_frames[k]->find(name);
        if (it != m_frames[k]->end())
            return it->second;
    }
    if (base > 0) { // a macro's body sees the template's top level too
        const auto it = m_frames[0]->find(name);
        if (it != m_frames[0]->end())
            return it->second;
    }
    if (const Value* v = m_context.find(name))
        return *v;
    const auto g = m_globals.find(name);
    if (g != m_globals.end())
        return g->second;
    return Value::undefined(name);
}

void Interpreter::assign(const std::string& name, Value v) {
    (*m_frames.back())[name] = std::move(v);
}

std::vector<Value> Interpreter::iterate(const Value& v) const {
    switch (v.kind) {
    case Value::Kind::Undefined:
        return {};
    case Value::Kind::List:
    case Value::Kind::Tuple:
        return *v.list;
    case Value::Kind::Dict: {
        std::vector<Value> keys;
        for (const auto& [k, x] : *v.dict)
            keys.push_back(keyValue(k));
        return keys;
    }
    case Value::Kind::String: {
        std::vector<Value> chars;
        for (const char32_t c : toUtf32(*v.s))
            chars.push_back(Value::string(toUtf8(c)));
        return chars;
    }
    default:
        fail("'" + v.typeName() + "' object is not iterable");
    }
}

// --- statements ---------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec(const Body& body) {
    for (const StmtPtr& s : body) {
        const Flow f = exec(*s);
        if (f != Flow::Normal)
            return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
    step();
    m_line = s.line;
    switch (s.kind) {
    case Stmt::Kind::Text:
        emit(s.text);
        return Flow::Normal;
    case Stmt::Kind::Output:
        emit(toStr(eval(*s.expr)));
        return Flow::Normal;
    case Stmt::Kind::If:
        for (size_t k = 0; k < s.conds.size(); ++k) {
            m_line = s.line;
            if (eval(*s.conds[k]).truthy())
                return exec(s.bodies[k]);
        }
        return exec(s.elseBody);
    case Stmt::Kind::For:
        return execFor(s, eval(*s.expr), 1);
    case Stmt::Kind::Set: {
        Value v = eval(*s.expr);
        if (!s.attr.empty()) { // namespace attribute
            const Value ns = lookup(s.targets[0]);
            if (ns.kind != Value::Kind::Namespace)
                fail("cannot assign attribute '" + s.attr + "' of '" + s.targets[0] +
                     "': it is not a namespace");
            if (v.holdsNamespace) // no namespace reaches itself: repr and tojson end
                fail("a namespace cannot hold a namespace (" + s.targets[0] + "." + s.attr + ")");
            setEntry(*ns.ns, s.attr, std::move(v));
            return Flow::Normal;
        }
        if (s.targets.size() == 1) {
            assign(s.targets[0], std::move(v));
            return Flow::Normal;
        }
        const std::vector<Value> parts = iterate(v);
        if (parts.size() != s.targets.size())
            fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
                 std::to_string(s.targets.size()) + " names");
        for (size_t t = 0; t < parts.size(); ++t)
            assign(s.targets[t], parts[t]);
        return Flow::Normal;
    }
    case Stmt::Kind::SetBlock: {
        Value v = Value::string(capture(s.body));
        for (const ExprPtr& f : s.filters) {
            Args a = evalArgs(f->args);
            v = applyFilter(f->name, v, a);
        }
        assign(s.name, std::move(v));
        return Flow::Normal;
    }
    case Stmt::Kind::Macro:
        assign(s.name, makeMacro(s));
        return Flow::Normal;
    case Stmt::Kind::CallBlock: {
        // The body becomes `caller`, a macro the called one may invoke.
        const Value caller = makeMacro(s);
        const Expr& call = *s.expr;
        const Value fn = eval(*call.a);
        Args a = evalArgs(call.args);
        a.keyword.emplace_back("caller", caller);
        emit(toStr(this->call(fn, a)));
        return Flow::Normal;
    }
    case Stmt::Kind::FilterBlock: {
        Value v = Value::string(capture(s.body));
        for (const ExprPtr& f : s.filters) {
            Args a = evalArgs(f->args);
            v = applyFilter(f->name, v, a);
        }
        emit(toStr(v));
        return Flow::Normal;
    }
    case Stmt::Kind::Break:
        return Flow::Break;
    case Stmt::Kind::Continue:
        return Flow::Continue;
    case Stmt::Kind::Scope:
        return exec(s.body);
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::execFor(const Stmt& s, const Value& seq, int64_t depth) {
    std::vector<Value> items = iterate(seq);
    m_frames.push_back(std::make_shared<Frame>());
    if (s.cond) { // the loop's filter runs before the loop: loop.length counts what passes
        std::vector<Value> kept;
        for (const Value& item : items) {
            step();
            if (s.targets.size() == 1)
                (*m_frames.back())[s.targets[0]] = item;
            else {
                const std::vector<Value> parts = iterate(item);
                for (size_t t = 0; t < s.targets.size() && t < parts.size(); ++t)
                    (*m_frames.back())[s.targets[t]] = parts[t];
            }
            if (eval(*s.cond).truthy())
                kept.push_back(item);
        }
        items = std::move(kept);
        m_frames.back()->clear();
    }
    const int64_t n = static_cast<int64_t>(items.size());
    bool ran = false;
    // loop(items): Jinja2's LoopContext is callable. A recursive loop renders itself over items,
    // one deeper, in the scope around the for statement (not the calling pass's: what a pass
    // set is not seen below it), and returns what it rendered; any other loop refuses. That
    // scope is held as a macro holds its own (weakly: a frame holds the loop), so a loop kept
    // and called elsewhere, even after it ended, renders in it, as Jinja2's does.
    std::vector<std::weak_ptr<Frame>> scope(m_frames.begin(), m_frames.end() - 1);
    const size_t base = m_base.back();
    const auto recurse = std::make_shared<const Function>(
        [&s, depth, scope, base](Interpreter& in, Args& a) -> Value {
            if (!s.recursive)
                in.fail("The loop must have the 'recursive' marker to be called recursively.");
            if (a.positional.size() != 1 || !a.keyword.empty())
                in.fail("loop() takes the items to loop over, one argument");
            if (in.m_depth + 1 > in.m_limits.maxDepth)
                in.fail("a recursive loop goes more than " + std::to_string(in.m_limits.maxDepth) +
                        " deep");
            ++in.m_depth;
            std::vector<std::shared_ptr<Frame>> caller;
            std::swap(caller, in.m_frames);
            for (const std::weak_ptr<Frame>& w : scope) {
                std::shared_ptr<Frame> f = w.lock();
                in.m_frames.push_back(f ? std::move(f) : std::make_shared<Frame>());
            }
            in.m_base.push_back(base); // (called from a macro too: the loop's scope, not its)
            const int line = in.m_line;
            std::string out;
            std::swap(out, in.m_out);
            const auto leave = [&] {
                std::swap(out, in.m_out);
                in.m_base.pop_back();
                in.m_frames = std::move(caller);
                --in.m_depth;
                in.m_line = line;
            };
            try {
                in.execFor(s, a.positional[0], depth + 1);
            } catch (...) {
                leave();
                throw;
            }
            leave();
            return Value::string(std::move(out));
        });
    // loop.changed's memory: the arguments of its last call in this loop.
    const auto lastChanged = std::make_shared<std::optional<List>>();
    for (int64_t k = 0; k < n; ++k) {
        step();
        // Each pass starts from the scope around the loop, as Jinja2's do: what a `set` in
        // the body assigned is gone at the next item (a counter needs a namespace).
        if (k > 0)
            m_frames.back() = std::make_shared<Frame>();
        Frame& frame = *m_frames.back();
        const Value& item = items[static_cast<size_t>(k)];
        if (s.targets.size() == 1) {
            frame[s.targets[0]] = item;
        } else {
            const std::vector<Value> parts = iterate(item);
            if (parts.size() != s.targets.size())
                fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
                     std::to_string(s.targets.size()) + " names");
            for (size_t t = 0; t < parts.size(); ++t)
                frame[s.targets[t]] = parts[t];
        }
        Dict loop{
            {"index", Value::integer(k + 1)},
            {"index0", Value::integer(k)},
            {"revindex", Value::integer(n - k)},
            {"revindex0", Value::integer(n - k - 1)},
            {"first", Value::boolean(k == 0)},
            {"last", Value::boolean(k == n - 1)},
            {"length", Value::integer(n)},
            {"depth", Value::integer(depth)},
            {"depth0", Value::integer(depth - 1)},
            {"previtem",
             k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("loop.previtem")},
            {"nextitem",
             k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("loop.nextitem")},
            {"cycle",
             Value::function("loop.cycle",
                             [k](Interpreter& in, Args& a) {
                                 if (a.positional.empty())
                                     in.fail("loop.cycle needs at least one argument");
                                 return a.positional[static_cast<size_t>(k) % a.positional.size()];
                             })},
            {"changed", Value::function("loop.changed", [lastChanged](Interpreter&, Args& a) {
                 const List& now = a.positional;
                 const bool same =
                     lastChanged->has_value() && (*lastChanged)->size() == now.size() &&
                     std::equal(now.begin(), now.end(), (*lastChanged)->begin(),
                                [](const Value& x, const Value& y) { return equals(x, y); });
                 if (!same)
                     *lastChanged = now;
                 return Value::boolean(!same);
             })}};
        Value loopValue = Value::makeDict(std::move(loop));
        loopValue.call = recurse;
        frame["loop"] = std::move(loopValue);
        const Flow f = exec(s.body);
        if (f == Flow::Normal) // Jinja2 marks the loop as run at the end of a body only
            ran = true;
        if (f == Flow::Break)
            break;
    }
    m_frames.pop_back();
    if (ran) // (else: no body ran to its end, none at all or each left by break/continue)
        return Flow::Normal;
    m_frames.push_back(std::make_shared<Frame>()); // (the else body is a scope of its own)
    const Flow f = exec(s.elseBody);
    m_frames.pop_back();
    return f;
}

Value Interpreter::makeMacro(const Stmt& s) {
    const Stmt* def = &s;
    // The frames of the scope it is written in, below the top level (which every macro reads):
    // a loop's, a caller's body's enclosing loop's, another macro's arguments. Jinja2's macros
    // close over their scope and read it when called, their own name in it (recursion), and a
    // call block's body is in the caller's. Held weakly, as the frame holds the macro: one
    // called after its frame ended (kept in a namespace) finds that frame empty.
    std::vector<std::weak_ptr<Frame>> scope;
    for (size_t k = std::max<size_t>(m_base.back(), 1); k < m_frames.size(); ++k)
        scope.push_back(m_frames[k]);
    return Value::function(
        s.name.empty() ? "caller" : s.name, [def, scope](Interpreter& in, Args& a) {
            if (++in.m_depth > in.m_limits.maxDepth)
                in.fail("macros call one another more than " +
                        std::to_string(in.m_limits.maxDepth) + " deep");
            auto frame = std::make_shared<Frame>();
            size_t next = 0;
            for (const Param& p : def->params) {
                auto kw = std::find_if(a.keyword.begin(), a.keyword.end(),
                                       [&](const auto& e) { return e.first == p.name; });
                if (kw != a.keyword.end()) {
                    (*frame)[p.name] = kw->second;
                    a.keyword.erase(kw);
                } else if (next < a.positional.size()) {
                    (*frame)[p.name] = a.positional[next++];
                } else {
                    (*frame)[p.name] = Value::undefined(p.name);
                }
            }
            List varargs(a.positional.begin() +
                             static_cast<std::ptrdiff_t>(std::min(next, a.positional.size())),
                         a.positional.end());
            Dict kwargs;
            Value caller = Value::undefined("caller");
            for (auto& [k, v] : a.keyword) {
                if (k == "caller")
                    caller = v;
                else
                    kwargs.emplace_back(k, v);
            }
            (*frame)["varargs"] = Value::makeTuple(std::move(varargs)); // (Python prints (2,))
            (*frame)["kwargs"] = Value::makeDict(std::move(kwargs));
            if (!caller.isUndefined())
                (*frame)["caller"] = caller;
            const int line = in.m_line;
            const size_t outer = in.m_frames.size();
            for (const std::weak_ptr<Frame>& w : scope) {
                std::shared_ptr<Frame> f = w.lock();
                in.m_frames.push_back(f ? std::move(f) : std::make_shared<Frame>());
            }
            in.m_frames.push_back(std::move(frame));
            in.m_base.push_back(outer);
            const auto leave = [&in, outer] {
                in.m_base.pop_back();
                in.m_frames.resize(outer);
                --in.m_depth;
            };
            std::string out;
            try {
                // Defaults are evaluated at the call, in the macro's scope.
                Frame& own = *in.m_frames.back();
                for (const Param& p : def->params)
                    if (own[p.name].isUndefined() && p.defaultValue)
                        own[p.name] = in.eval(*p.defaultValue);
                out = in.capture(def->body);
            } catch (...) {
                leave();
                throw;
            }
            leave();
            in.m_line = line;
            return Value::string(std::move(out));
        });
}

// --- expressions --------------------------------------------------------------------------------

Args Interpreter::evalArgs(const ArgExprs& a) {
    Args out;
    for (const ExprPtr& e : a.positional)
        out.positional.push_back(eval(*e));
    if (a.star)
        for (const Value& v : iterate(eval(*a.star)))
            out.positional.push_back(v);
    for (const auto& [k, e] : a.keyword)
        out.keyword.emplace_back(k, eval(*e));
    if (a.dstar) {
        const Value d = eval(*a.dstar);
        if (!d.isMapping())
            fail("** needs a mapping");
        for (const auto& [k, v] : d.entries()) {
            const Value name = keyValue(k);
            if (!name.isString())
                fail("keywords must be strings");
            out.keyword.emplace_back(*name.s, v);
        }
    }
    return out;
}

void Interpreter::failIfUndefined(const Value& v, const std::string& reading) const {
    if (v.isUndefined())
        fail("'" + (v.undefinedName.empty() ? std::string("value") : v.undefinedName) +
             "' is undefined" + (reading.empty() ? std::string() : " (reading " + reading + ")"));
}

Value Interpreter::call(const Value& fn, Args& args) {
    step();
    failIfUndefined(fn);
    if (!fn.call) // (a callable, or a for loop's `loop`)
        fail("'" + fn.typeName() + "' object is not callable");
    return (*fn.call)(*this, args);
}

Value Interpreter::applyFilter(const std::string& name, const Value& v, Args& args) {
    step();
    return runFilter(*this, name, v, args);
}

bool Interpreter::applyTest(const std::string& name, const Value& v, Args& args) {
    step();
    return runTest(*this, name, v, args);
}

Value Interpreter::getAttr(const Value& obj, const std::string& name) {
    if (obj.isUndefined())
        failIfUndefined(obj, "." + name);
    // Jinja2 reads `.name` with Python's getattr first, so a dict's own attributes win over its
    // keys (`schema.items` is the method even where the dict has an "items" key); a namespace
    // has none.
    static const std::array<std::string_view, 11> kDictAttributes = {
        "clear", "copy",    "fromkeys",   "get",    "items", "keys",
        "pop",   "popitem", "setdefault", "update", "values"};
    const bool dictAttribute =
        obj.kind == Value::Kind::Dict &&
        std::find(kDictAttributes.begin(), kDictAttributes.end(), name) != kDictAttributes.end();
    if (obj.isMapping() && !dictAttribute)
        if (const Value* v = obj.find(name))
            return *v;
    if (obj.grouped && (name == "grouper" || name == "list"))
        return (*obj.list)[name == "grouper" ? 0 : 1];
    Value m = method(*this, obj, name);
    if (!m.isUndefined())
        return m;
    return Value::undefined(name);
}

Value Interpreter::getItem(const Value& obj, const Value& key) {
    if (obj.isUndefined())
        failIfUndefined(obj, "[" + toRepr(key) + "]");
    if ((obj.isSequence() || obj.isString()) &&
        (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool)) {
        int64_t i = toInt(key);
        if (obj.isString()) {
            const std::u32string u = toUtf32(*obj.s);
            const int64_t n = static_cast<int64_t>(u.size());
            if (i < 0)
                i += n;
            if (i < 0 || i >= n)
                return Value::undefined("[" + std::to_string(toInt(key)) + "]");
            return Value::string(toUtf8(u[static_cast<size_t>(i)]));
        }
        const int64_t n = static_cast<int64_t>(obj.list->size());
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            return Value::undefined("[" + std::to_string(toInt(key)) + "]");
        return (*obj.list)[static_cast<size_t>(i)];
    }
    if (key.isString()) {
        if (obj.isMapping())
            if (const Value* v = obj.find(*key.s))
                return *v;
        return getAttr(obj, *key.s);
    }
    if (std::string name; obj.isMapping() && dictKey(key, name))
        if (const Value* v = obj.findStored(name))
            return *v;
    return Value::undefined("[" + toRepr(key) + "]");
}

Value Interpreter::eval(const Expr& e) {
    step();
    switch (e.kind) {
    case Expr::Kind::Literal:
        return e.value;
    case Expr::Kind::Name:
        return lookup(e.name);
    case Expr::Kind::Attr:
        return getAttr(eval(*e.a), e.name);
    case Expr::Kind::Item:
        return getItem(eval(*e.a), eval(*e.b));
    case Expr::Kind::Slice: {
        const Value obj = eval(*e.a);
        const Value start = e.b ? eval(*e.b) : Value::none();
        const Value stop = e.c ? eval(*e.c) : Value::none();
        const Value stepV = e.items[0] ? eval(*e.items[0]) : Value::none();
        if (obj.isString()) {
            const std::u32string u = toUtf32(*obj.s);
            std::u32string out;
            for (int64_t k :
                 sliceIndices(static_cast<int64_t>(u.size()), &start, &stop, &stepV, *this))
                out.push_back(u[static_cast<size_t>(k)]);
            return Value::string(toUtf8(out));
        }
        if (obj.isSequence()) {
            List out;
            for (int64_t k :
                 sliceIndices(static_cast<int64_t>(obj.list->size()), &start, &stop, &stepV, *this))
                out.push_back((*obj.list)[static_cast<size_t>(k)]);
            return obj.kind == Value::Kind::Tuple ? Value::makeTuple(std::move(out))
                                                  : Value::makeList(std::move(out));
        }
        if (obj.isUndefined())
            fail("'" + obj.undefinedName + "' is undefined (slicing it)");
        return Value::undefined("slice");
    }
    case Expr::Kind::Call: {
        const Value fn = eval(*e.a);
        Args a = evalArgs(e.args);
        return call(fn, a);
    }
    case Expr::Kind::Filter: {
        const Value v = eval(*e.a);
        Args a = evalArgs(e.args);
        return applyFilter(e.name, v, a);
    }
    case Expr::Kind::Test: {
        // `x is defined` must not evaluate x into an error.
        const Value v = eval(*e.a);
        Args a = evalArgs(e.args);
        const bool r = applyTest(e.name, v, a);
        return Value::boolean(e.negated ? !r : r);
    }
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: {
        const Value v = eval(*e.a);
        if (!v.isNumber())
            fail("bad operand type for unary " +
                 std::string(e.kind == Expr::Kind::Neg ? "-" : "+") + ": '" + v.typeName() + "'");
        if (e.kind == Expr::Kind::Pos)
            return v.kind == Value::Kind::Bool ? Value::integer(toInt(v)) : v;
        if (v.kind == Value::Kind::Float)
            return Value::number(-v.f);
        if (toInt(v) == INT64_MIN)
            fail("integer overflow");
        return Value::integer(-toInt(v));
    }
    case Expr::Kind::Not:
        return Value::boolean(!eval(*e.a).truthy());
    case Expr::Kind::And: {
        Value a = eval(*e.a);
        return a.truthy() ? eval(*e.b) : a;
    }
    case Expr::Kind::Or: {
        Value a = eval(*e.a);
        return a.truthy() ? a : eval(*e.b);
    }
    case Expr::Kind::Binary:
        return binary(e.name, eval(*e.a), eval(*e.b));
    case Expr::Kind::Compare: {
        Value left = eval(*e.a);
        for (const auto& [op, rhs] : e.compares) {
            Value right = eval(*rhs);
            if (!compare(op, left, right))
                return Value::boolean(false);
            left = std::move(right);
        }
        return Value::boolean(true);
    }
    case Expr::Kind::Cond:
        if (eval(*e.a).truthy())
            return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined("the inline if's else");
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
        List l;
        for (const ExprPtr& x : e.items)
            l.push_back(eval(*x));
        return e.kind == Expr::Kind::List ? Value::makeList(std::move(l))
                                          : Value::makeTuple(std::move(l));
    }
    case Expr::Kind::DictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
            const Value key = eval(*e.items[k]);
            std::string name;
            if (!dictKey(key, name))
                fail(hashable(key) ? "dict keys must be strings, numbers or none here, got '" +
                                         key.typeName() + "'"
                                   : "unhashable type: '" + key.typeName() + "'");
            setEntry(d, name, eval(*e.items[k + 1]));
        }
        return Value::makeDict(std::move(d));
    }
    }
    fail("unknown expression");
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==")
        return equals(a, b);
    if (op == "!=")
        return !equals(a, b);
    if (op == "in" || op == "not in") {
        bool in = false;
        if (b.isString()) {
            if (!a.isString())
                fail("'in <string>' requires a string as the left operand, not '" + a.typeName() +
                     "'");
            in = b.s->find(*a.s) != std::string::npos;
        } else if (b.isSequence()) {
            in = std::any_of(b.list->begin(), b.list->end(),
                             [&](const Value& x) { return equals(x, a); });
        } else if (b.isMapping()) {
            if (b.kind == Value::Kind::Dict && !hashable(a))
                fail("unhashable type: '" + a.typeName() + "'");
            std::string name;
            in = dictKey(a, name) && b.findStored(name) != nullptr;
        } else if (b.isUndefined()) {
            in = false;
        } else {
            fail("argument of type '" + b.typeName() + "' is not iterable");
        }
        return op == "in" ? in : !in;
    }
    try {
        if (op == "<")
            return lessThan(a, b);
        if (op == ">")
            return lessThan(b, a);
        if (op == "<=")
            return lessThan(a, b) || equals(a, b);
        if (op == ">=")
            return lessThan(b, a) || equals(a, b);
    } catch (const EvalError& err) {
        fail(err.what());
    }
    fail("unknown comparison " + op);
}

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b) {
    auto typeError = [&]() {
        fail("unsupported operand type(s) for " + op + ": '" + a.typeName() + "' and '" +
             b.typeName() + "'");
    };
    if (op == "~") {
        std::string s = toStr(a) + toStr(b);
        checkSize(s.size());
        return Value::string(std::move(s));
    }
    const bool nums = a.isNumber() && b.isNumber();
    const bool floats = nums && (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float);
    if (op == "+") {
        if (nums) {
            if (floats)
                return Value::number(toDouble(a) + toDouble(b));
            int64_t r;
            if (__builtin_add_overflow(toInt(a), toInt(b), &r))
                fail("integer overflow");
            return Value::integer(r);
        }
        if (a.isString() && b.isString()) {
            checkSize(a.s->size() + b.s->size());
            return Value::string(*a.s + *b.s);
        }
        if (a.kind == b.kind && a.isSequence()) {
            checkSize((a.list->size() + b.list->size()) * sizeof(Value));
            List l = *a.list;
            l.insert(l.end(), b.list->begin(), b.list->end());
            return a.kind == Value::Kind::Tuple ? Value::makeTuple(std::move(l))
                                                : Value::makeList(std::move(l));
        }
        if (a.isString() || b.isString())
            fail(a.isString()
                     ? "can only concatenate str (not \"" + b.typeName() + "\") to str"
                     : "unsupported operand type(s) for +: '" + a.typeName() + "' and 'str'");
        typeError();
    }
    if (op == "-") {
        if (!nums)
            typeError();
        if (floats)
            return Value::number(toDouble(a) - toDouble(b));
        int64_t r;
        if (__builtin_sub_overflow(toInt(a), toInt(b), &r))
            fail("integer overflow");
        return Value::integer(r);
    }
    if (op == "*") {
        if (nums) {
            if (floats)
                return Value::number(toDouble(a) * toDouble(b));
            int64_t r;
            if (__builtin_mul_overflow(toInt(a), toInt(b), &r))
                fail("integer overflow");
            return Value::integer(r);
        }
        const Value* seq = a.isNumber() ? &b : &a;
        const Value* n = a.isNumber() ? &a : &b;
        if (!n->isNumber() || n->kind == Value::Kind::Float)
            typeError();
        const int64_t times = std::max<int64_t>(0, toInt(*n));
        if (seq->isString()) {
            checkSize(seq->s->size() *
                      static_cast<size_t>(std::min<int64_t>(times, int64_t{1} << 40)));
            std::string out;
            for (int64_t k = 0; k < times; ++k)
                out += *seq->s;
            return Value::string(std::move(out));
        }
        if (seq->isSequence()) {
            checkSize(seq->list->size() * sizeof(Value) *
                      static_cast<size_t>(std::min<int64_t>(times, int64_t{1} << 40)));
            List out;
            for (int64_t k = 0; k < times; ++k)
                out.insert(out.end(), seq->list->begin(), seq->list->end());
            return seq->kind == Value::Kind::Tuple ? Value::makeTuple(std::move(out))
                                                   : Value::makeList(std::move(out));
        }
        typeError();
    }
    if (op == "/") {
        if (!nums)
            typeError();
        if (toDouble(b) == 0)
            fail("division by zero");
        return Value::number(toDouble(a) / toDouble(b));
    }
    if (op == "//" || op == "%") {
        if (op == "%" && a.isString()) // printf-style formatting of one value or a tuple
            return Value::string(percentFormat(*this, *a.s, b));
        if (!nums)
            typeError();
        if (toDouble(b) == 0)
            fail(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
        if (floats) {
            // Python's float divmod: fmod's exact remainder moved to the divisor's sign, and
            // the quotient that goes with it.
            const double x = toDouble(a), y = toDouble(b);
            double mod = std::fmod(x, y);
            double div = (x - mod) / y;
            if (mod != 0) {
                if ((y < 0) != (mod < 0)) {
                    mod += y;
                    div -= 1.0;
                }
            } else {
                mod = std::copysign(0.0, y);
            }
            if (op == "%")
                return Value::number(mod);
            if (div == 0)
                return Value::number(std::copysign(0.0, x / y));
            double q = std::floor(div);
            if (div - q > 0.5)
                q += 1.0;
            return Value::number(q);
        }
        if (toInt(a) == INT64_MIN && toInt(b) == -1)
            fail("integer overflow");
        return Value::integer(op == "//" ? floorDiv(toInt(a), toInt(b))
                                         : floorMod(toInt(a), toInt(b)));
    }
    if (op == "**") {
        if (!nums)
            typeError();
        if (!floats && toInt(b) >= 0) {
            const int64_t base = toInt(a), exp = toInt(b);
            if (base == 0 || base == 1)
                return Value::integer(exp == 0 ? 1 : base);
            if (base == -1)
                return Value::integer(exp % 2 ? -1 : 1);
            int64_t r = 1; // |base| ≥ 2 overflows within 63 steps
            for (int64_t k = 0; k < exp; ++k)
                if (__builtin_mul_overflow(r, base, &r))
                    fail("integer overflow");
            return Value::integer(r);
        }
        const double x = toDouble(a), y = toDouble(b);
        if (x == 0 && y < 0) // Python raises where C gives inf
            fail("0.0 cannot be raised to a negative power");
        if (x < 0 && std::isfinite(y) && y != std::floor(y)) // Python's result is complex
            fail("a negative number to a fractional power is complex (not supported)");
        return Value::number(std::pow(x, y));
    }
    fail("unknown operator " + op);
}

} // namespace sparqlab::text::jinja
