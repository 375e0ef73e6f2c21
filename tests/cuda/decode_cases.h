#pragma once
// The cases of the CUDA decode kernels' tests and how a case is checked, shared by the kernels on
// a GPU (test_cuda_decode) and under the host emulation (test_cuda_emulated). For each case:
// - y against attend() in float64 over the stored (rounded) K and V: relative error of each
//   head's output ≤ 1e-4 (the kernels compute in float32 from the same stored values; the 1e-2
//   usual for fp16 is for half-precision arithmetic), where the two select the same positions;
// - the positions the kernels attended against attend()'s, as sets; a difference is allowed only
//   where attend() reports a tie or near-tie at the k-th value (margin_rel < 1e-3) or, for top-p,
//   a budget within 1e-3 of flipping;
// - y and α against the CPU decode kernels (DecodeAttention on a CPU cache) likewise.

#include "attention/attention.h"
#include "attention/decode/engine.h"
#include "attention/method_spec.h"
#include "attention/method_table.h"
#include "check.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::test::decode_cases {

namespace att = sparqlab::attention;
using att::Method;

/// A Loki basis [1, Hkv, D, D]: random orthonormal columns, or for half-precision storage
/// permuted unit vectors, whose projections the cache stores exactly (the engine rounds the
/// projected keys to the storage dtype; attend() in float64 would not).
inline std::shared_ptr<att::Calibration> lokiCalibration(int64_t Hkv, int64_t D, bool exact) {
    auto cal = std::make_shared<att::Calibration>();
    cal->method = Method::Loki;
    if (exact) {
        std::vector<at::Tensor> heads;
        for (int64_t u = 0; u < Hkv; ++u)
            heads.push_back(at::eye(D).index_select(1, at::randperm(D)));
        cal->tensors["basis"] = at::stack(heads).unsqueeze(0).contiguous();
    } else {
        cal->tensors["basis"] = std::get<0>(at::linalg_qr(at::randn({Hkv, D, D}, at::kDouble)))
                                    .to(at::kFloat)
                                    .unsqueeze(0)
                                    .contiguous();
    }
    return cal;
}

inline std::shared_ptr<att::Calibration> dsCalibration(int64_t Hq, int64_t D) {
    auto cal = std::make_shared<att::Calibration>();
    cal->method = Method::DoubleSparsity;
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < Hq; ++h)
        heads.push_back(at::randperm(D));
    cal->tensors["channels"] = at::stack(heads).unsqueeze(0).contiguous();
    return cal;
}

inline const char* dtypeName(at::ScalarType t) {
    return t == at::kFloat ? "f32" : t == at::kHalf ? "f16" : "bf16";
}

inline const char* gqaName(att::GroupSelect g) {
    return g == att::GroupSelect::SumProbs    ? "sum-probs"
           : g == att::GroupSelect::SumLogits ? "sum-logits"
                                              : "per-head";
}

struct Case {
    Method method = Method::Dense;
    at::ScalarType dtype = at::kFloat;
    int64_t B = 2, Hq = 4, Hkv = 4, S = 300, D = 128;
    int64_t r = 16, k = 40;
    std::optional<int64_t> local;
    att::GroupSelect gqa = att::GroupSelect::SumProbs;
    att::TauMode tau = att::TauMode::Adaptive;
    bool meanValue = true;
    double p = 0.9;
    std::optional<double> scale;
    int64_t pageSize = 16;
    /// Every |q_i| equal (q = ±2): SparQ's r components are chosen by the tie rule alone (the
    /// lower indices first, SPARQ.md §3.1).
    bool tiedComponents = false;
    std::string label() const {
        char buf[256];
        std::snprintf(
            buf, sizeof buf, "%s %s B%lld Hq%lld/Hkv%lld S%lld D%lld r%lld k%lld l%lld %s%s%s%s",
            att::methodName(method).c_str(), dtypeName(dtype), (long long)B, (long long)Hq,
            (long long)Hkv, (long long)S, (long long)D, (long long)r, (long long)k,
            (long long)local.value_or(-1), gqaName(gqa), scale ? " scaled" : "",
            meanValue ? "" : " no-mean-value", tiedComponents ? " tied-|q|" : "");
        return buf;
    }
};

struct Stats {
    int cases = 0, rows = 0, ambiguous = 0;
    double worstRef = 0, worstCpu = 0;
};
inline Stats stats;

inline double relErr(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() /
           std::max(1e-30, b.to(at::kDouble).norm().item<double>());
}

/// One case's inputs (fresh random values, seeded by the case's number).
struct Inputs {
    at::Tensor q, k, v;
    att::AttentionConfig cfg;
};

