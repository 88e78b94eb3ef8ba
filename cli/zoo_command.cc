// `tracecache zoo list | emit | run | train`: the model zoo (frontend/zoo/) from the command line.
//
// A model is run by turning it into a trace program (frontend/zoo/program.h) and handing that to the
// same code `tracecache run` uses (run_loaded_program), so `zoo run NAME` and `run` on the
// output of `zoo emit NAME` print the same checksums.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "frontend/files/npy.h"
#include "frontend/files/safetensors.h"
#include "cli/common.h"
#include "replay/audit/json.h"
#include "cli/validators.h"
#include "frontend/zoo/model.h"
#include "frontend/zoo/program.h"

namespace tracecache::cli {

namespace {

namespace fs = std::filesystem;

// `zoo train`'s batch when --batch is not given.
constexpr int64_t kTrainBatch = 8;

Result<zoo::ModelOptions> model_options(const ZooOptions& o) {
  std::optional<zoo::Preset> preset = zoo::parse_preset(o.preset);
  if (!preset) {
    return invalid_argument(
        fmt::format("unknown preset '{}' (available: default, small)", o.preset));
  }
  if (o.batch < 0 || o.resolution < 0 || o.seq_len < 0) {
    return invalid_argument("--batch, --resolution and --seq-len must be positive");
  }
  return zoo::ModelOptions{*preset, o.batch, o.resolution, o.seq_len};
}

// The spec of the model the options name; with --weights, the file is checked against it.
Result<zoo::ModelSpec> model_spec(const ZooOptions& o) {
  Result<zoo::ModelOptions> options = model_options(o);
  if (!options.is_ok()) return options.status();
  Result<zoo::ModelSpec> spec = zoo::make_model(o.model, *options);
  if (!spec.is_ok()) return spec.status();
  if (!o.weights.empty()) {
    Result<SafetensorsFile> file = SafetensorsFile::open(o.weights);
    if (!file.is_ok()) return file.status();
    Status st = zoo::check_weights(*spec, *file);
    if (!st.is_ok()) return st;
  }
  return spec;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

int list_command(const ZooOptions& o) {
  std::vector<zoo::ModelSpec> specs;
  for (const zoo::ModelInfo& info : zoo::zoo_models()) {
    specs.push_back(std::move(zoo::make_model(info.name)).value_or_throw());
  }
  if (o.json) {
    JsonWriter j;
    j.begin_array();
    for (const zoo::ModelSpec& s : specs) {
      j.begin_object();
      j.key("name").value(s.name);
      j.key("description").value(s.description);
      j.key("kind").value(s.kind == zoo::ModelKind::kImage ? "image" : "text");
      j.key("parameters").value(s.parameter_count());
      j.key("tensors").value(s.tensors.size());
      j.key("inputs").begin_array();
      for (const zoo::InputSpec& in : s.inputs) {
        j.begin_object();
        j.key("name").value(in.name);
        j.key("dtype").value(dtype_name(in.dtype));
        j.key("shape").begin_array();
        for (int64_t d : in.shape) j.value(d);
        j.end_array();
        j.end_object();
      }
      j.end_array();
      j.key("outputs").begin_array();
      for (const std::string& name : s.output_names) j.value(name);
      j.end_array();
      j.end_object();
    }
    j.end_array();
    out(j.str() + "\n");
    return kExitOk;
  }
  out(fmt::format("{:<16}  {:>12}  {}\n", "model", "parameters", "default input"));
  for (const zoo::ModelSpec& s : specs) {
    out(fmt::format("{:<16}  {:>12}  {}\n", s.name, with_commas(s.parameter_count()),
                    s.input_summary()));
  }
  return kExitOk;
}

// How an emitted program spells a file it reads: relative to the program's directory when the
// program is written to a file, else absolute.
std::string file_reference(const ZooOptions& o, const std::string& path) {
  if (path.empty()) return "";
  std::error_code ec;
  fs::path file = fs::absolute(path, ec);
  if (o.output.empty()) return file.string();
  fs::path dir = fs::absolute(o.output, ec).parent_path();
  fs::path relative = file.lexically_relative(dir);
  return relative.empty() ? file.string() : relative.string();
}

// The program options of `o`: weights and --input files spelled by file_reference (with
// `absolute`, always absolute: the program is run from memory).
Result<zoo::ProgramOptions> program_options(ZooOptions o, bool absolute) {
  if (absolute) o.output.clear();
  zoo::ProgramOptions po;
  po.weights_path = file_reference(o, o.weights);
  for (const std::string& spec : o.inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return invalid_argument(fmt::format("--input '{}': expected NAME=FILE.npy", spec));
    }
    po.input_files.emplace_back(spec.substr(0, eq), file_reference(o, spec.substr(eq + 1)));
  }
  return po;
}

int write_program_text(const ZooOptions& o, std::string_view what, const std::string& text);

int emit_command(const ZooOptions& o) {
  Result<zoo::ModelSpec> spec = model_spec(o);
  if (!spec.is_ok()) return report_error(spec.status());
  Result<zoo::ProgramOptions> po = program_options(o, /*absolute=*/false);
  if (!po.is_ok()) return report_error(po.status());
  Result<Program> program = zoo::model_program(*spec, *po);
  if (!program.is_ok()) return report_error(program.status());
  if (!o.save_weights.empty()) {
    Status st = zoo::write_initial_weights(*spec, o.save_weights);
    if (!st.is_ok()) return report_error(st);
  }
  std::string text = fmt::format("# {}: {} ({} preset), {} parameters; tracecache zoo emit\n",
                                 spec->name, spec->description, zoo::preset_name(spec->preset),
                                 with_commas(spec->parameter_count())) +
                     print_program(*program);
  return write_program_text(o, "zoo emit -o", text);
}

// Writes an emitted program to o.output, or stdout when it is empty. `what` names the flag in
// errors.
int write_program_text(const ZooOptions& o, std::string_view what, const std::string& text) {
  if (o.output.empty()) {
    out(text);
    return kExitOk;
  }
  std::ofstream file(o.output, std::ios::binary | std::ios::trunc);
  if (!file) {
    // A path the user gave that cannot be written is bad input (exit 2).
    std::error_code ec;
    const fs::path dir = fs::absolute(o.output, ec).parent_path();
    if (!fs::is_directory(dir, ec)) {
      return report_error(invalid_argument(fmt::format(
          "{} {}: directory '{}' does not exist (create it first, or write elsewhere)", what, o.output,
          dir.string())));
    }
    return report_error(invalid_argument(fmt::format("{} {}: cannot open for writing: {}", what, o.output,
                                                     std::strerror(errno))));
  }
  file << text;
  file.close();
  if (!file) return report_error(io_error(fmt::format("{}: write failed", o.output)));
  return kExitOk;
}

// Checks every --input file of an index input (token ids) against the model's index range, so a
// bad id is reported with its input, value and position instead of being clamped in the graph.
Status check_index_inputs(const zoo::ModelSpec& spec, const zoo::ProgramOptions& po) {
  for (const auto& [name, path] : po.input_files) {
    for (const zoo::InputSpec& in : spec.inputs) {
      if (in.name != name || in.index_limit <= 0) continue;
      Result<HostBuffer> values = read_npy(path);
      if (!values.is_ok()) return values.status();
      const Shape& shape = values->shape();
      for (int64_t i = 0; i < values->numel(); ++i) {
        const double v = values->element_as_double(i);
        if (v >= 0 && v < static_cast<double>(in.index_limit)) continue;
        std::vector<int64_t> index(static_cast<size_t>(shape.rank()));
        int64_t rest = i;
        for (int d = shape.rank() - 1; d >= 0; --d) {
          index[static_cast<size_t>(d)] = rest % shape[d];
          rest /= shape[d];
        }
        return invalid_argument(fmt::format(
            "--input {}={}: value {} at index [{}] is out of range: {} must be in [0, {}) for {}",
            name, path, v, fmt::join(index, ", "), name, in.index_limit, spec.name));
      }
    }
  }
  return Status::ok();
}

int run_zoo_model(const ZooOptions& o) {
  Result<zoo::ModelSpec> spec = model_spec(o);
  if (!spec.is_ok()) return report_error(spec.status());
  Result<zoo::ProgramOptions> po = program_options(o, /*absolute=*/true);
  if (!po.is_ok()) return report_error(po.status());
  Result<Program> program = zoo::model_program(*spec, *po);
  if (!program.is_ok()) return report_error(program.status());
  if (Status st = check_index_inputs(*spec, *po); !st.is_ok()) return report_error(st);
  RunOptions run = o.run;
  run.program = spec->name;
  return run_loaded_program(*program, run);
}

Result<zoo::TrainOptions> train_options(const ZooOptions& o) {
  std::optional<zoo::Optimizer> optimizer = zoo::parse_optimizer(o.optimizer);
  if (!optimizer) {
    return invalid_argument(
        fmt::format("unknown optimizer '{}' (available: sgd, adam, adamw)", o.optimizer));
  }
  zoo::TrainOptions t;
  t.optimizer = *optimizer;
  t.lr = o.lr;
  t.momentum = o.momentum;
  t.nesterov = o.nesterov;
  t.weight_decay = o.weight_decay >= 0 ? o.weight_decay : *optimizer == zoo::Optimizer::kAdamW ? 0.01 : 0;
  t.steps = o.train_steps;
  t.output_params = o.output_params;
  return t;
}

int train_command(ZooOptions o) {
  // The training batch: a batch norm needs more than one value per channel.
  if (o.batch == 0) o.batch = kTrainBatch;
  Result<zoo::ModelSpec> spec = model_spec(o);
  if (!spec.is_ok()) return report_error(spec.status());
  Result<zoo::TrainOptions> train = train_options(o);
  if (!train.is_ok()) return report_error(train.status());
  if (!o.emit.empty()) o.output = o.emit;
  Result<zoo::ProgramOptions> po = program_options(o, /*absolute=*/o.emit.empty());
  if (!po.is_ok()) return report_error(po.status());
  Result<Program> program = zoo::train_program(*spec, *train, *po);
  if (!program.is_ok()) return report_error(program.status());
  if (Status st = check_index_inputs(*spec, *po); !st.is_ok()) return report_error(st);
  if (!o.emit.empty()) {
    std::string text = fmt::format(
        "# {}: {} ({} preset) in training mode, {} parameters; {} lr {}; tracecache zoo train --emit\n",
        spec->name, spec->description, zoo::preset_name(spec->preset),
        with_commas(spec->parameter_count()), zoo::optimizer_name(train->optimizer), train->lr);
    return write_program_text(o, "zoo train --emit", text + print_program(*program));
  }
  RunOptions run = o.run;
  run.program = spec->name;
  return run_loaded_program(*program, run);
}

}  // namespace

Result<Program> zoo_program(const std::string& model, const std::string& preset) {
  ZooOptions o;
  o.model = model;
  o.preset = preset;
  Result<zoo::ModelSpec> spec = model_spec(o);
  if (!spec.is_ok()) return spec.status();
  return zoo::model_program(*spec);
}

bool is_zoo_model(std::string_view name) {
  for (const zoo::ModelInfo& info : zoo::zoo_models()) {
    if (info.name == name) return true;
  }
  return false;
}

CLI::App* add_zoo_command(CLI::App& app, ZooOptions& o, const std::string& db_help,
                          const std::string& threads_help) {
  CLI::App* zoo = app.add_subcommand(
      "zoo", "Reference models (torchvision, BERT-base): list them, emit them as trace programs, run them, train them.");
  zoo->require_subcommand(1);
  auto model_flags = [&o](CLI::App* c) {
    c->add_option("model", o.model, "Model name (see `tracecache zoo list`)")->required();
    c->add_option("--preset", o.preset, "default (full size) or small (same structure, reduced)")
        ->capture_default_str();
    c->add_option("--batch", o.batch, "Batch size (default: the preset's, 1)")->check(whole_number_in(1));
    c->add_option("--resolution", o.resolution, "Image height = width (image models; default 224, small 32 or 64)")
        ->check(whole_number_in(1));
    c->add_option("--seq-len", o.seq_len, "Sequence length (bert_base; default 128, small 16)")
        ->check(whole_number_in(1));
    c->add_option("--weights", o.weights,
                  "A .safetensors file with the model's state_dict (checked against the model; "
                  "default: deterministic initializers)");
    c->add_option("--input", o.inputs,
                  "NAME=FILE.npy: read model input NAME (e.g. image, input_ids) from a .npy file "
                  "instead of its seeded generator (repeatable)");
  };
  CLI::App* list = zoo->add_subcommand("list", "Every model: name, parameter count, default input.");
  list->add_flag("--json", o.json, "Print a JSON array");
  CLI::App* emit = zoo->add_subcommand("emit", "Write a model's forward as a trace program for `tracecache run`.");
  model_flags(emit);
  emit->add_option("-o,--output", o.output, "Write the program here (default: stdout)");
  emit->add_option("--save-weights", o.save_weights,
                   "Also write the model's deterministic initial weights to this .safetensors file");
  CLI::App* run = zoo->add_subcommand(
      "run", "Run a model's forward and print its top-5 classes (or output checksums) and step times.");
  model_flags(run);
  run->add_option("--mode", o.run.mode, "eager, lazy or once (as for `tracecache run`)")
      ->check(CLI::IsMember({"eager", "lazy", "once"}))
      ->capture_default_str();
  run->add_option("--backend", o.run.backend,
                  "cpu (compiled, cached), reference (the uncached oracle) or sim:PRESET / "
                  "sim:SPEC_FILE (as for `tracecache run`)")
      ->capture_default_str();
  run->add_option("--steps", o.run.steps, "Steps to run, each with fresh inputs (default 1)")
      ->check(whole_number_in(1));
  run->add_option("--threads", o.run.threads, threads_help)->check(whole_number_in(1));
  run->add_option("--db", o.run.db.flag, db_help);
  add_remote_options(run, o.run.remote);
  run->add_flag("--no-cache", o.run.no_cache, "Compile in memory only; do not open the cache database");
  run->add_flag("--json", o.run.json, "Print one JSON object, as `tracecache run --json`");
  run->add_flag("--metrics", o.run.metrics, "Print the metrics report");
  run->add_option("--timeline", o.run.timeline, kTimelineHelp);
  run->add_option("--labels", o.run.labels, kLabelsHelp);
  run->add_flag("-q,--quiet", o.run.quiet, kQuietHelp);
  run->add_flag("-v,--verbose", o.run.verbose, "As `tracecache run -v`: each step's cache outcomes on stderr");
  run->add_option("--save-outputs", o.run.save_outputs,
                  "Write every output of every step to DIR/step<N>_<name>.npy");
  CLI::App* train = zoo->add_subcommand(
      "train",
      "Train a model on one fixed seeded batch with random labels (cross-entropy, an optimizer in "
      "ops); print the loss of every step.");
  model_flags(train);
  train->add_option("--optimizer", o.optimizer, "sgd, adam or adamw (torch.optim's rules)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  train->add_option("--lr", o.lr, "Learning rate (the program's `lr` input)")->capture_default_str();
  train->add_option("--momentum", o.momentum, "sgd: momentum (0: none)")->capture_default_str();
  train->add_flag("--nesterov", o.nesterov, "sgd: Nesterov momentum (needs --momentum)");
  train->add_option("--weight-decay", o.weight_decay,
                    "L2 penalty (sgd, adam) or decoupled decay (adamw); default 0, adamw 0.01");
  train->add_option("--steps", o.train_steps, "Training steps (default 10)")->check(whole_number_in(1));
  train->add_option("--mode", o.run.mode, "eager, lazy or once (as for `tracecache run`)")
      ->check(CLI::IsMember({"eager", "lazy", "once"}))
      ->capture_default_str();
  train->add_option("--backend", o.run.backend, "cpu, reference or sim:PRESET / sim:SPEC_FILE")
      ->capture_default_str();
  train->add_option("--threads", o.run.threads, threads_help)->check(whole_number_in(1));
  train->add_option("--db", o.run.db.flag, db_help);
  add_remote_options(train, o.run.remote);
  train->add_flag("--no-cache", o.run.no_cache, "Compile in memory only; do not open the cache database");
  train->add_flag("--json", o.run.json, "Print one JSON object, as `tracecache run --json` (each loss as \"value\")");
  train->add_flag("--metrics", o.run.metrics, "Print the metrics report");
  train->add_option("--timeline", o.run.timeline, kTimelineHelp);
  train->add_flag("-q,--quiet", o.run.quiet, kQuietHelp);
  train->add_flag("-v,--verbose", o.run.verbose, "As `tracecache run -v`: each step's cache outcomes on stderr");
  train->add_option("--save-outputs", o.run.save_outputs,
                    "Write every output of every step to DIR/step<N>_<name>.npy");
  train->add_flag("--output-params", o.output_params,
                  "Also output every parameter's and running statistic's new value (with "
                  "--save-outputs: the weights after each step)");
  train->add_option("--emit", o.emit, "Write the training program to this file instead of running it");
  return zoo;
}

int zoo_command(const CLI::App& zoo, const ZooOptions& options) {
  if (zoo.got_subcommand("list")) return list_command(options);
  if (zoo.got_subcommand("emit")) return emit_command(options);
  if (zoo.got_subcommand("run")) return run_zoo_model(options);
  if (zoo.got_subcommand("train")) return train_command(options);
  return report_error(invalid_argument("zoo: expected list, emit, run or train"));
}

}  // namespace tracecache::cli
