#include "store/remote/redis_client.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
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

std::string_view reply_type_name(int type) {
  switch (type) {
    case REDIS_REPLY_STRING: return "string";
    case REDIS_REPLY_ARRAY: return "array";
    case REDIS_REPLY_INTEGER: return "integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "status";
    case REDIS_REPLY_ERROR: return "error";
    default: return "unknown";
  }
}

// hiredis's own reply object functions (every reader starts with the same table), set once with
// the budgeted table that wraps them (RedisClient::connected()).
const redisReplyObjectFunctions* hiredis_functions = nullptr;

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

void* RedisClient::create_string(const redisReadTask* task, char* str, size_t len) {
  ReplyBudget& budget = static_cast<RedisClient*>(task->privdata)->budget_;
  if (len > budget.max_string || len > budget.bytes_left) {
    budget.exceeded = true;
    return nullptr;  // the reader stops with an error; nothing of this size is allocated
  }
  budget.bytes_left -= len;
  return hiredis_functions->createString(task, str, len);
}

void* RedisClient::create_array(const redisReadTask* task, int elements) {
  ReplyBudget& budget = static_cast<RedisClient*>(task->privdata)->budget_;
  if (elements < 0 || static_cast<size_t>(elements) > kMaxReplyElements) {
    budget.exceeded = true;
    return nullptr;
  }
  return hiredis_functions->createArray(task, elements);
}

Result<std::unique_ptr<RedisClient>> RedisClient::create(RemoteOptions options, Metrics* metrics) {
  Result<RemoteEndpoint> endpoint = parse_remote_url(options.url);
  if (!endpoint.is_ok()) return endpoint.status();
  if (options.connect_timeout_ms <= 0 || options.command_timeout_ms <= 0) {
    return invalid_argument("remote cache timeouts must be positive (milliseconds)");
  }
  if (options.max_value_bytes == 0) return invalid_argument("the remote cache's value limit must be positive");
  ignore_sigpipe_if_default();
  return std::unique_ptr<RedisClient>(new RedisClient(std::move(options), std::move(*endpoint), metrics));
}

RedisClient::RedisClient(RemoteOptions options, RemoteEndpoint endpoint, Metrics* metrics)
    : options_(std::move(options)), endpoint_(std::move(endpoint)), metrics_(metrics), backoff_(options_.backoff) {}

RedisClient::~RedisClient() {
  if (context_) redisFree(context_);
}

void RedisClient::drop_connection() {
  if (context_) {
    redisFree(context_);
    context_ = nullptr;
  }
}

Status RedisClient::fail(std::string what) {
  drop_connection();
  backoff_.failed(now());
  last_call_ = RemoteCall::kFailed;
  last_error_ = std::move(what);
  if (metrics_) metrics_->add(remote_metrics::kFailures);
  return io_error(fmt::format("remote cache '{}': {}", endpoint_.url, last_error_));
}

Status RedisClient::unexpected_reply(std::string_view command_name, int type) {
  last_call_ = RemoteCall::kDone;
  return corruption(fmt::format("remote cache '{}' answered {} with a reply of type {}", endpoint_.url, command_name,
                                reply_type_name(type)));
}

Status RedisClient::too_large_to_send(size_t bytes) {
  last_call_ = RemoteCall::kRefused;
  return resource_exhausted(fmt::format("a value of {} bytes is over the remote cache's {}-byte limit: not written",
                                        bytes, options_.max_value_bytes));
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
  // Every reply is read through the budgeted functions (the reader's defaults, wrapped).
  static redisReplyObjectFunctions budgeted = [defaults = context_->reader->fn] {
    hiredis_functions = defaults;
    redisReplyObjectFunctions f = *defaults;
    f.createString = &create_string;
    f.createArray = &create_array;
    return f;
  }();
  context_->reader->fn = &budgeted;
  context_->reader->privdata = this;
  if (endpoint_.db != 0) {
    const std::string db = std::to_string(endpoint_.db);
    Result<redisReply*> r = exchange({"SELECT", db});
    if (!r.is_ok()) return r.status().code() == StatusCode::kIOError ? r.status() : fail(r.status().message());
    const bool ok = (*r)->type == REDIS_REPLY_STATUS;
    std::string msg = (*r)->type == REDIS_REPLY_ERROR ? std::string((*r)->str, (*r)->len) : std::string();
    freeReplyObject(*r);
    if (!ok) return fail(fmt::format("SELECT {}: {}", db, msg));
  }
  return Status::ok();
}

Result<redisReply*> RedisClient::exchange(std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  const std::string_view name = *args.begin();
  auto io_failure = [&] {
    return fail(fmt::format("{} failed: {}", name, context_->errstr[0] ? context_->errstr : "no reply"));
  };
  if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
    return io_failure();
  }
  int written = 0;
  do {
    if (redisBufferWrite(context_, &written) != REDIS_OK) return io_failure();
  } while (!written);
  // As redisGetReply(), with the reply's size checked while it arrives: what is buffered but not
  // yet parsed counts against what is left, so an endless value is cut off at the limit.
  budget_ = {options_.max_value_bytes, options_.max_value_bytes + kReplyOverheadBytes, false};
  void* reply = nullptr;
  for (;;) {
    if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) {
      if (!budget_.exceeded) return io_failure();
      break;
    }
    if (reply) return static_cast<redisReply*>(reply);
    if (context_->reader->len - context_->reader->pos > budget_.bytes_left) break;
    if (redisBufferRead(context_) != REDIS_OK) return io_failure();
  }
  // Over the budget: the connection is mid-reply, so it goes; the next command reconnects.
  drop_connection();
  last_call_ = RemoteCall::kDone;
  return corruption(fmt::format("remote cache '{}': the reply to {} is over the limit ({} bytes a value, "
                                "{} elements an array): not read",
                                endpoint_.url, name, options_.max_value_bytes, kMaxReplyElements));
}

