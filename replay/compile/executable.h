// Executable: a canonical graph compiled for one backend. Holds code, never data (docs/architecture.md
// invariant 7): the graph's ops and attributes and the backend's lowering of them. Weights and
// every other tensor arrive as parameters at run time, so one executable serves every value.
//
// Structure: a header every backend's executables share, and a payload the backend owns.
//  - header (ExecutableHeader): `graph_key`, `backend`, `options_digest`, `compiler_version`
//    (together the cache key) and `graph`, the canonical graph itself (its hash must equal
//    `graph_key`; checked on load).
//  - payload: today always a KernelPlan, the compiler's plan (replay/compile/compiler.h) that `cpu` and
//    `sim` both run; a backend with another lowering adds its payload type to the variant.
//
// KernelPlan:
//  - `slots[n]` for every node n: where its value lives while the executable runs:
//      kParam   the caller's parameter buffer `index`;
//      kArena   bytes [offset, offset + nbytes) of the run's scratch arena;
//      kOutput  a fresh buffer handed back as output value `index` (first output naming n);
//      kFused   never materialized: computed inside a fused kernel;
//      kDonated like kOutput (output value `index`), but the graph donates that output to a
//               parameter (graph.h, Donation), so the backend may write it into the
//               parameter's storage: the two have the same type, the parameter is not itself
//               an output, and no kernel reads the parameter after the one computing this
//               output, which reads it, if at all, only elementwise (a kFused kernel).
//  - `kernels`: the schedule, run in order. A kOp kernel computes node `root` from its graph
//    inputs. A kFused kernel computes `root` from the chain `members` (elementwise nodes, in
//    topological order, ending with root): members other than root are kFused slots, and every
//    input of a member that is not a member is read from its slot (a "leaf"). `library` says
//    who computes a kernel: kOneDnn for a kOp f32 conv2d, conv2d_input_grad, conv2d_weight_grad,
//    matmul or linear, or for a kFused convolution epilogue
//    (members: the f32 conv2d, then optionally a batch_norm whose input x it is, then an
//    elementwise chain reading only the last of those two, ending at root; the conv2d and
//    batch_norm are kFused slots unless root); kBuiltin for everything else.
//  - `arena_bytes`: the peak of the liveness-based plan (slots reuse freed ranges).
//  - `lowered`: when set, the plan is of widen_storage_types(graph) (replay/compile/widen.h), not
//    of the graph itself: slots and kernels name that graph's nodes. Only the flag widened() is
//    stored; the compiler and parse_executable make the rewritten graph.
//
// validate() checks all of the above for an executable read from the cache (invariant 5): node
// types re-inferred, graph hash, slot bounds and sizes, schedule order, members elementwise and
// single-use, convolution epilogues well formed, donated slots safe to write in place (above; a
// oneDNN epilogue's conv2d and batch_norm read whole, not elementwise), and that no two arena slots that
// are live at the same time overlap. An executable that passes cannot read or write out of bounds nor compute anything but its graph.
// Errors: Executable::validate(), KernelPlan::validate() and parse_executable() return
// kCorruption naming the first failed check; serialize_executable() and footprint_bytes()
// cannot fail. Compiling is replay/compile/compiler.h's.
// Thread-safety: immutable after construction; share freely as shared_ptr<const Executable>.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "capture/ir/graph.h"
#include "capture/ir/hash.h"
#include "capture/core/status.h"

namespace tracecache {

struct Slot {
  enum class Kind : uint8_t { kParam = 0, kArena = 1, kOutput = 2, kFused = 3, kDonated = 4 };
  Kind kind = Kind::kArena;
  uint32_t index = 0;   // kParam: parameter index; kOutput, kDonated: output index
  uint64_t offset = 0;  // kArena
  uint64_t nbytes = 0;  // kArena, kOutput, kDonated: numel * dtype size
  friend bool operator==(const Slot&, const Slot&) = default;
};

struct Kernel {
  enum class Kind : uint8_t { kOp = 0, kFused = 1 };
  // Who computes a kernel: the backend's own kernels, or oneDNN's primitive (an f32 conv2d, as
  // a kOp kernel or at the head of a kFused convolution epilogue, CompileOptions::onednn_conv;
  // an f32 matmul or linear as a kOp kernel, CompileOptions::onednn_matmul; an f32
  // conv2d_input_grad or conv2d_weight_grad as a kOp kernel, CompileOptions::onednn_conv_grad).
  // Chosen when compiling, so an executable runs the same code wherever it is loaded.
  enum class Library : uint8_t { kBuiltin = 0, kOneDnn = 1 };
  Kind kind = Kind::kOp;
  NodeId root = 0;
  std::vector<NodeId> members;  // kFused only; ends with root
  Library library = Library::kBuiltin;
  friend bool operator==(const Kernel&, const Kernel&) = default;
};

// The compiler's slots, schedule and arena size: the payload of cpu and sim executables.
struct KernelPlan {
  std::vector<Slot> slots;  // one per graph node
  std::vector<Kernel> kernels;
  uint64_t arena_bytes = 0;
  std::shared_ptr<const Graph> lowered;  // widen_storage_types(graph), or null

  bool widened() const { return lowered != nullptr; }

  // The graph the kernels run: `lowered` when widened, else `graph`.
  const Graph& run_graph(const Graph& graph) const { return lowered ? *lowered : graph; }

  // The plan's part of Executable::validate() for `graph`. kCorruption with what failed.
  Status validate(const Graph& graph) const;
  // Approximate in-memory size of the slots and kernels.
  uint64_t footprint_bytes() const;
};

// What every executable has, whatever its backend.
struct ExecutableHeader {
  GraphKey graph_key;
  std::string backend;
  std::string options_digest;
  uint32_t compiler_version = 0;
  Graph graph;
};

struct Executable : ExecutableHeader {
  std::variant<KernelPlan> payload;

  // The graph the backend runs: the payload's lowered graph when it has one, else `graph`.
  const Graph& run_graph() const {
    const KernelPlan* plan = kernel_plan();
    return plan ? plan->run_graph(graph) : graph;
  }

  // The payload when it is a KernelPlan, else null.
  const KernelPlan* kernel_plan() const { return std::get_if<KernelPlan>(&payload); }
  KernelPlan* kernel_plan() { return std::get_if<KernelPlan>(&payload); }

  // Full structural check; see the header comment. kCorruption with what failed.
  Status validate() const;
  // Approximate in-memory size, for the LRU's byte budget.
  uint64_t footprint_bytes() const;
};

// Deterministic protobuf encoding (store/codec/proto/tracecache.proto) of an executable whose
// payload is a KernelPlan: equal executables give equal bytes. parse_executable() validates
// before returning; any failure is kCorruption.
std::string serialize_executable(const Executable& exe);
Result<Executable> parse_executable(std::string_view bytes);

}  // namespace tracecache
