#pragma once
/// \file lab_views.h
/// The lab's views: the controls (r, k, l, temperature, GQA rule, method, layer, head), the
/// head view (SparQ's three steps for one head), the layer × head overview grids and the
/// transfer panel. Plain views: they show what they are given and emit what the user asks.

#include "analysis/lab.h"
#include "analysis/lab_map.h"
#include "attention/attention.h"
#include "panels.h"

#include <QColor>
#include <QWidget>

#include <map>
#include <memory>
#include <optional>

class QCheckBox;
class QComboBox;
class QFormLayout;
class QCPTextElement;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSlider;
class QTableWidget;
class QTimer;
class QSpinBox;
class QTextBrowser;
class QCustomPlot;
class QCPColorMap;
class QCPItemRect;
class QCPColorScale;
class QCPItemStraightLine;
class QCPItemText;

namespace sparqlab::widgets {

/// A slider with a number box beside it, kept in step.
class SliderBox : public QWidget {
    Q_OBJECT
public:
    SliderBox(const QString& name, QWidget* parent = nullptr);
    void setRange(int lo, int hi);
    int value() const;
    void setValue(int v);
    QSlider* slider() const { return m_slider; }
    QSpinBox* box() const { return m_box; }
    /// What the user asked for; value() is it clamped to the range of the capture shown.
    int chosen() const { return m_chosen; }
    /// What is said beside the box when a typed value was brought into the range ("" else).
    QString note() const;

Q_SIGNALS:
    void valueChanged(int value);

private:
    static constexpr int kTypedMax = 1 << 30; ///< what the box accepts typed
    QSlider* m_slider;
    QSpinBox* m_box;
    QLabel* m_note;
    int m_chosen = 0;
};

/// Every parameter of the attention being watched, built from the method table: the method
/// list and, for the chosen method, only the parameters it takes. Emits changed() on any edit.
class ControlsPanel : public Panel {
    Q_OBJECT
public:
    explicit ControlsPanel(QWidget* parent = nullptr);
    /// Ranges for a capture: layers, heads, head_dim and positions S.
    void setLimits(int layers, int heads, int headDim, int positions);
    attention::AttentionConfig config() const;
    /// A calibration file loaded for its method (Loki's basis, Double Sparsity's channels):
    /// config() carries it while that method is chosen; null: the lab calibrates on the prompt.
    void setCalibration(attention::Method m, std::shared_ptr<attention::Calibration> cal);
    std::shared_ptr<attention::Calibration> calibration(attention::Method m) const;
    /// r and k as the user chose them (the values shown may be clamped to the capture).
    int chosenR() const { return m_r->chosen(); }
    int chosenK() const { return m_k->chosen(); }
    int layer() const;
    int head() const;
    void setLayerHead(int layer, int head);
    void setR(int r);
    void setK(int k);
    void setLocal(int l);
    void setMethod(attention::Method m);
    /// Every control from `c` (the method and each parameter it has), then one changed().
    void setConfig(const attention::AttentionConfig& c);
    /// Shows the rows of the parameters `m` takes (attention::takes), hides the others.
    void showParametersOf(attention::Method m);
    /// Whether the row of parameter p is shown now (for tests).
    bool isShown(attention::Param p) const;
    /// Whether the user set the local window; until then config() leaves it to the method's own
    /// default (H2O: ⌊k/4⌋, as the command line), which the slider shows.
    bool localSet() const { return m_localSet; }

Q_SIGNALS:
    void changed();

private:
    /// The slider shows the method's default local window for the k shown (while not set).
    void showDefaultLocal();
    QWidget* rowOf(attention::Param p) const;
    /// The rows of the parameters without a field (ParamInfo::generic), one widget each by its
    /// kind, made from the table.
    void addGenericRows();
    /// The GQA rules `m` takes in the GQA box, and the method's own defaults in the rows.
    void applyMethodDefaults(attention::Method m);

