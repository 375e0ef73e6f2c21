// Numbers read from files are range-checked before any conversion (base/json_number.h):
// every JSON reader refuses out-of-range, negative, fractional and huge numbers with one line
// naming the file and the field, never converting a double it cannot hold (undefined
// behaviour, found by fuzz_eval_results: a seq_len of 9.04e82).

#include "test_support.h"

#include "analysis/bench_figures.h"
#include "analysis/eval_figures.h"
#include "base/json_number.h"
#include "text/tokenizer.h"

#include <QtTest>

#include <fstream>

using nlohmann::json;
using sparqlab::base::jsonWholeNumber;

namespace {

std::string writeText(const QTemporaryDir& dir, const char* name, const std::string& text) {
    const std::string path = dir.filePath(QString::fromLatin1(name)).toStdString();
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

/// The error `f` throws, empty when it does not.
template <typename F> QString errorOf(F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

} // namespace

class TestFileNumbers : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void theHelper() {
        QCOMPARE(jsonWholeNumber(json(7), 0, 10), std::optional<int64_t>(7));
        QCOMPARE(jsonWholeNumber(json(7.0), 0, 10), std::optional<int64_t>(7));
        QCOMPARE(jsonWholeNumber(json::parse("9.04e82"), 0, INT64_MAX), std::nullopt);
        QCOMPARE(jsonWholeNumber(json::parse("-9.04e82"), INT64_MIN, 0), std::nullopt);
        QCOMPARE(jsonWholeNumber(json::parse("18446744073709551615"), 0, INT64_MAX), std::nullopt);
        QCOMPARE(jsonWholeNumber(json::parse("9223372036854775807"), 0, INT64_MAX),
                 std::optional<int64_t>(INT64_MAX));
        QCOMPARE(jsonWholeNumber(json::parse("9.3e18"), 0, INT64_MAX), std::nullopt);
        QCOMPARE(jsonWholeNumber(json(-1), 0, 10), std::nullopt);
        QCOMPARE(jsonWholeNumber(json(11), 0, 10), std::nullopt);
        QCOMPARE(jsonWholeNumber(json(2.5), 0, 10), std::nullopt);
        QCOMPARE(jsonWholeNumber(json(std::numeric_limits<double>::quiet_NaN()), 0, 10),
                 std::nullopt);
        QCOMPARE(jsonWholeNumber(json(std::numeric_limits<double>::infinity()), 0, 10),
                 std::nullopt);
        QCOMPARE(jsonWholeNumber(json("7"), 0, 10), std::nullopt);
        QCOMPARE(jsonWholeNumber(json(true), 0, 10), std::nullopt);
    }

    void evalResults() {
        QTemporaryDir dir;
        const std::string line =
            R"({"task": "needle", "data": "d", "example": "1", "method": "dense", "params": {}, )"
            R"("metric": "needle_found", "value": 1, "compression": 1, "seq_len": SEQ, )"
            R"("haystack_tokens": HAY})";
        auto with = [&](const std::string& seq, const std::string& hay) {
            std::string l = line;
            l.replace(l.find("SEQ"), 3, seq);
            l.replace(l.find("HAY"), 3, hay);
            return writeText(dir, "r.jsonl", l + "\n");
        };
        QCOMPARE(sparqlab::analysis::readEvalJsonl(with("100", "64")).front().seqLen, 100);
        for (const char* bad : {"9.04e82", "-1", "1.5", "1e300", "18446744073709551615"}) {
            const QString e = errorOf([&] { sparqlab::analysis::readEvalJsonl(with(bad, "64")); });
            QVERIFY2(e.contains(QStringLiteral("r.jsonl line 1")) &&
                         e.contains(QStringLiteral("\"seq_len\" must be a whole number")),
                     qPrintable(e));
            const QString h = errorOf([&] { sparqlab::analysis::readEvalJsonl(with("1", bad)); });
            QVERIFY2(h.contains(QStringLiteral("\"haystack_tokens\"")), qPrintable(h));
        }
    }

    void benchResults() {
        QTemporaryDir dir;
        const std::string good =
            R"({"device": "cpu", "dtype": "f32", "batch": BATCH, "heads": 8, "kv_heads": 8, )"
            R"("seq": 1024, "head_dim": 64, "r": 16, "k": 64, "dense_us": 10, "sparq_us": 5, )"
            R"("speedup": 2, "theoretical_speedup": 3, "dense_gbps": 1, "sparq_gbps": 1, )"
            R"("machine_gbps": 10})";
        auto with = [&](const std::string& batch) {
            std::string l = good;
            l.replace(l.find("BATCH"), 5, batch);
            return writeText(dir, "b.jsonl", l + "\n");
        };
        QCOMPARE(sparqlab::analysis::readBenchJson(with("4")).front().batch, 4);
        for (const char* bad : {"9.04e82", "-4", "0", "2.5", "1e300", "18446744073709551615"}) {
            const QString e = errorOf([&] { sparqlab::analysis::readBenchJson(with(bad)); });
            QVERIFY2(e.contains(QStringLiteral("b.jsonl")) && e.contains(QStringLiteral("batch")),
                     qPrintable(e));
        }
    }

    void tokenizerIds() {
        // A post-processor's special-token ids: huge, negative and fractional ones are named.
        const std::string base =
            R"({"model": {"type": "BPE", "vocab": {"a": 0, "[CLS]": 1}, "merges": [], )"
            R"("unk_token": "a"}, "post_processor": {"type": "BertProcessing", )"
            R"("cls": ["[CLS]", ID], "sep": ["[CLS]", 1]}})";
        for (const char* bad : {"9.04e82", "-1", "1.5", "1e300", "18446744073709551615"}) {
            std::string t = base;
            t.replace(t.find("ID"), 2, bad);
            const QString e =
                errorOf([&] { sparqlab::text::Tokenizer::fromJson(t, "tok/tokenizer.json"); });
            QVERIFY2(e.contains(QStringLiteral("tok/tokenizer.json")) &&
                         e.contains(QStringLiteral("post_processor.cls")),
                     qPrintable(e));
        }
    }
};

QTEST_GUILESS_MAIN(TestFileNumbers)
#include "test_file_numbers.moc"
