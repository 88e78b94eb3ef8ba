// Guard entries that survive restarts (issue 4, part 5): a new runtime on the same database
// runs the first call of a compiled function with zero traces and zero compiles.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <tuple>
#include <utility>

#include "replay/engine/compiled_function.h"
#include "replay/guards/guard_entry_codec.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "store/codec/proto/tracecache.pb.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

using testing::TempDir;

// One "process": a backend, a database handle, a runtime, a context, and the function.
struct Process {
  explicit Process(const std::string& db_path, std::string user_version = "v1")
      : db(std::move(store::CacheDb::open({.path = db_path})).value_or_throw()),
        runtime(&cpu, db.get(), &metrics),
        ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics}),
        f("step", fn(&fn_calls), &runtime, options(std::move(user_version))) {}

  static TracedFn fn(int* calls) {
    return [calls](LazyContext&, const TraceArgs& a) {
      ++*calls;
      Tensor h = relu(add(matmul(a.tensor(0), a.tensor(1)), a.scalar(0)));
      Tensor s = sum(h);
      if (s.item() >= 0) return std::vector<Tensor>{h, mul(s, 2.0)};  // a value read: 2 segments
      return std::vector<Tensor>{h, s};
    };
  }
  static CompiledFunctionOptions options(std::string user_version) {
    CompiledFunctionOptions o;
    o.user_version = std::move(user_version);
    o.input_names = {"x", "w"};
    return o;
  }

  std::vector<std::string> call(int batch) {
    HostBuffer x(DType::kF32, {batch, 3}), w(DType::kF32, {3, 2});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 1;
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.5f * static_cast<float>(i);
    auto out = f(ctx, {{ctx.from_buffer(std::move(x)), ctx.from_buffer(std::move(w))}, {0.25}});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    std::vector<std::string> sums;
    if (out.is_ok()) {
      for (const Tensor& t : *out) sums.push_back(t.buffer()->checksum());
    }
    return sums;
  }

  CpuBackend cpu;
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  Runtime runtime;
  LazyContext ctx;
  int fn_calls = 0;
  CompiledFunction f;
};

TEST(PersistentGuards, AWarmCacheMeansZeroTracesAndZeroCompiles) {
  TempDir dir;
  std::vector<std::string> first8, first16;
  {
    Process p(dir.db());
    first8 = p.call(8);
    first16 = p.call(16);
    p.call(8);
    EXPECT_EQ(p.fn_calls, 2);
    EXPECT_EQ(p.f.stats().recompiles, 1);
    EXPECT_GT(p.metrics.counter(counters::kCompiles), 0);
  }
  Process q(dir.db());
  EXPECT_EQ(q.f.num_entries(), 2u);
  EXPECT_EQ(q.call(16), first16);
  EXPECT_EQ(q.call(8), first8);
  EXPECT_EQ(q.fn_calls, 0);
  EXPECT_EQ(q.metrics.counter(counters::kTraces), 0);
  EXPECT_EQ(q.metrics.counter(counters::kCompiles), 0);
  EXPECT_GT(q.metrics.counter(counters::kHitsDisk), 0);
  q.f.flush();
  auto audit = q.db->function_audit();
  ASSERT_TRUE(audit.is_ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].entries.size(), 2u);
  EXPECT_EQ((*audit)[0].entries[0].hits + (*audit)[0].entries[1].hits, 3) << "1 hit in the first process, 2 here";
}

TEST(PersistentGuards, AnotherUserVersionNeverUsesTheEntries) {
  TempDir dir;
  { Process p(dir.db(), "v1"); p.call(4); }
  Process q(dir.db(), "v2");
  EXPECT_EQ(q.f.num_entries(), 0u);
  q.call(4);
  EXPECT_EQ(q.fn_calls, 1);
}

