#include "roles/os/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace onehpc {
namespace {

using Steady = std::chrono::steady_clock;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Milliseconds left until `end` (0 when passed).
int Left(Steady::time_point end) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(end - Steady::now()).count();
  return ms > 0 ? static_cast<int>(ms) : 0;
}

// Waits for `events` on fd until `end`; false on timeout or error (errno set).
bool Wait(int fd, short events, Steady::time_point end) {
  for (;;) {
    pollfd p{fd, events, 0};
    int left = Left(end);
    if (left == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    int r = ::poll(&p, 1, left);
    if (r > 0) return true;
    if (r == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    if (errno != EINTR) return false;
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status WriteUntil(int fd, const std::string& data, Steady::time_point end) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (!Wait(fd, POLLOUT, end)) return Fail(ErrorKind::kNetwork, Errno("send"));
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Fail(ErrorKind::kNetwork, Errno("send"));
    }
    sent += static_cast<size_t>(n);
  }
  return Ok();
}

Result<std::string> ReadLineUntil(int fd, size_t max_bytes, Steady::time_point end) {
  std::string line;
  char buf[512];
  for (;;) {
    if (!Wait(fd, POLLIN, end)) return Fail(ErrorKind::kNetwork, Errno("recv"));
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Fail(ErrorKind::kNetwork, Errno("recv"));
    }
    if (n == 0) return Fail(ErrorKind::kNetwork, "the peer closed the connection before a line");
    line.append(buf, static_cast<size_t>(n));
    auto nl = line.find('\n');
    if (nl != std::string::npos) {
      line.resize(nl);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.size() > max_bytes) break;
      return line;
    }
    if (line.size() > max_bytes) break;
  }
  return Fail(ErrorKind::kInvalidInput,
              "a line longer than " + std::to_string(max_bytes) + " bytes");
}

}  // namespace

namespace {

// Connects the non-blocking socket `fd` to `ipv4`:`port` by `end`.
Status ConnectUntil(const Fd& fd, const std::string& ipv4, int port, Steady::time_point end) {
  const std::string where = ipv4 + ":" + std::to_string(port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, ipv4.c_str(), &addr.sin_addr) != 1) {
    return Fail(ErrorKind::kInvalidInput, "'" + ipv4 + "' is not an IPv4 address");
  }
  if (fd.get() < 0) return Fail(ErrorKind::kNetwork, Errno("socket"));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return Fail(ErrorKind::kNetwork, Errno("connect to " + where));
    if (!Wait(fd.get(), POLLOUT, end)) {
      return Fail(ErrorKind::kNetwork, Errno("connect to " + where));
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return Fail(ErrorKind::kNetwork, Errno("connect to " + where));
    }
  }
  return Ok();
}

}  // namespace

Status TcpLineExchange::Listening(const std::string& ipv4, int port, Duration timeout) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  return ConnectUntil(fd, ipv4, port, Steady::now() + timeout);
}

Result<std::string> TcpLineExchange::Exchange(const std::string& ipv4, int port,
                                              const std::string& line, Duration timeout,
                                              size_t max_bytes) {
  const auto end = Steady::now() + timeout;
  const std::string where = ipv4 + ":" + std::to_string(port);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (auto s = ConnectUntil(fd, ipv4, port, end); !s) return Fail(s.error());
  if (auto s = WriteUntil(fd.get(), line + "\n", end); !s) {
    return Fail(s.error().WithContext(where));
  }
  auto answer = ReadLineUntil(fd.get(), max_bytes, end);
  if (!answer) return Fail(answer.error().WithContext(where));
  return answer;
}

Result<std::string> PeerIpv4(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
    return Fail(ErrorKind::kInvalidInput, Errno("getpeername (is stdin a socket?)"));
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&peer);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return std::string(text);
  }
  if (peer.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&peer);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      ::inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, INET_ADDRSTRLEN);
      return std::string(text);
    }
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    return Fail(ErrorKind::kInvalidInput, std::string("an IPv6 peer (") + text + ")");
  }
  return Fail(ErrorKind::kInvalidInput, "the peer is not an IP address");
}

Result<std::string> ReadLine(int fd, size_t max_bytes, Duration timeout) {
  return ReadLineUntil(fd, max_bytes, Steady::now() + timeout);
}

Status WriteAll(int fd, const std::string& data, Duration timeout) {
  return WriteUntil(fd, data, Steady::now() + timeout);
}

}  // namespace onehpc
