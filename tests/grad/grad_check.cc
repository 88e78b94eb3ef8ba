// grad_check: tracecache's gradients against PyTorch's, case by case.
//
// Usage: grad_check [--require-coverage] DIR...
//   Each DIR is a case folder written by tests/grad/torch_grads.py (it holds manifest.txt) or a
//   folder of such folders. tests/cli/grad_torch.sh runs the generator and then this.
//
// For every case, in each of four modes (eager on the reference and on the cpu op runners; lazy
// through the reference evaluator and through the Runtime on the cpu backend), the checker
// loads the case's program (load_program, StepArguments), sets requires_grad on every f32 input,
// records the op lines, takes loss = sum(y * upstream) and grad(loss, inputs), and compares:
//   - y with PyTorch's result (a case whose program and torch lambda disagree is reported as
//     such, not as a gradient bug), and
//   - every gradient with PyTorch's: |got - want| <= 1e-4 |want| + atol per element, with
//     atol = 1e-5 (max |want| + 1) over the gradient's finite elements. Where PyTorch's value is
//     not finite (0^-1, the log of a negative base) the same inf or a NaN is required.
// The bound covers the f32 rounding of the backward graph (a few ulp per op, and accumulation
// order in sums and matmuls, 1e-4 relative at most for these sizes) and the absolute term covers
// elements that cancel to about zero.
//
// Cases without "ties" inputs also get a directional finite-difference check, independent of
// PyTorch: with the f32 pipeline (eager, reference kernels), inputs moved to x +- eps d along the
// case's direction d (eps = kFdEps), the central difference of the loss (summed in double from
// the f32 results) must match the gradient's dot product with the perturbation actually applied
// (the f32-rounded x + eps d minus x - eps d, over 2 eps) within
//   kFdRtol * sum |g_i d_i| + kFdRound * (sum |y+ R| + sum |y- R|) / (2 eps) + 1e-6:
// the first term is the step's truncation error (torch_grads.py draws inputs whose float64
// central difference at this eps is within 5e-4 sum |g_i d_i| of it, so no kink lies inside
// the step), the second the f32 rounding of the forward results (16 ulp of each loss term).
//
// With --require-coverage every op that has a gradient rule (OpInfo::grad) must appear in some
// case's program; an op with a rule and no case is an error naming the op.
//
// Prints one line per case and a summary per case family (the cases_<family>.py file); exits 0
// when everything matches, 1 naming case, mode, input and worst element for any mismatch or
// uncovered op, 2 on bad arguments or unreadable cases.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/eager_runner.h"
#include "capture/ops/ops.h"
#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "frontend/files/npy.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "replay/engine/runtime.h"

