// ConnectionSocket and PeerClosed (engine/server/connection.h) against the kernel's own view
// of real loopback TCP connections: the fd accept() returned, and what the peer did to its end
// (docs/serving.md "Admission, disconnects, shutdown").
#include "engine/server/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

int Port(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  EXPECT_EQ(rc, 0);
  return ntohs(a.sin_port);
}

// A listener on 127.0.0.1 and `n` accepted connections: client fds and server-side fds.
struct Loopback {
  int listener = -1;
  std::vector<int> clients, accepted;
  explicit Loopback(int n) {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listener, 16), 0);
    socklen_t len = sizeof(a);
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    for (int i = 0; i < n; ++i) {
      int c = socket(AF_INET, SOCK_STREAM, 0);
      EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
      clients.push_back(c);
      accepted.push_back(accept(listener, nullptr, nullptr));
    }
  }
  int port() const { return Port(listener, false); }
  ~Loopback() {
    for (int fd : clients) if (fd >= 0) close(fd);
    for (int fd : accepted) close(fd);
    close(listener);
  }
};

TEST(Connection, FindsTheAcceptedSocketOfEachPeer) {
  Loopback lb(4);
  for (size_t i = 0; i < lb.clients.size(); ++i) {
    // The peer's port is the client socket's own port, as the kernel says.
    const int peer_port = Port(lb.clients[i], false);
    EXPECT_EQ(ConnectionSocket("127.0.0.1", peer_port, lb.port()), lb.accepted[i]) << i;
  }
  // Right peer port but another local port, or another host: no socket.
  EXPECT_EQ(ConnectionSocket("127.0.0.1", Port(lb.clients[0], false), lb.port() + 1), -1);
  EXPECT_EQ(ConnectionSocket("127.0.0.2", Port(lb.clients[0], false), lb.port()), -1);
}

TEST(Connection, PeerClosedOnlyWhenThePeerClosed) {
  Loopback lb(3);
  for (int fd : lb.accepted) EXPECT_FALSE(PeerClosed(fd));
  // Data waiting to be read (a pipelined request) is not a close.
  ASSERT_EQ(write(lb.clients[0], "GET / HTTP/1.1\r\n", 16), 16);
  // A full close, and a reset (SO_LINGER 0).
  close(lb.clients[1]);
  lb.clients[1] = -1;
  linger l{1, 0};
  setsockopt(lb.clients[2], SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(lb.clients[2]);
  lb.clients[2] = -1;
  usleep(20000);  // loopback delivers the FIN and the RST within microseconds
  EXPECT_FALSE(PeerClosed(lb.accepted[0]));
  EXPECT_TRUE(PeerClosed(lb.accepted[1]));
  EXPECT_TRUE(PeerClosed(lb.accepted[2]));
}

}  // namespace
}  // namespace lockstep::server
