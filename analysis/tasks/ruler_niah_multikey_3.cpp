// RULER's niah_multikey_3 (LONGCONTEXT.md): one UUID-keyed UUID among UUID distractor lines;
// generated at each --length with the model's tokenizer (analysis/ruler.h), scored by
// string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_multikey_3) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahMultikey3, "niah_multikey_3", "NIAH multi-key 3",
                     "RULER niah_multikey_3: one UUID-keyed UUID among UUID distractor lines "
                     "(RULER-style: SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahMultikey3>);
}
