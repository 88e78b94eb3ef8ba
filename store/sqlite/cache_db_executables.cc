// CacheDb: graphs and executables.
#include "store/sqlite/cache_db.h"

#include "store/sqlite/cache_db_impl.h"

namespace tracecache::store {

using db_internal::checksum_of;
using db_internal::now_seconds;
using db_internal::Query;

Status CacheDb::put_graph(const GraphKey& key, std::string_view blob, int64_t nodes) {
  return impl_->write_transaction("store a graph", [&] {
    Query q(impl_->put_graph);
    q.text(1, key.to_hex())
        .blob(2, blob)
        .i64(3, checksum_of(blob))
        .i64(4, static_cast<int64_t>(blob.size()))
        .i64(5, nodes)
        .real(6, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "storing a graph");
  });
}

Result<std::optional<std::string>> CacheDb::get_graph(const GraphKey& key) {
  Query q(impl_->get_graph);
  q.text(1, key.to_hex());
  int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return impl_->error(rc, "loading a graph");
  std::string blob = q.col_blob(0);
  if (checksum_of(blob) != q.col_i64(1)) {
    return corruption(fmt::format("cache database '{}': graph {} failed its checksum", impl_->path, key.to_hex()));
  }
  return std::optional<std::string>(std::move(blob));
}

Status CacheDb::put_graph_sources(const GraphKey& key, const GraphSources& sources) {
  return impl_->write_transaction("store a graph's sources", [&] {
    Query q(impl_->put_sources);
    q.text(1, key.to_hex())
        .text(2, one_line(sources.program))
        .text(3, one_line(sources.function))
        .text(4, sources.encode())
        .real(5, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "storing a graph's sources");
  });
}

Result<std::optional<GraphSources>> CacheDb::get_graph_sources(const GraphKey& key) {
  Query q(impl_->get_sources);
  q.text(1, key.to_hex());
  int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<GraphSources>();
  if (rc != SQLITE_ROW) return impl_->error(rc, "loading a graph's sources");
  // Without a graph row the node count is unknown: at most as many locations as a graph may
  // have nodes is still a bound.
  const int64_t nodes = q.col_i64(1);
  Result<GraphSources> s = GraphSources::decode(q.col_text(0), nodes >= 0 ? static_cast<size_t>(nodes) : size_t{1} << 24);
  if (!s.is_ok()) {
    return corruption(fmt::format("cache database '{}': graph {}: {}", impl_->path, key.to_hex(), s.status().message()));
  }
  return std::optional<GraphSources>(std::move(*s));
}

Result<std::vector<GraphKey>> CacheDb::recent_graphs_of(std::string_view program, int64_t limit) {
  Query q(impl_->recent_program_graphs);
  q.text(1, program).i64(2, limit);
  std::vector<GraphKey> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    if (std::optional<GraphKey> k = GraphKey::from_hex(q.col_text(0))) out.push_back(*k);
  }
  if (rc != SQLITE_DONE) return impl_->error(rc, "listing a program's graphs");
  return out;
}

// ---- executables ----

Result<std::optional<StoredExecutable>> CacheDb::get_executable(const ExecutableKey& key) {
  Query q(impl_->get_exe);
  q.key(1, key);
  int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<StoredExecutable>();
  if (rc != SQLITE_ROW) return impl_->error(rc, "loading an executable");
  StoredExecutable out{q.col_blob(0), q.col_real(2)};
  if (checksum_of(out.blob) != q.col_i64(1)) {
    return corruption(fmt::format("cache database '{}': executable {} ({}) failed its checksum", impl_->path,
                                  key.graph.to_hex(), key.backend));
  }
  return std::optional<StoredExecutable>(std::move(out));
}

Status CacheDb::put_executable(const ExecutableKey& key, std::string_view blob, double compile_ms,
                               std::span<const Event> events) {
  return impl_->write_transaction("store an executable", [&] {
    for (const Event& e : events) {
      Status st = impl_->insert_event(e);
      if (!st.is_ok()) return st;
    }
    Query q(impl_->put_exe);
    q.key(1, key)
        .blob(5, blob)
        .i64(6, checksum_of(blob))
        .i64(7, static_cast<int64_t>(blob.size()))
        .real(8, compile_ms)
        .real(9, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "storing an executable");
  });
}

Status CacheDb::remove_executable(const ExecutableKey& key) {
  return impl_->write_transaction("remove an executable", [&] {
    Query q(impl_->remove_exe);
    q.key(1, key);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "removing an executable");
  });
}

Status CacheDb::touch_executable(const ExecutableKey& key) {
  return impl_->write_transaction("record an executable's use", [&] {
    Query q(impl_->touch_exe);
    q.key(1, key).real(5, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "recording an executable's use");
  });
}

}  // namespace tracecache::store
