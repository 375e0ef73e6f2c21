// The CUDA decode kernels of attention/cuda/ under the host emulation of simt/simt.h, on the CPU:
// the same kernels' source, the same plan and launchers, run over a CPU decode cache through the
// engine's own kernel path (DecodeAttention::runOnKernels), against the
// CPU decode kernels and attend() in float64 as test_cuda_decode checks them on a GPU
// (decode_cases.h): y (relative 1e-4), α (absolute 1e-4) and the attended positions as sets
// (near-ties set aside). The cases are test_cuda_decode's with the long rows shortened (an
// emulated block runs its 256 threads as fibers of one core); the odd shapes, the GQA rules,
// the dtypes, the temperatures, k = S, r = D, S = 1, the local window, the two thresholds of
// step 2 (strided maxima and the radix select over the whole row) and the exact ties are kept.
// The emulation also fails a case where a barrier or a warp intrinsic could never complete
// (simt.h), and fills the workspace and the outputs with NaN first, so that whatever a kernel
// reads unwritten, or leaves unwritten, shows. It cannot show races or timing: the device script
// runs test_cuda_decode and compute-sanitizer on a GPU for those.

#include "attention/cuda/decode_cuda.h"
#include "attention/cuda/logic.h"
#include "decode_cases.h"
#include "simt/emulated.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>

using namespace sparqlab::test::decode_cases;
using sparqlab::test::check;
namespace emulated = sparqlab::test::emulated;
namespace cuda = att::cuda;

namespace {

/// The emulated launch, with everything the step writes filled first (y and α NaN, the
/// selection −7, the workspace 0xFF bytes), so that what a kernel reads unwritten, or leaves
/// unwritten, shows.
void poisonedLaunch(const cuda::CacheView& view, const cuda::Request& r, void* workspace,
                    size_t workspaceSize, void* stream) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill_n(r.y, view.B * r.Hq * view.D, nan);
    std::fill_n(r.alpha, view.B * r.Hq, nan);
    if (r.selOut) {
        const int64_t units = r.gqa == cuda::Gqa::PerHead && r.Hq > view.H ? r.Hq / view.H : 1;
        std::fill_n(r.selOut, view.B * view.H * units * r.selStride, -7);
        std::fill_n(r.selCount, view.B * view.H * units, -7);
    }
    std::memset(workspace, 0xFF, workspaceSize);
    emulated::launch(view, r, workspace, workspaceSize, stream);
}

/// The kernels under the emulation, as the engine takes kernels.
const cuda::Kernels kEmulated{&emulated::unsupported, &emulated::workspaceBytes,
                              &emulated::maxSelection, &poisonedLaunch};

/// The case's step over the CPU cache through the engine's kernel path, run under the emulation.
std::optional<Outcome> emulate(const Case& c, const Inputs& in, const att::DecodeCache& cpu) {
    att::DecodeAttention engine;
    Outcome out;
    out.kernels = true;
    try {
        out.y = engine.runOnKernels(in.q, cpu, in.cfg, kEmulated, &out.alpha, &out.sel, &out.count);
    } catch (const std::exception& e) {
        check(false, c.label() + ": threw " + e.what());
        return std::nullopt;
    }
    return out;
}

/// test_cuda_decode's cases with rows of at most `longest` positions (a longer one keeps its
/// budget's ratio to S roughly: k − l ≤ 1024 a threshold, larger every position a candidate).
std::vector<Case> shortened(int64_t longest) {
    std::vector<Case> out;
    for (Case c : cases()) {
        if (c.S > longest) {
            const bool radix = c.k > 1024;
            c.S = longest;
            c.k = radix ? 1100 : std::min<int64_t>(c.k, longest / 8);
        }
        if (c.B * c.Hkv > 64) { // the many-rows cases: enough rows to split over 4 SMs' parts
            c.B = std::max<int64_t>(1, 64 / c.Hkv);
            c.S = std::min<int64_t>(c.S, 200);
        }
        out.push_back(c);
    }
    return out;
}

/// The case's step under the emulation chooses `expected` first in both units (null: it threw).
std::optional<bool> choosesFirst(const Case& c, const Inputs& in,
                                 const std::vector<int64_t>& expected) {
    const att::DecodeCache cpu = makeCache(c, in, at::kCPU);
    const std::optional<Outcome> out = emulate(c, in, cpu);
    if (!out)
        return std::nullopt;
    bool same = true;
    for (int64_t u = 0; u < 2; ++u)
        for (size_t i = 0; i < expected.size(); ++i)
            same = same && out->sel[0][u][static_cast<int64_t>(i)].item<int>() == expected[i];
    return same;
}

