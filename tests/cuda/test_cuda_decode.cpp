// The decode engine on a CUDA cache against the CPU (decode_cases.h says how a case is checked):
// every method of the engine, storage float32 / float16 / bfloat16, MHA and GQA under each GQA
// rule, and odd shapes (S = 1, S not a multiple of 8, k = S, r = D, head dimensions 64, 96 and
// 128, a local window, a non-default scale, every temperature, long rows that take the
// strided-maxima threshold), on fresh random inputs; and for each case run by the kernels, a
// step replayed from a CUDA graph into an output poisoned with NaN equals run(). The methods
// without CUDA kernels (libtorch's operations on the device) are checked against the CPU decode
// kernels. Skipped (exit 77) without CUDA kernels in the build or a device.
// test_cuda_emulated runs the same cases on the kernels' host emulation.

#include "attention/cuda/decode_cuda.h"
#include "decode_cases.h"
#include "step_cases.h"

#include <ATen/Context.h>

#include <chrono>
#include <cstdlib>
#include <limits>

using namespace sparqlab::test::decode_cases;
using sparqlab::test::check;

namespace {

/// The case on a CUDA cache through the engine, and its replay from a CUDA graph.
std::optional<Outcome> onGpu(const Case& c, const Inputs& in, const att::DecodeCache&) {
    const std::string name = c.label();
    const att::DecodeCache gpu = makeCache(c, in, at::kCUDA);
    att::DecodeAttention gpuEngine;
    Outcome out;
    try {
        out.y =
            gpuEngine.runWithSelection(in.q.cuda(), gpu, in.cfg, &out.alpha, &out.sel, &out.count);
    } catch (const std::exception& e) {
        check(false, name + ": threw " + e.what());
        return std::nullopt;
    }
    out.kernels = out.sel.defined() || c.method == Method::Dense;
    check(out.kernels == att::DecodeAttention::gpuUnsupported(gpu, in.cfg, c.Hq).empty(),
          name + ": the CUDA kernels ran it exactly when they say they take it");
    // The same step from a CUDA graph, into an output poisoned first.
    if (out.kernels) {
        const at::Tensor yGpu = out.y.cpu();
        const at::Tensor qd = in.q.cuda().contiguous();
        att::DecodeGraph graph(gpuEngine, qd, gpu, in.cfg);
        graph.y().fill_(std::numeric_limits<float>::quiet_NaN());
        graph.replay();
        const at::Tensor yg = graph.y().cpu();
        check(at::isfinite(yg).all().item<bool>(), name + ": the graph writes every output");
        check(relErr(yg, yGpu) <= 1e-6, name + ": the graph replay equals run()");
        // A new q in place: the replay follows it.
        const at::Tensor q2 = at::randn({c.B, c.Hq, c.D});
        qd.copy_(q2.cuda());
        graph.replay();
        const at::Tensor y2 = gpuEngine.run(qd, gpu, in.cfg).cpu();
        check(relErr(graph.y().cpu(), y2) <= 1e-6, name + ": a replay reads q's new values");
    }
    return out;
}

void runCase(const Case& c) {
    sparqlab::test::decode_cases::runCase(
        c, [&c](const Inputs& in, const att::DecodeCache& cpu) { return onGpu(c, in, cpu); });
}

void tiesGoToTheLowerIndex() {
    // K all equal: every approximate and exact score ties; the lowest positions must be chosen.
    for (const Method m :
         {Method::Sparq, Method::Loki, Method::DoubleSparsity, Method::OracleTopP}) {
        att::AttentionConfig cfg = att::defaultConfig(m);
        cfg.k = 24;
        cfg.r = 8;
        cfg.p = 1.0;
        if (m == Method::Loki)
            cfg.calibration = lokiCalibration(2, 64, true);
        if (m == Method::DoubleSparsity)
            cfg.calibration = dsCalibration(2, 64);
        const int64_t S = 5000;
        att::DecodeCache gpu(1, 2, 64, S, at::kHalf, att::decodeNeedsDimensionMajor(cfg),
                             at::kCUDA);
        const at::Tensor k = at::ones({1, 2, S, 64}).cuda() * 0.5;
        gpu.append(k, at::randn({1, 2, S, 64}).cuda());
        att::prepareDecodeCache(gpu, cfg);
        att::DecodeAttention e;
        at::Tensor sel, count, alpha;
        e.runWithSelection(at::randn({1, 2, 64}).cuda(), gpu, cfg, &alpha, &sel, &count);
        if (!sel.defined()) {
            check(false, att::methodName(m) + ": ran without the CUDA kernels");
            continue;
        }
        const at::Tensor s = sel.cpu();
        bool lowest = true;
        for (int64_t u = 0; u < 2; ++u)
            for (int64_t i = 0; i < 24; ++i)
                lowest = lowest && s[0][u][i].item<int>() == i;
        check(lowest, att::methodName(m) + ": exact ties go to the lower positions");
    }
}

} // namespace

int main() {
    if (!att::cuda::built())
        sparqlab::test::skip("this build has no CUDA kernels (nvcc was not found)");
    if (!at::hasCUDA() || !att::cuda::deviceAvailable())
        sparqlab::test::skip("no CUDA device (libtorch " +
                             std::string(at::hasCUDA() ? "has CUDA" : "has no CUDA") + ")");
    std::printf("test_cuda_decode on %s\n", att::cuda::deviceSummary().c_str());
    const auto t0 = std::chrono::steady_clock::now();
    // SPARQLAB_TEST_QUICK=N: every N-th case only (the sanitizer runs of scripts/gpu-check.sh).
    const char* quick = std::getenv("SPARQLAB_TEST_QUICK");
    const size_t every = quick ? std::max(1, std::atoi(quick)) : 1;
    const std::vector<Case> all = cases();
    for (size_t i = 0; i < all.size(); i += every)
        runCase(all[i]);
    tiesGoToTheLowerIndex();
    // The methods without CUDA kernels run through libtorch's operations on the device.
    for (const Method m : {Method::PQCache, Method::MagicPIG, Method::ShadowKV, Method::RocketKV}) {
        Case c;
        c.method = m;
        c.S = 700;
        c.k = 64;
        runCase(c);
    }
    std::printf("%d cases, %d rows (%d with a near-tie set aside), worst relative error of y "
                "against float64 %.3g, against the CPU kernels %.3g, %.1f s\n",
                stats.cases, stats.rows, stats.ambiguous, stats.worstRef, stats.worstCpu,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    check(stats.ambiguous * 20 <= stats.rows, "near-ties are rare (fewer than 1 row in 20)");
    // The fused operations around attention in a model's decode step (cuda/step.h).
    sparqlab::test::step::all(att::cuda::stepOps(), at::Device(at::kCUDA));
    return sparqlab::test::finish("test_cuda_decode");
}
