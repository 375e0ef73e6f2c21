// The lab's controls (method, layer, head, every parameter of the method table).

#include "controls_panel.h"
#include "plot_style.h"
#include "slider_box.h"

#include "attention/transfer.h"
#include "figure_renderer.h"

#include "analysis/lab.h"
#include "attention/method_spec.h"
#include "attention/method_table.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace sparqlab::widgets {

namespace {

/// A whole-number row of the parameter table: odd values only where the row says so (an even
/// one typed becomes the next odd one when the edit ends), stepping by 2 there.
class RowSpinBox : public QSpinBox {
public:
    explicit RowSpinBox(bool odd) : m_odd(odd) {
        if (odd)
            setSingleStep(2);
    }

protected:
    QValidator::State validate(QString& text, int& pos) const override {
        const QValidator::State s = QSpinBox::validate(text, pos);
        return s == QValidator::Acceptable && m_odd && valueFromText(text) % 2 == 0
                   ? QValidator::Intermediate
                   : s;
    }
    void fixup(QString& text) const override {
        QSpinBox::fixup(text);
        const int v = valueFromText(text);
        if (m_odd && v % 2 == 0)
            text = textFromValue(v + 1 <= maximum() ? v + 1 : v - 1);
    }

private:
    bool m_odd;
};

} // namespace

namespace att = sparqlab::attention;
using namespace style;

// --- ControlsPanel -------------------------------------------------------------------------

namespace {

/// The layer box: captured layers by number, with the model's layer where they differ (a
/// hybrid's attention layers are some of its layers).
class LayerSpinBox : public QSpinBox {
public:
    QStringList names; ///< per captured layer; empty: the number alone

protected:
    QString textFromValue(int value) const override {
        return value >= 0 && value < names.size() ? names[value] : QString::number(value);
    }
    int valueFromText(const QString& text) const override {
        return text.section(QLatin1Char(' '), 0, 0).toInt();
    }
    QValidator::State validate(QString& text, int&) const override {
        bool ok = false;
        text.section(QLatin1Char(' '), 0, 0).toInt(&ok);
        return ok || text.isEmpty() ? QValidator::Acceptable : QValidator::Invalid;
    }
};

} // namespace

