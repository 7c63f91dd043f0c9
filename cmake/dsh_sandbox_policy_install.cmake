# Install rules: the headers, the exported target dsh::sandbox_policy, the CMake package
# (config + version file) and a pkg-config file. The library is header-only, so the package is
# architecture-independent and lives in the data directory.
include(CMakePackageConfigHelpers)

set(DSH_SANDBOX_POLICY_CONFIG_DIR "${CMAKE_INSTALL_DATADIR}/cmake/dsh_sandbox_policy"
    CACHE STRING "Where to install the dsh_sandbox_policy CMake package, relative to the prefix")
mark_as_advanced(DSH_SANDBOX_POLICY_CONFIG_DIR)

install(TARGETS dsh_sandbox_policy dsh_sandbox_policy_zstd dsh_sandbox_policy_launcher EXPORT dsh_sandbox_policyTargets FILE_SET HEADERS
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT dsh_sandbox_policyTargets NAMESPACE dsh:: DESTINATION "${DSH_SANDBOX_POLICY_CONFIG_DIR}"
        FILE dsh_sandbox_policyTargets.cmake)

# The package finds libzstd again the way this build found it; the pkg-config file requires it.
if(DSH_SANDBOX_POLICY_ZSTD_FOUND_BY STREQUAL "CONFIG")
  set(DSH_SANDBOX_POLICY_ZSTD_FIND "find_dependency(zstd CONFIG)")
elseif(DSH_SANDBOX_POLICY_ZSTD_FOUND_BY STREQUAL "PKG_CONFIG")
  set(DSH_SANDBOX_POLICY_ZSTD_FIND
      "find_dependency(PkgConfig)\npkg_check_modules(dsh_sandbox_policy_libzstd REQUIRED QUIET IMPORTED_TARGET libzstd)")
else()
  set(DSH_SANDBOX_POLICY_ZSTD_FIND "# Built without Zstandard support: no libzstd needed.")
endif()
if(DSH_SANDBOX_POLICY_ZSTD_TARGET)
  set(DSH_SANDBOX_POLICY_PC_REQUIRES ", libzstd")
  set(DSH_SANDBOX_POLICY_PC_HAS_ZSTD 1)
else()
  set(DSH_SANDBOX_POLICY_PC_REQUIRES "")
  set(DSH_SANDBOX_POLICY_PC_HAS_ZSTD 0)
endif()

# The launcher goes where programs a library runs (not the user) live; the package and the
# pkg-config file compile its installed path into every user.
set(DSH_SANDBOX_POLICY_LAUNCHER_DIR "${CMAKE_INSTALL_LIBEXECDIR}/dsh-sandbox-policy")
if(DSH_SANDBOX_POLICY_BUILD_LAUNCHER)
  install(TARGETS dsh-fence-launcher RUNTIME DESTINATION "${DSH_SANDBOX_POLICY_LAUNCHER_DIR}")
  set(DSH_SANDBOX_POLICY_LAUNCHER_INSTALLED 1)
else()
  set(DSH_SANDBOX_POLICY_LAUNCHER_INSTALLED 0)
endif()

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/dsh_sandbox_policyConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/dsh_sandbox_policyConfig.cmake" INSTALL_DESTINATION "${DSH_SANDBOX_POLICY_CONFIG_DIR}"
  PATH_VARS DSH_SANDBOX_POLICY_LAUNCHER_DIR)
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/dsh_sandbox_policyConfigVersion.cmake" COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/dsh_sandbox_policyConfig.cmake"
              "${PROJECT_BINARY_DIR}/dsh_sandbox_policyConfigVersion.cmake"
        DESTINATION "${DSH_SANDBOX_POLICY_CONFIG_DIR}")

# pkg-config: the prefix is found relative to the .pc file, so a relocated install (or
# `cmake --install --prefix`) stays correct.
set(_dsh_pc_dir "${CMAKE_INSTALL_DATADIR}/pkgconfig")
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}" OR IS_ABSOLUTE "${_dsh_pc_dir}")
  set(DSH_SANDBOX_POLICY_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _dsh_pc_to_prefix "/prefix/${_dsh_pc_dir}" "/prefix")
  string(REGEX REPLACE "/$" "" _dsh_pc_to_prefix "${_dsh_pc_to_prefix}")
  set(DSH_SANDBOX_POLICY_PC_INCLUDEDIR "\${pcfiledir}/${_dsh_pc_to_prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
if(DSH_SANDBOX_POLICY_BUILD_LAUNCHER)
  if(IS_ABSOLUTE "${DSH_SANDBOX_POLICY_LAUNCHER_DIR}" OR IS_ABSOLUTE "${_dsh_pc_dir}" OR NOT DEFINED _dsh_pc_to_prefix)
    set(_dsh_pc_launcher "${CMAKE_INSTALL_FULL_LIBEXECDIR}/dsh-sandbox-policy/dsh-fence-launcher")
  else()
    set(_dsh_pc_launcher "\${pcfiledir}/${_dsh_pc_to_prefix}/${DSH_SANDBOX_POLICY_LAUNCHER_DIR}/dsh-fence-launcher")
  endif()
  set(DSH_SANDBOX_POLICY_PC_LAUNCHER " -DDSH_SANDBOX_POLICY_LAUNCHER=\\\"${_dsh_pc_launcher}\\\"")
else()
  set(DSH_SANDBOX_POLICY_PC_LAUNCHER "")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/dsh_sandbox_policy.pc.in" "${PROJECT_BINARY_DIR}/dsh_sandbox_policy.pc"
               @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/dsh_sandbox_policy.pc" DESTINATION "${_dsh_pc_dir}")

install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/dsh_sandbox_policy")
