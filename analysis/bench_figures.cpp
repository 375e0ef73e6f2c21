#include "bench_figures.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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
        const double x = num(key);
        if (x < 1 || x > 1e12 || x != std::floor(x))
            fail(where, std::string("'") + key + "' must be a positive whole number");
        return static_cast<int64_t>(x);
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
    r.heads = whole("heads");
    r.kvHeads = whole("kv_heads");
    r.seq = whole("seq");
    r.headDim = whole("head_dim");
    r.r = whole("r");
    r.k = whole("k");
    r.denseUs = num("dense_us");
    r.sparqUs = num("sparq_us");
    r.speedup = num("speedup");
    r.theoreticalSpeedup = num("theoretical_speedup");
    r.denseGbps = num("dense_gbps");
    r.sparqGbps = num("sparq_gbps");
    r.machineGbps = num("machine_gbps");
    if (r.denseUs <= 0 || r.sparqUs <= 0)
        fail(where, "times must be positive");
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
            const std::string where = path + ":" + std::to_string(n);
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

std::vector<FigureData> benchFigures(const std::vector<BenchRecord>& records) {
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
        if (b.k != rk.second)
            continue;
        auto& [measured, fraction] = byR[b.r];
        measured.name = fraction.name = "r = " + std::to_string(b.r);
        measured.style = fraction.style = Series::Style::Points;
        const double size = static_cast<double>(b.batch * b.seq);
        measured.x.push_back(size);
        measured.y.push_back(b.speedup);
        fraction.x.push_back(size);
        fraction.y.push_back(b.speedup / b.theoreticalSpeedup);
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
