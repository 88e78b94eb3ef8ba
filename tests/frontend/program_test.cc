// Trace programs: the parser, the printer, .npy files and the runner.
//
// Most cases are data: every fixtures/programs/*.trace must parse, type-check, run and
// round-trip through the printer; every fixtures/programs/bad/*.trace states its expected error
// in a "# error: CODE LINE:COL: message" comment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "frontend/files/npy.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

namespace fs = std::filesystem;

const fs::path kPrograms = fs::path(TRACECACHE_SOURCE_DIR) / "fixtures" / "programs";

std::vector<fs::path> trace_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".trace") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Program parse_ok(std::string_view text) {
  Result<Program> p = parse_program(text, "t.trace");
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.is_ok() ? std::move(p).value() : Program{};
}

std::string parse_error_of(std::string_view text) {
  Result<Program> p = parse_program(text, "t.trace");
  EXPECT_FALSE(p.is_ok()) << "parsed:\n" << text;
  return p.is_ok() ? std::string() : p.status().message();
}

const char* code_spelling(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kParseError: return "parse_error";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
  }
  return "?";
}

Result<std::vector<StepResult>> run_text(std::string_view text, int steps = -1) {
  Result<Program> p = parse_program(text, "t.trace");
  if (!p.is_ok()) return p.status();
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  return run_program(*p, ctx, steps);
}

std::vector<double> values(const BufferRef& b) {
  std::vector<double> out;
  for (int64_t i = 0; i < b->numel(); ++i) out.push_back(b->element_as_double(i));
  return out;
}

// ---- fixtures ---------------------------------------------------------------------------------

TEST(ProgramFixtures, EveryFixtureParsesAndTypeChecks) {
  std::vector<fs::path> files = trace_files(kPrograms);
  ASSERT_GE(files.size(), 5u);
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    Result<Program> p = load_program(f.string());
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_FALSE(p->outputs.empty());
    Status st = check_program(*p);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  }
}

TEST(ProgramFixtures, PrintParseRoundTripIsStable) {
  for (const fs::path& f : trace_files(kPrograms)) {
    SCOPED_TRACE(f.string());
    Result<Program> p = load_program(f.string());
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    std::string text = print_program(*p);
    Result<Program> again = parse_program(text, "printed.trace");
    ASSERT_TRUE(again.is_ok()) << again.status().to_string() << "\n" << text;
    EXPECT_TRUE(*p == *again) << text;
    EXPECT_EQ(print_program(*again), text);
  }
}

TEST(ProgramFixtures, EveryFixtureRuns) {
  for (const fs::path& f : trace_files(kPrograms)) {
    SCOPED_TRACE(f.string());
    Result<Program> p = load_program(f.string());
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    ReferenceExecutor executor;
    LazyContext ctx(&executor);
    Result<std::vector<StepResult>> r = run_program(*p, ctx);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(static_cast<int64_t>(r->size()), p->default_steps());
    for (int step = 0; step < static_cast<int>(r->size()); ++step) {
      const StepResult& s = (*r)[static_cast<size_t>(step)];
      ASSERT_EQ(s.outputs.size(), p->outputs.size());
      Result<std::vector<TensorType>> types = infer_output_types(*p, step);
      ASSERT_TRUE(types.is_ok()) << types.status().to_string();
      for (size_t k = 0; k < s.outputs.size(); ++k) {
        EXPECT_EQ(s.outputs[k].first, p->outputs[k].name);
        TensorType got{s.outputs[k].second->dtype(), s.outputs[k].second->shape()};
        EXPECT_EQ(type_to_string(got), type_to_string((*types)[k])) << s.outputs[k].first;
      }
    }
  }
}

// Each bad fixture's "# error: CODE LINE:COL: message" must match the first failure of
// load_program, check_program or run_program, in that order.
TEST(ProgramFixtures, BadProgramsReportFileLineColumn) {
  std::vector<fs::path> files = trace_files(kPrograms / "bad");
  ASSERT_GE(files.size(), 6u);
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    std::string text = read_text(f);
    size_t at = text.find("# error: ");
    ASSERT_NE(at, std::string::npos) << "missing '# error:' comment";
    std::string line = text.substr(at + 9, text.find('\n', at) - at - 9);
    std::string code = line.substr(0, line.find(' '));
    std::string want = f.string() + ":" + line.substr(code.size() + 1);

    Status st;
    Result<Program> p = load_program(f.string());
    if (!p.is_ok()) {
      st = p.status();
    } else {
      st = check_program(*p);
      // The runner must report what the dry run reports.
      ReferenceExecutor executor;
      LazyContext ctx(&executor);
      Result<std::vector<StepResult>> r = run_program(*p, ctx);
      ASSERT_FALSE(r.is_ok());
      if (st.is_ok()) {
        st = r.status();
      } else {
        EXPECT_EQ(r.status().message(), st.message());
      }
    }
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(code_spelling(st.code()), code);
    EXPECT_EQ(st.message(), want);
  }
}

