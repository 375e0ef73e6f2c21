// The paper's figures on the lab's capture: the statistics of `sparqlab-cli figures` (Fig. 2,
// 4a–f, E1, E2, Table 1) computed in a worker when the capture changes, the list of figures beside
// the one chosen and what it shows — Section 3's argument on the model the lecture opened.

#include "app/gui/computed_view.h"
#include "app/lab/lab_export.h"
#include "widgets/figure_renderer.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QTemporaryDir>
#include <QVBoxLayout>

namespace sparqlab::app {
namespace {

struct PaperResult {
    std::vector<analysis::FigureData> figures;
    QString error;
};

class PaperUnit : public ComputedView<PaperResult> {
public:
    PaperUnit(LabHost& host, QWidget* parent)
        : ComputedView(parent), m_host(host), m_widget(new QWidget(parent)),
          m_list(new QListWidget), m_plot(new widgets::FigurePlot) {
        m_widget->setObjectName(QStringLiteral("paperView"));
        m_list->setObjectName(QStringLiteral("paperFigureList"));
        m_plot->setObjectName(QStringLiteral("paperFigure"));
        m_list->setMaximumWidth(250);
        m_list->setWordWrap(true); // (whole titles, over two lines where they must)
        m_list->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        m_list->setSpacing(2);
        // What the figures are of: not the query or settings shown elsewhere (a lecturer
        // moving the query bar here would expect the figure to follow).
        auto* about = new QLabel(QObject::tr(
            "The paper's statistics of the whole capture, at the settings of "
            "<tt>sparqlab-cli figures</tt>: the query bar and the controls do not change them."));
        about->setObjectName(QStringLiteral("paperAbout"));
        about->setWordWrap(true);
        about->setMaximumWidth(250);
        auto* side = new QVBoxLayout;
        side->addWidget(m_list, 1);
        side->addWidget(about);
        auto* l = new QHBoxLayout(m_widget);
        l->addLayout(side);
        l->addWidget(m_plot, 1);
        m_plot->showMessage(QObject::tr("Run a prompt: the paper's statistics of its capture are "
                                        "drawn here."));
        connect(m_list, &QListWidget::currentRowChanged, this, [this](int row) { draw(row); });
    }

    QWidget* widget() override { return m_widget; }

private:
    std::function<PaperResult()> work() override {
        // The figures are the whole capture's (the command line's defaults of r, k and τ): a
        // new capture recomputes them, the lab's settings do not.
        const std::shared_ptr<const analysis::LabCapture> cap = m_host.wholeCapture();
        if (!cap || m_asked.lock() == cap)
            return {};
        m_asked = cap;
        m_plot->showMessage(QObject::tr("Computing the paper's statistics of this capture…"));
        return [cap]() {
            PaperResult r;
            const QTemporaryDir dir; // (the statistics read a capture file, as the CLI's do)
            try {
                if (!dir.isValid())
                    throw std::runtime_error("cannot create a temporary folder");
                r.figures =
                    paperFiguresOf(*cap, dir.filePath(QStringLiteral("capture.h5")).toStdString());
            } catch (const std::exception& e) {
                r.error = QString::fromUtf8(e.what());
            }
            return r;
        };
    }
    void show(const PaperResult& r) override {
        if (!r.error.isEmpty()) {
            m_figures.clear();
            m_list->clear();
            m_plot->showMessage(r.error);
            return;
        }
        const QString chosen = m_list->currentItem()
                                   ? m_list->currentItem()->data(Qt::UserRole).toString()
                                   : QStringLiteral("fig4a_coverage_histogram");
        m_figures = r.figures;
        const QSignalBlocker block(m_list);
        m_list->clear();
        int row = 0;
        for (size_t i = 0; i < m_figures.size(); ++i) {
            const QString name = QString::fromStdString(m_figures[i].id);
            auto* item = new QListWidgetItem(QString::fromStdString(m_figures[i].title), m_list);
            item->setData(Qt::UserRole, name);
            item->setToolTip(QString::fromStdString(m_figures[i].caption));
            if (name == chosen)
                row = static_cast<int>(i);
        }
        m_list->setCurrentRow(row);
        draw(row);
    }
    void draw(int row) {
        if (row < 0 || row >= static_cast<int>(m_figures.size()))
            return;
        m_plot->showFigure(m_figures[static_cast<size_t>(row)]);
    }

    LabHost& m_host;
    QWidget* m_widget;
    QListWidget* m_list;
    widgets::FigurePlot* m_plot;
    std::vector<analysis::FigureData> m_figures;
    std::weak_ptr<const analysis::LabCapture> m_asked; ///< the capture last computed
};

} // namespace
} // namespace sparqlab::app

SPARQLAB_VIEW(paper) {
    return {.name = "paper",
            .label = "Paper figures",
            .menu = "&Paper Figures",
            .order = 7,
            .create = [](LabHost& host, QWidget* parent) -> LabView* {
                return new PaperUnit(host, parent);
            }};
}
