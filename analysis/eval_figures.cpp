#include "eval_figures.h"

#include "analysis/eval_task_spec.h"
#include "base/json_number.h"

#include "attention/attention.h"
#include "attention/method_table.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

namespace sparqlab::analysis {

namespace {
/// More tokens than any context has (2^40): a larger count in a results file is an error.
constexpr int64_t kMaxTokens = int64_t{1} << 40;
} // namespace

namespace {

using json = nlohmann::json;

constexpr double kTargets[] = {0.5, 0.25, 0.125};

std::string label(const std::string& method) {
    try {
        return attention::methodInfo(attention::parseMethod(method)).label;
    } catch (const attention::AttentionError&) {
        return method;
    }
}

/// The task table's label of a metric (results may name a metric no task has any more).
const EvalTaskSpec* taskOfMetric(const std::string& metric) {
    for (const EvalTaskSpec* t : evalTaskSpecs())
        if (metric == t->metric)
            return t;
    return nullptr;
}

std::string metricLabel(const std::string& metric) {
    const EvalTaskSpec* t = taskOfMetric(metric);
    return t ? t->metricLabel : metric;
}

/// "r=16 k=128" from the numeric parameters that tell a method's points apart.
std::string shortParams(const std::map<std::string, double>& numbers) {
    std::ostringstream os;
    for (const char* key : {"r", "k", "p", "local", "page_size"})
        if (const auto it = numbers.find(key); it != numbers.end())
            os << (os.tellp() > 0 ? " " : "") << key << "=" << it->second;
    return os.str();
}

std::vector<std::string> tasksOf(const std::vector<EvalPointStats>& stats) {
    std::vector<std::string> tasks;
    for (const EvalPointStats& s : stats)
        if (std::find(tasks.begin(), tasks.end(), s.task) == tasks.end())
            tasks.push_back(s.task);
    return tasks;
}

/// The point of `method` on `task` nearest `target` compression (in log space, within √2).
const EvalPointStats* nearest(const std::vector<EvalPointStats>& stats, const std::string& task,
                              const std::string& method, double target) {
    const EvalPointStats* best = nullptr;
    double bestD = std::log(std::sqrt(2.0)) + 1e-12;
    for (const EvalPointStats& s : stats) {
        if (s.task != task || s.method != method || s.compression <= 0)
            continue;
        const double d = std::abs(std::log(s.compression / target));
        if (d <= bestD) {
            bestD = d;
            best = &s;
        }
    }
    return best;
}

std::vector<std::string> methodsOf(const std::vector<EvalPointStats>& stats,
                                   const std::string& task) {
    std::vector<std::string> out;
    for (const EvalPointStats& s : stats)
        if (s.task == task && std::find(out.begin(), out.end(), s.method) == out.end())
            out.push_back(s.method);
    return out;
}

std::string fixed(double x, int digits) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(digits) << x;
    return os.str();
}

int digitsFor(const std::string& metric) {
    const EvalTaskSpec* t = taskOfMetric(metric);
    return t ? t->digits : 3;
}

} // namespace

