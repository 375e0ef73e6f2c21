#include "lab.h"

#include "analysis/calibrate_run.h"
#include "analysis/compressed_keys.h"
#include "analysis/statistics.h"
#include "attention/budget_stats.h"
#include "attention/method_spec.h"
#include "attention/select.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

[[noreturn]] void fail(const std::string& what) {
    throw att::AttentionError(what);
}

template <typename T> std::vector<T> toVec(const at::Tensor& t) {
    const at::Tensor c = t.contiguous().to(std::is_same_v<T, float> ? at::kFloat : at::kLong);
    const T* p = c.data_ptr<T>();
    return std::vector<T>(p, p + c.numel());
}

std::vector<int64_t> validIndices(const at::Tensor& padded) {
    std::vector<int64_t> out;
    for (const int64_t i : toVec<int64_t>(padded))
        if (i >= 0)
            out.push_back(i);
    return out;
}

/// ‖y − ref‖ / ‖ref‖ (0 when ref is 0).
double relativeError(const at::Tensor& y, const at::Tensor& ref) {
    const double norm = ref.norm().item<double>();
    return norm > 0 ? (y - ref).norm().item<double>() / norm : 0.0;
}

void checkLayer(const LabCapture& c, int64_t layer) {
    if (c.layers() == 0)
        fail("no capture yet: run a prompt first");
    if (layer < 0 || layer >= c.layers())
        fail("layer " + std::to_string(layer) + " is outside 0.." + std::to_string(c.layers() - 1));
}

} // namespace

att::AttentionResult denseStep(const at::Tensor& qHistory, const at::Tensor& k, const at::Tensor& v,
                               const att::AttentionConfig& denseCfg, bool validate) {
    att::AttentionInputs in;
    in.q = qHistory.select(1, qHistory.size(1) - 1).unsqueeze(0);
    in.k = k.unsqueeze(0);
    in.v = v.unsqueeze(0);
    att::AttendOptions o;
    o.keepScores = true;
    o.validate = validate;
    o.diagnostics = false; // every position: y, logits and probs are what is read
    return att::attend(in, denseCfg, o);
}

namespace {

/// The held queries as the causal driver's input: positions S − T … S − 1, the last one the
/// decode step.
att::CausalInputs labInputs(const at::Tensor& qHistory, const at::Tensor& k, const at::Tensor& v,
                            const std::map<std::string, at::Tensor>& extra = {}) {
    const int64_t S = k.size(1), T = qHistory.size(1);
    att::CausalInputs in;
    in.q = qHistory.unsqueeze(0);
    in.k = k.unsqueeze(0);
    in.v = v.unsqueeze(0);
    for (int64_t t = 0; t < T; ++t)
        in.positions.push_back(S - T + t);
    in.firstStep = T - 1;
    in.extra = extra;
    return in;
}

} // namespace

std::pair<att::AttentionResult, att::AttentionResult>
decodeStep(const at::Tensor& qHistory, const at::Tensor& k, const at::Tensor& v,
           const att::AttentionConfig& cfg, const att::AttentionConfig& denseCfg, bool keepScores,
           const att::AttentionResult* denseDone, bool validate,
           const att::CausalState* historyDone, const std::map<std::string, at::Tensor>& extra) {
    const att::AttentionResult dense =
        denseDone ? *denseDone : denseStep(qHistory, k, v, denseCfg, validate);
    att::CausalInputs in = labInputs(qHistory, k, v, extra);
    att::CausalOptions co;
    co.attend.keepScores = keepScores;
    co.attend.validate = validate;
    att::CausalState state;
    if (historyDone) { // the history's state, made before: only the last query is left to run
        state = historyDone->clone();
        in.q = in.q.narrow(2, in.firstStep, 1);
        in.positions = {in.positions.back()};
        in.firstStep = 0;
    }
    att::AttentionResult r = att::runCausal(in, cfg, &state, co);
    for (at::Tensor* t :
         {&r.y,       &r.indices,    &r.selected,    &r.count,     &r.mass,  &r.alpha,
          &r.tau,     &r.compIdx,    &r.margin,      &r.marginRel, &r.yTopk, &r.weightSum,
          &r.estMass, &r.massMargin, &r.pageIndices, &r.pageScore, &r.votes, &r.pooled,
          &r.logits,  &r.probs,      &r.zHat,        &r.sHat})
        if (t->defined() && t->dim() >= 3)
            *t = t->select(2, 0); // the one step: [1, Hq, …]
    if (r.meanV.defined() && r.meanV.dim() == 4)
        r.meanV = r.meanV.select(2, 0);
    return {r, dense};
}