ControlsPanel::ControlsPanel(QWidget* parent)
    : Panel(tr("Controls"), parent), m_form(new QFormLayout), m_layer(new LayerSpinBox),
      m_head(new QSpinBox), m_method(new QComboBox), m_r(new SliderBox(QStringLiteral("r"))),
      m_k(new SliderBox(QStringLiteral("k"))), m_local(new SliderBox(QStringLiteral("local"))),
      m_tauRow(new QWidget), m_tau(new QComboBox), m_tauValue(new QDoubleSpinBox),
      m_gqa(new QComboBox), m_meanValue(new QCheckBox(tr("mean value (Eq. 10)"))),
      m_pageSize(new RowSpinBox(att::paramInfo(att::Param::PageSize).odd)), m_p(new QDoubleSpinBox),
      m_window(new RowSpinBox(att::paramInfo(att::Param::Window).odd)),
      m_kernel(new RowSpinBox(att::paramInfo(att::Param::Kernel).odd)), m_pooling(new QComboBox),
      m_basis(new QLabel(tr("on the prompt"))), m_channels(new QLabel(tr("on the prompt"))) {
    setObjectName(QStringLiteral("controlsPanel"));
    m_layer->setObjectName(QStringLiteral("layerBox"));
    m_head->setObjectName(QStringLiteral("headBox"));
    m_method->setObjectName(QStringLiteral("methodBox"));
    m_tau->setObjectName(QStringLiteral("tauBox"));
    m_tauValue->setObjectName(QStringLiteral("tauValue"));
    m_gqa->setObjectName(QStringLiteral("gqaBox"));
    // The method list and the parameters' ranges come from the method table (method_table.h).
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
    m_tauValue->setToolTip(tr("The temperature in effect: computed by the rule chosen, or your "
                              "own with \"fixed\""));
    for (const std::string& c : att::paramInfo(att::Param::Pooling).choices)
        m_pooling->addItem(QString::fromStdString(c), QString::fromStdString(c));
    auto number = [this](QSpinBox* box, att::Param p, int hi) {
        const att::ParamInfo& i = att::paramInfo(p);
        box->setRange(static_cast<int>(i.min), hi);
        box->setValue(static_cast<int>(i.defaultValue));
        box->setToolTip(QString::fromUtf8(i.help));
        box->setObjectName(QString::fromUtf8(i.option) + QStringLiteral("Box"));
        m_top[p] = hi;
    };
    number(m_pageSize, att::Param::PageSize, 4096);
    number(m_window, att::Param::Window, 4096);
    number(m_kernel, att::Param::Kernel, 63);
    m_p->setRange(0.01, 1.0);
    m_p->setSingleStep(0.05);
    m_p->setDecimals(2);
    m_p->setValue(att::paramInfo(att::Param::P).defaultValue);
    m_meanValue->setChecked(true);
    // The rows scroll where the panel is shorter than they are (a method with many parameters
    // at 1280×800): the window's height does not grow with the method table.
    auto* rows = new QWidget;
    rows->setLayout(m_form);
    // (Never narrower than the rows: a narrow window gives its width to the other panels, not
    // by cutting off the rows' right edge.)
    QScrollArea* scroll = verticalScroll(rows);
    scroll->setObjectName(QStringLiteral("controlsScroll"));
    static_cast<QVBoxLayout*>(body()->layout())->addWidget(scroll);
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
    addGenericRows();
    setLimits(1, 1, 64, 128);
    m_r->setValue(16);
    m_k->setValue(static_cast<int>(analysis::kLabK));
    // The table's bounds follow the value they depend on (k) before anyone reads config().
    connect(m_k, &SliderBox::valueChanged, this, [this] { applyBounds(); });
    for (SliderBox* s : {m_r, m_k, m_local})
        connect(s, &SliderBox::valueChanged, this, &ControlsPanel::changed);
    // A local window the user moves is theirs; until then the method's default follows k.
    connect(m_local, &SliderBox::valueChanged, this, [this] { m_localSet = true; });
    connect(m_k, &SliderBox::valueChanged, this, [this] { showDefaultLocal(); });
    for (QSpinBox* s : {m_layer, m_head, m_pageSize, m_window, m_kernel})
        connect(s, &QSpinBox::valueChanged, this, &ControlsPanel::changed);
    for (QComboBox* c : {m_gqa, m_pooling})
        connect(c, &QComboBox::currentIndexChanged, this, &ControlsPanel::changed);
    connect(m_method, &QComboBox::currentIndexChanged, this, [this] {
        const att::Method m = att::parseMethod(m_method->currentData().toString().toStdString());
        {
            const QSignalBlocker block(this); // one changed() for the switch
            applyMethodDefaults(m);
            applyBounds();
            m_localSet = false; // (the new method's own default local window)
            showDefaultLocal();
        }
        showParametersOf(m);
        Q_EMIT changed();
    });
    connect(m_tau, &QComboBox::currentIndexChanged, this, [this] {
        m_tauValue->setEnabled(m_tau->currentData().toString() == QLatin1String("fixed"));
        Q_EMIT changed();
    });
    connect(m_tauValue, &QDoubleSpinBox::valueChanged, this, &ControlsPanel::changed);
    connect(m_p, &QDoubleSpinBox::valueChanged, this, &ControlsPanel::changed);
    connect(m_meanValue, &QCheckBox::toggled, this, &ControlsPanel::changed);
    applyMethodDefaults(att::Method::Sparq);
    showParametersOf(att::Method::Sparq);
}

namespace {

QString gqaLabel(att::GroupSelect g) {
    switch (g) {
    case att::GroupSelect::SumProbs:
        return ControlsPanel::tr("sum of probabilities");
    case att::GroupSelect::SumLogits:
        return ControlsPanel::tr("sum of logits");
    case att::GroupSelect::PerHead:
        return ControlsPanel::tr("per head");
    case att::GroupSelect::MaxProbs:
        return ControlsPanel::tr("largest probability");
    }
    return {};
}

/// A label with its first letter in capitals ("hash bits K" → "Hash bits K").
QString rowLabel(const char* label) {
    QString s = QString::fromUtf8(label);
    if (!s.isEmpty())
        s[0] = s[0].toUpper();
    return s;
}

/// A generic parameter's row set to x (a number; a Choice's index, a Flag's 0 or 1).
void setGenericValue(QWidget* widget, double x) {
    if (auto* box = qobject_cast<QSpinBox*>(widget))
        box->setValue(static_cast<int>(x));
    else if (auto* dbox = qobject_cast<QDoubleSpinBox*>(widget))
        dbox->setValue(x);
    else if (auto* combo = qobject_cast<QComboBox*>(widget))
        combo->setCurrentIndex(static_cast<int>(x));
    else if (auto* check = qobject_cast<QCheckBox*>(widget))
        check->setChecked(x != 0);
}

/// The number a generic parameter's row holds.
double genericValue(const QWidget* widget) {
    if (const auto* box = qobject_cast<const QSpinBox*>(widget))
        return box->value();
    if (const auto* dbox = qobject_cast<const QDoubleSpinBox*>(widget))
        return dbox->value();
    if (const auto* combo = qobject_cast<const QComboBox*>(widget))
        return combo->currentIndex();
    if (const auto* check = qobject_cast<const QCheckBox*>(widget))
        return check->isChecked() ? 1 : 0;
    return 0;
}

} // namespace