std::vector<EvalRecord> parseEvalJsonl(const std::string& text, const std::string& path) {
    std::vector<EvalRecord> out;
    std::istringstream in(text);
    int64_t lineNo = 0;
    for (std::string line; std::getline(in, line);) {
        ++lineNo;
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        const std::string where = path + " line " + std::to_string(lineNo);
        json j;
        try {
            j = json::parse(line);
        } catch (const json::exception& e) {
            throw EvalFileError(where + ": malformed JSON: " + e.what());
        }
        if (!j.is_object())
            throw EvalFileError(where + ": expected an object");
        auto str = [&](const char* key) {
            if (!j.contains(key) || !j[key].is_string())
                throw EvalFileError(where + ": expected a string \"" + key + "\"");
            return j[key].get<std::string>();
        };
        auto num = [&](const char* key) {
            if (!j.contains(key) || !j[key].is_number())
                throw EvalFileError(where + ": expected a number \"" + key + "\"");
            const double x = j[key].get<double>();
            if (!std::isfinite(x))
                throw EvalFileError(where + ": \"" + key + "\" must be finite");
            return x;
        };
        EvalRecord r;
        r.task = str("task");
        r.data = str("data");
        r.method = str("method");
        r.metric = str("metric");
        if (!j.contains("example") || !(j["example"].is_string() || j["example"].is_number()))
            throw EvalFileError(where + ": expected \"example\"");
        r.example =
            j["example"].is_string() ? j["example"].get<std::string>() : j["example"].dump();
        if (!j.contains("params") || !j["params"].is_object())
            throw EvalFileError(where + ": expected a \"params\" object");
        r.params = j["params"].dump();
        for (const auto& [key, v] : j["params"].items())
            if (v.is_number() && std::isfinite(v.get<double>()))
                r.numbers[key] = v.get<double>();
        r.value = num("value");
        r.compression = num("compression");
        if (r.compression <= 0)
            throw EvalFileError(where + ": \"compression\" must be positive");
        if (!j.contains("seq_len"))
            throw EvalFileError(where + ": expected a number \"seq_len\"");
        r.seqLen =
            base::requireWholeNumber<EvalFileError>(j["seq_len"], where, "seq_len", 0, kMaxTokens);
        if (j.contains("depth") && j["depth"].is_number())
            r.depth = j["depth"].get<double>();
        if (j.contains("haystack_tokens") && j["haystack_tokens"].is_number())
            r.haystackTokens = base::requireWholeNumber<EvalFileError>(
                j["haystack_tokens"], where, "haystack_tokens", 0, kMaxTokens);
        if (j.contains("speedup") && j["speedup"].is_number()) {
            r.speedup = j["speedup"].get<double>();
            if (!std::isfinite(r.speedup) || r.speedup <= 0)
                throw EvalFileError(where + ": \"speedup\" must be a positive number");
        }
        if (j.contains("length") && j["length"].is_number())
            r.length = base::requireWholeNumber<EvalFileError>(j["length"], where, "length", 0,
                                                               kMaxTokens);
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<EvalRecord> readEvalJsonl(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw EvalFileError(path + ": cannot read (missing?)");
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::vector<EvalRecord> r = parseEvalJsonl(ss.str(), path);
    if (r.empty())
        throw EvalFileError(path + ": no eval lines");
    return r;
}

std::vector<EvalPointStats> summariseEval(const std::vector<EvalRecord>& records) {
    std::vector<EvalPointStats> out;
    std::map<std::string, size_t> index;
    std::vector<std::vector<double>> values;
    std::vector<std::pair<double, int64_t>> speed; // Σ speed-up, examples that carry one
    for (const EvalRecord& r : records) {
        const std::string key = r.task + '\x1f' + r.method + '\x1f' + r.params;
        auto [it, fresh] = index.emplace(key, out.size());
        if (fresh) {
            EvalPointStats s;
            s.task = r.task;
            s.metric = r.metric;
            s.method = r.method;
            s.params = r.params;
            s.numbers = r.numbers;
            s.compression = 0;
            out.push_back(s);
            values.emplace_back();
            speed.emplace_back(0.0, 0);
        }
        EvalPointStats& s = out[it->second];
        values[it->second].push_back(r.value);
        if (std::isfinite(r.speedup)) {
            speed[it->second].first += r.speedup;
            ++speed[it->second].second;
        }
        s.compression += r.compression;
    }
    for (size_t i = 0; i < out.size(); ++i) {
        const std::vector<double>& v = values[i];
        const double n = static_cast<double>(v.size());
        double mean = 0;
        for (double x : v)
            mean += x / n;
        double var = 0;
        for (double x : v)
            var += (x - mean) * (x - mean);
        out[i].n = static_cast<int64_t>(v.size());
        out[i].mean = mean;
        out[i].stderr_ = v.size() > 1 ? std::sqrt(var / (n - 1) / n) : 0.0;
        out[i].compression /= n;
        if (speed[i].second > 0)
            out[i].speedup = speed[i].first / static_cast<double>(speed[i].second);
    }
    return out;
}

Series paretoSeries(const std::vector<std::pair<double, double>>& xy) {
    Series front;
    front.name = "Pareto front";
    front.style = Series::Style::Dashed;
    for (const auto& [x, y] : paretoFront(xy)) {
        front.x.push_back(x);
        front.y.push_back(y);
    }
    return front;
}

std::vector<std::pair<double, double>> paretoFront(std::vector<std::pair<double, double>> xy) {
    // From the fastest down, a point joins when it scores above every faster one.
    std::sort(xy.begin(), xy.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second > b.second);
    });
    std::vector<std::pair<double, double>> front;
    double best = -std::numeric_limits<double>::infinity();
    for (const auto& p : xy)
        if (p.second > best) {
            front.push_back(p);
            best = p.second;
        }
    std::reverse(front.begin(), front.end());
    return front;
}

