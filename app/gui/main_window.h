#pragma once
/// \file main_window.h
/// The main window of SparQ Lab: model and prompt on the left, the attention view in the
/// middle, statistics and timing on the right. GUI thread only.

#include <QFutureWatcher>
#include <QMainWindow>

#include <memory>

namespace sparqlab::widgets {
class ModelPanel;
class PromptPanel;
class AttentionView;
class StatsPanel;
class TimingPanel;
} // namespace sparqlab::widgets

namespace sparqlab::capture {
class Model;
}

namespace sparqlab::app {

/// A model opened off the GUI thread, or the one-line error that stopped it.
struct LoadResult {
    std::shared_ptr<capture::Model> model;
    QString error;
    QString spec;
};

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    /// Opens a model (folder, cached hub id or "demo") in a worker thread; the model panel
    /// shows its shape when done, or the error.
    void openModel(const QString& spec);
    /// True while a model is being opened.
    bool isLoading() const;

    /// Renders the window (as shown) to a PNG. Returns false with *error set on failure.
    bool saveScreenshot(const QString& path, QString* error);

private:
    void buildMenus();
    void openModelDialog();
    void showAbout();

    void modelLoaded();

    widgets::ModelPanel* m_model;
    widgets::PromptPanel* m_prompt;
    widgets::AttentionView* m_attention;
    widgets::StatsPanel* m_stats;
    widgets::TimingPanel* m_timing;
    QFutureWatcher<LoadResult>* m_loader;
    std::shared_ptr<capture::Model> m_current;
};

} // namespace sparqlab::app