att::CausalState historyState(const at::Tensor& qHistory, const at::Tensor& k, const at::Tensor& v,
                              const att::AttentionConfig& cfg) {
    att::CausalInputs in = labInputs(qHistory, k, v);
    att::checkHistory(in, cfg); // the whole of it: the last query runs later, from this state
    in.q = in.q.narrow(2, 0, in.firstStep);
    in.positions.pop_back();
    att::CausalState state;
    if (in.positions.empty())
        return state;
    att::CausalOptions co;
    co.attend.validate = false;
    co.checkHistory = false;
    co.chunkElements = int64_t{256} * qHistory.size(0) * k.size(1); // 256 queries at a time
    att::runCausal(in, cfg, &state, co);
    return state;
}

std::pair<att::AttentionResult, att::AttentionResult>
layerStep(const LabCapture& c, int64_t layer, const att::AttentionConfig& base, bool keepScores) {
    const size_t l = static_cast<size_t>(layer);
    c.checkQuadratic(base.method);
    const std::shared_ptr<const LabCapture::LayerCache> cache = c.layerCache(layer);
    const att::AttentionConfig cfg = c.layerConfig(layer, base);
    if (c.compressedLayer(layer)) { // DeepSeek-V4: a method among the entries and window seen
        att::AttendOptions o;
        o.keepScores = keepScores;
        o.validate = false;
        return {att::attend(cache->inputs(c.q[l]), compressedConfig(c.info, layer, cfg), o),
                cache->dense};
    }
    const std::shared_ptr<const att::CausalState> history = c.historyState(layer, cfg);
    return decodeStep(c.qSteps[l], c.k[l], c.v[l], cfg, c.info.layerConfig(layer), keepScores,
                      &cache->dense, /*validate=*/false, history.get(), c.methodInputs(layer));
}

// --- LabCapture -------------------------------------------------------------------------------

int64_t labHistory(int64_t positions, int64_t layers, int64_t heads, int64_t headDim,
                   int64_t budgetBytes) {
    const int64_t perPosition = layers * heads * headDim * 4;
    const int64_t fit = perPosition > 0 ? budgetBytes / perPosition : positions;
    return std::min(positions, std::max<int64_t>(64, fit));
}

std::shared_ptr<LabCapture> LabCapture::from(const model::CaptureExample& e,
                                             const model::CaptureInfo& info) {
    auto c = std::make_shared<LabCapture>();
    const int64_t T = e.q.size(2);
    for (int64_t l = 0; l < e.q.size(0); ++l) {
        c->q.push_back(e.q[l].select(1, T - 1).to(at::kFloat).contiguous());
        c->qSteps.push_back(e.q[l].to(at::kFloat).contiguous());
        c->k.push_back(e.k[l].to(at::kFloat).contiguous());
        c->v.push_back(e.v[l].to(at::kFloat).contiguous());
    }
    // Checked here once, so that every redraw can skip attend()'s own check (SPARQ.md §2.1).
    for (const auto* list : {&c->qSteps, &c->k, &c->v})
        for (const at::Tensor& t : *list)
            if (!at::isfinite(t).all().item<bool>())
                fail("the capture has non-finite entries (NaN or inf) in q, K or V");
    if (e.indexScores.defined())
        for (int64_t l = 0; l < e.indexScores.size(0); ++l)
            c->indexScores.push_back(e.indexScores[l].to(at::kFloat).contiguous());
    if (e.entries.defined()) { // one layer's after another (CaptureInfo::entryOffset)
        const int64_t S = e.k.size(2);
        for (int64_t l = 0; l < e.q.size(0); ++l) {
            const int64_t at0 = info.entryOffset(l, S), C = info.entryCount(l, S);
            c->entries.push_back(e.entries.narrow(0, at0, C).to(at::kFloat).contiguous());
            c->entryScores.push_back(
                e.entryScores.defined()
                    ? e.entryScores.narrow(1, at0, C).to(at::kFloat).contiguous()
                    : at::full({T, C}, std::nan(""), at::kFloat));
        }
    }
    c->tokens = e.tokens;
    if (e.tokenIds.defined()) {
        const at::Tensor ids = e.tokenIds.to(at::kLong).contiguous();
        c->tokenIds.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    }
    c->info = info;
    return c;
}

