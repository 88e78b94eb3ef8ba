// A CompiledFunction's entries in the cache: saved when traced, loaded when made (a stored entry
// that cannot be used is dropped with an event), their hits flushed (compiled_function_impl.h).
#include "replay/engine/compiled_function_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include "replay/guards/guard_entry_codec.h"

namespace tracecache {

// The store guard entries are written to: none if not persisting or read-only.
store::GuardEntryStore* CompiledFunction::Impl::writable_store() const {
  store::GuardEntryStore* d = options.persist ? runtime->guard_entries() : nullptr;
  return d && !d->read_only() ? d : nullptr;
}

void CompiledFunction::Impl::save(GuardEntry& e) {
  store::GuardEntryStore* d = writable_store();
  if (!d) return;
  e.db_index = next_db_index++;
  Status st = d->put_function_entry(key, e.db_index, encode_guard_entry(e));
  if (!st.is_ok()) {
    e.db_index = -1;
    runtime->add_warning(fmt::format("could not store a guard entry of '{}': {}", key.name, st.message()));
  }
}

void CompiledFunction::Impl::load() {
  store::GuardEntryStore* d = options.persist ? runtime->guard_entries() : nullptr;
  if (!d) return;
  Result<std::vector<store::StoredFunctionEntry>> rows = d->function_entries(key);
  if (!rows.is_ok()) {
    runtime->add_warning(fmt::format("could not read the guard entries of '{}': {}", key.name, rows.status().message()));
    return;
  }
  for (store::StoredFunctionEntry& row : *rows) {
    next_db_index = std::max(next_db_index, row.entry + 1);
    Result<GuardEntry> e = row.corrupt ? Result<GuardEntry>(corruption("stored guard entry failed its checksum"))
                                       : decode_guard_entry(row.blob);
    if (!e.is_ok()) {
      drop_stored(row.entry, e.status().message());
      continue;
    }
    e->db_index = row.entry;
    e->outputs_verified = false;
    // Without automatic dynamism, an entry made dynamic by it (in a run that had it) is not
    // used: each new size recompiles, as it would on a fresh cache. Static entries, and dynamic
    // ones whose dims are all marked dynamic here, serve as usual. The stored row stays.
    if (!options.automatic_dynamic && e->dynamic &&
        !std::all_of(e->dynamic->dims.begin(), e->dynamic->dims.end(), [this](const DynamicDim& dim) {
          return std::find(options.dynamic_dims.begin(), options.dynamic_dims.end(), dim) != options.dynamic_dims.end();
        })) {
      continue;
    }
    entries.push_back(std::move(*e));
    ++entries_version;
  }
}

// An entry that could not be used: a `corrupt` event for a malformed entry or cache row, a
// `miss` event for anything else (say, its graph is no longer in the cache). Its stored row is
// removed unless the failure may pass (a locked or unreadable database).
void CompiledFunction::Impl::drop_entry(size_t index, const Status& why) {
  const int64_t db_index = entries[index].db_index;
  entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(index));
  ++entries_version;
  const StatusCode code = why.code();
  if (code == StatusCode::kCorruption) {
    drop_stored(db_index, why.message());
    return;
  }
  const bool permanent = code == StatusCode::kNotFound;
  runtime->function_event(store::EventKind::kMiss, key.name,
                          fmt::format("entry {} could not be used ({}); the call traces{}", db_index,
                                      why.message(), permanent ? "" : ", the stored entry is kept"));
  if (store::GuardEntryStore* d = writable_store(); d && permanent && db_index >= 0) (void)d->remove_function_entry(key, db_index);
}

void CompiledFunction::Impl::drop_stored(int64_t db_index, const std::string& why) {
  runtime->function_event(store::EventKind::kCorrupt, key.name, fmt::format("entry {}: {}", db_index, why));
  if (store::GuardEntryStore* d = writable_store()) (void)d->remove_function_entry(key, db_index);
}

void CompiledFunction::Impl::flush_hits() {
  store::GuardEntryStore* d = writable_store();
  for (GuardEntry& e : entries) {
    if (e.unflushed_hits == 0 || e.db_index < 0) continue;
    if (d && d->add_function_hits(key, e.db_index, e.unflushed_hits).is_ok()) e.unflushed_hits = 0;
  }
}

}  // namespace tracecache
