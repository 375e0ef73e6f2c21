// The arithmetic the CUDA decode kernels share with the host (attention/cuda/logic.h), on the
// CPU: the order-preserving keys and the tie rule (SPARQ.md §2.3), the radix step of the exact
// top-k against std::nth_element, the selection the kernels make (candidates by a threshold from
// strided maxima, then the best by (key, index)) against the CPU decode kernels' topByScore,
// the flash-decoding merge against a one-pass softmax, the split plan, Quest's page plan
// against METHODS.md §3.3 and the top-p count (METHODS.md §6.1). Runs everywhere, GPU or not.

#include "attention/cuda/logic.h"
#include "attention/decode/kernel.h"
#include "check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace sparqlab::attention::cuda;
using sparqlab::test::check;

namespace {

/// The best `want` of score[0, n) as the kernels select them: every item a candidate on a
/// short row, on a long one those ≥ the want-th largest maximum of 2·want disjoint groups (the
/// chunks of four items c ≡ j mod 2·want); the candidates sorted by rankedItem, descending; the
/// indices of the first `want`, ascending.
std::vector<int64_t> kernelSelection(const std::vector<float>& score, int64_t want,
                                     bool viaMaxima) {
    const int64_t n = static_cast<int64_t>(score.size());
    uint32_t threshold = 0;
    if (viaMaxima) {
        const int64_t W = 2 * want;
        std::vector<uint32_t> maxima(static_cast<size_t>(W), 0);
        for (int64_t i = 0; i < n; ++i) { // the groups: chunks of four items, c ≡ j mod W
            const size_t j = static_cast<size_t>((i / 4) % W);
            maxima[j] = std::max(maxima[j], orderedKey(score[size_t(i)]));
        }
        // The want-th largest by the radix steps.
        uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(want);
        for (int shift = 24; shift >= 0; shift -= 8) {
            uint32_t hist[256] = {};
            for (const uint32_t k : maxima)
                if ((k & mask) == prefix)
                    ++hist[(k >> shift) & 0xFF];
            const int d = pickDigit(hist, remaining);
            prefix |= static_cast<uint32_t>(d) << shift;
            mask |= 0xFFu << shift;
        }
        threshold = prefix;
    }
    std::vector<uint64_t> cand;
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t k = orderedKey(score[size_t(i)]);
        if (k >= threshold)
            cand.push_back(rankedItem(k, static_cast<uint32_t>(i)));
    }
    std::sort(cand.begin(), cand.end(), std::greater<uint64_t>());
    std::vector<int64_t> out;
    for (int64_t j = 0; j < want && j < static_cast<int64_t>(cand.size()); ++j)
        out.push_back(itemIndex(cand[size_t(j)]));
    std::sort(out.begin(), out.end());
    return out;
}

/// The same through step 1's group maxima: T the want-th largest of the best key of each group
/// of 8 consecutive items (want ≤ groups), the candidates the items ≥ T of the groups whose
/// maximum is ≥ T.
std::vector<int64_t> groupSelection(const std::vector<float>& score, int64_t want) {
    const int64_t n = static_cast<int64_t>(score.size()), G = (n + 7) / 8;
    std::vector<uint32_t> gm(static_cast<size_t>(G), 0);
    for (int64_t i = 0; i < n; ++i)
        gm[size_t(i / 8)] = std::max(gm[size_t(i / 8)], orderedKey(score[size_t(i)]));
    uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(want);
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint32_t hist[256] = {};
        for (const uint32_t k : gm)
            if ((k & mask) == prefix)
                ++hist[(k >> shift) & 0xFF];
        prefix |= static_cast<uint32_t>(pickDigit(hist, remaining)) << shift;
        mask |= 0xFFu << shift;
    }
    std::vector<uint64_t> cand;
    for (int64_t j = 0; j < G; ++j)
        if (gm[size_t(j)] >= prefix)
            for (int64_t i = 8 * j; i < std::min(n, 8 * j + 8); ++i)
                if (orderedKey(score[size_t(i)]) >= prefix)
                    cand.push_back(rankedItem(orderedKey(score[size_t(i)]), uint32_t(i)));
    check(static_cast<int64_t>(cand.size()) >= want, "the group threshold leaves enough items");
    std::sort(cand.begin(), cand.end(), std::greater<uint64_t>());
    std::vector<int64_t> out;
    for (int64_t j = 0; j < want && j < static_cast<int64_t>(cand.size()); ++j)
        out.push_back(itemIndex(cand[size_t(j)]));
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<int64_t> cpuSelection(const std::vector<float>& score, int64_t want) {
    const int64_t n = static_cast<int64_t>(score.size());
    std::vector<int64_t> heapIdx(static_cast<size_t>(n + 16));
    std::vector<float> heapVal(static_cast<size_t>(n + 16));
    std::vector<int64_t> out;
    sparqlab::attention::decode::topByScore(score.data(), n, want, heapIdx.data(), heapVal.data(),
                                            out);
    std::sort(out.begin(), out.end());
    return out;
}

