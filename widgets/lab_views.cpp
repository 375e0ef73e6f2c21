#include "lab_views.h"

#include "attention/transfer.h"
#include "figure_renderer.h"

#include "attention/methods.h"
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace sparqlab::widgets {

namespace att = sparqlab::attention;

namespace {

const QColor kExact(31, 119, 180);  // blue
const QColor kApprox(255, 127, 14); // orange
const QColor kChosen(44, 160, 44);  // green
const QColor kTrue(214, 39, 40);    // red
const QColor kLocal(148, 103, 189, 50);

QVector<double> iota(size_t n) {
    QVector<double> v(static_cast<int>(n));
    for (int i = 0; i < v.size(); ++i)
        v[i] = i;
    return v;
}

QVector<double> toQ(const std::vector<float>& x) {
    return QVector<double>(x.begin(), x.end());
}

/// Marks positions `idx` on a scores plot at their exact weight: chosen sets, true top-k.
void addMarks(QCustomPlot* plot, const std::vector<int64_t>& idx, const std::vector<float>& exact,
              const QString& name, const QColor& c, QCPScatterStyle::ScatterShape shape,
              double size) {
    QVector<double> x, y;
    for (const int64_t j : idx)
        if (j >= 0 && static_cast<size_t>(j) < exact.size()) {
            x.push_back(static_cast<double>(j));
            y.push_back(exact[static_cast<size_t>(j)]);
        }
    QCPGraph* g = plot->addGraph();
    g->setName(name);
    g->setData(x, y, true);
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(shape, c, size));
}

void basicPlot(QCustomPlot* p, const QString& x, const QString& y) {
    p->xAxis->setLabel(x);
    p->yAxis->setLabel(y);
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    p->axisRect()->setRangeDrag(Qt::Horizontal);
    p->axisRect()->setRangeZoom(Qt::Horizontal);
    p->setMinimumHeight(80);
    p->setPlottingHints(QCP::phFastPolylines | QCP::phCacheLabels);
}

} // namespace

// --- SliderBox -----------------------------------------------------------------------------

SliderBox::SliderBox(const QString& name, QWidget* parent)
    : QWidget(parent), m_slider(new QSlider(Qt::Horizontal)), m_box(new QSpinBox) {
    setObjectName(name);
    m_slider->setObjectName(name + QStringLiteral("Slider"));
    m_box->setObjectName(name + QStringLiteral("Box"));
    auto* l = new QHBoxLayout(this);
    l->setContentsMargins(0, 0, 0, 0);
    l->addWidget(m_slider, 1);
    l->addWidget(m_box);
    connect(m_slider, &QSlider::valueChanged, m_box, &QSpinBox::setValue);
    connect(m_box, &QSpinBox::valueChanged, m_slider, &QSlider::setValue);
    connect(m_box, &QSpinBox::valueChanged, this, &SliderBox::valueChanged);
}

void SliderBox::setRange(int lo, int hi) {
    const QSignalBlocker b1(m_slider), b2(m_box);
    m_slider->setRange(lo, hi);
    m_box->setRange(lo, hi);
}

int SliderBox::value() const {
    return m_box->value();
}
void SliderBox::setValue(int v) {
    m_box->setValue(v);
}

// --- ControlsPanel -------------------------------------------------------------------------

