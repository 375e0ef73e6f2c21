#pragma once
/// \file test_support.h
/// Shared helpers of the test suite: where the golden references are, tolerant tensor
/// comparison, and running sparqlab-cli.

#include <ATen/core/Tensor.h>

#include <QByteArray>
#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <string>
#include <vector>

namespace sparqlab::test {

/// Where the golden references (refs/…) are read from: `../shared` beside the checkout
/// (SPARQLAB_SHARED_DIR) when its refs/ is there, else the compact copy in the repository's
/// tests/data (scripts/make-test-data.py makes it from ../shared/refs).
/// With the environment variable CI=true and no ../shared/refs, prints one line saying that CI
/// requires it and ends the test executable with status 1.
QString sharedDir();
/// Whether sharedDir() is ../shared (the full references), not the compact copy.
bool fullReferences();
/// A reference under sharedDir(), e.g. "refs/sparq/golden.h5"; empty string if it does not
/// exist there.
QString sharedFile(const QString& relative);
/// Every `<stem>*.h5` in sharedDir()/<dir>, in name order: the golden file shown and any
/// kept-back file of the same kind beside it (whose cases, names and count are not known here).
QStringList goldenFiles(const QString& dir, const QString& stem);
/// Whether a golden case is a ties case (SPARQ.md §8.4's edge_ties): its exact ties must follow
/// the tie rule, not be set aside as near-ties. The case's `spec_json` says so (`"kind": "ties"`,
/// or `"ties": true`); a case without one, by "edge_ties" in its name.
bool tiesCase(const std::string& caseName, const std::string& specJson = {});
/// Whether q·k/√D stays exact for dyadic inputs in float32: 1/√D a power of two (D = 4^n). A
/// ties case of another head dimension (8, 32) rounds there, and its ties are near ones.
bool exactScale(int64_t headDim);
/// Whether every row's count of valid positions is a power of two: a head with q = 0 then gives
/// each the exact probability 1/n in float32 too, and cumulative masses (top-p counts, k_mass)
/// reach p exactly in either dtype (an S = 40 ties case's float32 top-p count differs).
bool dyadicRows(const at::Tensor& valid);
/// The golden case `wanted` (a case of the file shown) where `cases` has it, else the first of
/// `cases` of its kind (mha_, gqa_, edge_ties… anywhere in the name), else the first: a test
/// written against a shown case runs on a kept-back file whose cases have other names.
std::string caseLike(const std::vector<std::string>& cases, const std::string& wanted);
/// The one line for a reference (a file, or "file: group" of one) that is not here, e.g.
/// "refs/hf3/gpt_oss/golden.h5 is in neither ../shared nor tests/data".
QString notHere(const QString& what);
/// sharedFile(relative) for a reference the whole test executable needs. When it is missing,
/// prints "SKIPPED: " + notHere(relative) and exits with status 77 (CTest: skipped; the compact
/// references hold a few cases only, or its set is here without it: setHere), or, where the
/// full references lack its whole set, "FAIL: …" and status 1.
QString requireReference(const QString& relative);

/// Whether the set of references `what` belongs to (refs/<set>/…) is here, not empty: a reference
/// missing from a set that is here is one this set does not hold (another set of the same kind,
/// with other cases, may stand in for the one shown), not a broken checkout.
bool setHere(const QString& what);

/// In a test function (or row): unless `present`, skips it with notHere(what) where the compact
/// references are used or where its set is here without it (setHere), fails it where the full
/// references lack the whole set.
#define SPARQLAB_SKIP_UNLESS(present, what)                                                        \
    do {                                                                                           \
        if (!(present)) {                                                                          \
            const QString _m = sparqlab::test::notHere(what);                                      \
            if (sparqlab::test::fullReferences() && !sparqlab::test::setHere(what))                \
                QFAIL(qPrintable(_m));                                                             \
            QSKIP(qPrintable(_m));                                                                 \
        }                                                                                          \
    } while (0)
/// SPARQLAB_SKIP_UNLESS for a reference file or folder (relative to sharedDir()).
#define SPARQLAB_NEED_REFERENCE(relative)                                                          \
    SPARQLAB_SKIP_UNLESS(!sparqlab::test::sharedFile(relative).isEmpty(), relative)

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

/// As SPARQLAB_VERIFY_CLOSE, within atol + rtol·|b|: float32 arithmetic's rounding grows with the
/// size of the value (a float32 model against a float64 reference, or one computed in other
/// pieces, whose BLAS blocking differs from one CPU to another).
#define SPARQLAB_VERIFY_CLOSE_REL(a, b, atol, rtol, what)                                          \
    do {                                                                                           \
        const QString _e = sparqlab::test::compareClose((a), (b), (atol), (rtol), QString(what));  \
        QVERIFY2(_e.isEmpty(), qPrintable(_e));                                                    \
    } while (0)

/// A golden parameter set's number or JSON boolean (true: 1), `fallback` where it is absent.
int64_t jsonIntOr(const QJsonObject& o, const char* key, int64_t fallback);

/// A tensor's values as int64.
std::vector<int64_t> toVector(const at::Tensor& t);

/// Writes golden.h5's stats_L3 case (3 examples, 3 layers, GQA) as a capture file: one example
/// per batch row, the decode-step query at the last position. Throws if golden.h5 or the case
/// is missing (the compact references do not hold it: check hasStatsL3() first).
void writeStatsL3Capture(const QString& path);
/// Whether golden.h5 with its stats_L3 case (or another of stats_cases/) is here.
bool hasStatsL3();
/// The group of golden.h5's many-layer statistics case: "stats_cases/stats_L3" in the file
/// shown, else the first of stats_cases/ (caseLike); empty when there is none.
std::string statsCase();
/// What hasStatsL3() looks for, as notHere() names it.
inline constexpr const char kStatsL3[] = "refs/sparq/golden.h5: stats_cases/stats_L3";

/// A file or folder of the checkout, e.g. sourcePath("tests/data/sotu_2012_excerpt.txt"). The
/// checkout's absolute path, and the built executables' below, are compiled into
/// test_support.cpp alone: as definitions of every test they would make a second checkout (CI's
/// clean clone) miss ccache for the whole suite.
QString sourcePath(const QString& relative);
/// The built sparqlab-cli.
QString cliPath();
/// The built sparqlab (the GUI); empty in a build without it.
QString guiPath();

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
/// runCli's standard output; throws std::runtime_error with the command and its error line
/// unless it exits 0 (the test function fails with it).
QString cliOut(const QStringList& args);
/// The folders of a reference set ("refs/hf3") that hold a golden.h5, in name order.
QStringList referenceFolders(const QString& set);
/// Token ids as a compact JSON array: an --ids-file.
QString idsJson(const std::vector<int64_t>& ids);

/// The parameter sets a command-line golden test runs of n: every sixth by default, every
/// SPARQLAB_ATTEND_STRIDE-th where that is set (the sanitizers' runs), all where
/// SPARQLAB_FULL_GOLDEN=1.
std::vector<int64_t> goldenSubset(size_t n);

/// A small random Qwen 2 (init-model) with the real GPT-2 tokenizer and Qwen2.5-7B-Instruct's
/// own chat template from refs/chat in its tokenizer_config.json, at `folder`, with a context of
/// `positions`. Returns an error (empty on success; "skip: " + notHere(…) when a reference is
/// not here).
QString makeChatModel(const QString& folder, int positions = 256);

} // namespace sparqlab::test
