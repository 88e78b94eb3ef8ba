// Stored guard entries are untrusted input (issue 10, docs/architecture.md invariant 5). Each test forges
// an entry with a correct checksum (re-encoded through the proto and stored again) and checks
// that it is rejected with a `corrupt` event and that the call traces and returns the outputs
// the function really computes, never a wrong result. Also: an entry whose cache rows are gone
// is a miss and a retrace, and a recompile for another backend names the backends.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <functional>

#include "replay/engine/compiled_function.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/backends/cpu/eager_runner.h"
#include "replay/backends/sim/sim_backend.h"
#include "store/codec/proto/tracecache.pb.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

using testing::TempDir;

// An output as the tests compare it: its type and its checksum.
std::string type_and_checksum(const Tensor& t) {
  return type_to_string({t.dtype(), t.peek_shape()}) + " " + t.buffer()->checksum();
}

// Rewrites the one stored entry of function "step" v1 in the database at `db_path` with `forge`,
// re-encoded through the proto so that its checksum is valid.
void forge_entry(const std::string& db_path, const std::function<void(proto::GuardEntry&)>& forge) {
  auto db = std::move(store::CacheDb::open({.path = db_path})).value_or_throw();
  store::FunctionKey key{"step", "v1", std::string(kToolkitVersion)};
  auto rows = db->function_entries(key);
  ASSERT_TRUE(rows.is_ok());
  ASSERT_EQ(rows->size(), 1u);
  proto::GuardEntry pe;
  ASSERT_TRUE(pe.ParseFromString((*rows)[0].blob));
  forge(pe);
  ASSERT_TRUE(db->put_function_entry(key, (*rows)[0].entry, pe.SerializeAsString()).is_ok());
}

// Two outputs of different types (f32[B, 2] and f32[]), one graph: reversing them is visible.
TracedFn step_fn(int* calls) {
  return [calls](LazyContext&, const TraceArgs& a) {
    ++*calls;
    Tensor h = relu(add(matmul(a.tensor(0), a.tensor(1)), 0.5));
    return std::vector<Tensor>{h, sum(h)};
  };
}

// One "process": a backend, a database handle, a runtime, a context, and the function.
struct Process {
  explicit Process(const std::string& db_path, Backend* backend = nullptr, bool with_output_types = false,
                   bool dynamic_batch = false)
      : db(std::move(store::CacheDb::open({.path = db_path})).value_or_throw()),
        runtime(backend ? backend : &cpu, db.get(), &metrics),
        ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics}),
        f("step", step_fn(&fn_calls), &runtime, options(with_output_types, dynamic_batch)) {}

  static CompiledFunctionOptions options(bool with_output_types, bool dynamic_batch) {
    CompiledFunctionOptions o;
    o.user_version = "v1";
    if (dynamic_batch) o.dynamic_dims = {{0, 0}};  // a dynamic entry: its template is stored
    if (with_output_types) {  // what step_fn returns, from the argument types alone
      o.output_types = [](const CallArgs& a) -> Result<std::vector<TensorType>> {
        return std::vector<TensorType>{{DType::kF32, {a.tensors[0].peek_shape()[0], a.tensors[1].peek_shape()[1]}},
                                       {DType::kF32, {}}};
      };
    }
    return o;
  }

  // The outputs' types and checksums, as strings.
  std::vector<std::string> call(int64_t batch = 4) {
    HostBuffer x(DType::kF32, {batch, 3}), w(DType::kF32, {3, 2});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 1;
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.5f * static_cast<float>(i);
    auto out = f(ctx, {{ctx.from_buffer(std::move(x)), ctx.from_buffer(std::move(w))}, {}});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    std::vector<std::string> got;
    if (out.is_ok()) {
      for (const Tensor& t : *out) got.push_back(type_and_checksum(t));
    }
    return got;
  }

  int events(store::EventKind kind) const {
    int n = 0;
    for (const auto& e : runtime.events()) n += e.kind == kind;
    return n;
  }

  CpuBackend cpu;
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  Runtime runtime;
  LazyContext ctx;
  int fn_calls = 0;
  CompiledFunction f;
};

