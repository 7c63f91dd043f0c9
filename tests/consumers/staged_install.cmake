# Installs the build tree BUILD_DIR into the empty prefix STAGE with `cmake --install`, then
# checks that the package's files are where find_package and pkg-config look for them.
#   cmake -DBUILD_DIR=<dir> -DSTAGE=<dir> -DINCLUDEDIR=<rel> -DDATADIR=<rel> -DBINDIR=<rel>
#         [-DLIBEXECDIR=<rel> (the launcher is built)] [-DCONFIG=<config>] -P staged_install.cmake
foreach(required IN ITEMS BUILD_DIR STAGE INCLUDEDIR DATADIR BINDIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "staged_install.cmake: -D${required}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${STAGE}")
set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${STAGE}" ${config_args}
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${STAGE} failed: ${result}")
endif()

set(package_dir "${DATADIR}/cmake/dsh_sandbox_policy")
foreach(file IN ITEMS "${INCLUDEDIR}/dsh/sandbox_policy.hpp" "${INCLUDEDIR}/dsh/version.hpp"
                      "${package_dir}/dsh_sandbox_policyConfig.cmake"
                      "${package_dir}/dsh_sandbox_policyConfigVersion.cmake"
                      "${package_dir}/dsh_sandbox_policyTargets.cmake" "${DATADIR}/pkgconfig/dsh_sandbox_policy.pc"
                      "${DATADIR}/doc/dsh_sandbox_policy/LICENSE")
  if(NOT EXISTS "${STAGE}/${file}")
    message(FATAL_ERROR "the staged install lacks ${file}")
  endif()
endforeach()

# Nothing but our own package, and the example programs (in BINDIR) when examples are built.
file(GLOB_RECURSE installed RELATIVE "${STAGE}" "${STAGE}/*")
list(FILTER installed EXCLUDE REGEX "^${BINDIR}/[^/]+$")
list(FILTER installed EXCLUDE REGEX "^${INCLUDEDIR}/dsh/(detail/([a-z]+/)?)?[a-z_]+\\.(hpp|inc)$")
list(FILTER installed EXCLUDE REGEX "^${package_dir}/dsh_sandbox_policy[-A-Za-z]*\\.cmake$")
list(REMOVE_ITEM installed "${DATADIR}/pkgconfig/dsh_sandbox_policy.pc" "${DATADIR}/doc/dsh_sandbox_policy/LICENSE")
# The fence launcher, which the package and the pkg-config file name (docs/enforcement.md#the-launcher).
if(DEFINED LIBEXECDIR)
  if(NOT EXISTS "${STAGE}/${LIBEXECDIR}/dsh-sandbox-policy/dsh-fence-launcher")
    message(FATAL_ERROR "the staged install lacks ${LIBEXECDIR}/dsh-sandbox-policy/dsh-fence-launcher")
  endif()
  list(REMOVE_ITEM installed "${LIBEXECDIR}/dsh-sandbox-policy/dsh-fence-launcher")
endif()
if(installed)
  message(FATAL_ERROR "the staged install holds unexpected files: ${installed}")
endif()
message(STATUS "staged install of ${BUILD_DIR} in ${STAGE}: complete")