inline Inputs makeInputs(const Case& c) {
    Inputs in;
    at::manual_seed(static_cast<uint64_t>(stats.cases) * 7919);
    in.k = at::randn({c.B, c.Hkv, c.S, c.D});
    in.v = at::randn({c.B, c.Hkv, c.S, c.D});
    in.q = at::randn({c.B, c.Hq, c.D}) * (c.method == Method::Dense ? 1.0 : 2.0);
    if (c.tiedComponents)
        in.q = at::sign(in.q) * 2.0;
    att::AttentionConfig& cfg = in.cfg;
    cfg = att::defaultConfig(c.method);
    cfg.r = c.r;
    cfg.k = c.k;
    cfg.local = c.local;
    cfg.gqa = c.gqa;
    cfg.tau = c.tau;
    cfg.tauValue = 3.0;
    cfg.meanValue = c.meanValue;
    cfg.p = c.p;
    cfg.scale = c.scale;
    cfg.pageSize = c.pageSize;
    if (c.method == Method::Loki)
        cfg.calibration = lokiCalibration(c.Hkv, c.D, c.dtype != at::kFloat);
    if (c.method == Method::DoubleSparsity)
        cfg.calibration = dsCalibration(c.Hq, c.D);
    cfg.layer = 0;
    return in;
}

/// A cache of the case's K and V on `device`, prepared for its method, with room for a multiple of
/// 8 positions (as a GPU cache rounds its rows up to; the kernels need it, also emulated).
inline att::DecodeCache makeCache(const Case& c, const Inputs& in, at::Device device) {
    att::DecodeCache cache(c.B, c.Hkv, c.D, (c.S + 5 + 7) / 8 * 8, c.dtype,
                           att::decodeNeedsDimensionMajor(in.cfg), device);
    cache.append(in.k.to(device), in.v.to(device));
    att::prepareDecodeCache(cache, in.cfg);
    return cache;
}

/// What the kernels under test gave for a case, on the host: y [B, Hq, D], α [B, Hq], and where
/// they selected, the attended positions [B, Hkv·units, W] and their counts [B, Hkv·units].
struct Outcome {
    at::Tensor y, alpha, sel, count;
    /// Whether the CUDA kernels ran it (the others: libtorch's operations on the device).
    bool kernels = false;
};