// The outputs the function computes, from a run on eager kernels (no cache at all).
std::vector<std::string> eager_outputs() {
  Metrics metrics;
  CpuOpRunner runner(&metrics);
  ReferenceExecutor unused;
  LazyOptions options;
  options.eager = &runner;
  LazyContext ctx(&unused, options);
  HostBuffer x(DType::kF32, {4, 3}), w(DType::kF32, {3, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 1;
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.5f * static_cast<float>(i);
  Tensor h = relu(add(matmul(ctx.from_buffer(std::move(x)), ctx.from_buffer(std::move(w))), 0.5));
  Tensor s = sum(h);
  std::vector<std::string> got;
  for (const Tensor& t : {h, s}) got.push_back(type_and_checksum(t));
  return got;
}

// Traces once into `dir`, then rewrites the stored entry with `forge` (a valid checksum).
void store_forged(const TempDir& dir, const std::function<void(proto::GuardEntry&)>& forge, bool dynamic_batch = false) {
  { Process p(dir.db(), nullptr, false, dynamic_batch); p.call(); }
  forge_entry(dir.db(), forge);
}

// The forged entry is rejected (on load or at its first replay) with a corrupt event, and the
// call traces and gives the function's real outputs.
void expect_rejected(const std::function<void(proto::GuardEntry&)>& forge, bool with_output_types = false) {
  TempDir dir;
  store_forged(dir, forge);
  Process q(dir.db(), nullptr, with_output_types);
  EXPECT_EQ(q.call(), eager_outputs());
  EXPECT_EQ(q.fn_calls, 1) << "the forged entry must not be served";
  EXPECT_EQ(q.events(store::EventKind::kCorrupt), 1);
}

TEST(GuardEntryValidation, TheReferenceIsEager) {
  TempDir dir;
  Process p(dir.db());
  EXPECT_EQ(p.call(), eager_outputs());
  Process q(dir.db());
  EXPECT_EQ(q.call(), eager_outputs());
  EXPECT_EQ(q.fn_calls, 0) << "an untouched entry is served";
}

TEST(GuardEntryValidation, AHugeTensorCountIsRejectedBeforeAnythingIsSized) {
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_checks(0)->set_expected(uint64_t{1} << 62); });
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_checks(0)->set_expected(uint64_t{1} << 40); });
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_checks(1)->set_expected(uint64_t{1} << 40); });
}

TEST(GuardEntryValidation, MoreChecksThanTheArgumentsAllowAreRejected) {
  expect_rejected([](proto::GuardEntry& pe) {
    for (int i = 0; i < 1000; ++i) *pe.add_checks() = pe.checks(2);
  });
}

TEST(GuardEntryValidation, ReversedOutputsAreRejected) {
  expect_rejected([](proto::GuardEntry& pe) {
    ASSERT_EQ(pe.outputs_size(), 2);
    pe.mutable_outputs()->SwapElements(0, 1);
  });
}

TEST(GuardEntryValidation, OutputsReversedWithTheirTypesAreRejectedByTheFunctionsOutputTypes) {
  // Consistent with itself and with its executable: only what the function returns tells.
  expect_rejected(
      [](proto::GuardEntry& pe) {
        pe.mutable_outputs()->SwapElements(0, 1);
        pe.mutable_output_types()->SwapElements(0, 1);
      },
      /*with_output_types=*/true);
  // An untouched entry is served, verified once.
  TempDir dir;
  { Process p(dir.db()); p.call(); }
  Process q(dir.db(), nullptr, true);
  EXPECT_EQ(q.call(), eager_outputs());
  EXPECT_EQ(q.call(), eager_outputs());
  EXPECT_EQ(q.fn_calls, 0);
}

TEST(GuardEntryValidation, OutOfRangeRoutesAreRejected) {
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_outputs(1)->set_b(7); });
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_outputs(0)->set_a(3); });
  expect_rejected([](proto::GuardEntry& pe) {
    ASSERT_GT(pe.segments(0).params_size(), 0);
    pe.mutable_segments(0)->mutable_params(0)->set_a(99);
  });
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_segments(0)->mutable_params()->RemoveLast(); });
}

