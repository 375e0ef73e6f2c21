// RULER's niah_single_3 (LONGCONTEXT.md): one UUID under a word key in essays; generated at each
// --length with the model's tokenizer (analysis/ruler.h), scored by string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_single_3) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahSingle3, "niah_single_3", "NIAH single 3",
                     "RULER niah_single_3: one UUID under a word key in essays (RULER-style: SOTU "
                     "haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahSingle3>);
}
