// The causal driver (causal.h), attendCausal and causalLogits (attention.h).

#include "causal.h"

#include "method_kit.h"
#include "method_spec.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

namespace sparqlab::attention {

using detail::computeType;
using detail::fail;
using detail::kInf;
using detail::shapeOf;

namespace {

void checkShapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t firstPos,
                 int64_t T) {
    if (q.dim() != 4 || k.dim() != 4 ||
        (v.defined() && (v.dim() != 4 || v.sizes().slice(0, 3) != k.sizes().slice(0, 3))))
        fail("causal attention needs q [B, Hq, T, D], K [B, Hkv, S, D] and V [B, Hkv, S, Dv], "
             "got q " +
             shapeOf(q) + ", K " + shapeOf(k) +
             (v.defined() ? ", V " + shapeOf(v) : std::string()));
    const int64_t B = q.size(0), Hq = q.size(1), D = q.size(3), Hkv = k.size(1), S = k.size(2);
    if (k.size(0) != B || k.size(3) != D || Hkv < 1 || Hq % Hkv != 0)
        fail("causal attention: q " + shapeOf(q) + " does not fit K " + shapeOf(k));
    if (firstPos < 0 || firstPos + T > S)
        fail("causal attention: queries at " + std::to_string(firstPos) + ".." +
             std::to_string(firstPos + T - 1) + " but only " + std::to_string(S) + " keys");
}

bool consecutive(const std::vector<int64_t>& pos, size_t from, size_t to) {
    for (size_t i = from + 1; i < to; ++i)
        if (pos[i] != pos[i - 1] + 1)
            return false;
    return true;
}

} // namespace

void checkHistory(const CausalInputs& in, const AttentionConfig& c) {
    const CausalHooks* hooks = methodSpec(c.method).causal;
    if (!hooks)
        return;
    const CausalHooks& h = *hooks;
    const std::vector<int64_t>& pos = in.positions;
    const size_t T = pos.size(), first = static_cast<size_t>(in.firstStep);
    bool ok = true;
    switch (h.history) {
    case CausalHooks::History::All:
        ok = pos.front() == 0 && consecutive(pos, 0, T);
        break;
    case CausalHooks::History::Run:
        ok = T >= 2 && consecutive(pos, 0, T);
        break;
    case CausalHooks::History::Window: {
        // Steps whose windows hold every position keep them all, whatever they voted
        // (METHODS.md §7.2): an example shorter than the window needs no earlier query. A later
        // step of the run past the window does rank, with its own window's queries.
        if (pos.back() + 1 <= c.snapWindow)
            break;
        const int64_t need = std::min(c.snapWindow, pos[first] + 1);
        const int64_t from = pos[first] + 1 - need;
        const auto it = std::find(pos.begin(), pos.end(), from);
        ok = it != pos.end() && consecutive(pos, static_cast<size_t>(it - pos.begin()), first + 1);
        break;
    }
    }
    if (!ok)
        fail(historyRequirement(c) + "; this one holds " + std::to_string(T) + " of " +
             std::to_string(in.k.size(2)) + " positions' queries");
}

namespace {

/// The keys each of n queries at pos0 … sees: [B, n, S].
at::Tensor visibleKeys(int64_t B, int64_t S, int64_t pos0, int64_t n, const at::Tensor& like) {
    const auto longs = like.options().dtype(at::kLong);
    return at::arange(S, longs)
        .view({1, 1, S})
        .le(at::arange(pos0, pos0 + n, longs).view({1, n, 1}))
        .expand({B, n, S});
}

/// Joins the results of several chunks of steps along the query axis (index lists padded).
AttentionResult concatSteps(std::vector<AttentionResult>& parts) {
    if (parts.size() == 1)
        return std::move(parts.front());
    AttentionResult out;
    auto join = [&](at::Tensor AttentionResult::*f, bool pad) {
        std::vector<at::Tensor> ts;
        int64_t width = 0;
        for (const AttentionResult& r : parts) {
            if (!(r.*f).defined())
                return;
            ts.push_back(r.*f);
            width = std::max(width, (r.*f).size(-1));
        }
        if (pad)
            for (at::Tensor& t : ts)
                if (t.size(-1) < width)
                    t = at::constant_pad_nd(t, {0, width - t.size(-1)}, -1);
        out.*f = at::cat(ts, 2);
    };
    join(&AttentionResult::y, false);
    join(&AttentionResult::alpha, false);
    join(&AttentionResult::count, false);
    join(&AttentionResult::mass, false);
    join(&AttentionResult::selected, false);
    join(&AttentionResult::indices, true);
    join(&AttentionResult::logits, false);
    join(&AttentionResult::probs, false);
    return out;
}

/// The sink logits of `c` laid out beside scores [B, Hkv, g·T, S]: [1, Hkv, g·T, 1] (undefined
/// without sinks).
at::Tensor headSinks(const AttentionConfig& c, int64_t B, int64_t Hkv, int64_t g, int64_t T) {
    if (!c.sinks.defined())
        return {};
    if (c.sinks.numel() != Hkv * g)
        fail("the attention sinks hold " + std::to_string(c.sinks.numel()) +
             " logits, one per query head is " + std::to_string(Hkv * g));
    (void)B;
    return c.sinks.view({1, Hkv, g, 1}).expand({1, Hkv, g, T}).reshape({1, Hkv, g * T, 1});
}

/// Dense attention of every query at once, as one batched product per KV head (Eq. 2): the
/// model's prefill and training path. Dense steps keep what the stateful methods need to take
/// over after them when the state asks for it.
at::Tensor denseCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       int64_t firstPos, const AttentionConfig& c, CausalState* state) {
    const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), Dv = v.size(3);
    const int64_t Hkv = k.size(1), S = k.size(2), g = Hq / Hkv;
    at::Tensor scores = causalLogits(q, k, firstPos, c).view({B, Hkv, g * T, S});
    const at::Tensor sink = headSinks(c, B, Hkv, g, T);
    if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()))
        scores = softmaxWithSink(scores, sink); // training: out of place, so autograd can follow
    else                                        // inference: in place, no second score-sized buffer
        softmaxWithSinkInPlace(scores, sink);
    if (state && state->observe)
        observeCausal(q, k, v, firstPos, scores.view({B, Hq, T, S}), *state);
    return at::matmul(scores, v.to(computeType(q)))
        .view({B, Hkv, g, T, Dv})
        .reshape({B, Hq, T, Dv});
}

} // namespace

void observeCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t firstPos,
                   const at::Tensor& probs, CausalState& state) {
    CausalChunk chunk;
    chunk.q = q;
    chunk.k = k;
    chunk.v = v;
    chunk.pos0 = firstPos;
    chunk.steps = false;
    for (const MethodSpec* s : methodSpecs())
        if (s->causal && s->causal->observeDense)
            s->causal->observeDense(chunk, probs, state.observeConfig, state.methods[s->info.id]);
}

std::string historyRequirement(const AttentionConfig& c) {
    const MethodSpec& s = methodSpec(c.method);
    if (!s.causal)
        return {};
    const std::string name = s.info.name;
    switch (s.causal->history) {
    case CausalHooks::History::All:
        return name + " needs the queries of every position up to its step (a capture made with "
                      "--all-queries)";
    case CausalHooks::History::Run:
        return name + " needs the queries of consecutive positions up to the last (a capture "
                      "made with --all-queries)";
    case CausalHooks::History::Window:
        return name + " needs the queries of the last " + std::to_string(c.snapWindow) +
               " positions (a capture made with --all-queries)";
    }
    return {};
}

AttentionResult runCausal(const CausalInputs& in, const AttentionConfig& c, CausalState* state,
                          const CausalOptions& o) {
    const int64_t T = in.q.defined() && in.q.dim() == 4 ? in.q.size(2) : 0;
    if (T < 1 || static_cast<int64_t>(in.positions.size()) != T)
        fail("causal steps need one position per query: q " +
             (in.q.defined() ? shapeOf(in.q) : std::string("none")) + ", " +
             std::to_string(in.positions.size()) + " positions");
    if (in.firstStep < 0 || in.firstStep > T)
        fail("the first step " + std::to_string(in.firstStep) + " is outside 0.." +
             std::to_string(T));
    for (int64_t t = 1; t < T; ++t)
        if (in.positions[t] <= in.positions[t - 1])
            fail("causal steps need strictly increasing positions");
    checkShapes(in.q, in.k, in.v, in.positions.front(), 1);
    const int64_t B = in.q.size(0), Hq = in.q.size(1), S = in.k.size(2);
    if (in.positions.back() >= S)
        fail("causal attention: a query at " + std::to_string(in.positions.back()) + " but only " +
             std::to_string(S) + " keys");

    const MethodSpec& spec = methodSpec(c.method);
    CausalState fresh;
    std::shared_ptr<MethodState>* methodState = nullptr;
    if (spec.causal) {
        CausalState* st = state ? state : &fresh;
        methodState = &st->methods[c.method];
        if (!*methodState && o.checkHistory)
            checkHistory(in, c);
    }
    const int64_t chunk = std::max<int64_t>(1, o.chunkElements / std::max<int64_t>(1, B * Hq * S));
    std::vector<AttentionResult> results;
    // Consecutive queries are one chunk's rows; a gap in the positions starts a new chunk.
    for (int64_t t0 = 0; t0 < T;) {
        const bool steps = t0 >= in.firstStep;
        int64_t n = 1;
        const int64_t limit = steps ? chunk : std::min(chunk, in.firstStep - t0);
        while (n < limit && t0 + n < T && in.positions[t0 + n] == in.positions[t0 + n - 1] + 1)
            ++n;
        if (!steps && !spec.causal) { // history feeds only stateful methods
            t0 += n;
            continue;
        }
        CausalChunk ck;
        ck.q = in.q.narrow(2, t0, n);
        ck.k = in.k;
        ck.v = in.v;
        ck.pos0 = in.positions[t0];
        ck.valid = visibleKeys(B, S, ck.pos0, n, in.q);
        ck.steps = steps;
        ck.diagnostics = o.attend.diagnostics;
        ck.extra = &in.extra;
        AttentionResult dense;
        if (steps && o.withDense) {
            AttendOptions keep;
            keep.keepScores = true;
            keep.validate = o.attend.validate;
            dense = attendSteps({ck.q, ck.k, ck.v, ck.valid, {}, {}}, o.denseMods, keep);
            ck.dense = &dense;
        }
        AttentionResult r;
        if (spec.causal)
            r = spec.causal->run(ck, c, *methodState, o.attend);
        else if (c.method == Method::Dense && ck.dense)
            r = dense;
        else
            r = attendSteps({ck.q, ck.k, ck.v, ck.valid, {}, {}, in.extra}, c, o.attend);
        if (steps) {
            if (o.onChunk)
                o.onChunk(t0 - in.firstStep, n, r, ck.dense);
            else
                results.push_back(std::move(r));
        }
        t0 += n;
    }
    return results.empty() ? AttentionResult{} : concatSteps(results);
}