void ControlsPanel::addGenericRows() {
    // A row for every parameter of the table without a control of its own above (the sliders of
    // r, k and l, the temperature, the GQA rule, …), held where its row says (setParamNumber).
    for (const att::ParamInfo& p : att::parameters()) {
        if (rowOf(p.id))
            continue;
        QWidget* w = nullptr;
        const QString tip = QString::fromUtf8(p.help);
        switch (p.kind) {
        case att::ParamKind::Integer: {
            auto* box = new RowSpinBox(p.odd);
            box->setRange(static_cast<int>(p.min),
                          p.max > p.min ? static_cast<int>(p.max) : 1 << 20);
            m_top[p.id] = box->maximum();
            box->setValue(static_cast<int>(p.defaultValue));
            connect(box, &QSpinBox::valueChanged, this, &ControlsPanel::changed);
            w = box;
            break;
        }
        case att::ParamKind::Number: {
            auto* box = new QDoubleSpinBox;
            box->setDecimals(3);
            box->setSingleStep(0.05);
            const double step = 1e-3; // (one in the last decimal: an open end's last value)
            box->setRange(p.openMin ? p.min + step : p.min, p.max <= p.min ? 1e6
                                                            : p.openMax    ? p.max - step
                                                                           : p.max);
            box->setValue(p.defaultValue);
            connect(box, &QDoubleSpinBox::valueChanged, this, &ControlsPanel::changed);
            w = box;
            break;
        }
        case att::ParamKind::Choice: {
            auto* box = new QComboBox;
            for (const std::string& c : p.choices)
                box->addItem(QString::fromStdString(c), QString::fromStdString(c));
            connect(box, &QComboBox::currentIndexChanged, this, &ControlsPanel::changed);
            w = box;
            break;
        }
        case att::ParamKind::Flag: {
            auto* box = new QCheckBox(rowLabel(p.label));
            connect(box, &QCheckBox::toggled, this, &ControlsPanel::changed);
            w = box;
            break;
        }
        case att::ParamKind::File:
            w = new QLabel(tr("none"));
            break;
        }
        w->setObjectName(QString::fromUtf8(p.option) + QStringLiteral("Box"));
        w->setToolTip(tip);
        m_form->addRow(p.kind == att::ParamKind::Flag ? QString() : rowLabel(p.label), w);
        m_generic[p.id] = w;
    }
}

void ControlsPanel::applyMethodDefaults(att::Method m) {
    // The GQA rules the method takes, its default first (the choice kept when it may).
    const QString before = m_gqa->currentData().toString();
    {
        const QSignalBlocker b(m_gqa);
        m_gqa->clear();
        for (const att::GroupSelect g : att::gqaRules(m))
            m_gqa->addItem(gqaLabel(g), QString::fromStdString(att::groupSelectName(g)));
        const int keep = m_gqa->findData(before);
        const bool ownDefault = !att::methodInfo(m).gqaRules.empty();
        m_gqa->setCurrentIndex(keep >= 0 && !ownDefault ? keep : 0);
    }
    // Its own defaults of the parameters it shares (RocketKV's kernel 63, PQCache's 32 sinks).
    const att::AttentionConfig d = att::defaultConfig(m);
    const QSignalBlocker bk(m_kernel);
    m_kernel->setValue(static_cast<int>(d.kernel));
    for (const auto& [p, widget] : m_generic) {
        bool own = false;
        for (const auto& [q, v] : att::methodInfo(m).defaults)
            own = own || q == p;
        if (!own)
            continue;
        setGenericValue(widget, d.value(p));
    }
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
    default:
        break;
    }
    const auto it = m_generic.find(p);
    return it == m_generic.end() ? nullptr : it->second;
}

void ControlsPanel::showTauInEffect(double tau) {
    if (tau <= 0 || m_tau->currentData().toString() == QLatin1String("fixed"))
        return;
    const QSignalBlocker block(m_tauValue); // (shown, not chosen)
    m_tauValue->setValue(tau);
}

