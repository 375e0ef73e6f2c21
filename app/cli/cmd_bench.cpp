// sparqlab-cli bench: dense against SparQ decode attention (CONTRACTS.md §5). Builds with
// libtorch alone, so it runs on machines without Qt or HDF5 (the GPU machine).

#include "commands.h"

#include "base/atomic_file.h"

#include "attention/bench.h"
#include "attention/runtime_info.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace sparqlab::cli {

namespace att = sparqlab::attention;

namespace {

std::vector<int64_t> intList(const Args& a, const std::string& name, std::vector<int64_t> dflt) {
    return a.integerList(name, 1).value_or(std::move(dflt));
}

std::vector<at::ScalarType> dtypeList(const Args& a) {
    std::vector<at::ScalarType> out;
    std::stringstream ss(a.get("dtype").value_or("f32"));
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item == "f32")
            out.push_back(at::kFloat);
        else if (item == "f16")
            out.push_back(at::kHalf);
        else if (item == "bf16")
            out.push_back(at::kBFloat16);
        else
            throw UsageError("--dtype takes f32, f16 or bf16, got '" + item + "'");
    }
    return out;
}

/// A dtype as bench's --dtype names it.
const char* dtypeFlag(at::ScalarType t) {
    return t == at::kFloat ? "f32" : t == at::kHalf ? "f16" : "bf16";
}

/// --r and --k, the sweep's (a calibration file, which bench has none of): not a method's
/// option here; the other parameters come from the table.
bool notAMethodOption(const att::ParamInfo& p) {
    return p.id == att::Param::R || p.id == att::Param::K || p.kind == att::ParamKind::File;
}

std::string num(double x) {
    if (!std::isfinite(x))
        return "null";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}