ControlsPanel::ControlsPanel(QWidget* parent)
    : Panel(tr("Controls"), parent), m_form(new QFormLayout), m_layer(new QSpinBox),
      m_head(new QSpinBox), m_method(new QComboBox), m_r(new SliderBox(QStringLiteral("r"))),
      m_k(new SliderBox(QStringLiteral("k"))), m_local(new SliderBox(QStringLiteral("local"))),
      m_tauRow(new QWidget), m_tau(new QComboBox), m_tauValue(new QDoubleSpinBox),
      m_gqa(new QComboBox), m_meanValue(new QCheckBox(tr("mean value (Eq. 10)"))),
      m_pageSize(new QSpinBox), m_p(new QDoubleSpinBox), m_window(new QSpinBox),
      m_kernel(new QSpinBox), m_pooling(new QComboBox), m_basis(new QLabel(tr("on the prompt"))),
      m_channels(new QLabel(tr("on the prompt"))) {
    setObjectName(QStringLiteral("controlsPanel"));
    m_layer->setObjectName(QStringLiteral("layerBox"));
    m_head->setObjectName(QStringLiteral("headBox"));
    m_method->setObjectName(QStringLiteral("methodBox"));
    m_tau->setObjectName(QStringLiteral("tauBox"));
    m_gqa->setObjectName(QStringLiteral("gqaBox"));
    // The method list and the parameters' ranges come from the method table (methods.h).
    for (const att::MethodInfo& m : att::methods()) {
        m_method->addItem(QString::fromUtf8(m.label), QString::fromUtf8(m.name));
        m_method->setItemData(m_method->count() - 1, QString::fromUtf8(m.summary), Qt::ToolTipRole);
    }
    m_method->setCurrentIndex(m_method->findData(QStringLiteral("sparq")));
    m_method->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_method->setMinimumContentsLength(10);
    m_tau->addItem(tr("adaptive (Eq. 9)"), QStringLiteral("adaptive"));
    m_tau->addItem(tr("√d_h"), QStringLiteral("sqrt-dh"));
    m_tau->addItem(tr("√r"), QStringLiteral("sqrt-r"));
    m_tau->addItem(tr("fixed"), QStringLiteral("fixed"));
    m_tauValue->setRange(0.01, 100);
    m_tauValue->setValue(8);
    m_tauValue->setEnabled(false);
    m_gqa->addItem(tr("sum of probabilities"), QStringLiteral("sum-probs"));
    m_gqa->addItem(tr("sum of logits"), QStringLiteral("sum-logits"));
    m_gqa->addItem(tr("per head"), QStringLiteral("per-head"));
    for (const std::string& c : att::paramInfo(att::Param::Pooling).choices)
        m_pooling->addItem(QString::fromStdString(c), QString::fromStdString(c));
    auto number = [](QSpinBox* box, att::Param p, int hi) {
        const att::ParamInfo& i = att::paramInfo(p);
        box->setRange(static_cast<int>(i.min), hi);
        box->setValue(static_cast<int>(i.defaultValue));
        box->setToolTip(QString::fromUtf8(i.help));
    };
    number(m_pageSize, att::Param::PageSize, 4096);
    number(m_window, att::Param::Window, 4096);
    number(m_kernel, att::Param::Kernel, 63);
    m_kernel->setSingleStep(2);
    m_p->setRange(0.01, 1.0);
    m_p->setSingleStep(0.05);
    m_p->setDecimals(2);
    m_p->setValue(att::paramInfo(att::Param::P).defaultValue);
    m_meanValue->setChecked(true);
    static_cast<QVBoxLayout*>(body()->layout())->addLayout(m_form);
    m_form->addRow(tr("Layer"), m_layer);
    m_form->addRow(tr("Head"), m_head);
    m_form->addRow(tr("Method"), m_method);
    m_form->addRow(tr("r (components)"), m_r);
    m_form->addRow(tr("k (positions)"), m_k);
    m_form->addRow(tr("l (local window)"), m_local);
    auto* tauRow = new QHBoxLayout(m_tauRow);
    tauRow->setContentsMargins(0, 0, 0, 0);
    tauRow->addWidget(m_tau, 1);
    tauRow->addWidget(m_tauValue);
    m_form->addRow(tr("Temperature"), m_tauRow);
    m_form->addRow(tr("GQA rule"), m_gqa);
    m_form->addRow(QString(), m_meanValue);
    m_form->addRow(tr("Page size"), m_pageSize);
    m_form->addRow(tr("Mass p"), m_p);
    m_form->addRow(tr("Window"), m_window);
    m_form->addRow(tr("Pooling kernel"), m_kernel);
    m_form->addRow(tr("Pooling"), m_pooling);
    m_form->addRow(tr("Basis"), m_basis);
    m_form->addRow(tr("Channels"), m_channels);
    setLimits(1, 1, 64, 128);
    m_r->setValue(16);
    m_k->setValue(64);
    for (SliderBox* s : {m_r, m_k, m_local})
        connect(s, &SliderBox::valueChanged, this, &ControlsPanel::changed);
    for (QSpinBox* s : {m_layer, m_head, m_pageSize, m_window, m_kernel})
        connect(s, &QSpinBox::valueChanged, this, &ControlsPanel::changed);
    for (QComboBox* c : {m_gqa, m_pooling})
        connect(c, &QComboBox::currentIndexChanged, this, &ControlsPanel::changed);
    connect(m_method, &QComboBox::currentIndexChanged, this, [this] {
        showParametersOf(config().method);
        Q_EMIT changed();
    });
    connect(m_tau, &QComboBox::currentIndexChanged, this, [this] {
        m_tauValue->setEnabled(m_tau->currentData().toString() == QLatin1String("fixed"));
        Q_EMIT changed();
    });
    connect(m_tauValue, &QDoubleSpinBox::valueChanged, this, &ControlsPanel::changed);
    connect(m_p, &QDoubleSpinBox::valueChanged, this, &ControlsPanel::changed);
    connect(m_meanValue, &QCheckBox::toggled, this, &ControlsPanel::changed);
    showParametersOf(att::Method::Sparq);
}

QWidget* ControlsPanel::rowOf(att::Param p) const {
    switch (p) {
    case att::Param::R:
        return m_r;
    case att::Param::K:
        return m_k;
    case att::Param::Local:
        return m_local;
    case att::Param::Tau:
        return m_tauRow;
    case att::Param::Gqa:
        return m_gqa;
    case att::Param::MeanValue:
        return m_meanValue;
    case att::Param::PageSize:
        return m_pageSize;
    case att::Param::P:
        return m_p;
    case att::Param::Window:
        return m_window;
    case att::Param::Kernel:
        return m_kernel;
    case att::Param::Pooling:
        return m_pooling;
    case att::Param::Basis:
        return m_basis;
    case att::Param::Channels:
        return m_channels;
    }
    return nullptr;
}

void ControlsPanel::showParametersOf(att::Method m) {
    for (const att::ParamInfo& p : att::parameters())
        m_form->setRowVisible(rowOf(p.id), att::takes(m, p.id));
}

bool ControlsPanel::isShown(att::Param p) const {
    return m_form->isRowVisible(rowOf(p));
}

void ControlsPanel::setLimits(int layers, int heads, int headDim, int positions) {
    const QSignalBlocker b1(m_layer), b2(m_head);
    m_layer->setRange(0, std::max(0, layers - 1));
    m_head->setRange(0, std::max(0, heads - 1));
    // r ≤ head_dim, k ≤ S: the controls cannot ask for what the method refuses (l above k is
    // clamped by the method).
    const QSignalBlocker b3(m_r), b4(m_k), b5(m_local);
    m_r->setRange(1, headDim);
    m_k->setRange(1, std::max(1, positions));
    m_local->setRange(0, std::max(1, positions));
}

att::AttentionConfig ControlsPanel::config() const {
    att::AttentionConfig c;
    c.method = att::parseMethod(m_method->currentData().toString().toStdString());
    c.r = m_r->value();
    c.k = m_k->value();
    c.local = std::min(m_local->value(), m_k->value());
    const QString tau = m_tau->currentData().toString();
    if (tau == QLatin1String("fixed")) {
        c.tau = att::TauMode::Fixed;
        c.tauValue = m_tauValue->value();
    } else {
        c.tau = att::parseTauMode(tau.toStdString(), &c.tauValue);
    }
    c.gqa = att::parseGroupSelect(m_gqa->currentData().toString().toStdString());
    c.meanValue = m_meanValue->isChecked();
    c.pageSize = m_pageSize->value();
    c.p = m_p->value();
    c.snapWindow = std::min(m_window->value(), m_k->value());
    c.kernel = m_kernel->value() | 1; // odd
    c.pooling = att::parsePooling(m_pooling->currentData().toString().toStdString());
    if (c.method == att::Method::SnapKV && c.gqa == att::GroupSelect::SumLogits)
        c.gqa = att::GroupSelect::SumProbs; // (SnapKV's units are sum-probs or per-head)
    return c;
}

int ControlsPanel::layer() const {
    return m_layer->value();
}
int ControlsPanel::head() const {
    return m_head->value();
}

