// The guard-entry codec: a GuardEntry (guard_entry.h) as the bytes of a row of the cache's
// functions table (protobuf proto::GuardEntry, store/codec/proto/tracecache.proto; format
// kGuardEntryFormat below, part of the toolkit version, replay/engine/toolkit_version.h), and back.
//
// Stored bytes are untrusted (docs/architecture.md invariant 5). decode_guard_entry proves,
// before returning an entry, that evaluating its guards and routing its values can never index
// out of range, and that what it promises is consistent with what it guards: every count
// bounded before it sizes anything; the counts first, then the options, then for every tensor
// a dtype, a rank and a size (or range) for each dim; every index and route in range; one
// recorded type per output, equal to the guarded type of an input it returns, to the
// template's root type (dynamic), or to a constant's type; each updated argument and each
// output replacing one at most once, in a static entry, the output of the argument's guarded
// type; host ops (graph breaks) in order, each reading only values computed before it, with
// bounded payloads and result types whose element counts do not overflow, their value guards on
// results they have; value guards on arguments that exist. What depends on the executables (the
// routes into segment outputs) is proven by check_segment when each one is fetched.
// Thread-safety: all functions are pure (thread-safe). Errors: kCorruption naming what failed.
// Ownership: nothing is kept from the arguments. A decoded entry owns what it holds (its
// constants and dynamic plan are made anew, its segments' executables are null until fetched);
// check_segment only reads the executable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "capture/core/status.h"
#include "replay/compile/executable.h"
#include "replay/guards/guard_entry.h"

namespace tracecache {

// The format of a serialized guard entry; a change to what encode_guard_entry writes bumps it.
// 3: output types recorded; 4: the arguments updated in place (donation); 5: the caller's note;
// 6: host ops (graph breaks) and value guards on what the traced function read (its arguments,
// a host op's results) instead of on every value materialized while it ran
inline constexpr uint32_t kGuardEntryFormat = 6;

// The largest payload or description of a host op (HostOp, guard_entry.h); a stored entry with a
// longer one is corrupt, and a trace that asks for one fails.
inline constexpr size_t kMaxHostOpPayloadBytes = size_t{1} << 16;

// The largest note (GuardEntry::note) an entry may carry; a stored entry with a longer one is
// corrupt, and a trace whose note is longer fails.
inline constexpr size_t kMaxGuardEntryNoteBytes = size_t{1} << 20;

// Deterministic bytes of `e` (its guards, segments, routes, output types, argument updates and
// dynamic plan; not
// its executables or per-process counters).
std::string encode_guard_entry(const GuardEntry& e);

// The entry stored as `bytes`, with no executables fetched; kCorruption if any check above
// fails.
Result<GuardEntry> decode_guard_entry(const std::string& bytes);

// Checks that segment `k` of a static entry fits `exe`, its executable fetched from the cache:
// one parameter per graph parameter, value guards and every route into its outputs in range,
// and each entry output it provides of the type the entry recorded. kCorruption otherwise.
// REQUIRES: `e` decoded (or built by a trace), k < e.segments.size().
Status check_segment(const GuardEntry& e, size_t k, const Executable& exe);

// decode_guard_entry without the entry: OK if a CompiledFunction may use the stored entry
// (its routes are still checked against each executable when that is fetched). For tools and
// the fuzz harness (fuzz/fuzz_guard_entry.cc).
Status validate_guard_entry(const std::string& bytes);

}  // namespace tracecache
