#include "eval_tasks.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

namespace sparqlab::analysis {

namespace {

using json = nlohmann::json;
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
    for (char32_t c : s) {
        if (c < 0x80) {
            out.push_back(static_cast<char>(c));
        } else if (c < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (c >> 6)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        } else if (c < 0x10000) {
            out.push_back(static_cast<char>(0xE0 | (c >> 12)));
            out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        } else {
            out.push_back(static_cast<char>(0xF0 | (c >> 18)));
            out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        }
    }
    return out;
}

/// Python's str.isspace for the characters text files hold.
bool isSpace(char32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
           c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/// Lower case for ASCII, Latin-1, Greek and Cyrillic (what Python's str.lower does there).
char32_t lower(char32_t c) {
    if (c >= 'A' && c <= 'Z')
        return c + 32;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3AB && c != 0x3A2) ||
        (c >= 0x410 && c <= 0x42F))
        return c + 32;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    return c;
}

std::u32string lowerAll(std::u32string s) {
    for (char32_t& c : s)
        c = lower(c);
    return s;
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

// ---- repetition (the paper's harness: chunks on whitespace, then prompt/reference pairs) ----

/// Matches of `(.{length,}?)(?=\s|$)` over s from 0: [start, end) spans.
std::vector<std::pair<size_t, size_t>> splitOnWhitespace(const std::u32string& s, size_t length) {
    std::vector<std::pair<size_t, size_t>> out;
    size_t i = 0;
    while (i + length <= s.size()) {
        size_t end = i + length;
        while (end < s.size() && !isSpace(s[end]))
            ++end;
        out.emplace_back(i, end);
        i = end;
        if (end == i && end >= s.size())
            break;
    }
    return out;
}

std::vector<EvalExample> repetitionExamples(const std::u32string& text, const EvalDataOptions& o) {
    const double cpt = charsPerToken(text, o);
    const int64_t refTokensCap = 128;
    const int64_t promptTokens =
        static_cast<int64_t>(std::ceil(1.25 * static_cast<double>(o.promptChars) / cpt)) + 2;
    const size_t contextChars = static_cast<size_t>(
        o.contextChars > 0 ? o.contextChars
                           : scaledChars(6000, refTokensCap + promptTokens + 8, cpt, o));
    const size_t P = static_cast<size_t>(std::max<int64_t>(1, o.promptChars));
    const size_t R = static_cast<size_t>(std::max<int64_t>(2, o.referenceChars));
    std::vector<EvalExample> out;
    for (const auto& [c0, c1] : splitOnWhitespace(text, contextChars)) {
        const std::u32string context = text.substr(c0, c1 - c0);
        // (.{P,}?)(\s.{R−1,}?)(?=\s|$): a prompt of ≥ P characters up to a space, then a
        // reference starting at that space, ≥ R characters, up to the next space.
        size_t i = 0;
        while (i < context.size()) {
            size_t p = i + P;
            while (p < context.size() && !isSpace(context[p]))
                ++p;
            if (p >= context.size())
                break;
            size_t r = p + R;
            if (r > context.size())
                break;
            while (r < context.size() && !isSpace(context[r]))
                ++r;
            EvalExample e;
            e.id = std::to_string(c0 + i);
            e.prompt = toUtf8(context) + "\n" + toUtf8(context.substr(i, p - i));
            e.reference = toUtf8(context.substr(p, r - p));
            e.maxNewTokens = std::min(refTokensCap, tokensOf(e.reference, o, cpt));
            out.push_back(std::move(e));
            i = r;
        }
    }
    return fitting(std::move(out), o, cpt);
}

// ---- bpc ----

std::vector<EvalExample> bpcExamples(const std::string& raw, const std::string& path) {
    std::vector<EvalExample> out;
    // JSONL of {"text"} when every non-empty line is such an object; else one plain text.
    bool jsonl = !raw.empty() && raw.find_first_not_of(" \t\r\n") != std::string::npos &&
                 raw[raw.find_first_not_of(" \t\r\n")] == '{';
    if (jsonl) {
        for (const auto& [line, j] : jsonLines(raw, path)) {
            EvalExample e;
            e.id = "line " + std::to_string(line);
            e.text = stringField(j, "text", path + " line " + std::to_string(line));
            if (!e.text.empty())
                out.push_back(std::move(e));
        }
        return out;
    }
    EvalExample e;
    e.id = fs::path(path).filename().string();
    e.text = raw;
    out.push_back(std::move(e));
    return out;
}

// ---- SQuAD (1-shot, confusion contexts) ----

struct SquadRow {
    std::string id, title, context, question;
    std::vector<std::string> answers;
};

std::vector<SquadRow> squadRows(const std::string& raw, const std::string& path) {
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
                    SquadRow r{stringField(qa, "id", qw),
                               title,
                               context,
                               stringField(qa, "question", qw),
                               {}};
                    if (!qa.contains("answers") || !qa["answers"].is_array())
                        throw EvalDataError(qw + ": expected an \"answers\" list");
                    for (const json& ans : qa["answers"])
                        r.answers.push_back(stringField(ans, "text", qw + ".answers"));
                    if (!r.answers.empty()) // SQuAD v2's unanswerable questions are skipped
                        rows.push_back(std::move(r));
                }
            }
        }
        return rows;
    }
    for (const auto& [line, j] : jsonLines(raw, path)) {
        const std::string where = path + " line " + std::to_string(line);
        SquadRow r{stringField(j, "id", where),
                   stringField(j, "title", where),
                   stringField(j, "context", where),
                   stringField(j, "question", where),
                   {}};
        if (!j.contains("answers"))
            throw EvalDataError(where + ": expected \"answers\"");
        const json& ans = j["answers"];
        r.answers = stringList(ans.is_object() && ans.contains("text") ? ans["text"] : ans, where);
        if (!r.answers.empty())
            rows.push_back(std::move(r));
    }
    return rows;
}