model::CaptureExample LabCapture::toExample() const {
    model::CaptureExample e;
    const int64_t S = positions(), T = history();
    e.q = at::stack(qSteps);
    e.k = at::stack(k);
    e.v = at::stack(v);
    e.qPositions = at::arange(S - T, S, at::kLong);
    e.tokenIds = tokenIds.empty() ? at::arange(S, at::kLong) : at::tensor(tokenIds, at::kLong);
    e.tokens = tokens;
    e.tokens.resize(static_cast<size_t>(S));
    if (!indexScores.empty())
        e.indexScores = at::stack(indexScores);
    if (!entries.empty()) {
        e.entries = at::cat(entries, 0);
        e.entryScores = at::cat(entryScores, 1);
    }
    return e;
}

std::map<std::string, at::Tensor> LabCapture::methodInputs(int64_t layer) const {
    std::map<std::string, at::Tensor> in;
    if (static_cast<size_t>(layer) < indexScores.size()) {
        const int64_t S = positions(), T = history();
        in["index_scores"] = model::indexScoresByPosition(indexScores[static_cast<size_t>(layer)],
                                                          at::arange(S - T, S, at::kLong), S);
    }
    return in;
}

std::shared_ptr<LabCapture> LabCapture::atStep(int64_t step) const {
    if (step < 0 || step > steps())
        fail("decode step " + std::to_string(step) + " is outside 0.." + std::to_string(steps()));
    return atPosition(promptPositions - 1 + step);
}

std::shared_ptr<LabCapture> LabCapture::atPosition(int64_t last) const {
    const int64_t S = positions(), T = history();
    if (last < 0 || last >= S)
        fail("query position " + std::to_string(last) + " is outside 0.." + std::to_string(S - 1));
    if (last < S - T)
        fail("the query of position " + std::to_string(last) +
             " is not held (this capture "
             "keeps the last " +
             std::to_string(T) + " queries)");
    auto c = std::make_shared<LabCapture>();
    const int64_t n = last + 1, held = last + 1 - (S - T);
    for (size_t l = 0; l < q.size(); ++l) {
        c->qSteps.push_back(qSteps[l].narrow(1, 0, held));
        c->q.push_back(qSteps[l].select(1, held - 1));
        c->k.push_back(k[l].narrow(1, 0, n));
        c->v.push_back(v[l].narrow(1, 0, n));
        if (l < indexScores.size()) { // [T, S], or a block indexer's [Hi, T, blocks]
            const at::Tensor& x = indexScores[l];
            const int64_t bs = info.indexBlockSize;
            c->indexScores.push_back(
                x.dim() == 3 ? x.narrow(1, 0, held).narrow(2, 0, att::blocksForKeys(n, bs))
                             : x.narrow(0, 0, held).narrow(1, 0, n));
        }
        if (l < entries.size()) { // the entries complete in the first n positions
            const int64_t C = info.entryCount(static_cast<int64_t>(l), n);
            c->entries.push_back(entries[l].narrow(0, 0, C));
            c->entryScores.push_back(entryScores[l].narrow(0, 0, held).narrow(1, 0, C));
        }
    }
    c->tokens.assign(tokens.begin(),
                     tokens.begin() +
                         std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(tokens.size()),
                                                  static_cast<std::ptrdiff_t>(n)));
    c->tokenIds.assign(tokenIds.begin(),
                       tokenIds.begin() +
                           std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(tokenIds.size()),
                                                    static_cast<std::ptrdiff_t>(n)));
    c->info = info;
    c->promptPositions = 0;             // one position, as a capture of that prefix would be
    c->m_calibrations = calibrations(); // the prompt's calibration, not the prefix's
    return c;
}

