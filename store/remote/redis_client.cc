#include "store/remote/redis_client.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <chrono>

#include <fmt/format.h>

namespace tracecache::store {

struct RedisClient::Reply {
  int type = REDIS_REPLY_NIL;
  std::string str;
  int64_t integer = 0;
  std::vector<Reply> elements;
};

namespace {

timeval to_timeval(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

void ignore_sigpipe_if_default() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace

RedisClient::Reply RedisClient::convert(const redisReply* r) {
  Reply out;
  out.type = r->type;
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
    out.str.assign(r->str, r->len);
  } else if (r->type == REDIS_REPLY_INTEGER) {
    out.integer = r->integer;
  } else if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
  }
  return out;
}

Result<std::unique_ptr<RedisClient>> RedisClient::create(RemoteOptions options, Metrics* metrics) {
  Result<RemoteEndpoint> endpoint = parse_remote_url(options.url);
  if (!endpoint.is_ok()) return endpoint.status();
  if (options.connect_timeout_ms <= 0 || options.command_timeout_ms <= 0) {
    return invalid_argument("remote cache timeouts must be positive (milliseconds)");
  }
  ignore_sigpipe_if_default();
  return std::unique_ptr<RedisClient>(new RedisClient(std::move(options), std::move(*endpoint), metrics));
}

RedisClient::RedisClient(RemoteOptions options, RemoteEndpoint endpoint, Metrics* metrics)
    : options_(std::move(options)), endpoint_(std::move(endpoint)), metrics_(metrics), backoff_(options_.backoff) {}

RedisClient::~RedisClient() {
  if (context_) redisFree(context_);
}

Status RedisClient::fail(std::string what) {
  if (context_) {
    redisFree(context_);
    context_ = nullptr;
  }
  backoff_.failed(now());
  last_call_ = RemoteCall::kFailed;
  last_error_ = std::move(what);
  if (metrics_) metrics_->add(remote_metrics::kFailures);
  return io_error(fmt::format("remote cache '{}': {}", endpoint_.url, last_error_));
}

Status RedisClient::connected() {
  if (context_) return Status::ok();
  if (!backoff_.may_try(now())) {
    last_call_ = RemoteCall::kSkipped;
    if (metrics_) metrics_->add(remote_metrics::kSkips);
    return io_error(fmt::format("remote cache '{}' skipped: retrying {:.0f} s after it failed ({})", endpoint_.url,
                                backoff_.wait_s(), last_error_));
  }
  const timeval connect_tv = to_timeval(options_.connect_timeout_ms);
  context_ = endpoint_.unix_socket ? redisConnectUnixWithTimeout(endpoint_.path.c_str(), connect_tv)
                                   : redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, connect_tv);
  if (!context_) return fail("could not allocate a connection");
  if (context_->err) return fail(fmt::format("could not connect: {}", context_->errstr));
  if (redisSetTimeout(context_, to_timeval(options_.command_timeout_ms)) != REDIS_OK) {
    return fail("could not set the command timeout");
  }
  if (endpoint_.db != 0) {
    const std::string db = std::to_string(endpoint_.db);
    const char* argv[] = {"SELECT", db.c_str()};
    const size_t lens[] = {6, db.size()};
    auto* r = static_cast<redisReply*>(redisCommandArgv(context_, 2, argv, lens));
    if (!r) return fail(fmt::format("SELECT {}: {}", db, context_->errstr));
    const bool ok = r->type == REDIS_REPLY_STATUS;
    std::string msg = r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string();
    freeReplyObject(r);
    if (!ok) return fail(fmt::format("SELECT {}: {}", db, msg));
  }
  return Status::ok();
}