/// Runs case `c`: its inputs, the CPU decode kernels' result, then `run`'s (the kernels under
/// test, given the inputs and the CPU cache), and checks the latter against the former and
/// against attend(). `run` returns nothing where it threw (it reports why itself).
inline void
runCase(const Case& c,
        const std::function<std::optional<Outcome>(const Inputs&, const att::DecodeCache&)>& run) {
    ++stats.cases;
    const std::string name = c.label();
    const Inputs in = makeInputs(c);
    const at::Tensor& q = in.q;
    const att::AttentionConfig& cfg = in.cfg;
    const att::DecodeCache cpu = makeCache(c, in, at::kCPU);
    att::DecodeAttention cpuEngine;
    at::Tensor aCpu, yCpu;
    std::optional<Outcome> got;
    try {
        yCpu = cpuEngine.run(q, cpu, cfg, &aCpu);
    } catch (const std::exception& e) {
        check(false, name + ": the CPU kernels threw " + e.what());
        return;
    }
    got = run(in, cpu);
    if (!got)
        return;
    const at::Tensor yGpu = got->y.cpu(), aGpu = got->alpha.cpu();
    const at::Tensor sel = got->sel.defined() ? got->sel.cpu() : at::Tensor();
    const at::Tensor count = got->count.defined() ? got->count.cpu() : at::Tensor();
    const bool kernels = got->kernels;
    check(at::isfinite(yGpu).all().item<bool>(), name + ": y is finite");
    // The float64 reference over the stored values (and its selections, margins): for the
    // methods the kernels run (the others read the state their prepareCache made, which attend()
    // would make otherwise, or need inputs a cache does not hold: they are compared with the CPU
    // kernels alone).
    att::AttentionResult ref;
    if (kernels) {
        att::AttentionInputs stored;
        stored.q = q.to(at::kDouble);
        stored.k = in.k.to(c.dtype).to(at::kDouble);
        stored.v = in.v.to(c.dtype).to(at::kDouble);
        ref = att::attend(stored, cfg);
    }
    const int64_t g = c.Hq / c.Hkv;
    const bool perHead = c.gqa == att::GroupSelect::PerHead && g > 1;
    const int64_t units = perHead ? g : 1;
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h) {
            ++stats.rows;
            const int64_t hk = h / g, unit = perHead ? h % g : 0;
            bool sameSet = true, tie = false;
            if (kernels && sel.defined() && ref.indices.defined()) {
                const at::Tensor s = sel.cpu()[b][hk * units + unit];
                const int n = count.cpu()[b][hk * units + unit].item<int>();
                std::set<int64_t> mine, theirs;
                bool padded = n >= 0 && n <= s.size(0);
                for (int64_t i = 0; i < s.size(0); ++i)
                    if (i < n)
                        mine.insert(s[i].item<int>());
                    else
                        padded = padded && s[i].item<int>() == -1;
                const std::string unitName =
                    name + ": b" + std::to_string(b) + " unit " + std::to_string(hk * units + unit);
                check(padded, unitName + ": the count fits the row and the rest is −1");
                check(static_cast<int64_t>(mine.size()) == n,
                      unitName + ": no position attended twice");
                const at::Tensor ri = ref.indices[b][h];
                for (int64_t i = 0; i < ri.size(0); ++i)
                    if (ri[i].item<int64_t>() >= 0)
                        theirs.insert(ri[i].item<int64_t>());
                sameSet = mine == theirs;
                if (ref.marginRel.defined())
                    tie = tie || ref.marginRel[b][h].item<double>() < 1e-3;
                if (ref.massMargin.defined())
                    tie = tie || std::abs(ref.massMargin[b][h].item<double>()) < 1e-3;
                check(sameSet || tie, name + ": b" + std::to_string(b) + " h" + std::to_string(h) +
                                          ": the attended positions equal attend()'s (" +
                                          std::to_string(mine.size()) + " against " +
                                          std::to_string(theirs.size()) + ")");
            }
            if (!sameSet) {
                ++stats.ambiguous;
                continue;
            }
            const double eRef = kernels ? relErr(yGpu[b][h], ref.y[b][h]) : 0.0;
            const double eCpu = relErr(yGpu[b][h], yCpu[b][h]);
            if (kernels)
                stats.worstRef = std::max(stats.worstRef, eRef);
            stats.worstCpu = std::max(stats.worstCpu, eCpu);
            const double tol = 1e-4;
            if (kernels)
                check(eRef <= tol, name + ": y of b" + std::to_string(b) + " h" +
                                       std::to_string(h) +
                                       " against float64 attend(): " + std::to_string(eRef));
            check(eCpu <= tol, name + ": y of b" + std::to_string(b) + " h" + std::to_string(h) +
                                   " against the CPU kernels: " + std::to_string(eCpu));
            check(std::abs(aGpu[b][h].item<float>() - aCpu[b][h].item<float>()) <= 1e-4,
                  name + ": α against the CPU kernels");
        }
}

