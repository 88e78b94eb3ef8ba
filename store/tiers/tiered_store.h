// TieredStore: executable tiers looked up in order, fastest first (memory, then disk, then remote:
// tier_stack.h assembles them), behind one get/put.
//
// get() asks each tier in turn. The first tier that has a good entry serves it, and the entry is
// promoted (put) into every faster tier, so the next lookup is served sooner. A tier that holds an
// entry failing verification (kCorruption) has it removed and the lookup goes on to the next
// tier: a bad entry is a miss there, never served. A tier that cannot answer (busy, unreadable)
// is skipped. The Lookup says which tier served, what went wrong where, and what the promotion
// evicted, so the caller can record each (events, warnings); the store itself records nothing.
// put() writes through to every tier (a compiled executable).
//
// Errors: neither get() nor put() returns a Status, and neither fails as a whole. get() reports
// problems in its Lookup (`problems`: a tier that could not answer or held a corrupt entry, with
// how removing it went; `promotions`: each faster tier's put); put() returns one Put per tier,
// each with its status. A miss is a Lookup with a null executable.
// Thread-safety: as the tiers (here: one thread at a time). Ownership: tiers are not owned and
// must outlive the store.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "store/tiers/executable_store.h"

namespace tracecache::store {

template <CacheableExecutable Exe>
class TieredStore {
 public:
  // REQUIRES: fastest first, none null.
  explicit TieredStore(std::vector<ExecutableStore<Exe>*> tiers) : tiers_(std::move(tiers)) {}

  // One tier's part in a put (write-through or promotion).
  struct Put {
    size_t tier = 0;
    Status status;                       // why the tier did not take the entry
    std::vector<ExecutableKey> evicted;  // what the tier evicted to make room
  };
  // A tier that could not serve the key though it may hold an entry for it.
  struct Problem {
    size_t tier = 0;
    Status status;   // kCorruption: the entry failed verification; else the tier could not answer
    Status removal;  // kCorruption only: how removing the bad entry went
  };
  struct Lookup {
    std::shared_ptr<const Exe> exe;  // null: a miss in every tier
    size_t tier = 0;                 // the tier that served it (when exe is set)
    std::vector<Problem> problems;   // in tier order
    std::vector<Put> promotions;     // into the tiers faster than `tier`, fastest first
  };

  Lookup get(const ExecutableKey& key) {
    Lookup out;
    for (size_t i = 0; i < tiers_.size(); ++i) {
      Result<std::shared_ptr<const Exe>> r = tiers_[i]->get(key);
      if (!r.is_ok()) {
        Problem p{i, r.status(), Status::ok()};
        if (r.status().code() == StatusCode::kCorruption) p.removal = tiers_[i]->remove(key);
        out.problems.push_back(std::move(p));
        continue;
      }
      if (!*r) continue;
      out.exe = std::move(*r);
      out.tier = i;
      for (size_t j = 0; j < i; ++j) out.promotions.push_back(put_into(j, key, out.exe, PutContext{}));
      return out;
    }
    return out;
  }

  // Puts into every tier, fastest first; one Put per tier.
  std::vector<Put> put(const ExecutableKey& key, const std::shared_ptr<const Exe>& exe, const PutContext& context) {
    std::vector<Put> out;
    out.reserve(tiers_.size());
    for (size_t i = 0; i < tiers_.size(); ++i) out.push_back(put_into(i, key, exe, context));
    return out;
  }

  ExecutableStore<Exe>& tier(size_t i) { return *tiers_[i]; }

 private:
  Put put_into(size_t i, const ExecutableKey& key, const std::shared_ptr<const Exe>& exe, const PutContext& context) {
    Result<std::vector<ExecutableKey>> r = tiers_[i]->put(key, exe, context);
    if (!r.is_ok()) return Put{i, r.status(), {}};
    return Put{i, Status::ok(), std::move(*r)};
  }

  std::vector<ExecutableStore<Exe>*> tiers_;
};

}  // namespace tracecache::store
