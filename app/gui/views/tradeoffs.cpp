// Trade-offs: the paper's task-level study (eval) on the open model, run in the model's worker,
// its curves drawn as the results file grows; resumed where it stopped.

#include "analysis/eval_figures.h"
#include "analysis/eval_run.h"
#include "analysis/eval_task_spec.h"
#include "app/gui/lab_view.h"
#include "app/lab/worker_pool.h"
#include "model/model.h"
#include "sparqlab/version.h"
#include "widgets/tradeoffs_view.h"

#include <QFileInfo>
#include <QFutureWatcher>
#include <QPointer>
#include <QtConcurrent/QtConcurrent>

namespace sparqlab::app {
namespace {

class TradeoffsUnit : public LabView {
public:
    TradeoffsUnit(LabHost& host, QWidget* parent)
        : LabView(parent), m_host(host), m_view(new widgets::TradeoffsView(parent)) {
        connect(m_view, &widgets::TradeoffsView::runRequested, this,
                [this](const widgets::TradeoffRequest& r) { run(r); });
        connect(m_view, &widgets::TradeoffsView::cancelRequested, this,
                [this] { m_host.cancelModelWork(); });
        connect(m_view, &widgets::TradeoffsView::openRequested, this,
                [this](const QString& path) { open(path); });
        connect(&m_reading, &QFutureWatcher<Read>::finished, this, [this] {
            m_readPending = false;
            const Read r = m_reading.result();
            if (!r.error.isEmpty())
                m_view->showResultsError(r.error);
            else
                m_view->showResultsFile(r.records, r.path);
        });
    }
    ~TradeoffsUnit() override { m_reading.waitForFinished(); }
    QWidget* widget() override { return m_view; }
    void refresh() override {
        const auto model = m_host.model();
        m_view->setRunEnabled(model && model->hasTokenizer() && !m_running);
        if (model && !m_running)
            m_view->setModel(m_host.modelSpec(), model->config().indexer.active());
    }
    // (Until the records are drawn: the watcher stops running before its finished signal.)
    bool busy() const override { return m_running || m_readPending; }

private:
    /// A results file read in a worker: the records, or the reader's one-line error.
    struct Read {
        QString path;
        std::vector<analysis::EvalRecord> records;
        QString error;
    };

