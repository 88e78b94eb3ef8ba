// The remote cache tier's pure parts: URL parsing, key building, the back-off (a fake clock), the
// seal every remote value carries, tier-named event names, and the client's skip-after-failure
// against a server that is not there (no server needed; the fake clock decides when it retries).
// Runs against a real Redis are tests/cli/remote*.sh.
#include <gtest/gtest.h>

#include <string>

#include "store/core/blob_checksum.h"
#include "store/core/events.h"
#include "store/remote/backoff.h"
#include "store/remote/redis_client.h"
#include "store/remote/remote_keys.h"
#include "store/remote/remote_url.h"
#include "store/sqlite/cache_db.h"

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

}  // namespace
}  // namespace tracecache::store
