// The remote cache tier's pure parts: URL parsing, key building, the back-off (a fake clock), the
// seal every remote value carries, tier-named event names, the client's skip-after-failure
// against a server that is not there (no server needed; the fake clock decides when it retries),
// and the client against a hostile fake server (a thread on a unix socket answering with canned
// bytes): oversized, endless, mistyped, truncated and garbage replies are refused, never
// allocated or trusted. Runs against a real Redis are tests/cli/remote*.sh.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "store/core/blob_checksum.h"
#include "store/core/events.h"
#include "store/remote/backoff.h"
#include "store/remote/redis_client.h"
#include "store/remote/remote_keys.h"
#include "store/remote/remote_url.h"
#include "store/sqlite/cache_db.h"
#include "tests/test_support.h"

namespace tracecache::store {
namespace {

TEST(RemoteUrl, ParsesTcpAndUnixSockets) {
  Result<RemoteEndpoint> tcp = parse_remote_url("redis://cache.internal:6380/3");
  ASSERT_TRUE(tcp.is_ok()) << tcp.status().message();
  EXPECT_FALSE(tcp->unix_socket);
  EXPECT_EQ(tcp->host, "cache.internal");
  EXPECT_EQ(tcp->port, 6380);
  EXPECT_EQ(tcp->db, 3);

  Result<RemoteEndpoint> plain = parse_remote_url("redis://10.0.0.7");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->port, 6379);
  EXPECT_EQ(plain->db, 0);
  Result<RemoteEndpoint> slash = parse_remote_url("redis://h:1/");
  ASSERT_TRUE(slash.is_ok());
  EXPECT_EQ(slash->db, 0);

