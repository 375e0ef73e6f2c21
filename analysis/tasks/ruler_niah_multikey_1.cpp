// RULER's niah_multikey_1 (LONGCONTEXT.md): one of four keyed numbers in essays (three
// distractors); generated at each --length with the model's tokenizer (analysis/ruler.h), scored by
// string_match_all.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_niah_multikey_1) {
    using namespace sparqlab::analysis;
    return rulerSpec(EvalTask::RulerNiahMultikey1, "niah_multikey_1", "NIAH multi-key 1",
                     "RULER niah_multikey_1: one of four keyed numbers in essays (three "
                     "distractors) (RULER-style: SOTU haystack, wamerican words)",
                     rulerRead<EvalTask::RulerNiahMultikey1>);
}