model::CaptureExample LabCapture::layerExample(int64_t layer) const {
    const size_t l = static_cast<size_t>(layer);
    const int64_t S = positions(), T = history();
    model::CaptureExample ex;
    ex.q = qSteps[l];
    ex.k = k[l];
    ex.v = v[l];
    if (l < entries.size()) {
        ex.entries = entries[l];
        ex.entryScores = entryScores[l];
    }
    ex.qPositions = at::arange(S - T, S, at::kLong);
    return ex;
}

att::AttentionInputs LabCapture::LayerCache::inputs(const at::Tensor& q) const {
    att::AttentionInputs in;
    in.q = q.unsqueeze(0);
    in.k = keys;
    in.v = values;
    in.valid = seen;
    return in;
}

std::shared_ptr<const LabCapture::LayerCache> LabCapture::layerCache(int64_t layer) const {
    const std::lock_guard<std::mutex> lock(m_cacheMutex);
    auto& slot = m_layerCache[layer];
    if (!slot) {
        // What does not depend on the method or its parameters, once per layer.
        auto c = std::make_shared<LayerCache>();
        const size_t l = static_cast<size_t>(layer);
        if (compressedLayer(layer)) { // the entries, then every position (compressed_keys.h)
            const CompressedKeys ck = compressedKeys(info, layerExample(layer), layer, 1);
            c->keys = c->values = ck.keys;
            c->seen = ck.visible.select(1, 0);
            c->model = ck.model.select(1, 0);
            c->entries = ck.entries;
            c->mods = compressedConfig(info, layer, {});
        } else {
            c->keys = k[l].unsqueeze(0);
            c->values = v[l].unsqueeze(0);
            c->seen = at::ones({1, positions()}, at::kBool);
            c->mods = info.layerConfig(layer);
        }
        att::AttentionInputs in = c->inputs(q[l]);
        att::AttendOptions o;
        o.keepScores = true;
        o.validate = false;
        o.diagnostics = false; // every key: y, logits and probs are what is read
        c->dense = att::attend(in, c->mods, o);
        if (c->model.defined()) { // the model's own attention, over its choice
            in.valid = c->model;
            o.keepScores = false;
            c->modelY = att::attend(in, c->mods, o).y;
        }
        c->kMass = att::kMass(in.q, c->keys, c->seen, {0.5, 0.9, 0.99}, c->mods).count;
        c->kurtosis = kurtosis(q[l].unsqueeze(0));
        slot = c;
    }
    return slot;
}

void LabCapture::checkQuadratic(att::Method m) const {
    // S² scores per head is seconds (and TOVA's steps gigabytes) beyond a few thousand
    // positions, so the lab stops there with a line saying where the full study runs.
    const att::CausalHooks* h = att::methodSpec(m).causal;
    if (h && h->history != att::CausalHooks::History::Window &&
        positions() > kQuadraticMaxPositions)
        fail(att::methodName(m) +
             " reads every earlier query's attention (S² scores per head); "
             "the lab runs it up to S = " +
             std::to_string(kQuadraticMaxPositions) + ", this capture has " +
             std::to_string(positions()) +
             " positions (sparqlab-cli "
             "attend --method " +
             att::methodName(m) + " on an --all-queries capture runs it)");
}

std::shared_ptr<const att::CausalState>
LabCapture::historyState(int64_t layer, const att::AttentionConfig& cfg) const {
    const att::CausalHooks* h = att::methodSpec(cfg.method).causal;
    if (!h)
        return nullptr;
    checkQuadratic(cfg.method);
    // The state depends on the method and its own state parameters (TOVA's k), not on the rest.
    std::string key = att::methodName(cfg.method);
    for (const att::Param p : h->stateParams)
        key += " " + att::paramValue(cfg, p);
    const std::lock_guard<std::mutex> lock(m_cacheMutex);
    auto& slot = m_history[{layer, key}];
    if (!slot) {
        const size_t l = static_cast<size_t>(layer);
        slot = std::make_shared<const att::CausalState>(
            analysis::historyState(qSteps[l], k[l], v[l], cfg));
    }
    return slot;
}

