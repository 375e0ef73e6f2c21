// RULER's synthetic tasks (analysis/ruler.h) checked as LONGCONTEXT.md §10 says, with no model:
// on the demo's tokenizer, the shipped SOTU haystack and Debian's word list, at the demo's
// context (1,024) and at 4,096 — determinism, the length budget and its margin, the templates,
// every needle once and recoverable, the VT chain, the CWE and FWE counts, the metrics, and an
// oracle that answers the gold strings scoring 100%.

#include "test_support.h"

#include "analysis/ruler.h"
#include "analysis/ruler_table.h"
#include "capture/resources.h"
#include "capture/tokenizer.h"

#include <QtTest>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

using namespace sparqlab::analysis;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        ++n;
    return n;
}

/// How far below the budget a sample may end: the tokens of the step it shrinks by (a tenth of
/// RULER's inc: 50 essay words, 2 noise paragraphs or needles; a CWE word with its repeats; an
/// FWE step of (L − T_gen)/32 coded words), plus what random draws change.
int64_t margin(const ruler::TaskDef& t, int64_t L) {
    switch (t.kind) {
    case ruler::Kind::Niah:
        return std::string(t.niah.haystack) == "essay" ? 100 : 120;
    case ruler::Kind::VariableTracking:
        return 40;
    case ruler::Kind::CommonWords:
        return L < 4096 ? 80 : 350; // each retry draws new words: ten of them 30 times
    case ruler::Kind::FrequentWords:
        return (L - t.tokensToGenerate) / 32 * 7 + 20; // random letters: up to 7 tokens a word
    }
    return 0;
}

} // namespace

class TestRuler : public QObject {
    Q_OBJECT
    std::unique_ptr<sparqlab::capture::Tokenizer> m_tok;
    ruler::Resources m_res;
    ruler::CountTokens m_count;

private Q_SLOTS:
    void initTestCase() {
        m_tok = sparqlab::capture::Tokenizer::fromFile(
            sparqlab::capture::resourcePath("demo-model/tokenizer.json"));
        const std::string words = slurp("/usr/share/dict/american-english");
        if (words.empty())
            QSKIP("no /usr/share/dict/american-english (Debian's wamerican)");
        m_res = ruler::makeResources(
            slurp(sparqlab::capture::resourcePath("eval/sotu-2010-2011.txt")), words, "test");
        m_count = [this](const std::string& s) {
            return static_cast<int64_t>(m_tok->encode(s, false).size());
        };
    }

    void everyTaskKeepsRulersInvariants_data() {
        QTest::addColumn<QString>("task");
        QTest::addColumn<qint64>("length");
        for (const ruler::TaskDef& t : ruler::tasks())
            for (const qint64 L : {qint64{1024}, qint64{4096}})
                QTest::newRow(qPrintable(QStringLiteral("%1 at %2").arg(t.name).arg(L)))
                    << QString::fromLatin1(t.name) << L;
    }

    void everyTaskKeepsRulersInvariants() {
        QFETCH(QString, task);
        QFETCH(qint64, length);
        const ruler::TaskDef& t = *ruler::findTask(task.toStdString());
        const int64_t n = 3;
        std::vector<ruler::Sample> a;
        try {
            a = ruler::generate(t, length, n, 42, m_res, m_count);
        } catch (const std::exception& e) {
            QFAIL(e.what());
        }
        QCOMPARE(static_cast<int64_t>(a.size()), n);
        // Determinism: the same seed gives the same samples, another seed others.
        const auto b = ruler::generate(t, length, n, 42, m_res, m_count);
        const auto c = ruler::generate(t, length, n, 43, m_res, m_count);
        bool differs = false;
        for (int64_t i = 0; i < n; ++i) {
            QCOMPARE(a[i].input, b[i].input);
            QCOMPARE(a[i].outputs, b[i].outputs);
            differs = differs || a[i].input != c[i].input;
        }
        QVERIFY(differs);
        for (const ruler::Sample& s : a) {
            // The budget and its margin: within one haystack unit of the limit.
            const int64_t tokens = m_count(s.input + s.answerPrefix);
            QCOMPARE(s.length, tokens + t.tokensToGenerate);
            QVERIFY2(s.length <= length, qPrintable(QString::number(s.length)));
            QVERIFY2(s.length >= length - margin(t, length),
                     qPrintable(QStringLiteral("%1 tokens, target %2").arg(s.length).arg(length)));
            // The oracle: the gold strings score 100%, nothing scores 0.
            std::string all;
            for (const std::string& o : s.outputs)
                all += o + ", ";
            QCOMPARE(ruler::stringMatchAll(all, s.outputs), 1.0);
            QCOMPARE(ruler::stringMatchAll("", s.outputs), 0.0);
            switch (t.kind) {
            case ruler::Kind::Niah:
                checkNiah(t, s);
                break;
            case ruler::Kind::VariableTracking:
                checkVt(s);
                break;
            case ruler::Kind::CommonWords:
                checkCwe(s, length);
                break;
            case ruler::Kind::FrequentWords:
                checkFwe(s);
                break;
            }
        }
    }

