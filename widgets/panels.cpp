// (the libraries' headers first: libtorch's before Qt's keywords)
#include "analysis/lab.h"
#include "analysis/session.h"
#include "attention/method_table.h"
#include "model/model.h"
#include "model/model_family.h"
#include "model/safetensors.h"

#include "panels.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <algorithm>
#include <map>

namespace sparqlab::widgets {

namespace {
/// The least width is the content's (a scroll bar beside it), the least height a scroll area's.
class VerticalScroll : public QScrollArea {
public:
    QSize minimumSizeHint() const override {
        const QSize content = widget() ? widget()->minimumSizeHint() : QSize();
        return {content.width() + verticalScrollBar()->sizeHint().width(),
                QScrollArea::minimumSizeHint().height()};
    }
};
} // namespace

QScrollArea* verticalScroll(QWidget* content) {
    auto* scroll = new VerticalScroll;
    scroll->setWidget(content);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    return scroll;
}

Panel::Panel(const QString& title, QWidget* parent)
    : QWidget(parent), m_body(new QWidget(this)),
      m_heading(new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()), this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    m_heading->setObjectName(QStringLiteral("panelTitle"));
    layout->addWidget(m_heading);
    layout->addWidget(m_body, 1);
    auto* bodyLayout = new QVBoxLayout(m_body);
    bodyLayout->setContentsMargins(0, 0, 0, 0);
}

void Panel::setTitleShown(bool shown) {
    m_heading->setVisible(shown);
}

ModelPanel::ModelPanel(QWidget* parent)
    : Panel(tr("Model"), parent), m_summary(new QLabel), m_scroll(new QScrollArea(body())) {
    setObjectName(QStringLiteral("modelPanel"));
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    // Models with windows and soft-caps have more rows than the panel's height: scroll.
    m_scroll->setWidget(m_summary);
    m_scroll->setWidgetResizable(true);
    m_scroll->setFrameShape(QFrame::NoFrame);
    m_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    body()->layout()->addWidget(m_scroll);
    showNoModel();
}

void ModelPanel::fitToSummary() {
    m_scroll->setMinimumHeight(
        std::min(m_summary->heightForWidth(m_scroll->viewport()->width()) + 4, 380));
}

void ModelPanel::showNoModel() {
    m_modelHtml.clear();
    m_summary->setText(tr("No model is open. Use File → Open Model… to open a Hugging Face "
                          "folder."));
    fitToSummary();
}

void ModelPanel::showLoading(const QString& spec) {
    m_summary->setText(tr("Opening <b>%1</b>…").arg(spec.toHtmlEscaped()));
    fitToSummary();
}

void ModelPanel::showModel(const QString& name, const QList<QPair<QString, QString>>& rows) {
    QString html = QStringLiteral("<b>%1</b><table cellspacing='2'>").arg(name.toHtmlEscaped());
    for (const auto& [label, value] : rows)
        html += QStringLiteral("<tr><td>%1</td><td align='right'>%2</td></tr>")
                    .arg(label.toHtmlEscaped(), value.toHtmlEscaped());
    m_modelHtml = html + QStringLiteral("</table>");
    m_summary->setText(m_modelHtml);
    fitToSummary();
}