void keysKeepTheOrder() {
    const float xs[] = {-std::numeric_limits<float>::infinity(),
                        -1e30f,
                        -2.5f,
                        -1e-38f,
                        -0.0f,
                        0.0f,
                        1e-38f,
                        1.0f,
                        3.5f,
                        1e30f,
                        std::numeric_limits<float>::infinity()};
    for (size_t i = 0; i + 1 < std::size(xs); ++i)
        for (size_t j = i + 1; j < std::size(xs); ++j) {
            const uint32_t a = orderedKey(xs[i]), b = orderedKey(xs[j]);
            if (xs[i] == xs[j])
                check(a == b, "−0 and +0 have one key");
            else
                check(a < b, "keys follow the float order at " + std::to_string(xs[i]) + " < " +
                                 std::to_string(xs[j]));
        }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    check(orderedKey(nan) < orderedKey(-std::numeric_limits<float>::infinity()),
          "NaN ranks below −inf");
    check(rankedItem(5, 3) > rankedItem(5, 7), "equal keys: the lower index is the better item");
    check(rankedItem(6, 100) > rankedItem(5, 0), "a higher key beats any index");
    check(itemIndex(rankedItem(9, 12345)) == 12345 && itemKey(rankedItem(9, 12345)) == 9,
          "items unpack");
    check(rankedItem(1, 0xFFFFFFFEu) > 0, "every real item is above the padding 0");
}

void radixFindsTheKthLargest() {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const int n = 1 + static_cast<int>(rng() % 3000);
        std::vector<uint32_t> keys(static_cast<size_t>(n));
        const int spread = trial % 3 == 0 ? 4 : trial % 3 == 1 ? 1000 : 1 << 30;
        for (auto& k : keys)
            k = 1u + static_cast<uint32_t>(rng() % static_cast<uint32_t>(spread)) * 977u;
        const uint32_t want = 1 + static_cast<uint32_t>(rng() % static_cast<uint32_t>(n));
        uint32_t prefix = 0, mask = 0, remaining = want;
        for (int shift = 24; shift >= 0; shift -= 8) {
            uint32_t hist[256] = {};
            for (const uint32_t k : keys)
                if ((k & mask) == prefix)
                    ++hist[(k >> shift) & 0xFF];
            const int d = pickDigit(hist, remaining);
            check(d >= 0, "a digit is found");
            prefix |= static_cast<uint32_t>(d < 0 ? 0 : d) << shift;
            mask |= 0xFFu << shift;
        }
        std::vector<uint32_t> sorted = keys;
        std::nth_element(sorted.begin(), sorted.begin() + (want - 1), sorted.end(),
                         std::greater<uint32_t>());
        const uint32_t kth = sorted[want - 1];
        check(prefix == kth, "radix k-th largest equals nth_element's (n " + std::to_string(n) +
                                 ", want " + std::to_string(want) + ")");
        uint32_t above = 0;
        for (const uint32_t k : keys)
            above += k > kth;
        check(remaining == want - above, "the ties to take are want minus those above");
    }
}

