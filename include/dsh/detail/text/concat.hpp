/// @file
/// One string built from its parts in one allocation: the library's messages are made of
/// several pieces, and `a + b + c` makes a temporary string for every `+`.
#pragma once

#include <string>
#include <string_view>

namespace dsh::detail {

/// Returns the parts (anything a std::string_view can be made from) one after another. Throws
/// only std::bad_alloc.
template <class... Parts> [[nodiscard]] std::string concat(const Parts&... parts) {
  std::string text;
  text.reserve((std::string_view(parts).size() + ... + 0));
  (text.append(std::string_view(parts)), ...);
  return text;
}

} // namespace dsh::detail
