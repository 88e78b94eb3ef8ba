#include "store/remote/remote_url.h"

#include <charconv>

#include <fmt/format.h>

namespace tracecache::store {

namespace {

constexpr std::string_view kExpected = "expected redis://HOST:PORT[/DB] or unix:///PATH.sock";

// A whole decimal number in [lo, hi].
bool parse_number(std::string_view text, int lo, int hi, int* out) {
  if (text.empty()) return false;
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

Status bad(std::string_view url, std::string_view what) {
  return invalid_argument(fmt::format("remote cache URL '{}': {} ({})", url, what, kExpected));
}

}  // namespace

Result<RemoteEndpoint> parse_remote_url(std::string_view url) {
  RemoteEndpoint e;
  e.url = std::string(url);
  if (url.starts_with("unix://")) {
    std::string_view path = url.substr(7);
    if (!path.starts_with('/') || path.size() < 2) return bad(url, "the socket path must be absolute");
    e.unix_socket = true;
    e.path = std::string(path);
    return e;
  }
  if (!url.starts_with("redis://")) return bad(url, "unknown scheme");
  std::string_view rest = url.substr(8);
  if (rest.find('@') != std::string_view::npos) return bad(url, "credentials are not supported");
  std::string_view authority = rest;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !parse_number(db, 0, 65535, &e.db)) return bad(url, fmt::format("database '{}' is not a number", db));
  }
  std::string_view host = authority;
  if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    std::string_view port = authority.substr(colon + 1);
    if (!parse_number(port, 1, 65535, &e.port)) return bad(url, fmt::format("port '{}' is not in 1-65535", port));
  }
  if (host.empty()) return bad(url, "no host");
  if (host.find_first_of(":[]") != std::string_view::npos) return bad(url, fmt::format("host '{}' is not a name or IPv4 address", host));
  e.host = std::string(host);
  return e;
}

}  // namespace tracecache::store