void selectionEqualsTheCpuKernels() {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    for (int trial = 0; trial < 120; ++trial) {
        const int64_t n = trial % 2 ? 5000 + (trial * 37) % 3000 : 50 + (trial * 13) % 900;
        const int64_t want = 1 + (trial * 7) % 200;
        std::vector<float> score(static_cast<size_t>(n));
        for (auto& x : score)
            x = trial % 5 == 0 ? std::round(normal(rng) * 2) : normal(rng); // ties, or none
        if (trial % 7 == 0)
            score[size_t(n / 2)] = std::numeric_limits<float>::quiet_NaN();
        if (want >= n)
            continue;
        const bool maxima = 2 * want <= 2048 && n >= 8 * want && n >= 1024; // the kernels' rule
        const std::vector<int64_t> expected = cpuSelection(score, want);
        check(kernelSelection(score, want, maxima) == expected,
              "the kernels' top-" + std::to_string(want) + " of " + std::to_string(n) +
                  " equals topByScore's (ties to the lower index)");
        if (want <= (n + 7) / 8)
            check(groupSelection(score, want) == expected,
                  "through the group maxima: top-" + std::to_string(want) + " of " +
                      std::to_string(n) + " equals topByScore's");
    }
}

void mergeMatchesOnePass() {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (int trial = 0; trial < 50; ++trial) {
        const int n = 10 + trial * 7;
        std::vector<float> z(static_cast<size_t>(n)), v(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
            z[size_t(i)] = normal(rng) * 4;
            v[size_t(i)] = normal(rng);
        }
        double m = -INFINITY, l = 0, o = 0;
        for (int i = 0; i < n; ++i)
            m = std::max(m, double(z[size_t(i)]));
        for (int i = 0; i < n; ++i) {
            l += std::exp2(z[size_t(i)] - m);
            o += std::exp2(z[size_t(i)] - m) * v[size_t(i)];
        }
        // Split into parts of random sizes (some empty), each a state, merged left to right.
        SoftmaxState acc;
        float accO = 0;
        for (int i0 = 0; i0 < n;) {
            const int len = static_cast<int>(rng() % 9);
            SoftmaxState part;
            float partO = 0;
            for (int i = i0; i < std::min(n, i0 + len); ++i) {
                const float mx = std::max(part.m, z[size_t(i)]);
                const float c = rescale(part.m, mx);
                part.l = part.l * c + std::exp2(z[size_t(i)] - mx);
                partO = partO * c + std::exp2(z[size_t(i)] - mx) * v[size_t(i)];
                part.m = mx;
            }
            float cb;
            const float ca = mergeStates(acc, part, &cb);
            accO = accO * ca + partO * cb;
            check(std::isfinite(acc.l) && std::isfinite(accO), "an empty part leaves no NaN");
            i0 += len;
        }
        check(std::abs(accO / acc.l - o / l) <= 1e-5 * (1 + std::abs(o / l)),
              "merged softmax states equal the one-pass softmax");
    }
}

