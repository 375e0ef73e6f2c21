# Helpers shared by every target of SparQ Lab.

# Sanitizers apply to every target (libraries, executables and tests alike).
if(SPARQLAB_SANITIZE OR SPARQLAB_FUZZ)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  # The decode kernels in one version (attention/decode/kernel.h): the sanitizers check the code,
  # not the instruction sets.
  add_compile_definitions(SPARQLAB_NO_CLONES)
endif()

# ccache, where installed: every compiler call goes through it (C, C++, CUDA). With a cache
# outside the work tree (scripts/test.sh sets CCACHE_BASEDIR to the checkout, so that another
# clone of the same sources hits it), a second build of the same sources takes minutes; it never
# changes a result. GCC's precompiled headers need -fpch-preprocess and the sloppiness test.sh sets.
option(SPARQLAB_CCACHE "Compile through ccache when it is installed" ON)
if(SPARQLAB_CCACHE)
  find_program(SPARQLAB_CCACHE_PROGRAM ccache)
  if(SPARQLAB_CCACHE_PROGRAM)
    foreach(lang C CXX CUDA)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${SPARQLAB_CCACHE_PROGRAM})
    endforeach()
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)
  endif()
endif()
if(SPARQLAB_FUZZ) # coverage feedback for libFuzzer in every library the targets call
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# Warnings for our own code; libtorch and Qt headers are system includes.
# Qt keywords (slots, signals, emit) clash with libtorch identifiers, so our code uses Q_SLOTS
# and Q_SIGNALS; only targets that include QCustomPlot (which needs them) pass QT_KEYWORDS.
function(sparqlab_target_defaults target)
  cmake_parse_arguments(D "QT_KEYWORDS" "" "" ${ARGN})
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter>")
  # The unit tables' rows are designated initializers (named fields), C++20's and GCC's in C++17.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wno-c++20-designator>")
  endif()
  if(NOT D_QT_KEYWORDS)
    target_compile_definitions(${target} PRIVATE QT_NO_KEYWORDS)
  endif()
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# The heavy libtorch headers, precompiled (about 20 s each, 300 MB).
set(SPARQLAB_TORCH_PCH <ATen/ATen.h> <torch/types.h> <vector> <string> <memory>)

# sparqlab_torch_pch(TARGET [REUSE_FROM OTHER]): TARGET compiles with the libtorch headers
# precompiled — OTHER's where given, which saves compiling its own. GCC takes a header precompiled
# by another target when the code-generation flags match and every macro defined there is
# defined alike here (-Winvalid-pch says otherwise): the analysis library's serves the targets
# that use Qt (-fPIC, Qt's own flag), sparqlab_exe_pch's the executables without Qt (-fPIE).
# clang rejects one made with other definitions, so there each target makes its own.
function(sparqlab_torch_pch target)
  cmake_parse_arguments(P "" "REUSE_FROM" "" ${ARGN})
  if(P_REUSE_FROM AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_precompile_headers(${target} REUSE_FROM ${P_REUSE_FROM})
  else()
    target_precompile_headers(${target} PRIVATE ${SPARQLAB_TORCH_PCH})
  endif()
endfunction()

# sparqlab_units(TARGET t DIR folder REGISTRY name NAMESPACE ns TYPE type [SOURCES_VAR var])
# Every file and folder of DIR is one unit (a method, an eval task, a model family, a GUI view):
# its sources join TARGET, and generated/NAME.inc declares each unit's function `ns::unit()`
# (returning TYPE) and lists them all in `ns::kAll`, in name order, for the registry
# (base/unit_table.h) — so a new unit needs no line in any list. A unit is DIR/foo.cpp, or
# a folder DIR/foo/ whose .cpp files are its sources (CUDA kernels are not units: attention/cuda). SOURCES_VAR
# receives every unit source.
function(sparqlab_units)
  cmake_parse_arguments(U "" "TARGET;DIR;REGISTRY;NAMESPACE;TYPE;SOURCES_VAR" "" ${ARGN})
  file(GLOB entries LIST_DIRECTORIES true CONFIGURE_DEPENDS ${U_DIR}/*)
  list(SORT entries)
  set(decls "")
  set(names "")
  set(all_sources)
  foreach(entry ${entries})
    get_filename_component(unit ${entry} NAME_WE)
    if(IS_DIRECTORY ${entry})
      file(GLOB sources CONFIGURE_DEPENDS ${entry}/*.cpp ${entry}/*.h)
    elseif(entry MATCHES "\\.cpp$")
      set(sources ${entry})
    else()
      continue()
    endif()
    target_sources(${U_TARGET} PRIVATE ${sources})
    list(APPEND all_sources ${sources})
    string(APPEND decls "${U_TYPE} ${unit}();\n")
    string(APPEND names "    ${unit},\n")
  endforeach()
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated/${U_REGISTRY}.inc)
  file(WRITE ${out}.new
       "// Generated from the listing of ${U_DIR} (cmake/SparqlabHelpers.cmake).\n"
       "namespace ${U_NAMESPACE} {\n${decls}inline constexpr ${U_TYPE} (*const kAll[])() = {\n"
       "${names}};\n} // namespace ${U_NAMESPACE}\n")
  configure_file(${out}.new ${out} COPYONLY)
  target_include_directories(${U_TARGET} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated)
  if(U_SOURCES_VAR)
    set(${U_SOURCES_VAR} ${all_sources} PARENT_SCOPE)
  endif()
endfunction()
