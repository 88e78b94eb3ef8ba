// The compiler and the executable format: fusion, buffer plan, determinism, and validation of
// executables read back from the cache (docs/architecture.md invariants 2, 5, 7).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "replay/compile/compiler.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "capture/trace/nn.h"
#include "capture/trace/recording_executor.h"
#include "replay/compile/executable.h"
#include "tests/test_graphs.h"

namespace tracecache {
namespace {

template <typename Fn>
CanonicalGraph graph_of(Fn build) {
  RecordingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(HostBuffer(DType::kF32, {16, 32}));
  Tensor w = ctx.from_buffer(HostBuffer(DType::kF32, {32, 32}));
  {
    std::vector<Tensor> keep = build(x, w);
    ctx.mark_step();
  }
  return exec.graphs().at(0).graph;
}

Executable compile(const CanonicalGraph& g, CompileOptions o = {}) {
  return compile_graph(g.graph, g.key, "cpu", "digest", o);
}

size_t count_kernels(const Executable& e, Kernel::Kind kind) {
  return static_cast<size_t>(std::count_if(e.kernel_plan()->kernels.begin(), e.kernel_plan()->kernels.end(),
                                           [kind](const Kernel& k) { return k.kind == kind; }));
}

TEST(Compiler, ElementwiseChainBecomesOneFusedKernel) {
  CanonicalGraph g = graph_of([](Tensor x, Tensor) {
    return std::vector<Tensor>{relu(add(mul(exp(x), x), 1.0))};
  });
  Executable e = compile(g);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  ASSERT_EQ(e.kernel_plan()->kernels.size(), 1u);
  EXPECT_EQ(e.kernel_plan()->kernels[0].kind, Kernel::Kind::kFused);
  EXPECT_EQ(e.kernel_plan()->kernels[0].members.size(), 4u);  // exp, mul, add, relu; 1.0 is a rank-0 leaf
  EXPECT_EQ(e.kernel_plan()->arena_bytes, 0u) << "nothing but the output is materialized";
}

TEST(Compiler, MatmulOutputsAndSharedValuesBreakFusion) {
  CanonicalGraph g = graph_of([](Tensor x, Tensor w) {
    Tensor h = tanh(matmul(x, w));
    Tensor shared = exp(h);           // two consumers: materialized
    Tensor out1 = add(shared, x);
    Tensor out2 = mul(shared, shared);
    return std::vector<Tensor>{out1, out2, h};  // h is an output: materialized
  });
  Executable e = compile(g);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  EXPECT_EQ(count_kernels(e, Kernel::Kind::kOp), 1u);     // matmul
  EXPECT_EQ(count_kernels(e, Kernel::Kind::kFused), 4u);  // tanh, exp, add, mul
  Executable unfused = compile(g, CompileOptions{.fuse = false});
  EXPECT_TRUE(unfused.validate().is_ok());
}

TEST(Compiler, ArenaReusesDeadValues) {
  CanonicalGraph g = graph_of([](Tensor x, Tensor w) {
    Tensor h = x;
    for (int i = 0; i < 6; ++i) h = matmul(h, w);  // each intermediate dies after one use
    return std::vector<Tensor>{h};
  });
  Executable e = compile(g);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  const uint64_t one = 16 * 32 * 4;
  EXPECT_EQ(e.kernel_plan()->arena_bytes, 2 * one) << "two buffers ping-pong; 5 intermediates share them";
}

TEST(Compiler, ExecutablesAreDeterministic) {
  for (const std::string& name : testing::all_fixture_programs()) {
    for (const CanonicalGraph& g : testing::fixture_graphs(name, 3)) {
      std::string a = serialize_executable(compile(g));
      std::string b = serialize_executable(compile(g));
      EXPECT_EQ(a, b) << name;
      Result<Executable> back = parse_executable(a);
      ASSERT_TRUE(back.is_ok()) << name << ": " << back.status().to_string();
      EXPECT_EQ(serialize_executable(*back), a) << name;
      EXPECT_EQ(back->kernel_plan()->kernels, compile(g).kernel_plan()->kernels);
      EXPECT_EQ(back->kernel_plan()->slots, compile(g).kernel_plan()->slots);
      EXPECT_LT(a.size(), 64u * 1024) << "executables hold code, not data";
    }
  }
}

// Each tampering must be caught by validation: the cache is untrusted input.
TEST(Executable, ValidationCatchesTampering) {
  CanonicalGraph g = testing::fixture_graphs("mlp.trace", 1).at(0);
  const Executable good = compile(g);
  ASSERT_TRUE(good.validate().is_ok());
  auto expect_bad = [&](const char* what, auto mutate) {
    Executable e = good;
    mutate(e);
    EXPECT_EQ(e.validate().code(), StatusCode::kCorruption) << what;
  };
  size_t arena_slot = 0;
  while (good.kernel_plan()->slots[arena_slot].kind != Slot::Kind::kArena) ++arena_slot;
  expect_bad("offset past the arena", [&](Executable& e) { e.kernel_plan()->slots[arena_slot].offset = e.kernel_plan()->arena_bytes; });
  expect_bad("size lies", [&](Executable& e) { e.kernel_plan()->slots[arena_slot].nbytes += 4; });
  expect_bad("arena shrunk", [&](Executable& e) { e.kernel_plan()->arena_bytes /= 2; });
  expect_bad("arena inflated (would allocate 64 TiB)", [&](Executable& e) { e.kernel_plan()->arena_bytes = uint64_t{1} << 46; });
  expect_bad("misaligned offsets", [&](Executable& e) {
    for (Slot& sl : e.kernel_plan()->slots) {
      if (sl.kind == Slot::Kind::kArena) sl.offset += 1;
    }
    e.kernel_plan()->arena_bytes += 1;
  });
  expect_bad("graph key", [&](Executable& e) { e.graph_key.low ^= 1; });
  expect_bad("kernels reordered", [&](Executable& e) { std::swap(e.kernel_plan()->kernels.front(), e.kernel_plan()->kernels.back()); });
  expect_bad("kernel dropped", [&](Executable& e) { e.kernel_plan()->kernels.pop_back(); });
  expect_bad("kernel twice", [&](Executable& e) { e.kernel_plan()->kernels.push_back(e.kernel_plan()->kernels.back()); });
  expect_bad("slot missing", [&](Executable& e) { e.kernel_plan()->slots.pop_back(); });
  expect_bad("param slot", [&](Executable& e) { e.kernel_plan()->slots[e.graph.params()[0]].index = 99; });
  expect_bad("overlapping live values", [&](Executable& e) {
    // Put every arena value at offset 0: values live at the same time now share bytes.
    for (Slot& s : e.kernel_plan()->slots) {
      if (s.kind == Slot::Kind::kArena) s.offset = 0;
    }
  });
}

// The library computing each kernel is the compiler's choice, recorded in the executable: f32
// conv2d goes to oneDNN when the options ask for it, nothing else ever does, and the choice
// survives serialization; a tampered choice fails validation.
TEST(Executable, OneDnnIsRecordedForF32Conv2dOnly) {
  CanonicalGraph g = testing::fixture_graphs("convnet.trace", 1).at(0);
  auto libraries = [&](const Executable& e) {
    size_t onednn = 0, convs = 0;
    for (const Kernel& k : e.kernel_plan()->kernels) {
      // A conv2d is a kOp kernel's root or, with its epilogue, a fused kernel's first member.
      const NodeId first = k.kind == Kernel::Kind::kOp ? k.root : k.members.front();
      const bool conv = e.graph.node(first).op == OpKind::kConv2d;
      convs += conv;
      if (k.library == Kernel::Library::kOneDnn) {
        ++onednn;
        EXPECT_TRUE(conv) << "node " << k.root << " is no conv2d";
      }
    }
    return std::pair{onednn, convs};
  };
  const Executable builtin = compile(g);
  EXPECT_EQ(libraries(builtin).first, 0u) << "oneDNN only when asked";
  CompileOptions o;
  o.onednn_conv = true;
  const Executable exe = compile(g, o);
  ASSERT_TRUE(exe.validate().is_ok()) << exe.validate().to_string();
  const auto [onednn, convs] = libraries(exe);
  EXPECT_GT(convs, 0u);
  EXPECT_EQ(onednn, convs);
  Result<Executable> back = parse_executable(serialize_executable(exe));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->kernel_plan()->kernels, exe.kernel_plan()->kernels);
  EXPECT_NE(serialize_executable(exe), serialize_executable(builtin));

