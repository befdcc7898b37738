#include "engine/server/connection.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <cstdlib>

namespace lockstep::server {
namespace {

// Numeric host and port of a socket address, as cpp-httplib fills Request::remote_addr.
bool HostAndPort(const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
  if (a.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  } else if (a.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  } else {
    return false;
  }
  std::array<char, NI_MAXHOST> buf{};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, buf.data(), buf.size(), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return false;
  }
  *host = buf.data();
  return true;
}

bool Matches(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  int listening = 0;
  socklen_t optlen = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || listening) return false;
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      !HostAndPort(a, len, &host, &port) || port != remote_port || host != remote_addr) {
    return false;
  }
  len = sizeof(a);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
         HostAndPort(a, len, &host, &port) && port == local_port;
}

}  // namespace

int ConnectionSocket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  const int own = dirfd(d);
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (Matches(static_cast<int>(fd), remote_addr, remote_port, local_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(d);
  return found;
}

bool PeerClosed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace lockstep::server
