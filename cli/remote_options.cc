#include "cli/remote_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>

#include "cli/commands.h"
#include "cli/validators.h"

namespace tracecache::cli {

void add_remote_options(CLI::App* command, RemoteCliOptions& options) {
  command->add_option("--remote", options.flag,
                      "Shared cache tier on a Redis server after the local ones: redis://HOST:PORT[/DB] or "
                      "unix:///PATH.sock (default: $TRACECACHE_REMOTE; docs/remote-cache.md)");
  command->add_option("--remote-mode", options.mode, "read-write, or read-only (never writes or deletes remote entries)")
      ->check(CLI::IsMember({"read-write", "read-only"}))
      ->capture_default_str();
  command->add_option("--remote-timeout-ms", options.timeout_ms,
                      "Connect and command timeout for the remote; a timeout skips the remote for a back-off")
      ->check(whole_number_in(1, 60000))
      ->capture_default_str();
  command->add_option("--remote-ttl", options.ttl,
                      "Remote entries written expire after this: seconds, or with m/h/d; 0: never")
      ->capture_default_str();
  command->add_option("--remote-backoff", options.backoff_s,
                      "Seconds to skip the remote after it failed before trying it again (doubles with each "
                      "failure in a row, up to 30 s or this)")
      ->check(number_in(0.001, 86400.0))
      ->capture_default_str();
}

Result<RemoteSetup> remote_setup(const RemoteCliOptions& options) {
  Result<double> ttl = parse_age(options.ttl);
  if (!ttl.is_ok()) return invalid_argument(fmt::format("--remote-ttl: {}", ttl.status().message()));
  return RemoteSetup{.url = options.url(),
                     .read_only = options.mode == "read-only",
                     .timeout_ms = options.timeout_ms,
                     .ttl_s = static_cast<int64_t>(std::llround(*ttl)),
                     .backoff_s = options.backoff_s};
}

Result<std::unique_ptr<store::RedisClient>> open_remote(const RemoteCliOptions& options, Metrics* metrics) {
  if (options.url().empty()) return std::unique_ptr<store::RedisClient>();
  Result<RemoteSetup> remote = remote_setup(options);
  if (!remote.is_ok()) return remote.status();
  return open_remote_client(*remote, {}, metrics);
}

}  // namespace tracecache::cli