void tiesGoToTheLowerIndex() {
    // K all equal: every approximate and exact score ties; the lowest positions must be chosen.
    for (const Method m :
         {Method::Sparq, Method::Loki, Method::DoubleSparsity, Method::OracleTopP}) {
        Case c;
        c.method = m;
        c.dtype = at::kHalf;
        c.B = 1;
        c.Hq = c.Hkv = 2;
        c.D = 64;
        c.S = 2500;
        c.k = 24;
        c.r = 8;
        c.p = 1.0;
        std::vector<int64_t> lowest;
        for (int64_t i = 0; i < 24; ++i)
            lowest.push_back(i);
        // At 9,000 positions more groups than the two-stage threshold lists (1,024) reach its
        // first stage: step 2 takes the one-stage path.
        for (const int64_t S : {2500, 9000}) {
            c.S = S;
            Inputs flat = makeInputs(c);
            flat.k = at::ones_like(flat.k) * 0.5;
            if (const std::optional<bool> ok = choosesFirst(c, flat, lowest))
                check(*ok, att::methodName(m) + ": exact ties go to the lower positions at S = " +
                               std::to_string(S));
        }

        // 40 tied rows far above the rest (K = 2·sign(q) there): few candidates (step 2 ranks
        // them in one pass where SPARQLAB_CUDA_FEW_PASSES is on); the 24 lowest of them, best
        // (lowest) first.
        c.S = 2500;
        Inputs in = makeInputs(c);
        std::vector<int64_t> tied;
        for (int64_t i = 0; i < 40; ++i)
            tied.push_back(5 + 37 * i + (i % 3));
        for (int64_t h = 0; h < 2; ++h)
            for (const int64_t p : tied)
                in.k[0][h][p] = at::sign(in.q[0][h]) * 2.0;
        tied.resize(24);
        if (const std::optional<bool> ok = choosesFirst(c, in, tied))
            check(*ok,
                  att::methodName(m) + ": ties among few candidates go to the lower positions");
    }
}

/// Long rows on a device of many multiprocessors (run with SIMT_SMS=132, as an H100 or H200
/// has): dense split over many blocks, step 1 in more than 32 chunks (so that step 2 merges more
/// chunk states than a warp has lanes), the rank kernel over a long row, step 2's attention split
/// over blocks.
std::vector<Case> longRows() {
    std::vector<Case> out;
    Case c;
    c.dtype = at::kHalf;
    c.B = 1;
    c.Hq = 8;
    c.Hkv = 2;
    c.S = 70000;
    out.push_back(c); // dense
    c.method = Method::Sparq;
    c.Hq = c.Hkv = 1;
    c.k = 300;
    out.push_back(c); // 35 chunks of step 1
    c.Hq = 4;
    c.gqa = att::GroupSelect::SumProbs;
    out.push_back(c); // the rank kernel, 35 chunks
    c.Hq = 1;
    c.S = 32768;
    c.k = 128;
    out.push_back(c); // the goal's B = 1 shape: 4,096 group maxima, the most two stages take
    c.method = Method::OracleTopP;
    c.Hq = c.Hkv = 1;
    c.S = 20000;
    c.k = 200;
    out.push_back(c); // exact scores: 40 chunks
    // Step 2's attention split over blocks (few units on 132 SMs): Fig. 10's shape in small
    // (k ≈ S/10, the group maxima's threshold, 8 splits), then want > 2,048 (the radix select
    // over the whole row, and for top-p its chosen sorted), a per-head GQA rule (4 units,
    // 4 splits) and Quest's pages (the list holds whole pages and the last, partial one).
    c.method = Method::Sparq;
    c.k = 2046;
    out.push_back(c);
    c.k = 3000;
    out.push_back(c);
    c.method = Method::OracleTopP;
    out.push_back(c);
    c.method = Method::Sparq;
    c.Hq = 4;
    c.gqa = att::GroupSelect::PerHead;
    c.k = 600;
    out.push_back(c);
    c.method = Method::Quest;
    c.Hq = 1;
    c.gqa = att::GroupSelect::SumProbs;
    c.S = 20003;
    c.k = 900;
    c.pageSize = 16;
    out.push_back(c);
    return out;
}

// The paths of step 2's selection the select kernel notes (SPARQLAB_NOTE_PATH).
using namespace cuda::notedPath;

} // namespace

/// More rows (batch × KV heads) than a launch's second grid dimension takes: the kernels decline
/// the step, naming the limit (the engine then runs libtorch's operations), rather than failing
/// at launch; one row fewer they take.
void tooManyRowsAreDeclined() {
    // 65,535 = 4,369 · 15 rows (the most one launch takes) and 65,536 = 2,048 · 32.
    for (const auto& [B, H] : {std::pair<int64_t, int64_t>{4369, 15}, {2048, 32}}) {
        cuda::CacheView v;
        v.B = B;
        v.H = H;
        v.D = 128;
        v.stride = v.S = 8;
        v.storage = cuda::Storage::F16;
        cuda::Request r;
        r.Hq = H;
        const std::string why = emulated::unsupported(v, r);
        const bool declined = why.find("rows (batch × KV heads)") != std::string::npos;
        check(declined == (B * H > 65535),
              std::to_string(B * H) + " rows: " + (why.empty() ? "taken" : why));
    }
}

