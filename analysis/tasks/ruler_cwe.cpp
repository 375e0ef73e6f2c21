// RULER's cwe (LONGCONTEXT.md): the ten most common words of a numbered list (one-shot); generated
// at each --length with the model's tokenizer (analysis/ruler.h), scored by string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_cwe) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerCwe, "cwe", "RULER common words",
                     "RULER cwe: the ten most common words of a numbered list (one-shot) "
                     "(RULER-style: SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerCwe>);
}
