// The replay memo of CompiledFunction::replay_only() (compiled_function_impl.h, ReplayMemo).
//
// A caller with a fast path of its own (tracecache.torch) passes a module's state on every call
// as the same tensor handles, and one or two new tensors (the input, the seed). The full lookup
// reads every argument's shape, dtype and data identity for the guards, and every parameter's
// data for the segment's parameter list: for resnet18's 123 arguments about 10 µs per call,
// nearly all cache misses, since the previous call's kernels evicted those objects. The memo
// keeps what the guards established about the state, and its data in the parameter list, for as
// long as the state is the same handles (held, so an identity cannot be reused) and their context
// assigned nothing (the one way a materialized tensor's data changes). A call then reads one
// pointer per state argument, from two arrays, and checks the others as holds() would.
//
// Soundness rests on: a held tensor's dtype and shape never change; its data changes only by
// LazyContext::assign (counted); the entry named by index is the same while entries_version is;
// and the aliasing rule of the entry's guards is re-established per call for the other arguments
// against the held tensors' data (a call whose other argument shares data with a held tensor
// takes the full lookup). Anything else the memo does not cover takes the full lookup too.
#include "replay/engine/compiled_function_impl.h"

#include <algorithm>

namespace tracecache {

std::optional<Result<std::optional<std::vector<DataRef>>>> CompiledFunction::Impl::replay_memoized(
    LazyContext& ctx, const CallArgs& args) {
  ReplayMemo& m = memo;
  const size_t n = args.tensors.size();
  if (!m.valid || m.entries_version != entries_version || m.ctx != &ctx || m.assignments != ctx.assignments() ||
      n != m.held.size() || m.entry >= entries.size()) {
    return std::nullopt;
  }
  GuardEntry& e = entries[m.entry];
  if (!e.guards.counts_hold(args, options_digest)) return std::nullopt;
  // The held arguments: the same handles (an undefined slot is an argument checked below).
  for (size_t i = 0; i < n; ++i) {
    const void* held = m.held[i].handle_id();
    if (held && held != args.tensors[i].handle_id()) return std::nullopt;
  }
  // The others: as the full lookup checks them, and their aliasing against every argument.
  for (size_t k = 0; k < m.others.size(); ++k) {
    const uint32_t a = m.others[k];
    const Tensor& t = args.tensors[a];
    if (!t.defined() || !t.is_materialized() || &t.context() != &ctx) return std::nullopt;
    if (!e.guards.tensor_holds(args, a)) return std::nullopt;
    const void* id = t.data_ptr()->identity();
    if (std::binary_search(m.held_data.begin(), m.held_data.end(), id)) return std::nullopt;
    uint32_t first = a;
    for (size_t j = 0; j < k; ++j) {  // others are in argument order
      if (args.tensors[m.others[j]].data_ptr()->identity() == id) {
        first = m.others[j];
        break;
      }
    }
    if (e.guards.first_alias_of(a) != first) return std::nullopt;
  }
  ++stats.guard_checks;
  guard_checks.add();
  const Segment& seg = e.segments[0];
  Result<std::optional<std::vector<DataRef>>> r = direct_outputs(e, [&] {
    // The other arguments' slots are emptied when the run ends, however it ends, so that no
    // call's own arguments outlive it.
    struct EmptyOtherParams {
      ReplayMemo& memo;
      ~EmptyOtherParams() {
        for (auto [param, arg] : memo.other_params) memo.params[param].reset();
      }
    } empty{m};
    for (auto [param, arg] : m.other_params) m.params[param] = args.tensors[arg].data();
    return compiled_detail::run_executable(*runtime, *seg.exe, m.params);
  }());
  if (!r.is_ok()) {  // as in the full lookup: an entry that does not fit is dropped
    m.valid = false;
    drop_entry(m.entry, r.status());
    return std::nullopt;  // the full lookup tries the other entries, as it would have
  }
  ++e.hits;
  ++e.unflushed_hits;
  last_entry = static_cast<int64_t>(m.entry);
  ++stats.calls;
  ++stats.memoized_replays;
  return r;
}

void CompiledFunction::Impl::remember(LazyContext& ctx, const CallArgs& args, size_t state) {
  ReplayMemo& m = memo;
  const size_t n = args.tensors.size();
  m.valid = false;
  m.held.clear();
  m.params.clear();
  if (state == 0 || state > n || last_entry < 0 || static_cast<size_t>(last_entry) >= entries.size()) return;
  const GuardEntry& e = entries[static_cast<size_t>(last_entry)];
  if (e.replay_path != GuardEntry::ReplayPath::kDirect || !e.guards.is_table()) return;
  const Segment& seg = e.segments[0];
  if (!seg.exe || !seg.exe->graph.donations().empty()) return;
  // Held: the caller's state, none sharing data with an earlier argument (the guards then
  // expect each to be its own first alias).
  m.others.clear();
  m.held_data.clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (i >= state) {
      m.others.push_back(i);
    } else if (e.guards.first_alias_of(i) == i) {
      m.held_data.push_back(args.tensors[i].data_ptr()->identity());
    } else {
      return;
    }
  }
  std::sort(m.held_data.begin(), m.held_data.end());
  if (std::adjacent_find(m.held_data.begin(), m.held_data.end()) != m.held_data.end()) return;
  m.held.assign(args.tensors.begin(), args.tensors.begin() + static_cast<std::ptrdiff_t>(state));
  m.held.resize(n);
  m.params.reserve(seg.params.size());
  m.other_params.clear();
  for (size_t p = 0; p < seg.params.size(); ++p) {
    const ValueSource& v = seg.params[p];
    if (v.kind == ValueSource::Kind::kConstant) {
      m.params.push_back(v.constant);
    } else if (m.held[v.a].defined()) {
      m.params.push_back(args.tensors[v.a].data());
    } else {
      m.params.push_back(nullptr);
      m.other_params.emplace_back(static_cast<uint32_t>(p), v.a);
    }
  }
  m.entry = static_cast<size_t>(last_entry);
  m.entries_version = entries_version;
  m.ctx = &ctx;
  m.assignments = ctx.assignments();
  m.valid = true;
}

}  // namespace tracecache
