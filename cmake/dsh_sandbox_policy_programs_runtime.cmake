# How the installed programs link: included once by the top-level CMakeLists.txt, before the
# launcher, so that dsh-fence-launcher (built even when the tools are not) and the tools of
# tools/CMakeLists.txt link alike. Sets _dsh_static_tools (ON or OFF) and _dsh_zstd_static (the
# archive to link, or ""), and defines dsh_sandbox_policy_link_programs_runtime(target).
#
# DSH_SANDBOX_POLICY_STATIC_TOOLS: a host starts dsh-sandboxed-bash or dsh-fence-run for every
# bash call, and most of what such a process spends before main is the dynamic loader mapping and
# relocating libstdc++; every fenced call's supervisor is a fork of dsh-fence-launcher (or of its
# zygote), and a fork maps again, one page fault at a time, each shared library's pages it touches
# (docs/performance.md). Linked with the static C++ runtime and libzstd, every symbol bound at
# start (so that the fence's supervisor and the command's child, which are forks, resolve nothing
# lazily) and unused sections dropped, the programs load only glibc's libc and libm. Never with a
# sanitizer: its runtime does not mix with a static libstdc++.
set(_dsh_static_tools OFF)
if(NOT DSH_SANDBOX_POLICY_STATIC_TOOLS MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "DSH_SANDBOX_POLICY_STATIC_TOOLS must be AUTO, ON or OFF, not '${DSH_SANDBOX_POLICY_STATIC_TOOLS}'")
endif()
if(NOT DSH_SANDBOX_POLICY_STATIC_TOOLS STREQUAL "OFF")
  # The flags every configuration builds with (one, or a multi-config generator's list).
  set(_dsh_flags "${CMAKE_CXX_FLAGS} ${CMAKE_EXE_LINKER_FLAGS}")
  foreach(_dsh_config IN LISTS CMAKE_BUILD_TYPE CMAKE_CONFIGURATION_TYPES)
    string(TOUPPER "${_dsh_config}" _dsh_config)
    string(APPEND _dsh_flags " ${CMAKE_CXX_FLAGS_${_dsh_config}} ${CMAKE_EXE_LINKER_FLAGS_${_dsh_config}}")
  endforeach()
  set(_dsh_why_not "")
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang)$")
    set(_dsh_why_not "it needs GCC or Clang on Linux")
  elseif(_dsh_flags MATCHES "-fsanitize=")
    set(_dsh_why_not "a sanitizer's runtime does not mix with a static libstdc++")
  else()
    include(CheckCXXSourceCompiles)
    include(CMakePushCheckState)
    cmake_push_check_state(RESET)
    set(CMAKE_REQUIRED_LINK_OPTIONS -static-libstdc++ -static-libgcc LINKER:-z,now LINKER:--gc-sections
                                    LINKER:--as-needed)
    check_cxx_source_compiles(
      "#include <string>\nint main(int argc, char**) { return static_cast<int>(std::to_string(argc).size()) - 1; }"
      DSH_SANDBOX_POLICY_STATIC_RUNTIME_LINKS)
    cmake_pop_check_state()
    if(NOT DSH_SANDBOX_POLICY_STATIC_RUNTIME_LINKS)
      set(_dsh_why_not "the static libstdc++ and libgcc do not link here (Fedora: dnf install libstdc++-static)")
    endif()
  endif()
  if(_dsh_why_not AND DSH_SANDBOX_POLICY_STATIC_TOOLS STREQUAL "ON")
    message(FATAL_ERROR "DSH_SANDBOX_POLICY_STATIC_TOOLS is ON, but ${_dsh_why_not}")
  elseif(_dsh_why_not)
    message(STATUS "dsh_sandbox_policy: the programs link the shared C++ runtime: ${_dsh_why_not}")
  else()
    set(_dsh_static_tools ON)
  endif()
endif()

# libzstd's archive, when this build reads Zstandard logs and the archive is installed: the CMake
# package's static target, else libzstd.a beside the library pkg-config found.
set(_dsh_zstd_static "")
if(_dsh_static_tools AND DSH_SANDBOX_POLICY_ZSTD_TARGET)
  if(DSH_SANDBOX_POLICY_ZSTD_FOUND_BY STREQUAL "CONFIG" AND TARGET zstd::libzstd_static)
    set(_dsh_zstd_static zstd::libzstd_static)
  elseif(DSH_SANDBOX_POLICY_ZSTD_FOUND_BY STREQUAL "PKG_CONFIG")
    find_library(DSH_SANDBOX_POLICY_ZSTD_ARCHIVE NAMES libzstd.a HINTS ${dsh_sandbox_policy_libzstd_LIBRARY_DIRS})
    mark_as_advanced(DSH_SANDBOX_POLICY_ZSTD_ARCHIVE)
    if(DSH_SANDBOX_POLICY_ZSTD_ARCHIVE)
      set(_dsh_zstd_static "${DSH_SANDBOX_POLICY_ZSTD_ARCHIVE}")
    endif()
  endif()
  if(_dsh_zstd_static)
    find_package(Threads REQUIRED) # the archive's own dependency (its pkg-config file's Libs.private)
  else()
    message(STATUS "dsh_sandbox_policy: no static libzstd; the programs load the shared one")
  endif()
endif()
if(_dsh_static_tools)
  if(_dsh_zstd_static)
    set(_dsh_static_list "libstdc++, libgcc and libzstd")
  else()
    set(_dsh_static_list "libstdc++ and libgcc")
  endif()
  message(STATUS "dsh_sandbox_policy: the programs link ${_dsh_static_list} statically "
                 "(DSH_SANDBOX_POLICY_STATIC_TOOLS=${DSH_SANDBOX_POLICY_STATIC_TOOLS})")
endif()

# Links `target` (one of our programs) as decided above: the static C++ runtime (and libzstd's
# archive), every symbol bound at start, unused sections dropped; nothing when the decision is OFF.
function(dsh_sandbox_policy_link_programs_runtime target)
  if(NOT _dsh_static_tools)
    return()
  endif()
  target_compile_options(${target} PRIVATE -ffunction-sections -fdata-sections)
  # --as-needed drops what the program does not call: libzstd's shared library, which
  # dsh::sandbox_policy brings, when the archive (linked first) already resolved every call or
  # when the program reads no log (dsh-fence-run, dsh-fence-launcher).
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc LINKER:-z,now LINKER:--gc-sections
                      LINKER:--as-needed)
  if(_dsh_zstd_static)
    target_link_libraries(${target} PRIVATE ${_dsh_zstd_static} Threads::Threads)
  endif()
endfunction()