std::string underscoresToSpaces(std::string s) {
    std::replace(s.begin(), s.end(), '_', ' ');
    return s;
}

std::string shortest(const std::vector<std::string>& v) {
    return *std::min_element(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
        return utf8Length(a) < utf8Length(b);
    });
}

int64_t answerTokens(const std::vector<std::string>& answers, const EvalDataOptions& o,
                     double cpt) {
    int64_t m = 1;
    for (const std::string& a : answers)
        m = std::max(m, tokensOf(a, o, cpt));
    return std::min<int64_t>(30, 5 + m); // the harness: min(30, 5 + the longest answer)
}

std::vector<EvalExample> squadExamples(const std::string& raw, const std::string& path,
                                       const EvalDataOptions& o) {
    const std::vector<SquadRow> rows = squadRows(raw, path);
    if (rows.empty())
        throw EvalDataError(path + ": no answerable questions");
    std::mt19937_64 rng(o.seed ^ 0x5D1ADULL);
    auto formatContext = [](const SquadRow& r) {
        return "Title: " + underscoresToSpaces(r.title) + ". Background: " + r.context;
    };
    std::set<std::string> contextSet;
    std::map<std::string, std::vector<size_t>> byContext;
    for (size_t i = 0; i < rows.size(); ++i) {
        contextSet.insert(formatContext(rows[i]));
        byContext[rows[i].context].push_back(i);
    }
    const std::vector<std::string> contexts(contextSet.begin(), contextSet.end());
    const double cpt = charsPerToken(toU32(rows.front().context), o);
    std::vector<EvalExample> out;
    for (size_t i = 0; i < rows.size(); ++i) {
        const SquadRow& row = rows[i];
        std::vector<std::string> parts{formatContext(row)};
        for (int64_t c = 0; c < o.confusionContexts; ++c)
            parts.push_back(contexts[rng() % contexts.size()]);
        std::shuffle(parts.begin(), parts.end(), rng);
        std::string full;
        for (const std::string& p : parts)
            full += p + "\n";
        full += "From what you've just read about " + underscoresToSpaces(row.title) +
                ", please answer the following questions.";
        // Shots: other questions on the same context first, then any.
        std::vector<size_t> same;
        for (size_t j : byContext[row.context])
            if (rows[j].id != row.id)
                same.push_back(j);
        std::shuffle(same.begin(), same.end(), rng);
        for (int64_t s = 0; s < o.shots + 1; ++s) {
            const size_t j = rng() % rows.size();
            if (rows[j].id != row.id)
                same.push_back(j);
        }
        std::string prompt;
        for (int64_t s = 0; s < o.shots && s < static_cast<int64_t>(same.size()); ++s) {
            const SquadRow& ex = rows[same[static_cast<size_t>(s)]];
            prompt += "Question: " + ex.question + "\nAnswer: " + shortest(ex.answers) + "\n";
        }
        prompt += "Question: " + row.question + "\nAnswer:";
        EvalExample e;
        e.id = row.id;
        e.prompt = full + "\n" + prompt;
        e.answers = row.answers;
        e.maxNewTokens = answerTokens(row.answers, o, cpt);
        out.push_back(std::move(e));
    }
    return fitting(std::move(out), o, cpt);
}

