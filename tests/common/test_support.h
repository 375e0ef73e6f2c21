#pragma once
/// \file test_support.h
/// Shared helpers of the test suite: where the golden references are, tolerant tensor
/// comparison, and running sparqlab-cli.

#include <ATen/core/Tensor.h>

#include <QByteArray>
#include <QString>
#include <QStringList>

#include <string>
#include <vector>

namespace sparqlab::test {

/// `../shared` beside the checkout. Fails the calling test (QFAIL-style message) if absent.
QString sharedDir();
/// A file under ../shared, e.g. "refs/sparq/golden.h5"; empty string if it does not exist.
QString sharedFile(const QString& relative);

/// Largest |a − b| (after converting both to float64), ignoring positions where `mask` is false.
double maxAbsDiff(const at::Tensor& a, const at::Tensor& b, const at::Tensor& mask = {});

/// Empty if |a − b| ≤ atol + rtol·|b| everywhere; otherwise a message with the worst entry.
QString compareClose(const at::Tensor& actual, const at::Tensor& expected, double atol,
                     double rtol = 0, const QString& what = {});

/// Fails the calling Qt test with compareClose's message unless |a − b| ≤ atol everywhere;
/// `what` is a QString (or anything QString is made from).
#define SPARQLAB_VERIFY_CLOSE(a, b, atol, what)                                                    \
    do {                                                                                           \
        const QString _e = sparqlab::test::compareClose((a), (b), (atol), 0, QString(what));       \
        QVERIFY2(_e.isEmpty(), qPrintable(_e));                                                    \
    } while (0)

/// A tensor's values as int64.
std::vector<int64_t> toVector(const at::Tensor& t);

/// Writes golden.h5's stats_L3 case (3 examples, 3 layers, GQA) as a capture file: one example
/// per batch row, the decode-step query at the last position. Throws if golden.h5 is missing.
void writeStatsL3Capture(const QString& path);

/// The bytes of a file (empty if it cannot be read).
QByteArray readFile(const QString& path);
/// Replaces a file's content; false if it cannot be written.
bool writeFile(const QString& path, const QByteArray& data);

/// Result of running a program.
struct ProcessResult {
    int exitCode = -1;
    QString out;
    QString err;
};

/// Runs sparqlab-cli with the arguments; waits up to timeoutMs.
ProcessResult runCli(const QStringList& args, int timeoutMs = 120000);

/// The parameter sets a command-line golden test runs of n: every sixth by default, every
/// SPARQLAB_ATTEND_STRIDE-th where that is set (the sanitizers' runs), all where
/// SPARQLAB_FULL_GOLDEN=1.
std::vector<int64_t> goldenSubset(size_t n);

/// A small random Qwen 2 (init-model) with the real GPT-2 tokenizer and Qwen2.5-7B-Instruct's
/// own chat template from ../shared/refs/chat in its tokenizer_config.json, at `folder`, with a
/// context of `positions`. Returns an error (empty on success; "skip: …" when the references are
/// not here).
QString makeChatModel(const QString& folder, int positions = 256);

} // namespace sparqlab::test
