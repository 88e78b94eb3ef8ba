// `tracecache import` and `tracecache run MODEL.onnx`: ONNX models through the importer
// (frontend/onnx/onnx_importer.h). `import` writes the program and its weights; `run` imports in
// memory (weights in a temporary directory) and hands the program to run_loaded_program, so it
// runs like any trace program, in every mode and on every backend.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "replay/audit/json.h"
#include "frontend/onnx/onnx_importer.h"

namespace tracecache::cli {

namespace {

namespace fs = std::filesystem;

// How the program at `program_path` spells `file`: relative to the program's directory.
std::string spelled_from(const std::string& program_path, const std::string& file) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(file, ec);
  const fs::path dir = fs::absolute(program_path, ec).parent_path();
  const fs::path relative = absolute.lexically_relative(dir);
  return relative.empty() ? absolute.string() : relative.string();
}

// The importer's options from --shape and --input; input files spelled by `spell`.
template <typename Spell>
Result<onnx_import::ImportOptions> import_options(const std::vector<std::string>& shapes,
                                                  const std::vector<std::string>& inputs,
                                                  const std::vector<std::string>& const_inputs, Spell spell) {
  onnx_import::ImportOptions o;
  for (const std::string& spec : shapes) {
    Result<onnx_import::InputShape> s = onnx_import::parse_input_shape(spec);
    if (!s.is_ok()) return s.status();
    o.shapes.push_back(std::move(*s));
  }
  for (const std::string& spec : inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return invalid_argument(fmt::format("--input '{}': expected NAME=FILE.npy", spec));
    }
    o.input_files.emplace_back(spec.substr(0, eq), spell(spec.substr(eq + 1)));
  }
  for (const std::string& spec : const_inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return invalid_argument(fmt::format("--const-input '{}': expected NAME=FILE.npy", spec));
    }
    // Read at import time only: the path as given.
    o.input_files.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
    o.constant_inputs.push_back(spec.substr(0, eq));
  }
  return o;
}

int list_ops(bool json) {
  if (json) {
    JsonWriter j;
    j.begin_array();
    for (const onnx_import::SupportedOp& op : onnx_import::supported_ops()) {
      j.begin_object();
      j.key("onnx").value(op.onnx);
      j.key("lowering").value(op.lowering);
      j.end_object();
    }
    j.end_array();
    out(j.str() + "\n");
    return kExitOk;
  }
  for (const onnx_import::SupportedOp& op : onnx_import::supported_ops()) {
    out(fmt::format("{:<22} {}\n", op.onnx, op.lowering));
  }
  return kExitOk;
}

}  // namespace

bool is_onnx_path(std::string_view path) { return path.size() > 5 && path.substr(path.size() - 5) == ".onnx"; }

int import_command(const ImportCommandOptions& options) {
  if (options.list_ops) return list_ops(options.json);
  if (options.model.empty()) return report_error(invalid_argument("import: give an ONNX model (or --list-ops)"));
  std::string output = options.output;
  if (output.empty()) output = fs::path(options.model).filename().replace_extension(".trace").string();
  const std::string weights = fs::path(output).replace_extension(".safetensors").string();
  std::error_code ec;
  if (const fs::path dir = fs::absolute(output, ec).parent_path(); !fs::is_directory(dir, ec)) {
    return report_error(invalid_argument(fmt::format(
        "import -o {}: directory '{}' does not exist (create it first, or write elsewhere)", output, dir.string())));
  }
  Result<onnx_import::ImportOptions> o = import_options(
      options.shapes, options.inputs, options.const_inputs, [&](const std::string& file) { return spelled_from(output, file); });
  if (!o.is_ok()) return report_error(o.status());
  o->weights_path = spelled_from(output, weights);
  o->file_name = fs::path(output).filename().string();
  // The importer reads --input files to learn their types: give it paths it can open from here.
  onnx_import::ImportOptions readable = *o;
  for (size_t k = 0; k < options.inputs.size(); ++k) {
    const std::string& spec = options.inputs[k];
    readable.input_files[k].second = spec.substr(spec.find('=') + 1);
  }
  Result<onnx_import::ImportedModel> model = onnx_import::import_onnx(options.model, readable);
  if (!model.is_ok()) return report_error(model.status());
  for (size_t k = 0; k < model->program.tensors.size(); ++k) {
    TensorDecl& decl = model->program.tensors[k];
    for (size_t j = 0; j < readable.input_files.size(); ++j) {
      if (decl.init.kind == Generator::Kind::kNpy && decl.init.path == readable.input_files[j].second) {
        decl.init.path = o->input_files[j].second;
      }
    }
  }
  if (Status st = onnx_import::write_params(*model, weights); !st.is_ok()) return report_error(st);
  std::ofstream file(output, std::ios::binary | std::ios::trunc);
  if (!file) return report_error(invalid_argument(fmt::format("import -o {}: cannot open for writing", output)));
  const std::string converted =
      model->converted_from_opset != 0 ? fmt::format(", converted from opset {}", model->converted_from_opset) : "";
  file << fmt::format("# {} (ONNX opset {}{}); tracecache import\n", fs::path(options.model).filename().string(),
                      model->opset, converted)
       << print_program(model->program);
  file.close();
  if (!file) return report_error(io_error(fmt::format("{}: write failed", output)));
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("program").value(output);
    j.key("weights").value(weights);
    j.key("opset").value(model->opset);
    j.key("inputs").begin_array();
    int64_t params = 0;
    for (const TensorDecl& t : model->program.tensors) {
      if (t.role == TensorDecl::Role::kParam) {
        ++params;
        continue;
      }
      j.begin_object();
      j.key("name").value(t.name);
      j.key("dtype").value(dtype_name(t.dtype));
      j.key("shape").begin_array();
      for (const DimRef& d : t.dims) j.value(d.value);
      j.end_array();
      j.end_object();
    }
    j.end_array();
    j.key("outputs").begin_array();
    for (size_t k = 0; k < model->outputs.size(); ++k) {
      j.begin_object();
      j.key("onnx").value(model->outputs[k]);
      j.key("name").value(model->program.outputs[k].name);
      j.end_object();
    }
    j.end_array();
    j.key("params").value(params);
    j.key("ops").value(static_cast<int64_t>(model->program.ops.size()));
    j.end_object();
    out(j.str() + "\n");
  } else {
    out(fmt::format("{}: {} ops, {} params -> {} + {}\n", options.model, model->program.ops.size(),
                    model->params.size(), output, weights));
  }
  return kExitOk;
}

int run_onnx_model(const RunOptions& options) {
  std::error_code ec;
  std::string tmpl = (fs::temp_directory_path(ec) / "tracecache-onnx-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return report_error(io_error(fmt::format("cannot make a temporary directory for {}'s weights", options.program)));
  }
  const fs::path dir = tmpl;
  struct RemoveDir {
    fs::path dir;
    ~RemoveDir() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{dir};
  Result<onnx_import::ImportOptions> o = import_options(options.shapes, options.inputs, options.const_inputs, [](const std::string& file) {
    std::error_code e;
    return fs::absolute(file, e).string();
  });
  if (!o.is_ok()) return report_error(o.status());
  const std::string weights = (dir / "model.safetensors").string();
  o->weights_path = weights;
  o->file_name = fs::path(options.program).filename().string();
  Result<onnx_import::ImportedModel> model = onnx_import::import_onnx(options.program, *o);
  if (!model.is_ok()) return report_error(model.status());
  if (Status st = onnx_import::write_params(*model, weights); !st.is_ok()) return report_error(st);
  return run_loaded_program(model->program, options);
}

}  // namespace tracecache::cli
