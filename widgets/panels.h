#pragma once
/// \file panels.h
/// The panels of the main window. Each is a plain view: it shows what it is given and
/// emits what the user asks for; it never computes on the event loop.

#include <QList>
#include <QPair>
#include <QWidget>

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QTableWidget;
class QCustomPlot;

namespace sparqlab::widgets {

/// A titled frame shared by the panels.
class Panel : public QWidget {
    Q_OBJECT
public:
    Panel(const QString& title, QWidget* parent = nullptr);
    /// The area below the title where a panel puts its content.
    QWidget* body() const { return m_body; }

private:
    QWidget* m_body;
};

/// The open model: its name and shape (layers, heads, KV heads, head_dim, parameters).
class ModelPanel : public Panel {
    Q_OBJECT
public:
    explicit ModelPanel(QWidget* parent = nullptr);
    /// Shows "no model" until a model is opened.
    void showNoModel();
    /// Shows that a model is being opened.
    void showLoading(const QString& spec);
    /// Shows a model: its name and (label, value) rows such as layers and heads.
    void showModel(const QString& name, const QList<QPair<QString, QString>>& rows);
    /// Shows why a model could not be opened (the window stays usable).
    void showError(const QString& message);

private:
    QLabel* m_summary;
};

/// The prompt editor and the Run button.
class PromptPanel : public Panel {
    Q_OBJECT
public:
    explicit PromptPanel(QWidget* parent = nullptr);
    QString prompt() const;
    void setRunEnabled(bool enabled);

Q_SIGNALS:
    void runRequested();

private:
    QPlainTextEdit* m_editor;
    QPushButton* m_run;
};

/// Exact against approximate attention scores over positions, for one head and query.
class AttentionView : public Panel {
    Q_OBJECT
public:
    explicit AttentionView(QWidget* parent = nullptr);
    QCustomPlot* plot() const { return m_plot; }

private:
    QCustomPlot* m_plot;
};

/// The paper's statistics of the current capture, one row per statistic.
class StatsPanel : public Panel {
    Q_OBJECT
public:
    explicit StatsPanel(QWidget* parent = nullptr);
    QTableWidget* table() const { return m_table; }

private:
    QTableWidget* m_table;
};

/// Dense against SparQ decode time, with the transfer model's ratio beside it.
class TimingPanel : public Panel {
    Q_OBJECT
public:
    explicit TimingPanel(QWidget* parent = nullptr);

private:
    QLabel* m_text;
};

} // namespace sparqlab::widgets
