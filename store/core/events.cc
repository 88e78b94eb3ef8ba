#include "store/core/events.h"

#include <iterator>
#include <utility>

#include <fmt/format.h>

namespace tracecache::store {

std::string_view miss_reason_name(MissReason r) {
  switch (r) {
    case MissReason::kNewGraph: return "new graph";
    case MissReason::kEvicted: return "evicted";
    case MissReason::kCorrupt: return "corrupt";
    case MissReason::kStaleCompiler: return "stale compiler version";
    case MissReason::kUnreadable: return "cache unreadable";
    case MissReason::kNewOptions: return "new backend options";
  }
  return "unknown";
}

namespace {

constexpr std::string_view kHitPrefix = "hit_";

// Every kind but kHit, whose name is made from its tier.
constexpr std::pair<EventKind, std::string_view> kEventKindNames[] = {
    {EventKind::kMiss, "miss"},         {EventKind::kCompile, "compile"},
    {EventKind::kStore, "store"},       {EventKind::kEvict, "evict"},
    {EventKind::kCorrupt, "corrupt"},   {EventKind::kStoreFailed, "store_failed"},
    {EventKind::kRecompile, "recompile"}, {EventKind::kFallback, "fallback"},
    {EventKind::kUnavailable, "unavailable"}, {EventKind::kSkip, "skip"},
    {EventKind::kGraphBreak, "graph_break"},
};
static_assert(std::size(kEventKindNames) == static_cast<size_t>(EventKind::kGraphBreak),
              "every EventKind but kHit has a name");

bool is_tier_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < 'a' || c > 'z') return false;
  }
  return true;
}

}  // namespace

std::string event_name(EventKind kind, std::string_view tier) {
  if (kind == EventKind::kHit) return std::string(kHitPrefix) + std::string(tier);
  for (const auto& [k, name] : kEventKindNames) {
    if (k == kind) return tier.empty() ? std::string(name) : fmt::format("{}_{}", name, tier);
  }
  return "unknown";
}

std::optional<ParsedEventName> parse_event_name(std::string_view name) {
  if (name.starts_with(kHitPrefix)) {
    std::string_view tier = name.substr(kHitPrefix.size());
    if (!is_tier_name(tier)) return std::nullopt;
    return ParsedEventName{EventKind::kHit, std::string(tier)};
  }
  for (const auto& [kind, kind_name] : kEventKindNames) {
    if (kind_name == name) return ParsedEventName{kind, {}};
  }
  // "<kind>_<tier>": the longest kind name that prefixes it ("store_failed_remote" is
  // store_failed's, not store's with tier "failed_remote", which is no tier name anyway).
  for (const auto& [kind, kind_name] : kEventKindNames) {
    if (name.size() > kind_name.size() + 1 && name.starts_with(kind_name) && name[kind_name.size()] == '_') {
      std::string_view tier = name.substr(kind_name.size() + 1);
      if (is_tier_name(tier)) return ParsedEventName{kind, std::string(tier)};
    }
  }
  return std::nullopt;
}

}  // namespace tracecache::store
