// The ONNX backend node tests (Debian's libonnx-testdata) through the importer: ctest
// onnx.conformance (docs/onnx.md, "Conformance").
//
// Every case directory under DATA_DIR (model.onnx, test_data_set_N/input_K.pb, output_K.pb) is
// imported (the importer converts a model of an opset before 13 to opset 13 with ONNX's version
// converter first) with its data set's inputs and run in lazy mode on the cpu
// backend (no disk cache), and every data set's outputs are compared with the expected ones:
// same dtype and shape, integers and bools exactly, floats (f32, f64, bf16, f16) within ONNX's backend-test tolerance
// |actual - expected| <= atol + rtol * |expected| (rtol 1e-3, atol 1e-7; NaN only where NaN is
// expected). A case the importer refuses as unsupported (an op, a dtype, an attribute value, an
// opset) is counted by its reason; a case refused because an input gives a value the lowering
// needs (a Reshape's shape...) is retried with its integer inputs as constants (--const-input), then with every input but the
// first; any other outcome of an accepted case that is not a match (an
// import error, a run error, a wrong value) is a failure.
//
// A case whose expected outputs contradict the operator's definition (kWrongExpectations) is not
// run and is counted as excluded, with the reason.
//
// Usage: onnx_conformance DATA_DIR [FILTER]   (FILTER: run only cases whose name contains it)
// Prints each failure and the summary; exit 0 when no accepted case fails, 1 otherwise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>


#include "capture/core/metrics.h"
#include "frontend/files/npy.h"
#include "frontend/onnx/onnx_importer.h"
#include "frontend/onnx/onnx_tensor.h"
#include "replay/engine/program_session.h"

namespace fs = std::filesystem;
using namespace tracecache;

namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;

// Cases whose expected outputs contradict the operator's definition, not run: counted apart
// (neither passed nor unsupported), each with why. ONNX's own reference backend excludes them
// too (onnx/onnx, tests/python/backend_reference_test.py).
const std::map<std::string, std::string> kWrongExpectations = {
    {"test_adam_multiple", "its expected outputs use epsilon=1e-2; the node has none, so Adam's default 1e-6 applies"},
};

Result<::onnx::TensorProto> read_tensor(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::onnx::TensorProto t;
  if (!in.good() && !in.eof()) return io_error(path.string() + ": cannot read");
  if (!t.ParseFromString(bytes)) return parse_error(path.string() + ": not a TensorProto");
  return t;
}

std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix, const std::string& suffix) {
  std::vector<fs::path> out;
  for (int k = 0;; ++k) {
    fs::path p = dir / fmt::format("{}{}{}", prefix, k, suffix);
    if (!fs::exists(p)) break;
    out.push_back(p);
  }
  return out;
}

// "" when `got` matches `want`, else what differs.
std::string compare(const HostBuffer& got, const HostBuffer& want) {
  if (got.dtype() != want.dtype()) {
    return fmt::format("dtype {} where {} is expected", dtype_name(got.dtype()), dtype_name(want.dtype()));
  }
  if (!(got.shape() == want.shape())) {
    return fmt::format("shape {} where {} is expected", got.shape().to_string(), want.shape().to_string());
  }
  for (int64_t k = 0; k < got.numel(); ++k) {
    const double a = got.element_as_double(k), e = want.element_as_double(k);
    bool ok;
    if (!is_floating(got.dtype())) ok = a == e;
    else if (std::isnan(e)) ok = std::isnan(a);
    else if (std::isinf(e)) ok = a == e;
    else ok = std::fabs(a - e) <= kAtol + kRtol * std::fabs(e);
    if (!ok) return fmt::format("element {}: {} where {} is expected", k, a, e);
  }
  return "";
}

struct Outcome {
  enum Kind { kPassed, kUnsupported, kFailed } kind = kPassed;
  std::string detail;  // the reason (unsupported) or what went wrong (failed)
};

