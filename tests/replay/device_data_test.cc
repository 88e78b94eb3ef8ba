// Device data and donation (capture/core/device_data.h, capture/ir/graph.h Donation): a value
// produced on a device stays there until a value read; a barrier copies nothing back and does
// not wait for the device; an in-place update (LazyContext::assign) writes into its old storage
// when nobody else holds it, with the same values as without donation.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/backends/sim/sim_backend.h"
#include "capture/ir/canonical.h"
#include "capture/reference/reference.h"
#include "capture/trace/tensor.h"
#include "replay/compile/compiler.h"
#include "replay/engine/runtime.h"
#include "store/codec/graph_codec.h"

namespace tracecache {
namespace {

BufferRef filled(const Shape& shape, uint64_t seed) {
  auto b = std::make_shared<HostBuffer>(DType::kF32, shape);
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < b->numel(); ++i) {
    b->data<float>()[i] = static_cast<float>(static_cast<double>(gen() >> 11) * 0x1.0p-53 * 4.0 - 2.0);
  }
  return b;
}

bool same_bytes(const HostBuffer& a, const HostBuffer& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

// A device whose link takes an hour: it is always behind the host, so any wait for it (a
// synchronize, a read) shows as host wait time.
DeviceSpec slow_link_spec() {
  DeviceSpec s = *find_device_preset("h100");
  s.link_latency_ns = 3'600'000'000'000;
  return s;
}

// One training-like step: w <- w * 0.5 + x (x is a new input each step).
Tensor step_of(const Tensor& w, const Tensor& x) { return add(mul(w, 0.5), x); }

TEST(DeviceData, AWeightProducedByOneStepFeedsTheNextWithoutACopy) {
  SimBackend sim(slow_link_spec());
  Metrics metrics;
  Runtime runtime(&sim, nullptr, &metrics);
  LazyOptions options;
  options.metrics = &metrics;  // value reads are counted where they happen: by the context
  LazyContext ctx(&runtime, options);
  Tensor w = ctx.from_buffer(filled({64, 64}, 1));
  Tensor x = ctx.from_buffer(filled({64, 64}, 2));
  for (int step = 0; step < 4; ++step) {
    w = step_of(w, x);
    ctx.mark_step();
  }
  // w and x went to the device once (and each step its lifted scalar 0.5, 4 bytes); nothing
  // came back and the host never waited.
  const SimSnapshot s = sim.snapshot();
  EXPECT_EQ(s.bytes_to_device, 2 * 64 * 64 * 4 + 4 * 4);
  EXPECT_EQ(s.bytes_to_host, 0);
  EXPECT_EQ(s.host_wait_ps, 0);
  EXPECT_EQ(metrics.counter(counters::kBytesToHost), 0);
  EXPECT_EQ(metrics.counter(counters::kExecutions), 4);
  EXPECT_FALSE(w.data_ptr()->in_host_memory());

  // The value read copies the weight (once) and waits for the device.
  BufferRef got = w.buffer();
  EXPECT_EQ(w.buffer(), got);
  EXPECT_EQ(sim.snapshot().bytes_to_host, 64 * 64 * 4);
  EXPECT_EQ(metrics.counter(counters::kBytesToHost), 64 * 64 * 4);
  EXPECT_GT(sim.snapshot().host_wait_ps, 0);

  // The same values as the reference evaluator.
  ReferenceExecutor ref;
  LazyContext rctx(&ref);
  Tensor rw = rctx.from_buffer(filled({64, 64}, 1));
  Tensor rx = rctx.from_buffer(filled({64, 64}, 2));
  for (int step = 0; step < 4; ++step) {
    rw = step_of(rw, rx);
    rctx.mark_step();
  }
  EXPECT_TRUE(same_bytes(*got, *rw.buffer()));
}

TEST(DeviceData, AStepWhoseOutputsNobodyReadsDoesNotSynchronize) {
  SimBackend sim(slow_link_spec());
  Runtime runtime(&sim, nullptr, nullptr);
  LazyContext ctx(&runtime);
  Tensor x = ctx.from_buffer(filled({32, 32}, 3));
  Tensor y = matmul(x, x);
  ctx.mark_step();
  EXPECT_TRUE(y.is_materialized());
  EXPECT_GT(sim.snapshot().kernels, 0);
  EXPECT_EQ(sim.snapshot().host_wait_ps, 0);
  EXPECT_EQ(sim.snapshot().bytes_to_host, 0);
  EXPECT_GT(sim.timeline().device_ready_ps(), sim.snapshot().host_ps);  // the device is still busy
}

TEST(DeviceData, CpuDataIsHostMemoryAndReadsCopyNothing) {
  CpuBackend cpu;
  Metrics metrics;
  Runtime runtime(&cpu, nullptr, &metrics);
  LazyContext ctx(&runtime);
  BufferRef host = filled({8, 8}, 4);
  Tensor x = ctx.from_buffer(host);
  Tensor y = add(x, 1.0);
  ctx.mark_step();
  EXPECT_TRUE(y.data_ptr()->in_host_memory());
  EXPECT_EQ(x.buffer(), host);  // no copy of the input
  EXPECT_EQ(y.buffer()->numel(), 64);
  EXPECT_EQ(metrics.counter(counters::kBytesToHost), 0);
  EXPECT_EQ(metrics.counter(counters::kBytesToDevice), 0);
}

// ---- donation ------------------------------------------------------------------------------

// The update of an optimizer step: w <- w * 0.5 + 1, in place (assign) or not.
void update(LazyContext& ctx, Tensor& w, bool donate) {
  Tensor next = add(mul(w, 0.5), 1.0);
  if (donate) {
    ctx.assign(w, next);
  } else {
    w = next;
  }
  ctx.mark_step();
}

TEST(Donation, IsPartOfTheKeyOnlyWhenPresent) {
  Graph trace;
  const NodeId p = trace.add_parameter({DType::kF32, Shape{4}});
  const NodeId q = trace.add_node(OpKind::kNeg, std::span<const NodeId>(&p, 1), {}, {DType::kF32, Shape{4}});
  const NodeId roots[] = {q};
  const CanonicalGraph without = canonicalize(trace, roots);
  const TraceDonation donation{q, 0};
  const CanonicalGraph with = canonicalize(trace, roots, {}, std::span(&donation, 1));
  ASSERT_EQ(with.graph.donations().size(), 1u);
  EXPECT_EQ(with.graph.donations()[0], (Donation{0, 0}));
  EXPECT_TRUE(without.graph.donations().empty());
  EXPECT_NE(with.key, without.key);
  // Without donations the encoding has no donation field at all.
  EXPECT_EQ(encode_graph(without.graph).find("donations"), std::string::npos);
  // A donation of a node that is not a root, or to a parameter the graph does not read, is dropped.
  const TraceDonation not_a_root{p, 0};
  EXPECT_EQ(canonicalize(trace, roots, {}, std::span(&not_a_root, 1)).key, without.key);

  // The stored graph keeps it; the compiled executable writes in place and survives its codec.
  Result<Graph> back = store::parse_graph(store::serialize_graph(with.graph));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(hash_graph(*back), with.key);
  Executable exe = compile_graph(with.graph, with.key, "cpu", "x");
  EXPECT_EQ(exe.kernel_plan()->slots[with.graph.outputs()[0]].kind, Slot::Kind::kDonated);
  ASSERT_TRUE(exe.validate().is_ok()) << exe.validate().message();
  Result<Executable> parsed = parse_executable(serialize_executable(exe));
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed->kernel_plan()->slots, exe.kernel_plan()->slots);
}

TEST(Donation, ValidateRefusesAnInPlaceWriteOfAParameterStillBeingRead) {
  // out = matmul(w, w) donated to w: the matmul reads w while it writes, so the compiler keeps
  // a fresh output, and a plan that writes in place anyway does not validate.
  Graph g;
  const NodeId w = g.add_parameter({DType::kF32, Shape{4, 4}});
  const NodeId ins[] = {w, w};
  const NodeId m = g.add_node(OpKind::kMatmul, ins, {}, {DType::kF32, Shape{4, 4}});
  g.add_output(m);
  g.add_donation({0, 0});
  Executable exe = compile_graph(g, hash_graph(g), "cpu", "x");
  EXPECT_EQ(exe.kernel_plan()->slots[m].kind, Slot::Kind::kOutput);
  EXPECT_TRUE(exe.validate().is_ok());
  exe.kernel_plan()->slots[m].kind = Slot::Kind::kDonated;
  Status st = exe.validate();
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("read after it is written"), std::string::npos) << st.message();

