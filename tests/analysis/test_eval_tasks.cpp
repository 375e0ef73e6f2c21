// The evaluation tasks without a model: each metric on hand-made examples whose answer is
// known, each reader on a tiny file of its format, and their errors.

#include "test_support.h"

#include "analysis/eval_figures.h"
#include "analysis/eval_task_spec.h"
#include "analysis/eval_task_table.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace sparqlab::analysis;

namespace {
/// One token per 4 characters (the readers size examples with it).
EvalDataOptions options(int64_t context = 2048) {
    EvalDataOptions o;
    o.contextTokens = context;
    o.countTokens = [](const std::string& s) { return (utf8Length(s) + 3) / 4; };
    return o;
}

std::string write(const QTemporaryDir& dir, const char* name, const std::string& text) {
    const QString path = dir.filePath(QString::fromUtf8(name));
    sparqlab::test::writeFile(path, QByteArray::fromStdString(text));
    return path.toStdString();
}

bool startsWith(const std::string& s, const std::string& p) {
    return s.compare(0, p.size(), p) == 0;
}
bool endsWith(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
} // namespace

class TestEvalTasks : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    void exactMatchAsTheHarness() {
        QVERIFY(qaExactMatch(" 1978", {"1978"}));
        QVERIFY(qaExactMatch(" The Fresno, California area", {"Fresno"})); // "the " dropped
        QVERIFY(qaExactMatch("\"Dubonnet\".\n", {"the Dubonnet", "Byrrh"}));
        QVERIFY(qaExactMatch(" an apple a day", {"Apple"}));
        QVERIFY(!qaExactMatch(" In Fresno", {"Fresno"})); // must start with the answer
        QVERIFY(!qaExactMatch(" 1979", {"1978"}));
        QVERIFY(!qaExactMatch(" anything", {"", "  "}));     // empty answers never match
        QVERIFY(qaExactMatch(" Élysée palace", {"élysée"})); // lower case beyond ASCII
        // Python's str.lower in every script (Armenian, Latin Extended-A), not a few blocks.
        QVERIFY(qaExactMatch(" ՀԱՅԱՍՏԱՆ", {"հայաստան"}));
        QVERIFY(qaExactMatch(" ĀRIJA", {"ārija"}));
    }

    void porterStemsAsNltk() {
        const std::vector<std::pair<const char*, const char*>> cases{
            {"caresses", "caress"},    {"ponies", "poni"},      {"ties", "tie"},
            {"cats", "cat"},           {"feed", "feed"},        {"agreed", "agre"},
            {"plastered", "plaster"},  {"motoring", "motor"},   {"sing", "sing"},
            {"conflated", "conflat"},  {"hopping", "hop"},      {"falling", "fall"},
            {"filing", "file"},        {"happy", "happi"},      {"relational", "relat"},
            {"conditional", "condit"}, {"rational", "ration"},  {"digitizer", "digit"},
            {"operator", "oper"},      {"hopefulness", "hope"}, {"goodness", "good"},
            {"adjustment", "adjust"},  {"effective", "effect"}, {"generalization", "gener"},
            {"dying", "die"},          {"radically", "radic"},  {"skies", "sky"}};
        for (const auto& [word, stem] : cases)
            QVERIFY2(porterStem(word) == stem,
                     qPrintable(QStringLiteral("%1 -> %2, want %3")
                                    .arg(word, QString::fromStdString(porterStem(word)), stem)));
    }

    void rougeLByHand() {
        // LCS 5 of 6 tokens either way: P = R = F = 5/6.
        QVERIFY(std::abs(rougeLF("the cat sat on the mat", "the cat is on the mat") - 5.0 / 6) <
                1e-12);
        // Stemming: "running dogs" = "run dog"; case and punctuation do not count.
        QCOMPARE(rougeLF("Running dogs!", "run, dog"), 1.0);
        // P = 2/2, R = 2/4: F = 2·1·0.5 / 1.5 = 2/3.
        QVERIFY(std::abs(rougeLF("police arrested two men", "police men") - 2.0 / 3) < 1e-12);
        QCOMPARE(rougeLF("", "anything"), 0.0);
        QCOMPARE(rougeLF("some words", "..."), 0.0);
        QCOMPARE(rougeTokens("It's 3 o'clock"),
                 (std::vector<std::string>{"it", "s", "3", "o", "clock"}));
    }

