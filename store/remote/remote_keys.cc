#include "store/remote/remote_keys.h"

#include <fmt/format.h>

#include "store/sqlite/cache_db.h"

namespace tracecache::store {

namespace {

std::string encoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == ':' || c == '%' || c == '*' || c == '?' || c == '[' || static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string remote_key_prefix() { return fmt::format("tracecache:s{}:ir{}:", kSchemaVersion, kIrFormatVersion); }

std::string remote_executable_key(const ExecutableKey& key) {
  return fmt::format("{}exe:{}:{}:{}:c{}", remote_key_prefix(), key.graph.to_hex(), encoded(key.backend),
                     encoded(key.options_digest), key.compiler_version);
}

std::string remote_graph_key(const GraphKey& key) { return fmt::format("{}graph:{}", remote_key_prefix(), key.to_hex()); }

std::string remote_function_key(const FunctionKey& key) {
  return fmt::format("{}fn:{}:{}:{}", remote_key_prefix(), encoded(key.toolkit_version), encoded(key.name),
                     encoded(key.user_version));
}

std::string remote_key_pattern() { return remote_key_prefix() + "*"; }
std::string remote_any_version_pattern() { return "tracecache:*"; }

std::string_view remote_key_kind(std::string_view key) {
  const std::string prefix = remote_key_prefix();
  if (!key.starts_with(prefix)) return {};
  key.remove_prefix(prefix.size());
  for (std::string_view kind : {"exe", "graph", "fn"}) {
    if (key.starts_with(kind) && key.size() > kind.size() && key[kind.size()] == ':') return kind;
  }
  return {};
}

}  // namespace tracecache::store
