#include "tradeoffs_view.h"

#include "analysis/eval_task_spec.h"
#include "model/resources.h"

#include "figure_renderer.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QCryptographicHash>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSaveFile>
#include <QSpinBox>
#include <QStandardPaths>
#include <QVBoxLayout>
#include <qcustomplot.h>

namespace sparqlab::widgets {

TradeoffsView::TradeoffsView(QWidget* parent)
    : QWidget(parent), m_task(new QComboBox), m_data(new QLineEdit), m_methods(new QLineEdit),
      m_r(new QLineEdit), m_k(new QLineEdit), m_limit(new QSpinBox),
      m_speed(new QCheckBox(tr("measure each setting's decode speed-up"))),
      m_against(new QComboBox), m_run(new QPushButton(tr("Run"))),
      m_cancel(new QPushButton(tr("Cancel"))), m_export(new QPushButton(tr("Export…"))),
      m_open(new QPushButton(tr("Open results…"))), m_progress(new QProgressBar),
      m_status(new QLabel), m_plot(new QCustomPlot), m_caption(new QLabel) {
    m_plot->setObjectName(QStringLiteral("tradeoffPlot"));
    m_caption->setObjectName(QStringLiteral("tradeoffCaption"));
    m_caption->setWordWrap(true);
    m_caption->setVisible(false);
    setObjectName(QStringLiteral("tradeoffsView"));
    QStringList tips;
    for (const analysis::EvalTaskSpec* t : analysis::evalTaskSpecs()) {
        m_task->addItem(QString::fromUtf8(t->name), static_cast<int>(t->id));
        m_task->setItemData(m_task->count() - 1, QString::fromUtf8(t->summary), Qt::ToolTipRole);
        tips << QStringLiteral("%1: %2").arg(QString::fromUtf8(t->name),
                                             QString::fromUtf8(t->summary));
    }
    m_task->setToolTip(tips.join(QLatin1Char('\n')));
    auto placeholder = [this] {
        const analysis::EvalTaskSpec& spec =
            analysis::evalTaskSpec(static_cast<analysis::EvalTask>(m_task->currentData().toInt()));
        m_data->setPlaceholderText(
            *spec.shippedData
                ? tr("empty: the shipped held-out text (%1)")
                      .arg(QString::fromUtf8(spec.shippedData))
                : tr("%1 (none ships with SparQ Lab)").arg(QString::fromUtf8(spec.data)));
    };
    connect(m_task, &QComboBox::currentIndexChanged, this, placeholder);
    placeholder();
    auto* browse = new QPushButton(tr("Browse…"));
    m_methods->setObjectName(QStringLiteral("tradeoffsMethods"));
    m_methods->setText(QString::fromLatin1(analysis::kPaperMethods));
    m_r->setText(QStringLiteral("8,16,32,64"));
    m_k->setPlaceholderText(tr("each method's grid (Table G1)"));
    m_limit->setRange(1, 100000);
    m_limit->setValue(20);
    m_run->setObjectName(QStringLiteral("tradeoffsRun"));
    m_open->setObjectName(QStringLiteral("tradeoffsOpen"));
    m_status->setObjectName(QStringLiteral("tradeoffsStatus"));
    m_open->setToolTip(tr("Show a study run before: the JSON lines of sparqlab-cli eval or of "
                          "an earlier Run (no model needed)"));
    m_cancel->setEnabled(false);
    m_export->setEnabled(false);
    m_progress->setVisible(false);
    m_status->setWordWrap(true);
    m_plot->setMinimumHeight(260);

    auto* dataRow = new QHBoxLayout;
    dataRow->addWidget(m_data, 1);
    dataRow->addWidget(browse);
    auto* form = new QFormLayout;
    form->addRow(tr("Task"), m_task);
    form->addRow(tr("Data"), dataRow);
    form->addRow(tr("Methods"), m_methods);
    form->addRow(tr("r"), m_r);
    form->addRow(tr("k"), m_k);
    form->addRow(tr("Examples"), m_limit);
    form->addRow(tr("Speed"), m_speed);
    m_against->addItem(tr("compression ratio"));
    m_against->addItem(tr("measured speed-up"));
    m_speed->setToolTip(tr("Times the decode engine for the model's shape at each length on this "
                           "machine and stores the speed-up over dense in every line"));
    form->addRow(tr("Score against"), m_against);
    m_speed->setObjectName(QStringLiteral("tradeoffsMeasureSpeed"));
    m_against->setObjectName(QStringLiteral("tradeoffsAgainst"));
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    buttons->addWidget(m_export);
    buttons->addWidget(m_open);
    buttons->addWidget(m_progress, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addLayout(buttons);
    layout->addWidget(m_status);
    layout->addWidget(m_plot, 1);
    layout->addWidget(m_caption);

    connect(browse, &QPushButton::clicked, this, &TradeoffsView::browse);
    connect(m_run, &QPushButton::clicked, this, [this]() { Q_EMIT runRequested(request()); });
    connect(m_cancel, &QPushButton::clicked, this, [this]() { Q_EMIT cancelRequested(); });
    connect(m_export, &QPushButton::clicked, this, &TradeoffsView::exportDialog);
    connect(m_open, &QPushButton::clicked, this, &TradeoffsView::openDialog);
    connect(m_task, &QComboBox::currentIndexChanged, this, [this]() { showRecords(m_records); });
    connect(m_against, &QComboBox::currentIndexChanged, this, [this]() { showRecords(m_records); });
    drawEmpty(noResultsYet());
    showMessage(tr("The paper's trade-off study on the open model: each example of a task under "
                   "every method and setting, scored against the compression ratio of "
                   "attention transfers (sparqlab-cli eval)."));
}

int TradeoffsView::plottedPoints() const {
    int n = 0;
    for (int i = 0; i < m_plot->plottableCount(); ++i)
        if (auto* g = qobject_cast<QCPGraph*>(m_plot->plottable(i)))
            n += g->dataCount();
    return n;
}

QString TradeoffsView::emptyNote() const {
    for (int i = 0; i < m_plot->itemCount(); ++i)
        if (const auto* t = qobject_cast<const QCPItemText*>(m_plot->item(i));
            t && t->objectName() == QLatin1String("emptyNote"))
            return t->text();
    return {};
}

QString TradeoffsView::xLabel() const {
    return m_plot->xAxis->label();
}

QString TradeoffsView::yLabel() const {
    return m_plot->yAxis->label();
}

QWidget* TradeoffsView::plotWidget() const {
    return m_plot;
}

QString TradeoffsView::noResultsYet() {
    return tr("No results yet: Run measures them on the open model,\nOpen results… reads a "
              "study's file");
}

void TradeoffsView::drawEmpty(const QString& why) {
    // No results yet: the axes the study will fill (its metric against the chosen x), not
    // placeholder numbers.
    m_plot->clearPlottables();
    m_plot->clearItems();
    QCPLayoutGrid* layout = m_plot->plotLayout(); // (a drawn figure's title goes too)
    for (int i = layout->elementCount() - 1; i >= 0; --i)
        if (QCPLayoutElement* e = layout->elementAt(i); e && !qobject_cast<QCPAxisRect*>(e))
            layout->remove(e);
    layout->simplify();
    m_caption->setVisible(false);
    const analysis::EvalTaskSpec& spec =
        analysis::evalTaskSpec(static_cast<analysis::EvalTask>(m_task->currentData().toInt()));
    const bool speed = m_against->currentIndex() == 1;
    m_plot->xAxis->setLabel(speed ? tr("measured decode speed-up over dense")
                                  : tr("compression ratio (attention transfers ÷ dense)"));
    m_plot->yAxis->setLabel(QString::fromUtf8(spec.metricLabel));
    m_plot->xAxis->setScaleType(QCPAxis::stLogarithmic);
    m_plot->xAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    m_plot->xAxis->setRange(speed ? 0.5 : 0.05, speed ? 20 : 1);
    m_plot->yAxis->setRange(0, spec.higherIsBetter ? 1 : 5);
    auto* note = new QCPItemText(m_plot); // (in the plot, where the curves would be)
    note->setObjectName(QStringLiteral("emptyNote"));
    note->position->setType(QCPItemPosition::ptAxisRectRatio);
    note->position->setCoords(0.5, 0.5);
    note->setText(why);
    note->setTextAlignment(Qt::AlignCenter);
    note->setColor(QColor(0x60, 0x60, 0x60));
    m_plot->replot();
}

void TradeoffsView::setRunEnabled(bool enabled) {
    m_run->setEnabled(enabled && !m_cancel->isEnabled());
}

void TradeoffsView::setRunning(bool running) {
    m_run->setEnabled(!running);
    m_open->setEnabled(!running); // (the running study's records replace what is shown)
    m_cancel->setEnabled(running);
    m_progress->setVisible(running);
    if (running)
        m_progress->setRange(0, 0);
}

void TradeoffsView::setProgress(int64_t done, int64_t total) {
    m_progress->setRange(0, static_cast<int>(std::max<int64_t>(1, total)));
    m_progress->setValue(static_cast<int>(done));
    m_progress->setFormat(tr("%1 of %2 examples").arg(done).arg(total));
}

void TradeoffsView::showMessage(const QString& text) {
    m_status->setText(text);
}

void TradeoffsView::setRequest(const TradeoffRequest& r) {
    m_task->setCurrentIndex(m_task->findData(static_cast<int>(r.task)));
    m_data->setText(r.dataPath);
    m_methods->setText(r.methods);
    m_r->setText(r.r);
    m_k->setText(r.k);
    m_limit->setValue(r.limit);
    m_speed->setChecked(r.measureSpeed);
}

TradeoffRequest TradeoffsView::request() const {
    TradeoffRequest r;
    r.task = static_cast<analysis::EvalTask>(m_task->currentData().toInt());
    r.dataPath = m_data->text().trimmed();
    // Out of the box: the text the project ships for the task (held-out addresses).
    const analysis::EvalTaskSpec& spec = analysis::evalTaskSpec(r.task);
    if (r.dataPath.isEmpty() && *spec.shippedData)
        r.dataPath = QString::fromStdString(model::resourcePath(spec.shippedData));
    r.methods = m_methods->text().trimmed();
    r.r = m_r->text().trimmed();
    r.k = m_k->text().trimmed();
    r.limit = m_limit->value();
    r.measureSpeed = m_speed->isChecked();
    // Results go beside the user's other caches, one file per model, task and data file, so a
    // study stopped half-way resumes, and another model's is never taken for this one's (its
    // folder's name and a hash of where it is: two folders of one name differ).
    const QString dir = QStandardPaths::writableLocation(QStandardPaths::CacheLocation);
    QDir().mkpath(dir);
    const QString model =
        m_model.isEmpty() ? QStringLiteral("model")
                          : QFileInfo(m_model).fileName() + QLatin1Char('-') +
                                QString::fromLatin1(QCryptographicHash::hash(
                                                        m_model.toUtf8(), QCryptographicHash::Sha1)
                                                        .toHex()
                                                        .left(8));
    r.outPath =
        QDir(dir).filePath(QStringLiteral("tradeoffs-%1-%2-%3.jsonl")
                               .arg(model, QString::fromUtf8(analysis::evalTaskName(r.task)),
                                    QFileInfo(r.dataPath).completeBaseName()));
    return r;
}

void TradeoffsView::setModel(const QString& spec, bool ownSelection) {
    if (spec == m_model)
        return;
    // The model's own selection joins the paper's methods while the list is the default one.
    const QString paper = QString::fromLatin1(analysis::kPaperMethods);
    const QString withOwn = paper + QStringLiteral(",indexer");
    if (m_methods->text() == paper || m_methods->text() == withOwn)
        m_methods->setText(ownSelection ? withOwn : paper);
    const bool another = !m_model.isEmpty();
    m_model = spec;
    if (another && !m_records.empty()) { // (the last model's curves are not this one's)
        showRecords({});
        showMessage(tr("Another model is open: Run its study, or Open results…"));
    }
}

void TradeoffsView::showRecords(const std::vector<analysis::EvalRecord>& records) {
    m_records = records;
    const std::string task =
        analysis::evalTaskName(static_cast<analysis::EvalTask>(m_task->currentData().toInt()));
    std::vector<analysis::EvalRecord> mine;
    for (const analysis::EvalRecord& r : records)
        if (r.task == task)
            mine.push_back(r);
    m_export->setEnabled(!records.empty());
    if (mine.empty()) {
        drawEmpty(records.empty() ? noResultsYet()
                                  : tr("These results hold no %1 study: pick another task")
                                        .arg(QString::fromStdString(task)));
        return;
    }
    const std::vector<analysis::FigureData> figs = analysis::evalFigures(mine);
    // Against the compression (the task's first figure) or the measured speed-up.
    const std::string want = "eval_" + task + (m_against->currentIndex() == 1 ? "_speedup" : "");
    const auto it = std::find_if(figs.begin(), figs.end(),
                                 [&](const analysis::FigureData& f) { return f.id == want; });
    if (it == figs.end()) {
        drawEmpty(tr("No measured speed-ups in these results"));
        showMessage(tr("No measured speed-ups in these results: tick “measure each setting's "
                       "decode speed-up” and run again."));
        return;
    }
    drawFigure(m_plot, *it);
    m_caption->setText(QString::fromStdString(it->caption));
    m_caption->setVisible(!it->caption.empty());
    m_plot->replot();
}

int TradeoffsView::exportTo(const QString& dir, QString* error) {
    if (!QDir().mkpath(dir)) {
        *error = dir + tr(": cannot create the folder");
        return -1;
    }
    int files = 0;
    for (const analysis::FigureData& f : analysis::evalFigures(m_records)) {
        const QString stem = QDir(dir).filePath(QString::fromStdString(f.id));
        for (const char* ext : {".png", ".svg", ".pdf"}) {
            if (!saveFigure(f, stem + QLatin1String(ext), 800, 520, error))
                return -1;
            ++files;
        }
        const std::string csv = analysis::figureCsv(f);
        QSaveFile out(stem + QStringLiteral(".csv"));
        if (!out.open(QIODevice::WriteOnly) || out.write(csv.data(), qint64(csv.size())) < 0 ||
            !out.commit()) {
            *error = stem + tr(".csv: cannot write");
            return -1;
        }
        ++files;
    }
    for (const auto& [name, text] :
         {std::pair<QString, std::string>{QStringLiteral("table2.csv"),
                                          analysis::evalTableCsv(m_records)},
          std::pair<QString, std::string>{QStringLiteral("table2.md"),
                                          analysis::evalTableMarkdown(m_records)}}) {
        QSaveFile out(QDir(dir).filePath(name));
        if (!out.open(QIODevice::WriteOnly) || out.write(text.data(), qint64(text.size())) < 0 ||
            !out.commit()) {
            *error = QDir(dir).filePath(name) + tr(": cannot write");
            return -1;
        }
        ++files;
    }
    return files;
}

void TradeoffsView::browse() {
    const QString f = QFileDialog::getOpenFileName(this, tr("Data for the task"), m_data->text());
    if (!f.isEmpty())
        m_data->setText(f);
}

void TradeoffsView::openResults(const QString& path) {
    showMessage(tr("Reading %1…").arg(path.toHtmlEscaped()));
    Q_EMIT openRequested(path);
}

void TradeoffsView::openDialog() {
    const QString f = QFileDialog::getOpenFileName(
        this, tr("A study's results"), QString(), tr("Results (*.jsonl *.partial);;All files (*)"));
    if (!f.isEmpty())
        openResults(f);
}

void TradeoffsView::showResultsFile(const std::vector<analysis::EvalRecord>& records,
                                    const QString& path) {
    const std::string chosen =
        analysis::evalTaskName(static_cast<analysis::EvalTask>(m_task->currentData().toInt()));
    std::vector<std::string> tasks; // in the file's order
    for (const analysis::EvalRecord& r : records)
        if (std::find(tasks.begin(), tasks.end(), r.task) == tasks.end())
            tasks.push_back(r.task);
    const analysis::EvalTaskSpec* known = nullptr; // the file's first task the lab knows
    for (const std::string& t : tasks)
        if (!known)
            known = analysis::findEvalTask(t);
    if (known && std::find(tasks.begin(), tasks.end(), chosen) == tasks.end()) {
        m_records = records; // what the task's change draws
        m_task->setCurrentIndex(m_task->findData(static_cast<int>(known->id)));
    }
    showRecords(records);
    QStringList names;
    for (const std::string& t : tasks)
        names << QString::fromStdString(t);
    const QString file = QFileInfo(path).fileName().toHtmlEscaped();
    showMessage(
        records.empty() ? tr("%1 holds no results.").arg(file)
        : !known ? tr("%1: %2 lines, of tasks this version does not know (%3): nothing to draw.")
                       .arg(file, QString::number(records.size()),
                            names.join(QStringLiteral(", ")).toHtmlEscaped())
                 : tr("%1: %2 lines of %3 (a study run before; Run adds to the lab's own file, not "
                      "this one).")
                       .arg(file, QString::number(records.size()),
                            names.join(QStringLiteral(", ")).toHtmlEscaped()));
}

void TradeoffsView::showResultsError(const QString& error) {
    showMessage(QStringLiteral("<span style='color:#b00020'>%1</span>").arg(error.toHtmlEscaped()));
    Q_EMIT openFailed(error);
}

void TradeoffsView::exportDialog() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Export the study to"));
    if (dir.isEmpty())
        return;
    QString error;
    const int n = exportTo(dir, &error);
    showMessage(n < 0 ? error : tr("Wrote %1 files to %2").arg(n).arg(dir));
}

} // namespace sparqlab::widgets
