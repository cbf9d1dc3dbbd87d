# xla_aot.cmake: compile xla-aot model specs at build time and link them like any static library.
#
#   include(path/to/xla_aot.cmake)
#   xla_aot_add_model(simplenet SPEC models/simplenet.yaml XLA_TARGET x86_64-avx2)
#   target_link_libraries(app PRIVATE simplenet)
#
# xla_aot_add_model(<target> SPEC <file> XLA_TARGET <xla-aot target> [NAME <model name>]
#                   [INPUT_SHAPES <NAME=D0,D1,...>...] [DIMS <SYMBOL=N>...]
#                   [FREEZE <NAME=VALUE|NAME=FILE.npy>...] [NO_WINOGRAD] [MULTI_ISA]
#                   [PRECISION <f32|f16-weights|bf16-weights|bf16|f16|int8-weights|int8-weights-per-tensor>]
#                   [QUANTIZE_CALIBRATION <dir> [QUANTIZE_METHOD <minmax|percentile|entropy>]
#                    [PER_CHANNEL]])
#   Runs `xla-aot compile` during the build (again whenever the spec or a weight file changes) and
#   defines <target>, an imported static library whose include directories hold <name>.h and
#   runtime-min's xla_aot_runtime.h, and which links the dl library (the CUDA launcher of a CUDA
#   target uses dlopen). NAME defaults to the spec's `name:`. INPUT_SHAPES, DIMS and FREEZE fix an
#   imported graph's input shapes, symbolic dims and constant inputs at build time (the CLI's
#   --input-shape, --dim and --freeze; a frozen .npy file is a dependency of the build).
#   NO_WINOGRAD keeps stride-1 3×3 convolutions direct (the CLI's --no-winograd: results then
#   match the reference interpreter to rounding; see docs/performance.md).
#   MULTI_ISA compiles for `x86_64-multi` instead: one library with AVX-512, AVX2 and SSE2 code
#   that picks on its first call what the CPU runs (docs/codegen.md); or `aarch64-multi` when
#   XLA_TARGET is an aarch64 target or, without XLA_TARGET, CMAKE_SYSTEM_PROCESSOR is aarch64
#   (the app passes getauxval(AT_HWCAP) to <name>_set_hwcap).
#   PRECISION stores the weights of dots and convolutions in half precision (the CLI's
#   --precision; `-weights`: f32 arithmetic, half the weight bytes; `bf16`: bfloat16 products,
#   f32 accumulation; `f16`: IEEE half operands, f16 sums on aarch64 +fullfp16; see
#   docs/precision.md; `int8-weights`: symmetric int8 weights per output channel).
#   QUANTIZE_CALIBRATION quantizes the model after training first (`xla-aot quantize SPEC
#   --calibration <dir> [--method ...] [--per-channel] -o <build dir>/<name>_int8.yaml`, then
#   compiles that spec): uint8 activations calibrated on the .npy samples of <dir> (relative to
#   the calling CMakeLists.txt; its files are dependencies), int8 weights (docs/quantization.md).
#
# XLA_AOT_EXECUTABLE (cache variable) is the compiler; by default the `xla-aot` on the PATH, else the
# release build of this checkout. XLA_AOT_DUMP_TO in the environment of the build dumps every stage.

