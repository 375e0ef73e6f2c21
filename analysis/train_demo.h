#pragma once
/// \file train_demo.h
/// `sparqlab-cli train-demo`: trains the shipped demo model (resources/demo-model, its model card
/// gives the recipe) on the State of the Union addresses before 2010 — the tokenizer, then the
/// model with the copy, random-id and attention-loss recipe that teaches retrieval, with
/// checkpoints in a state folder it resumes from. The library entry of the trainer; the
/// command line only reads options into TrainDemoOptions.
///
/// Threading: one call at a time; the job's flag stops it between steps (the state saved).

#include "base/job.h"

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace sparqlab::analysis {

/// A training option out of range; the message names the option.
class TrainOptionError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Every option of train-demo, with its default (the command line's names after ///<).
struct TrainDemoOptions {
    std::string data = "";                    ///< --data
    std::string out = "resources/demo-model"; ///< --out
    std::string state = "build/demo-train";   ///< --state
    int64_t steps = 3000;                     ///< --steps
    double minutes = 1e9;                     ///< --minutes
    uint64_t seed = 1234;                     ///< --seed
    int64_t batch = 4;                        ///< --batch
    int64_t seq = 1024;                       ///< --seq
    int64_t vocab = 4096;                     ///< --vocab
    double lr = 2e-3;                         ///< --lr
    int64_t saveEvery = 200;                  ///< --save-every
    double copyFraction = 0.25;               ///< --copy-fraction
    int64_t copyBlocks = 1;                   ///< --copy-blocks
    double randomCopy = 0.0;                  ///< --random-copy
    int64_t context = 0;                      ///< --context
    int64_t warmup = 100;                     ///< --warmup
    double auxWeight = 0.0;                   ///< --aux-weight
    int64_t auxHold = 0;                      ///< --aux-hold
    int64_t auxUntil = -1;                    ///< --aux-until
    int64_t randomIdsStart = 0;               ///< --random-ids-start
    int64_t randomIdsSteps = 0;               ///< --random-ids-steps
    int64_t evalEvery = 0;                    ///< --eval-every
    double retokenize = 0.0;                  ///< --retokenize
    double copyLossWeight = 1.0;              ///< --copy-loss-weight
    int64_t copyGap = 64;                     ///< --copy-gap
    int64_t probes = 10;                      ///< --probes
    std::string init;           ///< --init: continue from the weights of a model folder
    std::string inductionHeads; ///< --induction-heads: LAYER.HEAD,… the attention loss pulls
    std::string prevHeads;      ///< --prev-heads: LAYER.HEAD,… pulled to the previous token
    bool resume = false;        ///< --resume: go on from the state folder
    bool exemptNorms = false;   ///< --exempt-norms: no weight decay on norms and embeddings
    /// Progress lines ("train-demo: …"); default: standard error.
    std::function<void(const std::string&)> log;
};

/// What a run ended with.
struct TrainDemoResult {
    int64_t steps = 0;
    double loss = 0, minutes = 0, tokensPerSecond = 0;
};

/// Throws TrainOptionError for an option out of range (what trainDemo checks first).
void checkTrainDemoOptions(const TrainDemoOptions& options);

/// Trains; writes the model folder `out` and checkpoints under `state`. Throws TrainOptionError,
/// std::runtime_error naming a file, base::Cancelled (the last checkpoint stays).
TrainDemoResult trainDemo(const TrainDemoOptions& options, const base::Job& job = {});

} // namespace sparqlab::analysis
