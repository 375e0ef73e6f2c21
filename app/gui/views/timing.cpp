// Timing: decode time against S (256 … 32,768, log axes) for the capture's shape, dense against
// the lab's method (a second one beside it, every decode-engine method on request), measured in a
// worker after a warm-up, cached per shape and parameters, cancellable; a CUDA curve beside the
// CPU one where libtorch has CUDA.

#include "app/gui/lab_view.h"
#include "app/lab/lab_timing.h"
#include "app/lab/worker_pool.h"
#include "widgets/timing_view.h"

#include <QFutureWatcher>
#include <QPointer>
#include <QTimer>
#include <QtConcurrent/QtConcurrent>

#include <atomic>
#include <map>

namespace sparqlab::app {
namespace {

using Curves = std::vector<widgets::TimingCurve>;

/// The curves of every decode-engine method at S = 256 … 32,768 on each device; empty when
/// cancelled. Progress lines go to `view`.
Curves measureCurves(const model::CaptureInfo& info,
                     const std::vector<attention::AttentionConfig>& methods,
                     const std::vector<std::string>& devices, const std::atomic<bool>& cancel,
                     QPointer<widgets::TimingCurveView> view) {
    Curves out;
    std::vector<int64_t> lengths;
    for (int64_t S = 256; S <= 32768; S *= 2)
        lengths.push_back(S);
    const int total = static_cast<int>(lengths.size() * devices.size());
    int done = 0;
    for (const std::string& device : devices) {
        try { // threads started and pages touched before the first point is timed
            (void)attention::benchDecodeMethods(labBench(info, lengths.front(), device), methods);
        } catch (const std::exception&) {
        }
        widgets::TimingCurve curve;
        curve.device = QString::fromStdString(device).toUpper();
        curve.us.resize(methods.size());
        curve.q1.resize(methods.size());
        curve.q3.resize(methods.size());
        curve.theory.resize(methods.size());
        for (const attention::AttentionConfig& m : methods) {
            curve.methods.push_back(QString::fromUtf8(attention::methodInfo(m.method).label));
            curve.ids.push_back(m.method);
        }
        for (const int64_t S : lengths) {
            if (cancel.load())
                return {};
            QMetaObject::invokeMethod(
                view,
                [view, S, done, total, device]() {
                    if (view)
                        view->showProgress(QObject::tr("Measuring %1 at S = %2 (%3 of %4)…")
                                               .arg(QString::fromStdString(device).toUpper())
                                               .arg(S)
                                               .arg(done + 1)
                                               .arg(total),
                                           true);
                },
                Qt::QueuedConnection);
            std::vector<attention::AttentionConfig> at = methods;
            for (attention::AttentionConfig& m : at)
                if (m.k != attention::AttentionConfig::kNoCap)
                    m.k = std::min<int64_t>(m.k, S);
            try {
                const auto results = attention::benchDecodeMethods(labBench(info, S, device), at);
                curve.seq.push_back(S);
                curve.denseUs.push_back(results.front().denseMedianUs);
                curve.denseQ1.push_back(results.front().denseQ1Us);
                curve.denseQ3.push_back(results.front().denseQ3Us);
                curve.repeats = results.front().repeats;
                for (size_t i = 0; i < results.size(); ++i) {
                    curve.us[i].push_back(results[i].medianUs);
                    curve.q1[i].push_back(results[i].q1Us);
                    curve.q3[i].push_back(results[i].q3Us);
                    curve.theory[i].push_back(results[i].theoreticalSpeedup);
                }
            } catch (const std::exception&) {
                break; // out of memory on this device at this length: the curve ends here
            }
            ++done;
        }
        if (!curve.seq.empty())
            out.push_back(curve);
    }
    return out;
}

class TimingUnit : public LabView {
public:
    TimingUnit(LabHost& host, QWidget* parent)
        : LabView(parent), m_host(host), m_view(new widgets::TimingCurveView(parent)),
          m_work(new QFutureWatcher<Curves>(this)),
          m_cancel(std::make_shared<std::atomic<bool>>(false)) {
        connect(m_work, &QFutureWatcher<Curves>::finished, this, [this] { finished(); });
        connect(m_view, &widgets::TimingCurveView::measureRequested, this, [this] { measure(); });
        connect(m_view, &widgets::TimingCurveView::methodsChanged, this, [this] {
            if (m_view->isVisible())
                refresh();
        });
        connect(m_view, &widgets::TimingCurveView::cancelRequested, this, [this] {
            m_cancel->store(true);
            if (!m_work->isRunning() && m_pending) { // still waiting to start
                m_pending = false;
                m_view->showProgress(tr("Cancelled; Measure to start again."), false);
            }
        });
    }
    ~TimingUnit() override {
        m_cancel->store(true);
        m_work->waitForFinished();
    }

