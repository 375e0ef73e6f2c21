# The fuzz targets, one per reader of a file users bring, and what each links: the one list for
# the libFuzzer build (tests/fuzz/CMakeLists.txt) and CTest's smoke runs (tests/CMakeLists.txt).
set(SPARQLAB_FUZZ_TARGETS safetensors config tokenizer tokenize_text capture calibration
    bench_json eval_data eval_results session chat_template ruler method_inputs)

# Links executable `exe` of fuzz target `target` to the lowest library that holds its reader:
# the text readers build without libtorch, so they need not wait for the model libraries.
function(sparqlab_fuzz_target_links exe target)
  if(target MATCHES "^(tokenizer|tokenize_text|chat_template)$")
    target_link_libraries(${exe} PRIVATE sparqlab_text)
  elseif(target MATCHES "^(bench_json|eval_data|eval_results|session|ruler|method_inputs|capture)$")
    target_link_libraries(${exe} PRIVATE sparqlab_analysis)
  else()
    target_link_libraries(${exe} PRIVATE sparqlab_capture)
  endif()
  # The one that reads the demo model (an absolute path: kept off the rest, for ccache).
  if(target STREQUAL "tokenize_text")
    target_compile_definitions(${exe} PRIVATE
      SPARQLAB_DEMO_MODEL_DIR="${PROJECT_SOURCE_DIR}/resources/demo-model")
  endif()
endfunction()
