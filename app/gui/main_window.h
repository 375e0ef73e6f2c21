#pragma once
/// \file main_window.h
/// The main window of SparQ Lab arranges: model and prompt on the left, the views (the table of
/// lab_view.h) under the teaching and query bars in the middle, controls, transfer, timing and
/// statistics on the right. What the lab holds and computes is the Lab's (app/lab/lab.h: the
/// model, the capture, the workers); each view computes in its own worker; the window hands the
/// lab its settings and shows what it says (docs/ARCHITECTURE.md). GUI thread only.

#include "app/gui/lab_view.h"
#include "app/lab/lab.h"

#include <QMainWindow>

#include <vector>

class QTabWidget;
class QTimer;

namespace sparqlab::widgets {
class ModelPanel;
class PromptPanel;
class HeadView;
class ControlsPanel;
class TransferPanel;
class StatsPanel;
class TimingPanel;
} // namespace sparqlab::widgets

namespace sparqlab::app {

class QueryBar;
class TeachingBar;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    /// The lab: its model, capture, state and workers.
    Lab* lab() const { return m_lab; }
    /// Whether closing the window keeps r and k for the next start (off for runs driven by
    /// command-line options: what they set is not the user's choice).
    void setRememberSettings(bool remember) { m_rememberSettings = remember; }
    /// Captures q, K and V of `text` with the prompt box's chat settings (what Run does).
    /// `firstScreen`: a start's first run, which picks the head shown (analysis::firstScreenHead).
    void runPrompt(const QString& text, bool firstScreen = false);
    /// Generates `tokens` tokens after the prompt box's text with the lab's method (Generate).
    void generate(int tokens);
    /// Recomputes what is shown (the live views, then the others) from the capture and settings.
    void redraw();
    /// Runs a redraw the controls asked for now, if one is pending (redraws are coalesced:
    /// many control changes in one turn of the event loop draw once), and waits for the live
    /// views' work and the shown view's.
    void flushRedraw();
    /// Teaching mode: 0 off, 1–3 the step of SparQ being presented, 4 retrieval.
    void setTeachingStep(int step);
    int teachingStep() const;
    /// The session the lab would save now (without its capture's copy), and saving it to
    /// `path` in a worker (lab()->isExporting() until done).
    analysis::Session currentSession() const;
    void saveSessionTo(const QString& path);
    /// Decode steps: the step shown (0 … steps, steps = the last position), −1 when the
    /// query shown is not a generated token's.
    int decodeStep() const;
    void setDecodeStep(int step);
    /// Shows the view named `name` (the view table's, lab_view.h); false when there is none.
    bool showView(const QString& name);
    QString currentViewName() const;
    /// The view named `name` (null: none).
    LabView* view(const QString& name) const;
    QString timingText() const;

    /// The widget of the view named `name` as a W (null: none, or not a W), for automation and
    /// tests (widgets::CompareView of "compare", …).
    template <typename W> W* viewWidget(const char* name) const {
        LabView* v = view(QString::fromUtf8(name));
        return v ? qobject_cast<W*>(v->widget()) : nullptr;
    }
    /// The columns beside the views: the model and prompt (left), the controls, transfer and
    /// readouts (right). A lecturer hides one to give the view its width (View menu); hidden,
    /// a column keeps its state and shows again as it was.
    enum class Side { Left, Right };
    void setSideShown(Side side, bool shown);
    bool sideShown(Side side) const;
    widgets::HeadView* headView() const;
    widgets::ControlsPanel* controls() const { return m_controls; }
    widgets::PromptPanel* promptPanel() const { return m_prompt; }
    widgets::TransferPanel* transferPanel() const { return m_transfer; }

private:
    struct View {
        const ViewSpec* spec;
        LabView* view;
    };
    void connectLab();
    void modelOpened(const QString& failed);
    void captured(const WorkResult& w);
    void restoreSession(const analysis::Session& s, const QString& path);
    void showCapture(std::shared_ptr<const analysis::LabCapture> capture);
    void headStateChanged();
    void errorChanged(const QString& message);
    LabView* currentView() const;

    Lab* m_lab;
    widgets::ModelPanel* m_model;
    widgets::PromptPanel* m_prompt;
    widgets::ControlsPanel* m_controls;
    widgets::TransferPanel* m_transfer;
    widgets::StatsPanel* m_stats;
    widgets::TimingPanel* m_timing;
    std::vector<View> m_views; ///< in the view table's order, one tab each
    QTabWidget* m_tabs;
    QWidget* m_left = nullptr;             ///< the model and prompt column
    QWidget* m_right = nullptr;            ///< the controls, transfer and readouts column
    int m_leftWidth = 0, m_rightWidth = 0; ///< each column's width when it was hidden
    QueryBar* m_query;
    TeachingBar* m_teach;
    QTimer* m_redrawTimer;
    bool m_rememberSettings = true;
};

} // namespace sparqlab::app