  Executable tampered = exe;
  for (Kernel& k : tampered.kernel_plan()->kernels) {
    if (k.library == Kernel::Library::kBuiltin) {
      k.library = Kernel::Library::kOneDnn;
      break;
    }
  }
  EXPECT_EQ(tampered.validate().code(), StatusCode::kCorruption);
}

// f32 matmul and linear go to oneDNN's matmul when the options ask for it; an integer matmul,
// and any other op, never do; the choice survives serialization, and a tampered one (an i32
// matmul or an elementwise kernel marked kOneDnn) fails validation.
TEST(Executable, OneDnnIsRecordedForF32MatmulAndLinearOnly) {
  CanonicalGraph g = graph_of([](Tensor x, Tensor w) {
    Tensor xi = cast(x, DType::kI32), wi = cast(w, DType::kI32);
    return std::vector<Tensor>{tanh(matmul(x, w)), linear(x, w, sum(w, {0})), matmul(xi, wi)};
  });
  auto onednn_ops = [&](const Executable& e) {
    std::vector<std::pair<OpKind, DType>> ops;
    for (const Kernel& k : e.kernel_plan()->kernels) {
      if (k.library == Kernel::Library::kOneDnn) ops.emplace_back(e.graph.node(k.root).op, e.graph.node(k.root).dtype);
    }
    std::sort(ops.begin(), ops.end());
    return ops;
  };
  EXPECT_TRUE(onednn_ops(compile(g)).empty()) << "oneDNN only when asked";
  CompileOptions conv_only;
  conv_only.onednn_conv = true;
  EXPECT_TRUE(onednn_ops(compile(g, conv_only)).empty()) << "onednn_conv alone leaves matmul to BLAS";
  CompileOptions o;
  o.onednn_matmul = true;
  const Executable exe = compile(g, o);
  ASSERT_TRUE(exe.validate().is_ok()) << exe.validate().to_string();
  std::vector<std::pair<OpKind, DType>> want{{OpKind::kMatmul, DType::kF32}, {OpKind::kLinear, DType::kF32}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(onednn_ops(exe), want);
  Result<Executable> back = parse_executable(serialize_executable(exe));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->kernel_plan()->kernels, exe.kernel_plan()->kernels);

  size_t tampered_kernels = 0;
  for (size_t i = 0; i < exe.kernel_plan()->kernels.size(); ++i) {
    if (exe.kernel_plan()->kernels[i].library == Kernel::Library::kOneDnn) continue;
    Executable tampered = exe;
    tampered.kernel_plan()->kernels[i].library = Kernel::Library::kOneDnn;
    EXPECT_EQ(tampered.validate().code(), StatusCode::kCorruption) << "kernel " << i;
    ++tampered_kernels;
  }
  EXPECT_GE(tampered_kernels, 2u);  // at least the i32 matmul and the tanh
}

// f32 conv2d_input_grad and conv2d_weight_grad go to oneDNN's backward convolutions when the
// options ask for it (onednn_conv alone does not move them); the choice survives
// serialization, and a kernel of another op marked kOneDnn fails validation.
TEST(Executable, OneDnnIsRecordedForF32ConvGradients) {
  Graph g;
  const NodeId gout = g.add_parameter({DType::kF32, {2, 4, 5, 5}});
  const NodeId w = g.add_parameter({DType::kF32, {4, 3, 3, 3}});
  const NodeId x = g.add_parameter({DType::kF32, {2, 3, 5, 5}});
  auto attrs = [](IntList last) {
    return std::vector<AttrValue>{AttrValue::of_ints({1, 1}), AttrValue::of_ints({1, 1}), AttrValue::of_ints({1, 1}),
                                  AttrValue::of_int(1), AttrValue::of_ints(std::move(last))};
  };
  const NodeId dx = g.add_node(OpKind::kConv2dInputGrad, std::vector<NodeId>{gout, w}, attrs({5, 5}),
                               {DType::kF32, {2, 3, 5, 5}});
  const NodeId dw = g.add_node(OpKind::kConv2dWeightGrad, std::vector<NodeId>{gout, x}, attrs({3, 3}),
                               {DType::kF32, {4, 3, 3, 3}});
  const NodeId scaled = g.add_node(OpKind::kNeg, std::vector<NodeId>{dx}, {}, {DType::kF32, {2, 3, 5, 5}});
  g.add_output(scaled);
  g.add_output(dw);
  const GraphKey key = hash_graph(g);
  auto onednn_ops = [&](const Executable& e) {
    std::vector<OpKind> ops;
    for (const Kernel& k : e.kernel_plan()->kernels) {
      if (k.library == Kernel::Library::kOneDnn) ops.push_back(e.graph.node(k.root).op);
    }
    return ops;
  };
  CompileOptions conv_only;
  conv_only.onednn_conv = true;
  conv_only.onednn_matmul = true;
  EXPECT_TRUE(onednn_ops(compile_graph(g, key, "cpu", "digest", conv_only)).empty());
  CompileOptions o = conv_only;
  o.onednn_conv_grad = true;
  const Executable exe = compile_graph(g, key, "cpu", "digest", o);
  ASSERT_TRUE(exe.validate().is_ok()) << exe.validate().to_string();
  EXPECT_EQ(onednn_ops(exe), (std::vector<OpKind>{OpKind::kConv2dInputGrad, OpKind::kConv2dWeightGrad}));
  Result<Executable> back = parse_executable(serialize_executable(exe));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->kernel_plan()->kernels, exe.kernel_plan()->kernels);
  Executable tampered = exe;
  for (Kernel& k : tampered.kernel_plan()->kernels) {
    if (k.library == Kernel::Library::kBuiltin) k.library = Kernel::Library::kOneDnn;  // the neg
  }
  EXPECT_EQ(tampered.validate().code(), StatusCode::kCorruption);
}