void ControlsPanel::setLayerHead(int layer, int head) {
    {
        const QSignalBlocker b(m_layer);
        m_layer->setValue(layer);
    }
    m_head->setValue(head);
    Q_EMIT changed();
}

void ControlsPanel::setR(int r) {
    m_r->setValue(r);
}
void ControlsPanel::setK(int k) {
    m_k->setValue(k);
}
void ControlsPanel::setLocal(int l) {
    m_local->setValue(l);
}
void ControlsPanel::setConfig(const att::AttentionConfig& c) {
    {
        const QSignalBlocker block(this); // one changed() at the end
        setMethod(c.method);
        showParametersOf(c.method);
        m_r->setValue(static_cast<int>(c.r));
        if (c.k != att::AttentionConfig::kNoCap)
            m_k->setValue(static_cast<int>(c.k));
        m_local->setValue(static_cast<int>(c.effectiveLocal()));
        const std::string tau = att::tauName(c.tau, c.tauValue);
        const bool fixed = c.tau == att::TauMode::Fixed;
        m_tau->setCurrentIndex(
            m_tau->findData(fixed ? QStringLiteral("fixed") : QString::fromStdString(tau)));
        if (fixed)
            m_tauValue->setValue(c.tauValue);
        m_gqa->setCurrentIndex(
            m_gqa->findData(QString::fromStdString(att::groupSelectName(c.gqa))));
        m_meanValue->setChecked(c.meanValue);
        m_pageSize->setValue(static_cast<int>(c.pageSize));
        m_p->setValue(c.p);
        m_window->setValue(static_cast<int>(c.snapWindow));
        m_kernel->setValue(static_cast<int>(c.kernel));
        m_pooling->setCurrentIndex(
            m_pooling->findData(QString::fromStdString(att::poolingName(c.pooling))));
    }
    Q_EMIT changed();
}

void ControlsPanel::setMethod(att::Method m) {
    const int i = m_method->findData(QString::fromStdString(att::methodName(m)));
    if (i >= 0)
        m_method->setCurrentIndex(i);
}

// --- HeadView ------------------------------------------------------------------------------

HeadView::HeadView(QWidget* parent)
    : Panel(tr("Head view"), parent), m_step1(new QCustomPlot), m_step2(new QCustomPlot),
      m_step3(new QLabel), m_tint(new QComboBox), m_tokens(new QTextBrowser),
      m_tokenRange(new QLabel), m_message(new QLabel) {
    setObjectName(QStringLiteral("headView"));
    m_step1->setObjectName(QStringLiteral("step1Plot"));
    m_step2->setObjectName(QStringLiteral("step2Plot"));
    m_step3->setObjectName(QStringLiteral("step3Summary"));
    m_tokens->setObjectName(QStringLiteral("tokenView"));
    basicPlot(m_step1, tr("component i of q"), tr("|q_i|"));
    basicPlot(m_step2, tr("position"), tr("attention score"));
    m_step1->setMinimumHeight(80);
    m_step2->setMinimumHeight(140);
    m_step2->legend->setVisible(true);
    // Recent positions carry the most attention: keep the legend on the left.
    m_step2->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    m_step2->legend->setFont(QFont(font().family(), 8));
    m_step3->setWordWrap(true);
    m_step3->setTextFormat(Qt::RichText);
    m_step3->setMargin(4);
    m_message->setAlignment(Qt::AlignCenter);
    m_message->setWordWrap(true);
    m_tint->addItem(tr("Tint tokens by exact attention s"));
    m_tint->addItem(tr("Tint tokens by approximate attention ŝ"));
    m_tokens->setMaximumHeight(110);
    m_tokens->setMinimumHeight(40);
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    l->addWidget(m_message);
    auto caption = [](const QString& text) {
        auto* c = new QLabel(text);
        c->setWordWrap(true);
        return c;
    };
    for (QLabel*& c : m_captions)
        c = caption(QString());
    l->addWidget(m_captions[0]);
    l->addWidget(m_step1, 2);
    l->addWidget(m_captions[1]);
    l->addWidget(m_step2, 4);
    l->addWidget(m_captions[2]);
    l->addWidget(m_step3);
    l->addWidget(m_tint);
    l->addWidget(m_tokenRange);
    l->addWidget(m_tokens);
    m_tokenRange->setObjectName(QStringLiteral("tokenRange"));
    m_tokenRange->setVisible(false);
    connect(m_tint, &QComboBox::currentIndexChanged, this, &HeadView::drawTokens);
    // The strip follows the plot's range (coalesced: a drag moves the range many times).
    m_stripTimer = new QTimer(this);
    m_stripTimer->setSingleShot(true);
    m_stripTimer->setInterval(30);
    connect(m_stripTimer, &QTimer::timeout, this, &HeadView::drawTokens);
    connect(m_step2->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), m_stripTimer,
            qOverload<>(&QTimer::start));
    showMessage(tr("Run a prompt to see SparQ at work."));
}

void HeadView::showMessage(const QString& text) {
    m_message->setText(text);
    m_message->setVisible(true);
}

void HeadView::highlightStep(int step) {
    const QString frame = QStringLiteral("border: 3px solid #d62728;");
    m_step1->setStyleSheet(step == 1 ? frame : QString());
    m_step2->setStyleSheet(step == 2 ? frame : QString());
    m_step3->setStyleSheet(step == 3 ? frame : QString());
    // QCustomPlot paints itself; a frame shows through its parent margin instead.
    for (auto [p, s] : {std::pair{m_step1, 1}, std::pair{m_step2, 2}}) {
        p->setBackground(step == s ? QBrush(QColor(255, 245, 230)) : QBrush(Qt::white));
        p->replot(QCustomPlot::rpQueuedReplot);
    }
    m_step3->setAutoFillBackground(step == 3);
    QPalette pal = m_step3->palette();
    pal.setColor(QPalette::Window, QColor(255, 245, 230));
    m_step3->setPalette(pal);
}