namespace tracecache {
namespace {

constexpr double kRtol = 1e-4;
constexpr double kAtolScale = 1e-5;
constexpr double kFdEps = 1e-2;  // keep equal to FD_EPS in torch_grads.py
constexpr double kFdRtol = 2e-3;
constexpr double kFdRound = 16 * 0x1.0p-24;

namespace fs = std::filesystem;

struct Case {
  std::string name;
  std::string family;
  fs::path dir;
  Program program;
  bool fd = false;
  std::vector<size_t> diff;  // indices into program.tensors of the differentiated inputs
  HostBuffer output, upstream;
  std::vector<HostBuffer> want, direction;  // per diff entry
};

HostBuffer read_npy_or_throw(const fs::path& path) { return std::move(read_npy(path.string())).value_or_throw(); }

Case load_case(const fs::path& dir) {
  Case c;
  c.dir = dir;
  std::ifstream manifest(dir / "manifest.txt");
  if (!manifest) throw Error(not_found(fmt::format("{}: no manifest.txt", dir.string())));
  std::vector<std::string> diff_names;
  std::string key, value;
  while (manifest >> key >> value) {
    if (key == "case") c.name = value;
    else if (key == "family") c.family = value;
    else if (key == "fd") c.fd = value == "1";
    else if (key == "diff") diff_names.push_back(value);
    else throw Error(invalid_argument(fmt::format("{}: manifest.txt: unknown key '{}'", dir.string(), key)));
  }
  if (c.name.empty()) throw Error(invalid_argument(fmt::format("{}: manifest.txt names no case", dir.string())));
  c.program = std::move(load_program((dir / "program.trace").string())).value_or_throw();
  // The differentiated inputs are exactly the f32 ones, in declaration order.
  for (size_t i = 0; i < c.program.tensors.size(); ++i) {
    if (c.program.tensors[i].dtype == DType::kF32) c.diff.push_back(i);
  }
  std::vector<std::string> declared;
  for (size_t i : c.diff) declared.push_back(c.program.tensors[i].name);
  if (declared != diff_names) {
    throw Error(invalid_argument(fmt::format("{}: manifest.txt's diff list does not match the f32 inputs", dir.string())));
  }
  if (c.program.outputs.size() != 1) {
    throw Error(invalid_argument(fmt::format("{}: the program must have one output", dir.string())));
  }
  c.output = read_npy_or_throw(dir / "output.npy");
  c.upstream = read_npy_or_throw(dir / "upstream.npy");
  for (const std::string& name : diff_names) {
    c.want.push_back(read_npy_or_throw(dir / ("grad_" + name + ".npy")));
    if (c.fd) c.direction.push_back(read_npy_or_throw(dir / ("direction_" + name + ".npy")));
  }
  return c;
}

// ---- the four modes ----

enum class Mode { kEagerReference, kEagerCpu, kLazyReference, kLazyCpu };
constexpr Mode kModes[] = {Mode::kEagerReference, Mode::kEagerCpu, Mode::kLazyReference, Mode::kLazyCpu};

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kEagerReference: return "eager-reference";
    case Mode::kEagerCpu: return "eager-cpu";
    case Mode::kLazyReference: return "lazy-reference";
    case Mode::kLazyCpu: return "lazy-cpu";
  }
  return "?";
}

// Fails every call: an eager context never reaches its executor.
class NoExecutor final : public GraphExecutor {
 public:
  Result<std::vector<DataRef>> execute(const CanonicalGraph&, std::vector<DataRef>) override {
    return internal_error("an eager context called its executor");
  }
};

// A LazyContext of one mode with what it runs on (as tests/replay/eager_test.cc builds them).
class Harness {
 public:
  explicit Harness(Mode mode) {
    LazyOptions options;
    GraphExecutor* executor = &none_;
    switch (mode) {
      case Mode::kEagerReference: options.eager = &reference_runner_; break;
      case Mode::kEagerCpu: options.eager = &cpu_runner_; break;
      case Mode::kLazyReference: executor = &reference_; break;
      case Mode::kLazyCpu:
        runtime_ = std::make_unique<Runtime>(&cpu_, /*db=*/nullptr, /*metrics=*/nullptr);
        executor = runtime_.get();
        break;
    }
    ctx_ = std::make_unique<LazyContext>(executor, options);
  }
  LazyContext& ctx() { return *ctx_; }

 private:
  NoExecutor none_;
  ReferenceOpRunner reference_runner_;
  CpuOpRunner cpu_runner_;
  ReferenceExecutor reference_;
  CpuBackend cpu_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<LazyContext> ctx_;  // destroyed first
};

BufferRef shared_copy(const HostBuffer& b) { return std::make_shared<HostBuffer>(b.clone()); }

struct Run {
  BufferRef y;
  std::vector<BufferRef> grads;  // per diff entry
};

// The case's program on `args` (one tensor per program.tensors entry): its result.
Tensor record(const Case& c, LazyContext& ctx, const std::vector<Tensor>& args) {
  std::vector<Tensor> outs =
      std::move(record_step(c.program, ctx, step_dim_values(c.program, 0), args)).value_or_throw();
  return outs.at(0);
}