// Parameters of `g` with recognizable values, on `cpu`.
std::vector<DeviceRef> patterned_params(CpuBackend& cpu, const Graph& g) {
  std::vector<DeviceRef> params;
  for (NodeId p : g.params()) {
    const Node& n = g.node(p);
    HostBuffer b(n.dtype, n.shape);
    for (int64_t i = 0; i < b.numel(); ++i) {
      dispatch_dtype(n.dtype, [&]<typename T>() { b.data<T>()[i] = static_cast<T>((i % 7) * 0.25); });
    }
    params.push_back(*cpu.to_device(host_data(std::move(b))));
  }
  return params;
}

std::vector<std::string> output_checksums(CpuBackend& cpu, const Executable& e, std::span<const DeviceRef> params) {
  std::vector<std::string> sums;
  Result<std::vector<DeviceRef>> outs = cpu.run(e, params);
  EXPECT_TRUE(outs.is_ok()) << outs.status().to_string();
  if (outs.is_ok()) {
    for (const DeviceRef& d : *outs) sums.push_back(d->storage()->checksum());
  }
  return sums;
}

// The backend keeps a run's scratch arena for the next run (cpu_backend.h): runs of executables
// with larger and smaller arenas, in either order, compute what a fresh backend computes (an
// arena range read before its kernel wrote it would show the previous run's bytes here).
TEST(CpuBackend, KeptArenaGivesAFreshBackendsOutputs) {
  struct Case {
    Executable exe;
    std::vector<DeviceRef> params;
    std::vector<std::string> want;
  };
  std::vector<Case> cases;
  for (const std::string& name : testing::all_fixture_programs()) {
    for (const CanonicalGraph& g : testing::fixture_graphs(name, 2)) {
      CpuBackend fresh;
      Case c{*fresh.compile(g.graph, g.key, kCompilerVersion), patterned_params(fresh, g.graph), {}};
      c.want = output_checksums(fresh, c.exe, c.params);
      cases.push_back(std::move(c));
    }
  }
  ASSERT_GE(cases.size(), 10u);
  uint64_t largest = 0, smallest = UINT64_MAX;
  for (const Case& c : cases) {
    largest = std::max(largest, c.exe.kernel_plan()->arena_bytes);
    smallest = std::min(smallest, c.exe.kernel_plan()->arena_bytes);
  }
  ASSERT_LT(smallest, largest) << "the cases need arenas of different sizes";
  // Graphs whose arena is kept (cpu_backend.h: kKeptArenaBytes and up), run so that the kept
  // arena serves, is too small, and is more than four times too large.
  for (int64_t rows : {1024, 1536, 1024, 8192, 1024}) {
    RecordingExecutor exec;
    LazyContext ctx(&exec);
    HostBuffer xb(DType::kF32, {rows, 16}), w1b(DType::kF32, {16, 1024}), w2b(DType::kF32, {1024, 16});
    for (HostBuffer* b : {&xb, &w1b, &w2b}) {
      for (int64_t i = 0; i < b->numel(); ++i) b->data<float>()[i] = static_cast<float>((i % 13) - 6) * 0.125f;
    }
    {
      Tensor h = tanh(matmul(ctx.from_buffer(std::move(xb)), ctx.from_buffer(std::move(w1b))));
      Tensor out = matmul(h, ctx.from_buffer(std::move(w2b)));
      ctx.mark_step();
    }
    const CanonicalGraph& g = exec.graphs().at(0).graph;
    CpuBackend fresh;
    Case c{*fresh.compile(g.graph, g.key, kCompilerVersion), patterned_params(fresh, g.graph), {}};
    ASSERT_GE(c.exe.kernel_plan()->arena_bytes, uint64_t{4} << 20);
    c.want = output_checksums(fresh, c.exe, c.params);
    cases.push_back(std::move(c));
  }
  CpuBackend shared;
  for (int round = 0; round < 2; ++round) {
    for (const Case& c : cases) EXPECT_EQ(output_checksums(shared, c.exe, c.params), c.want);
    for (auto it = cases.rbegin(); it != cases.rend(); ++it) {
      EXPECT_EQ(output_checksums(shared, it->exe, it->params), it->want);
    }
  }
}

