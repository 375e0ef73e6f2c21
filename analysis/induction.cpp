#include "induction.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <random>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

InductionReport inductionReport(model::CausalLMImpl& net, const InductionOptions& o) {
    const model::ModelConfig& c = net.config();
    if (o.length < 2 || o.sequences < 1)
        throw att::AttentionError("the induction diagnostic needs at least 2 tokens per showing "
                                  "and one sequence");
    const bool bos = c.bosId >= 0 && c.bosId < c.vocabSize;
    const int64_t off = bos ? 1 : 0, R = o.length, S = off + 2 * R;
    if (S > c.maxPositions)
        throw att::AttentionError("the induction sequence (" + std::to_string(S) +
                                  " tokens) is longer than the model's context of " +
                                  std::to_string(c.maxPositions));
    const int64_t limit = o.vocabLimit > 0 ? std::min(o.vocabLimit, c.vocabSize) : c.vocabSize;
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int64_t> pick(0, limit - 1);
    auto randomId = [&]() { // never a special id the model reads as a boundary
        int64_t id = pick(rng);
        while (limit > 2 &&
               (id == c.bosId || std::find(c.eosIds.begin(), c.eosIds.end(), id) != c.eosIds.end()))
            id = pick(rng);
        return id;
    };

    torch::NoGradGuard noGrad;
    const int64_t L = c.nLayers, Hq = c.nHeads;
    InductionReport r;
    r.layers = L;
    r.heads = Hq;
    r.length = R;
    r.sequences = o.sequences;
    r.bos = bos;
    r.prevToken = at::zeros({L, Hq}, at::kDouble);
    r.induction = at::zeros({L, Hq}, at::kDouble);
    const at::Tensor rows = at::arange(S, at::kLong);
    const at::Tensor second = at::arange(off + R, S, at::kLong);
    for (int64_t n = 0; n < o.sequences; ++n) {
        std::vector<int64_t> ids;
        if (bos)
            ids.push_back(c.bosId);
        for (int64_t i = 0; i < R; ++i)
            ids.push_back(randomId());
        for (int64_t i = 0; i < R; ++i)
            ids.push_back(ids[static_cast<size_t>(off + i)]);
        const model::CaptureHook hook = [&](int64_t layer, const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor&) {
            const at::Tensor p = att::causalProbabilities(q, k, 0, net.layerAttention(layer))[0].to(
                at::kCPU, at::kDouble); // [Hq, S, S], on the host whatever the model's device
            // previous token: (i, i − 1) for i ≥ 1; induction: (i, i − R + 1) in the second showing
            const at::Tensor prev =
                p.index({at::indexing::Slice(), rows.slice(0, 1), rows.slice(0, 0, S - 1)});
            const at::Tensor ind = p.index({at::indexing::Slice(), second, second - R + 1});
            r.prevToken[layer].add_(prev.mean(-1));
            r.induction[layer].add_(ind.mean(-1));
        };
        const at::Tensor logits =
            net.forward(at::tensor(ids, at::kLong).unsqueeze(0), nullptr, {}, hook)[0].cpu();
        const at::Tensor nll = -at::log_softmax(logits.slice(0, 0, S - 1).to(at::kDouble), -1)
                                    .gather(1, at::tensor(ids, at::kLong).slice(0, 1).unsqueeze(1))
                                    .squeeze(1); // nll[i] is the loss of token i + 1
        // First showing: tokens off+1 … off+R−1; second: off+R+1 … S−1 (each showing's first
        // token is unpredictable from before it).
        r.lossFirst += nll.slice(0, off, off + R - 1).mean().item<double>();
        r.lossSecond += nll.slice(0, off + R, S - 1).mean().item<double>();
    }
    const double n = static_cast<double>(o.sequences);
    r.prevToken /= n;
    r.induction /= n;
    r.lossFirst /= n;
    r.lossSecond /= n;
    const int64_t best = r.induction.argmax().item<int64_t>();
    r.bestLayer = best / Hq;
    r.bestHead = best % Hq;
    r.bestInduction = r.induction.view(-1)[best].item<double>();
    return r;
}

std::string inductionJson(const InductionReport& r) {
    auto grid = [](const at::Tensor& t) {
        nlohmann::json rows = nlohmann::json::array();
        for (int64_t l = 0; l < t.size(0); ++l) {
            nlohmann::json row = nlohmann::json::array();
            for (int64_t h = 0; h < t.size(1); ++h)
                row.push_back(t[l][h].item<double>());
            rows.push_back(std::move(row));
        }
        return rows;
    };
    const nlohmann::json j{
        {"format", "sparqlab.heads"},
        {"format_version", 1},
        {"length", r.length},
        {"sequences", r.sequences},
        {"bos", r.bos},
        {"prev_token", grid(r.prevToken)},
        {"induction", grid(r.induction)},
        {"loss_first", r.lossFirst},
        {"loss_second", r.lossSecond},
        {"best", {{"layer", r.bestLayer}, {"head", r.bestHead}, {"induction", r.bestInduction}}}};
    return j.dump(2);
}

} // namespace sparqlab::analysis
