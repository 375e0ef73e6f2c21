#include "test_support.h"

#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace sparqlab::test {

namespace {

/// Whether the environment says this is a CI run (CI=true, as CI services set it; .ci/run too).
bool ciRun() {
    const QByteArray ci = qgetenv("CI").trimmed().toLower();
    return ci == "true" || ci == "1";
}

} // namespace

bool fullReferences() {
    return QFileInfo(QDir::cleanPath(QStringLiteral(SPARQLAB_SHARED_DIR "/refs"))).isDir();
}

QString sharedDir() {
    if (fullReferences())
        return QDir::cleanPath(QStringLiteral(SPARQLAB_SHARED_DIR));
    if (ciRun()) {
        std::fprintf(stderr,
                     "FAIL: ../shared/refs is required under CI (CI=true): %s is not there\n",
                     qPrintable(QDir::cleanPath(QStringLiteral(SPARQLAB_SHARED_DIR "/refs"))));
        std::fflush(stderr);
        std::_Exit(1); // no destructors, no leak check: a test that never started
    }
    return sourcePath(QStringLiteral("tests/data"));
}

QString sourcePath(const QString& relative) {
    return QDir::cleanPath(QStringLiteral(SPARQLAB_SOURCE_DIR) + QLatin1Char('/') + relative);
}

QString cliPath() {
    return QStringLiteral(SPARQLAB_CLI_PATH);
}

QString guiPath() {
#ifdef SPARQLAB_GUI_PATH
    return QStringLiteral(SPARQLAB_GUI_PATH);
#else
    return {};
#endif
}

QString sharedFile(const QString& relative) {
    const QString path = sharedDir() + QLatin1Char('/') + relative;
    return QFileInfo::exists(path) ? path : QString();
}

QStringList goldenFiles(const QString& dir, const QString& stem) {
    const QString base = sharedFile(dir);
    if (base.isEmpty())
        return {};
    QStringList out;
    for (const QString& f :
         QDir(base).entryList({stem + QStringLiteral("*.h5")}, QDir::Files, QDir::Name))
        out << base + QLatin1Char('/') + f;
    return out;
}

bool tiesCase(const std::string& caseName, const std::string& specJson) {
    const QJsonObject spec = QJsonDocument::fromJson(QByteArray::fromStdString(specJson)).object();
    if (!spec.isEmpty())
        return spec.value(QStringLiteral("kind")).toString() == QLatin1String("ties") ||
               spec.value(QStringLiteral("ties")).toBool();
    return caseName.find("edge_ties") != std::string::npos;
}

bool exactScale(int64_t headDim) {
    int64_t d = 1;
    while (d < headDim)
        d *= 4;
    return d == headDim;
}

bool dyadicRows(const at::Tensor& valid) {
    const at::Tensor n = valid.to(at::kBool).sum(-1).to(at::kLong).flatten();
    for (int64_t i = 0; i < n.numel(); ++i) {
        const int64_t c = n[i].item<int64_t>();
        if (c <= 0 || (c & (c - 1)) != 0)
            return false;
    }
    return true;
}

std::string caseLike(const std::vector<std::string>& cases, const std::string& wanted) {
    if (cases.empty() || std::find(cases.begin(), cases.end(), wanted) != cases.end())
        return wanted;
    const size_t first = wanted.find('_');
    const size_t end = wanted.rfind("edge_", 0) == 0 ? wanted.find('_', first + 1) : first;
    const std::string kind = wanted.substr(0, end == std::string::npos ? wanted.size() : end + 1);
    for (const std::string& c :
         cases) // of its kind from the start (mha_…), else anywhere (h_mha_…)
        if (c.rfind(kind, 0) == 0)
            return c;
    for (const std::string& c : cases)
        if (c.find(kind) != std::string::npos)
            return c;
    return cases.front();
}

QString notHere(const QString& what) {
    if (fullReferences())
        return QStringLiteral("%1 is missing from %2")
            .arg(what, QDir::cleanPath(QStringLiteral(SPARQLAB_SHARED_DIR)));
    return QStringLiteral("%1 is in neither ../shared nor tests/data").arg(what);
}

bool setHere(const QString& what) {
    const QStringList parts = what.split(QLatin1Char('/'));
    if (parts.size() < 3 || parts[0] != QLatin1String("refs"))
        return false;
    // (An empty folder is no set: its tests would all skip and pass.)
    return !QDir(sharedDir() + QStringLiteral("/refs/") + parts[1])
                .entryList(QDir::AllEntries | QDir::NoDotAndDotDot)
                .isEmpty();
}

