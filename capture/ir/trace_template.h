// A trace template: the op stream a traced function issued, kept so that it can be replayed at
// other input sizes without calling the function again (shape-polymorphic trace once).
//
// While LazyOptions::capture points at a TraceTemplate, the LazyContext mirrors its trace into
// `graph` with every op's attributes exactly as the code passed them, before the inference rule
// normalized them (a reshape keeps its -1, a slice its open end), and notes:
//  - `sym_attrs`: attribute elements that the code declared equal to a size of another value
//    (LazyContext::record with AttrBinding), e.g. reshape(shape=[B, 1]) with B bound to dim 0 of
//    input x: instantiated at a new size, the element takes that value's new size;
//  - `observed`: the shapes the code read (Tensor::shape(), numel()). The code's choices may
//    depend on them, so an instantiation is valid only where every observed shape comes out
//    unchanged. A shape read of a materialized tensor is kept by data identity in
//    `observed_data` for the caller to resolve (an input's shape read means its sizes matter).
//
// Soundness: the traced code sees only types (guarded by the caller except for the sizes made
// dynamic), the attributes it passes, and the shapes it reads. When every read shape is the
// same at the new sizes, the code would issue the same ops with the same raw attributes, so
// re-running each op's inference rule on them (instantiate()) yields exactly the graph a fresh
// trace would. Value reads are not covered: a template with more than one barrier (`barriers`
// > 1) or whose trace was abandoned unmaterialized is not `usable`.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/core/device_data.h"
#include "capture/ir/graph.h"
#include "capture/core/status.h"

namespace tracecache {

// Attribute `attr` of a node (element `element` of an int list, or -1 for an int or float
// attribute) equals the size of dim `dim` of node `source`.
struct SymAttr {
  NodeId node = 0;
  uint32_t attr = 0;
  int32_t element = -1;
  NodeId source = 0;
  uint32_t dim = 0;
  friend bool operator==(const SymAttr&, const SymAttr&) = default;
};

struct ShapeObservation {
  NodeId node = 0;
  Shape shape;
  friend bool operator==(const ShapeObservation&, const ShapeObservation&) = default;
};

struct TraceTemplate {
  Graph graph;                     // raw attributes; types as inferred when recorded
  std::vector<SymAttr> sym_attrs;  // in recording order (non-decreasing node)
  std::vector<ShapeObservation> observed;
  std::vector<NodeId> roots;       // the barrier's roots, in order
  // Capture only (not part of a stored template):
  std::vector<DataRef> param_data;  // parameter p's data
  std::vector<std::pair<const void*, Shape>> observed_data;  // DeviceData::identity()
  int barriers = 0;
  bool usable = true;
  std::string unusable_reason;

  void mark_unusable(std::string why) {
    if (usable) unusable_reason = std::move(why);
    usable = false;
  }
};

// The concrete graph `tmpl` stands for when its parameters have types `params` (one per
// graph parameter): every op re-inferred from its raw attributes with bound elements
// substituted, outputs = roots. Fails (kInvalidArgument, saying what) when an op no longer
// accepts its operands or an observed shape differs.
Result<Graph> instantiate(const TraceTemplate& tmpl, std::span<const TensorType> params);

}  // namespace tracecache
