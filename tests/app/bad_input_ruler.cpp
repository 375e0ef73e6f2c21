// The bad-input suite's RULER cases (issue 37): its options, its haystack and word list, and the
// SQuAD 2.0 / HotpotQA files qa_1 and qa_2 read. Each is one line naming the file or option.

#include "bad_input.h"

namespace sparqlab::test::bad_input {

QList<Case> rulerCases(const QString& model) {
    QList<Case> c;
    auto ruler = [=](QString file, QByteArray content, QStringList extra) {
        return [=](const QString& dir) {
            writeAll(dir + "/" + file, content);
            return QStringList{"eval",           "--model",       model,
                               "--task",         "niah_single_2", "--data",
                               dir + "/" + file, "--out",         dir + "/r.jsonl",
                               "--methods",      "dense"} +
                   extra;
        };
    };
    c << Case{"ruler: an empty haystack file",
              ruler("empty.txt", "", {}),
              1,
              {"empty.txt", "haystack text is empty"}};
    c << Case{"ruler: every length above the context",
              ruler("hay.txt", "Some text. More text here.", {"--length", "99999"}),
              1,
              {"--length", "99999", "context"}};
    c << Case{"ruler: zero samples",
              ruler("hay.txt", "Some text.", {"--samples", "0"}),
              2,
              {"--samples", "0"}};
    c << Case{"ruler: a word list that is not one",
              ruler("hay.txt", "Some text. More.", {"--words", "/nonexistent/words"}),
              1,
              {"/nonexistent/words"}};
    // qa_1 / qa_2 read the user's files (nothing is shipped).
    auto qa = [=](QString task, QString file, QByteArray content) {
        return [=](const QString& dir) {
            writeAll(dir + "/" + file, content);
            return QStringList{"eval",   "--model",        model,   "--task",         task,
                               "--data", dir + "/" + file, "--out", dir + "/r.jsonl", "--methods",
                               "dense"};
        };
    };
    c << Case{"ruler qa_1 without --data",
              [=](const QString& dir) {
                  return QStringList{"eval",  "--model",        model,       "--task", "qa_1",
                                     "--out", dir + "/r.jsonl", "--methods", "dense"};
              },
              2,
              {"--data"}};
    c << Case{"ruler qa_1: a SQuAD file with only unanswerable questions",
              qa("qa_1", "dev-v2.0.json",
                 R"({"data": [{"title": "T", "paragraphs": [{"context": "Some text.", "qas": )"
                 R"([{"id": "1", "question": "Why?", "answers": [], "is_impossible": true}]}]}]})"),
              1,
              {"dev-v2.0.json", "no answerable SQuAD questions"}};
    c << Case{"ruler qa_2: a HotpotQA file that is not a list",
              qa("qa_2", "hotpot.json", R"({"question": "q", "answer": "a"})"),
              1,
              {"hotpot.json", "HotpotQA JSON"}};
    c << Case{"ruler qa_2: a HotpotQA context entry that is not [title, sentences]",
              qa("qa_2", "hotpot.json",
                 R"([{"question": "q", "answer": "a", "context": [["Title", "not a list", 3]]}])"),
              1,
              {"hotpot.json: [0]", "[title, sentences]"}};
    c << Case{"ruler qa_2: a HotpotQA question without an answer",
              qa("qa_2", "hotpot.json",
                 R"([{"question": "q", "context": [["Title", ["One sentence."]]]}])"),
              1,
              {"hotpot.json: [0]", "\"answer\""}};
    return c;
}

} // namespace sparqlab::test::bad_input
