/// @file
/// The row index of an open session log: where each row begins, in about 4 bytes a row.
#pragma once

#include <dsh/errors.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dsh::detail::slog {

/// Where each row of a log begins (a file offset, or an offset in the text of a compressed log's
/// batches), oldest first. Rows are kept in blocks of up to `BLOCK_ROWS`: a block holds the 64-bit
/// offset of its first row and, for each of its rows, the 32-bit distance from it; a row 4 GiB or
/// more past its block's first row starts a new block. Blocks never move, so growing the index
/// never holds two copies of it, and it costs 4 bytes a row plus 32 bytes a block, where a
/// vector of offsets costs 8, and 16 while it doubles.
class RowIndex {
public:
  /// The most rows one block holds.
  static constexpr std::size_t BLOCK_ROWS = 4096;

  /// Returns the number of rows.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Returns true if there is no row.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// Returns where row `index` begins (`index < size()`).
  [[nodiscard]] std::uint64_t operator[](std::size_t index) const noexcept {
    // The block whose first row is the last one at or before `index`.
    const auto after = std::upper_bound(blocks_.begin(), blocks_.end(), index,
                                        [](std::size_t row, const Block& block) { return row < block.first_row; });
    const Block& block = *std::prev(after);
    return block.base + block.distances[index - block.first_row];
  }

  /// Returns where row `index` begins; throws dsh::ConfigError unless `index < size()`.
  [[nodiscard]] std::uint64_t at(std::size_t index) const {
    if (index >= size_) {
      throw ConfigError("row index " + std::to_string(index) + ": expected an index below the row count " +
                        std::to_string(size_));
    }
    return (*this)[index];
  }

  /// Makes room for a row beginning at `offset`, so that `push_back(offset)` allocates nothing.
  void reserve_for(std::uint64_t offset) {
    if (!needs_block_for(offset)) {
      return;
    }
    if (blocks_.size() == blocks_.capacity()) {
      blocks_.reserve(std::max<std::size_t>(8, 2 * blocks_.capacity()));
    }
    if (!spare_) {
      spare_ = std::make_unique<std::uint32_t[]>(BLOCK_ROWS);
    }
  }

  /// Adds a row beginning at `offset`, which is not before the last row's. Allocates a block
  /// when the last one is full or `offset` is too far from its first row, unless `reserve_for`
  /// made room for it.
  void push_back(std::uint64_t offset) {
    if (needs_block_for(offset)) {
      if (blocks_.size() == blocks_.capacity()) {
        blocks_.reserve(std::max<std::size_t>(8, 2 * blocks_.capacity()));
      }
      std::unique_ptr<std::uint32_t[]> distances =
          spare_ ? std::move(spare_) : std::make_unique<std::uint32_t[]>(BLOCK_ROWS);
      blocks_.push_back(Block{offset, size_, 0, std::move(distances)});
    }
    Block& block = blocks_.back();
    block.distances[block.count++] = static_cast<std::uint32_t>(offset - block.base);
    ++size_;
  }

  /// Adds the rows of `other`, which all begin after this index's last row.
  void append(const RowIndex& other) {
    for (std::size_t i = 0; i < other.size(); ++i) {
      push_back(other[i]);
    }
  }

private:
  struct Block {
    std::uint64_t base = 0;                     // where its first row begins
    std::size_t first_row = 0;                  // the index of its first row
    std::size_t count = 0;                      // its rows
    std::unique_ptr<std::uint32_t[]> distances; // BLOCK_ROWS entries, `count` used
  };

  [[nodiscard]] bool needs_block_for(std::uint64_t offset) const noexcept {
    return blocks_.empty() || blocks_.back().count == BLOCK_ROWS ||
           offset - blocks_.back().base > std::numeric_limits<std::uint32_t>::max();
  }

  std::vector<Block> blocks_;
  std::unique_ptr<std::uint32_t[]> spare_; // a block reserve_for allocated ahead
  std::size_t size_ = 0;
};

} // namespace dsh::detail::slog
