#include "ruler_task.h"

#include "analysis/eval_text.h"
#include "analysis/ruler.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

namespace sparqlab::analysis {

namespace {

/// A word list's text, read once per path and modification time (every RULER task of a study
/// reads the same megabyte).
std::string wordList(const std::string& path) {
    static std::mutex mutex;
    static std::map<std::string, std::pair<std::filesystem::file_time_type, std::string>> cache;
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(path, ec);
    const std::lock_guard<std::mutex> lock(mutex);
    if (!ec) {
        const auto it = cache.find(path);
        if (it != cache.end() && it->second.first == mtime)
            return it->second.second;
    }
    std::string text = evaltext::readAll(path);
    if (!ec)
        cache[path] = {mtime, text};
    return text;
}

/// The lengths of --length that the model's context holds (one line naming the task when none
/// does, or one leaves nothing beside the tokens to generate).
std::vector<int64_t> lengthsThatFit(const std::string& name, int64_t tgen,
                                    const EvalDataOptions& o) {
    if (o.samples < 1)
        throw EvalDataError(name + ": --samples must be at least 1, got " +
                            std::to_string(o.samples));
    if (!o.countTokens)
        throw EvalDataError(name + ": RULER sizes its examples with the model's tokenizer");
    std::vector<int64_t> lengths = o.haystackTokens;
    if (lengths.empty())
        lengths = {o.contextTokens};
    std::vector<int64_t> fit;
    for (const int64_t L : lengths)
        if (L <= o.contextTokens + o.wrapperTokens) // L counts the chat template's tokens
            fit.push_back(L);
    for (const int64_t L : fit)
        if (L <= tgen) // checked before any data is read
            throw EvalDataError(name + ": a length of " + std::to_string(L) +
                                " leaves nothing beside the " + std::to_string(tgen) +
                                " tokens to generate");
    if (fit.empty()) {
        std::string asked;
        for (const int64_t L : lengths)
            asked += (asked.empty() ? "" : ",") + std::to_string(L);
        throw EvalDataError(name + ": every --length (" + asked +
                            ") is above the model's context of " +
                            std::to_string(o.contextTokens + o.wrapperTokens) + " tokens");
    }
    return fit;
}

/// Tokens as RULER counts them: the whole prompt it sends, the chat template's tokens too.
ruler::CountTokens promptTokens(const EvalDataOptions& o) {
    return [&o](const std::string& s) { return o.countTokens(s) + o.wrapperTokens; };
}

/// Each (task, length) its own stream, as RULER seeds each run.
uint64_t streamSeed(const std::string& name, int64_t L, const EvalDataOptions& o) {
    return o.seed * 1000003ULL + static_cast<uint64_t>(L) * 31ULL + std::hash<std::string>{}(name);
}

void appendExamples(std::vector<EvalExample>& out, const std::string& name, int64_t L, int64_t tgen,
                    std::vector<ruler::Sample> samples) {
    for (size_t i = 0; i < samples.size(); ++i) {
        EvalExample e;
        e.id = name + "-L" + std::to_string(L) + "-" + std::to_string(i);
        e.prompt = std::move(samples[i].input);
        e.answerPrefix = std::move(samples[i].answerPrefix);
        e.answers = std::move(samples[i].outputs);
        e.maxNewTokens = tgen;
        e.haystackTokens = L;
        out.push_back(std::move(e));
    }
}

/// Sorted distinct documents and each question's indices into them.
struct DocIndex {
    std::map<std::string, size_t> at;
    void add(const std::string& doc) { at.emplace(doc, 0); }
    std::vector<std::string> finish() {
        std::vector<std::string> docs;
        for (auto& [doc, i] : at) {
            i = docs.size();
            docs.push_back(doc);
        }
        return docs;
    }
};

ruler::QaData squadQa(const std::string& text, const std::string& path) {
    using namespace evaltext;
    const std::vector<SquadRow> rows = squadRows(text, path, /*unanswerable=*/true);
    DocIndex index;
    std::map<size_t, std::vector<std::string>> articleDocs; // article → its paragraphs, in order
    for (const SquadRow& r : rows) {
        index.add(r.context);
        std::vector<std::string>& a = articleDocs[r.article];
        if (std::find(a.begin(), a.end(), r.context) == a.end())
            a.push_back(r.context);
    }
    ruler::QaData d;
    d.docs = index.finish();
    for (const SquadRow& r : rows) {
        if (r.answers.empty())
            continue; // unanswerable: a document, never a question
        ruler::QaData::Question q{r.question, {index.at.at(r.context)}, {}, r.answers};
        for (const std::string& other : articleDocs[r.article])
            if (other != r.context)
                q.more.push_back(index.at.at(other));
        d.questions.push_back(std::move(q));
    }
    if (d.questions.empty())
        throw EvalDataError(path + ": no answerable SQuAD questions");
    return d;
}

ruler::QaData hotpotQa(const std::string& text, const std::string& path) {
    using namespace evaltext;
    const json j = parseJson(text, path);
    if (!j.is_array() || j.empty())
        throw EvalDataError(path + ": expected HotpotQA JSON (a list of questions)");
    DocIndex index;
    std::vector<std::pair<std::string, std::string>> asked; // question, answer
    std::vector<std::vector<std::string>> golds;
    for (size_t i = 0; i < j.size(); ++i) {
        const std::string where = path + ": [" + std::to_string(i) + "]";
        asked.emplace_back(stringField(j[i], "question", where),
                           stringField(j[i], "answer", where));
        if (!j[i].contains("context") || !j[i]["context"].is_array() || j[i]["context"].empty())
            throw EvalDataError(where + ": expected a \"context\" list of [title, sentences]");
        golds.emplace_back();
        for (const json& par : j[i]["context"]) {
            if (!par.is_array() || par.size() != 2 || !par[0].is_string())
                throw EvalDataError(where + ": a context entry is not [title, sentences]");
            std::string doc = par[0].get<std::string>() + "\n";
            for (const std::string& sentence : stringList(par[1], where + ".context"))
                doc += sentence;
            index.add(doc);
            golds.back().push_back(std::move(doc));
        }
    }
    ruler::QaData d;
    d.docs = index.finish();
    for (size_t i = 0; i < asked.size(); ++i) {
        ruler::QaData::Question q{asked[i].first, {}, {}, {asked[i].second}};
        for (const std::string& doc : golds[i])
            if (const size_t at = index.at.at(doc);
                std::find(q.gold.begin(), q.gold.end(), at) == q.gold.end())
                q.gold.push_back(at);
        d.questions.push_back(std::move(q));
    }
    return d;
}

} // namespace

std::vector<EvalExample> rulerExamples(const std::string& name, const std::string& text,
                                       const std::string& path, const EvalDataOptions& o) {
    if (name == "qa_1" || name == "qa_2")
        return rulerQaExamples(name, text, path, o);
    const ruler::TaskDef* t = ruler::findTask(name);
    if (!t)
        throw EvalDataError(name + ": not a RULER task");
    const std::vector<int64_t> fit = lengthsThatFit(name, t->tokensToGenerate, o);
    ruler::Resources r;
    try {
        r = ruler::makeResources(text, wordList(o.wordsPath), path);
    } catch (const std::invalid_argument& e) {
        throw EvalDataError(e.what());
    } catch (const EvalDataError& e) {
        throw EvalDataError(std::string(e.what()) +
                            " (RULER's word list: install Debian's wamerican or give --words F)");
    }
    std::vector<EvalExample> out;
    for (const int64_t L : fit) {
        try {
            appendExamples(
                out, name, L, t->tokensToGenerate,
                ruler::generate(*t, L, o.samples, streamSeed(name, L, o), r, promptTokens(o)));
        } catch (const std::invalid_argument& e) {
            throw EvalDataError(path + ": " + e.what());
        }
    }
    return out;
}

std::vector<EvalExample> rulerQaExamples(const std::string& name, const std::string& text,
                                         const std::string& path, const EvalDataOptions& o) {
    const std::vector<int64_t> fit = lengthsThatFit(name, ruler::kQaTokensToGenerate, o);
    const ruler::QaData d = name == "qa_1" ? squadQa(text, path) : hotpotQa(text, path);
    std::vector<EvalExample> out;
    for (const int64_t L : fit) {
        try {
            appendExamples(
                out, name, L, ruler::kQaTokensToGenerate,
                ruler::generateQa(d, name, L, o.samples, streamSeed(name, L, o), promptTokens(o)));
        } catch (const std::invalid_argument& e) {
            throw EvalDataError(path + ": " + e.what());
        }
    }
    return out;
}

double rulerScoreAll(const std::string& output, const EvalExample& ex) {
    return ruler::stringMatchAll(output, ex.answers);
}

double rulerScorePart(const std::string& output, const EvalExample& ex) {
    return ruler::stringMatchPart(output, ex.answers);
}

nlohmann::json rulerFields(const EvalExample& ex) {
    return {{"length", ex.haystackTokens}};
}

} // namespace sparqlab::analysis