TEST(PersistentGuards, ACorruptStoredEntryIsDroppedAndRetraced) {
  TempDir dir;
  std::vector<std::string> want;
  { Process p(dir.db()); want = p.call(4); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(dir.db().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE functions SET blob = randomblob(length(blob))", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  Process q(dir.db());
  EXPECT_EQ(q.f.num_entries(), 0u);
  EXPECT_EQ(q.call(4), want);
  EXPECT_EQ(q.fn_calls, 1);
  int corrupt = 0;
  for (const auto& e : q.runtime.events()) corrupt += e.kind == store::EventKind::kCorrupt;
  EXPECT_EQ(corrupt, 1);
}

TEST(PersistentGuards, AStoredEntryWithBadRoutingFallsBackSafely) {
  // A stored entry whose checksum matches but whose routing names a segment output that does
  // not exist: dropped at replay, never a crash.
  TempDir dir;
  std::vector<std::string> want;
  { Process p(dir.db()); want = p.call(4); }
  {
    auto db = std::move(store::CacheDb::open({.path = dir.db()})).value_or_throw();
    store::FunctionKey key{"step", "v1", std::string(kToolkitVersion)};
    auto rows = db->function_entries(key);
    ASSERT_TRUE(rows.is_ok());
    ASSERT_EQ(rows->size(), 1u);
    std::string blob = (*rows)[0].blob;
    // Find an output source routed to segment 0 (kind 2 = segment output) and point it at a
    // far output index: rewrite through the proto message.
    proto::GuardEntry pe;
    ASSERT_TRUE(pe.ParseFromString(blob));
    bool changed = false;
    for (auto& v : *pe.mutable_outputs()) {
      if (v.kind() == 2) {
        v.set_b(999);
        changed = true;
      }
    }
    ASSERT_TRUE(changed);
    ASSERT_TRUE(db->put_function_entry(key, 0, pe.SerializeAsString()).is_ok());
  }
  Process q(dir.db());
  EXPECT_EQ(q.call(4), want);
  EXPECT_EQ(q.fn_calls, 1) << "the bad entry was dropped and the call traced";
}

// An entry of an older format (here: format 3, from before entries recorded argument updates)
// found under the current key is refused as a whole: a corrupt event and a trace, never read
// as if it were of this format.
TEST(PersistentGuards, AnOldFormatEntryIsRefusedNotMisread) {
  TempDir dir;
  std::vector<std::string> want;
  { Process p(dir.db()); want = p.call(4); }
  {
    auto db = std::move(store::CacheDb::open({.path = dir.db()})).value_or_throw();
    store::FunctionKey key{"step", "v1", std::string(kToolkitVersion)};
    auto rows = db->function_entries(key);
    ASSERT_TRUE(rows.is_ok());
    ASSERT_EQ(rows->size(), 1u);
    proto::GuardEntry pe;
    ASSERT_TRUE(pe.ParseFromString((*rows)[0].blob));
    ASSERT_EQ(pe.format_version(), kGuardEntryFormat);
    pe.set_format_version(kGuardEntryFormat - 1);
    Result<GuardEntry> decoded = decode_guard_entry(pe.SerializeAsString());
    ASSERT_FALSE(decoded.is_ok());
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption);
    EXPECT_NE(decoded.status().message().find(fmt::format("format {}, expected {}", kGuardEntryFormat - 1, kGuardEntryFormat)),
              std::string::npos) << decoded.status().message();
    ASSERT_TRUE(db->put_function_entry(key, 0, pe.SerializeAsString()).is_ok());
  }
  Process q(dir.db());
  EXPECT_EQ(q.f.num_entries(), 0u);
  EXPECT_EQ(q.call(4), want);
  EXPECT_EQ(q.fn_calls, 1);
  int corrupt = 0;
  for (const auto& e : q.runtime.events()) corrupt += e.kind == store::EventKind::kCorrupt;
  EXPECT_EQ(corrupt, 1);
}

// The argument updates of an entry (donation) are stored and read back; forged ones (out of
// range, twice, of another type than the argument) are refused.
TEST(PersistentGuards, ArgumentUpdatesAreStoredAndForgedOnesRefused) {
  TempDir dir;
  auto db = std::move(store::CacheDb::open({.path = dir.db()})).value_or_throw();
  CpuBackend cpu;
  Runtime runtime(&cpu, db.get(), nullptr);
  LazyContext ctx(&runtime);
  CompiledFunctionOptions o;
  o.user_version = "sgd";
  o.updates = {{.output = 1, .argument = 0}};
  {
    CompiledFunction f("sgd", [](LazyContext&, const TraceArgs& a) {
      Tensor nw = sub(a.tensor(0), a.tensor(1));
      return std::vector<Tensor>{sum(nw), nw};
    }, &runtime, o);
    HostBuffer w(DType::kF32, {3}), g(DType::kF32, {3});
    ASSERT_TRUE(f(ctx, {{ctx.from_buffer(std::move(w)), ctx.from_buffer(std::move(g))}, {}}).is_ok());
  }
  auto rows = db->function_entries({"sgd", "sgd", std::string(kToolkitVersion)});
  ASSERT_TRUE(rows.is_ok());
  ASSERT_EQ(rows->size(), 1u);
  const std::string blob = (*rows)[0].blob;
  Result<GuardEntry> e = decode_guard_entry(blob);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  ASSERT_EQ(e->updates.size(), 1u);
  EXPECT_EQ(e->updates[0], (ArgumentUpdate{.output = 1, .argument = 0}));
  EXPECT_EQ(encode_guard_entry(*e), blob);
  auto forged = [&](uint32_t output, uint32_t argument, bool twice) {
    proto::GuardEntry pe;
    EXPECT_TRUE(pe.ParseFromString(blob));
    pe.mutable_updates(0)->set_output(output);
    pe.mutable_updates(0)->set_argument(argument);
    if (twice) *pe.add_updates() = pe.updates(0);
    return decode_guard_entry(pe.SerializeAsString());
  };
  EXPECT_TRUE(forged(1, 0, false).is_ok());
  for (auto [output, argument, twice] : {std::tuple{1u, 2u, false}, std::tuple{2u, 0u, false}, std::tuple{1u, 0u, true},
                                         std::tuple{0u, 0u, false}}) {
    Result<GuardEntry> bad = forged(output, argument, twice);
    ASSERT_FALSE(bad.is_ok()) << output << " " << argument << " " << twice;
    EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  }
}

// An entry's note (CompiledFunctionOptions::entry_note): what the trace's callback returned is
// given by last_note() for every call the entry serves, also in a new process that never
// traces; each entry keeps its own; a stored note over the limit makes the entry corrupt.
struct NoteProcess {
  explicit NoteProcess(const std::string& db_path)
      : db(std::move(store::CacheDb::open({.path = db_path})).value_or_throw()),
        runtime(&cpu, db.get(), &metrics),
        ctx(&runtime, LazyOptions{.canonicalize = {}, .metrics = &metrics}),
        f("noted", [this](LazyContext&, const TraceArgs& a) {
            ++traces;
            pending = fmt::format("rows={}", a.tensor(0).shape()[0]);
            return std::vector<Tensor>{relu(a.tensor(0))};
          }, &runtime, options(this)) {}
  static CompiledFunctionOptions options(NoteProcess* p) {
    CompiledFunctionOptions o;
    o.user_version = "v1";
    o.automatic_dynamic = false;
    o.entry_note = [p] { return std::exchange(p->pending, std::string()); };
    return o;
  }
  std::string call(int rows) {
    HostBuffer x(DType::kF32, {rows, 2});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i) - 3;
    auto out = f(ctx, {{ctx.from_buffer(std::move(x))}, {}});
    EXPECT_TRUE(out.is_ok()) << out.status().to_string();
    return f.last_note();
  }
  CpuBackend cpu;
  Metrics metrics;
  std::unique_ptr<store::CacheDb> db;
  Runtime runtime;
  LazyContext ctx;
  int traces = 0;
  std::string pending;
  CompiledFunction f;
};