    QFormLayout* m_form;
    QSpinBox* m_layer;
    QSpinBox* m_head;
    QComboBox* m_method;
    SliderBox* m_r;
    SliderBox* m_k;
    SliderBox* m_local;
    QWidget* m_tauRow;
    QComboBox* m_tau;
    QDoubleSpinBox* m_tauValue;
    QComboBox* m_gqa;
    QCheckBox* m_meanValue;
    QSpinBox* m_pageSize;
    QDoubleSpinBox* m_p;
    QSpinBox* m_window;
    QSpinBox* m_kernel;
    QComboBox* m_pooling;
    QLabel* m_basis;
    QLabel* m_channels;
    std::map<attention::Param, QWidget*> m_generic;
    std::map<attention::Method, std::shared_ptr<attention::Calibration>> m_calibrations;
    bool m_localSet = false;
};

/// SparQ's three steps for one head and the decode-step query (SPARQ.md §3).
class HeadView : public Panel {
    Q_OBJECT
public:
    explicit HeadView(QWidget* parent = nullptr);
    /// Draws a head. `tokens` label the position axis (may be empty); tokens after the query's
    /// position (the state's S − 1) are the keys it cannot see: the strip shows them greyed, to
    /// be clicked.
    void showHead(const analysis::HeadState& state, const std::vector<std::string>& tokens);
    /// Shows a message instead of plots (no capture yet, or an error).
    void showMessage(const QString& text);
    /// Teaching mode: 0 none, else the step (1–3) whose plot is framed.
    void highlightStep(int step);
    /// Positions the chat template wrote (true) rather than a turn's content: the token strip
    /// greys their text. Empty: no chat.
    void setTemplateTokens(std::vector<bool> templateTokens);
    const std::vector<bool>& templateTokens() const { return m_templateTokens; }

    QCustomPlot* componentsPlot() const { return m_step1; }
    QCustomPlot* scoresPlot() const { return m_step2; }
    QLabel* summary() const { return m_step3; }
    QTextBrowser* tokenView() const { return m_tokens; }
    /// What the scores plot shows now (for tests): exact and approximate series.
    const analysis::HeadState& state() const { return m_state; }
    /// Points of the scores plot's curves (exact s, ŝ) that its legend covers as drawn.
    int pointsUnderLegend() const;
    /// What hovering at a position of the scores plot, or at a component of Step 1, shows.
    QString scoreTip(int64_t position) const;
    QString componentTip(int64_t component) const;

Q_SIGNALS:
    /// A token of the strip was clicked: show the query of that position.
    void queryChosen(qint64 position);

private:
    void drawTokens();
    void hoverPlot(QCustomPlot* plot, QMouseEvent* event);
    void drawComponents(const analysis::HeadState& h, size_t D);
    void drawStepOne(const attention::StepOneView& v);
    QString stepOneTip(double x) const;

    QCustomPlot* m_step1;
    QCustomPlot* m_step2;
    QLabel* m_step3;
    QLabel* m_captions[3] = {};
    QComboBox* m_tint;
    QTextBrowser* m_tokens;
    QLabel* m_tokenRange; ///< which tokens the strip shows, when not all
    QTimer* m_stripTimer = nullptr;
    int64_t m_stripFrom = -1, m_stripTo = -1;
    static constexpr int64_t kStripTokens = 1000;
    static constexpr int64_t kStripAfter = 300; ///< tokens after the query in the strip
    QLabel* m_message;
    analysis::HeadState m_state;
    std::vector<std::string> m_tokenTexts;
    std::vector<float> m_tinted; // the weights the token view shows now
    std::vector<bool> m_templateTokens;
};

/// Three layer × head grids, each of a measure the user picks (coverage, kurtosis, SparQ's
/// agreement, the method's recall or output error, k_mass), colour-mapped.
class OverviewView : public Panel {
    Q_OBJECT
public:
    explicit OverviewView(QWidget* parent = nullptr);
    /// The grids of every layer and head for the query at position `query`.
    void showOverview(const analysis::Overview& o, int r, int k, int64_t query = -1);
    void showMessage(const QString& text);
    QCustomPlot* plot() const { return m_plot; }
    /// The value drawn at (grid 0–2, layer, head), for tests.
    double cell(int grid, int layer, int head) const;
    /// Where (grid, layer, head) is drawn, in the plot's pixels.
    QPoint cellCenter(int grid, int layer, int head) const;
    /// The measure grid i shows.
    analysis::Measure measure(int grid) const;
    void setMeasure(int grid, analysis::Measure m);
    /// Frames the head the head view shows, in every grid.
    void setCurrentHead(int layer, int head);

Q_SIGNALS:
    void cellClicked(int layer, int head);

private:
    void draw();