TEST(Executable, RandomByteFlipsNeverPassAsSomethingElse) {
  CanonicalGraph g = testing::fixture_graphs("attention.trace", 1).at(0);
  CpuBackend cpu;
  const Executable original = *cpu.compile(g.graph, g.key, kCompilerVersion);
  const std::string blob = cpu.serialize(original);
  // Parameters with recognizable values, and the original executable's outputs.
  const std::vector<DeviceRef> params = patterned_params(cpu, g.graph);
  auto checksums = [&](const Executable& e) { return output_checksums(cpu, e, params); };
  const std::vector<std::string> want = checksums(original);
  std::mt19937 rng(42);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = blob;
    size_t at = rng() % bad.size();
    bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1 + rng() % 255));
    Result<Executable> e = cpu.load(bad);
    if (!e.is_ok()) {
      EXPECT_EQ(e.status().code(), StatusCode::kCorruption);
      continue;
    }
    // A flip that still loads must be the same graph and compute the same outputs.
    ++accepted;
    EXPECT_EQ(e->graph_key, g.key);
    EXPECT_EQ(checksums(*e), want) << "flip at byte " << at;
  }
  EXPECT_LT(accepted, 3000 / 4) << "validation should reject most corruptions";
}

}  // namespace
}  // namespace tracecache