Outcome run_case(const fs::path& dir, const fs::path& scratch) {
  const std::vector<fs::path> sets = [&] {
    std::vector<fs::path> s;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) s.push_back(e.path());
    }
    std::sort(s.begin(), s.end());
    return s;
  }();
  if (sets.empty()) return {Outcome::kUnsupported, "no data set"};
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  // The model's inputs that are not initializers, in order, take the data set's input_K.pb.
  std::ifstream model_in(dir / "model.onnx", std::ios::binary);
  ::onnx::ModelProto model;
  if (!model.ParseFromIstream(&model_in)) return {Outcome::kFailed, "model.onnx does not parse"};
  // Opsets before 13 (many node tests were never regenerated) are converted by the importer
  // itself, with ONNX's version converter (ImportedModel::converted_from_opset).
  const fs::path model_path = dir / "model.onnx";
  Outcome converted;
  for (const auto& vi : model.graph().input()) {
    if (!vi.type().has_tensor_type()) return {Outcome::kUnsupported, "non-tensor input (sequence, map, optional)"};
  }
  // Before the expected outputs are read: a non-tensor output's file is not a TensorProto.
  for (const auto& vi : model.graph().output()) {
    if (!vi.type().has_tensor_type()) return {Outcome::kUnsupported, "non-tensor output (sequence, map, optional)"};
  }
  std::vector<std::string> input_names;
  {
    std::set<std::string> inits;
    for (const auto& t : model.graph().initializer()) inits.insert(t.name());
    for (const auto& vi : model.graph().input()) {
      if (!inits.count(vi.name())) input_names.push_back(vi.name());
    }
  }
  std::vector<std::vector<std::pair<std::string, std::string>>> set_inputs;  // per set: (name, npy)
  std::vector<std::string> integer_inputs;  // the model inputs the data gives integer values
  std::vector<std::vector<HostBuffer>> set_outputs;
  for (size_t s = 0; s < sets.size(); ++s) {
    std::vector<fs::path> inputs = numbered(sets[s], "input_", ".pb");
    if (inputs.size() > input_names.size()) return {Outcome::kUnsupported, "more data inputs than model inputs"};
    std::vector<std::pair<std::string, std::string>> files;
    for (size_t k = 0; k < inputs.size(); ++k) {
      Result<::onnx::TensorProto> t = read_tensor(inputs[k]);
      if (!t.is_ok()) return {Outcome::kFailed, t.status().message()};
      std::string reason;
      Result<HostBuffer> buf = onnx_import::tensor_to_buffer(*t, inputs[k].string(), "", &reason);
      if (!buf.is_ok()) {
        if (buf.status().code() == StatusCode::kUnsupported) return {Outcome::kUnsupported, reason};
        return {Outcome::kFailed, buf.status().message()};
      }
      const std::string npy = (scratch / fmt::format("set{}_input{}.npy", s, k)).string();
      if (Status st = write_npy(npy, *buf); !st.is_ok()) return {Outcome::kFailed, st.message()};
      files.emplace_back(input_names[k], npy);
      if (s == 0 && buf->dtype() != DType::kF32) integer_inputs.push_back(input_names[k]);
    }
    set_inputs.push_back(std::move(files));
    std::vector<HostBuffer> outputs;
    for (const fs::path& p : numbered(sets[s], "output_", ".pb")) {
      Result<::onnx::TensorProto> t = read_tensor(p);
      if (!t.is_ok()) return {Outcome::kFailed, t.status().message()};
      std::string reason;
      Result<HostBuffer> buf = onnx_import::tensor_to_buffer(*t, p.string(), "", &reason);
      if (!buf.is_ok()) {
        if (buf.status().code() == StatusCode::kUnsupported) return {Outcome::kUnsupported, reason};
        return {Outcome::kFailed, buf.status().message()};
      }
      outputs.push_back(std::move(*buf));
    }
    set_outputs.push_back(std::move(outputs));
  }
  for (size_t s = 0; s < sets.size(); ++s) {
    onnx_import::ImportOptions options;
    options.input_files = set_inputs[s];
    options.weights_path = (scratch / "params.safetensors").string();
    std::string reason;
    Result<onnx_import::ImportedModel> imported = onnx_import::import_onnx(model_path.string(), options, &reason);
    if (!imported.is_ok() && reason.find("from data") != std::string::npos && !integer_inputs.empty()) {
      // Inputs that give shapes, axes or pads: as `--const-input`, the integer inputs are constants.
      options.constant_inputs = integer_inputs;
      reason.clear();
      imported = onnx_import::import_onnx(model_path.string(), options, &reason);
    }
    if (!imported.is_ok() && reason.find("from data") != std::string::npos && set_inputs[s].size() > 1) {
      // Float ones too (a Resize's scales): every input but the first (the data).
      options.constant_inputs.clear();
      for (size_t k = 1; k < set_inputs[s].size(); ++k) options.constant_inputs.push_back(set_inputs[s][k].first);
      reason.clear();
      imported = onnx_import::import_onnx(model_path.string(), options, &reason);
    }
    if (!imported.is_ok()) {
      if (imported.status().code() == StatusCode::kUnsupported) return {Outcome::kUnsupported, reason};
      return {Outcome::kFailed, "import: " + imported.status().message()};
    }
    if (imported->converted_from_opset != 0) {
      converted.detail = fmt::format("converted from opset {}", imported->converted_from_opset);
    }
    if (Status st = onnx_import::write_params(*imported, options.weights_path); !st.is_ok()) {
      return {Outcome::kFailed, st.message()};
    }
    Metrics metrics;
    ProgramSessionOptions po;
    po.session.mode = SessionMode::kLazy;
    po.session.backend = "cpu";
    po.session.backend_options.threads = 1;
    po.session.metrics = &metrics;
    Result<std::unique_ptr<ProgramSession>> session = ProgramSession::create(imported->program, po);
    if (!session.is_ok()) return {Outcome::kFailed, session.status().message()};
    Result<ProgramSession::PreparedStep> step = (*session)->prepare(0);
    if (!step.is_ok()) return {Outcome::kFailed, "prepare: " + step.status().message()};
    Result<std::vector<BufferRef>> outs = (*session)->run(*step);
    if (!outs.is_ok()) return {Outcome::kFailed, "run: " + outs.status().message()};
    const std::vector<HostBuffer>& want = set_outputs[s];
    if (outs->size() != want.size()) {
      return {Outcome::kFailed, fmt::format("{} outputs where {} are expected", outs->size(), want.size())};
    }
    for (size_t k = 0; k < want.size(); ++k) {
      const std::string diff = compare(*(*outs)[k], want[k]);
      if (!diff.empty()) {
        return {Outcome::kFailed, fmt::format("{}: output {} ('{}'): {}", sets[s].filename().string(), k,
                                              imported->outputs[k], diff)};
      }
    }
  }
  return converted;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("usage: onnx_conformance DATA_DIR [FILTER]\n", stderr);
    return 2;
  }
  const fs::path data = argv[1];
  const std::string filter = argc > 2 ? argv[2] : "";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(data)) {
    if (e.is_directory() && fs::exists(e.path() / "model.onnx") &&
        e.path().filename().string().find(filter) != std::string::npos) {
      cases.push_back(e.path());
    }
  }
  std::sort(cases.begin(), cases.end());
  std::error_code ec;
  const fs::path scratch = fs::temp_directory_path(ec) / fmt::format("tracecache-onnx-conformance-{}", getpid());
  int passed = 0, converted = 0;
  std::vector<std::pair<std::string, std::string>> failures, excluded;
  std::map<std::string, std::vector<std::string>> unsupported_by_reason;
  for (const fs::path& c : cases) {
    if (auto wrong = kWrongExpectations.find(c.filename().string()); wrong != kWrongExpectations.end()) {
      excluded.emplace_back(wrong->first, wrong->second);
      continue;
    }
    Outcome o;
    try {
      o = run_case(c, scratch);
    } catch (const std::exception& e) {
      o = {Outcome::kFailed, fmt::format("exception: {}", e.what())};
    }
    const std::string name = c.filename().string();
    switch (o.kind) {
      case Outcome::kPassed:
        ++passed;
        if (!o.detail.empty()) ++converted;
        break;
      case Outcome::kUnsupported: unsupported_by_reason[o.detail].push_back(name); break;
      case Outcome::kFailed:
        failures.emplace_back(name, o.detail);
        std::printf("FAILED %s: %s\n", name.c_str(), o.detail.c_str());
        break;
    }
  }
  fs::remove_all(scratch, ec);
  size_t unsupported_count = 0;
  std::vector<std::pair<size_t, std::string>> reasons;
  for (const auto& [reason, names] : unsupported_by_reason) {
    unsupported_count += names.size();
    reasons.emplace_back(names.size(), reason);
  }
  std::sort(reasons.begin(), reasons.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::printf("\nONNX node tests: %zu cases: %d passed (%d of them converted to opset 13 first), %zu failed, %zu "
              "unsupported, %zu excluded\n", cases.size(), passed, converted, failures.size(), unsupported_count,
              excluded.size());
  for (const auto& [name, why] : excluded) std::printf("excluded (wrong expected outputs): %s: %s\n", name.c_str(), why.c_str());
  std::printf("unsupported, by reason (cases):\n");
  for (const auto& [n, reason] : reasons) {
    const auto& names = unsupported_by_reason[reason];
    std::printf("  %4zu  %s  (e.g. %s)\n", n, reason.c_str(), names.front().c_str());
  }
  return failures.empty() ? 0 : 1;
}