    void repetitionDivergesAtAKnownCharacter() {
        // "can; for my good " is 17 characters, then "uncle" against "aunt".
        QCOMPARE(matchLengthChars("  can; for my good uncle", " can; for my good aunt"),
                 int64_t{17});
        QCOMPARE(matchLengthChars(" abc", " abcdef"), int64_t{6}); // stopped early: all of it
        QCOMPARE(matchLengthChars("xyz", "abc"), int64_t{0});
        QCOMPARE(matchLengthChars("naïve café!", "naïve cafe"), int64_t{9}); // code points
        QVERIFY(needleFound(" 71432. Remember", "71432"));
        QVERIFY(!needleFound(" 7143", "71432"));
    }

    void repetitionExamplesFromText() {
        std::string text;
        for (int i = 0; text.size() < 20000; ++i)
            text += "Sentence number " + std::to_string(i) + " says something plain. ";
        const std::string path = write(m_dir, "rep.txt", text);
        EvalDataOptions o = options(1024);
        o.contextChars = 1200;
        const std::vector<EvalExample> ex = loadEvalExamples(EvalTask::Repetition, path, o);
        QVERIFY(ex.size() > 10);
        for (const EvalExample& e : ex) {
            const size_t nl = e.prompt.rfind('\n');
            QVERIFY(nl != std::string::npos);
            const std::string context = e.prompt.substr(0, nl), cue = e.prompt.substr(nl + 1);
            // The cue and its reference are a passage of the context, in order.
            QVERIFY(context.find(cue + e.reference) != std::string::npos);
            QVERIFY(utf8Length(cue) >= 128 && utf8Length(e.reference) >= 256);
            QVERIFY(e.reference[0] == ' ');
            QVERIFY(e.maxNewTokens >= 1 && e.maxNewTokens <= 128);
        }
    }