TEST(PersistentGuards, EntryNotesAreKeptPerEntryAndSurviveRestarts) {
  TempDir dir;
  {
    NoteProcess p(dir.db());
    EXPECT_EQ(p.f.last_note(), "");
    EXPECT_EQ(p.call(2), "rows=2");
    EXPECT_EQ(p.call(3), "rows=3");
    EXPECT_EQ(p.call(2), "rows=2") << "a replay gives the note of the entry that served it";
    EXPECT_EQ(p.traces, 2);
  }
  NoteProcess q(dir.db());
  EXPECT_EQ(q.call(3), "rows=3");
  EXPECT_EQ(q.call(2), "rows=2");
  EXPECT_EQ(q.traces, 0) << "the notes came from the cache";
}

TEST(PersistentGuards, AStoredNoteOverTheLimitIsCorrupt) {
  TempDir dir;
  { NoteProcess p(dir.db()); p.call(2); }
  {
    auto db = std::move(store::CacheDb::open({.path = dir.db()})).value_or_throw();
    store::FunctionKey key{"noted", "v1", std::string(kToolkitVersion)};
    auto rows = db->function_entries(key);
    ASSERT_TRUE(rows.is_ok());
    ASSERT_EQ(rows->size(), 1u);
    proto::GuardEntry pe;
    ASSERT_TRUE(pe.ParseFromString((*rows)[0].blob));
    EXPECT_EQ(pe.note(), "rows=2");
    pe.set_note(std::string(kMaxGuardEntryNoteBytes + 1, 'x'));
    Result<GuardEntry> decoded = decode_guard_entry(pe.SerializeAsString());
    ASSERT_FALSE(decoded.is_ok());
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption);
    ASSERT_TRUE(db->put_function_entry(key, 0, pe.SerializeAsString()).is_ok());
  }
  NoteProcess q(dir.db());
  EXPECT_EQ(q.call(2), "rows=2") << "the bad entry was dropped and the call traced";
  EXPECT_EQ(q.traces, 1);
}

TEST(PersistentGuards, ATraceWithANoteOverTheLimitFails) {
  TempDir dir;
  NoteProcess p(dir.db());
  CompiledFunctionOptions o;
  o.entry_note = [] { return std::string(kMaxGuardEntryNoteBytes + 1, 'x'); };
  CompiledFunction g("big_note", [](LazyContext&, const TraceArgs& a) { return std::vector<Tensor>{relu(a.tensor(0))}; },
                     &p.runtime, o);
  HostBuffer x(DType::kF32, {1, 2});
  auto out = g(p.ctx, {{p.ctx.from_buffer(std::move(x))}, {}});
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("note"), std::string::npos) << out.status().message();
  EXPECT_EQ(g.num_entries(), 0u);
}

}  // namespace
}  // namespace tracecache