// ---- parser -----------------------------------------------------------------------------------

constexpr std::string_view kSmall = R"(# leading comment
tracecache 1   # trailing comment
steps 4
dim B = [2, 3]
input x : f32[B, 4] = normal(seed=1, mean=0.5, std=2)
param w : f32[4, 2] = uniform(seed=2, low=-0.1, high=0.1)

h = matmul(x, w)
s = sum(h, keepdim=true, axes=[1])
r = reshape(h, shape=[B, -1])
q = mul(h, 0.5)
output s, r, q
)";

TEST(ProgramParse, ReadsEveryDirective) {
  Program p = parse_ok(kSmall);
  EXPECT_EQ(p.steps, 4);
  EXPECT_EQ(p.default_steps(), 4);
  ASSERT_EQ(p.dims.size(), 1u);
  EXPECT_EQ(p.dims[0].values, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p.dims[0].value_at(2), 2);
  EXPECT_EQ(p.dims[0].value_at(3), 3);
  ASSERT_EQ(p.tensors.size(), 2u);
  EXPECT_EQ(p.tensors[0].role, TensorDecl::Role::kInput);
  EXPECT_EQ(p.tensors[0].init.kind, Generator::Kind::kNormal);
  EXPECT_EQ(p.tensors[0].init.mean, 0.5);
  EXPECT_EQ(p.tensors[0].init.stddev, 2);
  EXPECT_EQ(p.tensors[1].role, TensorDecl::Role::kParam);
  EXPECT_EQ(p.tensors[1].init.low, -0.1);
  ASSERT_EQ(p.ops.size(), 4u);
  EXPECT_EQ(p.ops[0].op, OpKind::kMatmul);
  EXPECT_EQ(p.ops[0].pos.line, 8);
  EXPECT_EQ(p.ops[0].pos.col, 5);
  // Attributes are kept in registry order whatever order they were written in.
  ASSERT_EQ(p.ops[1].attrs.size(), 2u);
  EXPECT_EQ(p.ops[1].attrs[0].name, "axes");
  EXPECT_EQ(p.ops[1].attrs[1].name, "keepdim");
  EXPECT_EQ(p.ops[3].operands[1].kind, Literal::Kind::kFloat);
  EXPECT_EQ(program_output_names(p), (std::vector<std::string>{"s", "r", "q"}));
}

TEST(ProgramParse, PrintsCanonically) {
  EXPECT_EQ(print_program(parse_ok(kSmall)),
            "tracecache 1\n"
            "steps 4\n"
            "dim B = [2, 3]\n"
            "input x : f32[B, 4] = normal(seed=1, mean=0.5, std=2)\n"
            "param w : f32[4, 2] = uniform(seed=2, low=-0.1, high=0.1)\n"
            "h = matmul(x, w)\n"
            "s = sum(h, axes=[1], keepdim=true)\n"
            "r = reshape(h, shape=[B, -1])\n"
            "q = mul(h, 0.5)\n"
            "output s, r, q\n");
}

TEST(ProgramParse, DefaultStepsComeFromTheLongestDimList) {
  Program p = parse_ok(
      "tracecache 1\ndim A = [1, 2, 3]\ndim B = 4\ninput x : f32[A, B] = full(1)\noutput x\n");
  EXPECT_FALSE(p.steps.has_value());
  EXPECT_EQ(p.default_steps(), 3);
  EXPECT_EQ(parse_ok("tracecache 1\ninput x : f32[] = full(1)\noutput x\n").default_steps(), 1);
}

TEST(ProgramParse, LiteralsRoundTrip) {
  std::string text =
      "tracecache 1\n"
      "input x : f32[2] = full(-inf)\n"
      "input i : i32[2] = uniform(seed=3, low=-5, high=5)\n"
      "input m : bool[2] = schedule([0, 1, 1])\n"
      "a = full(shape=[2], value=1e-05)\n"
      "b = full(shape=[2], value=-inf)\n"
      "c = full(shape=[2], value=nan)\n"
      "d = full(shape=[], value=-0.5, dtype=i64)\n"
      "e = arange(end=4)\n"
      "f = add(i, -3)\n"
      "g = where(m, x, 2.5)\n"
      "output a, b, c, d, e, f, g\n";
  Program p = parse_ok(text);
  EXPECT_EQ(p.ops[0].attrs[1].value.f, 1e-05);
  EXPECT_TRUE(std::isinf(p.ops[1].attrs[1].value.f));
  EXPECT_TRUE(std::isnan(p.ops[2].attrs[1].value.f));
  EXPECT_EQ(p.ops[4].attrs[0].value.kind, Literal::Kind::kInt);  // int literal for a float attr
  std::string printed = print_program(p);
  EXPECT_NE(printed.find("value=1e-05"), std::string::npos) << printed;
  EXPECT_NE(printed.find("full(-inf)"), std::string::npos) << printed;
  Program again = parse_ok(printed);
  EXPECT_TRUE(p == again) << printed;
  EXPECT_EQ(print_program(again), printed);
}

