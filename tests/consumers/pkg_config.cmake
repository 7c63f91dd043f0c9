# Builds the consumer without CMake, from what the staged dsh_sandbox_policy.pc says, and runs it.
#   cmake -DPKG_CONFIG=<exe> -DPKG_CONFIG_DIR=<dir> -DCXX=<compiler> -DCXX_FLAGS=<flags> -DSOURCE=<main.cpp>
#         -DBINARY_DIR=<dir> -DEXPECTED_VERSION=<x.y.z> -DEXPECTED_FILE=<file> -DCOMPARE_SCRIPT=<file>
#         -P pkg_config.cmake
foreach(required IN ITEMS PKG_CONFIG PKG_CONFIG_DIR CXX SOURCE BINARY_DIR EXPECTED_VERSION EXPECTED_FILE COMPARE_SCRIPT)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "pkg_config.cmake: -D${required}=... is required")
  endif()
endforeach()

# Only the staged package and the system's own .pc files are visible.
set(ENV{PKG_CONFIG_PATH} "${PKG_CONFIG_DIR}")

execute_process(COMMAND "${PKG_CONFIG}" --modversion dsh_sandbox_policy RESULT_VARIABLE status
                OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0 OR NOT version STREQUAL EXPECTED_VERSION)
  message(FATAL_ERROR "pkg-config --modversion dsh_sandbox_policy: status ${status}, version '${version}', "
                      "expected ${EXPECTED_VERSION}")
endif()

execute_process(COMMAND "${PKG_CONFIG}" --cflags dsh_sandbox_policy RESULT_VARIABLE status OUTPUT_VARIABLE cflags
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags dsh_sandbox_policy failed: ${status}")
endif()
message(STATUS "pkg-config --cflags dsh_sandbox_policy: ${cflags}")
separate_arguments(cflags UNIX_COMMAND "${cflags}")
separate_arguments(flags UNIX_COMMAND "${CXX_FLAGS}")

file(MAKE_DIRECTORY "${BINARY_DIR}")
set(program "${BINARY_DIR}/consumer")
execute_process(COMMAND "${CXX}" -std=c++20 ${flags} -Wall -Wextra -Wpedantic -Werror ${cflags} "${SOURCE}" -o
                        "${program}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "compiling ${SOURCE} with the pkg-config flags failed: ${status}")
endif()

set(PROGRAM "${program}")
include("${COMPARE_SCRIPT}")
