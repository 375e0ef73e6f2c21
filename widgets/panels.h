#pragma once
/// \file panels.h
/// The panels of the main window. Each is a plain view: it shows what it is given and
/// emits what the user asks for; it never computes on the event loop.

#include <QList>
#include <QPair>
#include <QWidget>

#include <string>
#include <utility>
#include <vector>

class QCheckBox;
class QLabel;
class QLineEdit;
class QTextBrowser;
class QScrollArea;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace sparqlab::analysis {
struct HeadState;
struct Session;
} // namespace sparqlab::analysis
namespace sparqlab::attention {
enum class Method;
}
namespace sparqlab::model {
class Model;
}

namespace sparqlab::widgets {

/// `content` in a frameless area that scrolls it up and down where the room is shorter than its
/// parts need (rather than laying them over one another), and never across: its least width is
/// the content's.
QScrollArea* verticalScroll(QWidget* content);

/// A titled frame shared by the panels.
class Panel : public QWidget {
    Q_OBJECT
public:
    Panel(const QString& title, QWidget* parent = nullptr);
    /// The area below the title where a panel puts its content.
    QWidget* body() const { return m_body; }
    /// Hides the title where a tab already names the panel.
    void setTitleShown(bool shown);

private:
    QWidget* m_body;
    QLabel* m_heading;
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
    /// Shows an opened model (`spec` as it was named: "demo" says so): its shape, weights,
    /// memory, each layer's attention modifiers and whether it has a tokenizer.
    void showModel(const model::Model& model, const QString& spec);
    /// Shows a session opened without a model: the file, what captured it and its shape.
    void showSession(const QString& fileName, const analysis::Session& s);
    /// Shows why a model could not be opened (the window stays usable), and the model still
    /// in use where one was open before.
    void showError(const QString& message);

private:
    void fitToSummary(); ///< as tall as the summary, up to a limit (then it scrolls)
    QLabel* m_summary;
    QString m_modelHtml; ///< the summary of the model in use ("" when none)
    QScrollArea* m_scroll;
};

/// The prompt editor with example prompts, Run (capture), Cancel and Generate N tokens.
class PromptPanel : public Panel {
    Q_OBJECT
public:
    explicit PromptPanel(QWidget* parent = nullptr);
    QString prompt() const;
    void setPrompt(const QString& text);
    void setRunEnabled(bool enabled);
    bool runEnabled() const { return m_enabled; }
    /// The prompt of a first start: a passage long enough (about 230 tokens on the demo model)
    /// that SparQ's default k is well below S, so the first picture shows it reading less.
    static QString defaultPrompt();
    /// While work runs: Run and Generate off, Cancel on.
    void setBusy(bool busy);
    int generateCount() const;
    /// Shows generated text (or a message) under the buttons.
    void showOutput(const QString& text);

    /// Chat mode: the editor holds turns ("user: …", "assistant: …" lines; text before the
    /// first is a user turn) that go through the model's chat template, after the system
    /// prompt, with or without the generation prompt.
    bool chatMode() const;
    QString systemPrompt() const;
    bool addGenerationPrompt() const;
    void setChat(bool on, const QString& system, bool addGenerationPrompt);
    /// The template's rendering of the last chat run: `text` with its message content
    /// ([begin, end) byte ranges of the UTF-8 text) set apart from the template's own text.
    void showRendered(const std::string& text,
                      const std::vector<std::pair<size_t, size_t>>& content);
    QTextBrowser* renderedView() const { return m_rendered; }

Q_SIGNALS:
    void runRequested();
    void generateRequested(int tokens);
    void cancelRequested();
    /// Chat mode switched on or off by the user.
    void chatToggled(bool on);

private:
    QPlainTextEdit* m_editor;
    QPushButton* m_run;
    QPushButton* m_cancel;
    QPushButton* m_generate;
    QSpinBox* m_count;
    QLabel* m_output;
    QCheckBox* m_chat;
    QLineEdit* m_system;
    QCheckBox* m_generationPrompt;
    QTextBrowser* m_rendered;
    bool m_enabled = false;
};

/// The paper's statistics of the current capture, one row per statistic.
class StatsPanel : public Panel {
    Q_OBJECT
public:
    explicit StatsPanel(QWidget* parent = nullptr);
    /// The statistics of a head state of method `m` (α and τ where `m` has them).
    void showHead(const analysis::HeadState& h, attention::Method m);
    QTableWidget* table() const { return m_table; }

private:
    QTableWidget* m_table;
};

/// Dense against SparQ decode time, with the transfer model's ratio beside it.
class TimingPanel : public Panel {
    Q_OBJECT
public:
    explicit TimingPanel(QWidget* parent = nullptr);
    /// Shows a measurement (rich text).
    void showText(const QString& html);
    QLabel* text() const { return m_text; }

private:
    QLabel* m_text;
};

} // namespace sparqlab::widgets
