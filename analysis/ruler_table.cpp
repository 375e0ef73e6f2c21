#include "ruler_table.h"

#include "analysis/ruler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

namespace sparqlab::analysis {

namespace {

/// Python's round(x, 2): the exact binary value rounded to the nearest hundredth, ties to even
/// (RULER's scores: round(sum / n * 100, 2); 3.125 is 3.12), as printf's %.2f rounds it.
double roundHundredths(double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f", x);
    return std::strtod(buf, nullptr);
}

std::string pointName(const EvalRecord& r) {
    std::string name = r.method;
    for (const auto& [k, v] : r.numbers) {
        std::ostringstream s;
        s << " " << k << "=" << v;
        name += s.str();
    }
    return name;
}

std::string fixed2(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", x);
    return buf;
}

int taskOrder(const std::string& task) {
    const std::vector<std::string>& all = ruler::taskNames();
    return static_cast<int>(std::find(all.begin(), all.end(), task) - all.begin());
}

} // namespace

std::vector<RulerCell> rulerCells(const std::vector<EvalRecord>& records) {
    struct Acc {
        int64_t n = 0, timed = 0;
        double sum = 0, compression = 0, speedup = 0;
    };
    std::vector<std::string> points;
    std::map<std::tuple<std::string, int64_t, std::string>, Acc> acc;
    for (const EvalRecord& r : records) {
        const std::vector<std::string>& names = ruler::taskNames();
        if (std::find(names.begin(), names.end(), r.task) == names.end())
            continue;
        const std::string p = pointName(r);
        if (std::find(points.begin(), points.end(), p) == points.end())
            points.push_back(p);
        Acc& a = acc[{p, r.length, r.task}];
        ++a.n;
        a.sum += r.value;
        a.compression += r.compression;
        if (std::isfinite(r.speedup)) {
            a.speedup += r.speedup;
            ++a.timed;
        }
    }
    std::vector<RulerCell> out;
    for (const std::string& p : points) {
        std::set<int64_t> lengths;
        for (const auto& [key, a] : acc)
            if (std::get<0>(key) == p)
                lengths.insert(std::get<1>(key));
        for (const int64_t L : lengths) {
            std::vector<RulerCell> tasks;
            for (const auto& [key, a] : acc)
                if (std::get<0>(key) == p && std::get<1>(key) == L)
                    tasks.push_back({p, L, std::get<2>(key), a.n,
                                     roundHundredths(a.sum / static_cast<double>(a.n) * 100),
                                     a.compression / static_cast<double>(a.n),
                                     a.timed > 0 ? a.speedup / static_cast<double>(a.timed)
                                                 : std::numeric_limits<double>::quiet_NaN()});
            std::sort(tasks.begin(), tasks.end(), [](const RulerCell& a, const RulerCell& b) {
                return taskOrder(a.task) < taskOrder(b.task);
            });
            RulerCell avg{p, L, "average", 0, 0, 0, 0};
            for (const RulerCell& c : tasks) {
                avg.n += c.n;
                avg.score += c.score / static_cast<double>(tasks.size());
                avg.compression += c.compression / static_cast<double>(tasks.size());
                avg.speedup += c.speedup / static_cast<double>(tasks.size()); // NaN if any is
            }
            avg.score = roundHundredths(avg.score);
            out.insert(out.end(), tasks.begin(), tasks.end());
            out.push_back(avg);
        }
    }
    return out;
}

std::string rulerTableCsv(const std::vector<EvalRecord>& records) {
    std::string out = "point,length,task,examples,score,compression\n";
    for (const RulerCell& c : rulerCells(records)) {
        char comp[32];
        std::snprintf(comp, sizeof comp, "%.4f", c.compression);
        out += "\"" + c.point + "\"," + std::to_string(c.length) + "," + c.task + "," +
               std::to_string(c.n) + "," + fixed2(c.score) + "," + comp + "\n";
    }
    return out;
}

std::string rulerTableMarkdown(const std::vector<EvalRecord>& records) {
    const std::vector<RulerCell> cells = rulerCells(records);
    std::string out = "RULER-style scores (100 × string_match_all, qa: string_match_part; SOTU "
                      "haystack and wamerican words: not comparable to published RULER "
                      "numbers)\n";
    std::vector<std::string> points;
    for (const RulerCell& c : cells)
        if (std::find(points.begin(), points.end(), c.point) == points.end())
            points.push_back(c.point);
    // First the summary: each point's average over the tasks, per length.
    std::set<int64_t> allLengths;
    std::map<std::pair<std::string, int64_t>, const RulerCell*> average;
    for (const RulerCell& c : cells)
        if (c.task == "average") {
            allLengths.insert(c.length);
            average[{c.point, c.length}] = &c;
        }
    out += "\n### Average over the tasks\n\n| method | compression |";
    for (const int64_t L : allLengths)
        out += " " + std::to_string(L) + " |";
    out += "\n| --- | ---: |";
    for (size_t i = 0; i < allLengths.size(); ++i)
        out += " ---: |";
    out += "\n";
    for (const std::string& p : points) {
        const RulerCell* first = nullptr;
        std::string row;
        for (const int64_t L : allLengths) {
            const auto it = average.find({p, L});
            row += it == average.end() ? " |" : " " + fixed2(it->second->score) + " |";
            if (it != average.end() && !first)
                first = it->second;
        }
        char comp[32];
        std::snprintf(comp, sizeof comp, "%.3f", first ? first->compression : 1.0);
        out += "| " + p + " | " + comp + " |" + row + "\n";
    }
    for (const std::string& p : points) {
        std::set<int64_t> lengths;
        std::vector<std::string> tasks;
        std::map<std::pair<std::string, int64_t>, double> score;
        for (const RulerCell& c : cells)
            if (c.point == p) {
                lengths.insert(c.length);
                if (std::find(tasks.begin(), tasks.end(), c.task) == tasks.end())
                    tasks.push_back(c.task);
                score[{c.task, c.length}] = c.score;
            }
        // "average" last.
        std::stable_partition(tasks.begin(), tasks.end(),
                              [](const std::string& t) { return t != "average"; });
        out += "\n### " + p + "\n\n| task |";
        for (const int64_t L : lengths)
            out += " " + std::to_string(L) + " |";
        out += "\n| --- |";
        for (size_t i = 0; i < lengths.size(); ++i)
            out += " ---: |";
        out += "\n";
        for (const std::string& t : tasks) {
            out += t == "average" ? "| **average** |" : "| " + t + " |";
            for (const int64_t L : lengths) {
                const auto it = score.find({t, L});
                out += it == score.end() ? " |" : " " + fixed2(it->second) + " |";
            }
            out += "\n";
        }
    }
    return out;
}

std::vector<FigureData> rulerFigures(const std::vector<EvalRecord>& records) {
    const std::vector<RulerCell> cells = rulerCells(records);
    if (cells.empty())
        return {};
    FigureData byLength;
    byLength.id = "ruler_score_vs_length";
    byLength.title = "RULER-style average score against the length";
    byLength.xLabel = "length L (tokens)";
    byLength.yLabel = "average score (100 × string match)";
    byLength.logX = true;
    std::map<std::string, Series> lines;
    std::vector<std::string> order;
    std::map<int64_t, std::vector<const RulerCell*>> atLength;
    for (const RulerCell& c : cells) {
        if (c.task != "average")
            continue;
        if (!lines.count(c.point)) {
            order.push_back(c.point);
            lines[c.point].name = c.point;
            lines[c.point].style = Series::Style::Line;
        }
        lines[c.point].x.push_back(static_cast<double>(c.length));
        lines[c.point].y.push_back(c.score);
        atLength[c.length].push_back(&c);
    }
    for (const std::string& p : order) {
        if (lines[p].x.size() == 1)
            lines[p].style = Series::Style::Points;
        byLength.series.push_back(lines[p]);
    }
    std::vector<FigureData> out{byLength};
    for (const auto& [L, pts] : atLength) {
        FigureData f;
        f.id = "ruler_score_vs_compression_L" + std::to_string(L);
        f.title = "RULER-style average score against the compression at L = " + std::to_string(L);
        f.xLabel = "compression ratio (attention transfers ÷ dense)";
        f.yLabel = byLength.yLabel;
        f.logX = true;
        f.xMarkers = {0.5, 0.25, 0.125};
        for (const RulerCell* c : pts) {
            Series s;
            s.name = c->point;
            s.style = Series::Style::Points;
            s.x = {c->compression};
            s.y = {c->score};
            f.series.push_back(s);
        }
        out.push_back(f);
        // Score against the measured speed-up (eval --measure-speed), the Pareto front marked.
        FigureData s = f;
        s.id = "ruler_score_vs_speedup_L" + std::to_string(L);
        s.title =
            "RULER-style average score against the measured speed-up at L = " + std::to_string(L);
        s.xLabel = "measured decode speed-up over dense (this machine)";
        s.xMarkers.clear();
        s.series.clear();
        std::vector<std::pair<double, double>> xy;
        for (const RulerCell* c : pts)
            if (std::isfinite(c->speedup)) {
                Series one;
                one.name = c->point;
                one.style = Series::Style::Points;
                one.x = {c->speedup};
                one.y = {c->score};
                s.series.push_back(one);
                xy.emplace_back(c->speedup, c->score);
            }
        if (!xy.empty()) {
            s.series.push_back(paretoSeries(xy));
            out.push_back(s);
        }
    }
    return out;
}

} // namespace sparqlab::analysis
