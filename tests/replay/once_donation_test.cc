// Donation in once mode (CompiledFunctionOptions::updates): a replay given an updated argument's
// only handle writes the new value into the argument's storage; a caller that keeps the argument
// gets a fresh buffer and keeps its value; aliasing, a returned argument and retraces give the
// same values as eager; the entry (and so a new process) donates too; a once-mode training step
// holds one copy of its state, as lazy mode does. The simulated device accounts every byte.
#include <gtest/gtest.h>

#include <filesystem>

#include "replay/backends/sim/device_spec.h"
#include "replay/backends/sim/sim_backend.h"
#include "capture/trace/recording_executor.h"
#include "frontend/program/program_runner.h"
#include "replay/engine/compiled_function.h"
#include "replay/engine/program_session.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kN = 256;                       // w is kN x kN f32: 256 KiB
constexpr uint64_t kWBytes = kN * kN * sizeof(float);

HostBuffer ramp(double start, double step) {
  HostBuffer b(DType::kF32, Shape{kN, kN});
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = static_cast<float>(start + step * static_cast<double>(i % 97));
  return b;
}

// w - g, as eager computes it (one kernel: no intermediate buffer besides the new w).
std::vector<float> sgd(const std::vector<float>& w, const std::vector<float>& g) {
  std::vector<float> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] - g[i];
  return out;
}

// A sim device, a runtime (optionally over a database) and a context.
struct Device {
  explicit Device(store::CacheDb* db = nullptr)
      : sim(*find_device_preset("h100")), runtime(&sim, db, &metrics), ctx(&runtime) {}
  SimBackend sim;
  Metrics metrics;
  Runtime runtime;
  LazyContext ctx;
};

// step(w, g) = {sum(new w), new w}: output 1 replaces argument 0.
CompiledFunctionOptions sgd_options() {
  CompiledFunctionOptions o;
  o.user_version = "sgd-1";
  o.input_names = {"w", "g"};
  o.automatic_dynamic = false;
  o.updates = {{.output = 1, .argument = 0}};
  return o;
}

TracedFn sgd_fn(int* calls) {
  return [calls](LazyContext&, const TraceArgs& a) {
    ++*calls;
    Tensor nw = sub(a.tensor(0), a.tensor(1));
    return std::vector<Tensor>{sum(nw), nw};
  };
}

// The arguments (w, g). Built by moving, not from a braced list: an initializer_list's elements
// are copies that live until the end of the full expression, a second handle of w.
CallArgs args_of(Tensor w, Tensor g) {
  CallArgs a;
  a.tensors.push_back(std::move(w));
  a.tensors.push_back(std::move(g));
  return a;
}

// Runs one call on `d` and returns how many bytes the call added to the device's peak beyond
// what was in use before it.
uint64_t call_peak(Device& d, CompiledFunction& f, CallArgs args, Result<std::vector<Tensor>>* out) {
  const uint64_t before = d.sim.memory_in_use();
  d.sim.reset_memory_peak();
  *out = f(d.ctx, std::move(args));
  return d.sim.memory_peak() - before;
}