void HeadView::showHead(const analysis::HeadState& h, const std::vector<std::string>& tokens) {
    m_message->setVisible(false);
    m_state = h;
    m_tokenTexts = tokens;
    const size_t D = h.qAbs.size(), S = h.exact.size();

    // Step 1: |q| with the chosen components in orange.
    m_step1->clearPlottables();
    m_step1->clearItems();
    QVector<double> all = toQ(h.qAbs), top(static_cast<int>(D), 0.0);
    for (const int64_t i : h.components) {
        top[static_cast<int>(i)] = all[static_cast<int>(i)];
        all[static_cast<int>(i)] = 0;
    }
    auto* rest = new QCPBars(m_step1->xAxis, m_step1->yAxis);
    rest->setData(iota(D), all);
    rest->setBrush(QColor(160, 160, 160));
    rest->setPen(Qt::NoPen);
    rest->setWidth(0.8);
    auto* chosen = new QCPBars(m_step1->xAxis, m_step1->yAxis);
    chosen->setData(iota(D), top);
    chosen->setBrush(kApprox);
    chosen->setPen(Qt::NoPen);
    chosen->setWidth(0.8);
    m_step1->xAxis->setRange(-1, static_cast<double>(D));
    m_step1->yAxis->rescale();
    m_step1->yAxis->setRangeLower(0);
    m_step1->replot();

    // Step 2: s and ŝ over positions, the chosen and the true top-k marked, local window shaded.
    m_step2->clearGraphs();
    m_step2->clearItems();
    QCPGraph* exact = m_step2->addGraph();
    exact->setName(tr("exact s"));
    exact->setData(iota(S), toQ(h.exact), true);
    exact->setPen(QPen(kExact, 1.2));
    if (!h.approx.empty()) {
        QCPGraph* approx = m_step2->addGraph();
        approx->setName(tr("approximate ŝ"));
        approx->setData(iota(S), toQ(h.approx), true);
        approx->setPen(QPen(kApprox, 1.0));
    }
    addMarks(m_step2, h.trueTopK, h.exact, tr("true top-k"), kTrue, QCPScatterStyle::ssCircle, 7);
    addMarks(m_step2, h.chosen, h.exact, tr("chosen (attended)"), kChosen, QCPScatterStyle::ssCross,
             7);
    if (h.localFrom < static_cast<int64_t>(S)) {
        auto* band = new QCPItemRect(m_step2);
        band->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
        band->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
        band->topLeft->setCoords(static_cast<double>(h.localFrom) - 0.5, 0);
        band->bottomRight->setCoords(static_cast<double>(S) - 0.5, 1);
        band->setBrush(kLocal);
        band->setPen(Qt::NoPen);
        band->setLayer(QStringLiteral("background"));
    }
    m_step2->xAxis->setRange(-0.5, static_cast<double>(S) - 0.5);
    m_step2->yAxis->rescale();
    m_step2->yAxis->setRangeLower(0);
    m_step2->yAxis->setRangeUpper(m_step2->yAxis->range().upper * 1.05 + 1e-9);
    m_step2->replot();

    // The captions say what this method does at each step (SparQ's three steps, or the
    // method's own rule from the method table).
    const att::MethodInfo& info = att::methodInfo(h.method);
    const bool sparq = h.method == att::Method::Sparq || h.method == att::Method::SparqTopP;
    m_captions[0]->setText(sparq ? tr("<b>Step 1</b> — the r largest components of |q|")
                                 : tr("<b>Step 1</b> — the query's components |q<sub>i</sub>|"));
    m_captions[1]->setText(
        (h.approx.empty()
             ? tr("<b>Step 2</b> — %1 attends to the positions marked ×: %2")
                   .arg(QString::fromUtf8(info.label), QString::fromUtf8(info.summary))
             : tr("<b>Step 2</b> — approximate scores ŝ (%1) pick the positions marked ×; exact "
                  "attention runs on them")
                   .arg(QString::fromUtf8(info.label))) +
        tr(" (drag and wheel to scroll and zoom)"));
    m_captions[2]->setText(sparq ? tr("<b>Step 3</b> — α and the mean-value mix")
                                 : tr("<b>Step 3</b> — what the chosen positions hold"));

    // Step 3: α against the true top-k mass, the mean-value mix, the output error.
    QString text;
    if (sparq)
        text = tr("α = Σ ŝ over the chosen positions = <b>%1</b> (τ = %2); the exact mass of the "
                  "true top-k is <b>%3</b>, of the chosen ones %4.<br>"
                  "y = α · y<sub>top-k</sub> + (1 − α) · v̄ mixes in %5% of the mean value.<br>")
                   .arg(h.alpha, 0, 'f', 3)
                   .arg(h.tau, 0, 'f', 2)
                   .arg(h.trueMass, 0, 'f', 3)
                   .arg(h.chosenMass, 0, 'f', 3)
                   .arg(100 * (1 - h.alpha), 0, 'f', 1);
    else
        text = tr("Exact mass on the positions used: <b>%1</b> (true top-k: %2).<br>")
                   .arg(h.chosenMass, 0, 'f', 3)
                   .arg(h.trueMass, 0, 'f', 3);
    text += tr("%1 positions · recall of the true top-%1 %2 · output error ‖y − "
               "y<sub>dense</sub>‖ / ‖y<sub>dense</sub>‖ = <b>%3</b>")
                .arg(h.count)
                .arg(h.topkAgreement, 0, 'f', 3)
                .arg(h.outputError, 0, 'g', 3);
    m_step3->setText(text);
    drawTokens();
}