Result<RedisClient::Reply> RedisClient::command(std::initializer_list<std::string_view> args) {
  if (Status st = connected(); !st.is_ok()) return st;
  size_t sent = 0;
  for (std::string_view a : args) sent += a.size();
  const auto start = std::chrono::steady_clock::now();
  Result<redisReply*> r = exchange(args);
  if (metrics_) {
    metrics_->record_ms(remote_metrics::kTimer,
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    metrics_->add(remote_metrics::kBytesSent, static_cast<int64_t>(sent));
  }
  if (!r.is_ok()) return r.status();
  Reply out = convert(*r);
  freeReplyObject(*r);
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
  if (r->type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if (r->type != REDIS_REPLY_STRING) return unexpected_reply("GET", r->type);
  if (metrics_) metrics_->add(remote_metrics::kBytesRead, static_cast<int64_t>(r->str.size()));
  return std::optional<std::string>(std::move(r->str));
}

Result<bool> RedisClient::set_if_absent(std::string_view key, std::string_view value) {
  if (value.size() > options_.max_value_bytes) return too_large_to_send(value.size());
  const std::string ttl = std::to_string(options_.ttl_s);
  Result<Reply> r = options_.ttl_s > 0 ? command({"SET", key, value, "NX", "EX", ttl}) : command({"SET", key, value, "NX"});
  if (!r.is_ok()) return r.status();
  if (r->type == REDIS_REPLY_STATUS) return true;  // "OK"
  if (r->type == REDIS_REPLY_NIL) return false;    // the key existed
  return fail(fmt::format("SET answered with a reply of type {}", reply_type_name(r->type)));
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
  if (r->type == REDIS_REPLY_NIL) return out;
  if (r->type != REDIS_REPLY_ARRAY) return unexpected_reply("HGETALL", r->type);
  if (r->elements.size() % 2 != 0) return unexpected_reply("HGETALL", REDIS_REPLY_ARRAY);
  for (const Reply& e : r->elements) {
    if (e.type != REDIS_REPLY_STRING) return unexpected_reply("HGETALL (a field or value)", e.type);
  }
  out.reserve(r->elements.size() / 2);
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
    if (metrics_) metrics_->add(remote_metrics::kBytesRead, static_cast<int64_t>(r->elements[i + 1].str.size()));
    out.emplace_back(std::move(r->elements[i].str), std::move(r->elements[i + 1].str));
  }
  return out;
}

Result<bool> RedisClient::hash_set_if_absent(std::string_view key, std::string_view field, std::string_view value) {
  if (value.size() > options_.max_value_bytes) return too_large_to_send(value.size());
  Result<Reply> r = command({"HSETNX", key, field, value});
  if (!r.is_ok()) return r.status();
  if (r->type != REDIS_REPLY_INTEGER) return fail(fmt::format("HSETNX answered with a reply of type {}", reply_type_name(r->type)));
  const bool written = r->integer == 1;
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
    const bool well_formed = r->type == REDIS_REPLY_ARRAY && r->elements.size() == 2 &&
                             r->elements[0].type == REDIS_REPLY_STRING && r->elements[1].type == REDIS_REPLY_ARRAY &&
                             std::all_of(r->elements[1].elements.begin(), r->elements[1].elements.end(),
                                         [](const Reply& k) { return k.type == REDIS_REPLY_STRING; });
    if (!well_formed) return unexpected_reply("SCAN", r->type);
    cursor = r->elements[0].str;
    for (Reply& k : r->elements[1].elements) keys.push_back(std::move(k.str));
  } while (cursor != "0");
  return keys;
}

Result<int64_t> RedisClient::memory_usage(std::string_view key) {
  Result<Reply> r = command({"MEMORY", "USAGE", key});
  if (!r.is_ok()) return r.status();
  if (r->type == REDIS_REPLY_NIL) return 0;
  if (r->type != REDIS_REPLY_INTEGER) return unexpected_reply("MEMORY USAGE", r->type);
  return r->integer;
}

Result<std::string> RedisClient::type(std::string_view key) {
  Result<Reply> r = command({"TYPE", key});
  if (!r.is_ok()) return r.status();
  if (r->type != REDIS_REPLY_STATUS) return unexpected_reply("TYPE", r->type);
  return std::move(r->str);
}

Result<std::string> RedisClient::info(std::string_view section) {
  Result<Reply> r = command({"INFO", section});
  if (!r.is_ok()) return r.status();
  if (r->type != REDIS_REPLY_STRING) return unexpected_reply("INFO", r->type);
  return std::move(r->str);
}

}  // namespace tracecache::store
