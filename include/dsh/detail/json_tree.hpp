/// @file
/// Helpers for parsed JSON trees of rows: disposing of one without allocating, and bounding
/// its depth.
#pragma once

#include <dsh/detail/row_scanner.hpp>

#include <array>
#include <cstddef>

#include <nlohmann/json.hpp>

namespace dsh::detail::slog {

/// Returns the last member (of an object) or element (of an array) of `value`, or nullptr.
[[nodiscard]] inline nlohmann::json* last_child(nlohmann::json& value) noexcept {
  if (auto* object = value.get_ptr<nlohmann::json::object_t*>()) {
    return object->empty() ? nullptr : &std::prev(object->end())->second;
  }
  if (auto* array = value.get_ptr<nlohmann::json::array_t*>()) {
    return array->empty() ? nullptr : &array->back();
  }
  return nullptr;
}

/// Removes the last member or element of the object or array `value` (which has one).
inline void remove_last_child(nlohmann::json& value) noexcept {
  if (auto* object = value.get_ptr<nlohmann::json::object_t*>()) {
    object->erase(std::prev(object->end()));
  } else if (auto* array = value.get_ptr<nlohmann::json::array_t*>()) {
    array->pop_back();
  }
}

/// Destroys the tree of `value`, leaving null, without allocating. nlohmann_json's destructor
/// moves the children of a non-empty object or array onto a heap-allocated stack, so it ends
/// the process (std::terminate) when that allocation fails. Here the tree is taken apart from
/// its last leaf back; destroying a leaf or an empty container allocates nothing. The path
/// from the root is kept in a fixed array; below its depth the walk restarts from its deepest
/// entry, slower but still without allocating.
inline void dispose(nlohmann::json& value) noexcept {
  std::array<nlohmann::json*, MAX_NESTING + 2> path{};
  std::size_t depth = 0;
  path[depth++] = &value;
  while (depth > 0) {
    nlohmann::json* parent = nullptr;
    nlohmann::json* node = path[depth - 1];
    bool recorded = true;
    while (nlohmann::json* child = last_child(*node)) {
      if (recorded && depth < path.size()) {
        path[depth++] = child;
      } else {
        recorded = false;
      }
      parent = node;
      node = child;
    }
    // `node` has no children now: remove it from its parent.
    if (recorded) {
      --depth;
      if (depth > 0) {
        remove_last_child(*path[depth - 1]);
      }
    } else {
      remove_last_child(*parent);
    }
  }
  value = nullptr;
}

/// A JSON tree that `dispose` takes apart when it goes out of scope (see there why).
class DisposedJson {
public:
  explicit DisposedJson(nlohmann::json&& tree) noexcept : value(std::move(tree)) {}
  DisposedJson(const DisposedJson&) = delete;
  DisposedJson& operator=(const DisposedJson&) = delete;
  ~DisposedJson() { dispose(value); }

  nlohmann::json value; ///< The tree.
};

/// Returns true if `value` nests no deeper than `limit` levels (a scalar is 0 levels, `[]` 1).
/// Recurses at most `limit` frames deep, whatever the depth of `value`.
[[nodiscard]] inline bool nests_within(const nlohmann::json& value, std::size_t limit) noexcept {
  if (!value.is_structured()) {
    return true;
  }
  if (limit == 0) {
    return false;
  }
  if (const auto* object = value.get_ptr<const nlohmann::json::object_t*>()) {
    return std::all_of(object->begin(), object->end(),
                       [limit](const auto& member) { return nests_within(member.second, limit - 1); });
  }
  const auto* array = value.get_ptr<const nlohmann::json::array_t*>();
  return std::all_of(array->begin(), array->end(),
                     [limit](const nlohmann::json& element) { return nests_within(element, limit - 1); });
}

} // namespace dsh::detail::slog