int main(int argc, char** argv) {
    at::set_num_threads(1);
    const auto t0 = std::chrono::steady_clock::now();
    // The emulation's own promises first (toy kernels).
    const std::vector<std::string> emulator = emulated::selfCheck();
    for (const std::string& what : emulator)
        check(false, "the emulation: " + what);
    check(emulator.empty(), "the emulation keeps its promises on toy kernels");
    // SPARQLAB_TEST_QUICK=N: every N-th case only.
    const char* quick = std::getenv("SPARQLAB_TEST_QUICK");
    const size_t every = quick ? std::max(1, std::atoi(quick)) : 1;
    // --long: longRows() alone (CTest runs it as test_cuda_emulated_long, with SIMT_SMS=132);
    // --only TEXT (repeatable): the cases whose label holds one of the TEXTs (the CTest variants
    // with SPARQLAB_CUDA_PARTS=2 and SPARQLAB_CUDA_RANK=0 take the cases those paths serve).
    bool longOnly = false;
    std::vector<std::string> only;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--long")
            longOnly = true;
        else if (a == "--only" && i + 1 < argc)
            only.emplace_back(argv[++i]);
        else
            sparqlab::test::skip("usage: test_cuda_emulated [--long] [--only TEXT]...");
    }
    std::vector<Case> all;
    for (const Case& c : longOnly ? longRows() : shortened(3000)) {
        const std::string label = c.label();
        bool in = only.empty();
        for (const std::string& o : only)
            in = in || label.find(o) != std::string::npos;
        if (in)
            all.push_back(c);
    }
    check(!all.empty(), "some case is selected");
    for (size_t i = 0; i < all.size(); i += every) {
        const Case& c = all[i];
        const emulated::Work w0 = emulated::work();
        const uint64_t before = w0.launches;
        runCase(
            c, [&c](const Inputs& in, const att::DecodeCache& cpu) { return emulate(c, in, cpu); });
        // The goal's B = 1 shape (4,096 group maxima): step 2's threshold in two stages over the
        // maxima its entry copied and its few candidates ranked in one pass, every row. A
        // fallback gives the same rows, only slower, so only the kernel's notes of its paths
        // show one.
        if (c.method == Method::Sparq && c.S == 32768 && c.k == 128 &&
            !std::getenv("SPARQLAB_CUDA_FEW_PASSES")) {
            const emulated::Work w1 = emulated::work();
            auto taken = [&](const char* path) { return w1.path(path) - w0.path(path); };
            check(taken(kTwoStages) > 0 && taken(kOneStage) == 0 && taken(kTooFew) == 0 &&
                      taken(kOnePass) == taken(kTwoStages) && taken(kWholeRow) == 0,
                  c.label() +
                      ": step 2's threshold in two stages and its candidates ranked in "
                      "one pass, without a fallback (" +
                      std::to_string(taken(kTwoStages)) + " rows in two stages, " +
                      std::to_string(taken(kOnePass)) + " ranked in one pass, " +
                      std::to_string(taken(kWholeRow)) + " over the whole row)");
        }
        // The long rows whose step 2 splits its attention (few units, many rows) ran the select
        // attend and merge kernels besides steps 1 and 2.
        const int64_t units = c.gqa == att::GroupSelect::PerHead && c.Hq > c.Hkv ? c.Hq / c.Hkv : 1;
        if (longOnly && c.method != Method::Dense && c.method != Method::Quest &&
            cuda::selectSplitsFor(c.B * c.Hkv * units, 132, std::min(c.k, c.S), 8) > 1)
            check(emulated::work().launches - before >= 4,
                  c.label() + ": step 2's attention split over blocks");
    }
    const emulated::Work n = emulated::work();
    const char* passes = std::getenv("SPARQLAB_CUDA_FEW_PASSES");
    if (!longOnly && only.empty() && !passes)
        check(n.path(kTwoStages) > 0 && n.path(kTooFew) == 0,
              "the short rows' thresholds: " + std::to_string(n.path(kTwoStages)) +
                  " rows in two stages, " + std::to_string(n.path(kOneStage)) + " in one, " +
                  std::to_string(n.path(kTooFew)) + " fell back to the whole row");
    if (!longOnly && only.empty()) {
        tiesGoToTheLowerIndex();
        tooManyRowsAreDeclined();
    }
    std::printf("%d cases, %d rows (%d with a near-tie set aside), worst relative error of y "
                "against float64 %.3g, against the CPU kernels %.3g; %llu launches, %llu blocks, "
                "%llu fiber switches, %.1f s\n",
                stats.cases, stats.rows, stats.ambiguous, stats.worstRef, stats.worstCpu,
                static_cast<unsigned long long>(n.launches),
                static_cast<unsigned long long>(n.blocks),
                static_cast<unsigned long long>(n.switches),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    check(stats.ambiguous * 20 <= stats.rows, "near-ties are rare (fewer than 1 row in 20)");
    return sparqlab::test::finish("test_cuda_emulated");
}
