#pragma once
/// \file figure_renderer.h
/// Draws analysis::FigureData with QCustomPlot in one consistent style and saves it as PNG,
/// SVG or PDF. Needs a QApplication (the offscreen platform is enough). GUI thread only.

#include "analysis/figures.h"

#include <QString>
#include <QStringList>
#include <QWidget>

class QCustomPlot;
class QLabel;

namespace sparqlab::widgets {

/// Fills `plot` with the figure (clearing what was there).
void drawFigure(QCustomPlot* plot, const analysis::FigureData& figure);

/// A figure of the lab drawn as drawFigure draws it, with its caption below and its numbers at
/// hand: csv() is what `sparqlab-cli figures` writes beside the image (analysis::figureCsv).
class FigurePlot : public QWidget {
    Q_OBJECT
public:
    explicit FigurePlot(QWidget* parent = nullptr);
    void showFigure(const analysis::FigureData& figure);
    /// Nothing drawn, `message` where the caption goes.
    void showMessage(const QString& message);
    QString figureId() const { return m_id; }
    QString csv() const { return m_csv; }
    QString caption() const;

private:
    QCustomPlot* m_plot;
    QLabel* m_caption;
    QString m_id, m_csv;
};

/// Renders the figure at width × height and saves it; format from the suffix (png, svg, pdf).
/// Returns false with *error set on failure. Files are written to a temporary name first.
bool saveFigure(const analysis::FigureData& figure, const QString& path, int width, int height,
                QString* error);

/// Saves a drawn plot at width × height (png, svg or pdf by the suffix), through a temporary
/// name. Returns false with *error set on failure.
bool savePlot(QCustomPlot* plot, const QString& path, int width, int height, const QString& title,
              QString* error);

/// Writes every plot shown in `view` (a tab of the lab), as displayed (its size on screen), as
/// STEM-NAME.EXT (png, svg or pdf; NAME the plot's object name, else its place): what is on
/// screen, whichever view it is. The paths written; on a failure `error` names the file and
/// the rest is not written.
QStringList exportShownPlots(QWidget* view, const QString& stem, const QString& ext,
                             QString* error);

} // namespace sparqlab::widgets
