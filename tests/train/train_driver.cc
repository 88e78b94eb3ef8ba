// train_driver: trains a tiny model with tracecache for the PyTorch comparison
// (tests/train/compare_torch.py, run by tests/cli/train_torch.sh).
//
//   train_driver data=DIR out=DIR model=mlp|bn loss=ce|mse opt=sgd|adam|adamw lrs=LR,LR,...
//                [momentum= dampening= weight_decay= nesterov=0|1 beta1= beta2= eps= clip=]
//                mode=eager|lazy executor=cpu|reference
//
// Reads the initial parameters and the data as .npy files from DIR (x, y, and w1 b1 w2 b2; for
// model=bn w1 gamma beta w2 b2 and running_mean running_var), trains one step per learning rate in
// `lrs` (the schedule: set_lr before every step) and writes to `out`: losses.npy (f32, one per
// step) and every parameter (and running statistic) after the last step, under the input's
// name. Lazy mode on the cpu backend prints "compiles N" (the Runtime's compile count).
//
// The model: h = x @ w1^T + b1, or for model=bn h = batch_norm_train(x @ w1^T, gamma, beta,
// running_mean, running_var, 0.1, 1e-5); h = relu(h); out = h @ w2^T + b2; loss=ce: cross_entropy(out, y)
// (y i64 labels), loss=mse: mse_loss(out, y) (y f32). Gradients by grad(), optionally clipped
// by clip_grad_norm_(clip), then the optimizer's step.
//
// Exit status: 0 on success; 2 with a message on stderr for a bad argument or file.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/eager_runner.h"
#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "capture/trace/losses.h"
#include "capture/trace/optim.h"
#include "capture/trace/train_layers.h"
#include "frontend/files/npy.h"
#include "replay/engine/runtime.h"

