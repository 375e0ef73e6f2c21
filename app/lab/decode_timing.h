#pragma once
/// \file decode_timing.h
/// The timing panel's measurement: the decode step of every engine method at the shown
/// capture's length, measured in a worker 400 ms after the head state changes, one measurement
/// at a time with the timing view's (they share the cores). Owned by the lab (lab.h); Qt Core
/// only, GUI thread only.

#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

class QTimer;

namespace sparqlab::attention {
struct MethodBenchResult;
}

namespace sparqlab::app {

/// The timing panel's table for one device (HTML): dense's time, then each method's time, IQR,
/// measured and theoretical speed-up, with a note where a method is below 1× (why, at this S),
/// above its theory or too spread out to read. `results` as benchDecodeMethods gives them,
/// dense first.
QString timingTable(const std::vector<attention::MethodBenchResult>& results,
                    const std::string& device, int64_t seq);

class Lab;

class DecodeTiming : public QObject {
    Q_OBJECT
public:
    explicit DecodeTiming(Lab& lab);
    ~DecodeTiming() override;
    /// Measures after a short delay (a change made while one runs is measured after it), unless
    /// a restored session's text is kept.
    void schedule();
    /// A restored session's timing text stays until release() (the next change).
    void keepRestored();
    void release() { m_keep = false; }
    /// Scheduled or running, until measured() is out.
    bool isPending() const;
    /// The worker started, its text not yet out.
    bool isMeasuring() const { return m_measuring; }
    /// What else measures (the views'): the panel waits for it.
    void setOthersMeasuring(std::function<bool()> others) { m_others = std::move(others); }

Q_SIGNALS:
    /// The panel's text (HTML).
    void measured(const QString& html);

private:
    void measure();

    Lab& m_lab;
    QTimer* m_delay;
    QFutureWatcher<QString>* m_work;
    std::function<bool()> m_others;
    bool m_measuring = false;
    bool m_keep = false;
};

} // namespace sparqlab::app
