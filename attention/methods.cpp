#include "methods.h"

#include "attention.h"

#include <sstream>
#include <stdexcept>

namespace sparqlab::attention {

namespace {

using TA = TransferArgs;

double ceilDiv(int64_t a, int64_t b) {
    return static_cast<double>((a + b - 1) / b);
}
/// The top-p count n of METHODS.md §10 (k when none was measured).
double countOf(const TA& a) {
    return a.n >= 0 ? a.n : static_cast<double>(a.k);
}

// SPARQ.md §5 and METHODS.md §10, literal (no clamping).
double denseT(const TA& a) {
    return 2.0 * a.S * a.d + 2.0 * a.d;
}
double sparqT(const TA& a) {
    return 1.0 * a.S * a.r + 2.0 * a.k * a.d + 4.0 * a.d;
}
double exactKT(const TA& a) {
    return 1.0 * a.S * a.d + 1.0 * a.k * a.d + 2.0 * a.d;
}
double keptT(const TA& a) {
    return 2.0 * a.k * a.d + 2.0 * a.d;
}
double h2oT(const TA& a) {
    return 2.0 * a.k * a.d + 2.0 * a.d + 2.0 * a.S;
}
double questT(const TA& a) {
    return 2.0 * ceilDiv(a.S, a.pageSize) * a.d +
           2.0 * a.pageSize * ceilDiv(a.k, a.pageSize) * a.d + 2.0 * a.d;
}
double lowRankT(const TA& a) {
    return 1.0 * a.S * a.r + 2.0 * a.k * a.d + 2.0 * a.d;
}
double oracleTopPT(const TA& a) {
    return 1.0 * a.S * a.d + countOf(a) * a.d + 2.0 * a.d;
}
double sparqTopPT(const TA& a) {
    return 1.0 * a.S * a.r + 2.0 * countOf(a) * a.d + 4.0 * a.d;
}

std::vector<MethodInfo> buildMethods() {
    using P = Param;
    // One line per method: id, name, label, summary, spec, params, stateful, calibrated,
    // needsHistory, fastDecode, selects, transfer, formula, the eval grid (the paper's Table G1
    // where it gives one).
    return {
        {Method::Dense,
         "dense",
         "Dense",
         "exact attention over every position",
         "SPARQ.md §2.4",
         {},
         false,
         false,
         false,
         true,
         false,
         denseT,
         "2·S·d + 2·d",
         ""},
        {Method::Sparq,
         "sparq",
         "SparQ",
         "approximate scores from the r largest |q| components, exact attention over the top-k, "
         "mean-value reallocation (Ribar et al. 2024)",
         "SPARQ.md §3",
         {P::R, P::K, P::Local, P::Tau, P::Gqa, P::MeanValue},
         false,
         false,
         false,
         true,
         true,
         sparqT,
         "S·r + 2·k·d + 4·d",
         "r=8,16,32,64 k=128 local=k/4"},
        {Method::Oracle,
         "oracle",
         "Oracle top-k",
         "the true top-k by exact scores, renormalised",
         "SPARQ.md §4.1",
         {P::K, P::Local, P::Gqa},
         false,
         false,
         false,
         false,
         true,
         exactKT,
         "S·d + k·d + 2·d",
         "k=32,64,128,256 local=k/4"},
        {Method::FlexGen,
         "flexgen",
         "FlexGen",
         "exact scores, top-k masked after the softmax (no renormalisation)",
         "SPARQ.md §4.2",
         {P::K, P::Gqa},
         false,
         false,
         false,
         false,
         true,
         exactKT,
         "S·d + k·d + 2·d",
         "k=2,8,32,128,256"},
        {Method::LmInfinite,
         "lminf",
         "LM-Infinite",
         "16 sink tokens and the most recent ones",
         "SPARQ.md §4.3",
         {P::K},
         false,
         false,
         false,
         false,
         true,
         keptT,
         "2·k·d + 2·d",
         "k=192,256,384,512,768"},
        {Method::H2O,
         "h2o",
         "H2O",
         "heavy hitters by accumulated attention and a local window (l = k/4 by default)",
         "SPARQ.md §4.4",
         {P::K, P::Local},
         true,
         false,
         true,
         false,
         true,
         h2oT,
         "2·k·d + 2·d + 2·S",
         "k=192,256,384,512,768 local=k/4"},
        {Method::Quest,
         "quest",
         "Quest",
         "pages ranked by an upper bound from each page's min and max key (Tang et al. 2024)",
         "METHODS.md §3",
         {P::K, P::PageSize, P::Local, P::Gqa},
         false,
         false,
         false,
         true,
         true,
         questT,
         "2·⌈S/P⌉·d + 2·P·⌈k/P⌉·d + 2·d",
         "k=64,128,256,512 page-size=16"},
        {Method::Loki,
         "loki",
         "Loki",
         "scores in the first r principal directions of calibration keys (Singhania et al. 2024)",
         "METHODS.md §4",
         {P::R, P::K, P::Local, P::Gqa, P::Basis},
         false,
         true,
         false,
         true,
         true,
         lowRankT,
         "S·r + 2·k·d + 2·d",
         "r=8,16,32,64 k=128 local=k/4"},
        {Method::DoubleSparsity,
         "double-sparsity",
         "Double Sparsity",
         "scores from r calibrated channels per head (Yang et al. 2024)",
         "METHODS.md §5",
         {P::R, P::K, P::Local, P::Gqa, P::Channels},
         false,
         true,
         false,
         true,
         true,
         lowRankT,
         "S·r + 2·k·d + 2·d",
         "r=8,16,32,64 k=128 local=k/4"},
        {Method::OracleTopP,
         "oracle-top-p",
         "Oracle top-p",
         "the fewest exact top positions holding mass p, at most k (Twilight 2025)",
         "METHODS.md §6.2",
         {P::P, P::K, P::Local, P::Gqa},
         false,
         false,
         false,
         true,
         true,
         oracleTopPT,
         "S·d + n·d + 2·d",
         "p=0.5,0.8,0.9,0.95,0.99"},
        {Method::SparqTopP,
         "sparq-top-p",
         "SparQ top-p",
         "SparQ with a top-p budget on its approximate scores instead of a fixed k",
         "METHODS.md §6.3",
         {P::P, P::R, P::K, P::Local, P::Tau, P::Gqa, P::MeanValue},
         false,
         false,
         false,
         true,
         true,
         sparqTopPT,
         "S·r + 2·n·d + 4·d",
         "p=0.8,0.9,0.95 r=16,32"},
        {Method::SnapKV,
         "snapkv",
         "SnapKV",
         "the prompt compressed once by the pooled votes of an observation window (Li et al. "
         "2024)",
         "METHODS.md §7",
         {P::K, P::Window, P::Kernel, P::Pooling, P::Gqa},
         true,
         false,
         true,
         false,
         true,
         keptT,
         "2·k·d + 2·d",
         "k=192,256,384,512,768"},
        {Method::Tova,
         "tova",
         "TOVA",
         "a layer-wide cache that evicts the position of least attention each step (Oren et "
         "al. 2024)",
         "METHODS.md §8",
         {P::K},
         true,
         false,
         true,
         false,
         true,
         keptT,
         "2·k·d + 2·d",
         "k=192,256,384,512,768"},
    };
}

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
         {}},
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
         "sum-probs|sum-logits|per-head",
         "GQA rule",
         "how the heads of a KV group share positions",
         0,
         0,
         0,
         {"sum-probs", "sum-logits", "per-head"}},
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
    };
}

} // namespace

