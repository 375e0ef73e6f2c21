// The attention interface (attention.h): one decode step or T of them through the method's
// unit (method_spec.h), the configuration's checks, the running mean of V, and the names the
// command line and the files use. The methods live in attention/methods/, the shared steps of
// SPARQ.md §2 in method_kit.cpp.

#include "attention.h"

#include "method_kit.h"
#include "method_spec.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <sstream>

namespace sparqlab::attention {

using namespace detail;

at::Tensor Calibration::tensor(const std::string& name) const {
    const auto it = tensors.find(name);
    return it == tensors.end() ? at::Tensor() : it->second;
}

int64_t Calibration::layers() const {
    for (const auto& [name, t] : tensors)
        if (t.defined())
            return t.size(0);
    return 0;
}

int64_t AttentionConfig::effectiveLocal() const {
    if (local)
        return *local;
    const auto fn = methodSpec(method).defaultLocal;
    return fn ? fn(*this) : 0;
}

void AttentionConfig::validateFor(int64_t headDim, int64_t layers, int64_t heads,
                                  int64_t kvHeads) const {
    checkConfig(*this, {headDim, layers, heads, kvHeads}, /*user=*/true);
}

void AttentionConfig::checkRanges() const {
    checkConfig(*this, {}, /*user=*/false);
}

AttentionResult attendSteps(const AttentionInputs& in, const AttentionConfig& c,
                            const AttendOptions& o) {
    checkGroupRule(c); // (a caller of the library may not have called validateFor)
    checkParamRules(c);
    const Prepared p = prepare(in.q, in.k, in.v, in.valid, c, o.validate);
    if (!p.v.defined())
        fail("attention needs V");
    return methodSpec(c.method).run(p, in, c, o);
}
AttentionResult attend(const AttentionInputs& in, const AttentionConfig& c,
                       const AttendOptions& o) {
    if (!in.q.defined() || in.q.dim() != 3)
        fail("q must be [B, Hq, D], got " + (in.q.defined() ? shapeOf(in.q) : "none"));
    AttentionInputs steps = in;
    steps.q = in.q.unsqueeze(2);
    if (in.valid.defined() && in.valid.dim() == 2)
        steps.valid = in.valid.unsqueeze(1);
    if (in.acc.defined() && in.acc.dim() == 3)
        steps.acc = in.acc.unsqueeze(2);
    if (in.qWin.defined() && in.qWin.dim() == 4)
        steps.qWin = in.qWin.unsqueeze(2);
    // (the named inputs are per position, the same for one step or T)
    AttentionResult r = attendSteps(steps, c, o);
    for (at::Tensor* t :
         {&r.y,         &r.indices, &r.selected,   &r.count,       &r.mass,      &r.alpha,
          &r.tau,       &r.compIdx, &r.margin,     &r.marginRel,   &r.yTopk,     &r.meanV,
          &r.weightSum, &r.estMass, &r.massMargin, &r.pageIndices, &r.pageScore, &r.votes,
          &r.pooled,    &r.logits,  &r.probs,      &r.zHat,        &r.sHat})
        if (t->defined())
            *t = t->squeeze(2);
    for (auto& [name, t] : r.extra)
        if (t.defined())
            t = t.squeeze(2);
    return r;
}

at::Tensor softmaxWithSink(const at::Tensor& z, const at::Tensor& sink) {
    if (!sink.defined())
        return at::softmax(z, -1);
    // The sink is one more logit of the row: the row's maximum taken over it too (as Hugging
    // Face's gpt-oss subtracts it), its probability not returned.
    const at::Tensor s = sink.to(z.scalar_type());
    const at::Tensor m = at::maximum(z.amax(-1, /*keepdim=*/true), s);
    const at::Tensor e = (z - m).exp();
    return e / (e.sum(-1, /*keepdim=*/true) + (s - m).exp());
}

void softmaxWithSinkInPlace(at::Tensor& z, const at::Tensor& sink) {
    if (!sink.defined()) {
        at::_softmax_out(z, z, -1, /*half_to_float=*/false);
        return;
    }
    const at::Tensor s = sink.to(z.scalar_type());
    const at::Tensor m = at::maximum(z.amax(-1, /*keepdim=*/true), s);
    z.sub_(m).exp_();
    z.div_(z.sum(-1, /*keepdim=*/true).add_((s - m).exp()));
}

RunningMeanV::RunningMeanV(const at::Tensor& v) {
    if (v.dim() != 4)
        fail("V must be [B, Hkv, S, D], got " + shapeOf(v));
    m_sum = v.to(at::kDouble).sum(2);
    m_count = v.size(2);
}

void RunningMeanV::append(const at::Tensor& vNew) {
    if (vNew.sizes() != m_sum.sizes())
        fail("the new value must be [B, Hkv, D] = " + shapeOf(m_sum) + ", got " + shapeOf(vNew));
    m_sum.add_(vNew.to(at::kDouble));
    ++m_count;
}

at::Tensor RunningMeanV::mean() const {
    return (m_sum / static_cast<double>(std::max<int64_t>(m_count, 1))).to(at::kFloat);
}

// --- names ------------------------------------------------------------------------------------

Method parseMethod(const std::string& name) {
    if (const MethodInfo* m = findMethod(name))
        return m->id;
    fail("unknown attention method '" + name + "' (" + methodNames() + ")");
}

std::string methodName(Method m) {
    return methodInfo(m).name;
}

TauMode parseTauMode(const std::string& name, double* value) {
    if (name == "adaptive" || name == "eq9")
        return TauMode::Adaptive;
    if (name == "sqrt-dh" || name == "sqrt_dh")
        return TauMode::SqrtDh;
    if (name == "sqrt-r" || name == "sqrt_r")
        return TauMode::SqrtR;
    if (name == "one")
        return TauMode::One;
    char* end = nullptr;
    const double x = std::strtod(name.c_str(), &end);
    if (name.empty() || end != name.c_str() + name.size())
        fail("unknown temperature '" + name + "' (adaptive, sqrt-dh, sqrt-r or a number)");
    if (!std::isfinite(x) || x <= 0) // (a number, but not one a temperature can be)
        fail("the temperature must be a finite positive number, got " + name);
    if (value)
        *value = x;
    return TauMode::Fixed;
}

std::optional<int64_t> parseWholeNumber(const std::string& text) {
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
        return std::nullopt;
    return static_cast<int64_t>(x);
}

std::optional<double> parseFiniteNumber(const std::string& text) {
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(x))
        return std::nullopt;
    return x;
}

