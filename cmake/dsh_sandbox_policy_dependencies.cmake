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
