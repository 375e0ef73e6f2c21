// RULER's qa_2 (LONGCONTEXT.md §7): a HotpotQA question answered from its ten paragraphs among as
// many documents as the length holds; only with the user's HotpotQA file (nothing is shipped),
// scored by string_match_part.

#include "analysis/ruler_task.h"

SPARQLAB_EVAL_TASK(ruler_qa_2) {
    using namespace sparqlab::analysis;
    EvalTaskSpec s = rulerSpec(EvalTask::RulerQa2, "qa_2", "RULER QA (HotpotQA)",
                               "RULER qa_2: a HotpotQA question among distractor documents (your "
                               "HotpotQA file; RULER-style)",
                               rulerRead<EvalTask::RulerQa2>);
    s.metric = "string_match_part";
    s.metricLabel = "RULER score (string match, part)";
    s.data =
        "HotpotQA dev distractor JSON (hotpot_dev_distractor_v1.json; not shipped: give --data)";
    s.shippedData = "";
    s.score = rulerScorePart;
    return s;
}
