#pragma once
/// \file app_options.h
/// The command line of the GUI (`sparqlab --screenshot FILE --size WxH`).

#include <QString>
#include <QStringList>

#include <optional>

namespace sparqlab::app {

/// What the GUI was asked to do at start-up.
struct AppOptions {
    QString model = QStringLiteral("demo"); ///< --model: folder, cached hub id or "demo"
    QString screenshot; ///< --screenshot FILE: render the window to a PNG and exit
    int width = 1280;   ///< window size for screenshots
    int height = 800;
};

/// Parses the arguments; on --help/--version or an error prints and returns the exit code.
std::optional<int> parseAppOptions(const QStringList& arguments, AppOptions* out);

} // namespace sparqlab::app
