// Quest (METHODS.md §3): pages of P consecutive valid positions, an upper bound of each page's
// logits from its per-channel min and max key, the best pages by that bound (the current
// token's page and the local window's pages forced), exact attention over their positions.

#include "attention/method_kit.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& questDecodeKernel();

namespace {

int64_t ceilDiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

/// METHODS.md §3.5: widths of the position and page index lists.
std::pair<int64_t, int64_t> questWidths(int64_t S, int64_t k, int64_t P, int64_t l) {
    const int64_t kp = ceilDiv(std::min(k, S + P), P);
    const int64_t npMax = std::max(kp, 1 + ceilDiv(std::max<int64_t>(l, 1) - 1, P));
    return {std::min(S, P * npMax), std::min(ceilDiv(S, P), npMax)};
}

/// Quest over the steps [t0, t0 + n) of `p`: writes the selection, the page selection and
/// the bound U of those steps into the given [B, Hkv, g or U, T, …] tensors.
struct Pages {
    Selection positions; ///< [B, Hkv, g, n, S]
    Selection pages;     ///< [B, Hkv, U, n, NP]
    at::Tensor bound;    ///< [B, Hkv, g, n, NP]
};

Pages questSteps(const Prepared& p, const AttentionConfig& c, int64_t t0, int64_t n) {
    const int64_t P = c.pageSize, B = p.B, Hkv = p.Hkv, S = p.S, D = p.D;
    const int64_t NP = ceilDiv(S, P);
    const at::Tensor valid = p.valid.narrow(1, t0, n);   // [B, n, S]
    const at::Tensor nValid = p.nValid.narrow(1, t0, n); // [B, n]
    // §3.1: pages over the valid positions in forward-index order; invalid → dummy page NP.
    const at::Tensor fi = forwardIndex(valid);
    const at::Tensor pageOf = at::where(valid, at::floor_divide(fi, P), at::full_like(fi, NP));
    const at::Tensor nPages = at::floor_divide(nValid + (P - 1), P); // [B, n]
    // §3.2: per-page min and max of K, per step (each step has its own valid row): the valid
    // positions in forward order (the invalid ones after them), P per page.
    const at::Tensor order =
        std::get<1>(at::sort(at::where(valid, at::zeros_like(fi), at::ones_like(fi)),
                             /*stable=*/true, /*dim=*/-1, /*descending=*/false)); // [B, n, S]
    const at::Tensor slots = at::constant_pad_nd(order, {0, NP * P - S}, 0);      // [B, n, NP·P]
    const at::Tensor occupied =
        at::arange(NP * P, nValid.options()).view({1, 1, NP * P}).lt(nValid.unsqueeze(-1));
    const at::Tensor Kc =
        p.k.unsqueeze(2)
            .expand({B, Hkv, n, S, D})
            .gather(3, slots.view({B, 1, n, NP * P, 1}).expand({B, Hkv, n, NP * P, D}));
    const at::Tensor occ = occupied.view({B, 1, n, NP * P, 1});
    const auto opts = p.options();
    const at::Tensor kmin =
        at::where(occ, Kc, at::scalar_tensor(kInf, opts)).view({B, Hkv, n, NP, P, D}).amin(4);
    const at::Tensor kmax =
        at::where(occ, Kc, at::scalar_tensor(-kInf, opts)).view({B, Hkv, n, NP, P, D}).amax(4);
    const at::Tensor pageIds = at::arange(NP, nPages.options());
    const at::Tensor pvalid = pageIds.view({1, 1, NP}).lt(nPages.unsqueeze(-1)); // [B, n, NP]
    const at::Tensor pv = pvalid.view({B, 1, n, NP, 1});
    const at::Tensor zero = at::scalar_tensor(0, opts);
    const at::Tensor lo = at::where(pv, kmin, zero).unsqueeze(2); // [B, Hkv, 1, n, NP, D]
    const at::Tensor hi = at::where(pv, kmax, zero).unsqueeze(2);
    const at::Tensor qe = p.qg.narrow(3, t0, n).unsqueeze(4); // [B, Hkv, g, n, 1, D]
    // U_h[π] = Σ_d max(q_d·m_d, q_d·M_d), scaled and soft-capped as the model's logits (an
    // upper bound of every logit of the page: both are monotone).
    const at::Tensor dots = at::maximum(qe * lo, qe * hi).sum(-1); // [B, Hkv, g, n, NP]
    const at::Tensor U =
        scaledLogits(p, dots).masked_fill(pvalid.view({B, 1, 1, n, NP}).logical_not(), -kInf);
    const at::Tensor G = groupRankScore(U, probabilities(p, U), c.gqa);
    // §3.3: the pages of the max(1, l_eff) most recent positions are forced; n_p pages in all.
    const at::Tensor kEff = nValid.clamp_max(c.k);
    const at::Tensor lEff = kEff.clamp_max(c.effectiveLocal());
    const at::Tensor m = lEff.clamp_min(1);
    const at::Tensor f0 = at::floor_divide(nValid - m, P);
    const at::Tensor forced = pvalid.logical_and(pageIds.view({1, 1, NP}).ge(f0.unsqueeze(-1)));
    const int64_t kp = ceilDiv(std::min(c.k, S + P), P);
    const at::Tensor np = at::minimum((nPages - f0).clamp_min(kp), nPages);
    Selection pages = select(G, pvalid.view({B, 1, 1, n, NP}), forced.view({B, 1, 1, n, NP}),
                             np.view({B, 1, 1, n}));
    // §3.4: the positions of the chosen pages.
    const at::Tensor pg =
        pageOf.clamp_max(NP - 1).view({B, 1, 1, n, S}).expand({B, Hkv, pages.mask.size(2), n, S});
    Pages out;
    out.positions.mask = pages.mask.gather(-1, pg).logical_and(valid.view({B, 1, 1, n, S}));
    out.positions.margin = pages.margin;
    out.positions.marginRel = pages.marginRel;
    out.pages = pages;
    out.bound = U;
    return out;
}

AttentionResult runQuest(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                         const AttendOptions& o) {
    checkBudget(c.k, c.effectiveLocal());
    if (c.pageSize < 1)
        fail("the page size must be at least 1, got " + std::to_string(c.pageSize));
    // Steps in chunks: the per-step page bounds take [Hkv, n, S, D].
    const int64_t chunk = stepsPerChunk(p.B * p.Hkv * p.S * p.D);
    std::vector<at::Tensor> masks, margins, rels, pageMasks, bounds;
    for (int64_t t0 = 0; t0 < p.T; t0 += chunk) {
        const int64_t n = std::min(chunk, p.T - t0);
        const Pages pg = questSteps(p, c, t0, n);
        masks.push_back(pg.positions.mask.expand({p.B, p.Hkv, p.g, n, p.S}));
        margins.push_back(pg.pages.margin.expand({p.B, p.Hkv, p.g, n}));
        rels.push_back(pg.pages.marginRel.expand({p.B, p.Hkv, p.g, n}));
        pageMasks.push_back(pg.pages.mask.expand({p.B, p.Hkv, p.g, n, pg.pages.mask.size(-1)}));
        bounds.push_back(pg.bound);
    }
    const Selection sel{at::cat(masks, 3), at::cat(margins, 3), at::cat(rels, 3)};
    const auto [wPos, wPage] = questWidths(p.S, c.k, c.pageSize, c.effectiveLocal());
    AttentionResult out = attendSelection(p, exactLogits(p), sel, wPos, o);
    if (o.diagnostics) {
        out.pageIndices = maskToIndices(p.heads(at::cat(pageMasks, 3)), wPage);
        out.pageScore = p.heads(at::cat(bounds, 3));
    }
    return out;
}

StepOneView questStepOne(const StepOneInputs& in) {
    StepOneView v;
    const int64_t P = in.config->pageSize;
    v.caption = "<b>Step 1</b> — Quest's upper bound U on q·k for each page of " +
                std::to_string(P) +
                " positions (from the page's smallest and largest key in each component); the "
                "highest pages (orange) are attended";
    // With GQA one set of pages serves the group (SPARQ.md §2.6): the bars are this head's alone.
    if (in.heads > in.kvHeads && in.config->gqa != GroupSelect::PerHead)
        v.caption += " (one set for the group's " + std::to_string(in.heads / in.kvHeads) +
                     " heads by the GQA rule " + groupSelectName(in.config->gqa) +
                     ": this head's own bounds may rank the pages otherwise)";
    v.xLabel = "position (one bar per page)";
    v.yLabel = "page bound U";
    v.x0 = static_cast<double>(P - 1) / 2;
    v.dx = static_cast<double>(P);
    const at::Tensor u = in.result->pageScore[0][in.head].to(at::kDouble).contiguous();
    for (int64_t i = 0; i < u.numel(); ++i) {
        const double x = u.data_ptr<double>()[i];
        v.values.push_back(std::isfinite(x) ? x : 0.0);
        v.used.push_back(0);
    }
    const at::Tensor pages = in.result->pageIndices[0][in.head].to(at::kLong).contiguous();
    for (int64_t i = 0; i < pages.numel(); ++i) {
        const int64_t page = pages.data_ptr<int64_t>()[i];
        if (page >= 0 && page < static_cast<int64_t>(v.used.size()))
            v.used[static_cast<size_t>(page)] = 1;
    }
    return v;
}

double questTransfer(const TransferArgs& a) {
    return 2.0 * transfer::ceilDiv(a.S, a.pageSize) * a.d +
           1.0 * a.pageSize * transfer::ceilDiv(a.k, a.pageSize) * a.kv() + a.kv();
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(quest) {
    return {.info = {.id = Method::Quest,
                     .name = "quest",
                     .label = "Quest",
                     .summary = "pages ranked by an upper bound from each page's min and max key "
                                "(Tang et al. 2024)",
                     .spec = "METHODS.md §3",
                     .params = {Param::K, Param::PageSize, Param::Local, Param::Gqa},
                     .transfer = detail::questTransfer,
                     .transferFormula = "2·⌈S/P⌉·d + 2·P·⌈k/P⌉·d + 2·d",
                     .evalGrid = "k=64,128,256,512 page-size=16"},
            .run = detail::runQuest,
            .decode = &detail::questDecodeKernel(),
            .stepOne = detail::questStepOne};
}
