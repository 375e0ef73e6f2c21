#pragma once
/// \file main_window.h
/// The main window of SparQ Lab: model and prompt on the left, the attention view in the
/// middle, statistics and timing on the right. GUI thread only.

#include <QMainWindow>

namespace sparqlab::widgets {
class ModelPanel;
class PromptPanel;
class AttentionView;
class StatsPanel;
class TimingPanel;
} // namespace sparqlab::widgets

namespace sparqlab::app {

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    /// Renders the window (as shown) to a PNG. Returns false with *error set on failure.
    bool saveScreenshot(const QString& path, QString* error);

private:
    void buildMenus();
    void openModelDialog();
    void showAbout();

    widgets::ModelPanel* m_model;
    widgets::PromptPanel* m_prompt;
    widgets::AttentionView* m_attention;
    widgets::StatsPanel* m_stats;
    widgets::TimingPanel* m_timing;
};

} // namespace sparqlab::app