void HeadView::drawTokens() {
    const std::vector<float>& w =
        m_tint->currentIndex() == 1 && !m_state.approx.empty() ? m_state.approx : m_state.exact;
    if (w.empty() || m_tokenTexts.size() != w.size()) {
        m_tokens->setPlainText(QString());
        m_tinted.clear();
        m_tokenRange->setVisible(false);
        return;
    }
    // The strip shows the tokens of the scores plot's visible range, at most kStripTokens of
    // them (its last ones): a 16k-token prompt scrolls with the plot instead of laying out
    // 16k spans. Dragging or zooming the plot moves it.
    const int64_t S = static_cast<int64_t>(w.size());
    const QCPRange range = m_step2->xAxis->range();
    const int64_t hi = std::clamp<int64_t>(static_cast<int64_t>(std::floor(range.upper)) + 1, 1, S);
    const int64_t lo = std::clamp<int64_t>(
        std::max<int64_t>(static_cast<int64_t>(std::ceil(range.lower)), hi - kStripTokens), 0,
        hi - 1);
    // Laying out a thousand tinted tokens costs more than the rest of the view: the exact
    // weights do not move with r or k, so most slider changes keep the text as it is.
    if (w == m_tinted && lo == m_stripFrom && hi == m_stripTo)
        return;
    m_tinted = w;
    m_stripFrom = lo;
    m_stripTo = hi;
    m_tokenRange->setVisible(lo > 0 || hi < S);
    m_tokenRange->setText(
        tr("Tokens %1–%2 of %3 (drag or zoom the scores plot to move)").arg(lo).arg(hi - 1).arg(S));
    const float mx = *std::max_element(w.begin() + lo, w.begin() + hi);
    QString html;
    html.reserve(static_cast<int>(hi - lo) * 60);
    for (int64_t i = lo; i < hi; ++i) {
        const size_t j = static_cast<size_t>(i);
        const double a = mx > 0 ? std::sqrt(w[j] / mx) : 0; // sqrt: small weights stay visible
        const QColor c = QColor::fromRgbF(1 - 0.8 * a, 1 - 0.45 * a, 1 - 0.2 * a);
        html += QStringLiteral("<span style=\"background-color:%1\">%2</span>")
                    .arg(c.name(), QString::fromStdString(m_tokenTexts[j]).toHtmlEscaped());
    }
    m_tokens->setHtml(html);
    if (hi == S) // the decode step's own neighbourhood in view
        m_tokens->moveCursor(QTextCursor::End);
}

// --- OverviewView --------------------------------------------------------------------------

OverviewView::OverviewView(QWidget* parent)
    : Panel(tr("Overview: layer × head"), parent), m_plot(new QCustomPlot), m_message(new QLabel) {
    setObjectName(QStringLiteral("overviewView"));
    m_plot->setObjectName(QStringLiteral("overviewPlot"));
    m_message->setAlignment(Qt::AlignCenter);
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    l->addWidget(m_message);
    auto* pick = new QHBoxLayout;
    const analysis::Measure defaults[3] = {analysis::Measure::Coverage, analysis::Measure::KMass90,
                                           analysis::Measure::Recall};
    for (int i = 0; i < 3; ++i) {
        m_measures[i] = new QComboBox;
        m_measures[i]->setObjectName(QStringLiteral("measureBox%1").arg(i));
        for (const auto& [m, label] : analysis::measures())
            m_measures[i]->addItem(QString::fromStdString(label), static_cast<int>(m));
        m_measures[i]->setCurrentIndex(m_measures[i]->findData(static_cast<int>(defaults[i])));
        m_measures[i]->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        m_measures[i]->setMinimumContentsLength(8);
        connect(m_measures[i], &QComboBox::currentIndexChanged, this, &OverviewView::draw);
        pick->addWidget(m_measures[i], 1);
    }
    l->addLayout(pick);
    l->addWidget(m_plot, 1);
    m_plot->plotLayout()->clear();
    for (int i = 0; i < 3; ++i) {
        m_titles[i] = new QCPTextElement(m_plot, QString(), QFont(font().family(), 9, QFont::Bold));
        m_plot->plotLayout()->addElement(0, i, m_titles[i]);
        auto* rect = new QCPAxisRect(m_plot);
        m_plot->plotLayout()->addElement(1, i, rect);
        rect->axis(QCPAxis::atBottom)->setLabel(tr("head"));
        rect->axis(QCPAxis::atLeft)->setLabel(tr("layer"));
        auto* scale = new QCPColorScale(m_plot);
        scale->setType(QCPAxis::atBottom);
        m_plot->plotLayout()->addElement(2, i, scale);
        scale->setMinimumSize(10, 40);
        m_maps[i] = new QCPColorMap(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        m_maps[i]->setColorScale(scale);
        m_maps[i]->setInterpolate(false);
    }
    m_plot->plotLayout()->setRowStretchFactor(0, 0.1);
    m_plot->plotLayout()->setRowStretchFactor(2, 0.15);
    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
        for (QCPColorMap* map : m_maps) {
            QCPAxisRect* rect = map->keyAxis()->axisRect();
            if (!rect->rect().contains(e->pos()))
                continue;
            const int head =
                static_cast<int>(std::lround(map->keyAxis()->pixelToCoord(e->pos().x())));
            const int layer =
                static_cast<int>(std::lround(map->valueAxis()->pixelToCoord(e->pos().y())));
            if (head >= 0 && layer >= 0 && head < map->data()->keySize() &&
                layer < map->data()->valueSize())
                Q_EMIT cellClicked(layer, head);
        }
    });
    showMessage(tr("Run a prompt to see every head at once."));
}

void OverviewView::showMessage(const QString& text) {
    m_message->setText(text);
    m_message->setVisible(true);
}

analysis::Measure OverviewView::measure(int grid) const {
    return static_cast<analysis::Measure>(m_measures[grid]->currentData().toInt());
}

void OverviewView::setMeasure(int grid, analysis::Measure m) {
    m_measures[grid]->setCurrentIndex(m_measures[grid]->findData(static_cast<int>(m)));
}

void OverviewView::showOverview(const analysis::Overview& o, int r, int k) {
    m_message->setText(
        tr("k = %1 positions, r = %2 components. Click a cell to open that head.").arg(k).arg(r));
    m_last = o;
    draw();
}

void OverviewView::draw() {
    const analysis::Overview& o = m_last;
    for (int i = 0; i < 3; ++i) {
        const analysis::Measure m = measure(i);
        m_titles[i]->setText(m_measures[i]->currentText());
        const auto it = o.grids.find(m);
        if (it == o.grids.end() || o.layers == 0)
            continue;
        QCPColorMap* map = m_maps[i];
        map->data()->setSize(static_cast<int>(o.heads), static_cast<int>(o.layers));
        map->data()->setRange(QCPRange(0, static_cast<double>(o.heads - 1)),
                              QCPRange(0, static_cast<double>(o.layers - 1)));
        for (int64_t l = 0; l < o.layers; ++l)
            for (int64_t h = 0; h < o.heads; ++h) {
                const float v = it->second[static_cast<size_t>(l * o.heads + h)];
                map->data()->setCell(static_cast<int>(h), static_cast<int>(l),
                                     std::isfinite(v) ? v : 0.0);
            }
        // Shares in [0, 1] on a fixed scale; counts, kurtosis and errors on their own range.
        const bool share = m == analysis::Measure::Coverage || m == analysis::Measure::Agreement ||
                           m == analysis::Measure::Recall;
        map->setGradient(m == analysis::Measure::Kurtosis || m == analysis::Measure::OutputError
                             ? QCPColorGradient::gpThermal
                             : QCPColorGradient::gpCold);
        if (share)
            map->setDataRange(QCPRange(0, 1));
        else
            map->rescaleDataRange(true);
        map->keyAxis()->setRange(-0.5, static_cast<double>(o.heads) - 0.5);
        map->valueAxis()->setRange(-0.5, static_cast<double>(o.layers) - 0.5);
    }
    m_plot->replot();
}

