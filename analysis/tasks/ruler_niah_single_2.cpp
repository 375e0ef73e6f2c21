// RULER's niah_single_2 (LONGCONTEXT.md): one number under a word key in essays; generated at each
// --length with the model's tokenizer (analysis/ruler.h), scored by string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_single_2) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahSingle2, "niah_single_2", "NIAH single 2",
                     "RULER niah_single_2: one number under a word key in essays (RULER-style: "
                     "SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahSingle2>);
}