set(XLA_AOT_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." CACHE INTERNAL "")
if(NOT XLA_AOT_EXECUTABLE)
  find_program(XLA_AOT_FOUND xla-aot)
  if(XLA_AOT_FOUND)
    set(XLA_AOT_EXECUTABLE "${XLA_AOT_FOUND}" CACHE FILEPATH "the xla-aot compiler")
  else()
    set(XLA_AOT_EXECUTABLE "${XLA_AOT_ROOT}/target/release/xla-aot" CACHE FILEPATH "the xla-aot compiler")
  endif()
endif()

function(xla_aot_add_model target)
  cmake_parse_arguments(ARG "NO_WINOGRAD;MULTI_ISA;PER_CHANNEL" "SPEC;XLA_TARGET;NAME;PRECISION;QUANTIZE_CALIBRATION;QUANTIZE_METHOD" "INPUT_SHAPES;DIMS;FREEZE" ${ARGN})
  if(ARG_MULTI_ISA)
    if(ARG_XLA_TARGET MATCHES "^aarch64" OR (NOT ARG_XLA_TARGET AND CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64"))
      set(ARG_XLA_TARGET aarch64-multi)
    elseif(NOT ARG_XLA_TARGET OR ARG_XLA_TARGET MATCHES "^x86_64")
      set(ARG_XLA_TARGET x86_64-multi)
    else()
      message(FATAL_ERROR "xla_aot_add_model(${target}): MULTI_ISA is for x86_64 and aarch64 targets (XLA_TARGET ${ARG_XLA_TARGET}); drop one of them")
    endif()
  endif()
  if(NOT ARG_SPEC OR NOT ARG_XLA_TARGET)
    message(FATAL_ERROR "xla_aot_add_model(${target}): SPEC and XLA_TARGET (or MULTI_ISA) are required")
  endif()
  get_filename_component(spec "${ARG_SPEC}" ABSOLUTE)
  if(NOT EXISTS "${spec}")
    message(FATAL_ERROR "xla_aot_add_model(${target}): spec ${spec} does not exist")
  endif()
  get_filename_component(spec_dir "${spec}" DIRECTORY)

  # The model name (prefix of the library's symbols) and the files it depends on: an .onnx or
  # .hlo.txt file given directly is named after its stem (as `xla-aot compile` names it); a YAML
  # spec gives `name:`, its `params:` weights and the file its `graph:` imports.
  set(name "${ARG_NAME}")
  set(deps "${spec}")
  get_filename_component(spec_file "${spec}" NAME)
  string(TOLOWER "${spec_file}" spec_lower)
  if(spec_lower MATCHES "(\\.onnx|\\.hlo\\.txt|\\.hlo)$")
    string(LENGTH "${spec_file}" len)
    string(LENGTH "${CMAKE_MATCH_1}" ext_len)
    math(EXPR stem_len "${len} - ${ext_len}")
    string(SUBSTRING "${spec_file}" 0 ${stem_len} stem)
    string(REGEX REPLACE "[^A-Za-z0-9_]" "_" stem "${stem}")
    if(stem MATCHES "^[0-9]")
      set(stem "_${stem}")
    endif()
    if(name AND NOT name STREQUAL stem)
      message(FATAL_ERROR "xla_aot_add_model(${target}): ${spec_file} compiles as `${stem}`; wrap it in a YAML spec (graph: {onnx|hlo: FILE}) to name it `${name}`")
    endif()
    set(name "${stem}")
    set(spec_lines "")
  else()
    file(STRINGS "${spec}" spec_lines)
  endif()
  foreach(line IN LISTS spec_lines)
    if(NOT name AND line MATCHES "^name:[ \t]*([A-Za-z_][A-Za-z0-9_]*)")
      set(name "${CMAKE_MATCH_1}")
    endif()
    if(line MATCHES "^params:[ \t]*([^ \t#]+)")
      set(params "${spec_dir}/${CMAKE_MATCH_1}")
      if(IS_DIRECTORY "${params}")
        file(GLOB weight_files "${params}/*.npy")
        list(APPEND deps ${weight_files})
      else()
        list(APPEND deps "${params}")
      endif()
    endif()
    if(line MATCHES "^graph:.*(onnx|hlo):[ \t]*([^ \t,}#]+)")
      list(APPEND deps "${spec_dir}/${CMAKE_MATCH_2}")
    endif()
  endforeach()
  if(NOT name)
    message(FATAL_ERROR "xla_aot_add_model(${target}): no `name:` in ${spec}; pass NAME")
  endif()

  set(out "${CMAKE_CURRENT_BINARY_DIR}/xla_aot/${target}")
  file(MAKE_DIRECTORY "${out}")
  set(compile_args compile "${spec}" --target "${ARG_XLA_TARGET}" --out-dir "${out}")
  foreach(s IN LISTS ARG_INPUT_SHAPES)
    list(APPEND compile_args --input-shape "${s}")
  endforeach()
  foreach(d IN LISTS ARG_DIMS)
    list(APPEND compile_args --dim "${d}")
  endforeach()
  if(ARG_NO_WINOGRAD)
    list(APPEND compile_args --no-winograd)
  endif()
  if(ARG_PRECISION)
    list(APPEND compile_args --precision "${ARG_PRECISION}")
  endif()
  foreach(f IN LISTS ARG_FREEZE)
    # A .npy path is relative to the calling CMakeLists.txt, like SPEC.
    if(f MATCHES "^([^=]+)=(.*\\.npy)$")
      get_filename_component(frozen "${CMAKE_MATCH_2}" ABSOLUTE)
      set(f "${CMAKE_MATCH_1}=${frozen}")
      list(APPEND deps "${frozen}")
    endif()
    list(APPEND compile_args --freeze "${f}")
  endforeach()
  set(quantize_command "")
  if(ARG_QUANTIZE_CALIBRATION)
    # Post-training quantization: the quantized spec is what gets compiled.
    get_filename_component(calibration "${ARG_QUANTIZE_CALIBRATION}" ABSOLUTE)
    file(GLOB_RECURSE calibration_files "${calibration}/*.npy")
    list(APPEND deps ${calibration_files})
    set(quantized "${out}/${name}_int8.yaml")
    set(quantize_command COMMAND "${XLA_AOT_EXECUTABLE}" quantize "${spec}" --calibration "${calibration}" -o "${quantized}")
    if(ARG_QUANTIZE_METHOD)
      list(APPEND quantize_command --method "${ARG_QUANTIZE_METHOD}")
    endif()
    if(ARG_PER_CHANNEL)
      list(APPEND quantize_command --per-channel)
    endif()
    list(REMOVE_AT compile_args 1)
    list(INSERT compile_args 1 "${quantized}")
  elseif(ARG_QUANTIZE_METHOD OR ARG_PER_CHANNEL)
    message(FATAL_ERROR "xla_aot_add_model(${target}): QUANTIZE_METHOD and PER_CHANNEL need QUANTIZE_CALIBRATION")
  endif()
  add_custom_command(
    OUTPUT "${out}/lib${name}.a" "${out}/${name}.h" "${out}/${name}.json"
    ${quantize_command}
    COMMAND "${XLA_AOT_EXECUTABLE}" ${compile_args}
    DEPENDS ${deps}
    COMMENT "xla-aot: compiling ${name} for ${ARG_XLA_TARGET}"
    VERBATIM)
  add_custom_target(${target}_xla_aot DEPENDS "${out}/lib${name}.a" "${out}/${name}.h")
  add_library(${target} STATIC IMPORTED GLOBAL)
  # The CUDA launcher of a CUDA target's library (jetson-orin, cuda-x86_64) loads the driver with
  # dlopen: link the platform's dl library. A CPU library never pulls that member, so it is unused.
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${out}/lib${name}.a"
    INTERFACE_INCLUDE_DIRECTORIES "${out};${XLA_AOT_ROOT}/runtime-min/include"
    INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
  add_dependencies(${target} ${target}_xla_aot)
endfunction()