    QWidget* widget() override { return m_view; }
    /// Shown: drawn at once when this shape was measured before, else measured.
    void refresh() override {
        if (m_host.shownCapture() && !m_work->isRunning())
            measure();
    }
    bool busy() const override { return m_pending; } // from the request until drawn
    bool measuring() const override { return m_work->isRunning(); }

private:
    void measure() {
        const std::shared_ptr<const analysis::LabCapture> cap = m_host.shownCapture();
        if (!cap || m_work->isRunning())
            return;
        const model::CaptureInfo& info = cap->info;
        const attention::AttentionConfig c = m_host.labConfig();
        const int64_t r = std::min<int64_t>(c.r, info.headDim);
        const std::vector<attention::AttentionConfig> methods =
            curveMethods(c, r, c.k, m_view->second(), m_view->everyMethod());
        const std::vector<std::string> devices = timingDevices();
        // One curve per shape and parameters: measured once, drawn again at once.
        QString key =
            QStringLiteral("%1/%2/%3").arg(info.nHeads).arg(info.nKvHeads).arg(info.headDim);
        for (const attention::AttentionConfig& m : methods) {
            key += QStringLiteral("/") + QString::fromStdString(attention::methodName(m.method));
            for (const attention::Param p : attention::methodInfo(m.method).params)
                key += QStringLiteral("/") + QString::fromStdString(attention::paramValue(m, p));
        }
        key += QString::number(devices.size());
        const QString shape =
            tr("Decode step of one sequence, this model's shape (%1 query heads, %2 KV heads, "
               "d<sub>h</sub> = %3), float32, r = %4, k = %5; dotted: the transfer model's "
               "speed-up.")
                .arg(info.nHeads)
                .arg(info.nKvHeads)
                .arg(info.headDim)
                .arg(r)
                .arg(c.k);
        const auto hit = m_curves.find(key);
        if (hit != m_curves.end()) {
            m_pending = false;
            m_view->showCurves(hit->second, shape);
            m_view->showProgress(tr("Measured earlier for this shape and these parameters."),
                                 false);
            return;
        }
        if (m_host.timingBusy()) { // one measurement at a time: they share the cores
            m_pending = true;
            m_view->showProgress(tr("Waiting for the timing panel's measurement…"), true);
            QTimer::singleShot(200, this, [this] {
                if (m_pending) // not cancelled meanwhile
                    measure();
            });
            return;
        }
        m_key = key;
        m_shape = shape;
        m_pending = true;
        m_cancel = std::make_shared<std::atomic<bool>>(false);
        m_view->showProgress(tr("Measuring…"), true);
        QPointer<widgets::TimingCurveView> view = m_view;
        m_work->setFuture(
            QtConcurrent::run(workerPool(), [info = info, methods, devices, cancel = m_cancel,
                                             view]() { // the shape, copied
                return measureCurves(info, methods, devices, *cancel, view);
            }));
    }
    void finished() {
        m_pending = false;
        const Curves curves = m_work->result();
        if (m_cancel->load() || curves.empty()) {
            m_view->showProgress(tr("Cancelled; Measure to start again."), false);
            return;
        }
        m_curves[m_key] = curves;
        m_view->showCurves(curves, m_shape);
        m_view->showProgress(tr("Measured %1 lengths.").arg(curves.front().seq.size()), false);
    }

    LabHost& m_host;
    widgets::TimingCurveView* m_view;
    QFutureWatcher<Curves>* m_work;
    std::shared_ptr<std::atomic<bool>> m_cancel;
    std::map<QString, Curves> m_curves; ///< measured, per shape and parameters
    QString m_key, m_shape;             ///< what is being measured
    bool m_pending = false;             ///< asked for and not drawn yet
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(timing) {
    return {.name = "timing",
            .label = "Timing",
            .menu = "&Timing Against Length",
            .order = 5,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new TimingUnit(host, parent);
            }};
}