TEST(OnceDonation, AReplayGivenTheOnlyHandleWritesInPlaceElseAFreshBuffer) {
  Device d;
  int calls = 0;
  CompiledFunction f("sgd", sgd_fn(&calls), &d.runtime, sgd_options());
  Tensor g = d.ctx.from_buffer(ramp(1, 0.25));
  const std::vector<float> gv = g.to_vector<float>();
  std::vector<float> expected = d.ctx.from_buffer(ramp(-3, 0.5)).to_vector<float>();

  // The first call traces: the trace holds w, so it writes a fresh buffer.
  Tensor w = d.ctx.from_buffer(ramp(-3, 0.5));
  Result<std::vector<Tensor>> out = f(d.ctx, args_of(std::move(w), g));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  expected = sgd(expected, gv);
  EXPECT_EQ((*out)[1].to_vector<float>(), expected);
  EXPECT_EQ(calls, 1);

  // Replays given w's only handle: the new w takes the old one's storage, no second w.
  for (int step = 0; step < 3; ++step) {
    Tensor nw = (*out)[1];
    out = Result<std::vector<Tensor>>(std::vector<Tensor>{});
    const uint64_t extra = call_peak(d, f, args_of(std::move(nw), g), &out);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    expected = sgd(expected, gv);
    EXPECT_EQ((*out)[1].to_vector<float>(), expected) << step;
    EXPECT_LT(extra, kWBytes) << "step " << step << ": the replay allocated a second w";
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(f.stats().traces, 1);

  // A caller that keeps w: a fresh buffer, and its w keeps its value.
  Tensor kept = (*out)[1];
  const std::vector<float> kept_value = kept.to_vector<float>();
  out = Result<std::vector<Tensor>>(std::vector<Tensor>{});
  const uint64_t extra = call_peak(d, f, args_of(kept, g), &out);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_GE(extra, kWBytes);
  EXPECT_EQ(kept.to_vector<float>(), kept_value);
  EXPECT_EQ((*out)[1].to_vector<float>(), sgd(kept_value, gv));

  // The const& call never gives an argument up.
  Result<std::vector<Tensor>> plain = f(d.ctx, args_of(kept, g));
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(kept.to_vector<float>(), kept_value);
  EXPECT_EQ((*plain)[1].to_vector<float>(), sgd(kept_value, gv));
}

TEST(OnceDonation, AnArgumentPassedTwiceIsNeverDonated) {
  Device d;
  int calls = 0;
  CompiledFunction f("sgd", sgd_fn(&calls), &d.runtime, sgd_options());
  for (int step = 0; step < 3; ++step) {
    CallArgs args;
    {
      Tensor w = d.ctx.from_buffer(ramp(step, 0.5));
      args.tensors = {w, w};  // w and g are one tensor: its only handles are in args
    }
    const std::vector<float> v = args.tensors[1].to_vector<float>();
    Result<std::vector<Tensor>> out = f(d.ctx, std::move(args));
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[1].to_vector<float>(), sgd(v, v)) << step;
    ASSERT_TRUE(args.tensors[1].defined());
    EXPECT_EQ(args.tensors[1].to_vector<float>(), v) << "the other argument saw the update";
  }
  EXPECT_EQ(calls, 1);
}

TEST(OnceDonation, AnArgumentAlsoReturnedAsItIsIsNotDonated) {
  Device d;
  int calls = 0;
  CompiledFunctionOptions o = sgd_options();
  o.updates = {{.output = 0, .argument = 0}};
  CompiledFunction f("sgd_and_old", [&calls](LazyContext&, const TraceArgs& a) {
    ++calls;
    return std::vector<Tensor>{sub(a.tensor(0), a.tensor(1)), a.tensor(0)};
  }, &d.runtime, o);
  Tensor g = d.ctx.from_buffer(ramp(1, 0.25));
  const std::vector<float> gv = g.to_vector<float>();
  for (int step = 0; step < 3; ++step) {
    Tensor w = d.ctx.from_buffer(ramp(step, 0.5));
    const std::vector<float> v = w.to_vector<float>();
    Result<std::vector<Tensor>> out = f(d.ctx, args_of(std::move(w), g));
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[0].to_vector<float>(), sgd(v, gv)) << step;
    EXPECT_EQ((*out)[1].to_vector<float>(), v) << step << ": the returned old value was overwritten";
  }
  EXPECT_EQ(calls, 1);
}

TEST(OnceDonation, RetracesAfterAGuardFailureStillDonateCorrectly) {
  Device d;
  int calls = 0;
  CompiledFunction f("sgd", sgd_fn(&calls), &d.runtime, sgd_options());
  // Two shapes alternate: two static entries, each replayed with donation.
  for (int step = 0; step < 6; ++step) {
    const int64_t rows = step % 2 == 0 ? kN : kN / 2;
    HostBuffer wb(DType::kF32, Shape{rows, kN}), gb(DType::kF32, Shape{rows, kN});
    for (int64_t i = 0; i < wb.numel(); ++i) {
      wb.data<float>()[i] = static_cast<float>((i + step) % 13);
      gb.data<float>()[i] = static_cast<float>(i % 7) - 3;
    }
    Tensor w = d.ctx.from_buffer(std::move(wb)), g = d.ctx.from_buffer(std::move(gb));
    const std::vector<float> wv = w.to_vector<float>(), gv = g.to_vector<float>();
    Result<std::vector<Tensor>> out = f(d.ctx, args_of(std::move(w), g));
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[1].to_vector<float>(), sgd(wv, gv)) << step;
  }
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(f.num_entries(), 2u);
  EXPECT_EQ(f.stats().recompiles, 1);
}