const std::vector<MethodInfo>& methods() {
    static const std::vector<MethodInfo> all = buildMethods();
    return all;
}

const MethodInfo& methodInfo(Method m) {
    for (const MethodInfo& i : methods())
        if (i.id == m)
            return i;
    throw std::logic_error("a method without an entry in the method table");
}

const MethodInfo* findMethod(const std::string& name) {
    const std::string n = name == "lm-infinite" || name == "lm_infinite" ? "lminf" : name;
    for (const MethodInfo& i : methods())
        if (n == i.name)
            return &i;
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

std::string methodNames(const std::string& separator) {
    std::string s;
    for (const MethodInfo& i : methods())
        s += (s.empty() ? "" : separator) + i.name;
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

double transferElements(Method m, const TransferArgs& a) {
    return methodInfo(m).transfer(a);
}

double transferRatio(Method m, const TransferArgs& a) {
    return transferElements(m, a) / transferElements(Method::Dense, a);
}

TransferArgs transferArgs(const AttentionConfig& c, int64_t S, int64_t d, double count) {
    TransferArgs a;
    a.S = S;
    a.d = d;
    a.k = c.k;
    a.r = c.r;
    a.pageSize = c.pageSize;
    a.n = count;
    return a;
}

} // namespace sparqlab::attention
