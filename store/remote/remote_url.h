// RemoteEndpoint: where the remote cache tier's Redis server is, parsed from the URL users give
// (`--remote`, $TRACECACHE_REMOTE): `redis://HOST:PORT[/DB]` (TCP; PORT 1-65535, DB a database
// number 0-65535, default 0) or `unix:///PATH` (a unix socket, absolute path; database 0).
// `redis://HOST` without a port means 6379. No user, password or TLS: the client has none
// (docs/remote-cache.md: a private network or a unix socket).
// Errors: parse_remote_url() returns kInvalidArgument saying what is wrong and what is expected.
// Thread-safety: pure function, plain values.
#pragma once

#include <string>
#include <string_view>

#include "capture/core/status.h"

namespace tracecache::store {

struct RemoteEndpoint {
  bool unix_socket = false;
  std::string host;   // TCP only
  int port = 6379;    // TCP only
  std::string path;   // unix socket only
  int db = 0;         // SELECTed after connecting when not 0
  std::string url;    // as given, for messages
  friend bool operator==(const RemoteEndpoint&, const RemoteEndpoint&) = default;
};

Result<RemoteEndpoint> parse_remote_url(std::string_view url);

}  // namespace tracecache::store
