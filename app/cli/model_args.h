#pragma once
/// \file model_args.h
/// What the model subcommands share: opening --model as --compute asks.

#include "args.h"

#include "model/model.h"

#include <memory>

namespace sparqlab::cli {

/// Opens --model with the weights in the dtype --compute asks for (auto: float32 when it fits,
/// else a half-precision checkpoint's own dtype), with a progress bar while they load.
std::unique_ptr<model::Model> openModel(const Args& a, model::ModelOpenOptions o = {});

} // namespace sparqlab::cli
