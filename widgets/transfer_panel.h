#pragma once
/// \file transfer_panel.h
/// The transfer panel: elements moved per head for dense and the method. Plain views: they show
/// what they are given and emit what the user asks.

#include "attention/attention.h"
#include "panels.h"

#include <QStringList>

class QLabel;

namespace sparqlab::analysis {
struct HeadState;
}

namespace sparqlab::widgets {

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
    /// A DeepSeek-V4 compressed layer (docs/learned-sparse-and-hybrid.md §17) in place of
    /// showTransfer: what the query reads there (the head's entries and window, each key its
    /// own value), dense attention over every key seen and the head's method as HeadState
    /// counts them (METHODS.md §10), and the model's own attention, the indexer's reads included.
    void showCompressed(int64_t S, int64_t headDim, const analysis::HeadState& h);
    QLabel* text() const { return m_text; }
    /// A hybrid model's layers (docs/learned-sparse-and-hybrid.md §3): its attention layers'
    /// cache elements per position (all heads; MLA: the latent) and its linear layers' state,
    /// read and written whole at every step; showTransfer then says what share of a decode
    /// step's cache traffic selection acts on. linearLayers 0: not a hybrid. `linearKind`: the
    /// linear layers' kind as captures label it ("Gated DeltaNet", "Mamba-2").
    void setHybrid(int64_t attentionLayers, int64_t linearLayers, int64_t stateElements,
                   int64_t perPosition, const QString& linearKind);

private:
    QLabel* m_text;
    int64_t m_attentionLayers = 0, m_linearLayers = 0, m_stateElements = 0, m_perPosition = 0;
    QString m_linearKind;
};

} // namespace sparqlab::widgets
