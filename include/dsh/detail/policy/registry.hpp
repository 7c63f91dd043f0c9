/// @file
/// The registry behind `PolicyOwner`: the counted family contributions and change listeners of one
/// owner, which a `Disposer` takes back.
#pragma once

#include <dsh/vocabulary.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace dsh::detail {

/// What a `Disposer` takes back.
enum class Contribution : std::uint8_t { enforced, escalatable, listener };

/// The thread-safe registry of family contributions and change listeners of one owner.
class Registry {
public:
  /// Counts one more contribution of `kind` for `family`, then notifies the listeners.
  void add(Contribution kind, Family family) {
    {
      const std::lock_guard lock(mutex_);
      ++counter(kind, family);
    }
    notify();
  }

  /// Takes one contribution back, then notifies the listeners.
  void remove(Contribution kind, Family family) noexcept {
    {
      const std::lock_guard lock(mutex_);
      --counter(kind, family);
    }
    notify();
  }

  /// Adds a listener; returns its id.
  std::uint64_t add_listener(std::function<void()> listener) {
    const std::lock_guard lock(mutex_);
    auto next = std::make_shared<ListenerList>(listeners_ ? *listeners_ : ListenerList{});
    next->emplace_back(next_listener_id_, std::move(listener));
    listeners_ = std::move(next);
    return next_listener_id_++;
  }

  /// Removes the listener `id`. Copying the list can fail only for lack of memory, and then
  /// the listener stays: removal must not throw, because it runs in destructors.
  void remove_listener(std::uint64_t id) noexcept {
    const std::lock_guard lock(mutex_);
    if (!listeners_) {
      return;
    }
    try {
      auto next = std::make_shared<ListenerList>();
      next->reserve(listeners_->size());
      for (const auto& entry : *listeners_) {
        if (entry.first != id) {
          next->push_back(entry);
        }
      }
      listeners_ = next->empty() ? nullptr : std::move(next);
    } catch (...) { // NOLINT(bugprone-empty-catch): see the brief above
    }
  }

  /// Returns the enforced families and the families both enforced and escalatable, read together.
  [[nodiscard]] std::pair<FamilySet, FamilySet> families() const {
    FamilySet enforced;
    FamilySet escalatable;
    const std::lock_guard lock(mutex_);
    for (Family family : FAMILIES) {
      const auto index = static_cast<std::size_t>(family);
      if (enforced_[index] > 0) {
        enforced.insert(family);
        if (escalatable_[index] > 0) {
          escalatable.insert(family);
        }
      }
    }
    return {enforced, escalatable};
  }

private:
  using ListenerList = std::vector<std::pair<std::uint64_t, std::function<void()>>>;

  std::size_t& counter(Contribution kind, Family family) noexcept {
    auto& counts = kind == Contribution::enforced ? enforced_ : escalatable_;
    return counts[static_cast<std::size_t>(family)];
  }

  // Listeners run outside the lock so that they may call back into the owner; the list is
  // copy-on-write, so taking it costs no allocation.
  void notify() noexcept {
    std::shared_ptr<const ListenerList> listeners;
    {
      const std::lock_guard lock(mutex_);
      listeners = listeners_;
    }
    if (listeners) {
      for (const auto& entry : *listeners) {
        entry.second();
      }
    }
  }

  mutable std::mutex mutex_;
  std::array<std::size_t, 3> enforced_{};
  std::array<std::size_t, 3> escalatable_{};
  std::shared_ptr<const ListenerList> listeners_;
  std::uint64_t next_listener_id_ = 0;
};

} // namespace dsh::detail