  Result<RemoteEndpoint> sock = parse_remote_url("unix:///run/redis/redis.sock");
  ASSERT_TRUE(sock.is_ok());
  EXPECT_TRUE(sock->unix_socket);
  EXPECT_EQ(sock->path, "/run/redis/redis.sock");
}

TEST(RemoteUrl, RefusesWhatItCannotUse) {
  for (const char* bad : {"", "redis://", "redis://:6379", "redis://h:0", "redis://h:65536", "redis://h:x",
                          "redis://h:6379/db", "redis://h:6379/-1", "redis://user:pw@h:6379", "rediss://h:6379",
                          "unix://relative.sock", "unix://", "http://h", "redis://[::1]:6379"}) {
    Result<RemoteEndpoint> r = parse_remote_url(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("redis://HOST:PORT"), std::string::npos) << r.status().message();
  }
}

TEST(RemoteKeys, EveryPartOfTheKeyIsInIt) {
  ExecutableKey k{*GraphKey::from_hex("0123456789abcdef0123456789abcdef"), "sim", "d1g35t", 7};
  const std::string prefix = remote_key_prefix();
  EXPECT_EQ(prefix, fmt::format("tracecache:s{}:ir{}:", kSchemaVersion, kIrFormatVersion));
  EXPECT_EQ(remote_executable_key(k), prefix + "exe:0123456789abcdef0123456789abcdef:sim:d1g35t:c7");
  EXPECT_EQ(remote_key_kind(remote_executable_key(k)), "exe");
  // Each part changes the key.
  ExecutableKey other = k;
  other.compiler_version = 8;
  EXPECT_NE(remote_executable_key(other), remote_executable_key(k));
  other = k;
  other.options_digest = "other";
  EXPECT_NE(remote_executable_key(other), remote_executable_key(k));
  other = k;
  other.backend = "cpu";
  EXPECT_NE(remote_executable_key(other), remote_executable_key(k));
  EXPECT_EQ(remote_graph_key(k.graph), prefix + "graph:0123456789abcdef0123456789abcdef");
  EXPECT_EQ(remote_key_kind(remote_graph_key(k.graph)), "graph");
  // Separators inside names are encoded, so parts never run together.
  FunctionKey a{"f:x", "1", "t"}, b{"f", "x:1", "t"};
  EXPECT_NE(remote_function_key(a), remote_function_key(b));
  EXPECT_EQ(remote_function_key(a), prefix + "fn:t:f%3Ax:1");
  EXPECT_EQ(remote_key_kind(remote_function_key(a)), "fn");
  EXPECT_EQ(remote_key_kind("tracecache:s1:ir1:exe:00"), "");
  EXPECT_EQ(remote_key_kind(prefix + "exec:1"), "");
}

TEST(RemoteBackoff, DoublesUpToTheMaximumAndResetsOnSuccess) {
  Backoff b({.initial_s = 1, .max_s = 4});
  EXPECT_TRUE(b.may_try(0));
  b.failed(10);
  EXPECT_FALSE(b.may_try(10.5));
  EXPECT_TRUE(b.may_try(11));
  b.failed(11);
  EXPECT_EQ(b.wait_s(), 2);
  EXPECT_FALSE(b.may_try(12.9));
  EXPECT_TRUE(b.may_try(13));
  b.failed(13);
  b.failed(17);
  EXPECT_EQ(b.wait_s(), 4);  // capped
  EXPECT_EQ(b.failures_in_a_row(), 4);
  b.succeeded();
  EXPECT_TRUE(b.may_try(17));
  b.failed(20);
  EXPECT_EQ(b.wait_s(), 1);  // starts over
}

TEST(RemoteSeal, OnlyAnIntactValueUnseals) {
  const std::string blob = "executable bytes";
  const std::string sealed = seal_blob(blob);
  Result<std::string_view> ok = unseal_blob(sealed);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(*ok, blob);
  EXPECT_TRUE(unseal_blob(seal_blob("")).is_ok());
  std::string flipped = sealed;
  flipped.back() ^= 1;
  for (const std::string& bad : {flipped, sealed.substr(0, sealed.size() - 1), sealed.substr(0, 5), std::string("garbage"),
                                 std::string("XXXX") + sealed.substr(4), std::string()}) {
    Result<std::string_view> r = unseal_blob(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  }
}

TEST(RemoteEvents, TierNamedEventsRoundTrip) {
  EXPECT_EQ(event_name(EventKind::kMiss, kRemoteTier), "miss_remote");
  EXPECT_EQ(event_name(EventKind::kStoreFailed, kRemoteTier), "store_failed_remote");
  EXPECT_EQ(event_name(EventKind::kUnavailable, kRemoteTier), "unavailable_remote");
  EXPECT_EQ(event_name(EventKind::kSkip), "skip");
  for (EventKind k : {EventKind::kMiss, EventKind::kStore, EventKind::kStoreFailed, EventKind::kCorrupt,
                      EventKind::kUnavailable, EventKind::kSkip, EventKind::kHit}) {
    const std::string name = event_name(k, kRemoteTier);
    EXPECT_EQ(parse_event_name(name), (ParsedEventName{k, std::string(kRemoteTier)})) << name;
  }
  EXPECT_EQ(parse_event_name("store_failed"), (ParsedEventName{EventKind::kStoreFailed, ""}));
  for (const char* bad : {"miss_", "miss_Remote", "skip_re mote", "unavailable_1"}) {
    EXPECT_FALSE(parse_event_name(bad).has_value()) << bad;
  }
}

// A server that is not there: the first command fails and starts the back-off, later ones are
// skipped without trying until the (fake) clock passes the wait, then one is tried again.
TEST(RemoteClient, SkipsUntilTheBackoffPasses) {
  double now = 100;
  Metrics metrics;
  RemoteOptions o;
  o.url = "unix:///nonexistent/tracecache-test.sock";
  o.backoff = {.initial_s = 5, .max_s = 60};
  o.clock = [&] { return now; };
  Result<std::unique_ptr<RedisClient>> c = RedisClient::create(o, &metrics);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  RedisClient& client = **c;
  EXPECT_EQ(client.last_call(), RemoteCall::kNone);
  EXPECT_FALSE(client.get("k").is_ok());
  EXPECT_EQ(client.last_call(), RemoteCall::kFailed);
  now += 4;
  Result<std::optional<std::string>> skipped = client.get("k");
  ASSERT_FALSE(skipped.is_ok());
  EXPECT_EQ(client.last_call(), RemoteCall::kSkipped);
  EXPECT_NE(skipped.status().message().find("skipped"), std::string::npos) << skipped.status().message();
  EXPECT_FALSE(client.set_if_absent("k", "v").is_ok());
  EXPECT_EQ(client.last_call(), RemoteCall::kSkipped);
  now += 1;
  EXPECT_FALSE(client.get("k").is_ok());
  EXPECT_EQ(client.last_call(), RemoteCall::kFailed);
  EXPECT_EQ(client.backoff().wait_s(), 10);
  EXPECT_EQ(metrics.counter(remote_metrics::kFailures), 2);
  EXPECT_EQ(metrics.counter(remote_metrics::kSkips), 2);
}

TEST(RemoteClient, RefusesBadOptions) {
  RemoteOptions o;
  o.url = "memcached://h";
  EXPECT_EQ(RedisClient::create(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o.url = "redis://h:1";
  o.command_timeout_ms = 0;
  EXPECT_EQ(RedisClient::create(o, nullptr).status().code(), StatusCode::kInvalidArgument);
}

// A fake Redis server on a unix socket: its i-th command (over all connections) is answered with
// answers[i] (the last answer for every later one). An endless answer is followed by filler bytes
// until the client hangs up (at most 64 MiB); a closing one ends the connection after it.
class FakeServer {
 public:
  struct Answer {
    std::string bytes;
    bool endless = false;
    bool close_after = false;
  };

  explicit FakeServer(std::vector<Answer> answers) : answers_(std::move(answers)) {
    sock_ = (dir_.path() / "fake.sock").string();
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_.c_str());
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listen_fd_, 4), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);  // accept() returns
    thread_.join();
    ::close(listen_fd_);
  }
  std::string url() const { return "unix://" + sock_; }
  int connections() const { return connections_; }

 private:
  void serve() {
    for (;;) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      ++connections_;
      char buf[65536];
      while (::read(fd, buf, sizeof(buf)) > 0) {
        const Answer& a = answers_[std::min(commands_++, answers_.size() - 1)];
        bool open = ::send(fd, a.bytes.data(), a.bytes.size(), MSG_NOSIGNAL) >= 0;
        const std::string filler(65536, 'x');
        for (size_t sent = 0; open && a.endless && sent < (size_t{64} << 20); sent += filler.size()) {
          open = ::send(fd, filler.data(), filler.size(), MSG_NOSIGNAL) >= 0;
        }
        if (!open || a.endless || a.close_after) break;
      }
      ::close(fd);
    }
  }

