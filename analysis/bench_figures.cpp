#include "bench_figures.h"

#include "base/json_number.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace sparqlab::analysis {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
    throw BenchFileError(where + ": " + what);
}

BenchRecord fromJson(const json& o, const std::string& where) {
    if (!o.is_object())
        fail(where, "expected a JSON object");
    if (o.contains("task") && o.contains("metric")) // (it said 'device' must be a string)
        fail(where, "a line of eval results (task, metric), not a bench row: give it to "
                    "figures --eval");
    auto num = [&](const char* key) -> double {
        if (!o.contains(key))
            fail(where, std::string("missing key '") + key + "'");
        const json& v = o[key];
        if (!v.is_number())
            fail(where, std::string("'") + key + "' must be a number");
        const double x = v.get<double>();
        if (!std::isfinite(x))
            fail(where, std::string("'") + key + "' must be finite");
        return x;
    };
    auto whole = [&](const char* key) -> int64_t {
        if (!o.contains(key))
            fail(where, std::string("missing key '") + key + "'");
        const auto x = base::jsonWholeNumber(o[key], 1, int64_t{1000000000000});
        if (!x)
            fail(where, std::string("'") + key + "' must be a positive whole number");
        return *x;
    };
    auto str = [&](const char* key) -> std::string {
        if (!o.contains(key) || !o[key].is_string())
            fail(where, std::string("'") + key + "' must be a string");
        return o[key].get<std::string>();
    };
    BenchRecord r;
    r.device = str("device");
    r.dtype = str("dtype");
    r.batch = whole("batch");
    if (o.contains("tokens_per_s")) { // a bench-generate row
        r.generation = true;
        r.seq = whole("seq");
        r.method = str("method");
        r.model = o.contains("model") ? str("model") : std::string();
        auto countOrZero = [&](const char* key) -> int64_t {
            if (!o.contains(key))
                return 0;
            const auto x = base::jsonWholeNumber(o[key], 0, int64_t{1000000000000});
            if (!x)
                fail(where, std::string("'") + key + "' must be a whole number");
            return *x;
        };
        r.r = countOrZero("r");
        r.k = countOrZero("k");
        r.tokensPerSecond = num("tokens_per_s");
        r.limitTokensPerSecond = num("limit_tokens_per_s");
        if (r.tokensPerSecond <= 0 || r.limitTokensPerSecond < 0)
            fail(where, "tokens per second must be positive and the limit not negative");
        return r;
    }
    r.heads = whole("heads");
    r.kvHeads = whole("kv_heads");
    r.seq = whole("seq");
    r.headDim = whole("head_dim");
    r.perMethod = o.contains("method");
    // A method without r (quest) or k (dense) writes null there.
    auto wholeOrNull = [&](const char* key) -> int64_t {
        return r.perMethod && o.contains(key) && o[key].is_null() ? 0 : whole(key);
    };
    r.r = wholeOrNull("r");
    r.k = wholeOrNull("k");
    r.denseUs = num("dense_us");
    r.speedup = num("speedup");
    r.theoreticalSpeedup = num("theoretical_speedup");
    r.denseGbps = num("dense_gbps");
    r.machineGbps = num("machine_gbps");
    if (r.perMethod) {
        r.method = str("method");
        r.us = num("us");
    } else {
        r.sparqUs = num("sparq_us");
        r.sparqGbps = num("sparq_gbps");
        r.us = r.sparqUs;
    }
    if (r.denseUs <= 0 || r.us <= 0 || r.theoreticalSpeedup <= 0)
        fail(where, "times and the theoretical speed-up must be positive");
    return r;
}

} // namespace

std::vector<BenchRecord> parseBenchJson(const std::string& text, const std::string& path) {
    std::vector<BenchRecord> out;
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos)
        fail(path, "no benchmark records (empty file)");
    if (text[first] == '[') {
        json j;
        try {
            j = json::parse(text);
        } catch (const json::exception& e) {
            fail(path, std::string("malformed JSON: ") + e.what());
        }
        for (size_t i = 0; i < j.size(); ++i)
            out.push_back(fromJson(j[i], path + ": record " + std::to_string(i + 1)));
    } else {
        std::istringstream in(text);
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
            if (line.find_first_not_of(" \t\r") == std::string::npos)
                continue;
            const std::string where = path + " line " + std::to_string(n);
            json j;
            try {
                j = json::parse(line);
            } catch (const json::exception& e) {
                fail(where, std::string("malformed JSON: ") + e.what());
            }
            out.push_back(fromJson(j, where));
        }
    }
    if (out.empty())
        fail(path, "no benchmark records");
    if (std::any_of(out.begin(), out.end(),
                    [&](const BenchRecord& b) { return b.generation != out.front().generation; }))
        fail(path, "mixes bench rows and bench-generate rows: give them in separate files");
    return out;
}

