// KeptPrimitives<P>: the oneDNN state the cpu backend keeps per (graph key, node) across runs
// (a primitive, its memories, kept reordered weights: a `P`), with the one engine and stream it
// runs on, and the one rule every oneDNN kernel (onednn_conv.cc, onednn_matmul.cc) follows:
//
//   run(key, node, fits, make, use):
//     bind the process's thread count on the calling thread (cpu_threads.h);
//     find the kept P of (key, node); make it again (make(engine)) when there is none, when it
//       was made for another thread count (oneDNN sizes its scratchpad and splits its work for
//       the count it was made with) or when fits(p) is false (other shapes);
//     use(p, stream): set the data handles, execute, wait.
//
// Errors: oneDNN reports them as dnnl::error and allocation failures as std::bad_alloc, from any
// of the three steps; run() catches both, forgets (key, node) (so a half-made P is never used
// again) and returns false, and the caller runs the builtin kernel. Nothing else is caught.
// Ownership: the kept Ps are owned here until clear(), a failure of theirs, or destruction.
// Thread-safety: one thread at a time (the owning kernel object's rule).
// REQUIRES of P: an `int threads` member (the count it was made for; set by run()).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <utility>

#include "replay/backends/cpu/cpu_threads.h"
#include "capture/ir/graph.h"
#include "capture/ir/hash.h"

namespace tracecache::cpu {

template <typename P>
class KeptPrimitives {
 public:
  // Returns true when use() ran to its end, false (nothing of (key, node) kept) when oneDNN
  // threw or an allocation failed. fits(const P&) -> bool; make(const dnnl::engine&) ->
  // std::unique_ptr<P>; use(P&, dnnl::stream&).
  template <typename Fits, typename Make, typename Use>
  bool run(const GraphKey& key, NodeId node, Fits&& fits, Make&& make, Use&& use) {
    try {
      if (!engine_) {
        engine_.emplace(dnnl::engine::kind::cpu, 0);
        stream_.emplace(*engine_);
      }
      const int threads = cpu::threads();
      bind_threads();
      std::unique_ptr<P>& slot = kept_[{key, node}];
      if (!slot || slot->threads != threads || !fits(*slot)) {
        slot.reset();  // its memory goes before the new one's comes
        slot = make(*engine_);
        slot->threads = threads;
      }
      use(*slot, *stream_);
      return true;
    } catch (const dnnl::error&) {
      kept_.erase({key, node});
    } catch (const std::bad_alloc&) {
      kept_.erase({key, node});
    }
    return false;
  }

  size_t size() const { return kept_.size(); }
  void clear() { kept_.clear(); }

 private:
  std::optional<dnnl::engine> engine_;
  std::optional<dnnl::stream> stream_;
  std::map<std::pair<GraphKey, NodeId>, std::unique_ptr<P>> kept_;
};

}  // namespace tracecache::cpu