/// `bench --methods`: dense and each method per (r, k), one JSON object (or table row) each,
/// with the fields of CONTRACTS.md §5 beside `method`, `us`, `stderr_us`, `gbps`,
/// `theoretical_speedup` and `speedup`.
void benchMethods(const Args& a, const att::DecodeBenchConfig& c,
                  const std::vector<att::Method>& methodList,
                  const std::vector<std::pair<int64_t, int64_t>>& rk, const att::Bandwidth& bw,
                  bool json, std::ostringstream& lines) {
    std::vector<att::AttentionConfig> cfgs;
    for (const att::Method m : methodList)
        for (size_t i = 0; i < rk.size(); ++i) {
            const auto [r, k] = rk[i];
            // A method without r is timed once per k (the first r that goes with it).
            bool seen = false;
            for (size_t j = 0; j < i && !att::takes(m, att::Param::R); ++j)
                seen = seen || rk[j].second == k;
            if (seen || (m == att::Method::Dense && i > 0))
                continue;
            att::AttentionConfig cfg = att::defaultConfig(m);
            cfg.r = r;
            cfg.k = k;
            // Every other parameter of the table (--page-size, --budget, …), where a method takes
            // one (--r and --k are the sweep's).
            for (const att::ParamInfo& p : att::parameters())
                if (!notAMethodOption(p) && att::takes(m, p.id) && a.has(p.option)) {
                    try {
                        att::setParamValue(cfg, p.id, a.get(p.option).value_or(""));
                    } catch (const att::AttentionError& e) {
                        throw UsageError(std::string("--") + p.option + ": " + e.what());
                    }
                }
            cfgs.push_back(cfg);
        }
    const auto results = att::benchDecodeMethods(c, cfgs);
    double sparqUs = NAN, sparqGbps = NAN;
    for (const att::MethodBenchResult& r : results)
        if (r.config.method == att::Method::Sparq) {
            sparqUs = r.us;
            sparqGbps = r.gbps;
            break;
        }
    for (const att::MethodBenchResult& r : results) {
        const att::AttentionConfig& m = r.config;
        const bool takesR = att::takes(m.method, att::Param::R);
        std::ostringstream o;
        o << "{\"device\":\"" << c.device << "\",\"dtype\":\"" << dtypeFlag(c.dtype)
          << "\",\"batch\":" << c.batch << ",\"heads\":" << c.heads << ",\"kv_heads\":" << c.kvHeads
          << ",\"seq\":" << c.seq << ",\"head_dim\":" << c.headDim << ",\"method\":\""
          << att::methodName(m.method) << "\",\"r\":" << (takesR ? std::to_string(m.r) : "null")
          << ",\"k\":" << (m.method == att::Method::Dense ? "null" : std::to_string(m.k));
        for (const att::ParamInfo& p : att::parameters()) // the method's other parameters
            if (!notAMethodOption(p) && att::takes(m.method, p.id))
                o << ",\"" << p.attribute << "\":"
                  << (p.kind == att::ParamKind::Choice ? "\"" + att::paramValue(m, p.id) + "\""
                                                       : att::paramValue(m, p.id));
        o << ",\"count\":" << num(r.count) << ",\"us\":" << num(r.us)
          << ",\"stderr_us\":" << num(r.stderrUs) << ",\"gbps\":" << num(r.gbps)
          << ",\"theoretical_speedup\":" << num(r.theoreticalSpeedup)
          << ",\"speedup\":" << num(r.speedup)
          << ",\"fraction_of_theory\":" << num(r.speedup / r.theoreticalSpeedup)
          << ",\"dense_us\":" << num(r.denseUs) << ",\"dense_stderr_us\":" << num(r.denseStderrUs)
          << ",\"dense_gbps\":" << num(r.denseGbps) << ",\"sparq_us\":" << num(sparqUs)
          << ",\"sparq_gbps\":" << num(sparqGbps) << ",\"dense_impl\":\"sparqlab\""
          << ",\"machine_gbps\":" << num(bw.copyGbps)
          << ",\"machine_read_gbps\":" << num(bw.readGbps) << ",\"repeats\":" << r.repeats
          << ",\"threads\":" << at::get_num_threads();
        if (c.device == "cuda") // graph replays, the CUDA kernels or libtorch, the SDPA anchor
            o << ",\"kernels\":" << (r.kernels ? "true" : "false")
              << ",\"graph_us\":" << (r.graphUs > 0 ? num(r.graphUs) : "null")
              << ",\"dense_graph_us\":" << (r.denseGraphUs > 0 ? num(r.denseGraphUs) : "null")
              << ",\"graph_speedup\":"
              << (r.graphUs > 0 && r.denseGraphUs > 0 ? num(r.denseGraphUs / r.graphUs) : "null")
              << ",\"sdpa_us\":" << (r.sdpaUs > 0 ? num(r.sdpaUs) : "null");
        o << "}";
        lines << o.str() << "\n";
        if (json) {
            std::cout << o.str() << std::endl;
        } else if (c.device == "cuda") {
            std::printf(
                "%-4s %5lld %6lld %-16s %4s %4s %10.1f %10.1f %8.2f %8.2f %6.2f %9.1f %9.1f "
                "%s\n",
                dtypeFlag(c.dtype), static_cast<long long>(c.batch), static_cast<long long>(c.seq),
                att::methodName(m.method).c_str(), takesR ? std::to_string(m.r).c_str() : "-",
                m.method == att::Method::Dense ? "-" : std::to_string(m.k).c_str(), r.us, r.graphUs,
                r.speedup, r.theoreticalSpeedup,
                r.graphUs > 0 && r.denseGraphUs > 0
                    ? (r.denseGraphUs / r.graphUs) / r.theoreticalSpeedup
                    : r.speedup / r.theoreticalSpeedup,
                r.gbps, r.sdpaUs, r.kernels ? "kernels" : "libtorch");
            std::fflush(stdout);
        } else {
            std::printf("%-4s %5lld %6lld %-16s %4s %4s %10.1f %9.1f %8.2f %8.2f %6.2f %9.1f\n",
                        dtypeFlag(c.dtype), static_cast<long long>(c.batch),
                        static_cast<long long>(c.seq), att::methodName(m.method).c_str(),
                        takesR ? std::to_string(m.r).c_str() : "-",
                        m.method == att::Method::Dense ? "-" : std::to_string(m.k).c_str(), r.us,
                        r.stderrUs, r.speedup, r.theoreticalSpeedup,
                        r.speedup / r.theoreticalSpeedup, r.gbps);
            std::fflush(stdout);
        }
    }
}

} // namespace

