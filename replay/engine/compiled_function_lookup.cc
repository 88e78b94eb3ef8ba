// A CompiledFunction call's lookup: the entries' guards, the replay of the first that holds, and
// when none does, the closest entry and the recompile reason (compiled_function_impl.h).
#include "replay/engine/compiled_function_impl.h"

#include <fmt/format.h>

#include <algorithm>

namespace tracecache {

// Look up: the first entry whose guards hold and that replays (value guards between segments
// and a dynamic entry's template are checked while replaying). An entry that cannot be used
// is dropped (a miss, never an error; invariants 5 and 6). nullopt if no entry served.
std::optional<std::vector<DataRef>> CompiledFunction::Impl::look_up_and_replay(const CallArgs& args, LookupMisses& misses) {
  for (size_t e = 0; e < entries.size(); ++e) {
    ++stats.guard_checks;
    guard_checks.add();
    const bool holds =
        timed_guard_check() ? holds_timed(entries[e], args) : entries[e].guards.holds(args, options_digest);
    if (!holds) {
      count_guard_failure();
      continue;
    }
    std::string why;
    Result<std::optional<std::vector<DataRef>>> r = entries[e].replay_path == GuardEntry::ReplayPath::kDirect
                                                         ? replay_direct(entries[e], args)
                                                         : replay_verified(entries[e], args, &why);
    if (lost) return std::nullopt;
    if (!r.is_ok()) {
      drop_entry(e, r.status());
      --e;
      continue;
    }
    if (!r->has_value()) {
      if (why.empty()) {
        if (!misses.value_guard_failed) misses.value_change = std::move(value_change);
        misses.value_guard_failed = true;
      } else if (misses.template_failure.empty()) {
        misses.template_failure = fmt::format("entry {}: {}", e, why);
      }
      count_guard_failure();
      continue;
    }
    ++entries[e].hits;
    ++entries[e].unflushed_hits;
    if (entries[e].replay_path == GuardEntry::ReplayPath::kUndecided) {
      entries[e].replay_path =
          direct_replay_applies(entries[e]) ? GuardEntry::ReplayPath::kDirect : GuardEntry::ReplayPath::kGeneral;
    }
    last_entry = static_cast<int64_t>(e);
    return std::move(**r);
  }
  return std::nullopt;
}

// The entry with the fewest failed guards for `args` (the first of equals).
CompiledFunction::Impl::Closest CompiledFunction::Impl::closest_entry(const CallArgs& args) const {
  Closest best;
  for (size_t e = 0; e < entries.size(); ++e) {
    std::vector<GuardCheck> failed;
    std::vector<GuardFailure> f = entries[e].guards.explain(args, env(), &failed);
    if (e == 0 || f.size() < best.failures.size()) best = {e, std::move(f), std::move(failed)};
  }
  return best;
}

std::string CompiledFunction::Impl::recompile_reason(const Closest& closest, const LookupMisses& misses) {
  std::string reason = fmt::format("entry {}: ", closest.index);
  if (closest.failures.empty() && !misses.template_failure.empty()) {
    reason = misses.template_failure;
  } else if (closest.failures.empty() && misses.value_guard_failed) {
    reason += "a value read inside the function changed";
    if (!misses.value_change.empty()) reason += " (" + misses.value_change + ")";
  }
  for (size_t i = 0; i < closest.failures.size(); ++i) reason += (i ? "; " : "") + closest.failures[i].to_string();
  return reason;
}

void CompiledFunction::Impl::record_recompile(std::string reason) {
  runtime->metrics().add(counters::kRecompiles);
  runtime->function_event(store::EventKind::kRecompile, key.name,
                          fmt::format("{} {}: {}", options.call_name, stats.calls - 1, reason));
  stats.recompile_reasons.push_back(std::move(reason));
}

// Trace (the first call, or a recompile when `reason` is set): a new entry, dynamic in
// `dynamic` if the trace allows; the recompile is recorded with what became of the dims.
Result<std::vector<DataRef>> CompiledFunction::Impl::trace_new_entry(const CallArgs& args, std::vector<DynamicDim> dynamic,
                                               std::string reason) {
  std::string note;
  Result<std::vector<DataRef>> r = trace(args, /*keep=*/true, std::move(dynamic), &note);
  if (!reason.empty()) {
    if (!note.empty()) reason += " [" + note + "]";
    record_recompile(std::move(reason));
  }
  return r;
}

// Fall back: past the recompile limit, every call traces (lazy mode), said once.
Result<std::vector<DataRef>> CompiledFunction::Impl::fall_back(const CallArgs& args) {
  stats.fell_back_to_lazy = true;
  std::string why = fmt::format("'{}' recompiled {} times (limit {}); it now runs in lazy mode", key.name,
                                entries.size(), options.recompile_limit);
  runtime->add_warning(why);
  runtime->function_event(store::EventKind::kFallback, key.name, why);
  return trace(args, /*keep=*/false);
}

}  // namespace tracecache
