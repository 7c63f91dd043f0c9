# One error model (HACKING.md#errors): every error the library throws on purpose derives from
# dsh::Error, so no header in include/ throws a standard exception itself (std::bad_alloc aside,
# which passes through). Run as `cmake -DINCLUDE_DIR=<include> -P error_model.cmake`; fails naming
# each offending line.
file(GLOB_RECURSE _headers "${INCLUDE_DIR}/*.hpp")
set(_found "")
foreach(header IN LISTS _headers)
  file(STRINGS "${header}" _lines REGEX "throw[ \t]+std::")
  foreach(line IN LISTS _lines)
    if(NOT line MATCHES "throw[ \t]+std::bad_alloc")
      file(RELATIVE_PATH _name "${INCLUDE_DIR}" "${header}")
      string(STRIP "${line}" line)
      string(APPEND _found "  ${_name}: ${line}\n")
    endif()
  endforeach()
endforeach()
list(LENGTH _headers _count)
if(_count EQUAL 0)
  message(FATAL_ERROR "error_model: no header found beneath ${INCLUDE_DIR}")
endif()
if(NOT _found STREQUAL "")
  message(FATAL_ERROR "error_model: a header throws a standard exception instead of a dsh::Error:\n${_found}")
endif()
message(STATUS "error_model: ${_count} headers throw only dsh::Error kinds (and std::bad_alloc)")