int runBench(const std::vector<std::string>& argv) {
    std::set<std::string> valued{"batch", "heads",         "kv-heads", "seq",    "head-dim",
                                 "dtype", "device",        "repeats",  "warmup", "out",
                                 "seed",  "bandwidth-mib", "methods"};
    std::set<std::string> flags{"json", "sweep", "help"};
    for (const att::ParamInfo& p : att::parameters()) // every parameter of the table
        if (p.kind != att::ParamKind::File)
            (p.kind == att::ParamKind::Flag ? flags : valued).insert(p.option);
    const Args a(argv, valued, flags);
    if (!a.positional().empty())
        throw UsageError("bench takes no positional arguments");
    const bool sweep = a.has("sweep");
    // The paper's Appendix F grid with --sweep; otherwise one configuration per list entry.
    const auto seqs =
        intList(a, "seq",
                sweep ? std::vector<int64_t>{1024, 2048, 4096, 8192, 16384, 32768, 65536}
                      : std::vector<int64_t>{4096});
    const auto batches =
        intList(a, "batch", sweep ? std::vector<int64_t>{1, 4, 16} : std::vector<int64_t>{1});
    const auto rs =
        intList(a, "r", sweep ? std::vector<int64_t>{16, 32, 64} : std::vector<int64_t>{32});
    const auto ks =
        intList(a, "k", sweep ? std::vector<int64_t>{64, 128, 256} : std::vector<int64_t>{128});
    const auto dtypes = dtypeList(a);
    // --methods: every listed method of the decode engine against dense, one object each.
    std::vector<att::Method> methodList;
    if (const auto ms = a.get("methods")) {
        std::stringstream ss(*ms);
        std::string item;
        while (std::getline(ss, item, ',')) {
            const att::MethodInfo* mi = att::findMethod(item);
            if (!mi)
                throw UsageError("--methods: unknown method '" + item + "' (" + att::methodNames() +
                                 ")");
            if (!mi->fastDecode)
                throw UsageError("--methods: the decode engine does not run '" + item + "'");
            methodList.push_back(mi->id);
        }
    }
    if (a.has("methods") && methodList.empty())
        throw UsageError("--methods needs at least one method");
    if (methodList.empty()) { // dense against SparQ at its defaults and the lists of --r, --k
        for (const att::ParamInfo& p : att::parameters())
            if (!notAMethodOption(p) && a.has(p.option))
                throw UsageError(std::string("--") + p.option +
                                 " goes with --methods (without it, bench times dense against "
                                 "SparQ at --r and --k)");
    } else {
        noteIgnoredOptions(a, methodList);
    }
    att::DecodeBenchConfig base;
    base.heads = a.integer("heads").value_or(32);
    base.kvHeads = a.integer("kv-heads").value_or(base.heads);
    base.headDim = a.integer("head-dim").value_or(128);
    base.device = a.get("device").value_or("cpu");
    base.repeats = static_cast<int>(a.integer("repeats").value_or(10));
    base.warmup = static_cast<int>(a.integer("warmup").value_or(2));
    base.seed = static_cast<uint64_t>(a.integer("seed").value_or(0));
    if (base.heads < 1 || base.kvHeads < 1 || base.headDim < 1 || base.repeats < 1 ||
        base.warmup < 0)
        throw UsageError("--heads, --kv-heads, --head-dim and --repeats must be at least 1, "
                         "--warmup at least 0");
    if (base.device != "cpu" && base.device != "cuda")
        throw UsageError("--device takes cpu or cuda, got '" + base.device + "'");
    if (base.heads % base.kvHeads != 0) // before the bandwidth is measured
        throw UsageError("--heads " + std::to_string(base.heads) +
                         " must be a multiple of --kv-heads " + std::to_string(base.kvHeads));
    if (base.device == "cuda" && !at::hasCUDA())
        throw std::runtime_error("bench --device cuda: this libtorch finds no CUDA device");
    for (const int64_t r : rs)
        if (r > base.headDim)
            throw UsageError("--r " + std::to_string(r) + " exceeds head_dim " +
                             std::to_string(base.headDim));
    for (const int64_t k : ks)
        for (const int64_t s : seqs)
            if (k > s && !sweep)
                throw UsageError("--k " + std::to_string(k) + " exceeds --seq " +
                                 std::to_string(s));

    const bool json = a.has("json");
    std::cerr << "bench: " << att::runtimeSummary() << "\n";
    const int64_t bwMib = a.integer("bandwidth-mib").value_or(512);
    if (bwMib < 1)
        throw UsageError("--bandwidth-mib must be at least 1");

    std::ostringstream lines;
    if (!json && !methodList.empty() && base.device == "cuda")
        std::printf("%-4s %5s %6s %-16s %4s %4s %10s %10s %8s %8s %6s %9s %9s %s\n", "dtype",
                    "batch", "S", "method", "r", "k", "us", "graph_us", "speedup", "theory", "frac",
                    "GB/s", "sdpa_us", "path");
    else if (!json && !methodList.empty())
        std::printf("%-4s %5s %6s %-16s %4s %4s %10s %9s %8s %8s %6s %9s\n", "dtype", "batch", "S",
                    "method", "r", "k", "us", "stderr", "speedup", "theory", "frac", "GB/s");
    else if (!json)
        std::printf("%-4s %5s %6s %4s %4s %10s %10s %8s %8s %6s %9s %9s %5s\n", "dtype", "batch",
                    "S", "r", "k", "dense_us", "sparq_us", "speedup", "theory", "frac",
                    "dense_GB/s", "sparq_GB/s", "impl");
    std::vector<std::pair<int64_t, int64_t>> rk;
    for (const int64_t r : rs)
        for (const int64_t k : ks)
            rk.emplace_back(r, k);
    int skipped = 0;
    for (const at::ScalarType dt : dtypes)
        for (const int64_t batch : batches)
            for (const int64_t seq : seqs) {
                att::DecodeBenchConfig c = base;
                c.dtype = dt;
                c.batch = batch;
                c.seq = seq;
                std::vector<std::pair<int64_t, int64_t>> use;
                for (const auto& p : rk)
                    if (p.second <= seq)
                        use.push_back(p);
                if (use.empty())
                    continue;
                const int64_t avail = sparqlab::base::availableMemoryBytes();
                if (sweep && avail > 0 && c.bytesNeeded() > avail * 9 / 10) {
                    std::cerr << "bench: skipping S = " << seq << ", batch " << batch << " ("
                              << (c.bytesNeeded() >> 20) << " MiB needed, " << (avail >> 20)
                              << " MiB available)\n";
                    ++skipped;
                    continue;
                }
                // Measured again for each configuration, just before it: a shared VM's memory
                // bandwidth drifts by tens of percent during a sweep of minutes, and each row's
                // kernels are to be set beside the bandwidth of their own time.
                const att::Bandwidth bw = att::measureBandwidth(c.device, bwMib << 20);
                if (c.device == "cuda")
                    std::cerr << "bench: " << dtypeFlag(dt) << ", batch " << batch
                              << ", S = " << seq << ": device-to-device copy " << num(bw.copyGbps)
                              << " GB/s\n";
                else
                    std::cerr << "bench: " << dtypeFlag(dt) << ", batch " << batch
                              << ", S = " << seq << ": memory bandwidth " << num(bw.copyGbps)
                              << " GB/s copy (STREAM-like), " << num(bw.readGbps) << " GB/s read\n";
                if (!methodList.empty()) {
                    benchMethods(a, c, methodList, use, bw, json, lines);
                    continue;
                }
                const auto results = att::benchDecodeMany(c, use);
                for (size_t i = 0; i < results.size(); ++i) {
                    const att::DecodeBenchResult& r = results[i];
                    std::ostringstream o;
                    o << "{\"device\":\"" << c.device << "\",\"dtype\":\"" << dtypeFlag(dt)
                      << "\",\"batch\":" << batch << ",\"heads\":" << c.heads
                      << ",\"kv_heads\":" << c.kvHeads << ",\"seq\":" << seq
                      << ",\"head_dim\":" << c.headDim << ",\"r\":" << use[i].first
                      << ",\"k\":" << use[i].second << ",\"dense_us\":" << num(r.denseUs)
                      << ",\"sparq_us\":" << num(r.sparqUs) << ",\"speedup\":" << num(r.speedup)
                      << ",\"theoretical_speedup\":" << num(r.theoreticalSpeedup)
                      << ",\"dense_gbps\":" << num(r.denseGbps)
                      << ",\"sparq_gbps\":" << num(r.sparqGbps)
                      << ",\"machine_gbps\":" << num(bw.copyGbps) << ",\"repeats\":" << r.repeats
                      << ",\"stderr_us\":" << num(r.sparqStderrUs)
                      << ",\"dense_stderr_us\":" << num(r.denseStderrUs) << ",\"dense_impl\":\""
                      << r.denseImpl << "\""
                      << ",\"dense_sparqlab_us\":" << num(r.denseOursUs)
                      << ",\"dense_libtorch_us\":" << num(r.denseTorchUs)
                      << ",\"machine_read_gbps\":" << num(bw.readGbps)
                      << ",\"fraction_of_theory\":" << num(r.speedup / r.theoreticalSpeedup)
                      << ",\"threads\":" << at::get_num_threads();
                    if (c.device == "cuda")
                        o << ",\"dense_graph_us\":" << num(r.denseGraphUs)
                          << ",\"sparq_graph_us\":" << num(r.sparqGraphUs)
                          << ",\"graph_speedup\":" << num(r.denseGraphUs / r.sparqGraphUs)
                          << ",\"sdpa_us\":" << (r.sdpaUs > 0 ? num(r.sdpaUs) : "null")
                          << ",\"dense_fraction_of_copy\":"
                          << num(r.denseBytes / (r.denseGraphUs * 1e3) / bw.copyGbps);
                    o << "}";
                    lines << o.str() << "\n";
                    if (json) {
                        std::cout << o.str() << std::endl;
                    } else {
                        std::printf(
                            "%-4s %5lld %6lld %4lld %4lld %10.1f %10.1f %8.2f %8.2f %6.2f "
                            "%9.1f %9.1f %s\n",
                            dtypeFlag(dt), static_cast<long long>(batch),
                            static_cast<long long>(seq), static_cast<long long>(use[i].first),
                            static_cast<long long>(use[i].second), r.denseUs, r.sparqUs, r.speedup,
                            r.theoreticalSpeedup, r.speedup / r.theoreticalSpeedup, r.denseGbps,
                            r.sparqGbps, r.denseImpl.c_str());
                        if (c.device == "cuda") // graph replays and the SDPA anchor
                            std::printf(
                                "      graph: dense %.1f us (%.2f of copy), sparq %.1f us, "
                                "speedup %.2f (%.2f of theory); sdpa %.1f us\n",
                                r.denseGraphUs, r.denseBytes / (r.denseGraphUs * 1e3) / bw.copyGbps,
                                r.sparqGraphUs, r.denseGraphUs / r.sparqGraphUs,
                                r.denseGraphUs / r.sparqGraphUs / r.theoreticalSpeedup, r.sdpaUs);
                        std::fflush(stdout);
                    }
                }
            }
    if (const auto out = a.get("out"))
        base::writeFileAtomically(*out, lines.str());
    if (skipped)
        std::cerr << "bench: " << skipped << " configurations skipped for memory\n";
    return 0;
}

} // namespace sparqlab::cli
