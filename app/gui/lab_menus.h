#pragma once
/// \file lab_menus.h
/// The lab window's menus (File, View, Help) and their dialogs, and what File writes from the
/// window itself (the plots shown, a screenshot). What they start is the lab's (app/lab/lab.h)
/// or the window's. GUI thread only.

#include <QString>
#include <QStringList>

class QWidget;

namespace sparqlab::app {

class MainWindow;

/// Adds the menus to `w`'s menu bar.
void addLabMenus(MainWindow& w);

/// Writes the plots of the view `w` shows, as displayed, next to `base` (BASE-VIEW-PLOT.EXT,
/// the format by its suffix); the paths, or `error` naming the file that failed.
QStringList exportShownPlots(MainWindow& w, const QString& base, QString* error);

/// Renders `w` (as shown) to a PNG. Returns false with *error set on failure.
bool saveScreenshot(QWidget& w, const QString& path, QString* error);

} // namespace sparqlab::app