namespace tracecache {
namespace {

struct Args {
  std::map<std::string, std::string> values;
  std::string get(const std::string& key, const std::string& fallback = {}) const {
    auto it = values.find(key);
    if (it != values.end()) return it->second;
    if (fallback.empty()) throw std::runtime_error("missing argument " + key + "=");
    return fallback;
  }
  double number(const std::string& key, const std::string& fallback) const { return std::stod(get(key, fallback)); }
};

Tensor load(LazyContext& ctx, const std::string& dir, const std::string& name) {
  Result<HostBuffer> b = read_npy(dir + "/" + name + ".npy");
  if (!b.is_ok()) throw std::runtime_error(b.status().to_string());
  return ctx.from_buffer(std::move(*b));
}

void save(const std::string& dir, const std::string& name, const Tensor& t) {
  Status s = write_npy(dir + "/" + name + ".npy", *t.buffer());
  if (!s.is_ok()) throw std::runtime_error(s.to_string());
}

std::vector<double> parse_list(const std::string& text) {
  std::vector<double> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    out.push_back(std::stod(text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(LazyContext& ctx, const std::vector<Tensor>& params, const Args& a,
                                          double lr) {
  const std::string kind = a.get("opt");
  const double wd = a.number("weight_decay", "0");
  if (kind == "sgd") {
    return std::make_unique<SGD>(ctx, params,
                                 SgdOptions{.lr = lr, .momentum = a.number("momentum", "0"),
                                            .dampening = a.number("dampening", "0"), .weight_decay = wd,
                                            .nesterov = a.get("nesterov", "0") == "1"});
  }
  const double beta1 = a.number("beta1", "0.9"), beta2 = a.number("beta2", "0.999"), eps = a.number("eps", "1e-8");
  if (kind == "adam") {
    return std::make_unique<Adam>(ctx, params,
                                  AdamOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = wd});
  }
  if (kind == "adamw") {
    return std::make_unique<AdamW>(
        ctx, params, AdamWOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = wd});
  }
  throw std::runtime_error("unknown opt=" + kind);
}

void train(LazyContext& ctx, const Args& a) {
  const std::string data = a.get("data"), out = a.get("out"), model = a.get("model"), loss_kind = a.get("loss");
  const std::vector<double> lrs = parse_list(a.get("lrs"));
  const bool bn = model == "bn";
  if (!bn && model != "mlp") throw std::runtime_error("unknown model=" + model);
  const Tensor x = load(ctx, data, "x"), y = load(ctx, data, "y");
  // The batch norm makes a bias before it irrelevant (its gradient is zero up to rounding, which
  // Adam would amplify into noise): model=bn has none, as PyTorch models do.
  const std::vector<std::string> names =
      bn ? std::vector<std::string>{"w1", "gamma", "beta", "w2", "b2"} : std::vector<std::string>{"w1", "b1", "w2", "b2"};
  std::vector<Tensor> params;
  for (const std::string& n : names) params.push_back(load(ctx, data, n).set_requires_grad(true));
  Tensor running_mean, running_var;
  if (bn) {
    running_mean = load(ctx, data, "running_mean");
    running_var = load(ctx, data, "running_var");
  }
  std::unique_ptr<Optimizer> opt = make_optimizer(ctx, params, a, lrs.at(0));
  const double clip = a.number("clip", "0");
  std::vector<float> losses;
  for (double lr : lrs) {
    opt->set_lr(lr);
    const Tensor& w2 = params[params.size() - 2];
    const Tensor& b2 = params[params.size() - 1];
    Tensor h = matmul(x, transpose(params[0], 0, 1));
    h = bn ? batch_norm_train(h, params[1], params[2], running_mean, running_var, 0.1, 1e-5) : add(h, params[1]);
    const Tensor logits = add(matmul(relu(h), transpose(w2, 0, 1)), b2);
    const Tensor loss = loss_kind == "ce" ? cross_entropy(logits, y) : mse_loss(logits, y);
    std::vector<Tensor> grads = grad(loss, params);
    if (clip > 0) clip_grad_norm_(grads, clip);
    opt->step(grads);
    ctx.mark_step();
    losses.push_back(static_cast<float>(loss.item()));
  }
  HostBuffer l(DType::kF32, Shape{static_cast<int64_t>(losses.size())});
  for (size_t i = 0; i < losses.size(); ++i) l.data<float>()[i] = losses[i];
  save(out, "losses", ctx.from_buffer(std::move(l)));
  for (size_t i = 0; i < names.size(); ++i) save(out, names[i], params[i]);
  if (bn) {
    save(out, "running_mean", running_mean);
    save(out, "running_var", running_var);
  }
}

int run(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) throw std::runtime_error("arguments are key=value, got " + arg);
    a.values[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  const std::string mode = a.get("mode"), executor = a.get("executor");
  if (mode != "eager" && mode != "lazy") throw std::runtime_error("unknown mode=" + mode);
  if (executor != "cpu" && executor != "reference") throw std::runtime_error("unknown executor=" + executor);
  ReferenceExecutor reference;
  CpuBackend cpu;
  Metrics metrics;
  Runtime runtime(&cpu, nullptr, &metrics);
  CpuOpRunner cpu_runner;
  ReferenceOpRunner reference_runner;
  LazyOptions options;
  if (mode == "eager") options.eager = executor == "cpu" ? static_cast<OpRunner*>(&cpu_runner) : &reference_runner;
  GraphExecutor* graphs = mode == "lazy" && executor == "cpu" ? static_cast<GraphExecutor*>(&runtime) : &reference;
  LazyContext ctx(graphs, options);
  train(ctx, a);
  if (mode == "lazy" && executor == "cpu") std::printf("compiles %lld\n", static_cast<long long>(metrics.counter(counters::kCompiles)));
  return 0;
}

}  // namespace
}  // namespace tracecache

int main(int argc, char** argv) {
  try {
    return tracecache::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_driver: %s\n", e.what());
    return 2;
  }
}