TEST(GuardEntryValidation, AWrongOutputTypeIsRejected) {
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_output_types(0)->set_dtype(static_cast<uint32_t>(DType::kI32)); });
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_output_types(1)->add_shape(1); });
  expect_rejected([](proto::GuardEntry& pe) { pe.mutable_output_types()->RemoveLast(); });
}

TEST(GuardEntryValidation, ADynamicEntrysOutputsAreCheckedAgainstItsTemplate) {
  for (bool swap_types : {false, true}) {
    TempDir dir;
    store_forged(
        dir,
        [&](proto::GuardEntry& pe) {
          ASSERT_TRUE(pe.has_dynamic());
          if (swap_types) {
            pe.mutable_output_types()->SwapElements(0, 1);
          } else {
            pe.mutable_output_types(1)->set_dtype(static_cast<uint32_t>(DType::kI64));
          }
        },
        /*dynamic_batch=*/true);
    Process q(dir.db(), nullptr, false, true);
    EXPECT_EQ(q.f.num_entries(), 0u) << "rejected on load";
    EXPECT_EQ(q.events(store::EventKind::kCorrupt), 1);
    EXPECT_EQ(q.call(), eager_outputs());
  }
  // Untouched, it serves other batch sizes without a trace.
  TempDir dir;
  { Process p(dir.db(), nullptr, false, true); p.call(); }
  Process q(dir.db(), nullptr, true, true);
  EXPECT_EQ(q.call(4), eager_outputs());
  EXPECT_EQ(q.call(6).size(), 2u);
  EXPECT_EQ(q.fn_calls, 0);
}

TEST(GuardEntryValidation, AnIncompleteGuardSetIsRejected) {
  // Without the dtype check of input 0 the entry could replay on another dtype.
  expect_rejected([](proto::GuardEntry& pe) {
    for (int i = 0; i < pe.checks_size(); ++i) {
      if (pe.checks(i).kind() == 3 /* dtype */) {
        pe.mutable_checks()->DeleteSubrange(i, 1);
        break;
      }
    }
  });
}

TEST(GuardEntryValidation, AnEntryWhoseGraphAndExecutableAreGoneIsAMissAndARetrace) {
  TempDir dir;
  { Process p(dir.db()); p.call(); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(dir.db().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "DELETE FROM graphs; DELETE FROM executables", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  Process q(dir.db());
  EXPECT_EQ(q.call(), eager_outputs());
  EXPECT_EQ(q.fn_calls, 1);
  bool explained = false;
  for (const auto& e : q.runtime.events()) {
    explained |= e.kind == store::EventKind::kMiss && e.detail.find("is not in the cache") != std::string::npos;
  }
  EXPECT_TRUE(explained);
  EXPECT_EQ(q.call(), eager_outputs());
  EXPECT_EQ(q.fn_calls, 1) << "the retraced entry is served";
}

TEST(GuardEntryValidation, ARecompileForAnotherBackendNamesTheBackends) {
  TempDir dir;
  { Process p(dir.db()); p.call(); }
  SimBackend sim(*find_device_preset("h100"));
  Process q(dir.db(), &sim);
  EXPECT_EQ(q.call(), eager_outputs());
  ASSERT_EQ(q.f.stats().recompile_reasons.size(), 1u);
  EXPECT_EQ(q.f.stats().recompile_reasons[0], "entry 0: backend expected cpu, actual sim:h100");
}

TEST(GuardEntryValidation, AnEntryWithoutABackendLabelFallsBackToTheDigest) {
  TempDir dir;
  store_forged(dir, [](proto::GuardEntry& pe) { pe.clear_options_label(); });
  SimBackend sim(*find_device_preset("a100"));
  Process q(dir.db(), &sim);
  EXPECT_EQ(q.call(), eager_outputs());
  ASSERT_EQ(q.f.stats().recompile_reasons.size(), 1u);
  EXPECT_NE(q.f.stats().recompile_reasons[0].find("lowering options digest expected "), std::string::npos)
      << q.f.stats().recompile_reasons[0];
}

}  // namespace
}  // namespace tracecache

