#include "panels.h"

#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <qcustomplot.h>

namespace sparqlab::widgets {

Panel::Panel(const QString& title, QWidget* parent) : QWidget(parent), m_body(new QWidget(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    auto* heading = new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()), this);
    heading->setObjectName(QStringLiteral("panelTitle"));
    layout->addWidget(heading);
    layout->addWidget(m_body, 1);
    auto* bodyLayout = new QVBoxLayout(m_body);
    bodyLayout->setContentsMargins(0, 0, 0, 0);
}

ModelPanel::ModelPanel(QWidget* parent)
    : Panel(tr("Model"), parent), m_summary(new QLabel(body())) {
    setObjectName(QStringLiteral("modelPanel"));
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    body()->layout()->addWidget(m_summary);
    static_cast<QVBoxLayout*>(body()->layout())->addStretch(1);
    showNoModel();
}

void ModelPanel::showNoModel() {
    m_summary->setText(tr("No model is open. Use File → Open Model… to open a Hugging Face "
                          "folder."));
}

void ModelPanel::showLoading(const QString& spec) {
    m_summary->setText(tr("Opening <b>%1</b>…").arg(spec.toHtmlEscaped()));
}

void ModelPanel::showModel(const QString& name, const QList<QPair<QString, QString>>& rows) {
    QString html = QStringLiteral("<b>%1</b><table cellspacing='2'>").arg(name.toHtmlEscaped());
    for (const auto& [label, value] : rows)
        html += QStringLiteral("<tr><td>%1</td><td align='right'>%2</td></tr>")
                    .arg(label.toHtmlEscaped(), value.toHtmlEscaped());
    m_summary->setText(html + QStringLiteral("</table>"));
}

void ModelPanel::showError(const QString& message) {
    m_summary->setText(
        QStringLiteral("<span style='color:#b00020'>%1</span>").arg(message.toHtmlEscaped()));
}

PromptPanel::PromptPanel(QWidget* parent)
    : Panel(tr("Prompt"), parent), m_editor(new QPlainTextEdit(body())),
      m_run(new QPushButton(tr("Run"), body())) {
    setObjectName(QStringLiteral("promptPanel"));
    m_editor->setObjectName(QStringLiteral("promptEditor"));
    m_editor->setPlaceholderText(tr("Type a prompt; Run captures q, K and V in every layer and "
                                    "head."));
    m_run->setObjectName(QStringLiteral("runButton"));
    m_run->setEnabled(false);
    m_run->setToolTip(tr("Open a model first"));
    body()->layout()->addWidget(m_editor);
    body()->layout()->addWidget(m_run);
    connect(m_run, &QPushButton::clicked, this, &PromptPanel::runRequested);
}

QString PromptPanel::prompt() const {
    return m_editor->toPlainText();
}

void PromptPanel::setRunEnabled(bool enabled) {
    m_run->setEnabled(enabled);
    m_run->setToolTip(enabled ? tr("Capture q, K and V for this prompt")
                              : tr("Open a model first"));
}

AttentionView::AttentionView(QWidget* parent)
    : Panel(tr("Attention"), parent), m_plot(new QCustomPlot(body())) {
    setObjectName(QStringLiteral("attentionView"));
    m_plot->setObjectName(QStringLiteral("attentionPlot"));
    m_plot->xAxis->setLabel(tr("key position"));
    m_plot->yAxis->setLabel(tr("attention score"));
    m_plot->xAxis->setRange(0, 1);
    m_plot->yAxis->setRange(0, 1);
    m_plot->setMinimumHeight(240);
    body()->layout()->addWidget(m_plot);
}

StatsPanel::StatsPanel(QWidget* parent)
    : Panel(tr("Statistics"), parent), m_table(new QTableWidget(0, 2, body())) {
    setObjectName(QStringLiteral("statsPanel"));
    m_table->setObjectName(QStringLiteral("statsTable"));
    m_table->setHorizontalHeaderLabels({tr("Statistic"), tr("Value")});
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->verticalHeader()->setVisible(false);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    body()->layout()->addWidget(m_table);
}

TimingPanel::TimingPanel(QWidget* parent)
    : Panel(tr("Timing"), parent), m_text(new QLabel(body())) {
    setObjectName(QStringLiteral("timingPanel"));
    m_text->setWordWrap(true);
    m_text->setText(tr("Dense against SparQ decode attention appears here once a model is "
                       "open."));
    body()->layout()->addWidget(m_text);
    static_cast<QVBoxLayout*>(body()->layout())->addStretch(1);
}

} // namespace sparqlab::widgets