// ---- TriviaQA (open book, 0-shot) ----

std::vector<EvalExample> triviaqaExamples(const std::string& raw, const std::string& path,
                                          const EvalDataOptions& o) {
    // A JSON list of rows, TriviaQA's own {"Data": […]}, or JSON lines.
    std::vector<json> rows;
    const size_t first = raw.find_first_not_of(" \t\r\n");
    json whole;
    bool parsed = false;
    if (first != std::string::npos && (raw[first] == '[' || raw[first] == '{')) {
        try {
            whole = json::parse(raw);
            parsed = true;
        } catch (const json::exception&) {
            if (raw[first] == '[')
                throw EvalDataError(path + ": malformed JSON list");
        }
    }
    if (parsed && whole.is_array()) {
        rows.assign(whole.begin(), whole.end());
    } else if (parsed && whole.is_object() && whole.contains("Data")) {
        if (!whole["Data"].is_array())
            throw EvalDataError(path + ": \"Data\" must be a list");
        rows.assign(whole["Data"].begin(), whole["Data"].end());
    } else {
        for (auto& [line, j] : jsonLines(raw, path))
            rows.push_back(std::move(j));
    }
    // The context: a document of the paper's 4,000–8,000 characters, scaled to the model.
    const double cpt0 = 4.0;
    std::vector<EvalExample> all;
    std::mt19937_64 rng(o.seed ^ 0x7419AULL);
    const fs::path evidence = fs::path(path).parent_path().parent_path() / "evidence";
    double cpt = cpt0;
    bool measured = false;
    for (size_t i = 0; i < rows.size(); ++i) {
        const json& r = rows[i];
        const std::string where = path + ": question " + std::to_string(i);
        if (!r.is_object())
            throw EvalDataError(where + ": expected an object");
        const bool hf = r.contains("question");
        const std::string question = stringField(r, hf ? "question" : "Question", where);
        const std::string id = stringField(r, hf ? "question_id" : "QuestionId", where);
        const json& answer =
            r.contains(hf ? "answer" : "Answer") ? r[hf ? "answer" : "Answer"] : json();
        if (!answer.is_object() || !answer.contains(hf ? "aliases" : "Aliases"))
            throw EvalDataError(where + ": expected the answer's aliases");
        const std::vector<std::string> aliases =
            stringList(answer[hf ? "aliases" : "Aliases"], where + ": aliases");
        std::vector<std::string> docs;
        if (hf) {
            for (const char* key : {"search_results", "entity_pages"}) {
                const char* field =
                    std::string(key) == "search_results" ? "search_context" : "wiki_context";
                if (r.contains(key) && r[key].is_object() && r[key].contains(field))
                    for (const std::string& d : stringList(r[key][field], where))
                        docs.push_back(d);
            }
        } else {
            for (const auto& [key, dir] :
                 {std::pair{"SearchResults", "web"}, std::pair{"EntityPages", "wikipedia"}})
                if (r.contains(key) && r[key].is_array())
                    for (const json& d : r[key])
                        if (d.is_object() && d.contains("Filename") && d["Filename"].is_string()) {
                            const fs::path f = evidence / dir / d["Filename"].get<std::string>();
                            std::error_code ec;
                            if (fs::is_regular_file(f, ec))
                                docs.push_back(readAll(f.string()));
                        }
        }
        if (!measured && !docs.empty()) {
            cpt = charsPerToken(toU32(docs.front()), o);
            measured = true;
        }
        const int64_t maxChars = scaledChars(8000, 40, cpt, o);
        const int64_t minChars = maxChars / 2;
        std::vector<std::string> inRange;
        for (const std::string& d : docs) {
            const int64_t n = utf8Length(d);
            if (n >= minChars && n <= maxChars)
                inRange.push_back(d);
        }
        if (inRange.empty())
            continue;
        EvalExample e;
        e.id = id;
        e.prompt = inRange[rng() % inRange.size()] + "\nQuestion: " + question + "\nAnswer:";
        e.answers = aliases;
        e.maxNewTokens = answerTokens(aliases, o, cpt);
        all.push_back(std::move(e));
    }
    return fitting(std::move(all), o, cpt);
}

