// RedisClient: the remote cache tier's connection to one Redis server (hiredis, Debian's
// libhiredis-dev), with short timeouts and a back-off so that a server that is down or hangs
// costs a process one timeout, one warning and then nothing until the back-off has passed.
//
// The client connects on its first command (never in create()), with options.connect_timeout_ms,
// and every command then waits at most options.command_timeout_ms. A connection failure, a
// timeout or a broken connection drops the connection and starts the back-off (backoff.h): until
// it passes, commands are skipped without touching the network. A server's error reply (e.g.
// "OOM command not allowed" under a full maxmemory) fails that command only; the connection stays.
// last_call() says which of these happened to the latest command, so that the caller can record
// hit / miss / failure / skip as it should.
//
// Values read from the server are untrusted: this class only moves bytes; callers unseal and
// validate them (store/core/blob_checksum.h). Replies are bounded before they are allocated: a
// string longer than options.max_value_bytes, a reply holding more than max_value_bytes plus
// kReplyOverheadBytes in all, or an array of more than kMaxReplyElements elements is never
// assembled; the command fails with kCorruption ("over the limit"), the connection is
// dropped (no back-off: the server answered, with a value that must go) and the next command
// reconnects. A reply of a type the command never answers with (an integer to GET, a hash's
// fields that are not strings) is kCorruption too. Both are the value's fault: callers record
// `corrupt` and remove it. create() also sets SIGPIPE to be ignored when it
// has its default action (a server closing the socket under a write must not end the process).
//
// Metrics (when given): the timer "remote" (one sample per command sent), and the counters
// "remote_bytes_read", "remote_bytes_sent" (commands, values included), "remote_failures" and "remote_skips".
// Errors: create() fails with kInvalidArgument for a bad URL. Commands return kIOError saying
// what failed (with the URL), "skipped" when backing off.
// Thread-safety: not thread-safe (one owner, one thread). Ownership: owns its connection; the
// metrics are not owned and must outlive the client.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/core/metrics.h"
#include "capture/core/status.h"
#include "store/remote/backoff.h"
#include "store/remote/remote_url.h"

struct redisContext;
struct redisReply;
struct redisReadTask;

namespace tracecache::store {

// The largest value the remote tier writes or accepts, sealed (store/core/blob_checksum.h): far
// above any executable, canonical graph or guard entry tracecache makes (kilobytes to a few
// megabytes), far below what would hurt a process to hold.
inline constexpr size_t kMaxRemoteValueBytes = size_t{64} << 20;
// A reply may hold this much besides its largest value (SCAN's keys, a hash's field names).
inline constexpr size_t kReplyOverheadBytes = size_t{1} << 20;
// The most elements one reply array may have (SCAN asks for 1000 keys a batch; a function's
// guard entries are a few).
inline constexpr size_t kMaxReplyElements = size_t{1} << 16;

// The remote tier's settings (cli: --remote, --remote-mode, --remote-timeout-ms, --remote-ttl).
struct RemoteOptions {
  std::string url;               // "" = no remote tier
  bool read_only = false;        // --remote-mode read-only: never writes or deletes
  int connect_timeout_ms = 250;
  int command_timeout_ms = 250;
  int64_t ttl_s = int64_t{7} * 24 * 3600;  // every entry expires after this; 0: never
  BackoffOptions backoff{};
  RemoteClock clock{};           // null: steady_seconds
  size_t max_value_bytes = kMaxRemoteValueBytes;  // smaller in tests
};

namespace remote_metrics {
inline constexpr std::string_view kTimer = "remote";
inline constexpr std::string_view kBytesRead = "remote_bytes_read";
inline constexpr std::string_view kBytesSent = "remote_bytes_sent";
inline constexpr std::string_view kFailures = "remote_failures";
inline constexpr std::string_view kSkips = "remote_skips";
}  // namespace remote_metrics

// What became of the latest command.
enum class RemoteCall : uint8_t {
  kNone,     // no command yet
  kDone,     // the server answered (a miss is an answer)
  kRefused,  // the server answered with an error (out of memory, wrong type), or the value was
             // over the size limit and not sent: the connection stays
  kFailed,   // connecting or the command failed or timed out: the back-off started
  kSkipped,  // not sent: backing off after a failure
};

class RedisClient {
 public:
  static Result<std::unique_ptr<RedisClient>> create(RemoteOptions options, Metrics* metrics);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  const RemoteEndpoint& endpoint() const { return endpoint_; }
  const RemoteOptions& options() const { return options_; }
  bool read_only() const { return options_.read_only; }
  RemoteCall last_call() const { return last_call_; }
  const Backoff& backoff() const { return backoff_; }