void ModelPanel::showModel(const model::Model& model, const QString& spec) {
    const model::ModelConfig& c = model.config();
    const at::ScalarType compute = model.computeDtype();
    const double bytes = compute == at::kFloat ? 4.0 : 2.0;
    const double mb = static_cast<double>(c.parameterCount()) * bytes / (1 << 20);
    const QString computeName = QString::fromStdString(model::torchDtypeName(compute));
    // Titled by what the user opened (the folder's name, a hub id) and its class; its family
    // beneath.
    const QString arch = QString::fromStdString(c.architectureName);
    const QString opened = spec == QLatin1String("demo") ? tr("Demo model")
                           : QFileInfo(spec).isDir()     ? QDir(spec).dirName()
                                                         : spec;
    const QString name = tr("%1 (%2)").arg(opened, arch);
    const model::ModelFamily* family = model::findFamily(c.architectureName);
    QList<QPair<QString, QString>> rows{
        {tr("Family"), family ? QString::fromUtf8(family->label) : tr("unknown")},
        {tr("Layers"), QString::number(c.nLayers)},
        {tr("Query heads"), QString::number(c.nHeads)},
        {tr("KV heads"), QString::number(c.nKvHeads)},
        {tr("Head dimension"), QString::number(c.headDim)},
        {tr("Context"), QString::number(c.maxPositions)},
        {tr("Parameters"), QLocale().toString(static_cast<qlonglong>(c.parameterCount()))},
        {tr("Weights"),
         tr("%1, computed in %2").arg(QString::fromStdString(model.weightsDtype()), computeName)},
        {tr("Memory"), tr("%1 MiB").arg(mb, 0, 'f', 1)}};
    // A quantized checkpoint's stored form, dequantized to the weights' dtype when it opened.
    if (!c.quantization.method.empty())
        rows.insert(rows.size() - 1,
                    {tr("Stored as"), QString::fromStdString(c.quantization.describe())});
    // A hybrid's layer kinds; a DSA model's or MiniMax-M3's indexer.
    if (!c.layerKinds.empty()) {
        std::map<std::string, int> count;
        for (int64_t l = 0; l < c.nLayers; ++l)
            ++count[model::layerKindLabel(c.kindOf(l))];
        QStringList kinds;
        for (const auto& [kind, n] : count)
            kinds << tr("%1 %2").arg(n).arg(QString::fromStdString(kind));
        rows.append(
            {tr("Layer kinds"), tr("%1 (selection acts on attention only)").arg(kinds.join(", "))});
    }
    if (c.indexer.active() && c.indexer.blocks()) {
        const auto sparse = std::count(c.indexer.layers.begin(), c.indexer.layers.end(), true);
        rows.append({tr("Indexer (blocks)"),
                     tr("%1 heads × %2, top %3 blocks of %4 keys per query and group, on %5 "
                        "of %6 layers")
                         .arg(c.indexer.heads)
                         .arg(c.indexer.dim)
                         .arg(c.indexer.topK)
                         .arg(c.indexer.blockSize)
                         .arg(sparse)
                         .arg(c.nLayers)});
    } else if (c.indexer.active()) {
        rows.append({tr("Indexer (DSA)"), tr("%1 heads × %2, top %3 keys per query")
                                              .arg(c.indexer.heads)
                                              .arg(c.indexer.dim)
                                              .arg(c.indexer.topK)});
    }
    // Each layer's window and soft-cap, the scale: what attend, stats and the lab apply.
    for (const auto& [label, value] : model::attentionModifierSummary(c))
        rows.append({QString::fromStdString(label), QString::fromStdString(value)});
    rows.append({tr("Tokenizer"), model.hasTokenizer() ? tr("yes") : tr("none (ids only)")});
    showModel(name, rows);
}

void ModelPanel::showSession(const QString& fileName, const analysis::Session& s) {
    // Titled as a model is, by the file and the model's class (a long class name wraps there;
    // in the table it pushed the numbers out of a narrow panel); the model it was captured with
    // by its folder's name.
    const QString arch = QString::fromStdString(s.capture->info.architecture);
    const model::ModelFamily* family = model::findFamily(s.capture->info.architecture);
    // A folder by its name (as the model's title names it), a hub id whole.
    const QString spec = QDir::cleanPath(QString::fromStdString(s.model));
    const bool folder =
        QDir::isAbsolutePath(spec) || spec.startsWith(QLatin1Char('.')) || QFileInfo(spec).isDir();
    const QString capturedWith = spec == QLatin1String("demo") ? tr("the demo model")
                                 : folder && !QFileInfo(spec).fileName().isEmpty()
                                     ? QFileInfo(spec).fileName()
                                     : spec;
    showModel(tr("%1 (%2), no model loaded").arg(fileName, arch.isEmpty() ? tr("a capture") : arch),
              {{tr("Captured with"), capturedWith},
               {tr("Family"), family ? QString::fromUtf8(family->label) : tr("unknown")},
               {tr("Layers"), QString::number(s.capture->layers())},
               {tr("Query heads"), QString::number(s.capture->heads())},
               {tr("KV heads"), QString::number(s.capture->kvHeads())},
               {tr("Head dimension"), QString::number(s.capture->headDim())},
               {tr("Positions"), QString::number(s.capture->positions())}});
}

void ModelPanel::showError(const QString& message) {
    QString html =
        QStringLiteral("<span style='color:#b00020'>%1</span>").arg(message.toHtmlEscaped());
    if (!m_modelHtml.isEmpty()) // Run still captures with it: say so
        html += QStringLiteral("<p>%1</p>").arg(tr("Still in use:")) + m_modelHtml;
    m_summary->setText(html);
    fitToSummary();
}

