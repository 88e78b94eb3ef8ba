// The audit log's vocabulary: what a cache decision event says (docs/architecture.md invariant 8),
// why a lookup missed, and hit counts per executable key and tier.
//
// A hit names the tier that served it (Event::tier: "memory", "disk", "remote"). Its stored and
// printed name is "hit_<tier>" ("hit_memory", "hit_disk"), the names the events and hit_counts
// tables have always held. Other events are about the lookup as a whole (no tier: "miss",
// "store") unless they name one tier: the remote tier's own misses, writes, failures and skips
// ("miss_remote", "store_remote", "unavailable_remote", "skip_remote"): "<kind>_<tier>".
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "capture/ir/hash.h"

namespace tracecache::store {

// The tiers' names, as hits and evictions carry them.
inline constexpr std::string_view kMemoryTier = "memory";  // the in-process LRU
inline constexpr std::string_view kDiskTier = "disk";      // the SQLite database
inline constexpr std::string_view kRemoteTier = "remote";  // the shared Redis server

// Why a lookup missed, as recorded in `miss` events.
enum class MissReason : uint8_t {
  kNewGraph,        // no executable for this graph, backend and options ever stored
  kEvicted,         // it was stored once, then evicted (gc) or removed
  kCorrupt,         // it was stored but failed verification when loaded
  kStaleCompiler,   // only executables from other compiler versions exist
  kUnreadable,      // the database could not be read (busy, I/O error): it may hold the entry
  kNewOptions,      // this graph and backend were stored, but only with other backend options
                    // (e.g. another sim device spec)
};
// "new graph", "evicted", "corrupt", "stale compiler version", "cache unreadable",
// "new backend options".
std::string_view miss_reason_name(MissReason r);

enum class EventKind : uint8_t {
  kHit,          // a tier served the executable; Event::tier / HitCount::tier says which
  kMiss,         // reason in `reason`
  kCompile,      // duration_ms = compile time
  kStore,        // an executable was written
  kEvict,        // removed by gc or by the LRU's capacity (detail says which)
  kCorrupt,      // failed verification; detail says how
  kStoreFailed,  // a write failed (locked, read-only, disk full); detail has the error
  kRecompile,    // a compiled function traced again: reason = function name, detail = failed guards
  kFallback,     // a step ran on the reference evaluator (reason: compile failed, run failed,
                 // exception), or a compiled function hit its recompile limit (reason: its name)
  kUnavailable,  // a tier could not be reached or did not answer in time (remote); detail says why
  kSkip,         // a tier was not asked: backing off after a failure, or read-only (detail)
  kGraphBreak,   // a compiled function's trace handed an op to the host framework (reason: its
                 // name, detail: the call and the op, "call 0: aten.cumsum.default at m.py:6")
};

// The name an event is stored and printed under: "hit_<tier>" for kHit ("hit_memory",
// "hit_disk"), else "miss", "compile", "store", "evict", "corrupt", "store_failed", "recompile",
// "fallback", "unavailable", "skip", "graph_break", followed by "_<tier>" when the event names a tier
// ("miss_remote"). REQUIRES: `tier` is a tier name (lowercase letters) for kHit.
std::string event_name(EventKind kind, std::string_view tier = {});
struct ParsedEventName {
  EventKind kind;
  std::string tier;  // kHit: the tier; else the tier the event names, or empty
  friend bool operator==(const ParsedEventName&, const ParsedEventName&) = default;
};
// The inverse of event_name(); nullopt for a name no event has ("hit", "hit_", "MISS", "").
std::optional<ParsedEventName> parse_event_name(std::string_view name);

struct Event {
  int64_t id = 0;        // assigned by the database; ignored on append
  double time = 0;       // seconds since the Unix epoch
  int64_t pid = 0;
  EventKind kind = EventKind::kMiss;
  std::string tier;      // kHit: the tier that served it (kMemoryTier, kDiskTier, kRemoteTier); else
                         // the one tier the event is about (kRemoteTier), or empty
  GraphKey graph;
  std::string backend;
  std::string options_digest;  // the backend's options digest (part of the executable key)
  std::string reason;    // kMiss: miss_reason_name(...)
  double duration_ms = 0;
  std::string detail;    // kMiss: what differs from the closest cached graph, when one was found
  // The scope the decision belongs to: the program or model that ran (a trace file's name, a zoo
  // model) and the compiled function (once mode); "" when unknown. For filtering, never parsed.
  std::string program;
  std::string function;
};

// Hits are counted, not logged one row each (invariant 8): the runtime adds these counts.
struct HitCount {
  GraphKey graph;
  std::string backend;
  std::string options_digest;
  std::string tier;  // the tier that served the hits (kMemoryTier, kDiskTier)
  int64_t hits = 0;
  double time = 0;   // of the latest hit counted
};

}  // namespace tracecache::store