void ControlsPanel::showParametersOf(att::Method m) {
    for (const att::ParamInfo& p : att::parameters())
        m_form->setRowVisible(rowOf(p.id), p.id == att::Param::Local ? m_captureInfo.takesLocal(m)
                                                                     : att::takes(m, p.id));
}

bool ControlsPanel::isShown(att::Param p) const {
    return m_form->isRowVisible(rowOf(p));
}

void ControlsPanel::setMethodAvailable(att::Method m, bool available, const QString& why) {
    const int i = m_method->findData(QString::fromUtf8(att::methodInfo(m).name));
    auto* model = qobject_cast<QStandardItemModel*>(m_method->model());
    if (i < 0 || !model)
        return;
    model->item(i)->setEnabled(available);
    m_method->setItemData(i, available ? QString::fromUtf8(att::methodInfo(m).summary) : why,
                          Qt::ToolTipRole);
    if (!available && m_method->currentIndex() == i)
        setMethod(att::Method::Sparq);
}

bool ControlsPanel::isMethodAvailable(att::Method m) const {
    const int i = m_method->findData(QString::fromUtf8(att::methodInfo(m).name));
    const auto* model = qobject_cast<const QStandardItemModel*>(m_method->model());
    return i >= 0 && model && model->item(i)->isEnabled();
}

void ControlsPanel::setLayerNames(const QStringList& names) {
    auto* box = static_cast<LayerSpinBox*>(m_layer);
    box->names = names;
    box->setToolTip(names.isEmpty() ? QString()
                                    : tr("The captured layers are the model's attention layers; "
                                         "its linear-attention layers have no KV cache"));
    box->setValue(box->value()); // redraw the text
    box->adjustSize();
}

void ControlsPanel::setLimits(int layers, int heads, int headDim, int positions) {
    const QSignalBlocker b1(m_layer), b2(m_head);
    m_layer->setRange(0, std::max(0, layers - 1));
    m_head->setRange(0, std::max(0, heads - 1));
    // r ≤ head_dim, k ≤ S: the controls cannot ask for what the method refuses.
    const QSignalBlocker b3(m_r), b4(m_k), b5(m_local);
    m_r->setRange(1, headDim);
    m_k->setRange(1, std::max(1, positions));
    m_positions = std::max(1, positions);
    applyBounds();
}

void ControlsPanel::setCapture(const analysis::LabCapture& c) {
    setLimits(static_cast<int>(c.layers()), static_cast<int>(c.heads()),
              static_cast<int>(c.headDim()), static_cast<int>(c.positions()));
    showDefaultLocal(); // (a method's default l follows k, which this capture may have moved)
    QStringList names;  // a hybrid's attention layers by their model layer
    const model::CaptureInfo& info = c.info;
    if (info.skipsLayers())
        for (int64_t l = 0; l < c.layers(); ++l)
            names << tr("%1 · model layer %2 of %3")
                         .arg(l)
                         .arg(info.modelLayer(l))
                         .arg(info.modelLayerCount());
    setLayerNames(names);
    m_captureInfo = info;
    showParametersOf(att::parseMethod(m_method->currentData().toString().toStdString()));
    // The indexer's key dimension is the captured model's (what its transfer reads per position).
    if (const auto it = m_generic.find(att::Param::IndexDim);
        it != m_generic.end() && info.indexHeadDim > 0) {
        const QSignalBlocker b(it->second);
        setGenericValue(it->second, static_cast<double>(info.indexHeadDim));
    }
    // A method that reads what only some captures hold (the indexer's scores: DSA, MiniMax-M3) is
    // offered where the capture holds them; its input's own words say why not.
    for (const att::MethodSpec* s : att::methodSpecs())
        for (const att::MethodInput& in : s->inputs)
            if (std::string(in.name) == "index_scores")
                setMethodAvailable(s->info.id, !c.indexScores.empty(),
                                   tr("needs %1").arg(QString::fromUtf8(in.what)));
}

int ControlsPanel::rowValue(att::Param p) const {
    const QWidget* w = rowOf(p);
    if (const auto* s = qobject_cast<const SliderBox*>(w))
        return s->value();
    if (const auto* box = qobject_cast<const QSpinBox*>(w))
        return box->value();
    return 0;
}