std::vector<FigureData> evalFigures(const std::vector<EvalRecord>& records) {
    const std::vector<EvalPointStats> stats = summariseEval(records);
    std::vector<FigureData> figs;
    for (const std::string& task : tasksOf(stats)) {
        FigureData f;
        f.id = "eval_" + task;
        std::string metric;
        std::vector<double> dense;
        double minC = 1;
        int64_t fewest = std::numeric_limits<int64_t>::max(), most = 0;
        for (const EvalPointStats& s : stats)
            if (s.task == task) {
                metric = s.metric;
                minC = std::min(minC, s.compression);
                fewest = std::min(fewest, s.n);
                most = std::max(most, s.n);
                if (s.method == "dense")
                    dense = {s.mean, s.stderr_};
            }
        // What the points and bands are, which the plot cannot say (is a dip noise?).
        f.caption = "Each point: the mean over its " +
                    (fewest == most ? std::to_string(most)
                                    : std::to_string(fewest) + " to " + std::to_string(most)) +
                    (most == 1 ? " example" : " examples") +
                    "; the shaded band: ± one standard error of that mean" +
                    (dense.empty() ? "." : "; dashed: dense.");
        f.title = task + ": " + metricLabel(metric) + " against attention transfers";
        f.xLabel = "compression ratio (attention transfers ÷ dense)";
        f.yLabel = metricLabel(metric);
        f.logX = true;
        f.xMarkers = {0.5, 0.25, 0.125};
        f.legendBottom = metric != "bpc";
        for (const std::string& method : methodsOf(stats, task)) {
            if (method == "dense")
                continue;
            std::vector<const EvalPointStats*> pts;
            for (const EvalPointStats& s : stats)
                if (s.task == task && s.method == method)
                    pts.push_back(&s);
            std::sort(pts.begin(), pts.end(),
                      [](auto* a, auto* b) { return a->compression < b->compression; });
            Series line;
            line.name = label(method);
            for (const EvalPointStats* p : pts) {
                line.x.push_back(p->compression);
                line.y.push_back(p->mean);
                line.yErr.push_back(p->stderr_);
            }
            f.series.push_back(std::move(line));
        }
        if (!dense.empty()) { // the dense value across the plot, as the paper's reference
            Series d;
            d.name = "Dense";
            d.style = Series::Style::Dashed;
            d.x = {std::min(minC, 0.1), 1.0};
            d.y = {dense[0], dense[0]};
            f.series.insert(f.series.begin(), d);
        }
        figs.push_back(f);

        // Score against the measured decode speed-up (eval --measure-speed), the front marked.
        std::vector<std::pair<double, double>> measured;
        FigureData sp;
        sp.id = "eval_" + task + "_speedup";
        sp.title = task + ": " + metricLabel(metric) + " against the measured speed-up";
        sp.xLabel = "measured decode speed-up over dense (this machine)";
        sp.yLabel = f.yLabel;
        sp.logX = true;
        sp.legendBottom = f.legendBottom;
        for (const std::string& method : methodsOf(stats, task)) {
            Series pts;
            pts.name = label(method);
            pts.style = Series::Style::Points;
            for (const EvalPointStats& s : stats)
                if (s.task == task && s.method == method && std::isfinite(s.speedup)) {
                    pts.x.push_back(s.speedup);
                    pts.y.push_back(s.mean);
                    measured.emplace_back(s.speedup, s.mean);
                }
            if (!pts.x.empty())
                sp.series.push_back(std::move(pts));
        }
        if (!measured.empty()) {
            sp.series.push_back(paretoSeries(measured));
            figs.push_back(std::move(sp));
        }

        // SparQ's r sweep (Fig. 7c): one line per r over its other parameters.
        std::map<double, std::vector<const EvalPointStats*>> byR;
        for (const EvalPointStats& s : stats)
            if (s.task == task && s.method == "sparq" && s.numbers.count("r"))
                byR[s.numbers.at("r")].push_back(&s);
        if (!byR.empty()) {
            FigureData r;
            r.id = "eval_" + task + "_sparq_r";
            r.title = task + ": SparQ by rank r";
            r.xLabel = f.xLabel;
            r.yLabel = f.yLabel;
            r.logX = true;
            r.xMarkers = f.xMarkers;
            r.legendBottom = f.legendBottom;
            r.caption = f.caption; // (its points, bands and dense line are the trade-off's)
            for (auto& [rank, pts] : byR) {
                std::sort(pts.begin(), pts.end(),
                          [](auto* a, auto* b) { return a->compression < b->compression; });
                Series line;
                std::ostringstream name;
                name << "r = " << rank;
                line.name = name.str();
                line.style = pts.size() > 1 ? Series::Style::Line : Series::Style::Points;
                for (const EvalPointStats* p : pts) {
                    line.x.push_back(p->compression);
                    line.y.push_back(p->mean);
                    line.yErr.push_back(p->stderr_);
                }
                r.series.push_back(std::move(line));
            }
            if (!dense.empty())
                r.series.insert(r.series.begin(), f.series.front());
            figs.push_back(std::move(r));
        }

        // Needle: accuracy per depth (rows) and haystack length (columns), Fig. A4, for dense
        // and each method's setting nearest 1/4 and 1/8.
        if (const EvalTaskSpec* spec = findEvalTask(task); spec && spec->depthMap) {
            std::set<double> depths;
            std::set<int64_t> lengths;
            for (const EvalRecord& rec : records)
                if (rec.task == task) {
                    depths.insert(rec.depth);
                    lengths.insert(rec.haystackTokens);
                }
            std::vector<const EvalPointStats*> chosen;
            for (const std::string& method : methodsOf(stats, task)) {
                if (method == "dense") {
                    for (const EvalPointStats& s : stats)
                        if (s.task == task && s.method == method)
                            chosen.push_back(&s);
                    continue;
                }
                for (double t : {0.25, 0.125})
                    if (const EvalPointStats* p = nearest(stats, task, method, t))
                        if (std::find(chosen.begin(), chosen.end(), p) == chosen.end())
                            chosen.push_back(p);
            }
            for (const EvalPointStats* p : chosen) {
                FigureData h;
                h.id = "eval_needle_" + p->method;
                for (const char* key : {"r", "k", "p"})
                    if (const auto it = p->numbers.find(key); it != p->numbers.end())
                        h.id += "_" + std::string(key) + std::to_string(std::llround(it->second));
                h.title = "needle: " + label(p->method) +
                          (p->method == "dense" ? std::string()
                                                : " " + shortParams(p->numbers) + " (×" +
                                                      fixed(p->compression, 3) + ")");
                h.xLabel = "haystack length (tokens)";
                h.yLabel = "needle depth";
                h.gridLabel = "found";
                for (int64_t L : lengths)
                    h.xCategories.push_back(std::to_string(L));
                for (double d : depths)
                    h.yCategories.push_back(fixed(d, 2));
                for (double d : depths) {
                    std::vector<double> row;
                    for (int64_t L : lengths) {
                        double sum = 0, n = 0;
                        for (const EvalRecord& rec : records)
                            if (rec.task == task && rec.method == p->method &&
                                rec.params == p->params && rec.depth == d &&
                                rec.haystackTokens == L) {
                                sum += rec.value;
                                ++n;
                            }
                        row.push_back(n > 0 ? sum / n : 0.0);
                    }
                    h.grid.push_back(row);
                }
                figs.push_back(std::move(h));
            }
        }
    }
    return figs;
}

