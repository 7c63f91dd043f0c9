/// @file
/// Helpers for parsed JSON trees of rows: disposing of one without allocating, and bounding
/// its depth.
#pragma once

#include <dsh/detail/slog/row_scanner.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

/// Builds the tree of one JSON text for nlohmann_json's SAX parser, the way its own DOM parser
/// does, except that a tree left behind by an exception is taken apart with `dispose`:
/// `nlohmann::json::parse` destroys its half-built result with the allocating destructor while
/// the exception unwinds, which ends the process when memory stays exhausted.
class DisposingTreeBuilder {
public:
  using json = nlohmann::json;

  // An empty tree is made without allocating (nlohmann_json's noexcept null constructor), and
  // dispose() is noexcept and leaves the tree empty, so the members' destructors only free
  // memory; clang-tidy 14 does not see either through nlohmann_json's constructors.
  // NOLINTBEGIN(bugprone-exception-escape)
  DisposingTreeBuilder() = default;
  DisposingTreeBuilder(const DisposingTreeBuilder&) = delete;
  DisposingTreeBuilder& operator=(const DisposingTreeBuilder&) = delete;
  ~DisposingTreeBuilder() { dispose(root_); }
  // NOLINTEND(bugprone-exception-escape)

  bool null() { return put(json(nullptr)); }
  bool boolean(bool value) { return put(json(value)); }
  bool number_integer(json::number_integer_t value) { return put(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return put(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) { return put(json(value)); }
  bool string(json::string_t& value) { return put(json(std::move(value))); }
  bool binary(json::binary_t& value) { return put(json::binary(std::move(value))); }
  bool start_object(std::size_t /*size*/) { return open(json::value_t::object); }
  bool key(json::string_t& name) {
    // The member is made now, null, so that the value lands in place.
    key_target_ = &(*open_.back())[std::move(name)];
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t /*size*/) { return open(json::value_t::array); }
  bool end_array() { return close(); }
  /// Throws the parser's own exception, as `nlohmann::json::parse` does (same type, same text).
  [[noreturn]] bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                                const nlohmann::detail::exception& error) {
    // The ids of nlohmann_json's exception classes: 1xx parse_error, 2xx invalid_iterator,
    // 3xx type_error, 4xx out_of_range, 5xx other_error.
    switch (error.id / 100) {
    case 1:
      throw *static_cast<const json::parse_error*>(&error);
    case 2:
      throw *static_cast<const json::invalid_iterator*>(&error);
    case 3:
      throw *static_cast<const json::type_error*>(&error);
    case 4:
      throw *static_cast<const json::out_of_range*>(&error);
    default:
      break;
    }
    throw *static_cast<const json::other_error*>(&error);
  }

  /// Moves the finished tree out (null before parsing ended).
  [[nodiscard]] json take() noexcept { return std::move(root_); }

private:
  /// Places `value` where the parser is: the root, the pending member, or the open array's end;
  /// returns a pointer to it in the tree.
  json* place(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& container = *open_.back();
    if (container.is_object()) {
      *key_target_ = std::move(value);
      return key_target_;
    }
    container.get_ref<json::array_t&>().push_back(std::move(value));
    return &container.get_ref<json::array_t&>().back();
  }
  bool put(json&& value) {
    place(std::move(value));
    return true;
  }
  bool open(json::value_t type) {
    open_.reserve(open_.size() + 1); // before the container joins the tree: no pointer is lost
    open_.push_back(place(json(type)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  json root_;
  std::vector<json*> open_;
  json* key_target_ = nullptr;
};

/// Parses `text` like `nlohmann::json::parse(text)`: the same tree, the same exceptions; but
/// if an allocation fails (std::bad_alloc) the partial tree is disposed of without allocating.
[[nodiscard]] inline nlohmann::json parse_tree(std::string_view text) {
  DisposingTreeBuilder builder;
  (void)nlohmann::json::sax_parse(text, &builder);
  return builder.take();
}

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
