// The oracle top-p budget (METHODS.md §6.2, Twilight 2025): the fewest exact top positions
// holding mass p, at most k.

#include "attention/detail.h"
#include "attention/top_p.h"

#include <ATen/ATen.h>

namespace sparqlab::attention::detail {

/// The unit's decode kernel (decode.cpp beside this file).
const DecodeKernel& oracleTopPDecodeKernel();
namespace {

AttentionResult runOracleTopP(const Prepared& p, const AttentionInputs&, const AttentionConfig& c,
                              const AttendOptions& o) {
    const at::Tensor z = exactLogits(p);
    const at::Tensor s = at::softmax(z, -1);
    const TopP t = topPSelect(p, groupRankScore(z, s, c.gqa), unitMass(s, c.gqa), c);
    AttentionResult out;
    out.y = p.heads(attendOver(p, z, t.sel.mask));
    out.alpha = at::ones({p.B, p.Hq, p.T}, out.y.options());
    out.meanV = meanValue(p);
    fillTopP(p, z, t, c, o, out);
    keepExact(p, z, o, out);
    return out;
}

double oracleTopPTransfer(const TransferArgs& a) {
    return 1.0 * a.S * a.d + transfer::count(a) * a.d + 2.0 * a.d;
}

} // namespace
} // namespace sparqlab::attention::detail

SPARQLAB_METHOD(oracle_top_p) {
    MethodSpec s;
    MethodInfo& m = s.info;
    m.id = Method::OracleTopP;
    m.name = "oracle-top-p";
    m.label = "Oracle top-p";
    m.summary = "the fewest exact top positions holding mass p, at most k (Twilight 2025)";
    m.spec = "METHODS.md §6.2";
    m.params = {Param::P, Param::K, Param::Local, Param::Gqa};
    m.budgetVaries = true;
    m.transfer = detail::oracleTopPTransfer;
    m.transferFormula = "S·d + n·d + 2·d";
    m.evalGrid = "p=0.5,0.8,0.9,0.95,0.99";
    s.run = detail::runOracleTopP;
    s.decode = &detail::oracleTopPDecodeKernel();
    return s;
}
