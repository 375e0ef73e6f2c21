#pragma once
/// \file timing_view.h
/// The timing view: decode time against S, and where a method pays off. Plain views: they show what
/// they are given and emit what the user asks.

#include "attention/attention.h"
#include "panels.h"

#include <QColor>
#include <QStringList>

#include <optional>
#include <vector>

class QCheckBox;
class QComboBox;
class QLabel;
class QPushButton;
class QCustomPlot;

namespace sparqlab::widgets {

/// Decode time against S for one model shape: per device, dense and each method of the decode
/// engine, measured at S = 256 … 32,768 with the lab's parameters.
struct TimingCurve {
    QString device;                          ///< "CPU" or "CUDA"
    std::vector<int64_t> seq;                ///< S of each point
    std::vector<double> denseUs;             ///< dense's median time at each S
    std::vector<double> denseQ1, denseQ3;    ///< its quartiles
    std::vector<QString> methods;            ///< method labels
    std::vector<attention::Method> ids;      ///< the methods (their colours and markers)
    std::vector<std::vector<double>> us;     ///< [method][point] median µs
    std::vector<std::vector<double>> q1, q3; ///< [method][point] quartiles
    std::vector<std::vector<double>> theory; ///< [method][point] theoretical speed-up
    int repeats = 0;                         ///< samples behind each median
};

/// The first S from which a method pays off with confidence: every point from it on has its
/// speed-up interval's lower end above 1. 0 when from the first point; −1 when the last point's
/// is not (the curve does not stay above 1 with confidence).
int64_t confidentPayoff(const std::vector<int64_t>& seq, const std::vector<double>& lower);

/// The timing curves: decode time against S (log-log) and the measured and theoretical
/// speed-up against S, the crossover (where a method starts to pay off) marked.
class TimingCurveView : public Panel {
    Q_OBJECT
public:
    explicit TimingCurveView(QWidget* parent = nullptr);
    /// Draws the curves (one per device; CUDA's dashed).
    void showCurves(const std::vector<TimingCurve>& curves, const QString& shape);
    void showProgress(const QString& text, bool running);
    QCustomPlot* timePlot() const { return m_time; }
    /// Lines in the time plot, and the points of line i (for tests).
    int timeLines() const;
    /// The tick labels of the time plot's (or the speed-up plot's) y axis as drawn.
    QStringList yTickLabels(bool speedup) const;
    int timePoints(int line) const;
    QCustomPlot* speedupPlot() const { return m_speedup; }
    QLabel* summary() const { return m_summary; }
    /// The method timed beside the lab's own against dense (none: the lab's alone), and
    /// whether every decode-engine method is (on request: eleven curves).
    std::optional<attention::Method> second() const;
    void setSecond(std::optional<attention::Method> m);
    bool everyMethod() const;
    void setEveryMethod(bool on);
    /// A method's curve colour and marker shape (QCPScatterStyle::ScatterShape), for tests.
    static QColor colorOf(attention::Method m);
    static int markerOf(attention::Method m);
    /// Line i's colour in the time plot, and the legend's entries of a plot (for tests).
    QColor lineColor(int line) const;
    int legendEntries(bool speedup) const;
    /// The legend box's height over the plot's (its entries sit together at the top).
    double legendHeightShare(bool speedup) const;

Q_SIGNALS:
    void measureRequested();
    void cancelRequested();
    /// The methods to time changed (second(), everyMethod()).
    void methodsChanged();

private:
    QComboBox* m_second;
    QCheckBox* m_every;
    QCustomPlot* m_time;
    QCustomPlot* m_speedup;
    QLabel* m_summary;
    QLabel* m_progress;
    QPushButton* m_measure;
    QPushButton* m_cancel;
};

} // namespace sparqlab::widgets