// Generator arguments print integral values as ints, but an int has no negative zero: -0.0
// must print as a float, or it reads back as +0.0 and the programs differ (found by
// fuzz_program; fuzz/regressions/program/negative-zero-generator-argument.trace).
TEST(ProgramParse, NegativeZeroGeneratorArgumentsKeepTheirSign) {
  Program p = parse_ok(
      "tracecache 1\n"
      "input a : f32[2] = full(-0.0)\n"
      "input b : f32[2] = normal(seed=1, mean=-0.0, std=1)\n"
      "input c : f32[2] = uniform(seed=2, low=-0.0, high=0.1)\n"
      "input d : f32[2] = schedule([-0.0, 0, -0])\n"
      "output a, b, c, d\n");
  EXPECT_TRUE(std::signbit(p.tensors[0].init.value));
  EXPECT_TRUE(std::signbit(p.tensors[1].init.mean));
  EXPECT_TRUE(std::signbit(p.tensors[2].init.low));
  EXPECT_TRUE(std::signbit(p.tensors[3].init.values[0]));
  EXPECT_FALSE(std::signbit(p.tensors[3].init.values[2]));  // the int -0 is 0
  std::string printed = print_program(p);
  EXPECT_NE(printed.find("full(-0.0)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("mean=-0.0,"), std::string::npos) << printed;
  EXPECT_NE(printed.find("low=-0.0,"), std::string::npos) << printed;
  EXPECT_NE(printed.find("schedule([-0.0, 0, 0])"), std::string::npos) << printed;
  Program again = parse_ok(printed);
  EXPECT_TRUE(p == again) << printed;
  EXPECT_EQ(print_program(again), printed);
}

TEST(ProgramParse, EqualityIgnoresPositionsAndOrigin) {
  Program a = parse_ok("tracecache 1\ninput x : f32[2] = full(1)\ny = relu(x)\noutput y\n");
  Program b = parse_ok(
      "# comment\n\ntracecache 1\n  input  x : f32[ 2 ] = full(1.0)\n\ny=relu( x )\noutput y\n");
  b.base_dir = "/elsewhere";
  EXPECT_TRUE(a == b);
  b.ops[0].op = OpKind::kTanh;
  EXPECT_FALSE(a == b);
}

TEST(ProgramParse, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(parse_error_of(""), "t.trace:1:1: expected 'tracecache 1' header, found end of file");
  EXPECT_EQ(parse_error_of("tracecache\n"),
            "t.trace:1:11: expected a format version number, found end of line");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\n"),
            "t.trace:3:1: expected an 'output' statement, found end of file");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : u16[2] = full(1)\noutput x\n"),
            "t.trace:2:11: expected a dtype (bool, i8, u8, i16, i32, i64, f16, bf16, f32, f64), found 'u16'");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = relu(x) z\noutput y\n"),
            "t.trace:3:13: expected end of line, found 'z'");
  EXPECT_EQ(
      parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = relu(x)\noutput y\noutput x\n"),
      "t.trace:5:1: duplicate 'output' statement");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(1) $\noutput x\n"),
            "t.trace:2:28: unexpected character '$'");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = npy(\"a.npy)\noutput x\n"),
            "t.trace:2:24: unterminated string");
  EXPECT_EQ(
      parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = relu(x, 2)\noutput y\n"),
      "t.trace:3:13: op 'relu': operand 2 must be a tensor name; number operands are allowed only "
      "in elementwise binary ops and where");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = add(x)\noutput y\n"),
            "t.trace:3:5: op 'add' takes 2 operands, got 1");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = add(1, 2)\noutput y\n"),
            "t.trace:3:5: op 'add' needs at least one tensor operand");
  EXPECT_EQ(
      parse_error_of(
          "tracecache 1\ninput x : f32[2] = full(1)\ny = sum(x, axes=[1], axes=[0])\noutput y\n"),
      "t.trace:3:22: op 'sum': attribute 'axes' is given twice");
  EXPECT_EQ(
      parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = sum(x, keepdim=1)\noutput y\n"),
      "t.trace:3:20: op 'sum': attribute 'keepdim' must be bool, found 1");
  EXPECT_EQ(
      parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = sum(x, axes=[C])\noutput y\n"),
      "t.trace:3:18: undefined dim 'C'");
  EXPECT_EQ(parse_error_of(
                "tracecache 1\ninput x : f32[2] = full(1)\ny = argmax(x, axis=0.5)\noutput y\n"),
            "t.trace:3:20: op 'argmax': attribute 'axis' must be int, found 0.5");
  EXPECT_EQ(
      parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = sum(axes=[0], x)\noutput y\n"),
      "t.trace:3:19: operand after an attribute; operands come first");
  EXPECT_EQ(
      parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = parameter(x)\noutput y\n"),
      "t.trace:3:5: unknown op 'parameter'");
  EXPECT_EQ(parse_error_of("tracecache 1\ndim x = 2\ninput x : f32[2] = full(1)\noutput x\n"),
            "t.trace:3:7: name 'x' is already defined at line 2");
  EXPECT_EQ(parse_error_of(
                "tracecache 1\ndim B = 2\ninput x : f32[2] = full(1)\ny = relu(B)\noutput y\n"),
            "t.trace:4:10: 'B' is a dim, not a tensor");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput f32 : f32[2] = full(1)\noutput f32\n"),
            "t.trace:2:7: 'f32' is a reserved word and cannot name a tensor");
  EXPECT_EQ(
      parse_error_of("tracecache 1\nsteps 2\nsteps 3\ninput x : f32[2] = full(1)\noutput x\n"),
      "t.trace:3:1: duplicate 'steps' directive");
  EXPECT_EQ(parse_error_of("tracecache 1\nsteps 0\ninput x : f32[2] = full(1)\noutput x\n"),
            "t.trace:2:7: step count must be >= 1, got 0");
  EXPECT_EQ(parse_error_of("tracecache 1\ndim B = -2\noutput x\n"),
            "t.trace:2:9: dim value must be >= 0, got -2");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = relu(x\noutput y\n"),
            "t.trace:3:11: expected ',', found end of line");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(1)\ny = relu(x)\noutput x,\n"),
            "t.trace:4:10: expected an output name, found end of line");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = full(12abc)\noutput x\n"),
            "t.trace:2:27: unexpected character 'a' in a number");
}

