// Fuzz harness: executable loading and validation (replay/compile/executable.h parse_executable, which
// validates). Properties: no crash; an executable that loads still validates and round-trips
// through serialize_executable to the same bytes; and, as validate() promises that a valid
// executable cannot read or write out of bounds, a small one runs on the cpu backend (on
// zero-filled parameters) under the sanitizers without a report.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/compile/executable.h"

using namespace tracecache;

namespace {

// Small enough to run on every input: each node at most this many elements, and the arena.
constexpr int64_t kMaxRunNumel = 1 << 14;
constexpr uint64_t kMaxRunArenaBytes = 1 << 20;

bool small_enough_to_run(const Executable& exe) {
  if (exe.kernel_plan()->arena_bytes > kMaxRunArenaBytes) return false;
  for (size_t n = 0; n < exe.graph.size(); ++n) {
    int64_t numel = 1;
    for (int64_t d : exe.graph.node(static_cast<NodeId>(n)).shape) {
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel) || numel > kMaxRunNumel) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<Executable> exe = parse_executable(bytes);
  if (!exe.is_ok()) return 0;
  if (!exe.value().validate().is_ok()) std::abort();
  const std::string encoded = serialize_executable(exe.value());
  Result<Executable> again = parse_executable(encoded);
  if (!again.is_ok() || serialize_executable(again.value()) != encoded) std::abort();

  if (!small_enough_to_run(exe.value())) return 0;
  CpuBackend cpu;
  std::vector<DeviceRef> params;
  for (NodeId p : exe.value().graph.params()) {
    const Node& node = exe.value().graph.node(p);
    Result<DeviceRef> param = cpu.to_device(host_data(HostBuffer(node.dtype, node.shape)));
    if (!param.is_ok()) return 0;
    params.push_back(param.value());
  }
  (void)cpu.run(exe.value(), params);
  return 0;
}
