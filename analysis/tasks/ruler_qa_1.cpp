// RULER's qa_1 (LONGCONTEXT.md §7): a SQuAD 2.0 question answered from its paragraph among as many
// documents as the length holds; only with the user's SQuAD file (nothing is shipped), scored by
// string_match_part.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_qa_1) {
    using namespace sparqlab::analysis;
    EvalTaskSpec s = rulerSpec(EvalTask::RulerQa1, "qa_1", "RULER QA (SQuAD)",
                               "RULER qa_1: a SQuAD 2.0 question among distractor documents (your "
                               "SQuAD file; RULER-style)",
                               rulerRead<EvalTask::RulerQa1>);
    s.metric = "string_match_part";
    s.metricLabel = "RULER score (string match, part)";
    s.data = "SQuAD 2.0 dev JSON (dev-v2.0.json; not shipped: give --data)";
    s.shippedData = "";
    s.score = rulerScorePart;
    return s;
}