double OverviewView::cell(int grid, int layer, int head) const {
    return m_maps[grid]->data()->cell(head, layer);
}

QPoint OverviewView::cellCenter(int grid, int layer, int head) const {
    m_plot->replot(QCustomPlot::rpImmediateRefresh); // axis rects laid out at the current size
    const QCPColorMap* map = m_maps[grid];
    return {static_cast<int>(map->keyAxis()->coordToPixel(head)),
            static_cast<int>(map->valueAxis()->coordToPixel(layer))};
}

// --- TransferPanel -------------------------------------------------------------------------

TransferPanel::TransferPanel(QWidget* parent)
    : Panel(tr("Transfer per head and step"), parent), m_text(new QLabel) {
    setObjectName(QStringLiteral("transferPanel"));
    m_text->setObjectName(QStringLiteral("transferText"));
    m_text->setWordWrap(true);
    m_text->setTextFormat(Qt::RichText);
    body()->layout()->addWidget(m_text);
    m_text->setText(tr("No capture yet."));
}

void TransferPanel::showTransfer(const att::AttentionConfig& c, int64_t S, int64_t d,
                                 double count) {
    const att::TransferArgs a = att::transferArgs(c, S, d, count);
    const double dense = att::transferElements(att::Method::Dense, a);
    const double method = att::transferElements(c.method, a);
    const double ratio = method / dense;
    const att::MethodInfo& m = att::methodInfo(c.method);
    m_text->setText(tr("S = %1, d<sub>h</sub> = %2<br>dense: <b>%3</b> elements<br>%4 (%5): "
                       "<b>%6</b> elements<br>compression %7 (%8× fewer)")
                        .arg(S)
                        .arg(d)
                        .arg(QLocale().toString(dense, 'f', 0))
                        .arg(QString::fromUtf8(m.label), QString::fromUtf8(m.transferFormula))
                        .arg(QLocale().toString(method, 'f', 0))
                        .arg(ratio, 0, 'f', 3)
                        .arg(1 / ratio, 0, 'f', 2));
}

// --- CompareView ---------------------------------------------------------------------------

CompareView::CompareView(QWidget* parent)
    : Panel(tr("Compare two methods on one head"), parent), m_method(new QComboBox),
      m_plot(new QCustomPlot), m_table(new QTableWidget), m_message(new QLabel) {
    setObjectName(QStringLiteral("compareView"));
    m_method->setObjectName(QStringLiteral("compareMethodBox"));
    m_plot->setObjectName(QStringLiteral("comparePlot"));
    m_table->setObjectName(QStringLiteral("compareTable"));
    for (const att::MethodInfo& m : att::methods())
        m_method->addItem(QString::fromUtf8(m.label), QString::fromUtf8(m.name));
    setSecond(att::Method::Quest);
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    auto* pick = new QHBoxLayout;
    pick->addWidget(new QLabel(tr("The lab's method (controls) against")));
    pick->addWidget(m_method, 1);
    l->addLayout(pick);
    l->addWidget(m_message);
    m_message->setWordWrap(true);
    basicPlot(m_plot, tr("position"), tr("exact attention s"));
    m_plot->legend->setVisible(true);
    m_plot->legend->setFont(QFont(font().family(), 8));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    l->addWidget(m_plot, 3);
    m_table->setColumnCount(3);
    m_table->verticalHeader()->setVisible(false);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setMinimumHeight(120);
    l->addWidget(m_table, 2);
    connect(m_method, &QComboBox::currentIndexChanged, this, &CompareView::secondChanged);
    showMessage(tr("Run a prompt to compare methods."));
}

att::Method CompareView::second() const {
    return att::parseMethod(m_method->currentData().toString().toStdString());
}

void CompareView::setSecond(att::Method m) {
    const int i = m_method->findData(QString::fromStdString(att::methodName(m)));
    if (i >= 0)
        m_method->setCurrentIndex(i);
}

void CompareView::showMessage(const QString& text) {
    m_message->setText(text);
}

QString CompareView::cell(int row, int column) const {
    const QTableWidgetItem* it = m_table->item(row, column);
    return it ? it->text() : QString();
}

int CompareView::rowCount() const {
    return m_table->rowCount();
}