TEST(ProgramParse, RejectsAnotherFormatVersion) {
  Result<Program> p = parse_program("tracecache 2\n", "v.trace");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(p.status().message(),
            "v.trace:1:12: format version 2 is not supported (this build reads version 1)");
}

TEST(ProgramParse, ChecksGenerators) {
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : i32[2] = normal(seed=1)\noutput x\n"),
            "t.trace:2:20: generator 'normal' for 'x': needs a floating dtype, not i32");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : i32[2] = full(0.5)\noutput x\n"),
            "t.trace:2:20: generator 'full' for 'x': 0.5 does not fit i32");
  EXPECT_EQ(
      parse_error_of("tracecache 1\ninput x : f32[2] = uniform(seed=1, low=2, high=1)\noutput x\n"),
      "t.trace:2:20: generator 'uniform' for 'x': low 2 and high 1 must be finite, low <= high");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = normal(mean=1)\noutput x\n"),
            "t.trace:2:20: generator 'normal' needs argument 'seed'");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = normal(seed=1, sdt=2)\noutput x\n"),
            "t.trace:2:35: generator 'normal' has no argument 'sdt' (did you mean 'std'?)");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = normal(1, 0, 1, 5)\noutput x\n"),
            "t.trace:2:36: generator 'normal' takes at most 3 arguments");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = normal(seed=1, 0)\noutput x\n"),
            "t.trace:2:35: positional argument after a named argument");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = gaussian(seed=1)\noutput x\n"),
            "t.trace:2:20: unknown generator 'gaussian'");
  EXPECT_EQ(parse_error_of("tracecache 1\ninput x : f32[2] = nromal(seed=1)\noutput x\n"),
            "t.trace:2:20: unknown generator 'nromal' (did you mean 'normal'?)");
  // Positional generator arguments follow the documented order.
  Program p = parse_ok("tracecache 1\ninput x : f32[2] = uniform(7, -1, 1)\noutput x\n");
  EXPECT_EQ(p.tensors[0].init.seed, 7u);
  EXPECT_EQ(p.tensors[0].init.low, -1);
  EXPECT_EQ(p.tensors[0].init.high, 1);
}

