// One-line TCP exchanges on the loopback: the client, and the server side of a connection.
#include "roles/os/tcp.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace onehpc {
namespace {

// A listener on 127.0.0.1 (port chosen by the kernel).
struct Listener {
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
  int fd = -1;
  int port = 0;
};

TEST(TcpTest, OneLineEachWayAndThePeerAddress) {
  Listener l;
  std::string got, peer;
  std::thread server([&] {
    int c = ::accept(l.fd, nullptr, nullptr);
    peer = PeerIpv4(c).value_or("?");
    got = ReadLine(c, 100, Duration(2000)).value_or("?");
    EXPECT_TRUE(WriteAll(c, "pong\n", Duration(2000)));
    ::close(c);
  });
  TcpLineExchange tcp;
  auto answer = tcp.Exchange("127.0.0.1", l.port, "ping", Duration(2000), 100);
  server.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(*answer, "pong");
  EXPECT_EQ(got, "ping");
  EXPECT_EQ(peer, "127.0.0.1");
}

TEST(TcpTest, EveryFailureIsBoundedAndNamed) {
  TcpLineExchange tcp;
  Listener closed;
  int port = closed.port;
  ::close(closed.fd);
  closed.fd = ::socket(AF_INET, SOCK_STREAM, 0);  // nothing listens on `port` any more
  auto refused = tcp.Exchange("127.0.0.1", port, "x", Duration(2000), 100);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kNetwork);
  EXPECT_NE(refused.error().message.find("connect to 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << refused.error().message;

  // A server that accepts and never answers: the exchange ends at its deadline.
  Listener silent;
  auto start = std::chrono::steady_clock::now();
  auto timed_out = tcp.Exchange("127.0.0.1", silent.port, "x", Duration(300), 100);
  ASSERT_FALSE(timed_out);
  EXPECT_EQ(timed_out.error().kind, ErrorKind::kNetwork);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  // An answer longer than allowed is refused.
  Listener chatty;
  std::thread server([&] {
    int c = ::accept(chatty.fd, nullptr, nullptr);
    (void)ReadLine(c, 100, Duration(2000));
    (void)WriteAll(c, std::string(5000, 'a') + "\n", Duration(2000));
    ::close(c);
  });
  auto long_line = tcp.Exchange("127.0.0.1", chatty.port, "x", Duration(2000), 1000);
  server.join();
  ASSERT_FALSE(long_line);
  EXPECT_NE(long_line.error().message.find("longer than 1000 bytes"), std::string::npos);
  EXPECT_FALSE(tcp.Exchange("not-an-ip", 1, "x", Duration(100), 10));
  EXPECT_FALSE(PeerIpv4(0 /* a pipe or terminal in tests, never a socket */ + 1000));
}

// Listening: a connect and a close, nothing sent (slurmdbd's port before slurmctld starts).
TEST(TcpTest, ListeningConnectsAndSendsNothing) {
  TcpLineExchange tcp;
  Listener open;
  std::string sent = "?";
  std::thread server([&] {
    int c = ::accept(open.fd, nullptr, nullptr);
    char buf[16];
    ssize_t n = ::read(c, buf, sizeof buf);  // 0: closed without a byte
    sent = std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
    ::close(c);
  });
  EXPECT_TRUE(tcp.Listening("127.0.0.1", open.port, Duration(2000)));
  server.join();
  EXPECT_EQ(sent, "");

  Listener closed;
  int port = closed.port;
  ::close(closed.fd);
  closed.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  auto refused = tcp.Listening("127.0.0.1", port, Duration(2000));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kNetwork);
  EXPECT_NE(refused.error().message.find("connect to 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << refused.error().message;
  EXPECT_EQ(tcp.Listening("not-an-ip", 1, Duration(100)).error().kind, ErrorKind::kInvalidInput);
}

}  // namespace
}  // namespace onehpc
