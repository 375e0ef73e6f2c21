#include "lab_views.h"

#include "attention/transfer.h"
#include "figure_renderer.h"

#include "attention/methods.h"
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QSpinBox>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
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
void ControlsPanel::setMethod(att::Method m) {
    const int i = m_method->findData(QString::fromStdString(att::methodName(m)));
    if (i >= 0)
        m_method->setCurrentIndex(i);
}

// --- HeadView ------------------------------------------------------------------------------

HeadView::HeadView(QWidget* parent)
    : Panel(tr("Head view"), parent), m_step1(new QCustomPlot), m_step2(new QCustomPlot),
      m_step3(new QLabel), m_tint(new QComboBox), m_tokens(new QTextBrowser),
      m_message(new QLabel) {
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
    l->addWidget(m_tokens);
    connect(m_tint, &QComboBox::currentIndexChanged, this, &HeadView::drawTokens);
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
    auto marks = [&](const std::vector<int64_t>& idx, const QString& name, const QColor& c,
                     QCPScatterStyle::ScatterShape shape) {
        QVector<double> x, y;
        for (const int64_t j : idx) {
            x.push_back(static_cast<double>(j));
            y.push_back(h.exact[static_cast<size_t>(j)]);
        }
        QCPGraph* g = m_step2->addGraph();
        g->setName(name);
        g->setData(x, y, true);
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(shape, c, 7));
    };
    marks(h.trueTopK, tr("true top-k"), kTrue, QCPScatterStyle::ssCircle);
    marks(h.chosen, tr("chosen (attended)"), kChosen, QCPScatterStyle::ssCross);
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
        return;
    }
    // Laying out a thousand tinted tokens costs more than the rest of the view: the exact
    // weights do not move with r or k, so most slider changes keep the text as it is.
    if (w == m_tinted)
        return;
    m_tinted = w;
    const float mx = *std::max_element(w.begin(), w.end());
    QString html;
    html.reserve(static_cast<int>(w.size()) * 60);
    for (size_t i = 0; i < w.size(); ++i) {
        const double a = mx > 0 ? std::sqrt(w[i] / mx) : 0; // sqrt: small weights stay visible
        const QColor c = QColor::fromRgbF(1 - 0.8 * a, 1 - 0.45 * a, 1 - 0.2 * a);
        html += QStringLiteral("<span style=\"background-color:%1\">%2</span>")
                    .arg(c.name(), QString::fromStdString(m_tokenTexts[i]).toHtmlEscaped());
    }
    m_tokens->setHtml(html);
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