TEST(ProgramParse, LoadResolvesNpyPathsAgainstTheFile) {
  Result<Program> p = load_program((kPrograms / "embedding.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(fs::path(p->base_dir), kPrograms);
  EXPECT_EQ(fs::path(p->resolve_path("data/x.npy")), kPrograms / "data" / "x.npy");
  EXPECT_EQ(p->resolve_path("/abs/x.npy"), "/abs/x.npy");
  Result<Program> missing = load_program((kPrograms / "no_such.trace").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// ---- npy --------------------------------------------------------------------------------------

class NpyTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  testing::TempDir dir_;
};

HostBuffer sample(DType t, const Shape& s) {
  HostBuffer b(t, s);
  dispatch_dtype(t, [&]<typename T>() {
    T* p = b.data<T>();
    for (int64_t i = 0; i < b.numel(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = i % 3 == 0;
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] = static_cast<T>(i) * 0.5f - 3.25f;
      } else {
        p[i] = static_cast<T>(i * 7 - 20);
      }
    }
  });
  return b;
}

TEST_F(NpyTest, RoundTripsEveryDtypeAndRank) {
  const Shape shapes[] = {Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 1, 4}, Shape{0, 3}};
  for (DType t : {DType::kBool, DType::kI32, DType::kI64, DType::kF32}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(t)) + s.to_string());
      HostBuffer b = sample(t, s);
      std::string file = path("a.npy");
      ASSERT_TRUE(write_npy(file, b).is_ok());
      EXPECT_EQ(fs::file_size(file) % 64, b.nbytes() % 64);  // the header pads to 64 bytes
      Result<HostBuffer> r = read_npy(file);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_EQ(r->dtype(), t);
      EXPECT_EQ(r->shape(), s);
      EXPECT_EQ(r->checksum(), b.checksum());
    }
  }
}

TEST(Npy, WritesTheHeaderNumpyWrites) {
  std::string bytes = encode_npy(sample(DType::kF32, Shape{2, 3}));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t len =
      static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
  EXPECT_EQ((10 + len) % 64, 0u);
  std::string header = bytes.substr(10, len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u)
      << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_NE(encode_npy(sample(DType::kI64, Shape{5})).find("'shape': (5,)"), std::string::npos);
  EXPECT_NE(encode_npy(sample(DType::kBool, Shape{}))
                .find("'descr': '|b1', 'fortran_order': False, 'shape': ()"),
            std::string::npos);
}

// A version-`major` file with `header` (padded) followed by `data`.
std::string npy_bytes(const std::string& header, const std::string& data, int major = 1) {
  std::string h = header;
  size_t prefix = major == 1 ? 10 : 12;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (size_t k = 0; k < (major == 1 ? 2u : 4u); ++k) {
    out += static_cast<char>((h.size() >> (8 * k)) & 0xff);
  }
  return out + h + data;
}

TEST(Npy, ReadsVersion2AndLooseHeaders) {
  int32_t v[3] = {1, -2, 3};
  std::string data(reinterpret_cast<const char*>(v), sizeof v);
  Result<HostBuffer> r = parse_npy(
      npy_bytes("{'shape': (3,), 'fortran_order': False, 'descr': '<i4'}", data, 2), "v2");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->dtype(), DType::kI32);
  EXPECT_EQ(r->shape(), Shape{3});
  EXPECT_EQ(r->data<int32_t>()[1], -2);
}

