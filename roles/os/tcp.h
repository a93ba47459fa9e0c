// TCP for one-line exchanges (the munge key's delivery): a client behind an interface, and the
// server side of one connection handed over by systemd (Accept=yes: the socket is stdin).
// Every call is bounded by a deadline.
#ifndef ONEHPC_ROLES_OS_TCP_H_
#define ONEHPC_ROLES_OS_TCP_H_

#include <cstddef>
#include <string>

#include "common/clock.h"
#include "common/error.h"

namespace onehpc {

/// Sends one line and reads one line back.
class LineExchange {
 public:
  virtual ~LineExchange() = default;
  /// Connects to `ipv4`:`port`, sends `line` and '\n', reads one line (without '\n', at most
  /// `max_bytes`) and closes; the whole exchange within `timeout`. kNetwork on any failure.
  virtual Result<std::string> Exchange(const std::string& ipv4, int port, const std::string& line,
                                       Duration timeout, size_t max_bytes) = 0;
  /// Connects to `ipv4`:`port` within `timeout` and closes, sending nothing: Ok when something
  /// listens there, kNetwork otherwise.
  virtual Status Listening(const std::string& ipv4, int port, Duration timeout) = 0;
};

class TcpLineExchange : public LineExchange {
 public:
  Result<std::string> Exchange(const std::string& ipv4, int port, const std::string& line,
                               Duration timeout, size_t max_bytes) override;
  Status Listening(const std::string& ipv4, int port, Duration timeout) override;
};

/// The IPv4 address of the peer of a connected socket (an IPv4-mapped IPv6 peer gives its
/// IPv4 address; any other IPv6 peer is kInvalidInput).
Result<std::string> PeerIpv4(int fd);

/// Reads one line (without '\n') from a connected socket within `timeout`; kInvalidInput when
/// longer than `max_bytes`, kNetwork when the peer closes first or the time runs out.
Result<std::string> ReadLine(int fd, size_t max_bytes, Duration timeout);

/// Writes all of `data` within `timeout`.
Status WriteAll(int fd, const std::string& data, Duration timeout);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_TCP_H_
