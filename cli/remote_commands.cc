// `tracecache stats --remote URL` and `tracecache gc --remote URL`: the remote cache tier seen
// from the command line (docs/remote-cache.md). Both scan only tracecache's keys
// ("tracecache:*"), never the rest of a shared server.
#include <cstdint>
#include <string>
#include <string_view>

#include "cli/common.h"
#include "replay/audit/json.h"
#include "replay/compile/executable.h"
#include "store/core/blob_checksum.h"
#include "store/remote/remote_keys.h"

namespace tracecache::cli {

namespace {

// The value of "name:value" in an INFO reply; "" if absent.
std::string info_field(std::string_view info, std::string_view name) {
  const std::string needle = std::string(name) + ":";
  size_t at = 0;
  while ((at = info.find(needle, at)) != std::string_view::npos) {
    if (at == 0 || info[at - 1] == '\n') {
      size_t begin = at + needle.size();
      size_t end = info.find_first_of("\r\n", begin);
      return std::string(info.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    }
    at += needle.size();
  }
  return {};
}

Result<std::unique_ptr<store::RedisClient>> open_for_command(const CacheCommandOptions& options) {
  RemoteCliOptions remote = options.remote;
  remote.timeout_ms = 2000;  // an operator's command may wait longer than a run's lookups
  return open_remote(remote, nullptr);
}

}  // namespace

int remote_stats_command(const CacheCommandOptions& options) {
  Result<std::unique_ptr<store::RedisClient>> client = open_for_command(options);
  if (!client.is_ok()) return report_error(client.status());
  store::RedisClient& c = **client;
  Result<std::vector<std::string>> keys = c.scan(store::remote_any_version_pattern());
  if (!keys.is_ok()) return report_error(keys.status());
  int64_t executables = 0, graphs = 0, functions = 0, other_versions = 0;
  int64_t bytes = 0;
  for (const std::string& k : *keys) {
    const std::string_view kind = store::remote_key_kind(k);
    if (kind == "exe") ++executables;
    else if (kind == "graph") ++graphs;
    else if (kind == "fn") ++functions;
    else ++other_versions;
    Result<int64_t> used = c.memory_usage(k);
    if (!used.is_ok()) return report_error(used.status());
    bytes += *used;
  }
  Result<std::string> info = c.info("memory");
  if (!info.is_ok()) return report_error(info.status());
  const std::string used_memory = info_field(*info, "used_memory");
  const std::string maxmemory = info_field(*info, "maxmemory");
  const std::string policy = info_field(*info, "maxmemory_policy");
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("remote").value(c.endpoint().url);
    j.key("key_prefix").value(store::remote_key_prefix());
    j.key("executables").value(executables);
    j.key("graphs").value(graphs);
    j.key("functions").value(functions);
    j.key("other_versions").value(other_versions);
    j.key("bytes").value(bytes);
    j.key("used_memory").value(used_memory);
    j.key("maxmemory").value(maxmemory);
    j.key("maxmemory_policy").value(policy);
    j.end_object();
    out(j.str() + "\n");
    return kExitOk;
  }
  out(fmt::format("remote cache {} (keys {}*)\n"
                  "  {} executables, {} graphs, {} compiled functions' guard entries; {} keys of other versions\n"
                  "  {} bytes in tracecache keys; server: used_memory {}, maxmemory {}, maxmemory-policy {}\n",
                  c.endpoint().url, store::remote_key_prefix(), executables, graphs, functions, other_versions, bytes,
                  used_memory, maxmemory, policy));
  if (maxmemory == "0" || policy != "allkeys-lru") {
    out("  note: set maxmemory and maxmemory-policy allkeys-lru on the server to bound it (docs/remote-cache.md)\n");
  }
  return kExitOk;
}

int remote_gc_command(const CacheCommandOptions& options) {
  Result<std::unique_ptr<store::RedisClient>> client = open_for_command(options);
  if (!client.is_ok()) return report_error(client.status());
  store::RedisClient& c = **client;
  if (c.read_only()) return report_error(invalid_argument("gc --remote deletes entries: it cannot run read-only"));
  Result<std::vector<std::string>> keys = c.scan(store::remote_any_version_pattern());
  if (!keys.is_ok()) return report_error(keys.status());
  int64_t other_versions = 0, bad_values = 0, bad_entries = 0, kept = 0;
  for (const std::string& k : *keys) {
    const std::string_view kind = store::remote_key_kind(k);
    bool remove = kind.empty();
    // A value the client will not read (over its size limit, of the wrong type) is a bad value.
    if (kind == "fn") {
      Result<std::vector<std::pair<std::string, std::string>>> fields = c.hash_get_all(k);
      if (!fields.is_ok() && fields.status().code() == StatusCode::kCorruption) {
        remove = true;
        ++bad_values;
        fields = std::vector<std::pair<std::string, std::string>>();
      }
      if (!fields.is_ok()) return report_error(fields.status());
      for (const auto& [field, value] : *fields) {
        if (store::unseal_blob(value).is_ok()) continue;
        if (Status st = c.hash_del(k, field); !st.is_ok()) return report_error(st);
        ++bad_entries;
      }
    } else if (!remove) {
      Result<std::optional<std::string>> value = c.get(k);
      if (!value.is_ok() && value.status().code() != StatusCode::kCorruption) return report_error(value.status());
      if (!value.is_ok()) {
        remove = true;
      } else if (!value->has_value()) {
        remove = true;  // a key of ours holding another type
      } else {
        Result<std::string_view> blob = store::unseal_blob(**value);
        remove = !blob.is_ok() || (kind == "exe" && !parse_executable(*blob).is_ok());
      }
      if (remove) ++bad_values;
    } else {
      ++other_versions;
    }
    if (remove) {
      if (Status st = c.del(k); !st.is_ok()) return report_error(st);
    } else {
      ++kept;
    }
  }
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("remote").value(c.endpoint().url);
    j.key("other_versions_removed").value(other_versions);
    j.key("bad_values_removed").value(bad_values);
    j.key("bad_guard_entries_removed").value(bad_entries);
    j.key("kept").value(kept);
    j.end_object();
    out(j.str() + "\n");
    return kExitOk;
  }
  out(fmt::format("remote cache {}: {} keys of other versions and {} bad values removed, {} bad guard entries "
                  "removed; {} keys kept\n",
                  c.endpoint().url, other_versions, bad_values, bad_entries, kept));
  return kExitOk;
}

}  // namespace tracecache::cli
