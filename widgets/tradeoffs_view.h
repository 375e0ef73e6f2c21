#pragma once
/// \file tradeoffs_view.h
/// The "Trade-offs" tab: the paper's task-level study (`sparqlab-cli eval`) from the GUI —
/// pick a task, a data file, the methods and the grid; the study runs in the application's
/// worker, and the curves (metric against compression ratio, one line per method, ±1 standard
/// error) fill in as examples finish; export writes the figures (PNG, SVG, PDF), their CSV and
/// the Table 2 layout. GUI thread only.

#include "analysis/eval_figures.h"
#include "analysis/eval_task_table.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace sparqlab::widgets {

/// What Run asks the application to evaluate.
struct TradeoffRequest {
    analysis::EvalTask task = analysis::EvalTask::Repetition;
    QString dataPath;
    QString methods; ///< comma-separated method names
    QString r, k;    ///< comma-separated values; empty: each method's default grid
    int limit = 20;  ///< examples
    QString outPath; ///< the JSONL file the study writes (resumed when it exists)
    /// Each line also carries the decode engine's measured speed-up (eval --measure-speed).
    bool measureSpeed = false;
};

class TradeoffsView : public QWidget {
    Q_OBJECT
public:
    explicit TradeoffsView(QWidget* parent = nullptr);
    /// Points drawn on the plot now (every series), for tests.
    int plottedPoints() const;
    QWidget* plotWidget() const;
    /// The plot's axis labels now (for tests).
    QString xLabel() const;
    /// What the empty plot says in its middle ("" while it draws results).
    QString emptyNote() const;
    QString yLabel() const;

    /// Run is possible (a model with a tokenizer is open and no other work runs).
    void setRunEnabled(bool enabled);
    /// The open model (its folder, hub id or "demo"): each model's study has its own results
    /// file; another model clears the curves of the last. A model with its own selection (an
    /// indexer: DeepSeek-V3.2, GLM-5, MiniMax-M3) adds it to the default methods.
    void setModel(const QString& spec, bool ownSelection = false);
    /// While the study runs: Run off, Cancel on, the progress bar shown.
    void setRunning(bool running);
    void setProgress(int64_t done, int64_t total);
    /// Draws the records read so far (of the selected task).
    void showRecords(const std::vector<analysis::EvalRecord>& records);
    void showMessage(const QString& text);
    /// Sets the fields (for automation and tests).
    void setRequest(const TradeoffRequest& r);
    TradeoffRequest request() const;
    /// The records shown.
    const std::vector<analysis::EvalRecord>& records() const { return m_records; }
    /// Writes every figure (PNG, SVG, PDF + CSV) and table2.csv/.md into `dir`; returns the
    /// number of files, or −1 with *error set.
    int exportTo(const QString& dir, QString* error);
    /// Asks for a finished study's results file to be shown (Open results…, the app's
    /// --eval): openRequested, which the lab reads in a worker, then showResultsFile.
    void openResults(const QString& path);
    /// Shows the records of results file `path` (a study run before, `sparqlab-cli eval`'s):
    /// on the task of its first line where the chosen task has none, with a line saying what
    /// the file holds.
    void showResultsFile(const std::vector<analysis::EvalRecord>& records, const QString& path);
    /// A results file that could not be read: the reader's one-line error, in red, and
    /// openFailed (the records shown stay).
    void showResultsError(const QString& error);

Q_SIGNALS:
    void runRequested(const sparqlab::widgets::TradeoffRequest& request);
    void cancelRequested();
    void openRequested(const QString& path);
    void openFailed(const QString& error);

private:
    static QString noResultsYet();
    /// Empty axes of the task's metric against the chosen x, with `why` in the middle.
    void drawEmpty(const QString& why);
    void browse();
    void exportDialog();
    void openDialog();

    QComboBox* m_task;
    QLineEdit* m_data;
    QLineEdit* m_methods;
    QLineEdit* m_r;
    QLineEdit* m_k;
    QSpinBox* m_limit;
    QCheckBox* m_speed;   ///< measure each method's decode speed-up
    QComboBox* m_against; ///< the plot's x axis: compression or measured speed-up
    QPushButton* m_run;
    QPushButton* m_cancel;
    QPushButton* m_export;
    QPushButton* m_open; ///< a finished study's results (eval's JSON lines)
    QProgressBar* m_progress;
    QLabel* m_status;
    QCustomPlot* m_plot;
    QLabel* m_caption; ///< what the figure's points and bands are (FigureData::caption)
    std::vector<analysis::EvalRecord> m_records;
    QString m_model; ///< setModel's
};

} // namespace sparqlab::widgets