    void open(const QString& path) {
        if (m_running) { // (its records would replace the file's at its next progress)
            m_view->showMessage(tr("Wait for the running study to end, or cancel it."));
            return;
        }
        if (m_readPending) {
            m_view->showMessage(tr("Still reading the last file."));
            return;
        }
        m_readPending = true;
        m_reading.setFuture(QtConcurrent::run(workerPool(), [path]() {
            Read r{path, {}, {}};
            try {
                r.records = analysis::readEvalJsonl(path.toStdString());
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        }));
    }

    void run(const widgets::TradeoffRequest& r) {
        const std::shared_ptr<model::Model> model = m_host.model();
        if (!model) {
            m_view->showMessage(tr("Open a model first."));
            return;
        }
        analysis::EvalOptions o;
        o.task = r.task;
        o.dataPath = r.dataPath.toStdString();
        const analysis::EvalTaskSpec& spec = analysis::evalTaskSpec(r.task);
        o.outPath = r.outPath.toStdString();
        o.limit = r.limit;
        o.measureSpeed = r.measureSpeed;
        o.resume = true; // a study stopped half-way goes on where it stopped
        o.modelName = analysis::evalModelName(*model);
        o.createdBy = std::string("sparqlab ") + SPARQLAB_VERSION;
        try {
            if (o.dataPath.empty())
                throw std::runtime_error(std::string("choose a data file for ") + spec.label +
                                         " (" + spec.data + "); none ships with SparQ Lab");
            std::vector<attention::Method> methods;
            for (const QString& m : r.methods.split(QLatin1Char(','), Qt::SkipEmptyParts))
                methods.push_back(attention::parseMethod(m.trimmed().toStdString()));
            std::map<attention::Param, std::vector<std::string>> overrides;
            auto list = [&](attention::Param p, const QString& text) {
                for (const QString& v : text.split(QLatin1Char(','), Qt::SkipEmptyParts))
                    overrides[p].push_back(v.trimmed().toStdString());
            };
            list(attention::Param::R, r.r);
            list(attention::Param::K, r.k);
            const model::ModelConfig& mc = model->config();
            o.points = analysis::evalGrid(methods, overrides, "", mc.headDim, mc.maxPositions);
        } catch (const std::exception& e) {
            m_view->showMessage(QStringLiteral("<span style='color:#b00020'>%1</span>")
                                    .arg(QString::fromUtf8(e.what()).toHtmlEscaped()));
            return;
        }
        // Progress and the curves so far, from the worker to this thread.
        QPointer<widgets::TradeoffsView> view = m_view;
        const std::string partial = o.outPath + ".partial";
        auto progress = [view, partial](int64_t done, int64_t total, const std::string&) {
            QMetaObject::invokeMethod(
                view,
                [view, partial, done, total]() {
                    if (!view)
                        return;
                    view->setProgress(done, total);
                    try {
                        view->showRecords(analysis::readEvalJsonl(partial));
                    } catch (const std::exception&) {
                    }
                },
                Qt::QueuedConnection);
        };
        auto summary = std::make_shared<QString>();
        const bool started = m_host.runModelWork(
            [model, o, progress, summary](const base::Job& job) mutable {
                o.job = job;
                o.job.progress = progress;
                const analysis::EvalSummary s = analysis::runEval(*model, o);
                if (s.examples == 0) { // say why, not "0 lines"
                    *summary = QObject::tr("No example of %1 fits in %2: the text is too short, "
                                           "or the model's context (%3 tokens) too small for "
                                           "its examples.")
                                   .arg(QString::fromUtf8(analysis::evalTaskSpec(o.task).label),
                                        QString::fromStdString(o.dataPath))
                                   .arg(model->config().maxPositions);
                    return;
                }
                *summary = QObject::tr("%1 examples × %2 settings: %3 lines (%4 from before) in %5")
                               .arg(s.examples)
                               .arg(o.points.size())
                               .arg(s.lines)
                               .arg(s.skipped)
                               .arg(QString::fromStdString(s.outPath));
            },
            [this, summary, out = o.outPath](const QString& error, bool cancelled) {
                done(*summary, error, cancelled, out);
            });
        if (!started) {
            m_view->showMessage(tr("Wait for the running work to end."));
            return;
        }
        m_running = true;
        m_view->setRunning(true);
        m_view->showMessage(tr("Running %1 settings…").arg(o.points.size()));
    }

    /// `out`: the run's own results file (the task chosen may have changed since).
    void done(const QString& summary, const QString& error, bool cancelled,
              const std::string& out) {
        m_running = false;
        m_view->setRunning(false);
        if (!error.isEmpty())
            m_view->showMessage(
                QStringLiteral("<span style='color:#b00020'>%1</span>").arg(error.toHtmlEscaped()));
        else
            m_view->showMessage(cancelled ? tr("Stopped; Run again to resume.") : summary);
        try { // the final file (or the partial one, when stopped)
            const std::string path = QFileInfo::exists(QString::fromStdString(out + ".partial"))
                                         ? out + ".partial"
                                         : out;
            if (QFileInfo::exists(QString::fromStdString(path)))
                m_view->showRecords(analysis::readEvalJsonl(path));
        } catch (const std::exception&) {
        }
        refresh(); // last: a model opened while the study ran clears its curves
    }

    LabHost& m_host;
    widgets::TradeoffsView* m_view;
    bool m_running = false;
    QFutureWatcher<Read> m_reading;
    bool m_readPending = false;
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(tradeoffs) {
    return {.name = "tradeoffs",
            .label = "Trade-offs",
            .order = 3,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new TradeoffsUnit(host, parent);
            }};
}
