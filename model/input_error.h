#pragma once
/// \file input_error.h
/// What a model is asked to run and cannot: an empty prompt, a token id outside its
/// vocabulary, a sequence longer than its context, a recurrent state asked to rewind. One
/// line, as every error (docs/design/CONTRACTS.md §2).

#include <stdexcept>

namespace sparqlab::model {

class InputError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

} // namespace sparqlab::model
