// CacheDb: compiled functions' guard entries (store/core/guard_entry_store.h).
#include "store/sqlite/cache_db.h"

#include "store/sqlite/cache_db_impl.h"

namespace tracecache::store {

using db_internal::checksum_of;
using db_internal::now_seconds;
using db_internal::Query;

namespace {
void bind_function(Query& q, const FunctionKey& k) {
  q.text(1, k.name).text(2, k.user_version).text(3, k.toolkit_version);
}
}  // namespace

Status CacheDb::put_function_entry(const FunctionKey& key, int64_t entry, std::string_view blob) {
  return impl_->write_transaction("store a guard entry", [&] {
    Query q(impl_->put_fn_entry);
    bind_function(q, key);
    q.i64(4, entry).blob(5, blob).i64(6, checksum_of(blob)).real(7, now_seconds());
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "storing a guard entry");
  });
}

Result<std::vector<StoredFunctionEntry>> CacheDb::function_entries(const FunctionKey& key) {
  return impl_->read_transaction("reading guard entries", [&]() -> Result<std::vector<StoredFunctionEntry>> {
    std::vector<StoredFunctionEntry> out;
    Query q(impl_->get_fn_entries);
    bind_function(q, key);
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
      StoredFunctionEntry e;
      e.entry = q.col_i64(0);
      e.blob = q.col_blob(1);
      e.hits = q.col_i64(3);
      e.corrupt = checksum_of(e.blob) != q.col_i64(2);
      if (e.corrupt) e.blob.clear();
      out.push_back(std::move(e));
    }
    if (rc != SQLITE_DONE) return impl_->error(rc, "reading guard entries");
    return out;
  });
}

Status CacheDb::add_function_hits(const FunctionKey& key, int64_t entry, int64_t hits) {
  return impl_->write_transaction("count guard entry hits", [&] {
    Query q(impl_->add_fn_hits);
    bind_function(q, key);
    q.i64(4, entry).i64(5, hits);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "counting guard entry hits");
  });
}

Status CacheDb::remove_function_entry(const FunctionKey& key, int64_t entry) {
  return impl_->write_transaction("remove a guard entry", [&] {
    Query q(impl_->remove_fn_entry);
    bind_function(q, key);
    q.i64(4, entry);
    int rc = q.step();
    return rc == SQLITE_DONE ? Status::ok() : impl_->error(rc, "removing a guard entry");
  });
}

}  // namespace tracecache::store