void ControlsPanel::applyBounds() {
    // The table's bounds between parameters (method_table.h): a row clamped to another stops at
    // its value (l at k: above it, it is k), and so does each pair of the method's atMost
    // (SnapKV's window within k); the others have their whole range.
    const att::Method m = att::parseMethod(m_method->currentData().toString().toStdString());
    std::vector<std::pair<att::Param, att::Param>> pairs = att::methodInfo(m).atMost;
    for (const att::ParamInfo& p : att::parameters())
        if (p.clampedTo)
            pairs.emplace_back(p.id, *p.clampedTo);
    const QSignalBlocker b(m_local); // (the SliderBox keeps the value the user chose)
    m_local->setRange(0, m_positions);
    for (const auto& [p, top] : m_top)
        if (auto* box = qobject_cast<QSpinBox*>(rowOf(p))) {
            const QSignalBlocker bb(box);
            box->setMaximum(top);
        }
    for (const auto& [a, b] : pairs) {
        const int bound = std::max(1, rowValue(b));
        if (a == att::Param::Local)
            m_local->setRange(0, std::min(m_positions, bound));
        else if (auto* box = qobject_cast<QSpinBox*>(rowOf(a)); box && m_top.count(a))
            box->setMaximum(std::min(m_top.at(a), bound));
    }
}

att::AttentionConfig ControlsPanel::config() const {
    att::AttentionConfig c;
    c.method = att::parseMethod(m_method->currentData().toString().toStdString());
    c.r = m_r->value();
    c.k = m_k->value();
    if (m_localSet && isShown(att::Param::Local)) // (else the method's own default, as on the
        c.local = m_local->value();               // command line; none where l is not shown)
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
    c.snapWindow = m_window->value(); // (within the table's rules: applyBounds, RowSpinBox)
    c.kernel = m_kernel->value();
    c.pooling = att::parsePooling(m_pooling->currentData().toString().toStdString());
    const std::vector<att::GroupSelect> rules = att::gqaRules(c.method);
    if (std::find(rules.begin(), rules.end(), c.gqa) == rules.end())
        c.gqa = rules.front(); // (the box is refilled for the method just after a switch)
    // A value at the method's default is left to it (as on the command line), so that a default
    // sized for long contexts is fitted to the capture (attention::fitDefaults).
    att::AttentionConfig defaults;
    defaults.method = c.method;
    for (const auto& [p, widget] : m_generic) {
        if (!att::takes(c.method, p))
            continue;
        const double v = genericValue(widget);
        if (v != defaults.value(p))
            att::setParamNumber(c, p, v);
    }
    c.calibration = calibration(c.method);
    return c;
}

void ControlsPanel::setCalibration(att::Method m, std::shared_ptr<att::Calibration> cal) {
    if (cal)
        m_calibrations[m] = std::move(cal);
    else
        m_calibrations.erase(m);
    Q_EMIT changed();
}

std::shared_ptr<att::Calibration> ControlsPanel::calibration(att::Method m) const {
    const auto it = m_calibrations.find(m);
    return it == m_calibrations.end() ? nullptr : it->second;
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
void ControlsPanel::followPromptK() {
    m_k->follow([](int positions) { return static_cast<int>(analysis::promptK(positions)); },
                tr("k follows the prompt until you set it: %1, or half the positions of a "
                   "prompt shorter than %2 (this capture: %3), so that the method leaves "
                   "some out")
                    .arg(analysis::kLabK)
                    .arg(2 * analysis::kLabK)); // (%3: the capture's, at each range)
}
void ControlsPanel::setLocal(int l) {
    m_local->setValue(l);
    m_localSet = true;
}

void ControlsPanel::showDefaultLocal() {
    if (m_localSet)
        return;
    const QSignalBlocker b(m_local);
    m_local->setValue(static_cast<int>(config().effectiveLocal()));
}
void ControlsPanel::setConfig(const att::AttentionConfig& c) {
    {
        const QSignalBlocker block(this); // one changed() at the end
        setMethod(c.method);
        applyMethodDefaults(c.method);
        showParametersOf(c.method);
        m_r->setValue(static_cast<int>(c.r));
        // A k equal to the one k follows now keeps following: a session made while it
        // followed, or the command line's other options over the controls' own config.
        if (c.k != att::AttentionConfig::kNoCap && !(m_k->follows() && c.k == m_k->value()))
            m_k->setValue(static_cast<int>(c.k));
        m_local->setValue(static_cast<int>(c.effectiveLocal()));
        m_localSet = c.local.has_value(); // (a session keeps "the method's default" as such)
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
        for (const auto& [p, widget] : m_generic) {
            if (!att::takes(c.method, p))
                continue;
            setGenericValue(widget, c.value(p));
        }
    }
    Q_EMIT changed();
}

void ControlsPanel::setMethod(att::Method m) {
    const int i = m_method->findData(QString::fromStdString(att::methodName(m)));
    if (i >= 0)
        m_method->setCurrentIndex(i);
}

} // namespace sparqlab::widgets