// ---- CNN/DailyMail ----

std::vector<EvalExample> cnndmExamples(const std::string& raw, const std::string& path,
                                       const EvalDataOptions& o) {
    const auto rows = jsonLines(raw, path);
    double cpt = 4.0;
    if (!rows.empty())
        cpt =
            charsPerToken(toU32(stringField(rows.front().second, "article",
                                            path + " line " + std::to_string(rows.front().first))),
                          o);
    const int64_t maxChars = scaledChars(8000, 128 + 8, cpt, o);
    const int64_t minChars = maxChars / 2;
    std::vector<EvalExample> out;
    for (const auto& [line, j] : rows) {
        const std::string where = path + " line " + std::to_string(line);
        const std::string article = stringField(j, "article", where);
        const std::string highlights = stringField(j, "highlights", where);
        const int64_t n = utf8Length(article);
        if (n < minChars || n > maxChars)
            continue;
        EvalExample e;
        e.id = j.contains("id") && j["id"].is_string() ? j["id"].get<std::string>()
                                                       : "line " + std::to_string(line);
        e.prompt = "Article: " + article + "\nSummary:";
        e.reference = highlights;
        e.maxNewTokens = std::min<int64_t>(128, std::max<int64_t>(1, tokensOf(highlights, o, cpt)));
        out.push_back(std::move(e));
    }
    return fitting(std::move(out), o, cpt);
}

// ---- needle (a passkey in a haystack) ----

std::vector<EvalExample> needleExamples(const std::u32string& text, const std::string& path,
                                        const EvalDataOptions& o) {
    const double cpt = charsPerToken(text, o);
    const std::string question = "\nWhat is the pass key? The pass key is";
    const int64_t reserve = 8 + tokensOf(question, o, cpt) + 40; // the needle and the answer
    std::vector<int64_t> lengths = o.haystackTokens;
    if (lengths.empty()) {
        const int64_t full = std::max<int64_t>(16, o.contextTokens - reserve);
        lengths = {full / 4, full / 2, 3 * full / 4, full};
    }
    std::mt19937_64 rng(o.seed ^ 0x4EEDULL);
    std::vector<EvalExample> out;
    for (int64_t L : lengths) {
        const size_t chars = static_cast<size_t>(std::max(1.0, static_cast<double>(L) * cpt));
        if (text.size() < chars)
            throw EvalDataError(path + ": too short for a haystack of " + std::to_string(L) +
                                " tokens (" + std::to_string(chars) + " characters)");
        const size_t start = static_cast<size_t>(rng() % (text.size() - chars + 1));
        std::u32string hay = text.substr(start, chars);
        // Trim to the length in tokens (the tokenizer decides).
        while (hay.size() > 16 && tokensOf(toUtf8(hay), o, cpt) > L)
            hay.resize(hay.size() * 95 / 100);
        for (double d : o.depths) {
            const std::string key = std::to_string(10000 + rng() % 90000);
            const std::string needle =
                " The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
            // At a sentence end at or after the depth (the start and the end exactly).
            size_t at =
                static_cast<size_t>(std::clamp(d, 0.0, 1.0) * static_cast<double>(hay.size()));
            if (at > 0 && at < hay.size()) {
                size_t dot = at;
                while (dot < hay.size() && hay[dot] != '.')
                    ++dot;
                at = dot < hay.size() ? dot + 1 : hay.size();
            }
            EvalExample e;
            std::ostringstream id;
            id << "L" << L << "-d" << d;
            e.id = id.str();
            e.prompt = toUtf8(hay.substr(0, at)) + needle + toUtf8(hay.substr(at)) + question;
            e.answers = {key};
            e.maxNewTokens = tokensOf(" " + key, o, cpt) + 4;
            e.depth = d;
            e.haystackTokens = L;
            out.push_back(std::move(e));
        }
    }
    return fitting(std::move(out), o, cpt);
}

// ---- ROUGE-L's Porter stemmer (NLTK's default mode) ----