std::string evalTableCsv(const std::vector<EvalRecord>& records) {
    const std::vector<EvalPointStats> stats = summariseEval(records);
    std::ostringstream os;
    os.precision(10);
    os << "task,metric,method,target,compression,value,stderr,n,params\n";
    for (const std::string& task : tasksOf(stats))
        for (const std::string& method : methodsOf(stats, task)) {
            auto row = [&](const std::string& target, const EvalPointStats& s) {
                std::string params = s.params;
                std::replace(params.begin(), params.end(), '"', '\'');
                os << task << ',' << s.metric << ',' << method << ',' << target << ','
                   << s.compression << ',' << s.mean << ',' << s.stderr_ << ',' << s.n << ",\""
                   << params << "\"\n";
            };
            if (method == "dense") {
                for (const EvalPointStats& s : stats)
                    if (s.task == task && s.method == method)
                        row("1", s);
                continue;
            }
            for (double t : kTargets)
                if (const EvalPointStats* p = nearest(stats, task, method, t))
                    row(t == 0.5 ? "1/2" : t == 0.25 ? "1/4" : "1/8", *p);
        }
    return os.str();
}

std::string evalTableMarkdown(const std::vector<EvalRecord>& records) {
    const std::vector<EvalPointStats> stats = summariseEval(records);
    const std::vector<std::string> tasks = tasksOf(stats);
    std::vector<std::string> methods;
    for (const std::string& t : tasks)
        for (const std::string& m : methodsOf(stats, t))
            if (std::find(methods.begin(), methods.end(), m) == methods.end())
                methods.push_back(m);
    std::ostringstream os;
    os << "| Method |";
    for (const std::string& t : tasks)
        os << " " << t << " 1/2 | 1/4 | 1/8 |";
    os << "\n|---|";
    for (size_t i = 0; i < tasks.size(); ++i)
        os << "---|---|---|";
    os << "\n";
    for (const std::string& m : methods) {
        os << "| " << label(m) << " |";
        for (const std::string& t : tasks) {
            std::string metric;
            for (const EvalPointStats& s : stats)
                if (s.task == t)
                    metric = s.metric;
            const int dg = digitsFor(metric);
            for (double target : kTargets) {
                const EvalPointStats* p = nullptr;
                if (m == "dense") {
                    for (const EvalPointStats& s : stats)
                        if (s.task == t && s.method == m)
                            p = &s;
                } else {
                    p = nearest(stats, t, m, target);
                }
                if (p)
                    os << " " << fixed(p->mean, dg) << " ± " << fixed(p->stderr_, dg) << " |";
                else
                    os << " — |";
            }
        }
        os << "\n";
    }
    os << "\nEach cell: the mean over examples ± its standard error, for the method's setting "
          "whose mean compression ratio is nearest 1/2, 1/4 or 1/8 (within a factor √2; — "
          "where none is); dense is the same in every column.\n";
    return os.str();
}

} // namespace sparqlab::analysis
