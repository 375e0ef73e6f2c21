// TriviaQA (paper App. G.1): open book, 0-shot, one evidence document in the prompt; exact
// match against any alias.

#include "analysis/eval_task_spec.h"
#include "analysis/eval_text.h"

#include <filesystem>
#include <random>

namespace sparqlab::analysis {
namespace {

using namespace evaltext;

namespace fs = std::filesystem;

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

std::vector<EvalExample> readTriviaqa(const std::string& raw, const std::string& path,
                                      const EvalDataOptions& o) {
    return triviaqaExamples(raw, path, o);
}

} // namespace
} // namespace sparqlab::analysis

SPARQLAB_EVAL_TASK(triviaqa) {
    return {.id = EvalTask::TriviaQA,
            .name = "triviaqa",
            .label = "TriviaQA",
            .summary =
                "open-book questions with one evidence document, exact match against any alias "
                "(paper App. G.1)",
            .metric = "exact_match",
            .metricLabel = "exact match",
            .data = "TriviaQA rc JSON, or JSON/JSONL rows as Hugging Face's trivia_qa",
            .read = readTriviaqa,
            .score = qaExactMatchScore};
}