namespace {
/// Example prompts of the lab: a passage to repeat (copying needs sharp attention far back),
/// a question over paragraphs with distractors, a passage of the demo's kind and a short free text.
QList<QPair<QString, QString>> examplePrompts() {
    const QString passage = QStringLiteral(
        "The Congress shall have power to lay and collect taxes, duties, imposts and excises, "
        "to pay the debts and provide for the common defence and general welfare of the United "
        "States; but all duties, imposts and excises shall be uniform throughout the United "
        "States.");
    return {
        {QObject::tr("Repeat a passage"),
         passage + QStringLiteral("\n\nNow repeat the passage above word for word.\n\n") +
             passage.left(60)},
        {QObject::tr("Question with distractors"),
         QStringLiteral(
             "The treaty with Spain was signed in the spring, and the harbour at Boston was "
             "deepened the same year. Revenue from customs rose by a tenth.\n\nThe new canal "
             "opened in the autumn; its first toll was collected by Mr. Hale of Albany.\n\n"
             "Railways in the West carried more grain than ever before, though prices fell.\n\n"
             "Question: who collected the first toll of the new canal?\nAnswer: Mr.")},
        {QObject::tr("A State of the Union passage"), PromptPanel::defaultPrompt()},
        {QObject::tr("Free text (short: k clamps to S)"),
         QStringLiteral("Mr. Speaker, Members of Congress, the state of our Union is")},
    };
}
} // namespace

QString PromptPanel::defaultPrompt() {
    // In the manner of the demo model's training text (State of the Union addresses); our own.
    return QStringLiteral(
        "Mr. Speaker, Members of Congress, the state of our Union is strong. In the year that has "
        "passed since I last spoke to you from this place, the Nation has met the tasks before "
        "it with courage and good sense. Our farms have fed the world, our factories have kept "
        "their people at work, and our schools have opened their doors to more children than "
        "ever before. We have paid down the public debt, we have kept the peace with our "
        "neighbours, and we have begun the great work of building roads, harbours and railways "
        "across the continent. Yet much remains to be done. The laws that govern commerce "
        "between the States were written for another age, and the revenue of the Government "
        "rests too heavily on the duties paid by those least able to bear them. I ask the "
        "Congress, therefore, to take up three measures in the coming session: the reform of the "
        "tariff, the improvement of our rivers and harbours, and the extension of the public "
        "schools to every territory of the Union. The state of our Union is");
}

