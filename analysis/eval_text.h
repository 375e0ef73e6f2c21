#pragma once
/// \file eval_text.h
/// What the eval task units (analysis/tasks/) share to read their data: UTF-8 as code points,
/// Python's notion of space and lower case, JSON and JSONL with errors naming the file and line,
/// and the sizing of examples to a model's context. Internal to the eval layer.

#include "analysis/eval_task_table.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace sparqlab::analysis::evaltext {

using json = nlohmann::json;

std::u32string toU32(const std::string& s);
std::string toUtf8(const std::u32string& s);
/// Python's str.isspace for the characters text files hold.
bool isSpace(char32_t c);
/// Lower case as Python's str.lower (text::lowerCase).
std::u32string lowerAll(std::u32string s);
/// The whole file; EvalDataError naming it when it cannot be read.
std::string readAll(const std::string& path);
json parseJson(const std::string& text, const std::string& where);
/// Non-empty lines of a JSONL file, each parsed, with their line numbers.
std::vector<std::pair<int64_t, json>> jsonLines(const std::string& text, const std::string& path);
/// A string field of a JSON object, or an error naming where and the key.
std::string stringField(const json& j, const std::string& key, const std::string& where);
std::vector<std::string> stringList(const json& j, const std::string& where);
/// Characters per token of a text (from up to 20,000 characters of it), to size examples.
double charsPerToken(const std::u32string& text, const EvalDataOptions& o);
/// charsPerToken of the first row's string field `key` (4 without rows): JSONL tasks size their
/// examples by it.
double charsPerTokenOfFirst(const std::vector<std::pair<int64_t, json>>& rows,
                            const std::string& key, const std::string& path,
                            const EvalDataOptions& o);
int64_t tokensOf(const std::string& s, const EvalDataOptions& o, double cpt);
/// The longest example the context holds with `reserve` tokens generated, in characters:
/// the paper's `paperChars` or less (its examples were 1–2k tokens for 2k–8k contexts).
int64_t scaledChars(int64_t paperChars, int64_t reserveTokens, double cpt,
                    const EvalDataOptions& o);
/// Tokens a QA answer may take: the harness's min(30, 5 + the longest answer).
int64_t answerTokens(const std::vector<std::string>& answers, const EvalDataOptions& o, double cpt);
/// One answerable SQuAD question (v1.1 or v2.0; v2's unanswerable ones are left out).
struct SquadRow {
    std::string id, title, context, question;
    std::vector<std::string> answers;
    size_t article = 0; ///< which article of the file (JSONL rows: which title)
};
/// SQuAD's official JSON ({"data": [{"title", "paragraphs": [{"context", "qas"}]}]}) or JSONL
/// rows {"id", "title", "context", "question", "answers"}, in file order; with `unanswerable`,
/// SQuAD v2's questions without answers too.
std::vector<SquadRow> squadRows(const std::string& raw, const std::string& path,
                                bool unanswerable = false);
/// Keeps examples whose prompt fits the context with their generated tokens.
std::vector<EvalExample> fitting(std::vector<EvalExample> all, const EvalDataOptions& o,
                                 double cpt);

} // namespace sparqlab::analysis::evaltext
