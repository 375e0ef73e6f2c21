#pragma once
/// \file lab_host.h
/// What a view of the lab may ask of the lab (app/lab/lab.h implements it): the capture shown,
/// the lab's settings, the head state, the model and its worker, and requests the window
/// carries out (another head, view or query, a redraw, a status line). Qt Core only.

#include "analysis/lab.h"
#include "analysis/session.h"
#include "base/job.h"

#include <QString>

#include <functional>
#include <memory>

namespace sparqlab::model {
class Model;
}

namespace sparqlab::app {

class LabHost {
public:
    virtual ~LabHost() = default;
    /// The capture the views show (the lab's, or its view at the query shown); null before a
    /// run.
    virtual std::shared_ptr<const analysis::LabCapture> shownCapture() const = 0;
    /// The whole capture (every position; shownCapture() ends at the query shown); null before
    /// a run.
    virtual std::shared_ptr<const analysis::LabCapture> wholeCapture() const = 0;
    /// The chat of the capture (off for a plain prompt).
    virtual const analysis::SessionChat& chat() const = 0;
    /// The head a first screen chose to show for the capture (analysis::firstScreenHead), if
    /// it did.
    virtual std::optional<analysis::HeadPick> firstHead() const = 0;
    /// The lab's method and parameters (fitted to the capture), and the head shown.
    virtual attention::AttentionConfig labConfig() const = 0;
    virtual int labLayer() const = 0;
    virtual int labHead() const = 0;
    /// The position whose query the views show (−1 before a run), and choosing another (a
    /// position whose query is not held is a status line).
    virtual int queryPosition() const = 0;
    virtual void setQueryPosition(int position) = 0;
    /// The head view's state for the lab's method (null before the first is drawn).
    virtual const analysis::HeadState* headState() const = 0;
    /// The head view's worker hands back the capture it computed on and its state, or the
    /// error that stopped it (state null): the panels and the other views follow.
    virtual void setHeadState(std::shared_ptr<const analysis::LabCapture> shown,
                              const analysis::HeadState* state, const QString& error) = 0;
    /// Shows another head (the overview's click) or view.
    virtual void selectHead(int layer, int head) = 0;
    virtual void showViewNamed(const QString& name) = 0;
    /// Asks for a redraw of what is shown (coalesced).
    virtual void scheduleRedraw() = 0;
    virtual void showStatus(const QString& message, int milliseconds = 0) = 0;
    /// The model open (null: none, as for a session opened without it), and how it was named.
    virtual std::shared_ptr<model::Model> model() const = 0;
    virtual QString modelSpec() const = 0;
    /// Runs `work` with the model in the model's worker (one user of the model at a time; the
    /// prompt box's Cancel stops it through the job), then `done` on the GUI thread with the
    /// error ("" when none) and whether it was cancelled. False (and a status line) when the
    /// model is busy or none is open.
    virtual bool runModelWork(std::function<void(const base::Job& job)> work,
                              std::function<void(const QString& error, bool cancelled)> done) = 0;
    /// Stops the model's work (what Cancel does).
    virtual void cancelModelWork() = 0;
    /// Whether the timing panel is measuring (timings share the cores: one at a time).
    virtual bool timingBusy() const = 0;
};

} // namespace sparqlab::app
