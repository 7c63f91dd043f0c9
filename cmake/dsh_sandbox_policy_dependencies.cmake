# Finding the dependencies. Installed packages come first; FetchContent is an opt-in fallback
# (DSH_SANDBOX_POLICY_FETCH_DEPS) for machines with internet access. A missing dependency stops
# the configuration with the command that installs it.

set(_dsh_sandbox_policy_apt_hint
    "On Debian/Ubuntu: sudo apt-get install nlohmann-json3-dev catch2 (or configure with "
    "-DDSH_SANDBOX_POLICY_FETCH_DEPS=ON to download the dependencies).")

# Makes nlohmann_json::nlohmann_json (>= 3.11) available, unless the parent project already
# provides that target.
macro(dsh_sandbox_policy_require_nlohmann_json)
  if(NOT TARGET nlohmann_json::nlohmann_json)
    find_package(nlohmann_json 3.11 CONFIG QUIET)
    if(NOT nlohmann_json_FOUND)
      if(DSH_SANDBOX_POLICY_FETCH_DEPS)
        include(FetchContent)
        # nlohmann_json installs itself only when top-level; our export needs its target in an
        # export set, so its own install rules follow ours.
        set(JSON_Install ${DSH_SANDBOX_POLICY_INSTALL} CACHE BOOL "Install nlohmann_json (set by dsh_sandbox_policy)")
        FetchContent_Declare(
          nlohmann_json
          URL https://github.com/nlohmann/json/releases/download/v3.11.3/json.tar.xz
          URL_HASH SHA256=d6c65aca6b1ed68e7a182f4757257b107ae403032760ed6ef121c9d55e81757d)
        FetchContent_MakeAvailable(nlohmann_json)
      else()
        message(FATAL_ERROR "dsh_sandbox_policy needs nlohmann_json >= 3.11, which was not found. "
                            ${_dsh_sandbox_policy_apt_hint})
      endif()
    endif()
  endif()
endmacro()

# Makes Catch2::Catch2WithMain available (Catch2 v3, or v2.13 as Debian 12 ships it).
macro(dsh_sandbox_policy_require_catch2)
  if(NOT TARGET Catch2::Catch2WithMain)
    find_package(Catch2 CONFIG QUIET)
    if(NOT TARGET Catch2::Catch2WithMain)
      if(DSH_SANDBOX_POLICY_FETCH_DEPS)
        include(FetchContent)
        FetchContent_Declare(
          Catch2
          GIT_REPOSITORY https://github.com/catchorg/Catch2.git
          GIT_TAG v3.7.1
          GIT_SHALLOW TRUE)
        FetchContent_MakeAvailable(Catch2)
      else()
        message(FATAL_ERROR "The dsh_sandbox_policy tests need Catch2 (v3, or v2.13 or newer with "
                            "Catch2::Catch2WithMain), which was not found. " ${_dsh_sandbox_policy_apt_hint}
                            " To build without the tests, configure with -DDSH_SANDBOX_POLICY_BUILD_TESTS=OFF.")
      endif()
    endif()
  endif()
endmacro()

# Looks for libzstd as DSH_SANDBOX_POLICY_WITH_ZSTD asks (AUTO, ON or OFF): its CMake package
# first (zstd::libzstd_shared), then pkg-config (libzstd). Sets DSH_SANDBOX_POLICY_ZSTD_TARGET to
# the target to link, empty without Zstandard support, and DSH_SANDBOX_POLICY_ZSTD_FOUND_BY to
# CONFIG or PKG_CONFIG (the installed package finds it again the same way).
macro(dsh_sandbox_policy_find_zstd)
  set(DSH_SANDBOX_POLICY_ZSTD_TARGET "")
  set(DSH_SANDBOX_POLICY_ZSTD_FOUND_BY "")
  if(NOT DSH_SANDBOX_POLICY_WITH_ZSTD MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "DSH_SANDBOX_POLICY_WITH_ZSTD must be AUTO, ON or OFF, not '${DSH_SANDBOX_POLICY_WITH_ZSTD}'")
  endif()
  if(NOT DSH_SANDBOX_POLICY_WITH_ZSTD STREQUAL "OFF")
    if(NOT TARGET zstd::libzstd_shared)
      find_package(zstd CONFIG QUIET)
    endif()
    if(TARGET zstd::libzstd_shared)
      set(DSH_SANDBOX_POLICY_ZSTD_TARGET zstd::libzstd_shared)
      set(DSH_SANDBOX_POLICY_ZSTD_FOUND_BY CONFIG)
    else()
      find_package(PkgConfig QUIET)
      if(PkgConfig_FOUND)
        pkg_check_modules(dsh_sandbox_policy_libzstd QUIET IMPORTED_TARGET libzstd)
      endif()
      if(TARGET PkgConfig::dsh_sandbox_policy_libzstd)
        set(DSH_SANDBOX_POLICY_ZSTD_TARGET PkgConfig::dsh_sandbox_policy_libzstd)
        set(DSH_SANDBOX_POLICY_ZSTD_FOUND_BY PKG_CONFIG)
      endif()
    endif()
    if(NOT DSH_SANDBOX_POLICY_ZSTD_TARGET AND DSH_SANDBOX_POLICY_WITH_ZSTD STREQUAL "ON")
      message(FATAL_ERROR "DSH_SANDBOX_POLICY_WITH_ZSTD is ON but libzstd was not found (neither its CMake "
                          "package nor pkg-config's libzstd). On Debian/Ubuntu: sudo apt-get install libzstd-dev")
    endif()
  endif()
  if(DSH_SANDBOX_POLICY_ZSTD_TARGET)
    message(STATUS "dsh_sandbox_policy: Zstandard session logs with ${DSH_SANDBOX_POLICY_ZSTD_TARGET}")
  else()
    message(STATUS "dsh_sandbox_policy: no Zstandard support (DSH_SANDBOX_POLICY_WITH_ZSTD=${DSH_SANDBOX_POLICY_WITH_ZSTD})")
  endif()
endmacro()
