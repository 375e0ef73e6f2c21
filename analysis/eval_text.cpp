// The eval task units' shared reading helpers (eval_text.h).

#include "eval_text.h"

#include "text/text_pieces.h"
#include "text/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace sparqlab::analysis::evaltext {

namespace fs = std::filesystem;

// ---- UTF-8 as code points ----

std::u32string toU32(const std::string& s) {
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + static_cast<size_t>(n) > s.size()) { // not UTF-8: one replacement
            out.push_back(0xFFFD);
            ++i;
            continue;
        }
        char32_t cp = n == 1 ? c : c & (0x7F >> n);
        bool ok = true;
        for (int k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
            ok = ok && (d & 0xC0) == 0x80;
            cp = (cp << 6) | (d & 0x3F);
        }
        out.push_back(ok ? cp : 0xFFFD);
        i += ok ? static_cast<size_t>(n) : 1;
    }
    return out;
}

std::string toUtf8(const std::u32string& s) {
    std::string out;
    out.reserve(s.size());
    for (const char32_t c : s)
        out += text::pieces::encodeUtf8(static_cast<uint32_t>(c));
    return out;
}

/// Python's str.isspace for the characters text files hold.
bool isSpace(char32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
           c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

std::u32string lowerAll(std::u32string s) {
    return toU32(text::lowerCase(toUtf8(s))); // Python's str.lower, every script
}

std::string readAll(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec))
        throw EvalDataError(path + ": is a folder, not a data file");
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw EvalDataError(path + ": cannot read (missing?)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

json parseJson(const std::string& text, const std::string& where) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        throw EvalDataError(where + ": malformed JSON: " + e.what());
    }
}

/// Non-empty lines of a JSONL file, each parsed.
std::vector<std::pair<int64_t, json>> jsonLines(const std::string& text, const std::string& path) {
    std::vector<std::pair<int64_t, json>> rows;
    std::istringstream in(text);
    int64_t n = 0;
    for (std::string line; std::getline(in, line);) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        rows.emplace_back(n, parseJson(line, path + " line " + std::to_string(n)));
    }
    return rows;
}

/// A string field of a JSON object, or an error naming where and the key.
std::string stringField(const json& j, const std::string& key, const std::string& where) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string())
        throw EvalDataError(where + ": expected a string \"" + key + "\"");
    return j[key].get<std::string>();
}

std::vector<std::string> stringList(const json& j, const std::string& where) {
    std::vector<std::string> out;
    if (j.is_string())
        out.push_back(j.get<std::string>());
    else if (j.is_array())
        for (const json& x : j) {
            if (!x.is_string())
                throw EvalDataError(where + ": expected strings");
            out.push_back(x.get<std::string>());
        }
    else
        throw EvalDataError(where + ": expected a string or a list of strings");
    return out;
}

/// Characters per token of a text (from up to 20,000 characters of it), to size examples.
double charsPerToken(const std::u32string& text, const EvalDataOptions& o) {
    if (!o.countTokens || text.empty())
        return 4.0;
    const std::u32string sample = text.substr(0, 20000);
    const int64_t tokens = std::max<int64_t>(1, o.countTokens(toUtf8(sample)));
    return static_cast<double>(sample.size()) / static_cast<double>(tokens);
}

double charsPerTokenOfFirst(const std::vector<std::pair<int64_t, json>>& rows,
                            const std::string& key, const std::string& path,
                            const EvalDataOptions& o) {
    if (rows.empty())
        return 4.0;
    const auto& [line, j] = rows.front();
    return charsPerToken(toU32(stringField(j, key, path + " line " + std::to_string(line))), o);
}

int64_t tokensOf(const std::string& s, const EvalDataOptions& o, double cpt) {
    if (o.countTokens)
        return o.countTokens(s);
    return static_cast<int64_t>(std::ceil(static_cast<double>(utf8Length(s)) / cpt));
}

