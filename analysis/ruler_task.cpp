#include "ruler_task.h"

#include "analysis/eval_text.h"
#include "analysis/ruler.h"

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

} // namespace

std::vector<EvalExample> rulerExamples(const std::string& name, const std::string& text,
                                       const std::string& path, const EvalDataOptions& o) {
    const ruler::TaskDef* t = ruler::findTask(name);
    if (!t)
        throw EvalDataError(name + ": not a generated RULER task");
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
        if (L <= o.contextTokens)
            fit.push_back(L);
    for (const int64_t L : fit)
        if (L <= t->tokensToGenerate) // checked before the word list is read
            throw EvalDataError(name + ": a length of " + std::to_string(L) +
                                " leaves nothing beside the " +
                                std::to_string(t->tokensToGenerate) + " tokens to generate");
    if (fit.empty()) {
        std::string asked;
        for (const int64_t L : lengths)
            asked += (asked.empty() ? "" : ",") + std::to_string(L);
        throw EvalDataError(name + ": every --length (" + asked +
                            ") is above the model's context of " + std::to_string(o.contextTokens) +
                            " tokens");
    }
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
        std::vector<ruler::Sample> samples;
        try {
            // Each (task, length) its own stream, as RULER seeds each run.
            samples = ruler::generate(*t, L, o.samples,
                                      o.seed * 1000003ULL + static_cast<uint64_t>(L) * 31ULL +
                                          std::hash<std::string>{}(name),
                                      r, o.countTokens);
        } catch (const std::invalid_argument& e) {
            throw EvalDataError(path + ": " + e.what());
        }
        for (size_t i = 0; i < samples.size(); ++i) {
            EvalExample e;
            e.id = name + "-L" + std::to_string(L) + "-" + std::to_string(i);
            e.prompt = samples[i].input;
            e.answerPrefix = samples[i].answerPrefix;
            e.answers = samples[i].outputs;
            e.maxNewTokens = t->tokensToGenerate;
            e.haystackTokens = L;
            out.push_back(std::move(e));
        }
    }
    return out;
}

double rulerScoreAll(const std::string& output, const EvalExample& ex) {
    return ruler::stringMatchAll(output, ex.answers);
}

nlohmann::json rulerFields(const EvalExample& ex) {
    return {{"length", ex.haystackTokens}};
}

} // namespace sparqlab::analysis
