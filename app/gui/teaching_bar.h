#pragma once
/// \file teaching_bar.h
/// Teaching mode: a bar above the views with one sentence per step of SparQ (pages 1–3, over the
/// head view) and a retrieval page (4) with its own prompt, head and SparQ settings, which gives
/// the user's back when it is left. GUI thread only.

#include "app/lab/lab.h"

#include <QWidget>

#include <optional>

class QLabel;
class QPushButton;

namespace sparqlab::widgets {
class ControlsPanel;
class HeadView;
class PromptPanel;
} // namespace sparqlab::widgets

namespace sparqlab::app {

class TeachingBar : public QWidget {
    Q_OBJECT
public:
    TeachingBar(Lab& lab, widgets::ControlsPanel* controls, widgets::PromptPanel* prompt,
                widgets::HeadView* head, QWidget* parent = nullptr);
    /// 0 off, 1–3 the step of SparQ being presented, 4 retrieval.
    void setStep(int step);
    int step() const { return m_step; }
    /// Page 4's prompt: a passage, then its start again.
    static QString retrievalPrompt();
    /// Page 4 after its run: SparQ on the retrieval head the worker found, said in the bar.
    void showRetrieval(const WorkResult& w, int64_t headDim);
    /// The user's r and k while page 4 shows its own (what the settings keep); none elsewhere.
    struct UserRK {
        int r = 0, k = 0;
        bool kFollows = false;
    };
    std::optional<UserRK> userRK() const;

Q_SIGNALS:
    /// The page asks for a run of `prompt` (page 4, and leaving it), or for the head view.
    void runRequested(const QString& prompt);
    void headViewRequested();

private:
    Lab& m_lab;
    widgets::ControlsPanel* m_controls;
    widgets::PromptPanel* m_prompt;
    widgets::HeadView* m_head;
    QLabel* m_text;
    QPushButton* m_back;
    QPushButton* m_next;
    int m_step = 0;
    /// What page 4 replaces with its own (the prompt, the method and its values, the head).
    struct BeforeRetrieval {
        QString prompt;
        attention::AttentionConfig config;
        int layer = 0, head = 0;
        bool kFollows = false; ///< k followed the prompt (ControlsPanel::followPromptK)
        int chosenK = 0;       ///< else the k the user chose (config's may be clamped)
        int chosenR = 0;       ///< the r the user chose
    };
    std::optional<BeforeRetrieval> m_before;
};

} // namespace sparqlab::app