void CompareView::showPair(const analysis::HeadState& a, const analysis::HeadState& b) {
    m_a = a;
    m_b = b;
    const QString la = QString::fromUtf8(att::methodInfo(a.method).label);
    const QString lb = QString::fromUtf8(att::methodInfo(b.method).label);
    const size_t S = a.exact.size();
    m_plot->clearGraphs();
    QCPGraph* exact = m_plot->addGraph();
    exact->setName(tr("exact s"));
    exact->setData(iota(S), toQ(a.exact), true);
    exact->setPen(QPen(QColor(90, 90, 90), 1.2));
    const QColor ca = kApprox, cb(148, 103, 189);
    auto approx = [&](const analysis::HeadState& h, const QString& label, const QColor& c) {
        if (h.approx.empty())
            return;
        QCPGraph* g = m_plot->addGraph();
        g->setName(tr("ŝ of %1").arg(label));
        g->setData(iota(S), toQ(h.approx), true);
        g->setPen(QPen(c, 1.0, Qt::DashLine));
    };
    approx(a, la, ca);
    approx(b, lb, cb);
    addMarks(m_plot, a.trueTopK, a.exact, tr("true top-%1").arg(a.trueTopK.size()), kTrue,
             QCPScatterStyle::ssCircle, 9);
    addMarks(m_plot, a.chosen, a.exact, tr("chosen by %1").arg(la), ca, QCPScatterStyle::ssCross,
             7);
    addMarks(m_plot, b.chosen, a.exact, tr("chosen by %1").arg(lb), cb, QCPScatterStyle::ssPlus, 7);
    m_plot->xAxis->setRange(-0.5, static_cast<double>(S) - 0.5);
    m_plot->yAxis->rescale();
    m_plot->yAxis->setRangeLower(0);
    m_plot->yAxis->setRangeUpper(m_plot->yAxis->range().upper * 1.05 + 1e-9);
    m_plot->replot();

    int64_t both = 0;
    for (const int64_t j : a.chosen)
        both += std::binary_search(b.chosen.begin(), b.chosen.end(), j) ? 1 : 0;
    auto num = [](double x, int digits = 3) { return QString::number(x, 'f', digits); };
    auto alpha = [&](const analysis::HeadState& h) {
        return h.tau > 0 || h.method == att::Method::Sparq ? num(h.alpha) : tr("— (none)");
    };
    const QList<std::array<QString, 3>> rows{
        {tr("positions attended"), QString::number(a.count), QString::number(b.count)},
        {tr("transfer (elements per head and step)"), QLocale().toString(a.transfer, 'f', 0),
         QLocale().toString(b.transfer, 'f', 0)},
        {tr("compression (transfer / dense)"), num(a.transfer / a.denseTransfer),
         num(b.transfer / b.denseTransfer)},
        {tr("α (approximate mass kept)"), alpha(a), alpha(b)},
        {tr("output error ‖y − y_dense‖ / ‖y_dense‖"), QString::number(a.outputError, 'g', 4),
         QString::number(b.outputError, 'g', 4)},
        {tr("recall of the true top-|chosen|"), num(a.topkAgreement), num(b.topkAgreement)},
        {tr("exact mass of the chosen"), num(a.chosenMass), num(b.chosenMass)},
        {tr("positions both chose"), QString::number(both), QString::number(both)},
    };
    m_table->setHorizontalHeaderLabels({tr("measure"), la, lb});
    m_table->setRowCount(static_cast<int>(rows.size()));
    for (int i = 0; i < rows.size(); ++i)
        for (int c = 0; c < 3; ++c)
            m_table->setItem(i, c, new QTableWidgetItem(rows[i][static_cast<size_t>(c)]));
    m_message->setText(tr("%1 (×) against %2 (+) at the same r, k and window; circles: the "
                          "true top-k of the exact attention.")
                           .arg(la, lb));
}

// --- TimingCurveView -----------------------------------------------------------------------

double crossover(const std::vector<int64_t>& seq, const std::vector<double>& speedup) {
    const size_t n = std::min(seq.size(), speedup.size());
    if (n == 0)
        return -1;
    // The last point still below 1: from the next one on the method stays faster (a noisy
    // point near 1 at a short length does not count as paying off).
    size_t below = n;
    for (size_t i = n; i-- > 0;)
        if (speedup[i] < 1) {
            below = i;
            break;
        }
    if (below == n)
        return 0;
    if (below == n - 1)
        return -1;
    // Between point `below` (under 1) and the next (at or above): linear in log S.
    const double x0 = std::log(static_cast<double>(seq[below])),
                 x1 = std::log(static_cast<double>(seq[below + 1]));
    const double y0 = speedup[below], y1 = speedup[below + 1];
    const double t = y1 > y0 ? (1 - y0) / (y1 - y0) : 1;
    return std::exp(x0 + t * (x1 - x0));
}

TimingCurveView::TimingCurveView(QWidget* parent)
    : Panel(tr("Decode time against sequence length"), parent), m_time(new QCustomPlot),
      m_speedup(new QCustomPlot), m_summary(new QLabel), m_progress(new QLabel),
      m_measure(new QPushButton(tr("Measure"))), m_cancel(new QPushButton(tr("Cancel"))) {
    setObjectName(QStringLiteral("timingCurveView"));
    m_measure->setObjectName(QStringLiteral("measureCurveButton"));
    m_cancel->setObjectName(QStringLiteral("cancelCurveButton"));
    m_summary->setObjectName(QStringLiteral("timingCurveSummary"));
    auto* l = static_cast<QVBoxLayout*>(body()->layout());
    auto* bar = new QHBoxLayout;
    bar->addWidget(m_progress, 1);
    bar->addWidget(m_measure);
    bar->addWidget(m_cancel);
    l->addLayout(bar);
    m_progress->setWordWrap(true);
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    for (QCustomPlot* p : {m_time, m_speedup}) {
        p->setPlottingHints(QCP::phCacheLabels);
        p->xAxis->setScaleType(QCPAxis::stLogarithmic);
        QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
        ticker->setLogBase(2);
        p->xAxis->setTicker(ticker);
        p->xAxis->setNumberFormat(QStringLiteral("f"));
        p->xAxis->setNumberPrecision(0);
        p->xAxis->setLabel(tr("sequence length S"));
        p->yAxis->setScaleType(QCPAxis::stLogarithmic);
        QSharedPointer<QCPAxisTickerLog> yt(new QCPAxisTickerLog);
        p->yAxis->setTicker(yt);
        // The legend beside the plot, not over the curves (many methods × devices).
        p->legend->setVisible(true);
        p->legend->setFont(QFont(font().family(), 8));
        p->legend->setRowSpacing(-3);
        p->plotLayout()->addElement(0, 1, p->legend);
        p->plotLayout()->setColumnStretchFactor(1, 0.001);
        p->legend->setMaximumSize(260, QWIDGETSIZE_MAX);
        p->setMinimumHeight(160);
    }
    m_time->yAxis->setLabel(tr("decode step (µs)"));
    m_speedup->yAxis->setLabel(tr("speed-up over dense"));
    l->addWidget(m_time, 1);
    l->addWidget(m_speedup, 1);
    l->addWidget(m_summary);
    m_cancel->setEnabled(false);
    connect(m_measure, &QPushButton::clicked, this, &TimingCurveView::measureRequested);
    connect(m_cancel, &QPushButton::clicked, this, &TimingCurveView::cancelRequested);
    showProgress(tr("Run a prompt, then Measure: the decode step of this model's shape is timed "
                    "at S = 256 … 32,768 for dense and each method."),
                 false);
}

