# Helpers shared by every target of SparQ Lab.

# Sanitizers apply to every target (libraries, executables and tests alike).
if(SPARQLAB_SANITIZE OR SPARQLAB_FUZZ)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(SPARQLAB_FUZZ) # coverage feedback for libFuzzer in every library the targets call
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# Warnings for our own code; libtorch and Qt headers are system includes.
# Qt keywords (slots, signals, emit) clash with libtorch identifiers, so our code uses Q_SLOTS
# and Q_SIGNALS; only targets that include QCustomPlot (which needs them) pass QT_KEYWORDS.
function(sparqlab_target_defaults target)
  cmake_parse_arguments(D "QT_KEYWORDS" "" "" ${ARGN})
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(NOT D_QT_KEYWORDS)
    target_compile_definitions(${target} PRIVATE QT_NO_KEYWORDS)
  endif()
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# The heavy libtorch headers, precompiled once per target that uses them.
set(SPARQLAB_TORCH_PCH <ATen/ATen.h> <torch/types.h> <vector> <string> <memory>)
