// The timing panel's measurement (decode_timing.h).

#include "app/lab/decode_timing.h"

#include "app/lab/lab.h"
#include "app/lab/lab_timing.h"
#include "app/lab/worker_pool.h"

#include <QTimer>
#include <QtConcurrent/QtConcurrent>

#include <algorithm>

namespace sparqlab::app {

QString timingTable(const std::vector<attention::MethodBenchResult>& results,
                    const std::string& device, int64_t seq) {
    if (results.empty())
        return {};
    QString text;
    const attention::MethodBenchResult& d = results.front();
    // Medians of the samples with their interquartile range: a stray slow sample
    // of a busy machine moves neither.
    text += QObject::tr("<br><b>%1</b>: dense <b>%2 µs</b> (IQR %3, median of %4)")
                .arg(QString::fromStdString(device).toUpper())
                .arg(d.denseMedianUs, 0, 'f', 1)
                .arg(d.denseIqrUs, 0, 'f', 1)
                .arg(d.repeats);
    text += QStringLiteral("<table cellspacing=\"6\"><tr><th align=left>") + QObject::tr("method") +
            QStringLiteral("</th><th>µs</th><th>IQR</th><th>") + QObject::tr("speed-up") +
            QStringLiteral("</th><th>") + QObject::tr("theoretical") + QStringLiteral("</th></tr>");
    QStringList notes, slower; // slower: below 1×, said why before a student reads "slow"
    for (const attention::MethodBenchResult& r : results) {
        const QString label = QString::fromUtf8(attention::methodInfo(r.config.method).label);
        const double speedup = r.denseMedianUs / std::max(r.medianUs, 1e-9);
        // Above the transfer model, or too spread out to read: say so, with why.
        const bool aboveTheory = speedup > 1.15 * r.theoreticalSpeedup;
        const bool noisy = r.iqrUs > 0.25 * r.medianUs || r.denseIqrUs > 0.25 * r.denseMedianUs;
        if (r.config.method != attention::Method::Dense && r.medianUs > r.denseMedianUs)
            slower << label;
        QString flag;
        if (aboveTheory || noisy)
            flag = QStringLiteral(" <span style=\"color:#b35900\">⚠</span>");
        if (aboveTheory)
            notes << QObject::tr("%1 measured above its theory").arg(label);
        if (noisy && !aboveTheory)
            notes << QObject::tr("%1's times spread over ±25%").arg(label);
        text += QStringLiteral("<tr><td>%1</td><td align=right>%2</td><td "
                               "align=right>%3</td><td align=right><b>%4×</b>%5</td><td "
                               "align=right>%6×</td></tr>")
                    .arg(label)
                    .arg(r.medianUs, 0, 'f', 1)
                    .arg(r.iqrUs, 0, 'f', 1)
                    .arg(speedup, 0, 'f', 2)
                    .arg(flag)
                    .arg(r.theoreticalSpeedup, 0, 'f', 2);
    }
    text += QStringLiteral("</table>");
    if (!slower.isEmpty()) {
        // Why, where it can be said: a CPU step whose data the caches hold (dense's bytes from
        // its measured rate and time), or a GPU far from full; else the fixed costs alone.
        const double denseBytes = d.denseGbps * d.denseUs * 1e3;
        const QString why =
            device != "cpu" ? QObject::tr(" and leaves the GPU far from full")
            : denseBytes > 0 && denseBytes < 8.0 * (1 << 20)
                ? QObject::tr(" and reads %1 KiB, which the processor's caches hold")
                      .arg(denseBytes / 1024, 0, 'f', 0)
                : QString();
        text += QObject::tr("<br>Below 1× (%1): at S = %2 a step takes microseconds%3, so "
                            "its fixed costs (the selection, the extra pass%4) outweigh the "
                            "bytes it saves; the time-against-S view shows where the saving "
                            "wins.<br>")
                    .arg(slower.join(QStringLiteral(", ")), QString::number(seq), why,
                         device == "cpu" ? QString() : QObject::tr(", the launches"));
    }
    if (!notes.isEmpty())
        text += QObject::tr("<span style=\"color:#b35900\">⚠ %1: at S = %2 a "
                            "decode step takes microseconds, and a busy machine "
                            "(other programs, the lab's own workers) slows some "
                            "samples; read these as rough.</span>")
                    .arg(notes.join(QStringLiteral("; ")))
                    .arg(seq);
    return text;
}

DecodeTiming::DecodeTiming(Lab& lab)
    : m_lab(lab), m_delay(new QTimer(this)), m_work(new QFutureWatcher<QString>(this)) {
    m_delay->setSingleShot(true);
    m_delay->setInterval(400);
    connect(m_delay, &QTimer::timeout, this, &DecodeTiming::measure);
    connect(m_work, &QFutureWatcher<QString>::finished, this, [this] {
        m_measuring = false;
        Q_EMIT measured(m_work->result());
    });
}

DecodeTiming::~DecodeTiming() {
    m_work->waitForFinished();
}

void DecodeTiming::schedule() {
    if (!m_keep)
        m_delay->start();
}

void DecodeTiming::keepRestored() {
    m_delay->stop();
    m_keep = true;
}

bool DecodeTiming::isPending() const {
    // Until measured() is out (the watcher stops running before its finished signal is
    // delivered).
    return m_delay->isActive() || m_measuring;
}

void DecodeTiming::measure() {
    const auto shown = m_lab.shownCapture();
    if (!shown)
        return;
    // One measurement at a time (they share the cores): a change made while one runs is
    // measured after it, not dropped.
    if (m_work->isRunning() || (m_others && m_others())) {
        m_delay->start();
        return;
    }
    const model::CaptureInfo& mc = shown->info; // the shape: no model needed (sessions)
    const attention::AttentionConfig c = m_lab.fittedConfig();
    attention::DecodeBenchConfig b = labBench(mc, shown->positions());
    b.r = std::min<int64_t>(c.r, mc.headDim);
    b.k = std::min<int64_t>(c.k, b.seq);
    const std::vector<attention::AttentionConfig> methods = engineMethods(c, b.r, b.k);
    m_measuring = true;
    const int64_t dv = mc.valueDim();
    m_work->setFuture(QtConcurrent::run(workerPool(), [b, methods, dv]() {
        QString text =
            QObject::tr("Decode step, this model's shape, S = %1, r = %2, k = %3 "
                        "(each method's own parameters as set in the lab)%4:")
                .arg(b.seq)
                .arg(b.r)
                .arg(b.k)
                .arg(dv == b.headDim ? QString()
                                     : QObject::tr("; values timed at d<sub>h</sub> = %1, not "
                                                   "d<sub>v</sub> = %2 (the decode engine keeps "
                                                   "one width), so the theory here differs from "
                                                   "the transfer panel's")
                                           .arg(b.headDim)
                                           .arg(dv));
        for (const std::string& device : timingDevices()) {
            attention::DecodeBenchConfig c = b;
            c.device = device;
            try {
                const auto results = attention::benchDecodeMethods(c, methods);
                text += timingTable(results, device, b.seq);
            } catch (const std::exception& e) {
                text += QObject::tr("<br>%1: unavailable (%2)")
                            .arg(QString::fromStdString(device).toUpper(),
                                 QString::fromUtf8(e.what()).toHtmlEscaped());
            }
        }
        return text;
    }));
}

} // namespace sparqlab::app