std::string tauName(TauMode mode, double value) {
    switch (mode) {
    case TauMode::Adaptive:
        return "adaptive";
    case TauMode::SqrtDh:
        return "sqrt-dh";
    case TauMode::SqrtR:
        return "sqrt-r";
    case TauMode::One:
        return "one";
    case TauMode::Fixed: {
        std::ostringstream os;
        os << value;
        return os.str();
    }
    }
    return "?";
}

double AttentionConfig::value(Param p) const {
    const ParamInfo& info = paramInfo(p);
    if (info.get)
        return info.get(*this);
    const auto it = values.find(p);
    if (it != values.end())
        return it->second;
    for (const auto& [q, v] : methodInfo(method).defaults) // the method's own default
        if (q == p)
            return parseParamNumber(info, v);
    return info.defaultValue;
}

at::Tensor AttentionInputs::input(const std::string& name) const {
    const auto it = extra.find(name);
    return it == extra.end() ? at::Tensor() : it->second;
}

at::Tensor AttentionResult::output(const std::string& name) const {
    const auto it = extra.find(name);
    return it == extra.end() ? at::Tensor() : it->second;
}

GroupSelect parseGroupSelect(const std::string& name) {
    if (name == "sum-probs" || name == "sum_probs")
        return GroupSelect::SumProbs;
    if (name == "sum-logits" || name == "sum_logits")
        return GroupSelect::SumLogits;
    if (name == "per-head" || name == "per_head")
        return GroupSelect::PerHead;
    if (name == "max-probs" || name == "max_probs")
        return GroupSelect::MaxProbs;
    fail("unknown GQA rule '" + name + "' (sum-probs, sum-logits, per-head, max-probs)");
}

