// CacheDb: the audit log and hit counts (store/core/audit_log.h).
#include "store/sqlite/cache_db.h"

#include <optional>
#include <utility>

#include "store/sqlite/cache_db_impl.h"

namespace tracecache::store {

using db_internal::Query;

Status CacheDb::append_events(std::span<const Event> events) {
  if (events.empty()) return Status::ok();
  return impl_->write_transaction("append to the audit log", [&] {
    for (const Event& e : events) {
      Status st = impl_->insert_event(e);
      if (!st.is_ok()) return st;
    }
    return Status::ok();
  });
}

Status CacheDb::add_hits(std::span<const HitCount> hits) {
  if (hits.empty()) return Status::ok();
  return impl_->write_transaction("count cache hits", [&] {
    for (const HitCount& h : hits) {
      Query q(impl_->add_hit);
      q.text(1, h.graph.to_hex())
          .text(2, h.backend)
          .text(3, h.options_digest)
          .text(4, event_name(EventKind::kHit, h.tier))
          .i64(5, h.hits)
          .real(6, h.time);
      int rc = q.step();
      if (rc != SQLITE_DONE) return impl_->error(rc, "counting cache hits");
    }
    return Status::ok();
  });
}

std::optional<Event> CacheDb::Impl::event_from_row(const Query& q) {
  std::optional<ParsedEventName> name = parse_event_name(q.col_text(3));
  std::optional<GraphKey> key = GraphKey::from_hex(q.col_text(4));
  if (!name || !key) return std::nullopt;
  Event e;
  e.id = q.col_i64(0);
  e.time = q.col_real(1);
  e.pid = q.col_i64(2);
  e.kind = name->kind;
  e.tier = std::move(name->tier);
  e.graph = *key;
  e.backend = q.col_text(5);
  e.reason = q.col_text(6);
  e.duration_ms = q.col_real(7);
  e.detail = q.col_text(8);
  e.options_digest = q.col_text(9);
  e.program = q.col_text(10);
  e.function = q.col_text(11);
  return e;
}

Result<std::vector<Event>> CacheDb::events(int64_t after_id, int64_t limit, int64_t* malformed) {
  if (malformed) *malformed = 0;
  Query q(impl_->events_after);
  q.i64(1, after_id).i64(2, limit > 0 ? limit : -1);
  std::vector<Event> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    std::optional<Event> e = Impl::event_from_row(q);
    if (!e) {  // a damaged row costs its own information, not the whole log
      if (malformed) ++*malformed;
      continue;
    }
    out.push_back(std::move(*e));
  }
  if (rc != SQLITE_DONE) return impl_->error(rc, "reading the audit log");
  return out;
}

Result<MissReason> CacheDb::classify_miss(const ExecutableKey& key) {
  return impl_->read_transaction("classifying a miss", [&]() -> Result<MissReason> {
    {
      Query q(impl_->other_compiler);
      q.key(1, key);
      int rc = q.step();
      if (rc == SQLITE_ROW) return MissReason::kStaleCompiler;
      if (rc != SQLITE_DONE) return impl_->error(rc, "classifying a miss");
    }
    {
      // Only this exact backend configuration's history counts: a graph stored for another sim
      // device spec was not evicted for this one.
      Query q(impl_->last_lifecycle_event);
      q.text(1, key.graph.to_hex()).text(2, key.backend).text(3, key.options_digest);
      int rc = q.step();
      if (rc == SQLITE_ROW) return q.col_text(0) == "corrupt" ? MissReason::kCorrupt : MissReason::kEvicted;
      if (rc != SQLITE_DONE) return impl_->error(rc, "classifying a miss");
    }
    Query q(impl_->other_options);
    q.text(1, key.graph.to_hex()).text(2, key.backend).text(3, key.options_digest);
    int rc = q.step();
    if (rc == SQLITE_ROW) return MissReason::kNewOptions;
    if (rc != SQLITE_DONE) return impl_->error(rc, "classifying a miss");
    return MissReason::kNewGraph;
  });
}

}  // namespace tracecache::store
