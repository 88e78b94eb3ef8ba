// The keys the remote cache tier stores under, one Redis key per entry, all under one prefix:
//
//   tracecache:s<schema>:ir<IR format>:exe:<graph key>:<backend>:<options digest>:c<compiler version>
//   tracecache:s<schema>:ir<IR format>:graph:<graph key>
//   tracecache:s<schema>:ir<IR format>:fn:<toolkit version>:<name>:<user version>   (a hash: entry -> blob)
//
// Every part of the ExecutableKey is in an executable's key, and the cache schema
// (store/sqlite/cache_db.h kSchemaVersion) and IR format (capture/ir/hash.h kIrFormatVersion) are
// in every key: a server shared by several tracecache versions never hands one an entry made by
// another. Text parts that could hold ':' or '%' (backend, names, versions) are percent-encoded,
// so no two keys' parts run together. remote_key_pattern() is the glob matching this version's
// keys (stats, gc); remote_any_version_pattern() matches every version's.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "capture/ir/hash.h"
#include "store/core/executable_key.h"
#include "store/core/guard_entry_store.h"

namespace tracecache::store {

std::string remote_key_prefix();  // "tracecache:s<schema>:ir<IR format>:"
std::string remote_executable_key(const ExecutableKey& key);
std::string remote_graph_key(const GraphKey& key);
std::string remote_function_key(const FunctionKey& key);
std::string remote_key_pattern();          // remote_key_prefix() + "*"
std::string remote_any_version_pattern();  // "tracecache:*"
// "exe", "graph", "fn" for a key of this version; "" for anything else.
std::string_view remote_key_kind(std::string_view key);

}  // namespace tracecache::store