inline std::vector<Case> cases() {
    std::vector<Case> out;
    const std::vector<at::ScalarType> dtypes{at::kFloat, at::kHalf, at::kBFloat16};
    const std::vector<Method> selecting{Method::Sparq, Method::SparqTopP,
                                        Method::Loki,  Method::DoubleSparsity,
                                        Method::Quest, Method::OracleTopP};
    for (const at::ScalarType dt : dtypes) {
        // Dense: MHA and GQA, odd lengths, head dimensions, a scale, splits (long rows, B = 1).
        for (const auto& [Hq, Hkv] :
             std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {8, 2}, {16, 2}})
            for (const int64_t S : {1, 37, 1003, 9000}) {
                Case c;
                c.method = Method::Dense;
                c.dtype = dt;
                c.Hq = Hq;
                c.Hkv = Hkv;
                c.S = S;
                c.B = S > 5000 ? 1 : 2;
                out.push_back(c);
            }
        for (const int64_t D : {64, 96}) {
            Case c;
            c.dtype = dt;
            c.D = D;
            c.S = 517;
            c.scale = 0.07;
            out.push_back(c);
        }
        // The selecting methods: MHA and GQA under each rule, short and long rows.
        for (const Method m : selecting)
            for (const auto& [Hq, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {8, 2}})
                for (const att::GroupSelect gqa :
                     {att::GroupSelect::SumProbs, att::GroupSelect::SumLogits,
                      att::GroupSelect::PerHead}) {
                    if (Hq == Hkv && gqa != att::GroupSelect::SumProbs)
                        continue;
                    for (const int64_t S : {300, 6001}) {
                        Case c;
                        c.method = m;
                        c.dtype = dt;
                        c.Hq = Hq;
                        c.Hkv = Hkv;
                        c.gqa = gqa;
                        c.S = S;
                        c.k = S > 5000 ? 100 : 40;
                        c.r = 16;
                        out.push_back(c);
                    }
                }
    }
    // Odd shapes and parameters (float16: the storage the benchmarks use).
    auto add = [&out](Case c) {
        c.dtype = at::kHalf;
        out.push_back(c);
    };
    for (const Method m : selecting) {
        Case c;
        c.method = m;
        c.S = 1; // one position: k ≥ S
        add(c);
        c.S = 203; // k = S, r = D
        c.k = 203;
        c.r = 128;
        add(c);
        c = Case();
        c.method = m;
        c.S = 1237; // a local window, a scale, D = 64
        c.local = 12;
        c.D = 64;
        c.scale = 0.2;
        add(c);
        c = Case();
        c.method = m;
        c.S = 20000; // the strided-maxima threshold with k − l = 900 (2·want ≤ 4096)
        c.k = 900;
        c.B = 1;
        c.Hq = 2;
        c.Hkv = 2;
        add(c);
        c.k = 3000; // want > 2048: the radix select over the whole row
        if (m != Method::SparqTopP && m != Method::OracleTopP)
            add(c);
    }
    for (const att::TauMode tau :
         {att::TauMode::SqrtDh, att::TauMode::SqrtR, att::TauMode::One, att::TauMode::Fixed}) {
        Case c;
        c.method = Method::Sparq;
        c.tau = tau;
        add(c);
    }
    for (const auto& [Hq, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {8, 2}}) {
        Case tied; // the components by the tie rule alone, one head and a group's sum
        tied.method = Method::Sparq;
        tied.tiedComponents = true;
        tied.Hq = Hq;
        tied.Hkv = Hkv;
        add(tied);
    }
    Case nm;
    nm.method = Method::Sparq;
    nm.meanValue = false;
    add(nm);
    nm.method = Method::SparqTopP;
    add(nm);
    // Many rows (B·Hkv ≥ 8 per multiprocessor): step 2 of each part of the rows beside step 1 of
    // the next, on a second stream.
    Case many;
    many.method = Method::Sparq;
    many.B = 40;
    many.Hq = many.Hkv = 32;
    add(many);
    many.method = Method::SparqTopP;
    many.B = 600;
    many.Hq = 8;
    many.Hkv = 2;
    many.S = 200;
    many.gqa = att::GroupSelect::SumLogits;
    add(many);
    // The low-rank step 1's batches of rows in every order it reads them (staged through shared
    // memory, CUDA.md §2.1): fewer heads than its tile (g = 3 in a tile of 4), two tiles of a
    // group (g = 12: 8, then 4), r not a multiple of 8, each head its own rows (Double Sparsity,
    // the per-head rule); test_cuda_emulated_one_sm runs them on one multiprocessor, where a
    // thread reads two runs of positions and some none.
    for (const at::ScalarType dt : {at::kHalf, at::kBFloat16})
        for (const Method m : {Method::Sparq, Method::Loki, Method::DoubleSparsity})
            for (const auto& [Hq, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{6, 2}, {12, 1}})
                for (const att::GroupSelect gqa :
                     {att::GroupSelect::SumProbs, att::GroupSelect::PerHead}) {
                    Case c;
                    c.method = m;
                    c.dtype = dt;
                    c.B = 2;
                    c.Hq = Hq;
                    c.Hkv = Hkv;
                    c.gqa = gqa;
                    c.S = 2999;
                    c.k = 60;
                    c.r = 13;
                    out.push_back(c);
                }
    // Step 1's prologue ranks each of SparQ's components with P threads (logic.h,
    // rankThreadsPerComponent): 8 at D = 32, 2 at D = 72 (a warp's lanes past D among them), 1 at
    // D = 256 (no shuffle); and its first batch, issued before τ, short of 8 rows (r = 3, r = 1)
    // in two head tiles (g = 12).
    for (const auto& [D, r] :
         std::vector<std::pair<int64_t, int64_t>>{{32, 8}, {72, 16}, {256, 32}}) {
        Case c;
        c.method = Method::Sparq;
        c.D = D;
        c.r = r;
        c.S = 700;
        add(c);
    }
    for (const int64_t r : {3, 1}) {
        Case c;
        c.method = Method::Sparq;
        c.Hq = 12;
        c.Hkv = 1;
        c.r = r;
        c.S = 2999;
        c.k = 60;
        add(c);
    }
    Case pages;
    pages.method = Method::Quest;
    pages.pageSize = 32;
    pages.S = 1000;
    pages.k = 130;
    add(pages);
    return out;
}

} // namespace sparqlab::test::decode_cases
