// The TCP connection behind a request, so that a handler can see its client go away
// (docs/serving.md "Admission, disconnects, shutdown").
//
// Debian's cpp-httplib 0.11 gives a handler neither its socket nor a way to ask whether the
// client is still there (Request::is_connection_closed came in a later release), and a
// non-streaming reply is written only once the engine is done, so no failed write can tell.
// The request does carry the connection's addresses; the one socket of this process whose peer
// is that address and port is the connection (a live TCP connection's peer address and port
// are unique among a listener's accepted sockets). The handler runs on the thread that owns
// the socket and the socket is closed only after the handler returns, so the fd stays valid
// while the handler probes it.
#pragma once

#include <string>

namespace lockstep::server {

// The fd of the connected TCP socket whose local port is `local_port` and whose peer is
// `remote_addr` (numeric, as getnameinfo(NI_NUMERICHOST) writes it) port `remote_port`;
// -1 when no open socket of this process matches.
int ConnectionSocket(const std::string& remote_addr, int remote_port, int local_port);

// True once the peer has closed the connection (FIN, reset or error): a poll that does not
// wait. Pending unread data (a pipelined next request) is not a close. A client that only
// shuts down its sending side also reads as gone (no HTTP client does that mid-request).
bool PeerClosed(int fd);

}  // namespace lockstep::server