std::vector<BenchRecord> readBenchJson(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f)
        fail(path, "cannot read the file");
    std::ostringstream s;
    s << f.rdbuf();
    return parseBenchJson(s.str(), path);
}

namespace {

/// One record into Fig. F1's pair of series: the speed-up, and its fraction of the theory.
void addSpeedup(std::pair<Series, Series>& pair, const std::string& name, const BenchRecord& b) {
    auto& [measured, fraction] = pair;
    measured.name = fraction.name = name;
    measured.style = fraction.style = Series::Style::Points;
    const double size = static_cast<double>(b.batch * b.seq);
    measured.x.push_back(size);
    measured.y.push_back(b.speedup);
    fraction.x.push_back(size);
    fraction.y.push_back(b.speedup / b.theoreticalSpeedup);
}

/// `bench-generate`: Fig. 10, one figure per model, device, dtype and batch.
std::vector<FigureData> generationFigures(std::vector<BenchRecord> records) {
    std::stable_sort(records.begin(), records.end(),
                     [](const BenchRecord& a, const BenchRecord& b) { return a.seq < b.seq; });
    std::vector<FigureData> figs;
    std::set<std::tuple<std::string, std::string, int64_t>> panels; // model, device dtype, batch
    for (const BenchRecord& b : records)
        panels.insert({b.model, b.device + " " + b.dtype, b.batch});
    for (const auto& [model, where, batch] : panels) {
        FigureData f;
        std::string stem = model.empty() ? std::string("model") : model;
        for (char& ch : stem)
            if (!std::isalnum(static_cast<unsigned char>(ch)))
                ch = '_';
        std::string place = where;
        std::replace(place.begin(), place.end(), ' ', '_');
        f.id = "fig10_tokens_per_s_" + stem + "_batch" + std::to_string(batch) + "_" + place;
        f.title = "Fig. 10: generation speed, " + (model.empty() ? std::string() : model + ", ") +
                  "batch " + std::to_string(batch) + ", " + where;
        f.xLabel = "sequence length S";
        f.yLabel = "tokens per second per sequence";
        f.logX = true;
        f.caption = "Greedy generation after a prefill of S tokens: each method's tokens per "
                    "second, and (dashed) what the device's copy bandwidth allows dense attention "
                    "for the bytes a step reads. Dense slows as its cache grows; SparQ reads a "
                    "fixed share of it, so its gain grows with S.";
        FigureData fraction = f;
        fraction.id += "_fraction";
        fraction.title = "Fig. 10: share of the bandwidth limit, " +
                         (model.empty() ? std::string() : model + ", ") + "batch " +
                         std::to_string(batch) + ", " + where;
        fraction.yLabel = "tokens per second / the method's limit";
        fraction.caption = "Each method's tokens per second over the limit the copy bandwidth sets "
                           "for the bytes it reads per step: how close the implementation comes "
                           "to what the memory allows.";
        auto inPanel = [&, &model = model, &where = where, batch = batch](const BenchRecord& b) {
            return b.model == model && b.device + " " + b.dtype == where && b.batch == batch;
        };
        // The limit drawn: dense's, else the first method's.
        std::string limitMethod;
        for (const BenchRecord& b : records)
            if (inPanel(b) && b.limitTokensPerSecond > 0 &&
                (limitMethod.empty() || b.method == "dense"))
                limitMethod = b.method;
        std::map<std::string, Series> measured, share;
        Series limit;
        limit.name = limitMethod + " limit";
        limit.style = Series::Style::Dashed;
        for (const BenchRecord& b : records) {
            if (!inPanel(b))
                continue;
            Series& m = measured[b.method];
            m.name = b.method;
            m.x.push_back(static_cast<double>(b.seq));
            m.y.push_back(b.tokensPerSecond);
            if (b.limitTokensPerSecond <= 0)
                continue;
            Series& sh = share[b.method];
            sh.name = b.method;
            sh.x.push_back(static_cast<double>(b.seq));
            sh.y.push_back(b.tokensPerSecond / b.limitTokensPerSecond);
            if (b.method == limitMethod) {
                limit.x.push_back(static_cast<double>(b.seq));
                limit.y.push_back(b.limitTokensPerSecond);
            }
        }
        for (auto& [method, m] : measured)
            f.series.push_back(m);
        if (!limit.x.empty())
            f.series.push_back(limit);
        for (auto& [method, sh] : share)
            fraction.series.push_back(sh);
        figs.push_back(f);
        if (!fraction.series.empty())
            figs.push_back(fraction);
    }
    return figs;
}

/// `bench --methods`: Fig. 8 with one line per method (dense dashed) per batch size and
/// storage, and Fig. F1 (speed-up and its fraction of each method's own theoretical one
/// against batch × S) with one series per method, at the k measured most.
std::vector<FigureData> methodFigures(const std::vector<BenchRecord>& records) {
    std::map<int64_t, int> kCounts;
    for (const BenchRecord& b : records)
        if (b.k > 0)
            ++kCounts[b.k];
    int64_t k = kCounts.empty()
                    ? 0
                    : std::max_element(kCounts.begin(), kCounts.end(), [](auto& a, auto& b) {
                          return a.second < b.second;
                      })->first;
    if (kCounts.count(128))
        k = 128;
    // A method's label: its name and r where it has one (the r measured most per method).
    std::map<std::string, std::map<int64_t, int>> rCounts;
    for (const BenchRecord& b : records)
        ++rCounts[b.method][b.r];
    std::map<std::string, int64_t> rOf;
    for (const auto& [m, counts] : rCounts) {
        int64_t best = counts.begin()->first;
        for (const auto& [r, n] : counts)
            if (n > counts.at(best) || (r == 32 && n == counts.at(best)))
                best = r;
        rOf[m] = best;
    }
    auto keep = [&](const BenchRecord& b) {
        return (b.k == 0 || b.k == k) && b.r == rOf[b.method];
    };
    auto label = [&](const BenchRecord& b) {
        return b.method + (b.r > 0 ? " r=" + std::to_string(b.r) : std::string());
    };
    std::vector<FigureData> figs;
    std::set<std::pair<int64_t, std::string>> panels; // batch, device + dtype
    for (const BenchRecord& b : records)
        panels.insert({b.batch, b.device + " " + b.dtype});
    for (const auto& [batch, where] : panels) {
        FigureData f;
        f.id = "fig8_methods_time_vs_seq_batch" + std::to_string(batch) + "_" +
               where.substr(where.find(' ') + 1);
        f.title = "Decode attention time per method, batch " + std::to_string(batch) + ", " +
                  where + ", k = " + std::to_string(k);
        f.xLabel = "sequence length S";
        f.yLabel = "time per step (µs)";
        f.logX = f.logY = true;
        f.legendBottom = true;
        std::map<std::string, Series> lines;
        Series dense;
        dense.name = "dense";
        dense.style = Series::Style::Dashed;
        std::set<int64_t> denseSeen;
        for (const BenchRecord& b : records) {
            if (b.batch != batch || b.device + " " + b.dtype != where || !keep(b))
                continue;
            if (b.method != "dense") {
                Series& s = lines[label(b)];
                s.name = label(b);
                s.x.push_back(static_cast<double>(b.seq));
                s.y.push_back(b.us);
            }
            if (denseSeen.insert(b.seq).second) {
                dense.x.push_back(static_cast<double>(b.seq));
                dense.y.push_back(b.denseUs);
            }
        }
        f.series.push_back(dense);
        for (auto& [name, s] : lines)
            f.series.push_back(s);
        if (!lines.empty())
            figs.push_back(f);
    }
    FigureData f1;
    f1.id = "figF1_methods_speedup_vs_size";
    f1.title = "Speed-up over dense against input size, per method (k = " + std::to_string(k) + ")";
    f1.xLabel = "batch × S";
    f1.yLabel = "speed-up";
    f1.logX = true;
    f1.legendBottom = true;
    FigureData frac = f1;
    frac.id = "figF1_methods_fraction_of_theory";
    frac.title = "Measured / each method's theoretical speed-up (k = " + std::to_string(k) + ")";
    frac.yLabel = "fraction of the theoretical speed-up";
    std::map<std::string, std::pair<Series, Series>> byMethod;
    for (const BenchRecord& b : records) {
        if (b.method != "dense" && keep(b))
            addSpeedup(byMethod[label(b)], label(b), b);
    }
    for (auto& entry : byMethod) {
        f1.series.push_back(entry.second.first);
        frac.series.push_back(entry.second.second);
    }
    if (!byMethod.empty()) {
        figs.push_back(frac);
        figs.push_back(f1);
    }
    return figs;
}

} // namespace

