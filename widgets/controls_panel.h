#pragma once
/// \file controls_panel.h
/// The lab's controls: the method and every parameter it takes, layer and head. Plain views: they
/// show what they are given and emit what the user asks.

#include "attention/attention.h"
#include "model/captured.h"
#include "panels.h"
#include "slider_box.h"

#include <map>
#include <memory>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QSpinBox;

namespace sparqlab::analysis {
struct LabCapture;
}

namespace sparqlab::widgets {

/// Every parameter of the attention being watched, built from the method table: the method
/// list and, for the chosen method, only the parameters it takes. Emits changed() on any edit.
class ControlsPanel : public Panel {
    Q_OBJECT
public:
    explicit ControlsPanel(QWidget* parent = nullptr);
    /// Ranges for a capture: layers, heads, head_dim and positions S.
    void setLimits(int layers, int heads, int headDim, int positions);
    /// Everything the controls take from a capture: its ranges (setLimits), a hybrid's layer
    /// names, the methods it lets run (the indexer: a DSA model's scores).
    void setCapture(const analysis::LabCapture& c);
    /// Names of the captured layers where they are not the model's own numbers (a hybrid's
    /// attention layers: "0 · model layer 3"); empty: plain numbers.
    void setLayerNames(const QStringList& names);
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
    /// k follows each capture (analysis::promptK) until the user sets one; said beside the box.
    void followPromptK();
    bool kFollowsPrompt() const { return m_k->follows(); }
    void setLocal(int l);
    void setMethod(attention::Method m);
    /// Whether the capture lets method m run (the indexer needs a DSA model's scores): an
    /// unavailable one is greyed out in the method box with `why` as its tooltip, and a current
    /// one falls back to SparQ.
    void setMethodAvailable(attention::Method m, bool available, const QString& why);
    bool isMethodAvailable(attention::Method m) const;
    /// Every control from `c` (the method and each parameter it has), then one changed().
    void setConfig(const attention::AttentionConfig& c);
    /// Shows the rows of the parameters `m` takes (attention::takes), hides the others.
    void showParametersOf(attention::Method m);
    /// The temperature the head view's step used (HeadState::tau): shown, greyed, beside a rule
    /// that computes it (adaptive, √d_h, √r), and where "fixed" starts from; 0: none.
    void showTauInEffect(double tau);
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
    /// The whole number a row shows (a slider's or a spin box's; 0 for another kind).
    int rowValue(attention::Param p) const;
    /// The table's bounds between parameters on the rows (ParamInfo::clampedTo, the method's
    /// MethodInfo::atMost): each bounded row's largest value is the other's; the rest their own.
    void applyBounds();
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
    std::map<attention::Param, int> m_top; ///< a spin box row's own largest value
    int m_positions = 1;                   ///< the capture's S (the local window's range)
    std::map<attention::Method, std::shared_ptr<attention::Calibration>> m_calibrations;
    bool m_localSet = false;
    /// The capture shown: which methods take l on it (CaptureInfo::takesLocal).
    model::CaptureInfo m_captureInfo;
};

} // namespace sparqlab::widgets