Run run_mode(const Case& c, Mode mode) {
  Harness h(mode);
  LazyContext& ctx = h.ctx();
  StepArguments made(c.program, ctx);
  std::vector<Tensor> args = std::move(made.make(0)).value_or_throw();
  std::vector<Tensor> wrt;
  for (size_t i : c.diff) wrt.push_back(args[i].set_requires_grad(true));
  Tensor y = record(c, ctx, args);
  Tensor loss = sum(mul(y, ctx.from_buffer(shared_copy(c.upstream))));
  // A result that depends on the inputs only through comparisons carries no tape: its
  // gradients are zeros, as PyTorch's None.
  std::vector<Tensor> g;
  if (loss.requires_grad()) {
    g = grad(loss, wrt);
  } else {
    for (const Tensor& w : wrt) g.push_back(full(ctx, w.shape(), 0.0));
  }
  ctx.mark_step();
  Run r{y.buffer(), {}};
  for (const Tensor& t : g) r.grads.push_back(t.buffer());
  return r;
}

// ---- comparison ----

struct Worst {
  double rel = 0;          // |got - want| / (|want| + atol), the figure reported
  double over = -1;        // |got - want| / bound, > 1 fails
  int64_t element = -1;
  std::string index;       // of `element`
  double got = 0, want = 0, bound = 0;
  std::string problem;     // set when the comparison fails for a reason other than the bound
};

// "[1, 2]": the index of flat element `i` of `shape` (row-major).
std::string index_of(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const int64_t n = std::max<int64_t>(shape[d], 1);
    idx[static_cast<size_t>(d)] = i % n;
    i /= n;
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

Worst compare(const HostBuffer& got, const HostBuffer& want) {
  Worst w;
  if (got.dtype() != DType::kF32 || want.dtype() != DType::kF32 || !(got.shape() == want.shape())) {
    w.problem = fmt::format("type {} where PyTorch has {}", type_to_string({got.dtype(), got.shape()}),
                            type_to_string({want.dtype(), want.shape()}));
    return w;
  }
  double max_want = 0;
  for (float v : want.span<float>()) {
    if (std::isfinite(v)) max_want = std::max(max_want, static_cast<double>(std::fabs(v)));
  }
  const double atol = kAtolScale * (max_want + 1);
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data<float>()[i], x = want.data<float>()[i];
    if (!std::isfinite(x)) {
      const bool same = std::isnan(x) ? std::isnan(g) : g == x;
      if (!same && w.problem.empty()) {
        w.problem = fmt::format("element {}: got {}, PyTorch {}", index_of(want.shape(), i), g, x);
        w.element = i;
      }
      continue;
    }
    const double err = std::isfinite(g) ? std::fabs(g - x) : std::numeric_limits<double>::infinity();
    const double bound = kRtol * std::fabs(x) + atol;
    const double over = err / bound;
    if (over > w.over) {
      w.over = over;
      w.rel = err / (std::fabs(x) + atol);
      w.element = i;
      w.index = index_of(want.shape(), i);
      w.got = g;
      w.want = x;
      w.bound = bound;
    }
  }
  return w;
}

bool failed(const Worst& w) { return !w.problem.empty() || w.over > 1; }

std::string describe(const Worst& w) {
  if (!w.problem.empty()) return w.problem;
  return fmt::format("element {}: got {:.9g}, PyTorch {:.9g}, |diff| {:.3g} > bound {:.3g}", w.index, w.got,
                     w.want, std::fabs(w.got - w.want), w.bound);
}

// ---- finite differences ----

struct FdResult {
  double rel = 0;  // |fd - analytic| / tolerance
  double fd = 0, analytic = 0, tolerance = 0;
};

