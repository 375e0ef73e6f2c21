#include "lab_map.h"

#include "analysis/compressed_keys.h"

#include "attention/method_spec.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

/// [n, S] → [n, columns]: the largest value of each bin of keyBin keys (zeros pad the last).
at::Tensor binned(const at::Tensor& rows, int64_t keyBin, int64_t columns) {
    at::Tensor r = rows.to(at::kFloat);
    if (keyBin == 1)
        return r.contiguous();
    const int64_t pad = columns * keyBin - r.size(1);
    if (pad > 0)
        r = at::cat({r, at::zeros({r.size(0), pad}, r.options())}, 1);
    return std::get<0>(r.view({r.size(0), columns, keyBin}).max(2)).contiguous();
}

template <typename T> void append(std::vector<T>& out, const at::Tensor& t) {
    const at::Tensor c = t.contiguous();
    const T* p = c.data_ptr<T>();
    out.insert(out.end(), p, p + c.numel());
}

} // namespace

int64_t QueryKeyMap::cell(int64_t query, int64_t key) const {
    if (query < firstQuery || query > lastQuery || key < 0 || key >= keys || keyBin < 1)
        return -1;
    return (query - firstQuery) * columns + key / keyBin;
}

QueryKeyMap queryKeyMap(const LabCapture& c, int64_t layer, int64_t head,
                        const att::AttentionConfig& config, int64_t maxRows, int64_t maxColumns) {
    if (c.layers() == 0)
        throw att::AttentionError("no capture yet: run a prompt first");
    if (layer < 0 || layer >= c.layers())
        throw att::AttentionError("layer " + std::to_string(layer) + " is outside 0.." +
                                  std::to_string(c.layers() - 1));
    if (head < 0 || head >= c.heads())
        throw att::AttentionError("head " + std::to_string(head) + " is outside 0.." +
                                  std::to_string(c.heads() - 1));
    config.validateFor(c.headDim(), c.layers(), c.heads(), c.kvHeads());
    c.checkQuadratic(config.method);
    const size_t l = static_cast<size_t>(layer);
    const int64_t S = c.positions(), T = c.history();
    const int64_t rows = std::clamp<int64_t>(maxRows, 1, T);

    QueryKeyMap m;
    m.firstQuery = S - rows;
    m.lastQuery = S - 1;
    m.firstHeld = S - T;
    m.keys = S;
    m.keyBin = std::max<int64_t>(1, (S + std::max<int64_t>(1, maxColumns) - 1) /
                                        std::max<int64_t>(1, maxColumns));
    m.columns = (S + m.keyBin - 1) / m.keyBin;

    // Every held query goes in (stateful methods learn from the ones before the window); the
    // window's rows are the decode steps.
    att::CausalInputs in;
    in.q = c.qSteps[l].unsqueeze(0);
    in.k = c.k[l].unsqueeze(0);
    in.v = c.v[l].unsqueeze(0);
    for (int64_t t = 0; t < T; ++t)
        in.positions.push_back(S - T + t);
    in.firstStep = T - rows;
    in.extra = c.methodInputs(layer); // the model's indexer scores (DSA, MiniMax-M3)
    const bool sinks = c.info.sinks.defined();
    // A chunk of rows over the keys ([n, keys]: positions, or a compressed layer's entries
    // first), drawn over positions (keysByPosition: an entry where it pools).
    const int64_t C = c.compressedLayer(layer) ? c.entries[l].size(0) : 0;
    const int64_t rate = c.compressedLayer(layer) ? c.info.compressRate(layer) : 0;
    auto collect = [&](const att::AttentionResult& r, const att::AttentionResult& dense) {
        const at::Tensor s = dense.probs[0][head]; // [n, keys]
        append<float>(m.exact, binned(keysByPosition(s, C, rate), m.keyBin, m.columns));
        if (r.sHat.defined())
            append<float>(m.approx,
                          binned(keysByPosition(r.sHat[0][head], C, rate), m.keyBin, m.columns));
        const at::Tensor sel =
            r.selected.defined() ? r.selected[0][head].to(at::kFloat) : (s > 0).to(at::kFloat);
        const at::Tensor chosenBins = binned(keysByPosition(sel, C, rate), m.keyBin, m.columns) > 0;
        append<uint8_t>(m.chosen, chosenBins.to(at::kByte));
        // The sink's share (attention to nothing) is kept by every method (HeadState).
        at::Tensor mass = (s * sel).sum(1);
        if (sinks)
            mass = mass + (1.0 - s.sum(1)).clamp_min(0.0);
        append<float>(m.chosenMass, mass.to(at::kFloat));
        append<int64_t>(m.count, sel.sum(1).to(at::kLong));
    };
    if (c.compressedLayer(layer)) {
        // DeepSeek-V4: each row's query over the entries complete by it and the window, the
        // method in the indexer's place (compressed_keys.h), as the head view runs it.
        m.entryRate = rate;
        const CompressedKeys ck = compressedKeys(c.info, c.layerExample(layer), layer, rows);
        const att::AttentionConfig method =
            compressedConfig(c.info, layer, c.layerConfig(layer, config));
        const att::AttentionConfig exact = compressedConfig(c.info, layer, {});
        att::AttendOptions o;
        o.keepScores = true;
        o.validate = false;
        const int64_t step = ck.chunk(int64_t{1} << 24); // rows of about 2²⁴ scores
        for (int64_t r0 = 0; r0 < rows; r0 += step) {
            const att::AttentionInputs ai = ck.steps(r0, std::min(step, rows - r0));
            collect(att::attendSteps(ai, method, o), att::attendSteps(ai, exact, o));
        }
        return m;
    }
    att::CausalOptions co;
    co.attend.keepScores = true;
    co.attend.validate = false; // checked when the capture was made
    co.withDense = true;
    co.denseMods = c.info.layerConfig(layer);
    co.checkHistory = true;
    co.onChunk = [&](int64_t, int64_t, const att::AttentionResult& r,
                     const att::AttentionResult* dense) { collect(r, *dense); };
    att::runCausal(in, c.layerConfig(layer, config), nullptr, co);
    if (!m.approx.empty() && m.approx.size() != m.exact.size())
        m.approx.clear(); // a method with ŝ on some steps only: none shown
    return m;
}

} // namespace sparqlab::analysis