Result<RedisClient::Reply> RedisClient::command(std::initializer_list<std::string_view> args) {
  if (Status st = connected(); !st.is_ok()) return st;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  size_t sent = 0;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
    sent += a.size();
  }
  const auto start = std::chrono::steady_clock::now();
  auto* r = static_cast<redisReply*>(redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (metrics_) {
    metrics_->record_ms(remote_metrics::kTimer,
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    metrics_->add(remote_metrics::kBytesSent, static_cast<int64_t>(sent));
  }
  if (!r) return fail(fmt::format("{} failed: {}", *args.begin(), context_->errstr[0] ? context_->errstr : "no reply"));
  Reply out = convert(r);
  freeReplyObject(r);
  backoff_.succeeded();
  if (out.type == REDIS_REPLY_ERROR) {
    last_call_ = RemoteCall::kRefused;
    return io_error(fmt::format("remote cache '{}' refused {}: {}", endpoint_.url, *args.begin(), out.str));
  }
  last_call_ = RemoteCall::kDone;
  return out;
}

Result<std::optional<std::string>> RedisClient::get(std::string_view key) {
  Result<Reply> r = command({"GET", key});
  if (!r.is_ok()) {
    // GET on a key of another type is an answer ("WRONGTYPE"): no value of ours is there.
    if (last_call_ == RemoteCall::kRefused && r.status().message().find("WRONGTYPE") != std::string::npos) {
      last_call_ = RemoteCall::kDone;
      return std::optional<std::string>();
    }
    return r.status();
  }
  if (r->type != REDIS_REPLY_STRING) return std::optional<std::string>();
  if (metrics_) metrics_->add(remote_metrics::kBytesRead, static_cast<int64_t>(r->str.size()));
  return std::optional<std::string>(std::move(r->str));
}

Result<bool> RedisClient::set_if_absent(std::string_view key, std::string_view value) {
  const std::string ttl = std::to_string(options_.ttl_s);
  Result<Reply> r = options_.ttl_s > 0 ? command({"SET", key, value, "NX", "EX", ttl}) : command({"SET", key, value, "NX"});
  if (!r.is_ok()) return r.status();
  return r->type == REDIS_REPLY_STATUS;  // "OK"; nil when the key existed
}

Status RedisClient::del(std::string_view key) {
  Result<Reply> r = command({"DEL", key});
  return r.is_ok() ? Status::ok() : r.status();
}

Result<std::vector<std::pair<std::string, std::string>>> RedisClient::hash_get_all(std::string_view key) {
  std::vector<std::pair<std::string, std::string>> out;
  Result<Reply> r = command({"HGETALL", key});
  if (!r.is_ok()) {
    if (last_call_ == RemoteCall::kRefused && r.status().message().find("WRONGTYPE") != std::string::npos) {
      last_call_ = RemoteCall::kDone;
      return out;
    }
    return r.status();
  }
  if (r->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
    if (metrics_) metrics_->add(remote_metrics::kBytesRead, static_cast<int64_t>(r->elements[i + 1].str.size()));
    out.emplace_back(std::move(r->elements[i].str), std::move(r->elements[i + 1].str));
  }
  return out;
}

Result<bool> RedisClient::hash_set_if_absent(std::string_view key, std::string_view field, std::string_view value) {
  Result<Reply> r = command({"HSETNX", key, field, value});
  if (!r.is_ok()) return r.status();
  const bool written = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  if (written && options_.ttl_s > 0) {
    const std::string ttl = std::to_string(options_.ttl_s);
    Result<Reply> e = command({"EXPIRE", key, ttl});
    if (!e.is_ok()) return e.status();
  }
  return written;
}

Status RedisClient::hash_del(std::string_view key, std::string_view field) {
  Result<Reply> r = command({"HDEL", key, field});
  return r.is_ok() ? Status::ok() : r.status();
}

Result<std::vector<std::string>> RedisClient::scan(std::string_view pattern) {
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    Result<Reply> r = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (!r.is_ok()) return r.status();
    if (r->type != REDIS_REPLY_ARRAY || r->elements.size() != 2) {
      return io_error(fmt::format("remote cache '{}': SCAN gave an unexpected reply", endpoint_.url));
    }
    cursor = r->elements[0].str;
    for (Reply& k : r->elements[1].elements) keys.push_back(std::move(k.str));
  } while (cursor != "0");
  return keys;
}

Result<int64_t> RedisClient::memory_usage(std::string_view key) {
  Result<Reply> r = command({"MEMORY", "USAGE", key});
  if (!r.is_ok()) return r.status();
  return r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
}

Result<std::string> RedisClient::type(std::string_view key) {
  Result<Reply> r = command({"TYPE", key});
  if (!r.is_ok()) return r.status();
  return std::move(r->str);
}

Result<std::string> RedisClient::info(std::string_view section) {
  Result<Reply> r = command({"INFO", section});
  if (!r.is_ok()) return r.status();
  return std::move(r->str);
}

}  // namespace tracecache::store