at::Tensor LabCapture::coverageAt(int64_t layer, int64_t k) const {
    const std::shared_ptr<const LayerCache> keys = layerCache(layer);
    const std::lock_guard<std::mutex> lock(m_cacheMutex);
    auto& cov = m_coverage[{layer, k}];
    if (!cov.defined())
        cov = coverage(q[static_cast<size_t>(layer)].unsqueeze(0), keys->keys, keys->seen, k,
                       keys->mods)[0];
    return cov;
}

att::AttentionConfig LabCapture::layerConfig(int64_t layer,
                                             const att::AttentionConfig& base) const {
    att::AttentionConfig cfg = info.layerConfig(layer, base);
    const att::CalibratorSpec* spec = att::methodSpec(base.method).calibrator;
    if (!spec || base.calibration)
        return cfg;
    // The capture calibrates itself: on every position's key, or on the captured queries
    // paired with their keys (as generate does on a prompt) — the whole capture's, shared with
    // its views at other queries.
    const std::shared_ptr<Calibrations> all = calibrations();
    const std::lock_guard<std::mutex> lock(all->mutex);
    auto& cal = all->made[base.method];
    if (!cal) {
        const int64_t S = all->k.front().size(1), T = all->qSteps.front().size(1);
        cal = calibrateLayers(base.method, layers(), [&](int64_t l) {
            const size_t i = static_cast<size_t>(l);
            return std::make_pair(all->qSteps[i],
                                  spec->needsQueries ? all->k[i].narrow(1, S - T, T) : all->k[i]);
        });
        cal->source = "the prompt itself";
    }
    cfg.calibration = cal;
    return cfg;
}

std::shared_ptr<LabCapture::Calibrations> LabCapture::calibrations() const {
    const std::lock_guard<std::mutex> lock(m_calMutex);
    if (!m_calibrations) {
        m_calibrations = std::make_shared<Calibrations>();
        m_calibrations->qSteps = qSteps;
        m_calibrations->k = k;
    }
    return m_calibrations;
}

// --- head view -------------------------------------------------------------------------------

std::string layerNote(const model::CaptureInfo& info, int64_t layer) {
    std::vector<std::string> parts;
    const attention::AttentionConfig c = info.layerConfig(layer);
    if (c.slidingWindow > 0)
        parts.push_back("window " + std::to_string(c.slidingWindow));
    if (c.chunk > 0)
        parts.push_back("chunks of " + std::to_string(c.chunk));
    const size_t l = static_cast<size_t>(layer);
    if (l < info.layerUsesRope.size() && info.layerUsesRope[l] == 0)
        parts.push_back("NoPE");
    if (c.sinks.defined())
        parts.push_back("sinks");
    if (info.valueDim() != info.headDim)
        parts.push_back("d_v " + std::to_string(info.valueDim()));
    // Falcon-H1: summed with a Mamba-2 mixer's output; Zamba2: into a Mamba-2 layer's input.
    const size_t m = static_cast<size_t>(info.modelLayer(layer));
    if (m < info.layerKinds.size() &&
        info.layerKinds[m] == model::layerKindLabel(model::LayerKind::AttentionMamba2))
        parts.push_back("with Mamba-2");
    if (const int64_t rate = info.compressRate(layer); rate > 0) // DeepSeek-V4 (§17)
        parts.push_back("an entry per " + std::to_string(rate) + " positions" +
                        (info.entryIndexed(layer)
                             ? ", the indexer keeps " + std::to_string(info.entryTopK)
                             : std::string()));
    if (info.indexBlockSize > 0) // MiniMax-M3: which layers its indexer makes sparse
        parts.push_back(info.indexed(layer) ? "block-sparse (indexer)" : "full attention");
    std::string out;
    for (const std::string& p : parts)
        out += (out.empty() ? "" : " · ") + p;
    return out;
}

std::vector<double> HeadState::keyPositions() const {
    std::vector<double> x(exact.size());
    for (size_t j = 0; j < x.size(); ++j)
        x[j] = keyPosition(static_cast<int64_t>(j));
    return x;
}

