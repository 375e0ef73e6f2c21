// The transfer panel: what dense attention and the method read per head and step.

#include "transfer_panel.h"

#include "analysis/lab.h"
#include "attention/method_table.h"

#include <QLabel>
#include <QLayout>
#include <QLocale>
#include <QScrollArea>

namespace sparqlab::widgets {

namespace att = sparqlab::attention;

TransferPanel::TransferPanel(QWidget* parent)
    : Panel(tr("Transfer per head and step"), parent), m_text(new QLabel) {
    setObjectName(QStringLiteral("transferPanel"));
    m_text->setObjectName(QStringLiteral("transferText"));
    m_text->setWordWrap(true);
    m_text->setTextFormat(Qt::RichText);
    m_text->setAlignment(Qt::AlignTop | Qt::AlignLeft); // (centred, a blank line led it)
    // Its notes (a k that covers S, d_v, MLA, a hybrid's share) outgrow a projector's 800 px:
    // they scroll rather than being cut.
    body()->layout()->addWidget(verticalScroll(m_text));
    m_text->setText(tr("No capture yet."));
}

void TransferPanel::showCompressed(int64_t S, int64_t d, const analysis::HeadState& h) {
    const auto number = [](double x) { return QLocale().toString(x, 'f', 0); };
    const att::MethodInfo& m = att::methodInfo(h.method);
    const QString method = QString::fromUtf8(m.label);
    // The model's own: its keys, and on a CSA layer the indexer's key of every entry it scores.
    const QString own =
        h.entryTopK == 0 ? tr("every key")
        : h.modelIndexerCounted
            ? tr("the indexer's key of each entry, then %1 keys").arg(h.modelChosen.size())
            : tr("%1 keys; the capture does not record the indexer's").arg(h.modelChosen.size());
    m_text->setText(
        tr("S = %1, d<sub>h</sub> = %2 · %3 compressed entries (one per %4 positions) and the "
           "window: <b>%5</b> keys, each its own value (counted once)<br>"
           "dense over them: <b>%6</b> elements per head<br>"
           "%7 (%8): <b>%9</b>, %10 of dense<br>"
           "the model's own (%11): <b>%12</b>; %7 reads <b>%13×</b> of it")
            .arg(S)
            .arg(d)
            .arg(h.entries)
            .arg(h.entryRate)
            .arg(h.keysSeen)
            .arg(number(h.denseTransfer))
            .arg(method, QString::fromUtf8(m.transferFormula))
            .arg(number(h.transfer))
            .arg(h.denseTransfer > 0 ? h.transfer / h.denseTransfer : 1, 0, 'f', 3)
            .arg(own)
            .arg(number(h.modelTransfer))
            .arg(h.modelTransfer > 0 ? h.transfer / h.modelTransfer : 0, 0, 'f', 2));
}

void TransferPanel::showTransfer(const att::AttentionConfig& c, int64_t S, int64_t d, double count,
                                 int64_t dv, int64_t latent, int64_t kvHeads,
                                 const QStringList& fitted) {
    const att::TransferArgs a = att::transferArgs(c, S, d, count, dv);
    const double dense = att::transferElements(att::Method::Dense, a);
    const double method = att::transferElements(c.method, a);
    const double ratio = method / dense;
    const att::MethodInfo& m = att::methodInfo(c.method);
    const QString dims = dv > 0 && dv != d
                             ? tr("d<sub>h</sub> = %1 (q·k), d<sub>v</sub> = %2").arg(d).arg(dv)
                             : tr("d<sub>h</sub> = %1").arg(d);
    const QString factor = ratio <= 1 ? tr("%1× fewer").arg(1 / ratio, 0, 'f', 2)
                                      : tr("%1× more").arg(ratio, 0, 'f', 2);
    QString text = tr("S = %1, %2<br>dense: <b>%3</b> elements per head<br>%4 (%5): "
                      "<b>%6</b> elements<br>compression %7 (%8)")
                       .arg(S)
                       .arg(dims)
                       .arg(QLocale().toString(dense, 'f', 0))
                       .arg(QString::fromUtf8(m.label), QString::fromUtf8(m.transferFormula))
                       .arg(QLocale().toString(method, 'f', 0))
                       .arg(ratio, 0, 'f', 3)
                       .arg(factor);
    // A short prompt: no selection to see (a top-p method under a cap k ≥ S may still attend
    // fewer: it is said where every position was attended).
    if (att::budgetCoversLength(c, S) && count >= static_cast<double>(S))
        text += tr("<br><i>k = %1 covers all %2 positions: %3 attends every one, as dense "
                   "does%4. A k below S shows a selection.</i>")
                    .arg(c.k)
                    .arg(S)
                    .arg(QString::fromUtf8(m.label))
                    .arg(ratio > 1 ? tr(", and its formula (not clamped) counts more than "
                                        "dense's")
                                   : QString());
    if (dv > 0 && dv != d) // a key counts d_h, a value d_v (TransferArgs, method_table.h)
        text += tr("<br>With d<sub>v</sub> ≠ d<sub>h</sub>, each key counts d<sub>h</sub> "
                   "elements and each value d<sub>v</sub>: the formula's 2·d is "
                   "d<sub>h</sub> + d<sub>v</sub>.");
    if (latent > 0) // MLA: what its cache really holds, shared by every head
        text += tr("<br>MLA's cache: a latent of %1 per position for all heads, %2 elements at "
                   "S = %3 (per-head keys and values: %4)")
                    .arg(latent)
                    .arg(QLocale().toString(static_cast<double>(latent) * S, 'f', 0))
                    .arg(S)
                    .arg(QLocale().toString(static_cast<double>(kvHeads) * (d + dv) * S, 'f', 0));
    if (m_linearLayers > 0) { // a hybrid: the linear layers' state is read whatever S
        const double attn =
            static_cast<double>(m_attentionLayers * m_perPosition) * static_cast<double>(S + 1);
        const double lin = 2.0 * static_cast<double>(m_linearLayers * m_stateElements);
        text += tr("<br>Hybrid: %1 %8 layers read and write %2 state elements per "
                   "step at any S; %3 attention layers read %4 at S = %5. Selection acts on "
                   "<b>%6%</b> of the cache traffic; this method saves <b>%7%</b> of it.")
                    .arg(m_linearLayers)
                    .arg(QLocale().toString(lin, 'f', 0))
                    .arg(m_attentionLayers)
                    .arg(QLocale().toString(attn, 'f', 0))
                    .arg(S)
                    .arg(100 * attn / (attn + lin), 0, 'f', 1)
                    .arg(100 * attn * (1 - ratio) / (attn + lin), 0, 'f', 1)
                    .arg(m_linearKind);
    }
    if (!fitted.isEmpty()) // defaults sized for longer contexts, as `attend` fits them too
        text += tr("<br><i>Defaults fitted to S = %1: %2</i>")
                    .arg(S)
                    .arg(fitted.join(QStringLiteral("; ")).toHtmlEscaped());
    m_text->setText(text);
}

void TransferPanel::setHybrid(int64_t attentionLayers, int64_t linearLayers, int64_t stateElements,
                              int64_t perPosition, const QString& linearKind) {
    m_linearKind = linearKind;
    m_attentionLayers = attentionLayers;
    m_linearLayers = linearLayers;
    m_stateElements = stateElements;
    m_perPosition = perPosition;
}

} // namespace sparqlab::widgets
