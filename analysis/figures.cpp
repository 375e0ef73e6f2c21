#include "figures.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace sparqlab::analysis {

namespace {

std::vector<double> toVector(const at::Tensor& t) {
    const at::Tensor c = t.to(at::kDouble).contiguous().view(-1);
    return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

std::vector<std::vector<double>> toGrid(const at::Tensor& t) {
    std::vector<std::vector<double>> g;
    for (int64_t r = 0; r < t.size(0); ++r)
        g.push_back(toVector(t[r]));
    return g;
}

std::vector<double> range(int64_t n, double start = 0) {
    std::vector<double> v;
    for (int64_t i = 0; i < n; ++i)
        v.push_back(start + static_cast<double>(i));
    return v;
}

/// Each figure's caption, by the start of its name: what it shows and why SparQ needs it (the
/// paper's §3 and App. E in our words; the lab's Paper view shows it under the figure).
std::string captionOf(const std::string& name) {
    static const std::pair<const char*, const char*> kCaptions[] = {
        {"fig4a", "How much of each head's attention its largest scores hold, over every layer and "
                  "head. In the paper's models most heads give nearly all of it to a few "
                  "positions: that sparsity is why attending to k positions can be enough (paper "
                  "§3, Fig. 4a). Here n counts the values: capture more prompts for more."},
        {"fig4b", "The same top-k mass for each layer and head: the heads that spread their "
                  "attention are where a sparse method loses most (paper Fig. 4b)."},
        {"fig4c", "The components of q in one layer, standardised, against a Gaussian (log "
                  "scale): the tails are far heavier. A few large components carry most of q·k, "
                  "so SparQ's step 1 reads only the r largest of |q| (paper Fig. 4c)."},
        {"fig4d", "Excess kurtosis of q for each head (0 for a Gaussian): the heavier q's tails, "
                  "the better step 1's r components stand for the whole query (paper Fig. 4d)."},
        {"fig4e", "How often the top k of SparQ's approximate scores, from r components of q, are "
                  "the true top k, as r grows: a fraction of the head dimension already finds "
                  "most of them (paper Fig. 4e)."},
        {"figE2", "The same agreement when step 1 takes q's r largest components, its first r, or "
                  "a random projection to r dimensions: choosing by magnitude does best (paper "
                  "Fig. E2)."},
        {"fig4f", "The share α of the attention that step 1 estimates for its top k, against the "
                  "true share, for each softmax temperature: on the diagonal, Eq. 10 mixes the "
                  "mean value in by the right amount (paper Fig. 4f)."},
        {"figE1_kurtosis", "Kurtosis of q averaged over each layer's heads, layer by layer "
                           "(paper Fig. E1, top)."},
        {"figE1_zmass", "The share of q's components beyond three standard deviations, relative "
                        "to a Gaussian's: above 1, large components are more common than a "
                        "Gaussian gives (paper Fig. E1, bottom)."},
        {"table1", "How much of V's variation lies along each axis, above chance (0): the values "
                   "along the sequence are alike, so their running mean v̄ stands in for the "
                   "positions left out (Eq. 10; paper Table 1)."},
        {"fig2", "Flops per byte moved in a decode step, against batch size: attention over the "
                 "KV cache stays at a few flops per byte however large the batch, so decoding is "
                 "bound by memory bandwidth and reading less data makes it faster (paper §2)."},
        {"fig_kmass", "How many positions each head needs to hold this share of its attention: "
                      "the budget k that head would ask for."},
        {"fig_recall", "The share of the true top k each method finds against the data it "
                       "reads (1 = dense): up and to the left is better."},
    };
    for (const auto& [prefix, text] : kCaptions)
        if (name.rfind(prefix, 0) == 0)
            return text;
    return {};
}

} // namespace

std::vector<FigureData> paperFigures(const StatsResult& s, const model::CaptureInfo& info,
                                     const StatsOptions& o, int64_t kdeLayer) {
    std::vector<FigureData> figs;
    const int64_t L = s.layers, Hq = s.heads;
    const std::string k = std::to_string(o.coverageK);

    { // Fig. 4a: histogram of coverage over examples × layers × heads.
        constexpr int kBins = 20;
        std::vector<double> x, y(kBins, 0.0);
        const std::vector<double> c = toVector(s.coverageAll);
        for (double v : c)
            y[static_cast<size_t>(std::min(kBins - 1, static_cast<int>(v * kBins)))] +=
                1.0 / static_cast<double>(c.size());
        for (int b = 0; b < kBins; ++b)
            x.push_back((b + 0.5) / kBins);
        figs.push_back({"fig4a_coverage_histogram",
                        "Fig. 4a: top-" + k + " attention coverage",
                        "coverage (softmax mass of the top " + k + " positions)",
                        // n says how many values the bars hold (one prompt's last query: 16
                        // for the demo's 4 layers × 4 heads; the paper's, thousands).
                        "fraction of heads × examples (n = " + std::to_string(c.size()) + ")",
                        false,
                        false,
                        {{"coverage", x, y, Series::Style::Bars}},
                        {},
                        {},
                        {},
                        0,
                        1});
    }
    { // Fig. 4b: coverage per layer × head.
        FigureData f{"fig4b_coverage_grid", "Fig. 4b: top-" + k + " coverage per layer and head",
                     "head", "layer"};
        f.grid = toGrid(s.coverage);
        f.gridLabel = "coverage";
        f.gridMin = 0;
        f.gridMax = 1;
        figs.push_back(f);
    }
    { // Fig. 4c: kernel density of standardised q components in one layer, against N(0, 1).
        const int64_t layer = std::clamp<int64_t>(kdeLayer, 0, L - 1);
        at::Tensor x = s.queries.select(1, layer).reshape(-1).to(at::kDouble);
        constexpr int64_t kMaxPoints = 20000; // an even subsample keeps the KDE cheap
        if (x.numel() > kMaxPoints)
            x = x.slice(0, 0, x.numel(), (x.numel() + kMaxPoints - 1) / kMaxPoints);
        const at::Tensor z = (x - x.mean()) / x.std();
        const double n = static_cast<double>(z.numel());
        const double bw = 1.06 * std::pow(n, -0.2); // Silverman's rule for unit variance
        const at::Tensor grid = at::linspace(-8, 8, 321, at::kDouble);
        const at::Tensor dens =
            at::exp(-0.5 * ((grid.unsqueeze(1) - z.unsqueeze(0)) / bw).pow(2)).sum(1) /
            (n * bw * std::sqrt(2 * M_PI));
        const at::Tensor gauss = at::exp(-0.5 * grid.pow(2)) / std::sqrt(2 * M_PI);
        const std::vector<double> gx = toVector(grid);
        // Floors keep the log axis finite where a density is 0.
        figs.push_back(
            {"fig4c_q_density",
             "Fig. 4c: density of q components, layer " + std::to_string(layer),
             "standardised q component",
             "density",
             false,
             true,
             {{"q (KDE)", gx, toVector(dens.clamp_min(1e-7))},
              {"Gaussian", gx, toVector(gauss.clamp_min(1e-7)), Series::Style::Dashed}}});
    }
    { // Fig. 4d: kurtosis per head, one series per layer.
        FigureData f{"fig4d_kurtosis", "Fig. 4d: excess kurtosis of q per head", "head",
                     "kurtosis (Fisher)"};
        for (int64_t l = 0; l < L; ++l)
            f.series.push_back({"layer " + std::to_string(l), range(Hq), toVector(s.kurtosis[l]),
                                Series::Style::Points});
        f.integerX = true;
        f.series.push_back(
            {"Gaussian (0)", {0, static_cast<double>(Hq - 1)}, {0, 0}, Series::Style::Dashed});
        figs.push_back(f);
    }
    { // Fig. 4e and E2: top-k agreement against r.
        FigureData e{"fig4e_agreement_vs_r",
                     "Fig. 4e: top-k agreement of SparQ's approximate scores",
                     "rank r (components of q)", "top-k agreement"};
        FigureData e2{"figE2_agreement_selectors", "Fig. E2: top-k agreement by component selector",
                      "rank r", "top-k agreement"};
        for (int64_t kk : o.agreementK) {
            Series ser{"k = " + std::to_string(kk)};
            for (const AgreementEntry& a : s.agreement)
                if (a.method == "top-r" && a.k == kk) {
                    ser.x.push_back(static_cast<double>(a.r));
                    ser.y.push_back(a.perHead.mean().item<double>());
                }
            e.series.push_back(ser);
        }
        const int64_t k2 = o.agreementK.front();
        for (const char* m : {"top-r", "first-r", "random-proj"}) {
            Series ser{std::string(m) + " (k = " + std::to_string(k2) + ")"};
            for (const AgreementEntry& a : s.agreement)
                if (a.method == m && a.k == k2) {
                    ser.x.push_back(static_cast<double>(a.r));
                    ser.y.push_back(a.perHead.mean().item<double>());
                }
            e2.series.push_back(ser);
        }
        e.legendBottom = e2.legendBottom = true; // the curves rise to the top right
        figs.push_back(e);
        figs.push_back(e2);
    }
    { // Fig. 4f: α approx against α true, per temperature.
        FigureData f{"fig4f_alpha_agreement",
                     "Fig. 4f: approximate vs true top-" + std::to_string(o.alphaK) +
                         " mass (r = " + std::to_string(o.alphaR) + ")",
                     "true mass α", "approximate mass"};
        const std::vector<double> t = toVector(s.alphaTrueAll);
        for (size_t i = 0; i < s.alpha.size(); ++i) {
            std::ostringstream name;
            name.precision(3);
            name << "τ " << s.alpha[i].tau << " (RMSE " << s.alpha[i].rmse << ")";
            f.series.push_back(
                {name.str(), t, toVector(s.alphaApproxAll[i]), Series::Style::Points});
        }
        f.series.push_back({"exact", {0, 1}, {0, 1}, Series::Style::Dashed});
        f.legendBottom = true;
        figs.push_back(f);
    }
    { // Fig. E1: kurtosis and |z| > 3 mass by layer.
        const std::vector<double> x = range(L);
        figs.push_back({"figE1_kurtosis_by_layer",
                        "Fig. E1 (top): kurtosis of q by layer",
                        "layer",
                        "kurtosis (mean over heads)",
                        false,
                        false,
                        {{"kurtosis", x, toVector(at::nanmean(s.kurtosis, 1))}}});
        figs.push_back({"figE1_zmass_by_layer",
                        "Fig. E1 (bottom): |z| > 3 mass relative to a Gaussian",
                        "layer",
                        "mass ratio (1 = Gaussian)",
                        false,
                        false,
                        {{"two-sided, corrected", x, toVector(at::nanmean(s.zmassRatio, 1))},
                         {"notebook variant", x, toVector(at::nanmean(s.zmassRatioNotebook, 1)),
                          Series::Style::Dashed}}});
        figs[figs.size() - 1].integerX = figs[figs.size() - 2].integerX = true;
    }
    { // Table 1: excess correlation ratio η of V along each axis.
        FigureData f{"table1_eta", "Table 1: excess correlation ratio of V along each axis", "axis",
                     "excess η (η − 1/√d)"};
        f.series.push_back({"excess η", range(5), std::vector<double>(s.etaExcess, s.etaExcess + 5),
                            Series::Style::Bars});
        f.xCategories = {"example", "layer", "head", "sequence", "dim"};
        figs.push_back(f);
    }
    { // Fig. 2 / C1: arithmetic intensity of a decode step against batch size for this shape.
        // Weights (per layer, 16-bit): 2·B·P flops over 2·P bytes → B flop/byte.
        // Attention over the KV cache: 4·B·Hq·S·d flops over 2·2·B·Hkv·S·d bytes → Hq/Hkv.
        FigureData f{"fig2_arithmetic_intensity",
                     "Fig. 2: arithmetic intensity of a decode step (" + info.architecture + ")",
                     "batch size",
                     "flops per byte moved",
                     true,
                     true};
        Series w{"projections and MLP (weights)"}, a{"attention (KV cache)"};
        const double g = static_cast<double>(info.nHeads) / static_cast<double>(info.nKvHeads);
        for (int b = 1; b <= 512; b *= 2) {
            w.x.push_back(b);
            w.y.push_back(b);
            a.x.push_back(b);
            a.y.push_back(g);
        }
        f.series = {w, a};
        figs.push_back(f);
    }
    // METHODS.md §9: how much budget each head really needs, and what each method recalls.
    for (int64_t i = 0; s.kMass.defined() && i < s.kMass.size(0); ++i) {
        const double p = o.kMassP[static_cast<size_t>(i)];
        const std::string pct = std::to_string(static_cast<int>(std::lround(p * 100)));
        FigureData f{"fig_kmass_p" + pct,
                     "k_mass(" + pct + "%): positions holding " + pct +
                         "% of the attention, per layer and head",
                     "head", "layer"};
        f.grid = toGrid(s.kMass[i]);
        f.gridLabel = "positions";
        f.gridMin = 1;
        f.gridMax = std::max(2.0, s.kMass[i].max().item<double>());
        f.integerX = true;
        figs.push_back(f);
    }
    {
        FigureData f{"fig_recall_vs_compression",
                     "Recall of the true top-k against the data each method reads",
                     "compression ratio (transfers / dense)", "recall@k (mean over heads)", true};
        for (const attention::MethodInfo& m : attention::methods()) {
            Series line{m.label};
            line.style = Series::Style::Line;
            std::vector<std::pair<double, double>> pts;
            for (const RecallEntry& e : s.recall)
                if (e.config.method == m.id && e.perHead.defined())
                    pts.emplace_back(e.compression, e.perHead.mean().item<double>());
            if (pts.empty())
                continue;
            std::sort(pts.begin(), pts.end());
            for (const auto& [x, y] : pts) {
                line.x.push_back(x);
                line.y.push_back(y);
            }
            f.series.push_back(line);
        }
        f.legendBottom = true;
        if (!f.series.empty())
            figs.push_back(f);
    }
    for (FigureData& f : figs)
        f.caption = captionOf(f.id);
    return figs;
}

std::string figureCsv(const FigureData& f) {
    std::ostringstream os;
    os.precision(10);
    if (!f.grid.empty()) {
        os << "row,column,value\n";
        for (size_t r = 0; r < f.grid.size(); ++r)
            for (size_t c = 0; c < f.grid[r].size(); ++c)
                os << r << ',' << c << ',' << f.grid[r][c] << '\n';
        return os.str();
    }
    bool errors = false;
    for (const Series& s : f.series)
        errors = errors || !s.yErr.empty();
    os << (errors ? "series,x,y,y_stderr\n" : "series,x,y\n");
    for (const Series& s : f.series)
        for (size_t i = 0; i < s.x.size(); ++i) {
            os << '"' << s.name << "\",";
            if (!f.xCategories.empty() && i < f.xCategories.size())
                os << f.xCategories[i];
            else
                os << s.x[i];
            os << ',' << s.y[i];
            if (errors)
                os << ',' << (i < s.yErr.size() ? s.yErr[i] : 0.0);
            os << '\n';
        }
    return os.str();
}

} // namespace sparqlab::analysis