class Porter {
public:
    static std::string stem(const std::string& word) {
        static const std::map<std::string, std::string> irregular{
            {"skies", "sky"},      {"sky", "sky"},          {"dying", "die"},
            {"lying", "lie"},      {"tying", "tie"},        {"news", "news"},
            {"innings", "inning"}, {"inning", "inning"},    {"outings", "outing"},
            {"outing", "outing"},  {"cannings", "canning"}, {"canning", "canning"},
            {"howe", "howe"},      {"proceed", "proceed"},  {"exceed", "exceed"},
            {"succeed", "succeed"}};
        if (const auto it = irregular.find(word); it != irregular.end())
            return it->second;
        if (word.size() <= 2)
            return word;
        std::string w = step1a(word);
        w = step1b(w);
        w = step1c(w);
        w = step2(w);
        w = step3(w);
        w = step4(w);
        w = step5a(w);
        return step5b(w);
    }

private:
    using Cond = std::function<bool(const std::string&)>;
    struct Rule {
        std::string suffix, replacement;
        Cond cond;
    };

    static bool consonant(const std::string& w, size_t i) {
        const char c = w[i];
        if (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u')
            return false;
        if (c == 'y')
            return i == 0 ? true : !consonant(w, i - 1);
        return true;
    }
    static int measure(const std::string& s) {
        int m = 0;
        for (size_t i = 0; i + 1 < s.size(); ++i)
            m += !consonant(s, i) && consonant(s, i + 1);
        return m;
    }
    static bool positive(const std::string& s) { return measure(s) > 0; }
    static bool hasVowel(const std::string& s) {
        for (size_t i = 0; i < s.size(); ++i)
            if (!consonant(s, i))
                return true;
        return false;
    }
    static bool endsWith(const std::string& w, const std::string& s) {
        return w.size() >= s.size() && w.compare(w.size() - s.size(), s.size(), s) == 0;
    }
    static bool doubleConsonant(const std::string& w) {
        return w.size() >= 2 && w[w.size() - 1] == w[w.size() - 2] && consonant(w, w.size() - 1);
    }
    static bool cvc(const std::string& w) {
        const size_t n = w.size();
        if (n >= 3 && consonant(w, n - 3) && !consonant(w, n - 2) && consonant(w, n - 1) &&
            w[n - 1] != 'w' && w[n - 1] != 'x' && w[n - 1] != 'y')
            return true;
        return n == 2 && !consonant(w, 0) && consonant(w, 1);
    }
    /// The first rule whose suffix the word has decides (its condition failing keeps the word).
    static std::string apply(const std::string& w, const std::vector<Rule>& rules) {
        for (const Rule& r : rules) {
            if (r.suffix == "*d") {
                if (doubleConsonant(w)) {
                    const std::string stem = w.substr(0, w.size() - 2);
                    return !r.cond || r.cond(stem) ? stem + r.replacement : w;
                }
                continue;
            }
            if (endsWith(w, r.suffix)) {
                const std::string stem = w.substr(0, w.size() - r.suffix.size());
                return !r.cond || r.cond(stem) ? stem + r.replacement : w;
            }
        }
        return w;
    }
    static std::string step1a(const std::string& w) {
        if (endsWith(w, "ies") && w.size() == 4)
            return w.substr(0, 1) + "ie";
        return apply(w, {{"sses", "ss", {}}, {"ies", "i", {}}, {"ss", "ss", {}}, {"s", "", {}}});
    }
    static std::string step1b(const std::string& w) {
        if (endsWith(w, "ied"))
            return w.substr(0, w.size() - 3) + (w.size() == 4 ? "ie" : "i");
        if (endsWith(w, "eed")) {
            const std::string stem = w.substr(0, w.size() - 3);
            return measure(stem) > 0 ? stem + "ee" : w;
        }
        std::string mid;
        bool ok = false;
        for (const char* suffix : {"ed", "ing"})
            if (endsWith(w, suffix)) {
                mid = w.substr(0, w.size() - std::string(suffix).size());
                if (hasVowel(mid)) {
                    ok = true;
                    break;
                }
            }
        if (!ok)
            return w;
        const char last = mid.empty() ? '\0' : mid.back();
        return apply(
            mid,
            {{"at", "ate", {}},
             {"bl", "ble", {}},
             {"iz", "ize", {}},
             {"*d", std::string(1, last),
              [last](const std::string&) { return last != 'l' && last != 's' && last != 'z'; }},
             {"", "e", [](const std::string& s) { return measure(s) == 1 && cvc(s); }}});
    }
    static std::string step1c(const std::string& w) {
        return apply(w, {{"y", "i", [](const std::string& s) {
                              return s.size() > 1 && consonant(s, s.size() - 1);
                          }}});
    }
    static std::string step2(const std::string& w) {
        if (endsWith(w, "alli") && positive(w.substr(0, w.size() - 4)))
            return step2(w.substr(0, w.size() - 4) + "al");
        const Cond p = positive;
        return apply(w, {{"ational", "ate", p},
                         {"tional", "tion", p},
                         {"enci", "ence", p},
                         {"anci", "ance", p},
                         {"izer", "ize", p},
                         {"bli", "ble", p},
                         {"alli", "al", p},
                         {"entli", "ent", p},
                         {"eli", "e", p},
                         {"ousli", "ous", p},
                         {"ization", "ize", p},
                         {"ation", "ate", p},
                         {"ator", "ate", p},
                         {"alism", "al", p},
                         {"iveness", "ive", p},
                         {"fulness", "ful", p},
                         {"ousness", "ous", p},
                         {"aliti", "al", p},
                         {"iviti", "ive", p},
                         {"biliti", "ble", p},
                         {"fulli", "ful", p},
                         {"logi", "log", [w](const std::string&) {
                              return positive(w.substr(0, w.size() - 3));
                          }}});
    }
    static std::string step3(const std::string& w) {
        const Cond p = positive;
        return apply(w, {{"icate", "ic", p},
                         {"ative", "", p},
                         {"alize", "al", p},
                         {"iciti", "ic", p},
                         {"ical", "ic", p},
                         {"ful", "", p},
                         {"ness", "", p}});
    }
    static std::string step4(const std::string& w) {
        const Cond m1 = [](const std::string& s) { return measure(s) > 1; };
        return apply(w, {{"al", "", m1},
                         {"ance", "", m1},
                         {"ence", "", m1},
                         {"er", "", m1},
                         {"ic", "", m1},
                         {"able", "", m1},
                         {"ible", "", m1},
                         {"ant", "", m1},
                         {"ement", "", m1},
                         {"ment", "", m1},
                         {"ent", "", m1},
                         {"ion", "",
                          [](const std::string& s) {
                              return measure(s) > 1 && !s.empty() &&
                                     (s.back() == 's' || s.back() == 't');
                          }},
                         {"ou", "", m1},
                         {"ism", "", m1},
                         {"ate", "", m1},
                         {"iti", "", m1},
                         {"ous", "", m1},
                         {"ive", "", m1},
                         {"ize", "", m1}});
    }
    static std::string step5a(const std::string& w) {
        if (endsWith(w, "e")) {
            const std::string stem = w.substr(0, w.size() - 1);
            if (measure(stem) > 1 || (measure(stem) == 1 && !cvc(stem)))
                return stem;
        }
        return w;
    }
    static std::string step5b(const std::string& w) {
        return apply(w, {{"ll", "l", [w](const std::string&) {
                              return measure(w.substr(0, w.size() - 1)) > 1;
                          }}});
    }
};

/// Python's re.sub of `^[\s"'_.,]*(the |a |an )?|[\s"'_.,]*$` with "" on lower-case text.
std::u32string qaNormalise(const std::u32string& s) {
    auto junk = [](char32_t c) {
        return isSpace(c) || c == '"' || c == '\'' || c == '_' || c == '.' || c == ',';
    };
    size_t b = 0;
    while (b < s.size() && junk(s[b]))
        ++b;
    for (const std::u32string article : {U"the ", U"a ", U"an "})
        if (s.compare(b, article.size(), article) == 0) {
            b += article.size();
            break;
        }
    size_t e = s.size();
    while (e > b && junk(s[e - 1]))
        --e;
    return s.substr(b, e - b);
}

} // namespace

