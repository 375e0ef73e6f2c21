// tokenizer.json against the Hugging Face tokenizers library (../shared/refs/tokenizers):
// identical ids for every case, with and without special tokens, and decode(ids) equal to
// the library's decode. Plus broken files and invalid UTF-8.

#include "test_support.h"

#include "text/tokenizer.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <set>

using namespace sparqlab;

// Rows kept outside the class: moc does not parse raw string literals.
static void addBrokenRows() {
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<QString>("message");
    QTest::newRow("not json") << QByteArray("{\"model\": ") << QStringLiteral("malformed JSON");
    QTest::newRow("no model") << QByteArray("{}") << QStringLiteral("no model object");
    QTest::newRow("unigram") << QByteArray(R"({"model": {"type": "Unigram", "vocab": []}})")
                             << QStringLiteral("'Unigram' is not supported");
    QTest::newRow("bad merge")
        << QByteArray(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})")
        << QStringLiteral("missing from the vocab");
    QTest::newRow("bad regex")
        << QByteArray(
               R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"}})")
        << QStringLiteral("does not compile");
    QTest::newRow("bad id") << QByteArray(R"({"model": {"type": "BPE", "vocab": {"a": -3}}})")
                            << QStringLiteral("has a bad id");
}

class TestTokenizer : public QObject {
    Q_OBJECT
    QStringList m_cases;
    std::map<QString, std::unique_ptr<text::Tokenizer>> m_tok;
    QStringList m_loadErrors;     ///< tokenizer folders that did not load, with why
    std::set<QString> m_unloaded; ///< their names

private Q_SLOTS:
    void initTestCase() {
        const QString cases =
            sparqlab::test::requireReference(QStringLiteral("refs/tokenizers/cases.txt"));
        QFile f(cases);
        QVERIFY(f.open(QIODevice::ReadOnly));
        for (const QByteArray& line : f.readAll().split('\n')) {
            if (line.isEmpty())
                continue;
            // Each line is one JSON string: wrap it in an array to parse it.
            const QJsonDocument d = QJsonDocument::fromJson("[" + line + "]");
            QVERIFY(d.isArray());
            m_cases << d.array().at(0).toString();
        }
        QVERIFY(!m_cases.isEmpty()); // (69 in the set shown)
        // Every tokenizer folder here (tests/data's compact references hold GPT-2's alone,
        // golden.jsonl its lines only); one that does not load is a failure of the golden test,
        // with the others still checked.
        const QString dir = sparqlab::test::sharedFile(QStringLiteral("refs/tokenizers"));
        for (const QString& name : QDir(dir).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
            if (!QFileInfo::exists(dir + "/" + name + "/tokenizer.json"))
                continue;
            try {
                m_tok[name] = text::Tokenizer::fromFolder((dir + "/" + name).toStdString());
            } catch (const std::exception& e) {
                m_loadErrors << name + ": " + QString::fromUtf8(e.what());
                m_unloaded.insert(name);
            }
        }
        QVERIFY(!m_tok.empty() || !m_loadErrors.isEmpty());
    }

    void matchesTheLibrary() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/tokenizers/golden.jsonl"));
        QFile f(sparqlab::test::sharedFile(QStringLiteral("refs/tokenizers/golden.jsonl")));
        QVERIFY(f.open(QIODevice::ReadOnly));
        int checked = 0;
        QStringList failures = m_loadErrors;
        std::map<QString, int> perTokenizer;
        for (const QByteArray& line : f.readAll().split('\n')) {
            if (line.isEmpty())
                continue;
            const QJsonObject o = QJsonDocument::fromJson(line).object();
            const QString name = o.value(QStringLiteral("tokenizer")).toString();
            const int c = o.value(QStringLiteral("case")).toInt();
            const bool special = o.value(QStringLiteral("add_special_tokens")).toBool();
            std::vector<int64_t> want;
            for (const QJsonValue v : o.value(QStringLiteral("ids")).toArray())
                want.push_back(v.toInteger());
            if (!m_tok.count(name) || c < 0 || c >= m_cases.size()) {
                if (!m_unloaded.count(name))
                    failures << QStringLiteral("%1 case %2: no such tokenizer or case here")
                                    .arg(name)
                                    .arg(c);
                continue;
            }
            const text::Tokenizer& tok = *m_tok.at(name);
            const std::vector<int64_t> got = tok.encode(m_cases[c].toStdString(), special);
            if (got != want)
                failures << QStringLiteral("%1 case %2 special=%3: ids differ (%4 vs %5 tokens)")
                                .arg(name)
                                .arg(c)
                                .arg(special)
                                .arg(got.size())
                                .arg(want.size());
            const QString decoded = QString::fromStdString(tok.decode(want));
            if (decoded != o.value(QStringLiteral("decoded")).toString())
                failures << QStringLiteral("%1 case %2: decode differs").arg(name).arg(c);
            ++checked;
            ++perTokenizer[name];
        }
        // Every tokenizer loaded has its golden lines (each case twice, with and without
        // special tokens, in the set shown).
        for (const auto& [name, tok] : m_tok)
            if (perTokenizer[name] == 0)
                failures << name + QStringLiteral(": no golden lines");
        QVERIFY(checked > 0);
        QVERIFY2(failures.isEmpty(), qPrintable(failures.join(QLatin1Char('\n'))));
    }

    void skipSpecialDropsSpecialTokens() {
        SPARQLAB_SKIP_UNLESS(m_tok.count(QStringLiteral("mistral7b")),
                             QStringLiteral("refs/tokenizers/mistral7b/tokenizer.json"));
        const text::Tokenizer& m = *m_tok.at(QStringLiteral("mistral7b"));
        const std::vector<int64_t> ids = m.encode("Hello</s>", true);
        QCOMPARE(ids.front(), int64_t{1}); // <s> from the template
        QCOMPARE(ids.back(), int64_t{2});  // </s> written in the text is recognised
        QCOMPARE(QString::fromStdString(m.decode(ids, /*skipSpecial=*/true)),
                 QStringLiteral("Hello"));
    }

    void invalidUtf8IsRepairedNotFatal() {
        SPARQLAB_SKIP_UNLESS(m_tok.count(QStringLiteral("gpt2")),
                             QStringLiteral("refs/tokenizers/gpt2/tokenizer.json"));
        const text::Tokenizer& g = *m_tok.at(QStringLiteral("gpt2"));
        const std::string bad = std::string("ok \xff\xfe end \xe2\x82");
        const std::vector<int64_t> ids = g.encode(bad, false);
        QVERIFY(!ids.empty());
        QCOMPARE(g.encode(text::repairUtf8(bad), false), ids);
        QCOMPARE(QString::fromStdString(g.decode(ids)),
                 QStringLiteral("ok \uFFFD\uFFFD end \uFFFD"));
    }

    void brokenFilesAreNamed_data() { addBrokenRows(); }
    void brokenFilesAreNamed() {
        QFETCH(QByteArray, json);
        QFETCH(QString, message);
        try {
            text::Tokenizer::fromJson(json.toStdString(), "/x/tokenizer.json");
            QFAIL("a broken tokenizer.json was accepted");
        } catch (const text::TokenizerError& e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.startsWith(QStringLiteral("/x/tokenizer.json: ")) &&
                         what.contains(message),
                     qPrintable(what));
            QVERIFY(!what.contains(QLatin1Char('\n')));
        }
    }
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "test_tokenizer.moc"
