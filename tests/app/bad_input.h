#pragma once
// What the bad-input suite's case lists share (test_bad_input.cpp, bad_input_chat.cpp): a case
// is a broken file or argument made from a small valid model, the command to run and what its
// one-line error must say.

#include "test_support.h"

#include <QDir>
#include <QFile>
#include <QList>
#include <QString>
#include <QStringList>
#include <QtTest>

#include <functional>

namespace sparqlab::test::bad_input {

struct Case {
    QString name;
    std::function<QStringList(const QString& dir)> make; ///< writes files, returns CLI args
    int exitCode;
    QStringList mustContain; ///< substrings of the error line; "%DIR%" is the case folder
};

inline QByteArray readAll(const QString& path) {
    return sparqlab::test::readFile(path);
}

inline void writeAll(const QString& path, const QByteArray& data) {
    QVERIFY(sparqlab::test::writeFile(path, data));
}

/// Copies the small model into `dir`/model and returns that folder.
inline QString copyModel(const QString& from, const QString& dir) {
    const QString to = dir + QStringLiteral("/model");
    QDir().mkpath(to);
    for (const QString& name : QDir(from).entryList(QDir::Files))
        QFile::copy(from + QLatin1Char('/') + name, to + QLatin1Char('/') + name);
    return to;
}

/// The chat-template cases (bad_input_chat.cpp): broken templates and configs of `model`.
QList<Case> chatTemplateCases(const QString& model);
/// The RULER cases (bad_input_ruler.cpp): its options, haystack, word list and QA files.
QList<Case> rulerCases(const QString& model);
/// The cases of METHODS2.md's and METHODS3.md's methods (bad_input_methods23.cpp) on `capture`.
QList<Case> methods23Cases(const QString& capture);
/// The command line's own cases (bad_input_cli.cpp).
QList<Case> cliCases(const QString& model, const QString& capture);

} // namespace sparqlab::test::bad_input
