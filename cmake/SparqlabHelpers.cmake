# Helpers shared by every target of SparQ Lab.

# Sanitizers apply to every target (libraries, executables and tests alike).
if(SPARQLAB_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Warnings for our own code; libtorch and Qt headers are system includes.
function(sparqlab_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# The heavy libtorch headers, precompiled once per target that uses them.
set(SPARQLAB_TORCH_PCH <ATen/ATen.h> <torch/types.h> <vector> <string> <memory>)
