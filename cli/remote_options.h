// The remote cache tier's flags, shared by `run`, `zoo run`, `zoo train`, `bench`, `stats` and
// `gc`: --remote URL (default $TRACECACHE_REMOTE, read once in main), --remote-mode
// read-write|read-only, --remote-timeout-ms, --remote-ttl, --remote-backoff; what they say as the
// set-up path's RemoteSetup (replay/engine/setup.h, shared with Python), and opening the client.
// Errors: open_remote() returns kInvalidArgument for a bad URL or mode (exit 2). Opening never
// connects: an unreachable server is found at the first lookup and costs only caching.
// Thread-safety: one thread. Ownership: the client is the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "capture/core/metrics.h"
#include "capture/core/status.h"
#include "replay/engine/setup.h"
#include "store/remote/redis_client.h"

namespace CLI {
class App;
}

namespace tracecache::cli {

struct RemoteCliOptions {
  std::string flag;  // --remote
  std::string env;   // $TRACECACHE_REMOTE
  std::string mode = "read-write";
  int timeout_ms = RemoteSetup{}.timeout_ms;
  std::string ttl = "7d";  // RemoteSetup{}.ttl_s as the flag writes it
  double backoff_s = RemoteSetup{}.backoff_s;  // first wait after a failure
  // --remote, else $TRACECACHE_REMOTE; "" for none.
  const std::string& url() const { return flag.empty() ? env : flag; }
};

// Adds the flags to `command`.
void add_remote_options(CLI::App* command, RemoteCliOptions& options);
// The flags as the set-up path's options (the URL: --remote, else $TRACECACHE_REMOTE). Errors: a
// bad --remote-ttl (kInvalidArgument).
Result<RemoteSetup> remote_setup(const RemoteCliOptions& options);
// The client (open_remote_client); null when no URL is set.
Result<std::unique_ptr<store::RedisClient>> open_remote(const RemoteCliOptions& options, Metrics* metrics);

}  // namespace tracecache::cli
