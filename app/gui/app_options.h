#pragma once
/// \file app_options.h
/// The command line of the GUI (`sparqlab [SESSION] --screenshot FILE --size WxH …`).

#include "attention/method_table.h"

#include <QString>
#include <QStringList>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::widgets {
class ControlsPanel;
}

namespace sparqlab::app {

/// What the GUI was asked to do at start-up.
struct AppOptions {
    QString model = QStringLiteral("demo"); ///< --model: folder, cached hub id or "demo"
    QString device = QStringLiteral("cpu"); ///< --device: cpu or cuda (Lab::setDevice)
    QString screenshot; ///< --screenshot FILE: render the window to a PNG and exit
    int width = 1280;   ///< window size for screenshots
    int height = 800;
    QString promptFile; ///< --prompt-file F: run this prompt once the model is open
    int layer = -1;     ///< --layer, --head: the head to show (−1: a session's, else 0)
    int head = -1;
    QString method;         ///< --method: sparq, oracle, flexgen, lminf, dense
    QString view;           ///< --view NAME, a view of the table (lab_view.h; empty: as is)
    QString compare;        ///< --compare METHOD: the compare view's second method
    QString eval;           ///< --eval FILE: a finished study's results in the trade-offs view
    int generate = 0;       ///< --generate N: generate N tokens after the prompt (decode steps)
    int step = -1;          ///< --step T: the decode step to show (−1: the last)
    int query = -1;         ///< --query P: the position whose query the views show (−1: the last)
    QString session;        ///< SESSION: a session file to open instead of a model
    int teach = 0;          ///< --teach N: teaching mode at step N (1–3; 4: the retrieval head)
    bool logScores = false; ///< --log-scores: the head view's scores on a logarithmic axis
    /// The parameters given (--r 8, --page-size 32, --budget 32, --normalize …), in the order of
    /// the parameter table, each checked against its range.
    std::vector<std::pair<attention::Param, std::string>> parameterValues;
};

/// Parses the arguments; on --help/--version or an error prints and returns the exit code.
std::optional<int> parseAppOptions(const QStringList& arguments, AppOptions* out);

/// The prompt of --prompt-file `path` (UTF-8), without the file's final line ending (an
/// editor's, not the prompt's: after a new line the demo model ends its text at once); empty with
/// *error set ("PATH: cannot read the prompt: why") where it cannot be read.
QString readPromptFile(const QString& path, QString* error);

/// Sets the controls to the method given (its defaults) and then to the parameters given.
/// Returns one line for each option given that is not taken: one the method does not take (as
/// the command line says it), or a value the controls do not hold (MiniMax-M3's block indexer
/// takes no l on its capture; a k beyond the capture's positions).
std::vector<std::string> applyMethodAndParameters(const AppOptions& options,
                                                  widgets::ControlsPanel& controls);

} // namespace sparqlab::app
