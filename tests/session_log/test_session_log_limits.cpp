// The limits of one append: the nesting a row may have, the size one write(2) can take, and a
// file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored) that makes the write fail outright.
#include "support/session_log.hpp"

#include <csignal>

#include <sys/resource.h>

using dsh::SessionLog;
using namespace dsh::test;

namespace {

/// Returns `levels` arrays nested in one another around 0 (`levels` 0: the number itself).
nlohmann::json nested(std::size_t levels) {
  nlohmann::json value = 0;
  for (std::size_t i = 0; i < levels; ++i) {
    nlohmann::json outer = nlohmann::json::array();
    outer.push_back(std::move(value));
    value = std::move(outer);
  }
  return value;
}

} // namespace

TEST_CASE("append refuses data nested deeper than a row may be, and writes nothing") {
  FreshLog fresh("s.jsonl", "deep");
  CHECK(fresh.log.append("tool/call", nested(511)) == 0);
  const std::string before = read_file(fresh.path);
  const std::string expected =
      log_message(fresh.path, 0, "cannot append an event nested deeper than 512 levels (no log may hold one)");
  CHECK(std::string(log_error_from([&] { fresh.log.append("tool/call", nested(512)); }).what()) == expected);
  // Far deeper than the fixed fresh.path the disposal keeps: taken apart all the same.
  CHECK(std::string(log_error_from([&] { fresh.log.append("tool/call", nested(5000)); }).what()) == expected);
  CHECK(std::string(log_error_from([&] {
                      fresh.log.append("tool/call", {}, nlohmann::json{{"extra", nested(512)}});
                    }).what()) == expected);
  CHECK(read_file(fresh.path) == before);
  const SessionLog reopened = SessionLog::open(fresh.path);
  CHECK(reopened.next_seq() == 1);
  CHECK(reopened.events()[0].at("data") == nested(511));
}

TEST_CASE("dispose takes apart trees of any shape and depth, leaving null") {
  nlohmann::json deep = nested(3000);
  deep = nlohmann::json{{"a", std::move(deep)}, {"b", {{"c", {1, 2, {{"d", nested(700)}}}}}}, {"e", "text"}};
  dsh::detail::slog::dispose(deep);
  CHECK(deep.is_null());
  nlohmann::json scalar = "s";
  dsh::detail::slog::dispose(scalar);
  CHECK(scalar.is_null());
}

TEST_CASE("an event line that one write(2) cannot take is refused before anything is written") {
  const std::filesystem::path path = "/srv/s.jsonl";
  CHECK_NOTHROW(dsh::detail::slog::check_line_size(2'147'479'551, path));
  for (const std::uint64_t size : {std::uint64_t{2'147'479'552}, std::uint64_t{5'000'000'000}}) {
    CHECK(std::string(log_error_from([&] { dsh::detail::slog::check_line_size(size, path); }).what()) ==
          log_message(path, 0,
                      "cannot append an event line of " + std::to_string(size) +
                          " bytes: one write(2) transfers at most 2147479552 bytes; nothing was written"));
  }
}

TEST_CASE("a file-size limit reached exactly fails the write with EFBIG when SIGXFSZ is ignored") {
  const TempDir dir;
  const auto path = dir / "s.jsonl";
  {
    auto log = SessionLog::create(path, {"fsize", {}, 1});
    log.append("tool/call", {{"n", 0}});
  }
  const std::string before = read_file(path);
  Child child([&](int report) {
    auto log = SessionLog::open(path);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{static_cast<rlim_t>(before.size()), RLIM_INFINITY};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) {
      return 2;
    }
    try {
      log.append("tool/call", {{"n", 1}});
    } catch (const dsh::LogError& error) {
      write_all(report, error.what());
      return log.next_seq() == 1 ? 0 : 3;
    }
    return 4;
  });
  const std::string message = child.read_all();
  REQUIRE(child.exit_code() == 0);
  CHECK(message == log_message(path, 0,
                               "cannot write: File too large; the file was rolled back to " +
                                   std::to_string(before.size()) + " bytes"));
  CHECK(read_file(path) == before);
  CHECK(SessionLog::open(path).next_seq() == 1);
}