    QCustomPlot* m_plot;
    QCPColorMap* m_maps[3] = {};
    QComboBox* m_measures[3] = {};
    QCPTextElement* m_titles[3] = {};
    QCPItemRect* m_current[3] = {};
    int m_currentLayer = -1, m_currentHead = -1;
    QLabel* m_message;
    analysis::Overview m_last;
};

/// What the query × key map colours.
enum class MapMode { Exact, Approx, Chosen, Missed };

/// The query × key map of the lab's head (analysis/lab_map.h): rows are queries, columns keys,
/// coloured by the exact attention, the method's ŝ, or the exact attention on the positions it
/// attends to or misses; the head view's query marked. Hover: values; click: that row's query.
class QueryKeyMapView : public Panel {
    Q_OBJECT
public:
    explicit QueryKeyMapView(QWidget* parent = nullptr);
    /// Draws a map; `what` names the layer, head and method; `query` is the head view's query
    /// (marked when in the window); `tokens` the capture's token texts.
    void showMap(const analysis::QueryKeyMap& map, const QString& what, int64_t query,
                 const std::vector<std::string>& tokens);
    void showMessage(const QString& text);
    void setMode(MapMode m);
    MapMode mode() const;
    static QString modeLabel(MapMode m);
    /// The value drawn for (query, key) in the current mode (NaN: blank), and the hover text.
    double value(int64_t query, int64_t key) const;
    QString tipFor(int64_t query, int64_t key) const;
    const analysis::QueryKeyMap& map() const { return m_last; }
    QCustomPlot* plot() const { return m_plot; }
    QWidget* plotWidget() const;
    /// Where (query, key) is drawn, in the plot's pixels.
    QPoint pixelOf(int64_t query, int64_t key) const;
    QLabel* caption() const { return m_caption; }

Q_SIGNALS:
    void queryChosen(qint64 position);

private:
    void draw();
    QString tipAt(const QPoint& pixel) const;

    QCustomPlot* m_plot;
    QComboBox* m_mode;
    QLabel* m_caption;
    QLabel* m_message;
    QCPColorMap* m_map = nullptr;
    QCPColorScale* m_scale = nullptr;
    QCPItemStraightLine* m_row = nullptr;
    QCPItemText* m_rowLabel = nullptr;
    analysis::QueryKeyMap m_last;
    QString m_what;
    int64_t m_query = -1;
    std::vector<std::string> m_tokens;
};

/// Elements moved per head for dense and the chosen method (the transfer model, SPARQ.md §5).
class TransferPanel : public Panel {
    Q_OBJECT
public:
    explicit TransferPanel(QWidget* parent = nullptr);
    /// The method's transfer at S positions; `count` is the positions it attended (the
    /// top-p methods' n; < 0: k); `valueDim` d_v where it differs (MLA, 0: d_h); `latent` the
    /// elements an MLA cache holds per position for all heads (0: not MLA).
    void showTransfer(const attention::AttentionConfig& c, int64_t S, int64_t headDim,
                      double count = -1, int64_t valueDim = 0, int64_t latent = 0,
                      int64_t kvHeads = 0, const QStringList& fitted = {});
    QLabel* text() const { return m_text; }

private:
    QLabel* m_text;
};

/// Two methods side by side on one head: the exact scores with both chosen sets and each
/// one's approximate scores, and a table of transfer, α, output error, recall of the true
/// top-k and mass kept. The first method is the lab's (its controls), the second one is picked
/// here and runs with the same parameters where it takes them.
class CompareView : public Panel {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    /// Draws the two states of one head (a, b) and their transfer at S positions.
    void showPair(const analysis::HeadState& a, const analysis::HeadState& b);
    void showMessage(const QString& text);
    attention::Method second() const;
    void setSecond(attention::Method m);
    QCustomPlot* plot() const { return m_plot; }
    /// The table's text at (row, column 1 or 2), for tests.
    QString cell(int row, int column) const;
    int rowCount() const;
    const analysis::HeadState& first() const { return m_a; }
    const analysis::HeadState& secondState() const { return m_b; }

Q_SIGNALS:
    void secondChanged();

private:
    QComboBox* m_method;
    QCustomPlot* m_plot;
    QTableWidget* m_table;
    QLabel* m_message;
    analysis::HeadState m_a, m_b;
};

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

/// Writes every plot shown in `view` (a tab of the lab), as displayed (its size on screen), as
/// STEM-NAME.EXT (png, svg or pdf; NAME the plot's object name, else its place): what is on
/// screen, whichever view it is. The paths written; on a failure `error` names the file and
/// the rest is not written.
QStringList exportShownPlots(QWidget* view, const QString& stem, const QString& ext,
                             QString* error);

} // namespace sparqlab::widgets