namespace tracecache {
namespace {

// A trace program in once mode, wired as `tracecache run --mode once` wires it: the step is the
// function, and the program's inference rules give the output types it returns.
struct ProgramProcess {
  ProgramProcess(const Program& program, const std::string& db_path)
      : db(std::move(store::CacheDb::open({.path = db_path})).value_or_throw()),
        runtime(&cpu, db.get(), &metrics),
        ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics}),
        args(program, ctx) {
    const std::vector<DimSource> sources = dim_sources(program);
    CompiledFunctionOptions o;
    o.user_version = "v1";
    o.output_types = [&program, sources](const CallArgs& a) {
      std::vector<int64_t> dims;
      size_t scalar = 0;
      for (const DimSource& src : sources) {
        dims.push_back(src.tensor >= 0 ? a.tensors[static_cast<size_t>(src.tensor)].peek_shape()[src.axis]
                                       : static_cast<int64_t>(a.scalars[scalar++]));
      }
      return infer_output_types_at(program, dims);
    };
    TracedFn fn = [&program, sources](LazyContext& c, const TraceArgs& a) {
      std::vector<int64_t> dims;
      size_t scalar = 0;
      for (const DimSource& src : sources) {
        dims.push_back(src.tensor >= 0 ? a.tensor(static_cast<size_t>(src.tensor)).peek_shape()[src.axis]
                                       : static_cast<int64_t>(a.scalar(scalar++)));
      }
      std::vector<Tensor> tensors;
      for (size_t i = 0; i < a.num_tensors(); ++i) tensors.push_back(a.tensor(i));
      return record_step(program, c, dims, tensors, sources).value_or_throw();
    };
    f = std::make_unique<CompiledFunction>("step", std::move(fn), &runtime, std::move(o));
    for (const DimSource& src : sources) scalar_dims.push_back(src.tensor < 0);
  }

  std::vector<std::string> call(const Program& program) {
    CallArgs call;
    call.tensors = args.make(0).value_or_throw();
    const std::vector<int64_t> dims = step_dim_values(program, 0);
    for (size_t d = 0; d < dims.size(); ++d) {
      if (scalar_dims[d]) call.scalars.push_back(static_cast<double>(dims[d]));
    }
    auto out = (*f)(ctx, call);
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    std::vector<std::string> got;
    if (out.is_ok()) {
      for (const Tensor& t : *out) got.push_back(type_and_checksum(t));
    }
    return got;
  }

  CpuBackend cpu;
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  Runtime runtime;
  LazyContext ctx;
  StepArguments args;
  std::vector<bool> scalar_dims;
  std::unique_ptr<CompiledFunction> f;
};

TEST(GuardEntryValidation, ATraceProgramsOutputTypesCatchAConsistentlyReversedEntry) {
  Result<Program> program = load_program(std::string(TRACECACHE_SOURCE_DIR) + "/fixtures/programs/mlp.trace");
  ASSERT_TRUE(program.is_ok()) << program.status().to_string();
  TempDir dir;
  std::vector<std::string> want;
  { ProgramProcess p(*program, dir.db()); want = p.call(*program); }
  ASSERT_EQ(want.size(), 2u);  // logits f32[8, 10], loss f32[]
  ASSERT_NO_FATAL_FAILURE(forge_entry(dir.db(), [](proto::GuardEntry& pe) {
    pe.mutable_outputs()->SwapElements(0, 1);
    pe.mutable_output_types()->SwapElements(0, 1);
  }));
  ProgramProcess q(*program, dir.db());
  EXPECT_EQ(q.call(*program), want);
  EXPECT_EQ(q.f->stats().traces, 1);
  int corrupt = 0;
  for (const auto& e : q.runtime.events()) corrupt += e.kind == store::EventKind::kCorrupt;
  EXPECT_EQ(corrupt, 1);
}

}  // namespace
}  // namespace tracecache