std::vector<float> HeadState::byPosition(const std::vector<float>& byKey) const {
    if (entryRate == 0 || byKey.empty())
        return byKey;
    const at::Tensor keys = at::tensor(byKey, at::kFloat);
    return toVec<float>(keysByPosition(keys, entries, entryRate));
}

HeadState headState(const LabCapture& c, int64_t layer, int64_t head,
                    const att::AttentionConfig& config) {
    checkLayer(c, layer);
    if (head < 0 || head >= c.heads())
        fail("head " + std::to_string(head) + " is outside 0.." + std::to_string(c.heads() - 1));
    const int64_t D = c.headDim();
    config.validateFor(D, c.layers(), c.heads(), c.kvHeads());
    const auto [res, dense] = layerStep(c, layer, config, /*keepScores=*/true);
    const std::shared_ptr<const LabCapture::LayerCache> cache = c.layerCache(layer);
    const int64_t S = cache->keys.size(2); // positions (and a compressed layer's entries)

    HeadState h;
    h.method = config.method;
    h.kEff = std::min(config.k, cache->seen.sum().item<int64_t>());
    const at::Tensor qLayer = c.q[static_cast<size_t>(layer)]; // [Hq, D]
    h.qAbs = toVec<float>(qLayer[head].abs());
    // SparQ's components under the group rule: the r largest of the group's summed |q|, the
    // group being the query heads that read this head's KV head (other methods: |q| alone).
    const int64_t g = c.heads() / c.kvHeads();
    if (res.compIdx.defined() && config.components == att::ComponentSelect::Group && g > 1) {
        h.rankedHeads = g;
        h.firstRankedHead = head / g * g;
        h.qRanked = toVec<float>(qLayer.narrow(0, h.firstRankedHead, g).abs().sum(0));
    } else {
        h.firstRankedHead = head;
        h.qRanked = h.qAbs;
    }
    if (att::takes(config.method, att::Param::Gqa) && config.gqa != att::GroupSelect::PerHead &&
        g > 1) {
        h.positionHeads = g;
        h.gqaRule = att::groupSelectName(config.gqa);
    }
    h.exact = toVec<float>(dense.probs[0][head]);
    if (res.sHat.defined())
        h.approx = toVec<float>(res.sHat[0][head]);
    if (res.compIdx.defined())
        h.components = toVec<int64_t>(res.compIdx[0][head]);
    h.chosen = validIndices(res.indices[0][head]);
    h.count = static_cast<int64_t>(h.chosen.size());
    const int64_t n = std::max<int64_t>(h.count, 1);
    h.trueTopK = toVec<int64_t>(att::topnIndices(dense.logits[0][head], std::min(n, S)));
    const bool local = att::takes(config.method, att::Param::Local);
    const int64_t l = local ? std::min(config.effectiveLocal(), h.kEff) : 0;
    h.localFrom = S - l;
    if (c.compressedLayer(layer) && l > 0) { // the last l keys the query sees (method_kit)
        const at::Tensor seenFrom = cache->seen[0].flip(0).cumsum(0).flip(0); // seen from j on
        h.localFrom = std::max<int64_t>(0, seenFrom.ge(l).sum().item<int64_t>() - 1);
    }
    h.alpha = res.alpha.defined() ? res.alpha[0][head].item<double>() : 1.0;
    h.tau = res.tau.defined() ? res.tau[0][head].item<double>() : 0.0;
    double trueMass = 0, chosenMass = 0;
    for (const int64_t j : h.trueTopK)
        trueMass += h.exact[static_cast<size_t>(j)];
    for (const int64_t j : h.chosen)
        chosenMass += h.exact[static_cast<size_t>(j)];
    if (c.info.sinks.defined()) { // the sink: kept by every method, in both masses
        double real = 0;
        for (const float s : h.exact)
            real += s;
        h.sinkShare = std::max(0.0, 1.0 - real);
        trueMass += h.sinkShare;
        chosenMass += h.sinkShare;
    }
    h.layerNote = layerNote(c.info, layer);
    h.trueMass = trueMass;
    h.chosenMass = chosenMass;
    int64_t common = 0;
    for (const int64_t j : h.chosen)
        common += std::binary_search(h.trueTopK.begin(), h.trueTopK.end(), j) ? 1 : 0;
    h.topkAgreement = static_cast<double>(common) / static_cast<double>(n);
    const at::Tensor yd = dense.y[0][head], y = res.y[0][head];
    h.outputError = relativeError(y, yd);
    // As the layer runs it (the indexer method on a layer without an indexer: dense).
    const att::AttentionConfig layerCfg = c.layerConfig(layer, config);
    if (c.compressedLayer(layer)) { // the entries beside the window, and the model's own choice
        h.entries = cache->entries;
        h.entryRate = c.info.compressRate(layer);
        h.entryTopK = c.info.entryIndexed(layer) ? c.info.entryTopK : 0;
        h.keysSeen = cache->seen.sum().item<int64_t>();
        h.modelChosen =
            validIndices(at::arange(S, at::kLong).masked_fill(cache->model[0].logical_not(), -1));
        const at::Tensor ym = cache->modelY[0][head];
        h.modelError = relativeError(y, ym);
        h.denseModelError = relativeError(yd, ym);
        const int64_t entriesSeen = cache->seen[0].narrow(0, 0, h.entries).sum().item<int64_t>();
        h.modelIndexerCounted = h.entryTopK > 0 && c.info.entryIndexDim > 0;
        h.modelTransfer =
            compressedModelReads(static_cast<int64_t>(h.modelChosen.size()), D,
                                 h.entryTopK > 0 ? entriesSeen : 0, c.info.entryIndexDim);
    }
    // Over the keys the query sees (DeepSeek-V4: entries and positions, each key its value).
    const att::TransferArgs a = c.info.transferArgs(
        layerCfg, c.compressedLayer(layer) ? h.keysSeen : S, static_cast<double>(h.count));
    h.transfer = att::transferElements(layerCfg.method, a);
    h.denseTransfer = att::transferElements(att::Method::Dense, a);
    h.kMass90 = cache->kMass[1][0][head].item<int64_t>(); // p = 0.9
    if (const auto stepOne = att::methodSpec(layerCfg.method).stepOne) {
        h.stepOne = stepOne({.q = c.q[static_cast<size_t>(layer)][head],
                             .exact = dense.probs[0][head],
                             .result = &res,
                             .config = &layerCfg,
                             .head = head,
                             .heads = c.heads(),
                             .kvHeads = c.kvHeads()});
        // Its x axis is the keys: on a DeepSeek-V4 layer the entries come first.
        if (h.entryRate > 0 && h.stepOne.xLabel.rfind("position", 0) == 0)
            h.stepOne.xLabel = "key, the " + std::to_string(h.entries) + " entries first" +
                               h.stepOne.xLabel.substr(8);
    } else if (layerCfg.method != config.method) { // the indexer on a layer without one
        h.stepOne.caption = "This layer has <b>no indexer</b> (full attention in this model): it "
                            "attends to every earlier key, and so does the indexer method here";
        h.stepOne.xLabel = "position";
        h.stepOne.yLabel = "attended";
        h.stepOne.values.assign(static_cast<size_t>(S), 1.0);
        h.stepOne.used.assign(static_cast<size_t>(S), 1);
    }
    return h;
}