    void squadOneShotWithConfusionContexts() {
        const std::string json = R"({"data": [
 {"title": "Fresno,_California", "paragraphs": [{"context": "Fresno is a city in California.",
   "qas": [{"id": "q1", "question": "Where is Fresno?", "answers": [{"text": "California"}]},
           {"id": "q2", "question": "What is Fresno?", "answers": [{"text": "a city"}, {"text": "city"}]}]}]},
 {"title": "Oxygen", "paragraphs": [{"context": "Oxygen is an element.",
   "qas": [{"id": "q3", "question": "What is oxygen?", "answers": [{"text": "an element"}]}]}]},
 {"title": "Steam", "paragraphs": [{"context": "Steam is hot.",
   "qas": [{"id": "q4", "question": "Is steam hot?", "answers": [{"text": "yes"}]},
           {"id": "q5", "question": "Unanswerable?", "answers": []}]}]}]})";
        const std::vector<EvalExample> ex =
            loadEvalExamples(EvalTask::Squad, write(m_dir, "squad.json", json), options());
        QCOMPARE(ex.size(), size_t{4}); // q5 has no answer
        const EvalExample& q1 =
            *std::find_if(ex.begin(), ex.end(), [](const EvalExample& e) { return e.id == "q1"; });
        QVERIFY(startsWith(q1.prompt, "Title: "));
        QVERIFY(q1.prompt.find("Title: Fresno, California. Background: Fresno is a city") !=
                std::string::npos);
        // 1 + 7 contexts, then the instruction, one shot from the same context, the question.
        QCOMPARE(std::count(q1.prompt.begin(), q1.prompt.end(), '\n'), 8L + 4);
        QVERIFY(q1.prompt.find("From what you've just read about Fresno, California, please "
                               "answer the following questions.\nQuestion: What is Fresno?\n"
                               "Answer: city\nQuestion: Where is Fresno?\nAnswer:") !=
                std::string::npos);
        QVERIFY(endsWith(q1.prompt, "\nAnswer:"));
        QCOMPARE(q1.answers, std::vector<std::string>{"California"});
        QVERIFY(q1.maxNewTokens >= 6 && q1.maxNewTokens <= 30);
    }

    void triviaqaAndCnndm() {
        const std::string doc(5000, 'x');
        // (no raw strings ending in a quote here: moc misreads them)
        const std::string trivia =
            "[{\"question\": \"Which aperitif?\", \"question_id\": \"dpql_1\", \"answer\": "
            "{\"aliases\": [\"Dubonnet\", \"dubonnet\"]}, \"search_results\": "
            "{\"search_context\": [\"" +
            doc + "\", \"too short\"]}}]";
        EvalDataOptions o = options(2048);
        std::vector<EvalExample> ex =
            loadEvalExamples(EvalTask::TriviaQA, write(m_dir, "trivia.json", trivia), o);
        QCOMPARE(ex.size(), size_t{1});
        QCOMPARE(ex[0].prompt, doc + "\nQuestion: Which aperitif?\nAnswer:");
        QCOMPARE(ex[0].answers.size(), size_t{2});
        const std::string article(5000, 'a');
        const std::string cnndm = "{\"id\": \"a1\", \"article\": \"" + article +
                                  "\", \"highlights\": \"A short summary.\"}\n"
                                  "{\"article\": \"tiny\", \"highlights\": \"no\"}\n";
        ex = loadEvalExamples(EvalTask::CnnDm, write(m_dir, "cnn.jsonl", cnndm), o);
        QCOMPARE(ex.size(), size_t{1}); // the tiny article is outside the length range
        QCOMPARE(ex[0].id, std::string("a1"));
        QCOMPARE(ex[0].prompt, "Article: " + article + "\nSummary:");
        QCOMPARE(ex[0].reference, std::string("A short summary."));
    }

    void needleAndBpc() {
        std::string text;
        while (text.size() < 40000)
            text += "The hay is dry. It lies in the field. ";
        EvalDataOptions o = options(1024);
        o.depths = {0.0, 0.5, 1.0};
        o.haystackTokens = {200, 400};
        const std::vector<EvalExample> ex =
            loadEvalExamples(EvalTask::Needle, write(m_dir, "hay.txt", text), o);
        QCOMPARE(ex.size(), size_t{6});
        for (const EvalExample& e : ex) {
            const std::string needle = "The pass key is " + e.answers[0] + ".";
            const size_t at = e.prompt.find(needle);
            QVERIFY(at != std::string::npos);
            QVERIFY(endsWith(e.prompt, "\nWhat is the pass key? The pass key is"));
            const double where = static_cast<double>(at) / static_cast<double>(e.prompt.size());
            QVERIFY2(std::abs(where - e.depth) < 0.15, qPrintable(QString::number(where)));
        }
        const std::vector<EvalExample> lines = loadEvalExamples(
            EvalTask::Bpc, write(m_dir, "b.jsonl", "{\"text\": \"one\"}\n\n{\"text\": \"two\"}\n"),
            o);
        QCOMPARE(lines.size(), size_t{2});
        QCOMPARE(lines[1].text, std::string("two"));
        QCOMPARE(lines[1].id, std::string("line 3"));
        const std::vector<EvalExample> plain =
            loadEvalExamples(EvalTask::Bpc, write(m_dir, "plain.txt", "Just text.\n"), o);
        QCOMPARE(plain.size(), size_t{1});
        QCOMPARE(plain[0].text, std::string("Just text.\n"));
    }

    void lambadaAsTheHarnessReadsIt() {
        // lm-eval's lambada_openai: the context is the text up to its last space, the target the
        // word after it; a greedy continuation counts where it begins with that word, whole.
        const std::string rows = "{\"text\": \"He handed her the cup and she drank the tea\"}\n\n"
                                 "{\"text\": \"They called the dog Rex. At noon she fed Rex\"}\n";
        const std::vector<EvalExample> ex =
            loadEvalExamples(EvalTask::Lambada, write(m_dir, "lambada.jsonl", rows), options());
        QCOMPARE(ex.size(), size_t{2});
        QCOMPARE(ex[0].prompt, std::string("He handed her the cup and she drank the"));
        QCOMPARE(ex[0].answers, std::vector<std::string>{"tea"});
        QCOMPARE(ex[0].maxNewTokens, int64_t{2}); // " tea" (one token at 4 characters) and one
        QCOMPARE(ex[1].id, std::string("line 3"));
        QCOMPARE(ex[1].answers, std::vector<std::string>{"Rex"});
        const auto score = evalTaskSpec(EvalTask::Lambada).score;
        QCOMPARE(score(" tea", ex[0]), 1.0);
        QCOMPARE(score(" tea. Then she left", ex[0]), 1.0);
        QCOMPARE(score("tea", ex[0]), 1.0); // (a SentencePiece decoder drops the space)
        QCOMPARE(score(" teapot", ex[0]), 0.0);
        QCOMPARE(score(" tea\u00e9", ex[0]), 0.0); // (a letter beyond ASCII goes on the word)
        QCOMPARE(score(" Tea", ex[0]), 0.0);       // case counts, as the harness's tokens do
        QCOMPARE(score(" coffee", ex[0]), 0.0);
        QCOMPARE(score("\ntea", ex[0]), 0.0);
        QCOMPARE(score("", ex[0]), 0.0);
        QCOMPARE(score(" Rex's bowl", ex[1]), 1.0);
    }

    void badDataNamesTheFile() {
        auto fails = [&](EvalTask t, const char* name, const std::string& text,
                         const QString& want) {
            const std::string path = write(m_dir, name, text);
            try {
                loadEvalExamples(t, path, options());
                QFAIL(qPrintable(QString::fromUtf8(name) + " was accepted"));
            } catch (const EvalDataError& e) {
                const QString msg = QString::fromUtf8(e.what());
                QVERIFY2(msg.startsWith(QString::fromStdString(path)) && msg.contains(want) &&
                             !msg.contains('\n'),
                         qPrintable(msg));
            }
        };
        fails(EvalTask::Squad, "s1.json", "{\"data\": [{\"paragraphs\": []", "malformed JSON");
        fails(EvalTask::Squad, "s2.json",
              R"({"data": [{"paragraphs": [{"context": "c", "qas": []}]}]})", "\"title\"");
        fails(EvalTask::CnnDm, "c1.jsonl", "{\"article\": \"x\"}\n", "\"highlights\"");
        fails(EvalTask::CnnDm, "c2.jsonl", "not json\n", "line 1");
        fails(EvalTask::TriviaQA, "t1.json", R"([{"question": "q", "question_id": "1"}])",
              "aliases");
        fails(EvalTask::Bpc, "b1.jsonl", "{\"txt\": 1}\n", "\"text\"");
        fails(EvalTask::Repetition, "r1.txt", "short", "too short");
        fails(EvalTask::Needle, "n1.txt", "short", "too short");
        fails(EvalTask::Lambada, "l1.jsonl", "{\"text\": \"oneword\"}\n", "last word");
        fails(EvalTask::Lambada, "l2.jsonl", "{\"text\": \"ends with a space \"}\n", "line 1");
        fails(EvalTask::Lambada, "l3.jsonl", "{\"passage\": \"a b\"}\n", "\"text\"");
        try {
            loadEvalExamples(EvalTask::Bpc, m_dir.filePath("none.txt").toStdString(), options());
            QFAIL("a missing file was accepted");
        } catch (const EvalDataError& e) {
            QVERIFY(QString::fromUtf8(e.what()).contains(QStringLiteral("cannot read")));
        }
    }

    void resultsFileAndTable() {
        // Two examples, dense and SparQ at two ranks: means, standard errors, nearest targets.
        auto line = [](const char* m, const char* params, const char* ex, double v, double c) {
            return std::string("{\"task\":\"squad\",\"data\":\"d\",\"example\":\"") + ex +
                   "\",\"method\":\"" + m + "\",\"params\":" + params +
                   ",\"metric\":\"exact_match\",\"value\":" + std::to_string(v) +
                   ",\"seq_len\":100,\"compression\":" + std::to_string(c) +
                   ",\"model\":\"m\",\"created_by\":\"t\"}\n";
        };
        const std::string text = line("dense", "{}", "a", 1, 1) + line("dense", "{}", "b", 0, 1) +
                                 line("sparq", R"({"r":8,"k":16})", "a", 1, 0.12) +
                                 line("sparq", R"({"r":8,"k":16})", "b", 1, 0.13) +
                                 line("sparq", R"({"r":32,"k":16})", "a", 1, 0.26) +
                                 line("sparq", R"({"r":32,"k":16})", "b", 0, 0.24);
        const std::vector<EvalRecord> recs = parseEvalJsonl(text, "r.jsonl");
        const std::vector<EvalPointStats> s = summariseEval(recs);
        QCOMPARE(s.size(), size_t{3});
        QCOMPARE(s[0].mean, 0.5);
        QVERIFY(std::abs(s[0].stderr_ - 0.5) < 1e-12); // sd √0.5 / √2
        QVERIFY(std::abs(s[1].compression - 0.125) < 1e-12);
        const std::string md = evalTableMarkdown(recs);
        QVERIFY2(md.find("| SparQ | — | 0.500 ± 0.500 | 1.000 ± 0.000 |") != std::string::npos,
                 md.c_str());
        const std::vector<FigureData> figs = evalFigures(recs);
        QCOMPARE(figs.size(), size_t{2});           // the trade-off and SparQ's r sweep
        QCOMPARE(figs[0].series.size(), size_t{2}); // dense reference and SparQ
        QCOMPARE(figs[0].series[1].yErr.size(), size_t{2});
        QCOMPARE(figs[0].caption,
                 std::string("Each point: the mean over its 2 examples; the shaded "
                             "band: ± one standard error of that mean; dashed: "
                             "dense."));
        try {
            parseEvalJsonl(line("dense", "{}", "a", 1, 1) + "{\"task\": 3}\n", "bad.jsonl");
            QFAIL("a bad line was accepted");
        } catch (const EvalFileError& e) {
            QVERIFY(QString::fromUtf8(e.what()).startsWith(QStringLiteral("bad.jsonl line 2")));
        }
    }
};

QTEST_GUILESS_MAIN(TestEvalTasks)
#include "test_eval_tasks.moc"
