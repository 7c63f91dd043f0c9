// A pseudo-terminal pair for the tests that hand a terminal to a command or play the user's.
#pragma once

#include <dsh/unique_fd.hpp>

#include <array>
#include <cerrno>
#include <cstdlib> // ptsname_r, a GNU extension of <stdlib.h>
#include <string>
#include <system_error>

#include <pty.h>

namespace dsh::test {

/// A pseudo-terminal pair of the given size, made with openpty; both ends closed on destruction.
class Pty {
public:
  Pty(unsigned short rows, unsigned short columns) {
    winsize size{};
    size.ws_row = rows;
    size.ws_col = columns;
    int master = -1;
    int slave = -1;
    if (::openpty(&master, &slave, nullptr, nullptr, &size) != 0) {
      throw std::system_error(errno, std::generic_category(), "openpty");
    }
    master_.reset(master);
    slave_.reset(slave);
    std::array<char, 128> name{};
    if (::ptsname_r(master, name.data(), name.size()) != 0) {
      throw std::system_error(errno, std::generic_category(), "ptsname_r");
    }
    name_ = name.data();
  }
  /// The terminal's master side: what a terminal emulator reads and writes.
  [[nodiscard]] int master() const noexcept { return master_.get(); }
  /// The terminal itself (/dev/pts/N), for the program that runs in it.
  [[nodiscard]] int slave() const noexcept { return slave_.get(); }
  /// The terminal's path, /dev/pts/N.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Closes this process's copy of the terminal (it stays open while a child holds it).
  void close_slave() noexcept { slave_.reset(); }

private:
  UniqueFd master_;
  UniqueFd slave_;
  std::string name_;
};

} // namespace dsh::test
