// RULER's fwe (LONGCONTEXT.md): the three most frequent coded words of a Zipf-distributed text;
// generated at each --length with the model's tokenizer (analysis/ruler.h), scored by
// string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_fwe) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerFwe, "fwe", "RULER frequent words",
                     "RULER fwe: the three most frequent coded words of a Zipf-distributed text "
                     "(RULER-style: SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerFwe>);
}
