#include "cli/step_report.h"

#include <algorithm>

#include "cli/common.h"

namespace tracecache::cli {

namespace {

constexpr size_t kVariesShown = 4;
constexpr size_t kJsonDifferences = 32;  // per graph in steps_detail

std::string short_hash(const GraphKey& k) { return k.to_hex().substr(0, 16); }

// "miss (new graph), compiled in 3.21 ms; closest 1a2b...: input 0 shape: f32[8, 32] -> ...".
std::string describe(const GraphOutcome& g) {
  if (g.hit()) return fmt::format("hit ({})", g.tier);
  std::string text = fmt::format("miss ({})", g.reason);
  if (g.fell_back) {
    text += ", ran on the reference evaluator";
  } else {
    text += fmt::format(", compiled in {:.2f} ms", g.compile_ms);
  }
  if (g.closest) text += fmt::format("; closest {}: {}", short_hash(*g.closest), g.diff.summary(3));
  return text;
}

// What a difference says varies, without its values: "input 0 shape (mlp.trace:8 input x)".
std::string varying(const NodeDifference& d) {
  const std::string& where = d.source_b.empty() ? d.source_a : d.source_b;
  std::string what = d.kind == NodeDifference::Kind::kAttribute || d.kind == NodeDifference::Kind::kConstant
                         ? fmt::format("{} {}", d.op, d.what)
                         : d.what;
  return where.empty() ? what : fmt::format("{} ({})", what, where);
}

}  // namespace

void write_difference(JsonWriter& j, const NodeDifference& d) {
  j.begin_object();
  j.key("kind").value(difference_kind_name(d.kind));
  if (d.a != kNoDiffNode) j.key("node_a").value(static_cast<uint64_t>(d.a));
  if (d.b != kNoDiffNode) j.key("node_b").value(static_cast<uint64_t>(d.b));
  j.key("op").value(d.op);
  j.key("what").value(d.what);
  j.key("a").value(d.in_a);
  j.key("b").value(d.in_b);
  j.key("source_a").value(d.source_a);
  j.key("source_b").value(d.source_b);
  j.end_object();
}

void StepReport::before_step(ProgramSession& session) {
  const CompiledFunction* f = session.function();
  if (!f) return;
  const FunctionStats& st = f->stats();
  traces_before_ = st.traces;
  recompiles_before_ = st.recompile_reasons.size();
  hits_before_ = st.hits_per_entry;
}

void StepReport::after_step(int step, ProgramSession& session) {
  Step s;
  s.step = step;
  if (Runtime* runtime = session.runtime()) s.graphs = runtime->take_outcomes();
  if (const CompiledFunction* f = session.function()) {
    const FunctionStats& st = f->stats();
    OnceStep once;
    once.traced = st.traces > traces_before_;
    if (st.recompile_reasons.size() > recompiles_before_) once.recompile = st.recompile_reasons.back();
    for (size_t e = 0; e < st.hits_per_entry.size() && !once.traced; ++e) {
      if (st.hits_per_entry[e] > (e < hits_before_.size() ? hits_before_[e] : 0)) {
        once.entry = static_cast<int>(e);
        break;
      }
    }
    s.once = std::move(once);
  }
  for (const GraphOutcome& g : s.graphs) {
    if (g.hit() || g.fell_back) continue;
    ++compiled_;
    for (const NodeDifference& d : g.diff.differences) {
      if (varies_.size() >= kVariesShown) break;
      std::string v = varying(d);
      if (std::find(varies_.begin(), varies_.end(), v) == varies_.end()) varies_.push_back(std::move(v));
    }
  }
  if (verbose_) print(s);
  if (keep_) steps_.push_back(std::move(s));
}

void StepReport::print(const Step& s) const {
  std::string text;
  if (s.once) {
    if (!s.once->recompile.empty()) {
      text += fmt::format("tracecache: step {}: recompile: {}\n", s.step, s.once->recompile);
    } else if (s.once->traced) {
      text += fmt::format("tracecache: step {}: traced (first call)\n", s.step);
    } else if (s.once->entry >= 0) {
      text += fmt::format("tracecache: step {}: guard entry {} replayed\n", s.step, s.once->entry);
    }
  }
  for (const GraphOutcome& g : s.graphs) {
    text += fmt::format("tracecache: step {}: graph {} {}\n", s.step, short_hash(g.graph), describe(g));
  }
  std::fputs(text.c_str(), stderr);
}

void StepReport::finish(SessionMode mode, size_t steps) const {
  if (mode != SessionMode::kLazy || compiled_ < kKeepsCompiling) return;
  warn(fmt::format("lazy mode compiled {} distinct graphs in {} steps{}; each new graph costs a compile: "
                   "keep these fixed, or use --mode once (dims that change become dynamic)",
                   compiled_, steps,
                   varies_.empty() ? std::string() : fmt::format(" (what varies: {})", fmt::join(varies_, "; "))));
}

void StepReport::write_json(JsonWriter& j) const {
  j.key("steps_detail").begin_array();
  for (const Step& s : steps_) {
    j.begin_object();
    j.key("step").value(s.step);
    j.key("graphs").begin_array();
    for (const GraphOutcome& g : s.graphs) {
      j.begin_object();
      j.key("hash").value(g.graph.to_hex());
      j.key("outcome").value(g.hit() ? "hit" : "miss");
      if (g.hit()) {
        j.key("tier").value(g.tier);
      } else {
        j.key("reason").value(g.reason);
        j.key("compile_ms").value(g.compile_ms);
        j.key("fell_back").value(g.fell_back);
        if (g.closest) {
          j.key("closest").value(g.closest->to_hex());
          // Bounded: two unrelated graphs differ everywhere, and the first few say enough.
          const size_t shown = std::min(g.diff.differences.size(), kJsonDifferences);
          j.key("differences").begin_array();
          for (size_t k = 0; k < shown; ++k) write_difference(j, g.diff.differences[k]);
          j.end_array();
          j.key("more_differences").value(static_cast<uint64_t>(g.diff.differences.size() - shown));
        } else {
          j.key("closest").null();
        }
      }
      j.end_object();
    }
    j.end_array();
    if (s.once) {
      j.key("once").begin_object();
      j.key("traced").value(s.once->traced);
      if (s.once->entry >= 0) j.key("entry").value(s.once->entry);
      else j.key("entry").null();
      if (!s.once->recompile.empty()) j.key("recompile").value(s.once->recompile);
      else j.key("recompile").null();
      j.end_object();
    }
    j.end_object();
  }
  j.end_array();
}

}  // namespace tracecache::cli