  // nullopt when the key is absent (or holds another type). kCorruption: larger than the limit,
  // or an answer that is not a string.
  Result<std::optional<std::string>> get(std::string_view key);
  // SET key value NX [EX ttl]: true if written, false if the key already held a value (never
  // overwritten). A value larger than options.max_value_bytes is not sent: kResourceExhausted.
  Result<bool> set_if_absent(std::string_view key, std::string_view value);
  Status del(std::string_view key);
  // A hash's fields and values; empty when absent. kCorruption: larger than the limit, or not
  // an even number of strings.
  Result<std::vector<std::pair<std::string, std::string>>> hash_get_all(std::string_view key);
  // HSETNX, then EXPIRE the hash (ttl) when written: true if written, false if the field existed.
  // A value larger than options.max_value_bytes is not sent: kResourceExhausted.
  Result<bool> hash_set_if_absent(std::string_view key, std::string_view field, std::string_view value);
  Status hash_del(std::string_view key, std::string_view field);
  // Every key matching a glob `pattern` (SCAN, so the server is not blocked).
  Result<std::vector<std::string>> scan(std::string_view pattern);
  // MEMORY USAGE of a key (bytes the server holds for it); 0 if absent.
  Result<int64_t> memory_usage(std::string_view key);
  // TYPE: "string", "hash", "none", ...
  Result<std::string> type(std::string_view key);
  // INFO section's "name:value" lines as they are.
  Result<std::string> info(std::string_view section);

 private:
  struct Reply;
  // What the reader may still accept of the reply being read (the reader's hooks see it).
  struct ReplyBudget {
    size_t max_string = 0;
    size_t bytes_left = 0;
    bool exceeded = false;
  };
  static Reply convert(const redisReply* r);
  // The reply's strings as the reader creates them, within budget_.
  // (task->privdata is the client; hiredis's own functions make the objects.)
  static void* create_string(const ::redisReadTask* task, char* str, size_t len);
  static void* create_array(const ::redisReadTask* task, int elements);
  // Sends one command on the open connection and reads its reply within budget_ (the caller frees
  // it). kCorruption past the budget (the connection dropped), kIOError (fail()) otherwise.
  Result<redisReply*> exchange(std::initializer_list<std::string_view> args);
  // A reply of a type `command_name` never answers with: kCorruption (the connection stays).
  Status unexpected_reply(std::string_view command_name, int type);
  // A value over options.max_value_bytes that is not sent: kResourceExhausted (kRefused).
  Status too_large_to_send(size_t bytes);
  // Drops the connection without a back-off (the server answered; the answer was unusable).
  void drop_connection();
  RedisClient(RemoteOptions options, RemoteEndpoint endpoint, Metrics* metrics);
  double now() const { return options_.clock ? options_.clock() : steady_seconds(); }
  // Connects if needed; kIOError (and the back-off) on failure, or the skip.
  Status connected();
  // Sends one command; a failed connection or command starts the back-off. kCorruption: the reply
  // was over the budget (no back-off).
  Result<Reply> command(std::initializer_list<std::string_view> args);
  Status fail(std::string what);

  RemoteOptions options_;
  RemoteEndpoint endpoint_;
  Metrics* metrics_;
  redisContext* context_ = nullptr;
  Backoff backoff_;
  RemoteCall last_call_ = RemoteCall::kNone;
  std::string last_error_;
  ReplyBudget budget_;
};

}  // namespace tracecache::store