    void manySeedsFitTheDemosContext() {
        // The demo's whole context (1,024) is tight for the four-needle tasks: every seed fits.
        for (const ruler::TaskDef& t : ruler::tasks())
            for (uint64_t seed = 0; seed < 12; ++seed) {
                try {
                    for (const ruler::Sample& s :
                         ruler::generate(t, 1024, 1, seed * 7919 + 5, m_res, m_count))
                        QVERIFY(s.length <= 1024);
                } catch (const std::exception& e) {
                    QFAIL(qPrintable(
                        QStringLiteral("%1, seed %2: %3").arg(t.name).arg(seed).arg(e.what())));
                }
            }
    }

    void theTableIsTheMeanOfEachTaskAndLength() {
        // Two methods × two tasks × two lengths; the average is the mean of the task scores.
        std::string lines;
        auto line = [&](const char* task, const char* method, const char* params, int L, double v,
                        double comp) {
            lines += std::string("{\"task\":\"") + task + "\",\"data\":\"d\",\"example\":\"" +
                     task + std::to_string(L) + std::to_string(lines.size()) + "\",\"method\":\"" +
                     method + "\",\"params\":" + params +
                     ",\"metric\":\"string_match_all\",\"value\":" + std::to_string(v) +
                     ",\"seq_len\":10,\"compression\":" + std::to_string(comp) +
                     ",\"length\":" + std::to_string(L) + "}\n";
        };
        for (const int L : {512, 1024}) {
            line("vt", "dense", "{}", L, 1.0, 1);
            line("vt", "dense", "{}", L, 0.5, 1);
            line("cwe", "dense", "{}", L, L == 512 ? 0.2 : 0.0, 1);
            line("vt", "sparq", "{\"r\":16,\"k\":64}", L, 0.0, 0.25);
            line("cwe", "sparq", "{\"r\":16,\"k\":64}", L, 0.1, 0.25);
        }
        line("squad", "dense", "{}", 0, 1.0, 1); // not a RULER task: left out
        const std::vector<EvalRecord> records = parseEvalJsonl(lines, "r.jsonl");
        std::map<std::string, double> at;
        for (const RulerCell& c : rulerCells(records))
            at[c.point + "|" + std::to_string(c.length) + "|" + c.task] = c.score;
        QCOMPARE(at.at("dense|512|vt"), 75.0);
        QCOMPARE(at.at("dense|512|cwe"), 20.0);
        QCOMPARE(at.at("dense|512|average"), 47.5);
        QCOMPARE(at.at("dense|1024|average"), 37.5);
        QCOMPARE(at.at("sparq k=64 r=16|1024|average"), 5.0);
        QCOMPARE(at.size(), size_t{12});
        const std::string md = rulerTableMarkdown(records);
        QVERIFY(md.find("### sparq k=64 r=16") != std::string::npos);
        QVERIFY(md.find("| **average** | 47.50 | 37.50 |") != std::string::npos);
        const std::vector<sparqlab::analysis::FigureData> figs = rulerFigures(records);
        QCOMPARE(figs.size(), size_t{3}); // score against length; against compression at 512, 1024
        QCOMPARE(figs[0].series.size(), size_t{2});
        QCOMPARE(figs[0].series[1].y, (std::vector<double>{5.0, 5.0}));
        QVERIFY(rulerTableCsv(records).find("\"sparq k=64 r=16\",512,average,2,5.00,0.2500") !=
                std::string::npos);
    }

