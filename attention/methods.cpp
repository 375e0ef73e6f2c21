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

TransferArgs transferArgs(const AttentionConfig& c, int64_t S, int64_t d, double count,
                          int64_t dv) {
    TransferArgs a;
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