int TimingCurveView::timeLines() const {
    return m_time->graphCount();
}

int TimingCurveView::timePoints(int line) const {
    return m_time->graph(line)->dataCount();
}

void TimingCurveView::showProgress(const QString& text, bool running) {
    m_progress->setText(text);
    m_measure->setEnabled(!running);
    m_cancel->setEnabled(running);
}

void TimingCurveView::showCurves(const std::vector<TimingCurve>& curves, const QString& shape) {
    static const QColor palette[] = {
        QColor(255, 127, 14), QColor(44, 160, 44),   QColor(214, 39, 40),  QColor(148, 103, 189),
        QColor(140, 86, 75),  QColor(227, 119, 194), QColor(23, 190, 207), QColor(188, 189, 34)};
    for (QCustomPlot* p : {m_time, m_speedup}) {
        p->clearGraphs();
        p->clearItems();
    }
    QString text = shape;
    double lo = 1e300, hi = 0, ylo = 1e300, yhi = 0, slo = 1e300, shi = 0;
    for (const TimingCurve& c : curves) {
        const Qt::PenStyle style =
            c.device == QLatin1String("CPU") ? Qt::SolidLine : Qt::DashDotLine;
        QVector<double> x;
        for (const int64_t s : c.seq) {
            x.push_back(static_cast<double>(s));
            lo = std::min(lo, static_cast<double>(s));
            hi = std::max(hi, static_cast<double>(s));
        }
        QCPGraph* dense = m_time->addGraph();
        dense->setName(tr("dense (%1)").arg(c.device));
        dense->setData(x, QVector<double>(c.denseUs.begin(), c.denseUs.end()));
        dense->setPen(QPen(kExact, 2, style));
        dense->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 5));
        for (const double u : c.denseUs) {
            ylo = std::min(ylo, u);
            yhi = std::max(yhi, u);
        }
        for (size_t m = 0; m < c.methods.size(); ++m) {
            const QColor col = palette[m % 8];
            QCPGraph* g = m_time->addGraph();
            g->setName(tr("%1 (%2)").arg(c.methods[m], c.device));
            g->setData(x, QVector<double>(c.us[m].begin(), c.us[m].end()));
            g->setPen(QPen(col, 1.5, style));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
            std::vector<double> speed;
            for (size_t i = 0; i < c.seq.size(); ++i) {
                ylo = std::min(ylo, c.us[m][i]);
                yhi = std::max(yhi, c.us[m][i]);
                speed.push_back(c.denseUs[i] / std::max(c.us[m][i], 1e-9));
            }
            QCPGraph* measured = m_speedup->addGraph();
            measured->setName(tr("%1 measured (%2)").arg(c.methods[m], c.device));
            measured->setData(x, QVector<double>(speed.begin(), speed.end()));
            measured->setPen(QPen(col, 1.8, style));
            measured->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
            if (c.device == QLatin1String("CPU")) { // the theory does not depend on the device
                QCPGraph* theory = m_speedup->addGraph();
                theory->setName(tr("%1 theoretical").arg(c.methods[m]));
                theory->setData(x, QVector<double>(c.theory[m].begin(), c.theory[m].end()));
                theory->setPen(QPen(col, 1, Qt::DotLine));
                for (const double t : c.theory[m]) {
                    slo = std::min(slo, t);
                    shi = std::max(shi, t);
                }
            }
            for (const double v : speed) {
                slo = std::min(slo, v);
                shi = std::max(shi, v);
            }
            const double cross = crossover(c.seq, speed);
            QString where;
            if (cross > 0) {
                // Where the method starts to pay off: a dashed line in its colour (the
                // summary below gives the number).
                auto* mark = new QCPItemStraightLine(m_speedup);
                mark->point1->setCoords(cross, 1);
                mark->point2->setCoords(cross, 2);
                mark->setPen(QPen(col, 1, Qt::DashLine));
                where = tr("pays off from S ≈ <b>%1</b>")
                            .arg(QLocale().toString(static_cast<qlonglong>(std::lround(cross))));
            } else if (cross == 0) {
                where = tr("faster than dense from the first S measured (%1)").arg(c.seq.front());
            } else {
                where = tr("slower than dense at every S measured");
            }
            text += tr("<br>%1 (%2): %3; at S = %4 %5× measured, %6× in theory")
                        .arg(c.methods[m], c.device, where)
                        .arg(QLocale().toString(static_cast<qlonglong>(c.seq.back())))
                        .arg(speed.back(), 0, 'f', 2)
                        .arg(c.theory[m].back(), 0, 'f', 2);
        }
    }
    if (hi > 0) {
        auto* one = new QCPItemStraightLine(m_speedup); // speed-up 1: where a method pays off
        one->point1->setCoords(lo, 1);
        one->point2->setCoords(hi, 1);
        one->setPen(QPen(Qt::black, 1));
        for (QCustomPlot* p : {m_time, m_speedup})
            p->xAxis->setRange(lo / 1.2, hi * 1.2);
        m_time->yAxis->setRange(ylo / 1.5, yhi * 1.5);
        m_speedup->yAxis->setRange(std::min(slo, 1.0) / 1.5, std::max(shi, 1.0) * 1.5);
    }
    // Long legends go beside the plot: many methods × devices.
    m_summary->setText(text);
    m_time->replot();
    m_speedup->replot();
}

bool exportLabPlots(HeadView* head, OverviewView* overview, const QString& stem,
                    const QString& ext) {
    bool ok = true;
    const std::pair<QCustomPlot*, QString> plots[] = {
        {head->componentsPlot(), QStringLiteral("-step1")},
        {head->scoresPlot(), QStringLiteral("-step2")},
        {overview->plot(), QStringLiteral("-overview")}};
    for (const auto& [plot, suffix] : plots) {
        const QString path = stem + suffix + QLatin1Char('.') + ext;
        QString error;
        ok = savePlot(plot, path, std::max(plot->width(), 400), std::max(plot->height(), 200),
                      suffix.mid(1), &error) &&
             ok;
    }
    return ok;
}

} // namespace sparqlab::widgets
