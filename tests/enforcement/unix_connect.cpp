// dsh_test_unix_connect PATH MESSAGE: connects a stream socket to the pathname unix socket PATH
// and sends MESSAGE, the way a client of a daemon (docker, dbus, ssh-agent, tmux) reaches it.
// Prints "sent" and exits 0, or prints "connect: <strerror>" and exits 1; exits 2 on bad usage.
// The red-team suites run it as the hostile command under a fence.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fputs("usage: dsh_test_unix_connect PATH MESSAGE\n", stderr);
    return 2;
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (std::strlen(argv[1]) >= sizeof address.sun_path) {
    std::fputs("dsh_test_unix_connect: PATH is too long for a unix socket address\n", stderr);
    return 2;
  }
  std::strcpy(address.sun_path, argv[1]);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::printf("socket: %s\n", std::strerror(errno));
    return 1;
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    std::printf("connect: %s\n", std::strerror(errno));
    return 1;
  }
  const std::size_t length = std::strlen(argv[2]);
  if (::write(fd, argv[2], length) != static_cast<::ssize_t>(length)) {
    std::printf("write: %s\n", std::strerror(errno));
    return 1;
  }
  ::close(fd);
  std::puts("sent");
  return 0;
}
