// RULER's niah_multikey_2 (LONGCONTEXT.md): one keyed number among keyed-number distractor lines;
// generated at each --length with the model's tokenizer (analysis/ruler.h), scored by
// string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_multikey_2) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahMultikey2, "niah_multikey_2", "NIAH multi-key 2",
                     "RULER niah_multikey_2: one keyed number among keyed-number distractor lines "
                     "(RULER-style: SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahMultikey2>);
}