// ---- public ----

const char* evalTaskName(EvalTask t) {
    switch (t) {
    case EvalTask::Repetition:
        return "repetition";
    case EvalTask::Bpc:
        return "bpc";
    case EvalTask::Squad:
        return "squad";
    case EvalTask::TriviaQA:
        return "triviaqa";
    case EvalTask::CnnDm:
        return "cnndm";
    case EvalTask::Needle:
        return "needle";
    }
    return "?";
}

std::string evalTaskNames() {
    return "repetition, bpc, squad, triviaqa, cnndm, needle";
}

EvalTask parseEvalTask(const std::string& name) {
    for (EvalTask t : {EvalTask::Repetition, EvalTask::Bpc, EvalTask::Squad, EvalTask::TriviaQA,
                       EvalTask::CnnDm, EvalTask::Needle})
        if (name == evalTaskName(t))
            return t;
    throw std::invalid_argument("unknown task '" + name + "' (" + evalTaskNames() + ")");
}

const char* evalMetric(EvalTask t) {
    switch (t) {
    case EvalTask::Repetition:
        return "repetition_chars";
    case EvalTask::Bpc:
        return "bpc";
    case EvalTask::Squad:
    case EvalTask::TriviaQA:
        return "exact_match";
    case EvalTask::CnnDm:
        return "rouge_l_f";
    case EvalTask::Needle:
        return "needle_found";
    }
    return "?";
}

