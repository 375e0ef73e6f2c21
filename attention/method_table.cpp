#include "method_table.h"

#include "attention.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace sparqlab::attention {

namespace {

using TA = TransferArgs;

/// A value of a field as the table's number (an enumeration's index, a flag's 0 or 1) and back.
template <typename T> double asNumber(T x) {
    if constexpr (std::is_enum_v<T>)
        return static_cast<double>(static_cast<int64_t>(x));
    else
        return static_cast<double>(x);
}
template <typename T> void assign(T& field, double x) {
    if constexpr (std::is_enum_v<T>)
        field = static_cast<T>(static_cast<int64_t>(x));
    else if constexpr (std::is_same_v<T, bool>)
        field = x != 0;
    else
        field = static_cast<T>(x);
}

using C = AttentionConfig;

/// A row of the parameter table with named fields: Row(Param::PageSize, "page-size")
/// .integer(1).field<&C::pageSize>().attribute("page_size")… .
class Row {
public:
    Row(Param id, const char* option) {
        m.id = id;
        m.option = option;
        m.attribute = option;
    }
    Row& integer(double min, double max = 0) { return range(ParamKind::Integer, min, max); }
    Row& number(double min, double max = 0) { return range(ParamKind::Number, min, max); }
    Row& above(double min, double max) { // (min, max]
        m.openMin = true;
        return range(ParamKind::Number, min, max);
    }
    Row& choice(std::vector<std::string> choices) {
        m.kind = ParamKind::Choice;
        m.choices = std::move(choices);
        m.valueName.clear();
        for (const std::string& c : m.choices) // "max|avg" (placeholder() may say more)
            m.valueName += (m.valueName.empty() ? "" : "|") + c;
        return *this;
    }
    Row& below(double min, double max) { // [min, max)
        m.openMax = true;
        return range(ParamKind::Number, min, max);
    }
    Row& odd() {
        m.odd = true;
        return *this;
    }
    Row& clampedTo(Param p) {
        m.clampedTo = p;
        return *this;
    }
    Row& flag() { return range(ParamKind::Flag, 0, 1); }
    Row& file() {
        m.kind = ParamKind::File;
        return *this;
    }
    /// The default of a parameter held in AttentionConfig::values.
    Row& byDefault(double x) {
        m.defaultValue = x;
        return *this;
    }
    /// Held in field M of AttentionConfig, whose initial value is the default.
    template <auto M> Row& field() {
        m.get = [](const C& c) { return asNumber(c.*M); };
        m.set = [](C& c, double x) { assign(c.*M, x); };
        m.defaultValue = m.get(C{});
        return *this;
    }
    /// Held in a field read and written by these (a field that is not a plain number).
    Row& stored(double (*get)(const C&), void (*set)(C&, double)) {
        m.get = get;
        m.set = set;
        m.defaultValue = get(C{});
        return *this;
    }
    Row& text(std::string (*text)(const C&)) {
        m.text = text;
        return *this;
    }
    Row& parse(void (*parse)(C&, const std::string&)) {
        m.parse = parse;
        return *this;
    }
    Row& attribute(const char* a) {
        m.attribute = a;
        return *this;
    }
    Row& placeholder(const char* p) {
        m.valueName = p;
        return *this;
    }
    Row& label(const char* l) {
        m.label = l;
        return *this;
    }
    Row& help(const char* h) {
        m.help = h;
        return *this;
    }
    Row& positions() {
        m.positions = true;
        return *this;
    }
    operator ParamInfo() const { return m; }

private:
    Row& range(ParamKind kind, double min, double max) {
        m.kind = kind;
        m.min = min;
        m.max = max;
        return *this;
    }
    ParamInfo m;
};

/// "max|avg": a Choice's placeholder.
std::string calibrationSource(const C& c) {
    return c.calibration ? c.calibration->source : "";
}

std::vector<ParamInfo> buildParams() {
    std::vector<ParamInfo> rows = {
        Row(Param::R, "r")
            .integer(1)
            .field<&C::r>()
            .placeholder("R")
            .label("rank r")
            .help("components of q used for approximate scores (loki, double-sparsity: at most "
                  "head_dim)"),
        Row(Param::K, "k")
            .integer(1)
            .field<&C::k>()
            .text([](const C& c) {
                return c.k >= C::kNoCap ? std::string("none") : std::to_string(c.k);
            })
            .parse([](C& c, const std::string& v) {
                c.k = v == "none" ? C::kNoCap
                                  : static_cast<int64_t>(parseParamNumber(paramInfo(Param::K), v));
            })
            .placeholder("K")
            .label("k")
            .help("positions attended, the current one included; the top-p methods' cap (none if "
                  "omitted)")
            .positions(),
        Row(Param::Local, "local")
            .integer(0)
            .clampedTo(Param::K)
            .stored([](const C& c) { return static_cast<double>(c.effectiveLocal()); },
                    [](C& c, double x) { c.local = static_cast<int64_t>(x); })
            .placeholder("L")
            .label("local window l")
            .help("the l most recent positions are always kept (h2o: k/4 if omitted; above k: k)"),
        Row(Param::Tau, "tau")
            .choice({"adaptive", "sqrt-dh", "sqrt-r"})
            .field<&C::tau>()
            .text([](const C& c) { return tauName(c.tau, c.tauValue); })
            .parse([](C& c, const std::string& v) { c.tau = parseTauMode(v, &c.tauValue); })
            .placeholder("adaptive|sqrt-dh|sqrt-r|<number>")
            .label("temperature τ")
            .help("SparQ's softmax temperature (Eq. 9 by default)"),
        Row(Param::Gqa, "gqa")
            .choice({"sum-probs", "sum-logits", "per-head", "max-probs"})
            .field<&C::gqa>()
            .parse([](C& c, const std::string& v) { c.gqa = parseGroupSelect(v); })
            .label("GQA rule")
            .help("how the heads of a KV group share positions (max-probs: shadowkv, adakv)"),
        Row(Param::MeanValue, "no-mean-value")
            .flag()
            .stored([](const C& c) { return c.meanValue ? 0.0 : 1.0; },
                    [](C& c, double x) { c.meanValue = x == 0; })
            // (the attribute says whether the mean value is used; the flag, given, turns it off)
            .text([](const C& c) { return std::string(c.meanValue ? "1" : "0"); })
            .parse([](C& c, const std::string&) { c.meanValue = false; })
            .attribute("mean_value")
            .label("mean-value reallocation")
            .help("SparQ without Eq. 10's mean-value term"),
        Row(Param::Components, "components")
            .choice({"group", "per-head"})
            .field<&C::components>()
            .label("components")
            .help("SparQ's r components: the largest of the GQA group's summed |q| or each head's"),
        Row(Param::Reallocate, "reallocate")
            .flag()
            .field<&C::flexgenReallocate>()
            .label("mean-value reallocation")
            .help("flexgen with Eq. 6's mean-value term over the positions it leaves out"),
        Row(Param::PageSize, "page-size")
            .integer(1)
            .field<&C::pageSize>()
            .attribute("page_size")
            .placeholder("P")
            .label("page size P")
            .help("positions per Quest page"),
        Row(Param::P, "p")
            .above(0, 1)
            .field<&C::p>()
            .placeholder("P")
            .label("mass p")
            .help("the attention mass the top-p budget must hold, in (0, 1]"),
        Row(Param::Window, "window")
            .integer(1)
            .field<&C::snapWindow>()
            .placeholder("W")
            .label("window W")
            .help("SnapKV's observation window (the last W positions, always kept)"),
        Row(Param::Kernel, "kernel")
            .integer(1)
            .odd()
            .field<&C::kernel>()
            .placeholder("N")
            .label("pooling kernel")
            .help("SnapKV's pooling kernel, odd"),
        Row(Param::Pooling, "pooling")
            .choice({"max", "avg"})
            .field<&C::pooling>()
            .label("pooling")
            .help("SnapKV's pooling of the votes"),
        Row(Param::Basis, "basis")
            .file()
            .text(calibrationSource)
            .placeholder("F.h5")
            .label("basis")
            .help("Loki's calibration file (sparqlab-cli calibrate --method loki)"),
        Row(Param::Channels, "channels")
            .file()
            .text(calibrationSource)
            .placeholder("F.h5")
            .label("channels")
            .help("Double Sparsity's calibration file (sparqlab-cli calibrate --method "
                  "double-sparsity)"),
        Row(Param::Sink, "sink")
            .integer(0)
            .byDefault(4)
            .placeholder("N")
            .label("sink tokens")
            .help("the first N positions, always kept (lminf: 16; expected-attention, magicpig: 4; "
                  "pqcache: 32)"),
        Row(Param::Ratio, "ratio")
            .below(0, 1)
            .placeholder("X")
            .label("ratio (0: use k)")
            .help("expected-attention: drop this share of the prompt, in [0, 1), instead of "
                  "keeping --k"),
        Row(Param::NFuture, "n-future")
            .integer(1)
            .byDefault(512)
            .attribute("n_future")
            .placeholder("N")
            .label("future positions")
            .help("expected-attention: the future positions its RoPE average spans"),
        Row(Param::NoCovariance, "no-covariance")
            .flag()
            .attribute("no_covariance")
            .label("without covariance")
            .help("expected-attention without the covariance term of its expected scores"),
        Row(Param::NoVnorm, "no-vnorm")
            .flag()
            .attribute("no_vnorm")
            .label("without value norms")
            .help("expected-attention without the value norms in its scores"),
        Row(Param::Epsilon, "epsilon")
            .number(0)
            .placeholder("E")
            .label("epsilon")
            .help("expected-attention: added to each probability before the value norm"),
        Row(Param::PqSubspaces, "pq-subspaces")
            .integer(1)
            .byDefault(2)
            .attribute("pq_subspaces")
            .placeholder("M")
            .label("PQ sub-spaces m")
            .help("pqcache: sub-spaces of the head dimension, each with its own codebook (m "
                  "divides head_dim)"),
        Row(Param::PqBits, "pq-bits")
            .integer(0, 16)
            .byDefault(6)
            .attribute("pq_bits")
            .placeholder("B")
            .label("PQ bits b")
            .help("pqcache: 2^b centroids per sub-space, 0 to 16"),
        Row(Param::PqIters, "pq-iters")
            .integer(0)
            .byDefault(10)
            .attribute("pq_iters")
            .placeholder("N")
            .label("k-means iterations")
            .help("pqcache: Lloyd iterations of its k-means"),
        Row(Param::HashBits, "hash-bits")
            .integer(0, 30)
            .byDefault(10)
            .attribute("hash_bits")
            .placeholder("K")
            .label("hash bits K")
            .help("magicpig: SimHash bits per table, 0 to 30"),
        Row(Param::HashTables, "hash-tables")
            .integer(1)
            .byDefault(150)
            .attribute("hash_tables")
            .placeholder("L")
            .label("hash tables L")
            .help("magicpig: SimHash tables"),
        Row(Param::HashSeed, "hash-seed")
            .integer(0)
            .attribute("hash_seed")
            .placeholder("N")
            .label("hyperplane seed")
            .help("magicpig: the seed its Gaussian hyperplanes are drawn from"),
        Row(Param::Budget, "budget")
            .integer(0)
            .byDefault(2048)
            .placeholder("N")
            .label("chunk budget")
            .help("shadowkv: positions in the selected chunks, a multiple of --chunk-size")
            .positions(),
        Row(Param::ChunkSize, "chunk-size")
            .integer(1)
            .byDefault(8)
            .attribute("chunk_size")
            .placeholder("C")
            .label("chunk size")
            .help("shadowkv: positions per chunk (8); rocketkv: kept positions per chunk of its "
                  "key table (2); chunkkv: positions per kept chunk (20)"),
        Row(Param::Rank, "rank")
            .integer(1)
            .byDefault(160)
            .placeholder("R")
            .label("SVD rank")
            .help("shadowkv: rank of its low-rank keys"),
        Row(Param::LocalChunks, "local-chunks")
            .integer(0)
            .byDefault(4)
            .attribute("local_chunks")
            .placeholder("N")
            .label("local chunks")
            .help("shadowkv: the last chunks, always attended exactly"),
        Row(Param::OutlierChunks, "outlier-chunks")
            .integer(0)
            .byDefault(48)
            .attribute("outlier_chunks")
            .placeholder("N")
            .label("outlier chunks")
            .help("shadowkv: the chunks least like their landmark, attended exactly"),
        Row(Param::ShadowKeys, "shadowkv-keys")
            .choice({"post", "pre"})
            .attribute("shadowkv_keys")
            .label("SVD of keys")
            .help("shadowkv: factorise the captured post-RoPE keys, or the pre-RoPE keys as the "
                  "original (needs the model's RoPE)"),
        Row(Param::PromptBudget, "prompt-budget")
            .integer(1)
            .byDefault(512)
            .attribute("prompt_budget")
            .placeholder("K1")
            .label("prompt budget k1")
            .help("rocketkv: positions its first stage (SnapKV) keeps, the window included")
            .positions(),
        Row(Param::TokenBudget, "token-budget")
            .integer(0)
            .attribute("token_budget")
            .placeholder("T")
            .label("token budget")
            .help("rocketkv: derive --prompt-budget, --k, --chunk-size and --r from one budget T "
                  "(0: as given)")
            .positions(),
        Row(Param::Alpha, "floor-alpha")
            .number(0, 1)
            .byDefault(0.2)
            .attribute("alpha")
            .placeholder("A")
            .label("floor alpha")
            .help("adakv: the share of each head's budget it keeps whatever the scores, in [0, 1]"),
        Row(Param::Normalize, "normalize")
            .flag()
            .label("normalised scores")
            .help("adakv: scale each head's scores by the share of its own budget in them"),
        Row(Param::IndexDim, "index-dim")
            .integer(1)
            .attribute("index_dim")
            .byDefault(128)
            .placeholder("Di")
            .label("indexer key dimension")
            .help("indexer: the dimension Di of the model's indexer keys, read at every position "
                  "(DeepSeek-V3.2, GLM-5: 128; a capture of a DSA model sets it)")};
    for (ParamInfo& p : rows) {
        const bool dashed = std::string(p.option).find('-') != std::string::npos;
        if (!p.label || !p.help || (dashed && p.attribute == p.option))
            throw std::logic_error(std::string("parameter --") + p.option +
                                   " needs a label, a help line and an attribute");
    }
    return rows;
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

std::string rangeText(const ParamInfo& info) {
    auto num = [&](double x) {
        std::ostringstream os;
        os << x;
        return os.str();
    };
    if (info.max > info.min)
        return std::string("must ") + (info.odd ? "be odd and " : "") + "lie in " +
               (info.openMin ? "(" : "[") + num(info.min) + ", " + num(info.max) +
               (info.openMax ? ")" : "]");
    return std::string("must be ") + (info.odd ? "odd and " : "") + "at least " + num(info.min);
}

bool allows(const ParamInfo& info, double x) {
    if (info.kind == ParamKind::Choice || info.kind == ParamKind::Flag ||
        info.kind == ParamKind::File)
        return true; // (their parsers say what they take)
    if (!std::isfinite(x) || (info.openMin ? x <= info.min : x < info.min))
        return false;
    if (info.max > info.min && (info.openMax ? x >= info.max : x > info.max))
        return false;
    return !info.odd || std::fmod(x, 2.0) != 0;
}

void checkParamRules(const AttentionConfig& c) {
    const MethodInfo& m = methodInfo(c.method);
    auto option = [](Param p) { return std::string("--") + paramInfo(p).option; };
    for (const Param p : m.params) {
        const ParamInfo& info = paramInfo(p);
        if (p == Param::K && c.k >= AttentionConfig::kNoCap)
            continue; // (k "none": the top-p methods' uncapped budget)
        if (!allows(info, c.value(p)))
            throw AttentionError(option(p) + ": " + rangeText(info) + ", got " + paramValue(c, p));
    }
    for (const auto& [a, b] : m.atMost)
        if (c.value(a) > c.value(b))
            throw AttentionError(option(a) + ": " + m.name + " keeps it within " + option(b) +
                                 " (" + paramValue(c, b) + "), got " + paramValue(c, a));
}

bool takes(Method m, Param p) {
    for (Param q : methodInfo(m).params)
        if (q == p)
            return true;
    return false;
}

std::string notTakenNote(Param p, const std::vector<Method>& methods) {
    std::string names;
    for (size_t i = 0; i < methods.size(); ++i)
        names += (i == 0 ? "" : i + 1 == methods.size() ? " or " : ", ") + methodName(methods[i]);
    std::string own;
    if (methods.size() == 1)
        for (Param q : methodInfo(methods.front()).params)
            own += std::string(own.empty() ? "" : " ") + "--" + paramInfo(q).option;
    return "--" + std::string(paramInfo(p).option) + " does not apply to " + names + " (" +
           (methods.size() > 1 ? "none of them takes it"
            : own.empty()      ? "it takes no parameters"
                               : "it takes " + own) +
           "); ignored";
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

std::string attnUsage(const std::set<std::string>& except) {
    std::string s = except.count("method") ? "" : "[--method " + methodNames("|") + "]";
    for (const ParamInfo& p : parameters())
        if (!except.count(p.option))
            s += std::string(s.empty() ? "" : " ") + "[--" + p.option +
                 (p.kind == ParamKind::Flag ? "" : " ") + p.valueName + "]";
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
    return 1.0 * a.S * a.d + 1.0 * a.k * a.valueWithKey() + a.kv();
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

bool budgetCoversLength(const AttentionConfig& c, int64_t S) {
    return takes(c.method, Param::K) && c.k < AttentionConfig::kNoCap && c.k >= S;
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
    a.k = a.positions(c.k); // k beyond the positions there are moves only those
    a.r = c.r;
    a.pageSize = c.pageSize;
    a.n = count;
    return a;
}

TransferArgs literalTransferArgs(const AttentionConfig& c, int64_t S, int64_t d) {
    TransferArgs a = transferArgs(c, S, d);
    a.literal = true;
    a.k = c.k;
    return a;
}

} // namespace sparqlab::attention