FdResult finite_difference(const Case& c, const std::vector<BufferRef>& grads) {
  Harness h(Mode::kEagerReference);
  LazyContext& ctx = h.ctx();
  StepArguments made(c.program, ctx);
  std::vector<Tensor> base = std::move(made.make(0)).value_or_throw();
  // The f32 inputs at x + sign eps d, kept to measure the perturbation actually applied.
  auto moved = [&](double sign) {
    std::vector<HostBuffer> out;
    for (size_t k = 0; k < c.diff.size(); ++k) {
      HostBuffer b = base[c.diff[k]].buffer()->clone();
      const float* d = c.direction[k].data<float>();
      for (int64_t e = 0; e < b.numel(); ++e) {
        b.data<float>()[e] = static_cast<float>(b.data<float>()[e] + sign * kFdEps * d[e]);
      }
      out.push_back(std::move(b));
    }
    return out;
  };
  std::vector<HostBuffer> plus = moved(1), minus = moved(-1);
  // sum(y * R) in double, and sum |y * R|.
  auto loss_at = [&](const std::vector<HostBuffer>& inputs, double* magnitude) {
    std::vector<Tensor> args = base;
    for (size_t k = 0; k < c.diff.size(); ++k) args[c.diff[k]] = ctx.from_buffer(shared_copy(inputs[k]));
    BufferRef y = record(c, ctx, args).buffer();
    double total = 0;
    for (int64_t e = 0; e < y->numel(); ++e) {
      const double term = static_cast<double>(y->data<float>()[e]) * c.upstream.data<float>()[e];
      total += term;
      *magnitude += std::fabs(term);
    }
    return total;
  };
  double magnitude = 0;
  const double fd = (loss_at(plus, &magnitude) - loss_at(minus, &magnitude)) / (2 * kFdEps);
  double analytic = 0, scale = 0;
  for (size_t k = 0; k < c.diff.size(); ++k) {
    for (int64_t e = 0; e < plus[k].numel(); ++e) {
      const double step = (static_cast<double>(plus[k].data<float>()[e]) - minus[k].data<float>()[e]) / (2 * kFdEps);
      const double term = static_cast<double>(grads[k]->data<float>()[e]) * step;
      analytic += term;
      scale += std::fabs(term);
    }
  }
  FdResult r;
  r.fd = fd;
  r.analytic = analytic;
  r.tolerance = kFdRtol * scale + kFdRound * magnitude / (2 * kFdEps) + 1e-6;
  r.rel = std::fabs(fd - analytic) / r.tolerance;
  return r;
}

// ---- driver ----

struct FamilySummary {
  int cases = 0;
  double worst_rel = 0;
  std::string worst_case;
  double worst_fd = 0;
};

std::vector<fs::path> case_dirs(const std::vector<std::string>& roots) {
  std::vector<fs::path> dirs;
  for (const std::string& root : roots) {
    if (fs::exists(fs::path(root) / "manifest.txt")) {
      dirs.emplace_back(root);
      continue;
    }
    if (!fs::is_directory(root)) throw Error(not_found(fmt::format("{}: not a case folder or a folder of them", root)));
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.is_directory() && fs::exists(e.path() / "manifest.txt")) found.push_back(e.path());
    }
    std::sort(found.begin(), found.end());
    dirs.insert(dirs.end(), found.begin(), found.end());
  }
  return dirs;
}

