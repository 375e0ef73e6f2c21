#pragma once
/// \file lexer.h
/// The template's lexer (internal to text/jinja/): text and the tokens of each {{ }} and
/// {% %} tag, with Jinja2's whitespace control as transformers sets it up (trim_blocks,
/// lstrip_blocks, '-' and '+'); comments and {% raw %} resolved here. parser.cpp builds the
/// syntax tree from the pieces.

#include "ast.h"

#include <string>
#include <vector>

namespace sparqlab::text::jinja::lex {

/// Nesting a template may reach (parentheses, blocks): deeper is refused, not a stack overflow.
constexpr int kMaxNesting = 200;

/// Throws EvalError "line N: what".
[[noreturn]] void fail(int line, const std::string& what);

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

/// The pieces of `src` (newlines already "\n"). Throws EvalError naming the line.
std::vector<Piece> pieces(const std::string& src);

} // namespace sparqlab::text::jinja::lex
