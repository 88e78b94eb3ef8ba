// Shape specialization of compiled-function entries (dynamic dims; replay/engine/compiled_function.h):
// which dims a new entry makes dynamic (marked ones, and with automatic_dynamic those whose
// size alone failed the closest entry), how a trace becomes a shape-polymorphic plan (its trace
// template, capture/ir/trace_template.h), and how a plan is instantiated at a call's sizes
// without calling the traced function, compiled through a caller-given PrepareExecutable (the
// Runtime's prepare, passed by replay/engine/compiled_function.cc) and kept per size.
// Thread-compatible (a plan is mutated by specialize). Errors: Status from that prepare; a
// template that does not apply at the new sizes is a value (`why`), not an error.
// Ownership: a plan owns its template and specializations; executables are shared.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/core/metrics.h"
#include "capture/core/status.h"
#include "capture/ir/canonical.h"
#include "capture/ir/trace_template.h"
#include "replay/compile/executable.h"
#include "replay/guards/guard_entry.h"

namespace tracecache {

// An entry's graph at one assignment of its dynamic dims.
struct Specialization {
  std::vector<int64_t> sizes;  // one per DynamicPlan::dims
  Segment segment;
};

// What makes an entry shape-polymorphic: its trace template and how to fill it.
struct DynamicPlan {
  TraceTemplate tmpl;                 // graph, sym_attrs, observed, roots
  std::vector<ValueSource> params;    // one per template parameter (inputs, dynamic scalars)
  std::vector<DynamicDim> dims;
  std::vector<Specialization> specs;  // most recently made last, at most kMaxSpecializations
};
inline constexpr size_t kMaxSpecializations = 32;

// The dims the next entry makes dynamic: `marked`, and when `automatic` and the closest entry
// failed on sizes only (`closest_failed`, its failed checks), those dims and the closest entry's
// own dynamic dims (`closest_dynamic`, null for a static entry). Dims that `args` lacks are
// skipped; each dim once, in that order.
std::vector<DynamicDim> dims_to_make_dynamic(const CallArgs& args, std::span<const DynamicDim> marked, bool automatic,
                                             std::span<const GuardCheck> closest_failed,
                                             const DynamicPlan* closest_dynamic);

// A trace, as seen by make_dynamic: where each buffer it touched came from, and its segments.
struct TraceRecord {
  std::unordered_map<const void*, ValueSource> origin;  // DeviceData::identity(), this trace only
  std::vector<Segment> segments;
  size_t segments_inside_fn = 0;  // segments that ended while the function ran (value reads)
  std::vector<HostOp> host_ops;   // graph breaks, in the order they ran
  bool read_values = false;       // the function read a value into the host
};

// Makes `entry` shape-polymorphic in `dims` from the template of its trace, if the trace allows
// it (one graph, no value read, no host op, every parameter an argument); the dims of an input whose shape
// the function read stay static. Takes the trace's segment when it succeeds. Returns a note for
// the recompile reason ("dynamic: input 0 'x' dim 0", "dims stay static: ...", or "").
std::string make_dynamic(GuardEntry& entry, TraceTemplate& tmpl, TraceRecord& trace, std::vector<DynamicDim> dims,
                         const CallArgs& args, const GuardEnvironment& env);

// The outcome of specialize: the segment for the call's sizes, or null with `why` when the
// template does not apply at them; `made` when it was instantiated by this call.
struct Specialized {
  Segment* segment = nullptr;
  bool made = false;
  std::string why;
};

// The executable of a canonical graph, compiled or served by the graph cache (the Runtime's
// prepare); its error is specialize's error.
using PrepareExecutable = std::function<Result<std::shared_ptr<const Executable>>(const CanonicalGraph&)>;

// The segment of `plan` for this call's sizes: kept from before, or instantiated from the
// template now (no trace), canonicalized with `canonicalize` (timed into `metrics`), made
// executable by `prepare` and kept (the oldest dropped past kMaxSpecializations). REQUIRES: the
// entry's guards hold for `args`.
Result<Specialized> specialize(DynamicPlan& plan, const CallArgs& args, const PrepareExecutable& prepare,
                               Metrics& metrics, const CanonicalizeOptions& canonicalize);

}  // namespace tracecache