std::vector<FigureData> benchFigures(const std::vector<BenchRecord>& records) {
    if (!records.empty() && records.front().generation)
        return generationFigures(records);
    if (std::any_of(records.begin(), records.end(),
                    [](const BenchRecord& b) { return b.perMethod; }))
        return methodFigures(records);
    std::vector<FigureData> figs;
    // The (r, k) measured most often: Fig. 8 shows one setting.
    std::map<std::pair<int64_t, int64_t>, int> counts;
    for (const BenchRecord& b : records)
        ++counts[{b.r, b.k}];
    auto rk = std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) {
                  return a.second < b.second;
              })->first;
    for (const auto& entry : counts) // the paper's setting, when it was measured
        if (entry.first.first == 32 && entry.first.second == 128)
            rk = entry.first;
    std::set<int64_t> batches;
    for (const BenchRecord& b : records)
        batches.insert(b.batch);
    for (const int64_t batch : batches) {
        FigureData f;
        f.id = "fig8_time_vs_seq_batch" + std::to_string(batch);
        f.title = "Decode attention time, batch " + std::to_string(batch) +
                  ", r = " + std::to_string(rk.first) + ", k = " + std::to_string(rk.second);
        f.xLabel = "sequence length S";
        f.yLabel = "time per step (µs)";
        f.logX = f.logY = true;
        f.legendBottom = true; // the curves rise to the top right, over a legend there
        std::map<std::string, std::pair<Series, Series>> byDtype; // dense, sparq per dtype
        for (const BenchRecord& b : records) {
            if (b.batch != batch || b.r != rk.first || b.k != rk.second)
                continue;
            auto& [dense, sparq] = byDtype[b.device + " " + b.dtype];
            dense.name = "dense (" + b.device + " " + b.dtype + ")";
            sparq.name = "SparQ (" + b.device + " " + b.dtype + ")";
            dense.x.push_back(static_cast<double>(b.seq));
            dense.y.push_back(b.denseUs);
            sparq.x.push_back(static_cast<double>(b.seq));
            sparq.y.push_back(b.sparqUs);
        }
        for (auto& [key, pair] : byDtype) {
            pair.second.style = Series::Style::Line;
            pair.first.style = Series::Style::Dashed;
            f.series.push_back(pair.first);
            f.series.push_back(pair.second);
        }
        if (!f.series.empty())
            figs.push_back(f);
    }
    // Fig. F1: speed-up against input size (batch × S), one series per r at the chosen k;
    // beside it the fraction of the theoretical speed-up reached (1 = the transfer model).
    FigureData f1;
    f1.id = "figF1_speedup_vs_size";
    f1.title =
        "SparQ speed-up over dense against input size (k = " + std::to_string(rk.second) + ")";
    f1.xLabel = "batch × S";
    f1.yLabel = "speed-up";
    f1.logX = true;
    f1.legendBottom = true; // both rise with the size
    FigureData frac = f1;
    frac.id = "figF1_fraction_of_theory";
    frac.title = "Measured / theoretical speed-up (k = " + std::to_string(rk.second) + ")";
    frac.yLabel = "fraction of the theoretical speed-up";
    std::map<int64_t, std::pair<Series, Series>> byR;
    for (const BenchRecord& b : records) {
        if (b.k == rk.second)
            addSpeedup(byR[b.r], "r = " + std::to_string(b.r), b);
    }
    for (auto& entry : byR) {
        f1.series.push_back(entry.second.first);
        frac.series.push_back(entry.second.second);
    }
    figs.push_back(frac);
    figs.push_back(f1);
    return figs;
}

} // namespace sparqlab::analysis
