// RULER's niah_single_1 (LONGCONTEXT.md): one number under a word key in a repeated noise
// paragraph; generated at each --length with the model's tokenizer (analysis/ruler.h), scored by
// string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_single_1) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahSingle1, "niah_single_1", "NIAH single 1",
                     "RULER niah_single_1: one number under a word key in a repeated noise "
                     "paragraph (RULER-style: SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahSingle1>);
}
