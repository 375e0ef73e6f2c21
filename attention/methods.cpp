#include "methods.h"

#include "attention.h"

#include <sstream>
#include <stdexcept>

namespace sparqlab::attention {

namespace {

using TA = TransferArgs;

std::vector<ParamInfo> buildParams() {
    using K = ParamKind;
    return {
        {Param::R,
         K::Integer,
         "r",
         "r",
         "R",
         "rank r",
         "components of q used for approximate scores (loki, double-sparsity: at most head_dim)",
         32,
         1,
         0,
         {}},
        {Param::K,
         K::Integer,
         "k",
         "k",
         "K",
         "k",
         "positions attended, the current one included; the top-p methods' cap (none if omitted)",
         128,
         1,
         0,
         {},
         false,
         true},
        {Param::Local,
         K::Integer,
         "local",
         "local",
         "L",
         "local window l",
         "the l most recent positions are always kept (h2o: k/4 if omitted; above k: k)",
         0,
         0,
         0,
         {}},
        {Param::Tau,
         K::Choice,
         "tau",
         "tau",
         "adaptive|sqrt-dh|sqrt-r|<number>",
         "temperature τ",
         "SparQ's softmax temperature (Eq. 9 by default)",
         0,
         0,
         0,
         {"adaptive", "sqrt-dh", "sqrt-r"}},
        {Param::Gqa,
         K::Choice,
         "gqa",
         "gqa",
         "sum-probs|sum-logits|per-head|max-probs",
         "GQA rule",
         "how the heads of a KV group share positions (max-probs: shadowkv, adakv)",
         0,
         0,
         0,
         {"sum-probs", "sum-logits", "per-head", "max-probs"}},
        {Param::MeanValue,
         K::Flag,
         "no-mean-value",
         "mean_value",
         "",
         "mean-value reallocation",
         "SparQ without Eq. 10's mean-value term",
         0,
         0,
         0,
         {}},
        {Param::PageSize,
         K::Integer,
         "page-size",
         "page_size",
         "P",
         "page size P",
         "positions per Quest page",
         16,
         1,
         0,
         {}},
        {Param::P,
         K::Number,
         "p",
         "p",
         "P",
         "mass p",
         "the attention mass the top-p budget must hold, in (0, 1]",
         0.9,
         0,
         1,
         {}},
        {Param::Window,
         K::Integer,
         "window",
         "window",
         "W",
         "window W",
         "SnapKV's observation window (the last W positions, always kept)",
         32,
         1,
         0,
         {}},
        {Param::Kernel,
         K::Integer,
         "kernel",
         "kernel",
         "N",
         "pooling kernel",
         "SnapKV's pooling kernel, odd",
         5,
         1,
         0,
         {}},
        {Param::Pooling,
         K::Choice,
         "pooling",
         "pooling",
         "max|avg",
         "pooling",
         "SnapKV's pooling of the votes",
         0,
         0,
         0,
         {"max", "avg"}},
        {Param::Basis,
         K::File,
         "basis",
         "basis",
         "F.h5",
         "basis",
         "Loki's calibration file (sparqlab-cli calibrate --method loki)",
         0,
         0,
         0,
         {}},
        {Param::Channels,
         K::File,
         "channels",
         "channels",
         "F.h5",
         "channels",
         "Double Sparsity's calibration file (sparqlab-cli calibrate --method double-sparsity)",
         0,
         0,
         0,
         {}},
        {Param::Sink,
         K::Integer,
         "sink",
         "sink",
         "N",
         "sink tokens",
         "the first N positions, always kept (expected-attention, magicpig: 4; pqcache: 32)",
         4,
         0,
         0,
         {},
         true},
        {Param::Ratio,
         K::Number,
         "ratio",
         "ratio",
         "X",
         "ratio (0: use k)",
         "expected-attention: drop this share of the prompt, in [0, 1), instead of keeping --k",
         0,
         0,
         1,
         {},
         true},
        {Param::NFuture,
         K::Integer,
         "n-future",
         "n_future",
         "N",
         "future positions",
         "expected-attention: the future positions its RoPE average spans",
         512,
         1,
         0,
         {},
         true},
        {Param::NoCovariance,
         K::Flag,
         "no-covariance",
         "no_covariance",
         "",
         "without covariance",
         "expected-attention without the covariance term of its expected scores",
         0,
         0,
         1,
         {},
         true},
        {Param::NoVnorm,
         K::Flag,
         "no-vnorm",
         "no_vnorm",
         "",
         "without value norms",
         "expected-attention without the value norms in its scores",
         0,
         0,
         1,
         {},
         true},
        {Param::Epsilon,
         K::Number,
         "epsilon",
         "epsilon",
         "E",
         "epsilon",
         "expected-attention: added to each probability before the value norm",
         0,
         0,
         0,
         {},
         true},
        {Param::PqSubspaces,
         K::Integer,
         "pq-subspaces",
         "pq_subspaces",
         "M",
         "PQ sub-spaces m",
         "pqcache: sub-spaces of the head dimension, each with its own codebook (m divides "
         "head_dim)",
         2,
         1,
         0,
         {},
         true},
        {Param::PqBits,
         K::Integer,
         "pq-bits",
         "pq_bits",
         "B",
         "PQ bits b",
         "pqcache: 2^b centroids per sub-space, 0 to 16",
         6,
         0,
         16,
         {},
         true},
        {Param::PqIters,
         K::Integer,
         "pq-iters",
         "pq_iters",
         "N",
         "k-means iterations",
         "pqcache: Lloyd iterations of its k-means",
         10,
         0,
         0,
         {},
         true},
        {Param::HashBits,
         K::Integer,
         "hash-bits",
         "hash_bits",
         "K",
         "hash bits K",
         "magicpig: SimHash bits per table, 0 to 30",
         10,
         0,
         30,
         {},
         true},
        {Param::HashTables,
         K::Integer,
         "hash-tables",
         "hash_tables",
         "L",
         "hash tables L",
         "magicpig: SimHash tables",
         150,
         1,
         0,
         {},
         true},
        {Param::HashSeed,
         K::Integer,
         "hash-seed",
         "hash_seed",
         "N",
         "hyperplane seed",
         "magicpig: the seed its Gaussian hyperplanes are drawn from",
         0,
         0,
         0,
         {},
         true},
        {Param::Budget,
         K::Integer,
         "budget",
         "budget",
         "N",
         "chunk budget",
         "shadowkv: positions in the selected chunks, a multiple of --chunk-size",
         2048,
         0,
         0,
         {},
         true,
         true},
        {Param::ChunkSize,
         K::Integer,
         "chunk-size",
         "chunk_size",
         "C",
         "chunk size",
         "shadowkv: positions per chunk (8); rocketkv: kept positions per chunk of its key table "
         "(2)",
         8,
         1,
         0,
         {},
         true},
        {Param::Rank,
         K::Integer,
         "rank",
         "rank",
         "R",
         "SVD rank",
         "shadowkv: rank of its low-rank keys",
         160,
         1,
         0,
         {},
         true},
        {Param::LocalChunks,
         K::Integer,
         "local-chunks",
         "local_chunks",
         "N",
         "local chunks",
         "shadowkv: the last chunks, always attended exactly",
         4,
         0,
         0,
         {},
         true},
        {Param::OutlierChunks,
         K::Integer,
         "outlier-chunks",
         "outlier_chunks",
         "N",
         "outlier chunks",
         "shadowkv: the chunks least like their landmark, attended exactly",
         48,
         0,
         0,
         {},
         true},
        {Param::ShadowKeys,
         K::Choice,
         "shadowkv-keys",
         "shadowkv_keys",
         "post|pre",
         "SVD of keys",
         "shadowkv: factorise the captured post-RoPE keys, or the pre-RoPE keys as the original "
         "(needs the model's RoPE)",
         0,
         0,
         0,
         {"post", "pre"},
         true},
        {Param::PromptBudget,
         K::Integer,
         "prompt-budget",
         "prompt_budget",
         "K1",
         "prompt budget k1",
         "rocketkv: positions its first stage (SnapKV) keeps, the window included",
         512,
         1,
         0,
         {},
         true,
         true},
        {Param::TokenBudget,
         K::Integer,
         "token-budget",
         "token_budget",
         "T",
         "token budget",
         "rocketkv: derive --prompt-budget, --k, --chunk-size and --r from one budget T (0: as "
         "given)",
         0,
         0,
         0,
         {},
         true,
         true},
        {Param::Alpha,
         K::Number,
         "floor-alpha",
         "alpha",
         "A",
         "floor alpha",
         "adakv: the share of each head's budget it keeps whatever the scores, in [0, 1]",
         0.2,
         0,
         1,
         {},
         true},
        {Param::Normalize,
         K::Flag,
         "normalize",
         "normalize",
         "",
         "normalised scores",
         "adakv: scale each head's scores by the share of its own budget in them",
         0,
         0,
         1,
         {},
         true},
    };
}

} // namespace

const MethodInfo* findMethod(const std::string& name) {
    for (const MethodInfo& i : methods()) {
        if (name == i.name)
            return &i;
        for (const std::string& a : i.aliases)
            if (name == a)
                return &i;
    }
    return nullptr;
}

const std::vector<ParamInfo>& parameters() {
    static const std::vector<ParamInfo> all = buildParams();
    return all;
}

const ParamInfo& paramInfo(Param p) {
    for (const ParamInfo& i : parameters())
        if (i.id == p)
            return i;
    throw std::logic_error("a parameter without an entry in the parameter table");
}

bool takes(Method m, Param p) {
    for (Param q : methodInfo(m).params)
        if (q == p)
            return true;
    return false;
}

void applyDefaults(AttentionConfig& c) {
    const MethodInfo& m = methodInfo(c.method);
    if (!m.gqaRules.empty())
        c.gqa = m.gqaRules.front();
    for (const auto& [p, v] : m.defaults)
        setParamValue(c, p, v);
}

AttentionConfig defaultConfig(Method m) {
    AttentionConfig c;
    c.method = m;
    applyDefaults(c);
    return c;
}

std::vector<GroupSelect> gqaRules(Method m) {
    const MethodInfo& i = methodInfo(m);
    if (!i.gqaRules.empty())
        return i.gqaRules;
    return {GroupSelect::SumProbs, GroupSelect::SumLogits, GroupSelect::PerHead};
}

std::string methodNames(const std::string& separator) {
    std::string s;
    for (const MethodInfo& i : methods())
        s += (s.empty() ? "" : separator) + i.name;
    return s;
}

std::string calibratedMethodNames() {
    std::string s;
    for (const MethodInfo& i : methods())
        if (i.calibrated)
            s += (s.empty() ? "" : ", ") + std::string(i.name);
    return s;
}

std::string attnUsage() {
    std::string s = "[--method " + methodNames("|") + "]";
    for (const ParamInfo& p : parameters())
        s += std::string(" [--") + p.option + (p.kind == ParamKind::Flag ? "" : " ") + p.valueName +
             "]";
    return s;
}

std::string methodsMarkdown() {
    std::ostringstream os;
    os << "| `--method` | what it does | parameters | state | calibration | fast decode | "
          "elements read per head and step |\n";
    os << "| --- | --- | --- | --- | --- | --- | --- |\n";
    auto cell = [](std::string s) { // a | inside a cell would split it
        for (size_t i = s.find('|'); i != std::string::npos; i = s.find('|', i + 2))
            s.insert(i, "\\");
        return s;
    };
    for (const MethodInfo& m : methods()) {
        std::string params;
        for (Param p : m.params)
            params += (params.empty() ? "" : " ") + std::string("`--") + paramInfo(p).option + "`";
        os << "| `" << m.name << "` | " << cell(m.summary) << " (" << m.spec << ") | "
           << (params.empty() ? "—" : params) << " | " << (m.stateful ? "yes" : "no") << " | "
           << (m.calibrated ? "yes" : "no") << " | " << (m.fastDecode ? "yes" : "no") << " | "
           << m.transferFormula << " |\n";
    }
    return os.str();
}

namespace transfer {

double ceilDiv(int64_t a, int64_t b) {
    return static_cast<double>((a + b - 1) / b);
}
double count(const TA& a) {
    return a.n >= 0 ? a.n : static_cast<double>(a.k);
}
double dense(const TA& a) {
    return 1.0 * a.S * a.kv() + a.kv();
}
double exactThenK(const TA& a) {
    return 1.0 * a.S * a.d + 1.0 * a.k * a.v() + a.kv();
}
double kept(const TA& a) {
    return 1.0 * a.k * a.kv() + a.kv();
}
double lowRank(const TA& a) {
    return 1.0 * a.S * a.r + 1.0 * a.k * a.kv() + a.kv();
}

} // namespace transfer

double transferElements(Method m, const TransferArgs& a) {
    return methodInfo(m).transfer(a);
}

double transferRatio(Method m, const TransferArgs& a) {
    return transferElements(m, a) / transferElements(Method::Dense, a);
}

double TransferArgs::param(Param p) const {
    return config ? config->value(p) : paramInfo(p).defaultValue;
}

TransferArgs transferArgs(const AttentionConfig& c, int64_t S, int64_t d, double count,
                          int64_t dv) {
    TransferArgs a;
    a.config = &c;
    a.S = S;
    a.d = d;
    a.dv = dv;
    a.k = std::min(c.k, S); // k beyond the positions there are moves only those (issue 36)
    a.r = c.r;
    a.pageSize = c.pageSize;
    a.n = count;
    return a;
}

} // namespace sparqlab::attention
