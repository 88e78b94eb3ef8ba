// GuardEntry: one traced specialization of a compiled function (replay/engine/compiled_function.h):
// the guards under which it may replay, the graphs it runs (segments: one per value read inside
// the traced function, or a shape-polymorphic plan), the host ops between them (graph breaks:
// ops the caller runs on its own framework), where every graph parameter and output comes from
// at replay time, the values the traced function read (value guards), the outputs' recorded types, and the arguments it updates in place
// (donation). Entries persist through
// guard_entry_codec.h; an entry decoded from stored bytes is untrusted until that codec's
// checks passed.
// Errors: none here: an entry is plain data and value_hash cannot fail. Checking one read from
// the cache is the codec's (kCorruption, guard_entry_codec.h).
// Thread-compatible plain data. Ownership: executables and constants are shared with the
// runtime's caches (shared_ptr), so eviction never frees one in use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "capture/core/buffer.h"
#include "capture/ir/hash.h"
#include "replay/compile/executable.h"
#include "replay/guards/call_args.h"
#include "replay/guards/guard_set.h"

namespace tracecache {

// Where a value used by a guard entry comes from at replay time.
struct ValueSource {
  enum class Kind : uint8_t { kInput, kDynamicScalar, kSegmentOutput, kConstant, kHostOutput };
  Kind kind = Kind::kInput;
  uint32_t a = 0;      // input / scalar / segment / host op index
  uint32_t b = 0;      // segment or host op output index
  DataRef constant;  // kConstant: a lifted scalar, made once
};

// A segment: one graph executed between two value reads or graph breaks of the traced function.
struct Segment {
  GraphKey key;
  std::shared_ptr<const Executable> exe;  // null until first use for an entry loaded from disk
  std::vector<ValueSource> params;
  // Contents of outputs that `fn` read into the host (a value read: Tensor::buffer(), item(),
  // to_vector()): output index -> value_hash of the output.
  std::vector<std::pair<uint32_t, XXH128_hash_t>> value_guards;
  // The values those guards were taken from, as read when traced ("[1, 2]"; one per value guard),
  // for recompile reasons only: kept in this process, not stored (a loaded entry has none).
  std::vector<std::string> value_previews;
};

// A value the traced function read into the host (Tensor::buffer(), item(), to_vector()) that is
// known when the call starts: an argument or a dynamic scalar. Its contents are guarded before
// anything runs.
struct InputValueGuard {
  ValueSource source;  // kInput or kDynamicScalar
  XXH128_hash_t hash{};
  std::string preview;  // as read when traced, for recompile reasons; not stored
};

// A host op: a step of the traced function that the caller's framework runs instead of a graph
// (a graph break, CompiledFunctionOptions::host_op). It runs after segments [0, position) and
// before segment `position`, on its inputs' host bytes; its results feed later segments, host
// ops and outputs (ValueSource::kHostOutput). Its results' types are part of what the entry
// promises: a replay whose host op gives other types is not served by the entry (the call
// traces, as when a value guard fails), since later graphs were traced for those types.
struct HostOp {
  std::string payload;      // the caller's description of the op (opaque here, bounded)
  std::string description;  // for events and messages ("aten.cumsum.default at model.py:6")
  uint32_t position = 0;
  std::vector<ValueSource> inputs;
  std::vector<TensorType> output_types;
  // Results the traced function read: output index -> value_hash (as Segment::value_guards).
  std::vector<std::pair<uint32_t, XXH128_hash_t>> value_guards;
  std::vector<std::string> value_previews;  // not stored
};

struct DynamicPlan;  // replay/guards/shape_specialization.h

struct GuardEntry {
  GuardSet guards;
  std::shared_ptr<DynamicPlan> dynamic;  // null: a static entry (fixed segments)
  std::vector<Segment> segments;
  std::vector<HostOp> host_ops;  // in the order they run (non-decreasing position)
  std::vector<InputValueGuard> input_value_guards;
  std::vector<ValueSource> outputs;
  // One per output: its type when traced. A dynamic entry's sizes follow its dynamic dims.
  std::vector<TensorType> output_types;
  // The arguments this entry's graphs update in place (a donation in the last segment's graph):
  // a replay may give each one's storage to its run (CompiledFunctionOptions::updates).
  std::vector<ArgumentUpdate> updates;
  // What the caller attached when it traced this entry (CompiledFunctionOptions::entry_note),
  // returned by CompiledFunction::last_note() for every call the entry serves. Opaque bytes, at
  // most kMaxGuardEntryNoteBytes (guard_entry_codec.h).
  std::string note;
  // False for an entry loaded from the cache until its outputs were compared with
  // CompiledFunctionOptions::output_types (routes are the same for every call of an entry).
  bool outputs_verified = true;
  // How CompiledFunction replays the entry: decided once, after its first successful replay (its
  // executable is then at hand and its outputs verified, and nothing the decision reads changes
  // later; CompiledFunction::Impl::direct_replay_applies). Kept in this process, not stored.
  enum class ReplayPath : uint8_t { kUndecided, kGeneral, kDirect };
  ReplayPath replay_path = ReplayPath::kUndecided;
  int64_t db_index = -1;  // row in the functions table, -1 if not stored
  int64_t hits = 0;       // replays in this process
  int64_t unflushed_hits = 0;
};

// Hash of a value's dtype, shape and bytes (XXH3-128), for value guards. Allocates nothing.
XXH128_hash_t value_hash(const HostBuffer& b);

}  // namespace tracecache