  testing::TempDir dir_;
  std::string sock_;
  std::vector<Answer> answers_;
  int listen_fd_ = -1;
  size_t commands_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

std::unique_ptr<RedisClient> client_for(const FakeServer& server, Metrics* metrics = nullptr) {
  RemoteOptions o;
  o.url = server.url();
  o.max_value_bytes = 1024;
  o.command_timeout_ms = 2000;  // the fake server answers at once; a slow machine must not fail
  o.connect_timeout_ms = 2000;
  Result<std::unique_ptr<RedisClient>> c = RedisClient::create(o, metrics);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return std::move(*c);
}

// A value over the limit, whole or endless, is refused as it arrives; the connection is dropped
// without a back-off, and the next command (on a new connection) is answered.
TEST(RemoteClientReplies, ValuesOverTheLimitAreRefusedNotAllocated) {
  FakeServer server({{"$2000\r\n" + std::string(2000, 'v') + "\r\n"},
                     {"$100000000000\r\n", /*endless=*/true},
                     {"$5\r\nhello\r\n"}});
  Metrics metrics;
  std::unique_ptr<RedisClient> client = client_for(server, &metrics);
  for (int i = 0; i < 2; ++i) {
    Result<std::optional<std::string>> r = client->get("k");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().message();
    EXPECT_NE(r.status().message().find("over the limit"), std::string::npos) << r.status().message();
    EXPECT_EQ(client->last_call(), RemoteCall::kDone);
  }
  Result<std::optional<std::string>> ok = client->get("k");
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->value_or(""), "hello");
  EXPECT_EQ(server.connections(), 3);
  EXPECT_EQ(metrics.counter(remote_metrics::kFailures), 0);
}

TEST(RemoteClientReplies, HugeArraysAndMistypedRepliesAreCorrupt) {
  FakeServer server({{"*2000000000\r\n"},
                     {":5\r\n"},
                     {"+OK\r\n"},
                     {"*2\r\n:1\r\n:2\r\n"},
                     {"*1\r\n$1\r\na\r\n"},
                     {"*2\r\n$1\r\n0\r\n$1\r\nv\r\n"}});
  std::unique_ptr<RedisClient> client = client_for(server);
  EXPECT_EQ(client->hash_get_all("h").status().code(), StatusCode::kCorruption);  // 2e9 elements
  EXPECT_EQ(client->get("k").status().code(), StatusCode::kCorruption);           // an integer
  EXPECT_EQ(client->get("k").status().code(), StatusCode::kCorruption);           // a status
  EXPECT_EQ(client->hash_get_all("h").status().code(), StatusCode::kCorruption);  // integers
  EXPECT_EQ(client->hash_get_all("h").status().code(), StatusCode::kCorruption);  // odd count
  Result<std::vector<std::pair<std::string, std::string>>> fields = client->hash_get_all("h");
  ASSERT_TRUE(fields.is_ok()) << fields.status().message();
  ASSERT_EQ(fields->size(), 1u);
  EXPECT_EQ((*fields)[0], (std::pair<std::string, std::string>("0", "v")));
}

// A reply cut off by the server's end, or bytes that are not the protocol, are failures of the
// connection (the back-off starts), never values.
TEST(RemoteClientReplies, TruncatedAndGarbageRepliesFailTheConnection) {
  for (const char* bytes : {"$10\r\nabc", "hello there\r\n"}) {
    FakeServer server({{bytes, false, /*close_after=*/true}});
    std::unique_ptr<RedisClient> client = client_for(server);
    Result<std::optional<std::string>> r = client->get("k");
    ASSERT_FALSE(r.is_ok()) << bytes;
    EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().message();
    EXPECT_EQ(client->last_call(), RemoteCall::kFailed);
  }
}

// A value over the limit is never sent: the client refuses it before connecting.
TEST(RemoteClientReplies, ValuesOverTheLimitAreNotWritten) {
  FakeServer server({{"+OK\r\n"}});
  std::unique_ptr<RedisClient> client = client_for(server);
  const std::string big(1025, 'v');
  EXPECT_EQ(client->set_if_absent("k", big).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(client->last_call(), RemoteCall::kRefused);
  EXPECT_EQ(client->hash_set_if_absent("h", "0", big).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(server.connections(), 0);
  Result<bool> small = client->set_if_absent("k", std::string(1024, 'v'));
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  EXPECT_TRUE(*small);
}

}  // namespace
}  // namespace tracecache::store