bool higherIsBetter(EvalTask t) {
    return t != EvalTask::Bpc;
}

std::vector<EvalExample> evalExamplesFromText(EvalTask task, const std::string& raw,
                                              const std::string& path, const EvalDataOptions& o) {
    switch (task) {
    case EvalTask::Repetition: {
        const std::u32string text = toU32(raw);
        if (text.size() < 64)
            throw EvalDataError(path + ": too short for the repetition task (" +
                                std::to_string(text.size()) + " characters)");
        return repetitionExamples(text, o);
    }
    case EvalTask::Bpc:
        return bpcExamples(raw, path);
    case EvalTask::Squad:
        return squadExamples(raw, path, o);
    case EvalTask::TriviaQA:
        return triviaqaExamples(raw, path, o);
    case EvalTask::CnnDm:
        return cnndmExamples(raw, path, o);
    case EvalTask::Needle:
        return needleExamples(toU32(raw), path, o);
    }
    return {};
}

std::vector<EvalExample> loadEvalExamples(EvalTask task, const std::string& path,
                                          const EvalDataOptions& o) {
    return evalExamplesFromText(task, readAll(path), path, o);
}

bool qaExactMatch(const std::string& output, const std::vector<std::string>& answers) {
    const std::u32string out = qaNormalise(lowerAll(toU32(output)));
    for (const std::string& a : answers) {
        const std::u32string ans = qaNormalise(lowerAll(toU32(a)));
        if (!ans.empty() && out.compare(0, ans.size(), ans) == 0)
            return true;
    }
    return false;
}

std::string porterStem(const std::string& word) {
    return Porter::stem(word);
}

std::vector<std::string> rougeTokens(const std::string& text) {
    std::vector<std::string> tokens;
    std::string cur;
    for (char32_t c : lowerAll(toU32(text))) {
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            cur.push_back(static_cast<char>(c));
        } else if (!cur.empty()) {
            tokens.push_back(cur);
            cur.clear();
        }
    }
    if (!cur.empty())
        tokens.push_back(cur);
    for (std::string& t : tokens)
        if (t.size() > 3)
            t = Porter::stem(t);
    return tokens;
}

double rougeLF(const std::string& reference, const std::string& candidate) {
    const std::vector<std::string> r = rougeTokens(reference), c = rougeTokens(candidate);
    if (r.empty() || c.empty())
        return 0.0;
    std::vector<int64_t> prev(c.size() + 1, 0), cur(c.size() + 1, 0);
    for (size_t i = 1; i <= r.size(); ++i) {
        for (size_t j = 1; j <= c.size(); ++j)
            cur[j] = r[i - 1] == c[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
        std::swap(prev, cur);
    }
    const double lcs = static_cast<double>(prev[c.size()]);
    const double precision = lcs / static_cast<double>(c.size());
    const double recall = lcs / static_cast<double>(r.size());
    return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

int64_t matchLengthChars(const std::string& generation, const std::string& reference) {
    std::u32string g = toU32(generation), r = toU32(reference);
    auto strip = [](std::u32string& s) {
        size_t b = 0;
        while (b < s.size() && isSpace(s[b]))
            ++b;
        s.erase(0, b);
    };
    strip(g);
    strip(r);
    const size_t n = std::min(g.size(), r.size());
    for (size_t i = 0; i < n; ++i)
        if (g[i] != r[i])
            return static_cast<int64_t>(i);
    return static_cast<int64_t>(r.size());
}

bool needleFound(const std::string& output, const std::string& key) {
    return !key.empty() && output.find(key) != std::string::npos;
}

int64_t utf8Length(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s)
        n += (c & 0xC0) != 0x80;
    return n;
}

} // namespace sparqlab::analysis