// With automatic_dynamic the second size makes the dim dynamic: that entry records no donation
// (its template cannot carry one), and every size still gets the right values.
TEST(OnceDonation, ADynamicEntryDoesNotDonateAndStaysCorrect) {
  Device d;
  int calls = 0;
  CompiledFunctionOptions o = sgd_options();
  o.automatic_dynamic = true;
  CompiledFunction f("sgd", sgd_fn(&calls), &d.runtime, o);
  for (int64_t rows : {kN, kN / 2, kN / 4, kN / 2}) {
    HostBuffer wb(DType::kF32, Shape{rows, kN}), gb(DType::kF32, Shape{rows, kN});
    for (int64_t i = 0; i < wb.numel(); ++i) {
      wb.data<float>()[i] = static_cast<float>((i + rows) % 11);
      gb.data<float>()[i] = static_cast<float>(i % 5) - 2;
    }
    Tensor w = d.ctx.from_buffer(std::move(wb)), g = d.ctx.from_buffer(std::move(gb));
    const std::vector<float> wv = w.to_vector<float>(), gv = g.to_vector<float>();
    Result<std::vector<Tensor>> out = f(d.ctx, args_of(std::move(w), g));
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[1].to_vector<float>(), sgd(wv, gv)) << rows;
  }
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(f.stats().specializations, 1);  // kN / 4 (kN / 2 was traced)
}

TEST(OnceDonation, UpdatesThatDoNotFitTheOutputsAreErrors) {
  Device d;
  int calls = 0;
  CompiledFunctionOptions o = sgd_options();
  o.updates = {{.output = 0, .argument = 0}};  // sum(nw) is a scalar, w is not
  CompiledFunction f("bad", sgd_fn(&calls), &d.runtime, o);
  Tensor w = d.ctx.from_buffer(ramp(0, 1)), g = d.ctx.from_buffer(ramp(0, 1));
  Result<std::vector<Tensor>> out = f(d.ctx, args_of(w, g));
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("output 0 replaces input 0 'w'"), std::string::npos) << out.status().message();

  o.updates = {{.output = 5, .argument = 0}};
  CompiledFunction g5("bad5", sgd_fn(&calls), &d.runtime, o);
  out = g5(d.ctx, args_of(w, g));
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("names output 5"), std::string::npos) << out.status().message();

  o.updates = {{.output = 1, .argument = 0}, {.output = 1, .argument = 1}};
  CompiledFunction twice("twice", sgd_fn(&calls), &d.runtime, o);
  out = twice(d.ctx, args_of(w, g));
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("name the same output or argument"), std::string::npos) << out.status().message();
}

// A new process replays the stored entry (no trace) and donates, as the tracing one did.
TEST(OnceDonation, AStoredEntryDonatesInANewProcess) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "cache.db").string();
  std::vector<float> first;
  {
    auto db = std::move(store::CacheDb::open({.path = path})).value_or_throw();
    Device d(db.get());
    int calls = 0;
    CompiledFunction f("sgd", sgd_fn(&calls), &d.runtime, sgd_options());
    Tensor g = d.ctx.from_buffer(ramp(1, 0.25));
    Result<std::vector<Tensor>> out = f(d.ctx, args_of(d.ctx.from_buffer(ramp(-3, 0.5)), g));
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    first = (*out)[1].to_vector<float>();
  }
  auto db = std::move(store::CacheDb::open({.path = path})).value_or_throw();
  Device d(db.get());
  int calls = 0;
  CompiledFunction f("sgd", sgd_fn(&calls), &d.runtime, sgd_options());
  ASSERT_EQ(f.num_entries(), 1u);
  Tensor g = d.ctx.from_buffer(ramp(1, 0.25));
  Result<std::vector<Tensor>> out(std::vector<Tensor>{});
  (void)call_peak(d, f, args_of(d.ctx.from_buffer(ramp(-3, 0.5)), g), &out);  // uploads w
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ((*out)[1].to_vector<float>(), first);
  Tensor nw = (*out)[1];
  out = Result<std::vector<Tensor>>(std::vector<Tensor>{});
  const uint64_t extra = call_peak(d, f, args_of(std::move(nw), g), &out);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ((*out)[1].to_vector<float>(), sgd(first, g.to_vector<float>()));
  EXPECT_LT(extra, kWBytes);
  EXPECT_EQ(calls, 0);
}