QString requireReference(const QString& relative) {
    const QString path = sharedFile(relative);
    if (path.isEmpty()) {
        const bool full = fullReferences() && !setHere(relative);
        std::printf("%s: %s\n", full ? "FAIL" : "SKIPPED", qPrintable(notHere(relative)));
        std::fflush(stdout);
        // 77: the suite's SKIP_RETURN_CODE (tests/CMakeLists.txt). No destructors, no leak
        // check (the sanitizers' run would turn a report into another status).
        std::_Exit(full ? 1 : 77);
    }
    return path;
}

double maxAbsDiff(const at::Tensor& a, const at::Tensor& b, const at::Tensor& mask) {
    at::Tensor d = (a.to(at::kDouble) - b.to(at::kDouble)).abs();
    if (mask.defined())
        d = d.masked_select(mask.to(at::kBool).expand_as(d));
    return d.numel() ? d.max().item<double>() : 0.0;
}

QString compareClose(const at::Tensor& actual, const at::Tensor& expected, double atol, double rtol,
                     const QString& what) {
    if (actual.sizes() != expected.sizes())
        return QStringLiteral("%1: shape mismatch").arg(what);
    const at::Tensor a = actual.to(at::kDouble);
    const at::Tensor e = expected.to(at::kDouble);
    const at::Tensor excess = (a - e).abs() - (e.abs() * rtol + atol);
    const at::Tensor bothInf = a.eq(e); // equal infinities count as close
    const at::Tensor bad = excess.gt(0)
                               .logical_and(bothInf.logical_not())
                               .logical_or(a.isnan().logical_xor(e.isnan()));
    if (!bad.any().item<bool>())
        return {};
    const int64_t i = bad.flatten().nonzero()[0].item<int64_t>();
    return QStringLiteral("%1: %2 entries differ, first at flat index %3: %4 vs expected %5 "
                          "(atol %6, rtol %7)")
        .arg(what)
        .arg(bad.sum().item<int64_t>())
        .arg(i)
        .arg(a.flatten()[i].item<double>(), 0, 'g', 10)
        .arg(e.flatten()[i].item<double>(), 0, 'g', 10)
        .arg(atol)
        .arg(rtol);
}

int64_t jsonIntOr(const QJsonObject& o, const char* key, int64_t fallback) {
    if (!o.contains(QLatin1String(key)))
        return fallback;
    const QJsonValue v = o.value(QLatin1String(key));
    return v.isBool() ? int64_t{v.toBool()} : v.toInteger();
}

