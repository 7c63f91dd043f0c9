// The session log's row index (docs/session-log.md#memory-and-speed): offsets read back exactly
// across blocks, a row 4 GiB or more past its block's first row starts a new block, an index out
// of range throws, and after reserve_for the next push_back allocates nothing (which is what lets
// an append publish its row once it is on disk without being able to fail).
#include "support/catch.hpp"
#include "support/sanitizers.hpp"

#include <dsh/detail/slog/row_index.hpp>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <vector>

// The sanitizers own operator new; the count is kept only in a build without them.
#define DSH_TEST_COUNT_ALLOCATIONS (!DSH_TEST_UNDER_ASAN && !DSH_TEST_UNDER_TSAN)

namespace {
std::size_t allocations = 0;
}

#if DSH_TEST_COUNT_ALLOCATIONS
void* operator new(std::size_t size) {
  ++allocations;
  if (void* memory = std::malloc(size == 0 ? 1 : size)) {
    return memory;
  }
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void* operator new[](std::size_t size) { return operator new(size); }
// Every form the program may call frees with the deletes below, so the nothrow forms are
// replaced too (Catch2 allocates with them).
void* operator new(std::size_t size, const std::nothrow_t& /*tag*/) noexcept {
  try {
    return operator new(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { std::free(memory); }
#endif

using dsh::detail::slog::RowIndex;

TEST_CASE("row index: offsets read back exactly across blocks and 4 GiB jumps") {
  RowIndex index;
  std::vector<std::uint64_t> expected;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < 3 * RowIndex::BLOCK_ROWS + 17; ++i) {
    if (i == 5000) {
      offset += std::uint64_t{5} << 30; // 5 GiB past: a new block in the middle of one
    } else if (i == 9000) {
      offset += (std::uint64_t{1} << 32) - 1; // exactly the largest distance a block keeps
    } else {
      offset += 1 + i % 300;
    }
    index.push_back(offset);
    expected.push_back(offset);
  }
  REQUIRE(index.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    REQUIRE(index[i] == expected[i]);
  }
  CHECK(index.at(expected.size() - 1) == expected.back());
  CHECK_THROWS_AS(static_cast<void>(index.at(expected.size())), dsh::ConfigError);

  RowIndex more;
  more.push_back(offset + 10);
  more.push_back(offset + (std::uint64_t{6} << 30));
  index.append(more);
  CHECK(index.size() == expected.size() + 2);
  CHECK(index[expected.size()] == offset + 10);
  CHECK(index[expected.size() + 1] == offset + (std::uint64_t{6} << 30));
  CHECK_FALSE(index.empty());
  CHECK(RowIndex().empty());
}

TEST_CASE("row index: after reserve_for, push_back allocates nothing, also at a block boundary") {
  if constexpr (DSH_TEST_COUNT_ALLOCATIONS) { // the count sees a push_back that was not reserved
    const std::size_t start = allocations;
    RowIndex probe;
    probe.push_back(1);
    CHECK(allocations > start);
  }
  RowIndex index;
  std::uint64_t offset = 100;
  for (std::size_t i = 0; i < 2 * RowIndex::BLOCK_ROWS + 3; ++i) {
    index.reserve_for(offset);
    const std::size_t before = allocations;
    index.push_back(offset);
    REQUIRE(allocations == before); // always 0 == 0 under a sanitizer, which counts nothing
    REQUIRE(index[index.size() - 1] == offset);
    offset += i == RowIndex::BLOCK_ROWS / 2 ? (std::uint64_t{1} << 33) : 7; // a far row, too
  }
  CHECK(index.size() == 2 * RowIndex::BLOCK_ROWS + 3);
  CHECK(index[0] == 100);
}