int check_all(const std::vector<std::string>& roots, bool require_coverage) {
  std::vector<fs::path> dirs = case_dirs(roots);
  if (dirs.empty()) {
    fmt::print(stderr, "grad_check: no case folders under the given paths\n");
    return 2;
  }
  int failures = 0;
  std::set<std::string> covered;
  std::map<std::string, FamilySummary> families;
  for (const fs::path& dir : dirs) {
    Case c = load_case(dir);
    for (const OpStmt& s : c.program.ops) covered.insert(std::string(op_info(s.op).name));
    FamilySummary& fam = families[c.family.empty() ? "?" : c.family];
    ++fam.cases;
    std::string failure;
    Worst worst;
    std::string worst_where;
    std::vector<BufferRef> reference_grads;
    for (Mode mode : kModes) {
      Run run;
      try {
        run = run_mode(c, mode);
      } catch (const std::exception& e) {
        failure = fmt::format("{}: {}", mode_name(mode), e.what());
        break;
      }
      Worst fw = compare(*run.y, c.output);
      if (failed(fw)) {
        failure = fmt::format("{}: the forward result differs from PyTorch's (the program and the torch lambda "
                              "disagree?): {}", mode_name(mode), describe(fw));
        break;
      }
      for (size_t k = 0; k < c.diff.size(); ++k) {
        Worst w = compare(*run.grads[k], c.want[k]);
        const std::string where = fmt::format("{}, grad of {}", mode_name(mode), c.program.tensors[c.diff[k]].name);
        if (failed(w)) {
          failure = fmt::format("{}: {}", where, describe(w));
          break;
        }
        if (w.rel >= worst.rel) {
          worst = w;
          worst_where = fmt::format("{}{}", where, w.index);
        }
      }
      if (!failure.empty()) break;
      if (mode == Mode::kEagerReference) reference_grads = run.grads;
    }
    std::string fd_text = c.diff.empty() ? "fd not checked (no f32 input)" : "fd not checked (ties)";
    if (failure.empty() && c.fd) {
      try {
        FdResult fd = finite_difference(c, reference_grads);
        if (!(fd.rel <= 1)) {
          failure = fmt::format("finite differences: central difference {:.9g}, gradient . direction {:.9g}, "
                                "|diff| {:.3g} > tolerance {:.3g}", fd.fd, fd.analytic, std::fabs(fd.fd - fd.analytic),
                                fd.tolerance);
        }
        fd_text = fmt::format("fd err/tol {:.2g}", fd.rel);
        fam.worst_fd = std::max(fam.worst_fd, fd.rel);
      } catch (const std::exception& e) {
        failure = fmt::format("finite differences: {}", e.what());
      }
    }
    if (!failure.empty()) {
      ++failures;
      fmt::print("FAIL {}: {}\n", c.name, failure);
      continue;
    }
    if (worst.rel >= fam.worst_rel) {
      fam.worst_rel = worst.rel;
      fam.worst_case = c.name;
    }
    fmt::print("ok   {:<32} worst rel err {:.2g} ({})  {}\n", c.name, worst.rel,
               worst_where.empty() ? "no gradient" : worst_where, fd_text);
  }
  for (const auto& [name, fam] : families) {
    fmt::print("family {}: {} cases, worst relative gradient error {:.2g} ({}), worst fd err/tolerance {:.2g}\n",
               name, fam.cases, fam.worst_rel, fam.worst_case, fam.worst_fd);
  }
  std::vector<std::string> missing;
  std::string with_rule;
  for (const OpInfo& op : all_ops()) {
    if (!op.grad) continue;
    with_rule += fmt::format(" {}", op.name);
    if (!covered.contains(std::string(op.name))) missing.emplace_back(op.name);
  }
  fmt::print("ops with a gradient rule:{}\n", with_rule);
  fmt::print("{} of {} cases ok\n", dirs.size() - static_cast<size_t>(failures), dirs.size());
  bool uncovered = false;
  if (require_coverage) {
    for (const std::string& op : missing) {
      uncovered = true;
      fmt::print("FAIL op '{}' has a gradient rule and no PyTorch case: add one to a tests/grad/cases_*.py\n", op);
    }
  }
  return failures == 0 && !uncovered ? 0 : 1;
}

}  // namespace
}  // namespace tracecache

int main(int argc, char** argv) {
  std::vector<std::string> roots;
  bool require_coverage = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--require-coverage") {
      require_coverage = true;
    } else if (arg.starts_with("-")) {
      fmt::print(stderr, "grad_check: unknown option {}\nusage: grad_check [--require-coverage] DIR...\n", arg);
      return 2;
    } else {
      roots.push_back(arg);
    }
  }
  if (roots.empty()) {
    fmt::print(stderr, "usage: grad_check [--require-coverage] DIR...\n");
    return 2;
  }
  try {
    return tracecache::check_all(roots, require_coverage);
  } catch (const std::exception& e) {  // an unreadable case or folder (Error, filesystem_error)
    fmt::print(stderr, "grad_check: {}\n", e.what());
    return 2;
  }
}
