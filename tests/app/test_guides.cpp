// The guides of docs/ (adding a method, an eval task, a model family, a view) against the code,
// as the README's method table is checked against `sparqlab-cli methods --markdown`: every site a
// guide lists exists (a new unit's folder), every unit of a folder registers itself under its
// own name (what the generated registries rely on), each table holds one row per unit, and the
// enums a guide names hold one value per unit.

#include "test_support.h"

#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QtTest>

namespace {

using sparqlab::test::readFile;
using sparqlab::test::runCli;

const QString kSource = sparqlab::test::sourcePath(QStringLiteral("."));

/// One axis: its guide, its section tag, its units' folder and registration macro, the enum
/// holding one value per unit (empty: none) and the CLI table listing them (empty: none).
struct Axis {
    const char* guide;
    const char* tag;
    const char* folder;
    const char* macro;
    const char* enumFile;
    const char* enumName;
    const char* table;
};

const Axis kAxes[] = {
    {"docs/adding-a-method.md", "method", "attention/methods", "SPARQLAB_METHOD",
     "attention/method_table.h", "Method", "methods"},
    {"docs/adding-an-eval-task.md", "task", "analysis/tasks", "SPARQLAB_EVAL_TASK",
     "analysis/eval_task_table.h", "EvalTask", "tasks"},
    {"docs/adding-a-model-family.md", "family", "model/families", "SPARQLAB_MODEL_FAMILY", "", "",
     "families"},
    {"docs/adding-a-view.md", "view", "app/gui/views", "SPARQLAB_VIEW", "", "", ""},
};

/// The units of a folder: a file foo.cpp, or a folder foo/ (its foo.cpp registers it).
QStringList units(const QString& folder, QStringList* files) {
    QStringList names;
    QDir dir(kSource + QLatin1Char('/') + folder);
    for (const QFileInfo& e :
         dir.entryInfoList(QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        if (e.isDir()) {
            names << e.fileName();
            *files << e.filePath() + QLatin1Char('/') + e.fileName() + QStringLiteral(".cpp");
        } else if (e.suffix() == QLatin1String("cpp")) {
            names << e.completeBaseName();
            *files << e.filePath();
        }
    }
    return names;
}

} // namespace

class TestGuides : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void sitesExist() {
        for (const Axis& a : kAxes) {
            const QString guide = QString::fromUtf8(readFile(kSource + '/' + a.guide));
            QVERIFY2(!guide.isEmpty(), a.guide);
            const QString open = QStringLiteral("<!-- sites: %1 -->").arg(QLatin1String(a.tag));
            const int from = guide.indexOf(open), to = guide.indexOf("<!-- /sites -->", from);
            QVERIFY2(
                from >= 0 && to > from,
                qPrintable(QStringLiteral("%1 has no sites table").arg(QLatin1String(a.guide))));
            const QString table = guide.mid(from, to - from);
            static const QRegularExpression row(QStringLiteral("^\\| \\d+ \\| `([^`]+)`(.*)$"),
                                                QRegularExpression::MultilineOption);
            int rows = 0;
            bool unitRow = false;
            for (auto m = row.globalMatch(table); m.hasNext();) {
                const auto match = m.next();
                const QString path = match.captured(1);
                const bool isNew = match.captured(2).contains(QStringLiteral("(new)"));
                ++rows;
                if (isNew) { // the new unit: its folder is the axis's
                    QVERIFY2(path.startsWith(QLatin1String(a.folder) + '/'), qPrintable(path));
                    unitRow = true;
                } else {
                    QVERIFY2(QFileInfo::exists(kSource + '/' + path),
                             qPrintable(QStringLiteral("%1 lists %2, which does not exist")
                                            .arg(QLatin1String(a.guide), path)));
                }
            }
            QVERIFY2(rows >= 2 && unitRow, a.guide);
            // The goal of the redesign: at most four files, the unit among them, plus a test.
            QVERIFY2(rows <= 5, a.guide);
        }
    }

    void everyUnitRegistersItselfUnderItsName() {
        for (const Axis& a : kAxes) {
            QStringList files;
            const QStringList names = units(QLatin1String(a.folder), &files);
            QVERIFY2(names.size() >= 5, a.folder);
            for (int i = 0; i < names.size(); ++i) {
                const QString text = QString::fromUtf8(readFile(files[i]));
                QVERIFY2(
                    text.contains(QStringLiteral("%1(%2)").arg(QLatin1String(a.macro), names[i])),
                    qPrintable(QStringLiteral("%1 does not hold %2(%3)")
                                   .arg(files[i], QLatin1String(a.macro), names[i])));
            }
        }
    }

    void tablesHoldOneRowPerUnit() {
        for (const Axis& a : kAxes) {
            QStringList files;
            const int n = static_cast<int>(units(QLatin1String(a.folder), &files).size());
            if (*a.table) { // the CLI's table, from the registry
                const auto r = runCli({QLatin1String(a.table), QStringLiteral("--markdown")});
                QCOMPARE(r.exitCode, 0);
                QCOMPARE(static_cast<int>(r.out.count(QLatin1Char('\n'))) - 2, n);
            }
            if (*a.enumFile) { // one enum value per unit: the ids the registries order by
                const QString h = QString::fromUtf8(readFile(kSource + '/' + a.enumFile));
                const QRegularExpression e(
                    QStringLiteral("enum class %1 \\{([^}]*)\\}").arg(QLatin1String(a.enumName)));
                const auto m = e.match(h);
                QVERIFY2(m.hasMatch(), a.enumFile);
                QString body = m.captured(1);
                body.remove(QRegularExpression(QStringLiteral("//[^\\n]*")));
                QCOMPARE(static_cast<int>(body.split(QLatin1Char(','), Qt::SkipEmptyParts)
                                              .filter(QRegularExpression(QStringLiteral("\\w")))
                                              .size()),
                         n);
            }
        }
    }

    void architectureNamesEveryGuide() {
        const QString arch = QString::fromUtf8(readFile(kSource + "/docs/ARCHITECTURE.md"));
        for (const Axis& a : kAxes) {
            const QString guide = QFileInfo(QLatin1String(a.guide)).fileName();
            QVERIFY2(arch.contains(guide), qPrintable(guide));
            QVERIFY2(arch.contains(QLatin1String(a.folder)), a.folder);
        }
    }
};

QTEST_GUILESS_MAIN(TestGuides)
#include "test_guides.moc"
