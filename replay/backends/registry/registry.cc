#include "replay/backends/registry/registry.h"

#include <fmt/format.h>

#include <algorithm>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/eager_runner.h"
#include "replay/backends/sim/sim_backend.h"
#include "capture/core/suggest.h"

namespace tracecache {

BackendSpec parse_backend_spec(std::string_view spec) {
  BackendSpec s;
  size_t colon = spec.find(':');
  s.name = std::string(spec.substr(0, colon));
  if (colon != std::string_view::npos) s.options = std::string(spec.substr(colon + 1));
  return s;
}

Status BackendRegistry::add(BackendEntry entry) {
  if (entry.name.empty() || !entry.make || entry.conformance_specs.empty()) {
    return invalid_argument("a backend entry needs a name, a factory and a conformance spec");
  }
  if (find(entry.name)) return invalid_argument(fmt::format("backend '{}' is already registered", entry.name));
  if (entry.usage.empty()) entry.usage = entry.name;
  auto at = std::upper_bound(entries_.begin(), entries_.end(), entry.name,
                             [](const std::string& name, const BackendEntry& e) { return name < e.name; });
  entries_.insert(at, std::move(entry));
  return Status::ok();
}

const BackendEntry* BackendRegistry::find(std::string_view name) const {
  for (const BackendEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Status BackendRegistry::unknown_backend(std::string_view spec, std::span<const std::string> also) const {
  std::vector<std::string> usages(also.begin(), also.end());
  std::vector<std::string_view> names(also.begin(), also.end());
  for (const BackendEntry& e : entries_) {
    usages.push_back(e.usage);
    names.push_back(e.name);
  }
  std::sort(usages.begin(), usages.end());
  std::string list;
  for (size_t i = 0; i < usages.size(); ++i) {
    if (i > 0) list += ", ";
    list += usages[i];
  }
  return invalid_argument(fmt::format("unknown backend '{}' (available: {}){}", spec, list,
                                      did_you_mean(parse_backend_spec(spec).name, names)));
}

Result<std::unique_ptr<Backend>> BackendRegistry::create(std::string_view spec,
                                                         const BackendOptions& common) const {
  BackendSpec parsed = parse_backend_spec(spec);
  const BackendEntry* entry = find(parsed.name);
  if (!entry) return unknown_backend(spec);
  return entry->make(parsed.options, common);
}

namespace {

Status cpu_takes_no_options(std::string_view options) {
  return invalid_argument(fmt::format("backend 'cpu' takes no options (got 'cpu:{}')", options));
}

}  // namespace

void register_builtin_backends(BackendRegistry& registry) {
  BackendEntry cpu;
  cpu.name = "cpu";
  cpu.usage = "cpu";
  cpu.conformance_specs = {"cpu"};
  cpu.make = [](std::optional<std::string_view> options,
                const BackendOptions& common) -> Result<std::unique_ptr<Backend>> {
    if (options) return cpu_takes_no_options(*options);
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(CpuBackendOptions{.threads = common.threads}));
  };
  cpu.make_op_runner = [](std::optional<std::string_view> options, const BackendOptions& common,
                          Metrics* metrics) -> Result<std::unique_ptr<OpRunner>> {
    if (options) return cpu_takes_no_options(*options);
    cpu::set_threads(common.threads > 0 ? common.threads : cpu::available_cpus());
    return std::unique_ptr<OpRunner>(std::make_unique<CpuOpRunner>(metrics));
  };
  (void)registry.add(std::move(cpu));

  BackendEntry sim;
  sim.name = "sim";
  sim.usage = "sim:PRESET or sim:SPEC_FILE";
  for (const DeviceSpec& preset : device_presets()) sim.conformance_specs.push_back("sim:" + preset.name);
  // The numbers are the cpu kernels' at the process's thread count: `threads` is not applied,
  // as before the registry (sim equals cpu bitwise when both run at the same count).
  sim.make = [](std::optional<std::string_view> options,
                const BackendOptions&) -> Result<std::unique_ptr<Backend>> {
    Result<DeviceSpec> spec = resolve_device_spec(std::string(options.value_or("h100")));
    if (!spec.is_ok()) return spec.status();
    return std::unique_ptr<Backend>(std::make_unique<SimBackend>(std::move(*spec)));
  };
  (void)registry.add(std::move(sim));
}

BackendRegistry& default_backend_registry() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry;
    register_builtin_backends(*r);
    return r;
  }();
  return *registry;
}

ThreadSettings host_thread_settings() { return {.threads = cpu::threads(), .blas = cpu::blas_description()}; }

}  // namespace tracecache