// The peak device memory of each step of a program after the first, in one mode, on sim.
struct StepPeaks {
  std::vector<uint64_t> peak;    // per step: the step's peak
  std::vector<double> losses;
};

StepPeaks run_steps(const Program& program, SessionMode mode, int steps) {
  Metrics metrics;
  ProgramSessionOptions options;
  options.session.mode = mode;
  options.session.backend = "sim";
  options.session.metrics = &metrics;
  std::unique_ptr<ProgramSession> s = std::move(ProgramSession::create(program, options)).value_or_throw();
  StepPeaks r;
  for (int step = 0; step < steps; ++step) {
    Result<ProgramSession::PreparedStep> p = s->prepare(step);
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    if (!p.is_ok()) return r;
    s->backend()->reset_memory_peak();
    Result<std::vector<BufferRef>> outs = s->run(*p);
    EXPECT_TRUE(outs.is_ok()) << outs.status().to_string();
    if (!outs.is_ok()) return r;
    r.peak.push_back(s->backend()->memory_stats()->peak);
    r.losses.push_back((*outs)[0]->element_as_double(0));
  }
  return r;
}

uint64_t type_bytes(DType dtype, const Shape& shape) { return static_cast<uint64_t>(shape.numel()) * dtype_size(dtype); }

// A once-mode training step holds one copy of the weights and optimizer state, as lazy mode:
// its peak is at most state + inputs + every value the step computes except the updates (which
// live in their params' storage), and equals lazy mode's peak. The first once step (the trace,
// which cannot donate) holds a second copy of every updated param.
TEST(OnceDonation, ATrainingStepHoldsOneCopyOfItsStateAsInLazyMode) {
  Result<Program> p = load_program((fs::path(TRACECACHE_SOURCE_DIR) / "fixtures/programs/train_mlp.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  // The bound, from the program's tensor sizes: the step's graph as lazy mode traces it.
  RecordingExecutor recorder;
  LazyContext rctx(&recorder);
  ASSERT_TRUE(run_program(*p, rctx, 1).is_ok());
  ASSERT_EQ(recorder.graphs().size(), 1u);
  const Graph& g = recorder.graphs()[0].graph.graph;
  uint64_t state = 0, computed = 0, updated = 0;
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    (n.op == OpKind::kParameter ? state : computed) += type_bytes(n.dtype, n.shape);
  }
  for (const Donation& dn : g.donations()) {
    const Node& n = g.node(g.outputs()[dn.output]);
    updated += type_bytes(n.dtype, n.shape);
  }
  ASSERT_EQ(g.donations().size(), p->updates.size());
  const uint64_t bound = state + computed - updated;

  constexpr int kSteps = 4;
  StepPeaks lazy = run_steps(*p, SessionMode::kLazy, kSteps);
  StepPeaks once = run_steps(*p, SessionMode::kOnce, kSteps);
  ASSERT_EQ(lazy.peak.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(once.peak.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(once.losses, lazy.losses);
  for (int step = 1; step < kSteps; ++step) {
    EXPECT_LE(once.peak[step], bound) << "step " << step;
    EXPECT_EQ(once.peak[step], lazy.peak[step]) << "step " << step;
  }
  EXPECT_GE(once.peak[0], once.peak[1] + updated) << "the trace holds both copies of the updated params";
  std::cout << "train_mlp on sim, peak device bytes per step: lazy";
  for (uint64_t b : lazy.peak) std::cout << " " << b;
  std::cout << "; once";
  for (uint64_t b : once.peak) std::cout << " " << b;
  std::cout << "; bound " << bound << ", updated params " << updated << "\n";
}

}  // namespace
}  // namespace tracecache
