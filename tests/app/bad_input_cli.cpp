// The bad-input suite's command-line cases found by a first-time user's walk through the CLI
// (2026-12-02): options given twice or contradicting each other, values outside the capture, and
// inputs that gave no result while saying they had. Each is one line naming the option or file.

#include "bad_input.h"

namespace sparqlab::test::bad_input {

QList<Case> cliCases(const QString& model, const QString& capture) {
    QList<Case> c;
    c << Case{"session --layer beyond the capture",
              [=](const QString& dir) {
                  return QStringList{"session",     "--capture", capture, "--out",
                                     dir + "/s.h5", "--layer",   "9"};
              },
              2,
              {"--layer 9", "cap.h5"}};
    c << Case{"stats --coverage-k 0",
              [=](const QString& dir) {
                  return QStringList{"stats",         "--capture",    capture, "--json",
                                     dir + "/s.json", "--coverage-k", "0"};
              },
              1,
              {"cap.h5", "--coverage-k"}};
    c << Case{"generate with --prompt and --prompt-file",
              [=](const QString& dir) {
                  writeAll(dir + "/p.txt", "the prompt");
                  return QStringList{
                      "generate",     "--model",          model, "--prompt", "hi", "--prompt-file",
                      dir + "/p.txt", "--max-new-tokens", "1"};
              },
              2,
              {"--prompt", "--prompt-file", "not both"}};
    c << Case{"capture with --ids and --prompt-file",
              [=](const QString& dir) {
                  writeAll(dir + "/p.txt", "the prompt");
                  return QStringList{"capture",       "--model",      model,   "--ids",      "5,6",
                                     "--prompt-file", dir + "/p.txt", "--out", dir + "/c.h5"};
              },
              2,
              {"--ids", "--prompt-file", "not both"}};
    c << Case{"an option given twice",
              [=](const QString&) {
                  return QStringList{"generate", "--model",          model, "--ids", "5,6", "--ids",
                                     "7",        "--max-new-tokens", "1"};
              },
              2,
              {"--ids", "twice"}};
    c << Case{"bpc of a one-character text",
              [=](const QString& dir) {
                  writeAll(dir + "/one.txt", "a");
                  return QStringList{"bpc", "--model", model, "--text-file", dir + "/one.txt"};
              },
              1,
              {"one.txt", "too short"}};
    c << Case{"eval repetition text shorter than one context",
              [=](const QString& dir) {
                  writeAll(dir + "/short.txt", QByteArray("word ").repeated(40));
                  return QStringList{
                      "eval",   "--model",          model,   "--task",         "repetition",
                      "--data", dir + "/short.txt", "--out", dir + "/r.jsonl", "--methods",
                      "dense"};
              },
              1,
              {"short.txt", "no repetition example", "--context-chars"}};
    c << Case{"bench --heads not a multiple of --kv-heads",
              [=](const QString&) {
                  return QStringList{"bench", "--heads", "4", "--kv-heads", "3", "--seq", "64"};
              },
              2,
              {"--heads 4", "--kv-heads 3"}};
    c << Case{"bench --tau without --methods (it was ignored)",
              [=](const QString&) {
                  return QStringList{"bench", "--seq", "64", "--k", "16", "--tau", "2"};
              },
              2,
              {"--tau", "goes with --methods"}};
    c << Case{"stats --k (recall is at each --recall-k; --k was ignored)",
              [=](const QString& dir) {
                  return QStringList{"stats",         "--capture", capture, "--json",
                                     dir + "/s.json", "--k",       "8"};
              },
              2,
              {"--recall-k", "not --k"}};
    // Options that were accepted and ignored (2026-12-02, a reading of every command's code).
    c << Case{"logits with --ids and --ids-file (--ids won)",
              [=](const QString& dir) {
                  writeAll(dir + "/ids.json", "[5, 6]");
                  return QStringList{"logits",     "--model",         model,   "--ids",      "7,8",
                                     "--ids-file", dir + "/ids.json", "--out", dir + "/l.h5"};
              },
              2,
              {"--ids", "--ids-file", "not both"}};
    c << Case{"eval --speed-device without --measure-speed",
              [=](const QString& dir) {
                  return QStringList{
                      "eval",           "--model",        model, "--task", "bpc", "--out",
                      dir + "/e.jsonl", "--speed-device", "cpu"};
              },
              2,
              {"--speed-device", "--measure-speed"}};
#if SPARQLAB_TEST_HAS_GUI // (figures exists only in builds with the GUI libraries)
    c << Case{"figures --layer with --bench",
              [=](const QString& dir) {
                  writeAll(dir + "/b.jsonl", "{}\n");
                  return QStringList{"figures", "--bench", dir + "/b.jsonl", "--out", dir + "/figs",
                                     "--layer", "1"};
              },
              2,
              {"--layer", "goes with --capture"}};
#endif
    // A second walk (2026-12-02): a value left out, a limit of nothing, a file of the other kind.
    c << Case{"stats --json with its file left out (--seed was taken for it)",
              [=](const QString&) {
                  return QStringList{"stats", "--capture", capture, "--json", "--seed", "1"};
              },
              2,
              {"--json needs a value", "the option --seed"}};
    c << Case{"eval --limit 0 (it wrote an empty file and said so)",
              [=](const QString& dir) {
                  return QStringList{"eval",  "--model",        model,     "--task", "bpc",
                                     "--out", dir + "/e.jsonl", "--limit", "0"};
              },
              2,
              {"--limit", "at least 1"}};
#if SPARQLAB_TEST_HAS_GUI
    c << Case{
        "figures --bench given eval results",
        [=](const QString& dir) {
            writeAll(dir + "/e.jsonl", "{\"task\": \"bpc\", \"metric\": \"bpc\", "
                                       "\"method\": \"dense\", \"value\": 1.5}\n");
            return QStringList{"figures", "--bench", dir + "/e.jsonl", "--out", dir + "/figs"};
        },
        1,
        {"e.jsonl", "eval results", "figures --eval"}};
#endif
    c << Case{"attend into a folder that does not exist",
              [=](const QString& dir) {
                  return QStringList{"attend",   "--capture", capture,
                                     "--method", "sparq",     "--r",
                                     "8",        "--out",     dir + "/no-such-folder/r.h5"};
              },
              1,
              {"r.h5", "the folder", "does not exist"}};
    c << Case{"session FILE with --layer",
              [=](const QString& dir) {
                  return QStringList{"session", dir + "/s.h5", "--layer", "1"};
              },
              2,
              {"--layer", "goes with --capture"}};
    return c;
}

} // namespace sparqlab::test::bad_input