/// The longest example the context holds with `reserve` tokens generated, in characters:
/// the paper's `paperChars` or less (its examples were 1–2k tokens for 2k–8k contexts).
int64_t scaledChars(int64_t paperChars, int64_t reserveTokens, double cpt,
                    const EvalDataOptions& o) {
    const double budget =
        static_cast<double>(std::max<int64_t>(16, o.contextTokens - reserveTokens));
    return std::max<int64_t>(
        64, std::min<int64_t>(paperChars, static_cast<int64_t>(0.9 * budget * cpt)));
}

/// Keeps examples whose prompt fits the context with their generated tokens.
std::vector<EvalExample> fitting(std::vector<EvalExample> all, const EvalDataOptions& o,
                                 double cpt) {
    std::vector<EvalExample> out;
    for (EvalExample& e : all)
        if (tokensOf(e.prompt, o, cpt) + e.maxNewTokens + 1 <= o.contextTokens)
            out.push_back(std::move(e));
    return out;
}

int64_t answerTokens(const std::vector<std::string>& answers, const EvalDataOptions& o,
                     double cpt) {
    int64_t m = 1;
    for (const std::string& a : answers)
        m = std::max(m, tokensOf(a, o, cpt));
    return std::min<int64_t>(30, 5 + m); // the harness: min(30, 5 + the longest answer)
}

std::vector<SquadRow> squadRows(const std::string& raw, const std::string& path,
                                bool unanswerable) {
    std::vector<SquadRow> rows;
    const size_t first = raw.find_first_not_of(" \t\r\n");
    const bool official = first != std::string::npos && raw[first] == '{' &&
                          raw.find("\"data\"") != std::string::npos &&
                          raw.find("\"paragraphs\"") != std::string::npos;
    if (official) {
        const json j = parseJson(raw, path);
        if (!j.is_object() || !j.contains("data") || !j["data"].is_array())
            throw EvalDataError(path + ": expected SQuAD JSON with a \"data\" list");
        for (size_t a = 0; a < j["data"].size(); ++a) {
            const json& art = j["data"][a];
            const std::string where = path + ": data[" + std::to_string(a) + "]";
            const std::string title = stringField(art, "title", where);
            if (!art.contains("paragraphs") || !art["paragraphs"].is_array())
                throw EvalDataError(where + ": expected a \"paragraphs\" list");
            for (size_t p = 0; p < art["paragraphs"].size(); ++p) {
                const json& par = art["paragraphs"][p];
                const std::string pw = where + ".paragraphs[" + std::to_string(p) + "]";
                const std::string context = stringField(par, "context", pw);
                if (!par.contains("qas") || !par["qas"].is_array())
                    throw EvalDataError(pw + ": expected a \"qas\" list");
                for (size_t q = 0; q < par["qas"].size(); ++q) {
                    const json& qa = par["qas"][q];
                    const std::string qw = pw + ".qas[" + std::to_string(q) + "]";
                    SquadRow r{stringField(qa, "id", qw),       title, context,
                               stringField(qa, "question", qw), {},    a};
                    if (!qa.contains("answers") || !qa["answers"].is_array())
                        throw EvalDataError(qw + ": expected an \"answers\" list");
                    for (const json& ans : qa["answers"])
                        r.answers.push_back(stringField(ans, "text", qw + ".answers"));
                    if (unanswerable || !r.answers.empty()) // SQuAD v2's unanswerable ones
                        rows.push_back(std::move(r));
                }
            }
        }
        return rows;
    }
    std::map<std::string, size_t> articles; // JSONL rows: an article is a title
    for (const auto& [line, j] : jsonLines(raw, path)) {
        const std::string where = path + " line " + std::to_string(line);
        SquadRow r{stringField(j, "id", where),
                   stringField(j, "title", where),
                   stringField(j, "context", where),
                   stringField(j, "question", where),
                   {},
                   0};
        r.article = articles.emplace(r.title, articles.size()).first->second;
        if (!j.contains("answers"))
            throw EvalDataError(where + ": expected \"answers\"");
        const json& ans = j["answers"];
        r.answers = stringList(ans.is_object() && ans.contains("text") ? ans["text"] : ans, where);
        if (unanswerable || !r.answers.empty())
            rows.push_back(std::move(r));
    }
    return rows;
}

} // namespace sparqlab::analysis::evaltext