PromptPanel::PromptPanel(QWidget* parent)
    : Panel(tr("Prompt"), parent), m_editor(new QPlainTextEdit(body())),
      m_run(new QPushButton(tr("Run"), body())), m_cancel(new QPushButton(tr("Cancel"), body())),
      m_generate(new QPushButton(tr("Generate"), body())), m_count(new QSpinBox(body())),
      m_output(new QLabel(body())),
      m_chat(new QCheckBox(tr("Chat (the model's template)"), body())),
      m_system(new QLineEdit(body())),
      m_generationPrompt(new QCheckBox(tr("Add generation prompt"), body())),
      m_rendered(new QTextBrowser(body())) {
    setObjectName(QStringLiteral("promptPanel"));
    m_chat->setObjectName(QStringLiteral("chatMode"));
    m_chat->setToolTip(tr("Render the turns with the model's chat template (tokenizer_config.json "
                          "or chat_template.jinja), as the model sees them in use"));
    m_system->setObjectName(QStringLiteral("chatSystem"));
    m_system->setPlaceholderText(tr("System prompt (optional)"));
    m_generationPrompt->setObjectName(QStringLiteral("chatGenerationPrompt"));
    m_generationPrompt->setChecked(true);
    m_rendered->setObjectName(QStringLiteral("chatRendered"));
    m_rendered->setPlaceholderText(tr("The rendered prompt appears here after Run: the "
                                      "template's text in grey, the turns' text in black."));
    m_rendered->setMaximumHeight(120);
    m_editor->setObjectName(QStringLiteral("promptEditor"));
    m_editor->setPlaceholderText(tr("Type a prompt; Run captures q, K and V in every layer and "
                                    "head."));
    m_run->setObjectName(QStringLiteral("runButton"));
    m_cancel->setObjectName(QStringLiteral("cancelButton"));
    m_generate->setObjectName(QStringLiteral("generateButton"));
    m_count->setObjectName(QStringLiteral("generateCount"));
    m_output->setObjectName(QStringLiteral("promptOutput"));
    m_count->setRange(1, 4096);
    m_count->setValue(32);
    m_count->setSuffix(tr(" tokens"));
    m_output->setWordWrap(true);
    m_output->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* examples = new QComboBox(body());
    examples->setObjectName(QStringLiteral("examplePrompts"));
    examples->addItem(tr("Example prompts…"));
    for (const auto& [name, text] : examplePrompts())
        examples->addItem(name, text);
    connect(examples, &QComboBox::activated, this, [this, examples](int i) {
        if (i > 0)
            setPrompt(examples->itemData(i).toString());
    });
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    auto* gen = new QHBoxLayout;
    gen->addWidget(m_generate);
    gen->addWidget(m_count);
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    l->addWidget(examples);
    auto* chatRow = new QHBoxLayout;
    chatRow->addWidget(m_chat);
    chatRow->addWidget(m_generationPrompt);
    chatRow->addStretch(1);
    l->addLayout(chatRow);
    l->addWidget(m_system);
    l->addWidget(m_editor, 1);
    l->addWidget(m_rendered);
    l->addLayout(buttons);
    l->addLayout(gen);
    l->addWidget(m_output);
    connect(m_run, &QPushButton::clicked, this, &PromptPanel::runRequested);
    connect(m_cancel, &QPushButton::clicked, this, &PromptPanel::cancelRequested);
    connect(m_generate, &QPushButton::clicked, this,
            [this] { Q_EMIT generateRequested(m_count->value()); });
    connect(m_chat, &QCheckBox::toggled, this, [this](bool on) {
        setChat(on, m_system->text(), addGenerationPrompt());
        Q_EMIT chatToggled(on);
    });
    setChat(false, QString(), true);
    setRunEnabled(false);
    setBusy(false);
}

bool PromptPanel::chatMode() const {
    return m_chat->isChecked();
}

QString PromptPanel::systemPrompt() const {
    return m_system->text();
}

bool PromptPanel::addGenerationPrompt() const {
    return m_generationPrompt->isChecked();
}

void PromptPanel::setChat(bool on, const QString& system, bool addGenerationPrompt) {
    {
        const QSignalBlocker block(m_chat);
        m_chat->setChecked(on);
    }
    m_system->setText(system);
    m_generationPrompt->setChecked(addGenerationPrompt);
    m_system->setVisible(on);
    m_generationPrompt->setVisible(on);
    m_rendered->setVisible(on);
    m_editor->setPlaceholderText(
        on ? tr("One turn per \"user:\" or \"assistant:\" line, e.g.\nuser: What is SparQ?\n"
                "assistant: An attention approximation.\nuser: Why does it help?")
           : tr("Type a prompt; Run captures q, K and V in every layer and head."));
}

void PromptPanel::showRendered(const std::string& text,
                               const std::vector<std::pair<size_t, size_t>>& content) {
    // Byte ranges of UTF-8 text, cut on the bytes and decoded piece by piece.
    QString html = QStringLiteral("<pre style=\"white-space: pre-wrap; margin: 0\">");
    size_t at = 0;
    auto piece = [&](size_t from, size_t to, bool isContent) {
        if (to <= from)
            return;
        const QString t = QString::fromUtf8(text.data() + from, static_cast<qsizetype>(to - from))
                              .toHtmlEscaped();
        html += isContent ? QStringLiteral("<span style=\"color:#000000\">%1</span>").arg(t)
                          : QStringLiteral("<span style=\"color:#7a7a7a\">%1</span>").arg(t);
    };
    for (const auto& [b, e] : content) {
        if (b < at || e > text.size())
            continue;
        piece(at, b, false);
        piece(b, e, true);
        at = e;
    }
    piece(at, text.size(), false);
    html += QStringLiteral("</pre>");
    m_rendered->setHtml(html);
}

QString PromptPanel::prompt() const {
    return m_editor->toPlainText();
}

void PromptPanel::setPrompt(const QString& text) {
    m_editor->setPlainText(text);
}