  // A donation between different types is refused by the graph check.
  Graph bad;
  const NodeId p = bad.add_parameter({DType::kF32, Shape{4}});
  const NodeId s = bad.add_node(OpKind::kSum, std::span<const NodeId>(&p, 1),
                                std::vector<AttrValue>{AttrValue::of_ints({}), AttrValue::of_bool(false)},
                                {DType::kF32, Shape{}});
  bad.add_output(s);
  bad.add_donation({0, 0});
  std::string why;
  EXPECT_FALSE(bad.check_donations(&why));
}

TEST(Donation, CpuUpdatesInPlaceWithoutASecondBuffer) {
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext ctx(&runtime);
  Tensor w = ctx.from_buffer(filled({256, 256}, 6));
  const void* storage = w.data_ptr()->identity();
  for (int step = 0; step < 3; ++step) {
    update(ctx, w, /*donate=*/true);
    EXPECT_EQ(w.data_ptr()->identity(), storage) << "step " << step;
  }
  // Without donation every step has a new buffer; the values are the same.
  LazyContext plain_ctx(&runtime);
  Tensor v = plain_ctx.from_buffer(filled({256, 256}, 6));
  for (int step = 0; step < 3; ++step) update(plain_ctx, v, /*donate=*/false);
  EXPECT_TRUE(same_bytes(*w.buffer(), *v.buffer()));

  // A value someone still reads is never overwritten: the update copies instead.
  BufferRef before = w.buffer();
  const std::vector<float> kept(before->data<float>(), before->data<float>() + before->numel());
  update(ctx, w, /*donate=*/true);
  EXPECT_NE(w.data_ptr()->identity(), before.get());
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), before->data<float>()));
}

