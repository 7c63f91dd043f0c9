# Runs a program and checks it: the exit status must be 0 and the standard output must equal the
# file EXPECTED_FILE byte for byte. The program's output is echoed, so `ctest -V` shows it.
#   cmake -DPROGRAM=<path> [-DARGS=<list>] -DEXPECTED_FILE=<path> -P dsh_sandbox_policy_run_and_compare.cmake
foreach(required IN ITEMS PROGRAM EXPECTED_FILE)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "dsh_sandbox_policy_run_and_compare.cmake: -D${required}=... is required")
  endif()
endforeach()

execute_process(COMMAND "${PROGRAM}" ${ARGS} RESULT_VARIABLE status OUTPUT_VARIABLE actual ECHO_OUTPUT_VARIABLE)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with status ${status}")
endif()

file(READ "${EXPECTED_FILE}" expected)
if(NOT actual STREQUAL expected)
  get_filename_component(name "${PROGRAM}" NAME)
  set(actual_file "${CMAKE_CURRENT_BINARY_DIR}/${name}.actual")
  file(WRITE "${actual_file}" "${actual}")
  message(FATAL_ERROR "The output of ${PROGRAM} differs from ${EXPECTED_FILE}.\n"
                      "It was saved as ${actual_file}; compare with: diff ${EXPECTED_FILE} ${actual_file}")
endif()