void PromptPanel::setRunEnabled(bool enabled) {
    m_enabled = enabled;
    m_run->setEnabled(enabled);
    m_generate->setEnabled(enabled);
    m_run->setToolTip(enabled ? tr("Capture q, K and V for this prompt")
                              : tr("Open a model first"));
}

void PromptPanel::setBusy(bool busy) {
    m_run->setEnabled(m_enabled && !busy);
    m_generate->setEnabled(m_enabled && !busy);
    m_cancel->setEnabled(busy);
}

int PromptPanel::generateCount() const {
    return m_count->value();
}

void PromptPanel::showOutput(const QString& text) {
    m_output->setText(text);
}

StatsPanel::StatsPanel(QWidget* parent)
    : Panel(tr("Statistics"), parent), m_table(new QTableWidget(0, 2, body())) {
    setObjectName(QStringLiteral("statsPanel"));
    m_table->setObjectName(QStringLiteral("statsTable"));
    m_table->setHorizontalHeaderLabels({tr("Statistic"), tr("Value")});
    // The names take the width the numbers leave (a name wrapped over three lines beside a
    // value column of 250 px at 1920 px).
    m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_table->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_table->verticalHeader()->setVisible(false);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    body()->layout()->addWidget(m_table);
}

void StatsPanel::showHead(const analysis::HeadState& h, attention::Method m) {
    QTableWidget* t = m_table;
    // α and τ are rows of the methods that have them (the method table says which).
    QList<QPair<QString, QString>> rows;
    if (attention::takes(m, attention::Param::MeanValue))
        rows.push_back({tr("α (Eq. 10 mix)"), QString::number(h.alpha, 'f', 4)});
    rows += QList<QPair<QString, QString>>{
        {tr("true top-k mass"), QString::number(h.trueMass, 'f', 4)},
        {tr("mass of chosen"), QString::number(h.chosenMass, 'f', 4)},
        {QString::fromStdString(analysis::measureLabel(analysis::Measure::Recall)),
         QString::number(h.topkAgreement, 'f', 4)},
        {h.entryRate > 0 ? tr("keys attended") : tr("positions attended"),
         QString::number(h.count)},
        {QString::fromStdString(analysis::measureLabel(analysis::Measure::KMass90)),
         QString::number(h.kMass90)},
        {tr("output error"), QString::number(h.outputError, 'g', 4)},
    };
    if (h.entryRate > 0) // DeepSeek-V4: against what the model itself attends
        rows.push_back(
            {tr("error against the model's own"), QString::number(h.modelError, 'g', 4)});
    if (attention::takes(m, attention::Param::Tau))
        rows.push_back({tr("temperature τ"), QString::number(h.tau, 'f', 3)});
    if (h.sinkShare > 0) // gpt-oss: attention to nothing, in both masses above
        rows.push_back({tr("sink's share"), QString::number(h.sinkShare, 'f', 4)});
    t->clearSpans();
    t->setRowCount(static_cast<int>(rows.size()) + (h.layerNote.empty() ? 0 : 1));
    for (int i = 0; i < rows.size(); ++i) {
        t->setItem(i, 0, new QTableWidgetItem(rows[i].first));
        t->setItem(i, 1, new QTableWidgetItem(rows[i].second));
    }
    if (!h.layerNote.empty()) { // a line of its own across both columns, wrapped: as a value it
                                // widened its column until the names were cut to a few letters
        const int last = static_cast<int>(rows.size());
        t->setItem(
            last, 0,
            new QTableWidgetItem(tr("this layer: %1").arg(QString::fromStdString(h.layerNote))));
        t->setItem(last, 1, new QTableWidgetItem);
        t->setSpan(last, 0, 1, 2);
        t->resizeRowToContents(last);
    }
}

TimingPanel::TimingPanel(QWidget* parent) : Panel(tr("Timing"), parent), m_text(new QLabel) {
    setObjectName(QStringLiteral("timingPanel"));
    m_text->setWordWrap(true);
    m_text->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_text->setText(tr("Dense against every engine method's decode step, at the capture's "
                       "length, appears here after Run."));
    // Every engine method's row: the panel scrolls when the column is short.
    auto* scroll = new QScrollArea;
    scroll->setWidget(m_text);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setMinimumHeight(170); // the header and five rows before it scrolls
    body()->layout()->addWidget(scroll);
}

void TimingPanel::showText(const QString& html) {
    m_text->setTextFormat(Qt::RichText);
    m_text->setText(html);
}

} // namespace sparqlab::widgets