    void metricsAsRulerScoresThem() {
        const std::vector<std::string> refs{"1234567", "7654321"};
        QCOMPARE(ruler::stringMatchAll("The numbers are 1234567.", refs), 0.5);
        QCOMPARE(ruler::stringMatchPart("The numbers are 1234567.", refs), 1.0);
        QCOMPARE(ruler::stringMatchAll("abc", {"ABC"}), 1.0);
        QCOMPARE(ruler::stringMatchPart("", refs), 0.0);
        QCOMPARE(ruler::postprocess("  a\tb\x01 c \n"), std::string("a\nb\n c"));
    }

    void aLengthTooSmallIsOneLine() {
        QVERIFY_THROWS_EXCEPTION(
            std::invalid_argument,
            ruler::generate(*ruler::findTask("niah_single_2"), 100, 1, 42, m_res, m_count));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                                 ruler::makeResources("", "a\nb\n", "empty.txt"));
    }

private:
    void checkNiah(const ruler::TaskDef& t, const ruler::Sample& s) {
        const ruler::NiahSettings& c = t.niah;
        const std::string singular =
            c.queries * c.values == 1 ? "A special magic " : "Some special magic ";
        QVERIFY(s.input.rfind(singular, 0) == 0);
        // (Parsed by hand: std::regex recurses per character and overflows the stack on prompts
        // of thousands of tokens under AddressSanitizer.)
        const std::string tail = " mentioned in the provided text?";
        QVERIFY(s.input.size() > tail.size() &&
                s.input.compare(s.input.size() - tail.size(), tail.size(), tail) == 0);
        const size_t forAt = s.input.rfind(" for ", s.input.size() - tail.size());
        QVERIFY(forAt != std::string::npos);
        std::string keys = s.input.substr(forAt + 5, s.input.size() - tail.size() - forAt - 5);
        // "k1, k2, k3, and k4" or one key
        std::vector<std::string> queried;
        {
            std::string rest = keys;
            for (size_t at; (at = rest.find(", and ")) != std::string::npos;)
                rest.replace(at, 6, ", ");
            for (size_t from = 0;;) {
                const size_t comma = rest.find(", ", from);
                queried.push_back(rest.substr(from, comma - from));
                if (comma == std::string::npos)
                    break;
                from = comma + 2;
            }
        }
        QCOMPARE(static_cast<int>(queried.size()), c.queries);
        QVERIFY(s.answerPrefix.find(keys) != std::string::npos);
        // Every needle's value by key; the queried keys' values in order are the outputs.
        std::multimap<std::string, std::string> values;
        const std::string head = "One of the special magic ";
        for (size_t at = s.input.find(head); at != std::string::npos;
             at = s.input.find(head, at + 1)) {
            const size_t k = s.input.find(" for ", at) + 5, v = s.input.find(" is: ", k);
            const size_t end = s.input.find('.', v + 5);
            values.emplace(s.input.substr(k, v - k), s.input.substr(v + 5, end - v - 5));
        }
        std::vector<std::string> recovered;
        for (const std::string& k : queried) {
            QCOMPARE(static_cast<int>(values.count(k)), c.values);
            for (auto [lo, hi] = values.equal_range(k); lo != hi; ++lo)
                recovered.push_back(lo->second);
        }
        std::vector<std::string> want = s.outputs, got = recovered;
        std::sort(want.begin(), want.end()); // a key's values: order of the text, not of the draw
        std::sort(got.begin(), got.end());
        QCOMPARE(got, want);
        for (const std::string& v : s.outputs) {
            QCOMPARE(count(s.input, " is: " + v + "."), 1); // each gold needle once
            if (std::string(c.value) == "numbers")
                QVERIFY(std::regex_match(v, std::regex("[1-9][0-9]{6}")));
            else
                QVERIFY(std::regex_match(
                    v, std::regex(
                           "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
        }
        if (std::string(c.haystack) != "essay") { // needles are whole lines, never the last
            const size_t last = s.input.rfind('\n');
            for (const std::string& v : s.outputs) {
                const size_t at = s.input.find(" is: " + v + ".");
                QVERIFY(at < last);
                QCOMPARE(s.input[s.input.find('.', at + 5 + v.size() - 1) + 1], '\n');
            }
        }
    }

    void checkVt(const ruler::Sample& s) {
        const size_t task = s.input.rfind("Memorize and track");
        QVERIFY(task != std::string::npos && task > 0); // after the one-shot example
        const std::string text = s.input.substr(task);
        const std::string q = "assigned the value ";
        const size_t qAt = text.find(q);
        QVERIFY(qAt != std::string::npos);
        const std::string value = text.substr(qAt + q.size(), 5);
        // Statements "VAR NAME = 12345" and "VAR NAME = VAR OTHER" (parsed by hand, as above).
        std::vector<std::pair<std::string, std::string>> assigned; // name, value or name
        for (size_t at = text.find("VAR "); at != std::string::npos;
             at = text.find("VAR ", at + 4)) {
            const size_t eq = text.find(" = ", at);
            if (eq == std::string::npos || eq - at - 4 != 5)
                continue; // "VAR X" on the right-hand side, read with its statement
            const std::string name = text.substr(at + 4, 5);
            const std::string rhs = text.compare(eq + 3, 4, "VAR ") == 0 ? text.substr(eq + 7, 5)
                                                                         : text.substr(eq + 3, 5);
            assigned.emplace_back(name, rhs);
            at = eq;
        }
        std::vector<std::string> got;
        for (const auto& [name, rhs] : assigned)
            if (rhs == value)
                got.push_back(name);
        QCOMPARE(static_cast<int>(got.size()), 1);
        for (int hop = 0; hop < 4; ++hop)
            for (const auto& [name, rhs] : assigned)
                if (rhs == got.back())
                    got.push_back(name);
        QCOMPARE(got, s.outputs);
        // The example's names have 3 letters.
        const std::string example = s.input.substr(0, task);
        for (size_t at = example.find("VAR "); at != std::string::npos;
             at = example.find("VAR ", at + 4))
            QCOMPARE(example.find_first_of(" \n", at + 4) - (at + 4), size_t{3});
    }

    void checkCwe(const ruler::Sample& s, int64_t L) {
        const size_t at = s.input.rfind("Below is a numbered list of words.");
        QVERIFY(at != std::string::npos && at > 0);
        std::string list = s.input.substr(at);
        list = list.substr(list.find('\n') + 1);
        list = list.substr(0, list.find("\nQuestion:"));
        std::map<std::string, int> times;
        int expect = 1;
        std::istringstream entries(list);
        for (std::string number, word; entries >> number >> word;) {
            QCOMPARE(number, std::to_string(expect++) + ".");
            ++times[word];
        }
        const int common = L < 4096 ? 6 : 30, rare = L < 4096 ? 1 : 3;
        std::vector<std::string> top;
        for (const auto& [w, n] : times) {
            QVERIFY(n == common || n == rare);
            if (n == common)
                top.push_back(w);
        }
        std::vector<std::string> want = s.outputs;
        std::sort(want.begin(), want.end());
        QCOMPARE(top, want);
    }

    void checkFwe(const ruler::Sample& s) {
        const std::string head = "coded words. ";
        std::string text = s.input.substr(s.input.find(head) + head.size());
        text = text.substr(0, text.find("\nQuestion:"));
        std::map<std::string, int> times;
        std::istringstream in(text);
        for (std::string w; in >> w;)
            ++times[w];
        std::vector<std::pair<int, std::string>> byCount;
        for (const auto& [w, n] : times)
            byCount.emplace_back(n, w);
        std::sort(byCount.rbegin(), byCount.rend());
        QCOMPARE(byCount[0].second, std::string("..."));
        QVERIFY(byCount[1].first > byCount[2].first && byCount[2].first > byCount[3].first);
        QCOMPARE(s.outputs, (std::vector<std::string>{byCount[1].second, byCount[2].second,
                                                      byCount[3].second}));
    }
};

QTEST_GUILESS_MAIN(TestRuler)
#include "test_ruler.moc"