std::vector<int64_t> toVector(const at::Tensor& t) {
    const at::Tensor c = t.to(at::kLong).contiguous();
    return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::string statsCase() {
    const QString golden = sharedFile(QStringLiteral("refs/sparq/golden.h5"));
    if (golden.isEmpty())
        return {};
    const h5::File f = h5::File::openRead(golden.toStdString());
    if (!f.root().has("stats_cases"))
        return {};
    const std::vector<std::string> cases = f.root().group("stats_cases").children();
    return cases.empty() ? std::string() : "stats_cases/" + caseLike(cases, "stats_L3");
}

bool hasStatsL3() {
    return !statsCase().empty();
}

void writeStatsL3Capture(const QString& path) {
    const QString golden = sharedFile(QStringLiteral("refs/sparq/golden.h5"));
    if (golden.isEmpty())
        throw std::runtime_error(notHere(QStringLiteral("refs/sparq/golden.h5")).toStdString());
    const h5::File gf = h5::File::openRead(golden.toStdString());
    const h5::Group g = gf.root().group(statsCase());
    const at::Tensor q = g.read("inputs/q"), K = g.read("inputs/K"), V = g.read("inputs/V");
    const int64_t B = q.size(0), L = q.size(1), Hq = q.size(2), D = q.size(3), Hkv = K.size(2),
                  S = K.size(3);
    capture::CaptureWriter w(path.toStdString(),
                             {"golden:stats_L3", "golden", L, Hq, Hkv, D,
                              1.0 / std::sqrt(static_cast<double>(D)), "tests"});
    for (int64_t b = 0; b < B; ++b)
        w.add({at::arange(S, at::kLong),
               {},
               at::tensor({S - 1}, at::kLong),
               q[b].unsqueeze(2),
               K[b],
               V[b]});
    w.finish();
}

QByteArray readFile(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool writeFile(const QString& path, const QByteArray& data) {
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(data) == data.size();
}

std::vector<int64_t> goldenSubset(size_t n) {
    const bool all = qEnvironmentVariableIntValue("SPARQLAB_FULL_GOLDEN") != 0;
    const int stride =
        all ? 1
            : (qEnvironmentVariableIsSet("SPARQLAB_ATTEND_STRIDE")
                   ? std::max(1, qEnvironmentVariableIntValue("SPARQLAB_ATTEND_STRIDE"))
                   : 6);
    std::vector<int64_t> out;
    for (size_t i = 0; i < n; i += static_cast<size_t>(stride))
        out.push_back(static_cast<int64_t>(i));
    return out;
}

QString cliOut(const QStringList& args) {
    const ProcessResult r = runCli(args);
    if (r.exitCode != 0)
        throw std::runtime_error(args.join(QLatin1Char(' ')).toStdString() + ": " +
                                 r.err.toStdString());
    return r.out;
}

QStringList referenceFolders(const QString& set) {
    const QDir root(sharedDir() + QLatin1Char('/') + set);
    QStringList out;
    for (const QString& d : root.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name))
        if (QFile::exists(root.filePath(d + QStringLiteral("/golden.h5"))))
            out << d;
    return out;
}

QString idsJson(const std::vector<int64_t>& ids) {
    QJsonArray a;
    for (int64_t x : ids)
        a.append(static_cast<qint64>(x));
    return QString::fromUtf8(QJsonDocument(a).toJson(QJsonDocument::Compact));
}

ProcessResult runCli(const QStringList& args, int timeoutMs) {
    QProcess p;
    p.start(cliPath(), args);
    ProcessResult r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        r.err = QStringLiteral("timed out");
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

QString makeChatModel(const QString& folder, int positions) {
    QString qwenTemplate;
    // Where a reference is missing: a skip with the compact references or where its set is here
    // without it (setHere), an error where the full references lack the set.
    auto skip = [](const QString& what) {
        return fullReferences() && !setHere(what) ? QString() : QStringLiteral("skip: ");
    };
    const QString chat = QStringLiteral("refs/chat");
    const QString gpt2 = QStringLiteral("refs/tokenizers/gpt2/tokenizer.json");
    for (const QString& needed : {chat, gpt2})
        if (sharedFile(needed).isEmpty())
            return skip(needed) + notHere(needed);
    // Qwen2.5's template, from whichever golden file of the set holds it (chat_goldens.jsonl in
    // the set shown).
    QDirIterator it(sharedFile(chat), {QStringLiteral("*.jsonl")}, QDir::Files,
                    QDirIterator::Subdirectories | QDirIterator::FollowSymlinks);
    while (qwenTemplate.isEmpty() && it.hasNext()) {
        QFile goldens(it.next());
        if (!goldens.open(QIODevice::ReadOnly))
            return goldens.fileName() + QStringLiteral(": cannot be read");
        for (const QByteArray& line : goldens.readAll().split('\n')) {
            const QJsonObject o = QJsonDocument::fromJson(line).object();
            if (o.value(QStringLiteral("template_name")) ==
                QStringLiteral("Qwen/Qwen2.5-7B-Instruct"))
                qwenTemplate = o.value(QStringLiteral("template")).toString();
        }
    }
    if (qwenTemplate.isEmpty())
        return skip(chat) +
               notHere(QStringLiteral("refs/chat: Qwen/Qwen2.5-7B-Instruct's template"));
    const QString cfgPath = folder + QStringLiteral(".config.json");
    if (!writeFile(cfgPath, QByteArray(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": )"
                                       R"(32, "intermediate_size": 64, "num_attention_heads": 4, )"
                                       R"("num_key_value_heads": 2, "num_hidden_layers": 2, )"
                                       R"("vocab_size": 50257, "rope_theta": 10000.0, )"
                                       R"("max_position_embeddings": )") +
                                QByteArray::number(positions) + "}"))
        return cfgPath + QStringLiteral(": cannot write");
    const ProcessResult r = runCli({"init-model", "--config", cfgPath, "--out", folder, "--seed",
                                    "5", "--tokenizer", sharedFile(gpt2)});
    if (r.exitCode != 0)
        return r.err;
    const QByteArray config =
        QJsonDocument(QJsonObject{{QStringLiteral("chat_template"), qwenTemplate},
                                  {QStringLiteral("eos_token"), QStringLiteral("<|im_end|>")}})
            .toJson();
    if (!writeFile(folder + QStringLiteral("/tokenizer_config.json"), config))
        return folder + QStringLiteral("/tokenizer_config.json: cannot write");
    return {};
}

} // namespace sparqlab::test