std::pair<int64_t, HeadState> smallestRHolding(const LabCapture& c, int64_t layer, int64_t head,
                                               att::AttentionConfig base, double mass) {
    base.method = att::Method::Sparq;
    std::pair<int64_t, HeadState> best{0, {}};
    for (int64_t r = 2; r <= c.headDim(); r *= 2) {
        base.r = r;
        best = {r, headState(c, layer, head, base)};
        if (best.second.chosenMass >= mass)
            break;
    }
    return best;
}

int64_t promptK(int64_t positions) {
    return std::clamp<int64_t>((positions + 1) / 2, 1, kLabK);
}

HeadPick firstScreenHead(const LabCapture& c, int64_t k, double minCoverage) {
    if (c.layers() == 0)
        fail("no capture yet: run a prompt first");
    HeadPick best, bestCovered; // the most spread covered head; the best-covered head
    best.covered = false;
    bestCovered.coverage = -1;
    const int64_t kEff = std::min(std::max<int64_t>(k, 1), c.positions());
    for (int64_t l = 0; l < c.layers(); ++l) {
        const at::Tensor cov = c.coverageAt(l, kEff).contiguous();
        const at::Tensor spread = c.layerCache(l)->kMass[1][0].to(at::kLong).contiguous();
        for (int64_t h = 0; h < c.heads(); ++h) {
            const HeadPick p{
                l, h, cov[h].item<double>(), spread[h].item<int64_t>(), kEff, true, minCoverage};
            if (p.coverage >= minCoverage && (!best.covered || p.kMass90 > best.kMass90))
                best = p;
            if (p.coverage > bestCovered.coverage)
                bestCovered = p;
        }
    }
    if (best.covered)
        return best;
    bestCovered.covered = false;
    return bestCovered;
}

