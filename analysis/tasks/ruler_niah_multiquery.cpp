// RULER's niah_multiquery (LONGCONTEXT.md): the numbers of four keys in essays; generated at each
// --length with the model's tokenizer (analysis/ruler.h), scored by string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_multiquery) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahMultiquery, "niah_multiquery", "NIAH multi-query",
                     "RULER niah_multiquery: the numbers of four keys in essays (RULER-style: SOTU "
                     "haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahMultiquery>);
}
