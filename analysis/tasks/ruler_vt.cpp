// RULER's vt (LONGCONTEXT.md): every variable a chain of five assignments gives a value (one-shot);
// generated at each --length with the model's tokenizer (analysis/ruler.h), scored by
// string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_vt) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerVt, "vt", "RULER variable tracking",
                     "RULER vt: every variable a chain of five assignments gives a value "
                     "(one-shot) (RULER-style: SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerVt>);
}
