#pragma once
/// \file figure_renderer.h
/// Draws analysis::FigureData with QCustomPlot in one consistent style and saves it as PNG,
/// SVG or PDF. Needs a QApplication (the offscreen platform is enough). GUI thread only.

#include "analysis/figures.h"

#include <QString>

class QCustomPlot;

namespace sparqlab::widgets {

/// Fills `plot` with the figure (clearing what was there).
void drawFigure(QCustomPlot* plot, const analysis::FigureData& figure);

/// Renders the figure at width × height and saves it; format from the suffix (png, svg, pdf).
/// Returns false with *error set on failure. Files are written to a temporary name first.
bool saveFigure(const analysis::FigureData& figure, const QString& path, int width, int height,
                QString* error);

/// Saves a drawn plot at width × height (png, svg or pdf by the suffix), through a temporary
/// name. Returns false with *error set on failure.
bool savePlot(QCustomPlot* plot, const QString& path, int width, int height, const QString& title,
              QString* error);

} // namespace sparqlab::widgets