void plans() {
    for (const int64_t rows : {1, 4, 32, 128, 528, 2048})
        for (const int64_t S : {1, 100, 255, 256, 4096, 16384, 32768}) {
            const SplitPlan p = splitPlan(rows, S, 528);
            check(p.splits >= 1 && p.len >= 1 && p.splits * p.len >= S &&
                      (p.splits - 1) * p.len < S,
                  "the splits cover S exactly once");
            check(p.splits == 1 || p.len >= 128, "a split holds enough positions");
            if (rows >= 528)
                check(p.splits == 1, "no split once the rows fill the device");
        }
    // B = 4, H = 32 on 528 resident blocks: 4 splits fill one wave (5 would take two).
    check(splitPlan(128, 16384, 528).splits == 4, "splits fill whole waves");
    const SplitPlan b1 = splitPlan(32, 32768, 528); // B = 1: 32 rows
    check(32 * b1.splits <= 528 && 32 * b1.splits >= 0.85 * 0.97 * 528,
          "B = 1: one wave filled to within 85% of the best filling");
    // Step 2's attention splits: B = 1, 32 units on 132 SMs at Fig. 10's k = 2,046: 4 blocks a
    // unit; none at k = 128 (too few rows a split), at B = 4 (128 units) or when turned off.
    check(selectSplitsFor(32, 132, 2046, 8) == 4, "B = 1, k = 2046: 4 splits");
    check(selectSplitsFor(32, 132, 300, 8) == 2, "each split keeps 128 rows or more");
    check(selectSplitsFor(32, 132, 128, 8) == 1 && selectSplitsFor(128, 132, 2046, 8) == 1 &&
              selectSplitsFor(32, 132, 2046, 1) == 1 && selectSplitsFor(2, 132, 4096, 8) == 8,
          "no split with few rows, many units or splits off; at most `most`");
    for (const int64_t blocks : {1, 7, 33, 131, 132, 500})
        for (const int64_t k : {1, 127, 128, 1000, 8192}) {
            const int n = selectSplitsFor(blocks, 132, k, 8);
            check(n >= 1 && n <= 8 && (n == 1 || (blocks * n <= 132 && k / n >= kSplitRows)),
                  "splits within the device and each with enough rows");
        }
    // Quest (METHODS.md §3.3): S = 100, P = 16: 7 pages; k = 40: ⌈40/16⌉ = 3 pages.
    PagePlan q = pagePlan(100, 16, 40, 0);
    check(q.pages == 7 && q.f0 == 6 && q.np == 3 && q.want == 2, "Quest's plan, no window");
    q = pagePlan(100, 16, 40, 20); // the window's 20 positions force pages 5 and 6
    check(q.f0 == 5 && q.np == 3 && q.want == 1, "Quest's plan with a window");
    q = pagePlan(100, 16, 116, 0); // k = S + P: every page
    check(q.np == 7 && q.want == 6, "Quest takes every page when k covers S");
    // Top-p counts (METHODS.md §6.1).
    check(topPCount(-1, 4, 50) == 50, "p never reached: k");
    check(topPCount(2, 4, 50) == 4, "at least the window");
    check(topPCount(0, 0, 50) == 1, "at least one position");
    check(topPCount(70, 0, 50) == 50, "at most k");
    check(lanesPerRow(128) == 16 && lanesPerRow(64) == 8 && lanesPerRow(256) == 32 &&
              lanesPerRow(96) == 16 && lanesPerRow(32) == 8 && lanesPerRow(100) == 0 &&
              lanesPerRow(512) == 0,
          "lanes per row");
    // Step 1's prologue: P threads a component, a power of two up to 8 that fits the block.
    for (int64_t D = 1; D <= 256; ++D) {
        const int P = rankThreadsPerComponent(D, 256);
        check(P >= 1 && P <= 8 && (P & (P - 1)) == 0 && (P == 1 || P * D <= 256) &&
                  (P == 8 || 2 * P * D > 256),
              "threads a component at D = " + std::to_string(D) + ": " + std::to_string(P));
    }
    check(rankThreadsPerComponent(128, 256) == 2 && rankThreadsPerComponent(64, 256) == 4 &&
              rankThreadsPerComponent(256, 256) == 1 && rankThreadsPerComponent(32, 256) == 8,
          "threads a component at the usual head sizes");
}

} // namespace

int main() {
    keysKeepTheOrder();
    radixFindsTheKthLargest();
    selectionEqualsTheCpuKernels();
    mergeMatchesOnePass();
    plans();
    return sparqlab::test::finish("test_cuda_logic");
}
