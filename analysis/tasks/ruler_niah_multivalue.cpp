// RULER's niah_multivalue (LONGCONTEXT.md): all four numbers of one key in essays; generated at
// each --length with the model's tokenizer (analysis/ruler.h), scored by string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_multivalue) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahMultivalue, "niah_multivalue", "NIAH multi-value",
                     "RULER niah_multivalue: all four numbers of one key in essays (RULER-style: "
                     "SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahMultivalue>);
}