TEST(Npy, RejectsBadFiles) {
  std::string f4(16, '\0');
  struct Case {
    std::string bytes;
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"PK\x03\x04 not npy", StatusCode::kParseError, "x: not an npy file (bad magic string)"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f4),
       StatusCode::kUnsupported, "x: Fortran-order arrays are not supported; save with C order"},
      {npy_bytes("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", f4),
       StatusCode::kUnsupported,
       "x: element type '<u2' is not supported (use '<f4', '<f8', '<f2', '<i4', '<i8', '<i2', '|i1', '|u1' or '|b1'; "
       "numpy has no bfloat16: use safetensors)"},
      {npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", f4),
       StatusCode::kUnsupported,
       "x: element type '>f4' is not supported (use '<f4', '<f8', '<f2', '<i4', '<i8', '<i2', '|i1', '|u1' or '|b1'; "
       "numpy has no bfloat16: use safetensors)"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", f4),
       StatusCode::kInvalidArgument,
       "x: truncated data: f32[5] holds 20 bytes, the file has 16 (the file is cut short or its "
       "header is wrong)"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4),
       StatusCode::kInvalidArgument, "x: 4 unexpected bytes after the data of f32[3]"},
      {npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
                 std::string("\x01\x02", 2)),
       StatusCode::kInvalidArgument, "x: bool element 1 is 2, not 0 or 1"},
      {npy_bytes("{'descr': '<f4', 'shape': (4,), }", f4), StatusCode::kParseError,
       "x: malformed npy header: 'descr', 'fortran_order' and 'shape' are required"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", f4),
       StatusCode::kParseError,
       "x: malformed npy header: 'shape' entries must be non-negative integers"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'extra': 1}", f4),
       StatusCode::kParseError, "x: malformed npy header: unexpected key 'extra'"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f4).substr(0, 40),
       StatusCode::kParseError, "x: truncated npy header (118 bytes declared, 30 present)"},
      {std::string("\x93NUMPY\x04\x00", 8), StatusCode::kParseError,
       "x: npy format version 4.0 is not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    Result<HostBuffer> r = parse_npy(c.bytes, "x");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST_F(NpyTest, ReportsMissingAndUnwritableFiles) {
  Result<HostBuffer> r = read_npy(path("missing.npy"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  Status st = write_npy(path("no/such/dir/a.npy"), sample(DType::kF32, Shape{2}));
  EXPECT_EQ(st.code(), StatusCode::kIOError);
}

TEST(Npy, ReadsTheEmbeddingFixture) {
  Result<HostBuffer> r = read_npy((kPrograms / "data" / "embedding_10x4.npy").string());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->dtype(), DType::kF32);
  EXPECT_EQ(r->shape(), (Shape{10, 4}));
  EXPECT_EQ(r->data<float>()[4 * 7 + 2], 7.5f);
}

// ---- types and the runner ---------------------------------------------------------------------

TEST(ProgramTypes, VaryingDimChangesOutputTypes) {
  Result<Program> p = load_program((kPrograms / "matmul_varying_batch.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  const int64_t batches[] = {8, 8, 16, 16, 32, 8, 8};  // the list cycles past its end
  for (int step = 0; step < 7; ++step) {
    Result<std::vector<TensorType>> t = infer_output_types(*p, step);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ((*t)[0], (TensorType{DType::kF32, Shape{batches[step], 16}})) << step;
  }
}

TEST(ProgramTypes, NumberOperandsTakeTheTensorDtypeWhenExact) {
  Program p = parse_ok(
      "tracecache 1\n"
      "input k : i32[3] = full(2)\n"
      "input m : bool[3] = full(1)\n"
      "a = add(k, 1)\n"
      "b = mul(k, 0.5)\n"
      "c = add(k, 3000000000)\n"
      "d = eq(m, 1)\n"
      "e = where(m, k, 7)\n"
      "f = where(m, 1, 2.5)\n"
      "output a, b, c, d, e, f\n");
  Result<std::vector<TensorType>> t = infer_output_types(p, 0);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)[0].dtype, DType::kI32);
  EXPECT_EQ((*t)[1].dtype, DType::kF32);
  EXPECT_EQ((*t)[2].dtype, DType::kF32);  // does not fit i32
  EXPECT_EQ((*t)[3].dtype, DType::kBool);
  EXPECT_EQ((*t)[4].dtype, DType::kI32);
  EXPECT_EQ((*t)[5].dtype, DType::kF32);
}

TEST(ProgramRunner, RunsTheRequestedNumberOfSteps) {
  Result<Program> p = load_program((kPrograms / "lr_schedule.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  for (int steps : {-1, 0, 1, 7}) {
    ReferenceExecutor executor;
    LazyContext ctx(&executor);
    Result<std::vector<StepResult>> r = run_program(*p, ctx, steps);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->size(), static_cast<size_t>(steps == -1 ? 5 : steps));
  }
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> bad = run_program(*p, ctx, -2);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(ProgramRunner, VaryingBatchChangesShapesAndKeys) {
  Result<Program> p = load_program((kPrograms / "matmul_varying_batch.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> r = run_program(*p, ctx);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 6u);
  const int64_t batches[] = {8, 8, 16, 16, 32, 8};
  for (size_t s = 0; s < 6; ++s) {
    EXPECT_EQ((*r)[s].outputs[0].second->shape(), (Shape{batches[s], 16}));
    ASSERT_EQ((*r)[s].graph_keys.size(), 1u) << s;
  }
  auto key = [&](size_t s) { return (*r)[s].graph_keys[0]; };
  EXPECT_EQ(key(0), key(1));
  EXPECT_EQ(key(0), key(5));
  EXPECT_EQ(key(2), key(3));
  EXPECT_NE(key(0), key(2));
  EXPECT_NE(key(2), key(4));
  // Inputs are regenerated every step: same shape, different values.
  EXPECT_NE((*r)[0].outputs[0].second->checksum(), (*r)[1].outputs[0].second->checksum());
}

TEST(ProgramRunner, ScalarInputChangesEveryStepWithoutChangingTheKey) {
  Result<Program> p = load_program((kPrograms / "lr_schedule.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> r = run_program(*p, ctx);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 5u);
  for (size_t s = 1; s < r->size(); ++s) {
    ASSERT_EQ((*r)[s].graph_keys.size(), 1u);
    EXPECT_EQ((*r)[s].graph_keys[0], (*r)[0].graph_keys[0]) << s;
  }

  // The schedule's and a random scalar's values, read back directly.
  Result<std::vector<StepResult>> direct = run_text(
      "tracecache 1\nsteps 4\n"
      "input lr : f32[] = schedule([0.5, 0.25, 0.125])\n"
      "input u : f32[] = uniform(seed=7, low=0.001, high=0.1)\n"
      "output lr, u\n");
  ASSERT_TRUE(direct.is_ok()) << direct.status().to_string();
  const double want[] = {0.5, 0.25, 0.125, 0.5};
  std::set<double> seen;
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(values((*direct)[s].outputs[0].second), std::vector<double>{want[s]});
    double u = values((*direct)[s].outputs[1].second)[0];
    EXPECT_GE(u, 0.001);
    EXPECT_LT(u, 0.1);
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(ProgramRunner, ParamsStayFixedAcrossStepsAndInputsDoNot) {
  Result<std::vector<StepResult>> r = run_text(
      "tracecache 1\nsteps 3\n"
      "input x : f32[4] = normal(seed=1)\n"
      "input c : i32[4] = full(3)\n"
      "param w : f32[4] = normal(seed=1)\n"
      "y = add(x, w)\n"
      "output w, x, c, y\n");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  for (size_t s = 1; s < 3; ++s) {
    EXPECT_EQ((*r)[s].outputs[0].second.get(), (*r)[0].outputs[0].second.get());  // the same data
    EXPECT_NE(values((*r)[s].outputs[1].second), values((*r)[0].outputs[1].second));
    EXPECT_EQ(values((*r)[s].outputs[2].second), values((*r)[0].outputs[2].second));
  }
  // A param uses its seed as written; an input mixes in the step, even at step 0.
  EXPECT_NE(values((*r)[0].outputs[0].second), values((*r)[0].outputs[1].second));
  std::vector<double> x = values((*r)[0].outputs[1].second), w = values((*r)[0].outputs[0].second);
  std::vector<double> y = values((*r)[0].outputs[3].second);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(static_cast<float>(y[i]), static_cast<float>(x[i] + w[i]));
  }
}

TEST(ProgramRunner, OutputsAreDeterministicAcrossRuns) {
  for (const char* name : {"mlp.trace", "attention.trace", "ops_tour.trace"}) {
    SCOPED_TRACE(name);
    Result<Program> p = load_program((kPrograms / name).string());
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    std::vector<std::string> sums[2];
    std::vector<GraphKey> keys[2];
    for (int run = 0; run < 2; ++run) {
      ReferenceExecutor executor;
      LazyContext ctx(&executor);
      Result<std::vector<StepResult>> r = run_program(*p, ctx);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      for (const StepResult& s : *r) {
        for (const auto& [out_name, buffer] : s.outputs) {
          sums[run].push_back(out_name + "=" + buffer->checksum());
        }
        keys[run].insert(keys[run].end(), s.graph_keys.begin(), s.graph_keys.end());
      }
    }
    EXPECT_EQ(sums[0], sums[1]);
    EXPECT_EQ(keys[0], keys[1]);
  }
}

TEST(ProgramRunner, MlpComputesAFiniteLossAndFixedBatchKeepsOneKey) {
  Result<Program> p = load_program((kPrograms / "mlp.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> r = run_program(*p, ctx);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  for (const StepResult& s : *r) {
    EXPECT_EQ(s.outputs[0].first, "logits");
    EXPECT_EQ(s.outputs[0].second->shape(), (Shape{8, 10}));
    double loss = values(s.outputs[1].second)[0];
    // Near-uniform predictions over 10 classes: the loss is about log(10).
    EXPECT_GT(loss, 1.0);
    EXPECT_LT(loss, 4.0);
    ASSERT_EQ(s.graph_keys.size(), 1u);
    EXPECT_EQ(s.graph_keys[0], (*r)[0].graph_keys[0]);
  }
}

TEST(ProgramRunner, EmbeddingLooksUpRowsOfTheNpyTable) {
  Result<Program> p = load_program((kPrograms / "embedding.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> r = run_program(*p, ctx);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  for (const StepResult& s : *r) {
    std::vector<double> rows = values(s.outputs[0].second);
    ASSERT_EQ(rows.size() % 4, 0u);
    for (size_t i = 0; i < rows.size() / 4; ++i) {
      double id = rows[4 * i];  // table[id][j] = id + 0.25 j
      EXPECT_EQ(id, std::floor(id));
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 10);
      for (size_t j = 0; j < 4; ++j) EXPECT_EQ(rows[4 * i + j], id + 0.25 * static_cast<double>(j));
    }
  }
}

TEST(ProgramRunner, RecordErrorsPointAtTheOpLine) {
  Result<std::vector<StepResult>> r = run_text(
      "tracecache 1\n"
      "input x : f32[8, 4] = full(1)\n"
      "input b : f32[3] = full(1)\n"
      "\n"
      "y = relu(x)\n"
      "    z = add(y, b)\n"
      "output z\n");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "t.trace:6:9: op 'add': shapes f32[8, 4] and f32[3] are not broadcastable");
}

TEST(ProgramRunner, MissingNpyFileIsAnErrorAtTheGenerator) {
  Result<std::vector<StepResult>> r =
      run_text("tracecache 1\nparam t : f32[2] = npy(\"/nonexistent/t.npy\")\noutput t\n");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "t.trace:2:20: /nonexistent/t.npy: no such file");
}

// ---- safetensors("file", "tensor") ------------------------------------------------------------

TEST(ProgramSafetensors, ParsesPrintsAndRoundTrips) {
  Program p = parse_ok(
      "tracecache 1\n"
      "param w : f32[2] = safetensors(\"w \\\"x\\\".safetensors\", tensor=\"layer.0.weight\")\n"
      "output w\n");
  EXPECT_EQ(p.tensors[0].init.kind, Generator::Kind::kSafetensors);
  EXPECT_EQ(p.tensors[0].init.path, "w \"x\".safetensors");
  EXPECT_EQ(p.tensors[0].init.tensor, "layer.0.weight");
  std::string printed = print_program(p);
  EXPECT_NE(printed.find("safetensors(\"w \\\"x\\\".safetensors\", \"layer.0.weight\")"),
            std::string::npos)
      << printed;
  Program again = parse_ok(printed);
  EXPECT_TRUE(p == again);
  again.tensors[0].init.tensor = "layer.1.weight";
  EXPECT_FALSE(p == again);
}

TEST(ProgramSafetensors, ParseErrors) {
  EXPECT_EQ(parse_error_of("tracecache 1\nparam w : f32[2] = safetensors(\"a.safetensors\")\n"
                           "output w\n"),
            "t.trace:2:20: generator 'safetensors' needs argument 'tensor'");
  EXPECT_EQ(parse_error_of("tracecache 1\nparam w : f32[2] = safetensors(\"a\", \"\")\n"
                           "output w\n"),
            "t.trace:2:20: generator 'safetensors' for 'w': the tensor name is empty");
  EXPECT_EQ(parse_error_of("tracecache 1\nparam w : f32[2] = safetensors(\"a\", 3)\n"
                           "output w\n"),
            "t.trace:2:37: expected a quoted tensor name, found '3'");
}

TEST(ProgramSafetensors, LoadsTensorsByNameRelativeToTheProgram) {
  Result<Program> p = load_program((kPrograms / "safetensors_weights.trace").string());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> r = run_program(*p, ctx, 2);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0].outputs[1].second), (std::vector<double>{1, 0, 1}));
  // The parameter is the file's data: the same in every step.
  EXPECT_EQ((*r)[0].outputs[1].second, (*r)[1].outputs[1].second);
}

TEST(ProgramSafetensors, ErrorsPointAtTheGenerator) {
  std::string file = (kPrograms / "data" / "weights.safetensors").string();
  auto run_decl = [&](const std::string& decl) {
    return run_text("tracecache 1\nparam t : " + decl + "\noutput t\n");
  };
  Result<std::vector<StepResult>> missing_tensor =
      run_decl("f32[2] = safetensors(\"" + file + "\", \"nope\")");
  ASSERT_FALSE(missing_tensor.is_ok());
  EXPECT_EQ(missing_tensor.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing_tensor.status().message(),
            "t.trace:2:20: safetensors \"" + file + "\" has no tensor \"nope\"");

  Result<std::vector<StepResult>> wrong_dtype =
      run_decl("i32[2] = safetensors(\"" + file + "\", \"ids\")");
  ASSERT_FALSE(wrong_dtype.is_ok());
  EXPECT_EQ(wrong_dtype.status().message(),
            "t.trace:2:20: safetensors \"" + file +
                "\" tensor \"ids\" holds i64[2] but 't' is declared i32[2]");

  Result<std::vector<StepResult>> no_file =
      run_decl("f32[2] = safetensors(\"/nonexistent/w.safetensors\", \"a\")");
  ASSERT_FALSE(no_file.is_ok());
  EXPECT_EQ(no_file.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(no_file.status().message(), "t.trace:2:20: /nonexistent/w.safetensors: no such file");
}

}  // namespace
}  // namespace tracecache