TEST(Donation, AnInPlaceUpdateFitsADeviceSmallerThanTwiceTheTensor) {
  const Shape shape{512, 512};  // 1 MiB of f32
  const uint64_t bytes = 512 * 512 * 4;
  DeviceSpec spec = *find_device_preset("h100");
  spec.memory_capacity = bytes + bytes / 2;

  auto run = [&](bool donate, std::vector<std::string>* warnings, uint64_t* peak) {
    SimBackend sim(spec);
    Runtime runtime(&sim, nullptr, nullptr);
    LazyContext ctx(&runtime);
    Tensor w = ctx.from_buffer(filled(shape, 7));
    for (int step = 0; step < 3; ++step) update(ctx, w, donate);
    BufferRef out = w.buffer();
    *warnings = runtime.warnings();
    *peak = sim.memory_peak();
    return out;
  };
  std::vector<std::string> donated_warnings, plain_warnings;
  uint64_t donated_peak = 0, plain_peak = 0;
  BufferRef donated = run(true, &donated_warnings, &donated_peak);
  BufferRef plain = run(false, &plain_warnings, &plain_peak);
  // With donation every step ran on the device, within its capacity.
  EXPECT_TRUE(donated_warnings.empty()) << donated_warnings.front();
  EXPECT_LE(donated_peak, spec.memory_capacity);
  EXPECT_GE(donated_peak, bytes);
  // Without it the update needs a second tensor: the device is too small and the runtime fell
  // back to the reference evaluator.
  ASSERT_FALSE(plain_warnings.empty());
  EXPECT_NE(plain_warnings.front().find("out of memory"), std::string::npos) << plain_warnings.front();
  // The same values either way.
  EXPECT_TRUE(same_bytes(*donated, *plain));
}

TEST(Donation, AssignChecksItsOperandsAndWorksEagerly) {
  ReferenceExecutor ref;
  LazyContext ctx(&ref);
  Tensor w = ctx.from_buffer(filled({4}, 8));
  Tensor wrong = ctx.from_buffer(filled({5}, 8));
  EXPECT_THROW(ctx.assign(w, wrong), Error);
  // Every handle of the target sees the new value after the barrier.
  Tensor alias = w;
  w.assign(add(w, 1.0));
  EXPECT_FALSE(alias.is_materialized());
  ctx.mark_step();
  EXPECT_EQ(alias.to_vector<float>(), w.to_vector<float>());

  ReferenceOpRunner runner;
  LazyOptions eager;
  eager.eager = &runner;
  LazyContext ectx(&ref, eager);
  Tensor e = ectx.from_buffer(filled({4}, 8));
  ectx.assign(e, add(e, 1.0));
  std::vector<float> want = ctx.from_buffer(filled({4}, 8)).to_vector<float>();
  for (float& f : want) f += 1.0f;
  EXPECT_EQ(e.to_vector<float>(), want);
}

}  // namespace
}  // namespace tracecache