at::Tensor attendCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        int64_t firstPos, const AttentionConfig& c, CausalState* state) {
    if (q.dim() != 4)
        fail("causal attention needs q [B, Hq, T, D], K, V [B, Hkv, S, D], got q " + shapeOf(q));
    const int64_t T = q.size(2);
    checkShapes(q, k, v, firstPos, T);
    if (c.method == Method::Dense)
        return denseCausal(q, k, v, firstPos, c, state);
    CausalInputs in;
    in.q = q;
    in.k = k;
    in.v = v;
    for (int64_t t = 0; t < T; ++t)
        in.positions.push_back(firstPos + t);
    CausalOptions o;
    o.attend.validate = false;
    o.attend.diagnostics = false;
    o.chunkElements = int64_t{1} << 22; // every query is one decode step: [T, S] bounded
    return runCausal(in, c, state, o).y;
}

CausalState CausalState::clone() const {
    CausalState c = *this;
    for (auto& [m, s] : c.methods)
        if (s)
            s = s->clone();
    return c;
}

at::Tensor causalLogits(const at::Tensor& q, const at::Tensor& k, int64_t firstPos,
                        const AttentionConfig& c) {
    if (q.dim() != 4 || k.dim() != 4)
        fail("causal attention needs q [B, Hq, T, D] and K [B, Hkv, S, D], got q " + shapeOf(q) +
             ", K " + shapeOf(k));
    const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
    const int64_t Hkv = k.size(1), S = k.size(2);
    if (k.size(0) != B || k.size(3) != D || Hkv < 1 || Hq % Hkv != 0)
        fail("causal attention: q " + shapeOf(q) + " does not fit K " + shapeOf(k));
    if (firstPos < 0 || firstPos + T > S)
        fail("causal attention: queries at " + std::to_string(firstPos) + ".." +
             std::to_string(firstPos + T - 1) + " but only " + std::to_string(S) + " keys");
    detail::checkModifiers(c);
    const int64_t g = Hq / Hkv;
    const at::ScalarType ct = computeType(q);
    const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(D));
    const bool grad = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad());
    // One batched product per KV head: [B, Hkv, g·T, S].
    at::Tensor z =
        at::matmul(q.to(ct).reshape({B, Hkv, g * T, D}), k.to(ct).transpose(-1, -2)) * scale;
    if (c.softcap > 0) // CONTRACTS.md §7: c·tanh(z/c)
        z = grad ? at::tanh(z / c.softcap) * c.softcap : z.div_(c.softcap).tanh_().mul_(c.softcap);
    const auto longs = q.options().dtype(at::kLong);
    const at::Tensor keyPos = at::arange(S, longs).unsqueeze(0);
    const at::Tensor qPos = at::arange(firstPos, firstPos + T, longs).unsqueeze(1);
    at::Tensor visible = keyPos.le(qPos); // [T, S]
    if (c.slidingWindow > 0)
        visible = visible.logical_and((qPos - keyPos).lt(c.slidingWindow));
    if (c.chunk > 0) // chunked attention: the query's own chunk only
        visible = visible.logical_and(
            at::floor_divide(keyPos, c.chunk).eq(at::floor_divide(qPos, c.chunk)));
    const at::Tensor mask =
        at::zeros({T, S}, z.options()).masked_fill_(visible.logical_not(), -kInf);
    z = z.view({B, Hkv, g, T, S});
    z = grad ? z + mask : z.add_(mask);
    return z.view({B, Hq, T, S});
}

at::Tensor causalProbabilities(const at::Tensor& q, const at::Tensor& k, int64_t firstPos,
                               const AttentionConfig& c) {
    const at::Tensor z = causalLogits(q, k, firstPos, c); // [B, Hq, T, S]
    if (!c.sinks.defined())
        return at::softmax(z, -1);
    if (c.sinks.numel() != z.size(1))
        fail("the attention sinks hold " + std::to_string(c.sinks.numel()) +
             " logits, one per query head is " + std::to_string(z.size(1)));
    return softmaxWithSink(z, c.sinks.view({1, z.size(1), 1, 1}));
}

} // namespace sparqlab::attention