// --- overview --------------------------------------------------------------------------------

const std::vector<std::pair<Measure, std::string>>& measures() {
    static const std::vector<std::pair<Measure, std::string>> all{
        {Measure::Coverage, "coverage (top-k mass)"},
        {Measure::Kurtosis, "query kurtosis"},
        {Measure::Agreement, "SparQ top-k agreement"},
        {Measure::Recall, "recall of the true top-|chosen|"},
        {Measure::OutputError, "output error of the method"},
        {Measure::KMass50, "k for 50% of the mass"},
        {Measure::KMass90, "k for 90% of the mass"},
        {Measure::KMass99, "k for 99% of the mass"},
    };
    return all;
}

const std::string& measureLabel(Measure m) {
    for (const auto& [id, label] : measures())
        if (id == m)
            return label;
    fail("a measure without a label");
}

Overview overview(const LabCapture& c, const att::AttentionConfig& config) {
    if (c.layers() == 0)
        fail("no capture yet: run a prompt first");
    const int64_t S = c.positions(), D = c.headDim();
    config.validateFor(D, c.layers(), c.heads(), c.kvHeads());
    const int64_t k = std::min(config.k, S), r = std::min(config.r, D);
    Overview o;
    o.layers = c.layers();
    o.heads = c.heads();
    for (int64_t l = 0; l < c.layers(); ++l) {
        const size_t i = static_cast<size_t>(l);
        const std::shared_ptr<const LabCapture::LayerCache> cache = c.layerCache(l);
        const at::Tensor q = c.q[i].unsqueeze(0), &kk = cache->keys, &valid = cache->seen;
        const att::AttentionConfig& mods = cache->mods;
        auto add = [&](Measure m, const at::Tensor& t) {
            const auto v = toVec<float>(t.to(at::kFloat));
            auto& grid = o.grids[m];
            grid.insert(grid.end(), v.begin(), v.end());
        };
        add(Measure::Coverage, c.coverageAt(l, k));
        add(Measure::Kurtosis, cache->kurtosis);
        add(Measure::Agreement,
            topkAgreement(q, kk, valid, r, k, AgreementMethod::TopR, {}, nullptr, mods)[0]);
        add(Measure::KMass50, cache->kMass[0][0]);
        add(Measure::KMass90, cache->kMass[1][0]);
        add(Measure::KMass99, cache->kMass[2][0]);
        if (c.compressedLayer(l) && !att::positionFreeProblem(config.method).empty()) {
            // A method that needs positions does not run on DeepSeek-V4's entries (the head
            // view says why): its cells are empty, the other measures stay.
            const at::Tensor none = at::full({c.heads()}, std::nan(""), at::kFloat);
            add(Measure::Recall, none);
            add(Measure::OutputError, none);
            continue;
        }
        const auto [res, dense] = layerStep(c, l, config, /*keepScores=*/false);
        add(Measure::Recall, att::recallAtK(q, kk, valid, res.indices, mods).recall[0]);
        add(Measure::OutputError,
            ((res.y - dense.y).norm(2, -1) / dense.y.norm(2, -1).clamp_min(1e-30))[0]);
    }
    o.coverage = o.grids[Measure::Coverage];
    o.kurtosis = o.grids[Measure::Kurtosis];
    o.agreement = o.grids[Measure::Agreement];
    return o;
}

} // namespace sparqlab::analysis
