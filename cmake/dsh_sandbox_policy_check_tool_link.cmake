# Checks how a program linked with DSH_SANDBOX_POLICY_STATIC_TOOLS: the dynamic section must bind
# every symbol at start and need none of the libraries linked statically (a link line reordered
# or a new dependency would bring them back silently, and with them most of the start-up time).
#   cmake -DREADELF=<path> -DPROGRAM=<path> -DSTATIC_LIBRARIES=<list of soname prefixes> -P dsh_sandbox_policy_check_tool_link.cmake
foreach(required IN ITEMS READELF PROGRAM STATIC_LIBRARIES)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "dsh_sandbox_policy_check_tool_link.cmake: -D${required}=... is required")
  endif()
endforeach()

execute_process(COMMAND "${READELF}" --dynamic "${PROGRAM}" RESULT_VARIABLE status OUTPUT_VARIABLE dynamic
                                                                                   ERROR_VARIABLE error)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${READELF} --dynamic ${PROGRAM} failed (${status}): ${error}")
endif()
string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" needed "${dynamic}")
list(TRANSFORM needed REPLACE "Shared library: \\[([^]]+)\\]" "\\1")
message(STATUS "${PROGRAM} needs: ${needed}")
foreach(library IN LISTS needed)
  foreach(static IN LISTS STATIC_LIBRARIES)
    string(FIND "${library}" "${static}." position)
    if(position EQUAL 0)
      message(FATAL_ERROR "${PROGRAM} needs ${library}, which DSH_SANDBOX_POLICY_STATIC_TOOLS links statically")
    endif()
  endforeach()
endforeach()
if(NOT dynamic MATCHES "\\(FLAGS\\)[^\n]*BIND_NOW" AND NOT dynamic MATCHES "\\(FLAGS_1\\)[^\n]*NOW")
  message(FATAL_ERROR "${PROGRAM} binds its symbols lazily; DSH_SANDBOX_POLICY_STATIC_TOOLS links it with -z now")
endif()
