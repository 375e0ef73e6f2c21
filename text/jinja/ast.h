#pragma once
/// \file ast.h
/// The parsed form of a template (parser.cpp builds it, interpreter.cpp runs it). Internal to
/// the engine.

#include "text/jinja/value.h"

#include <memory>
#include <string>
#include <vector>

namespace sparqlab::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

/// A call's or filter's arguments as written.
struct ArgExprs {
    std::vector<ExprPtr> positional;
    std::vector<std::pair<std::string, ExprPtr>> keyword;
    ExprPtr star;  ///< *args
    ExprPtr dstar; ///< **kwargs
};

struct Expr {
    enum class Kind {
        Literal, ///< value
        Name,    ///< name
        Attr,    ///< a.name (a.0: an integer item)
        Item,    ///< a[b]
        Slice,   ///< a[b:c:d] (any of b, c, d may be null)
        Call,    ///< a(args)
        Filter,  ///< a | name(args)
        Test,    ///< a is [not] name(args)
        Neg,     ///< -a
        Pos,     ///< +a
        Not,     ///< not a
        Binary,  ///< a op b: + - * / // % ** ~
        And,     ///< a and b
        Or,      ///< a or b
        Compare, ///< a op b op c …: == != < <= > >= in, not in
        Cond,    ///< b if a else c (c may be null)
        List,    ///< [a, …]
        Tuple,   ///< (a, …)
        DictLit, ///< {k: v, …}
    };
    Kind kind;
    int line = 0;
    Value value;                ///< Literal
    std::string name;           ///< Name, Attr, Filter, Test; Binary: the operator
    bool negated = false;       ///< Test: is not
    ExprPtr a, b, c;            ///< operands (Attr/Item/Slice/Call/Filter/Test: a is the object)
    std::vector<ExprPtr> items; ///< List, Tuple; DictLit keys and values in turn
    std::vector<std::pair<std::string, ExprPtr>> compares; ///< Compare: (op, operand) after a
    ArgExprs args;                                         ///< Call, Filter, Test
};

/// A macro's or call block's parameter.
struct Param {
    std::string name;
    ExprPtr defaultValue; ///< null: required
};

struct Stmt {
    enum class Kind {
        Text,        ///< text
        Output,      ///< {{ expr }}
        If,          ///< conds[i] → bodies[i]; elseBody
        For,         ///< targets in expr (if cond): body; elseBody
        Set,         ///< targets = expr; or ns.attr = expr (attr set)
        SetBlock,    ///< {% set name %}body{% endset %} (with optional filters in expr)
        Macro,       ///< {% macro name(params) %}body
        CallBlock,   ///< {% call(params) expr %}body
        FilterBlock, ///< {% filter f %}body
        Break,
        Continue,
        Scope, ///< a body rendered as is ({% generation %})
    };
    Kind kind;
    int line = 0;
    std::string text;                 ///< Text
    ExprPtr expr;                     ///< Output, For (iterable), Set (value), CallBlock (call)
    ExprPtr cond;                     ///< For's filter
    bool recursive = false;           ///< For: `recursive` (the body may call loop(items))
    std::vector<std::string> targets; ///< For, Set (several: tuple unpacking)
    std::string attr;                 ///< Set of a namespace attribute: targets[0].attr
    std::vector<ExprPtr> conds;       ///< If
    std::vector<Body> bodies;         ///< If: one per cond
    Body body, elseBody;
    std::string name;             ///< Macro, SetBlock
    std::vector<Param> params;    ///< Macro, CallBlock
    std::vector<ExprPtr> filters; ///< FilterBlock, SetBlock: Filter nodes whose `a` is null
};

/// A parsed template.
struct Program {
    std::string name;
    Body body;
};

/// Parses `source` in chat-template mode (trim_blocks, lstrip_blocks, one trailing newline
/// dropped). Throws EvalError with "line N: …".
std::unique_ptr<Program> parse(const std::string& source, const std::string& name);

} // namespace sparqlab::text::jinja