std::string groupSelectName(GroupSelect g) {
    switch (g) {
    case GroupSelect::SumProbs:
        return "sum-probs";
    case GroupSelect::SumLogits:
        return "sum-logits";
    case GroupSelect::PerHead:
        return "per-head";
    case GroupSelect::MaxProbs:
        return "max-probs";
    }
    return "?";
}

std::string paramValue(const AttentionConfig& c, Param p) {
    const ParamInfo& info = paramInfo(p);
    if (info.text)
        return info.text(c);
    const double x = c.value(p);
    switch (info.kind) {
    case ParamKind::Choice:
        return info.choices.at(static_cast<size_t>(x));
    case ParamKind::Integer:
    case ParamKind::Flag:
        return std::to_string(static_cast<int64_t>(x));
    case ParamKind::Number:
    case ParamKind::File:
        break;
    }
    std::ostringstream os;
    os << x;
    return os.str();
}

std::string paramValueInEffect(const AttentionConfig& c, Param p) {
    const ParamInfo& info = paramInfo(p);
    if (info.clampedTo && takes(c.method, *info.clampedTo) && !info.text &&
        c.value(p) > c.value(*info.clampedTo))
        return paramValue(c, *info.clampedTo);
    return paramValue(c, p);
}

double parseParamNumber(const ParamInfo& info, const std::string& v) {
    auto inRange = [&](double x) {
        if (!allows(info, x))
            fail(rangeText(info) + ", got " + v);
        return x;
    };
    switch (info.kind) {
    case ParamKind::Integer: {
        const std::optional<int64_t> x = parseWholeNumber(v);
        if (!x)
            fail("needs a whole number, got '" + v + "'");
        if (*x < static_cast<int64_t>(info.min))
            fail("must be at least " + std::to_string(static_cast<int64_t>(info.min)) + ", got " +
                 std::to_string(*x));
        return inRange(static_cast<double>(*x));
    }
    case ParamKind::Flag: // given: on ("0": off, as a session stores it)
        return v == "0" ? 0 : 1;
    case ParamKind::Choice: {
        const auto at = std::find(info.choices.begin(), info.choices.end(), v);
        if (at == info.choices.end()) {
            std::string names;
            for (const std::string& n : info.choices)
                names += (names.empty() ? "" : ", ") + n;
            fail("unknown value '" + v + "' (" + names + ")");
        }
        return static_cast<double>(at - info.choices.begin());
    }
    case ParamKind::Number: {
        const std::optional<double> x = parseFiniteNumber(v);
        if (!x)
            fail("needs a number, got '" + v + "'");
        return inRange(*x);
    }
    case ParamKind::File:
        break;
    }
    fail(std::string(info.option) + " names a file, read by the caller");
}

void setParamNumber(AttentionConfig& c, Param p, double x) {
    const ParamInfo& info = paramInfo(p);
    if (info.set)
        info.set(c, x);
    else if (info.kind != ParamKind::File)
        c.values[p] = x;
}

void setParamValue(AttentionConfig& c, Param p, const std::string& v) {
    const ParamInfo& info = paramInfo(p);
    if (info.parse)
        info.parse(c, v);
    else
        setParamNumber(c, p, parseParamNumber(info, v));
}

Pooling parsePooling(const std::string& name) {
    if (name == "max")
        return Pooling::Max;
    if (name == "avg")
        return Pooling::Avg;
    fail("unknown pooling '" + name + "' (max, avg)");
}

std::string poolingName(Pooling p) {
    return p == Pooling::Max ? "max" : "avg";
}

ChannelMode parseChannelMode(const std::string& name) {
    if (name == "qk")
        return ChannelMode::QK;
    if (name == "q")
        return ChannelMode::Q;
    if (name == "k")
        return ChannelMode::K;
    fail("unknown channel calibration mode '" + name + "' (qk, q, k)");
}

} // namespace sparqlab::attention
