// Untrusted input sizes and files (issue 10): shapes whose element or byte counts overflow,
// npy and safetensors headers that claim more than the file holds, special files given as
// inputs, and the bad-input kind of error for each. Every case here used to crash, hang,
// allocate what the header claimed, or answer with a wrong result.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "capture/core/buffer.h"
#include "frontend/files/input_file.h"
#include "frontend/files/npy.h"
#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "frontend/files/safetensors.h"
#include "capture/core/suggest.h"
#include "tests/test_support.h"

namespace tracecache {
namespace {

// 2^62 + 1 elements of f32: 2^64 + 4 bytes, which wraps to 4.
constexpr int64_t kWrapsTo4Bytes = (int64_t{1} << 62) + 1;
// Two rows of 2^61 + 1: 2^64 + 8 bytes of f32, which wraps to 8.
constexpr int64_t kWrapsTo8BytesInTwoRows = (int64_t{1} << 61) + 1;

std::string npy_file(const std::string& header, const std::string& data) {
  std::string h = header;
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>((h.size() >> 8) & 0xff);
  return out + h + data;
}

std::string safetensors_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

class HostileFiles : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) {
    std::string p = dir_.file(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  testing::TempDir dir_;
};

// ---- the one size check ------------------------------------------------------------------

TEST(CheckedShape, CountsWithoutOverflow) {
  EXPECT_EQ(*checked_numel(Shape{2, 3, 4}.span()), 24);
  EXPECT_EQ(*checked_numel(Shape{}.span()), 1);
  EXPECT_EQ(*checked_numel(Shape{kMaxElements}.span()), kMaxElements);
  EXPECT_EQ(*checked_numel(Shape{0, 5}.span()), 0);
  EXPECT_EQ(*checked_nbytes(Shape{kMaxElements}.span(), 8), uint64_t{8} << 48);

  for (const Shape& s : {Shape{kWrapsTo4Bytes}, Shape{2, kWrapsTo8BytesInTwoRows},
                         Shape{kMaxElements + 1}, Shape{int64_t{1} << 32, int64_t{1} << 32}}) {
    SCOPED_TRACE(s.to_string());
    Result<uint64_t> r = checked_nbytes(s.span(), 4);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(),
              "shape " + s.to_string() + " has more than 2^48 elements (the limit is 281474976710656)");
  }
  // Empty, but its strides would overflow: refused as well.
  Result<int64_t> empty = checked_numel(Shape{0, int64_t{1} << 40, int64_t{1} << 40}.span());
  ASSERT_FALSE(empty.is_ok());
  EXPECT_EQ(empty.status().message(),
            "shape [0, 1099511627776, 1099511627776] is empty, but its other dims multiply to "
            "more than 2^48 elements (the limit is 281474976710656)");
  Result<int64_t> negative = checked_numel(Shape{2, -1}.span());
  ASSERT_FALSE(negative.is_ok());
  EXPECT_EQ(negative.status().message(), "shape [2, -1] has a negative dim");
}

TEST(CheckedShape, NumelThrowsInsteadOfWrapping) {
  EXPECT_THROW((void)Shape({int64_t{1} << 32, int64_t{1} << 32}).numel(), Error);
  EXPECT_EQ(Shape({int64_t{1} << 40, int64_t{1} << 40, 0}).numel(), 0);
}

TEST(CheckedShape, BufferRefusesWrappingSizesBeforeAllocating) {
  // Used to allocate the wrapped 4 bytes; every writer then ran 2^62 elements past them.
  try {
    HostBuffer b(DType::kF32, Shape{kWrapsTo4Bytes});
    FAIL() << "allocated " << b.nbytes() << " bytes for f32[2^62 + 1]";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  }
}

// ---- trace programs ----------------------------------------------------------------------

Status first_failure(const std::string& text) {
  Result<Program> p = parse_program(text, "h.trace");
  if (!p.is_ok()) return p.status();
  return check_program(*p);
}

TEST(HostileProgram, DeclaredShapesObeyTheElementLimit) {
  Status st = first_failure(
      "tracecache 1\n"
      "input x : f32[4611686018427387905] = uniform(seed=1)\n"
      "output x\n");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "h.trace:2:15: 'x' is declared f32[4611686018427387905]: shape "
            "[4611686018427387905] has more than 2^48 elements (the limit is 281474976710656); "
            "declare a smaller shape");
  // Through a dim, and only at the step whose value is too large.
  st = first_failure(
      "tracecache 1\n"
      "dim B = [2, 2305843009213693953]\n"
      "input x : f32[2, B] = full(1)\n"
      "output x\n");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("h.trace:3:15: 'x' is declared f32[2, 2305843009213693953]"),
            std::string::npos)
      << st.message();
}

TEST(HostileProgram, UnallocatableShapeIsBadInput) {
  // Within the element limit, but 2 PiB: more than a 48-bit (or, without overcommit, any)
  // address space holds. Used to escape as std::bad_alloc ("internal error", exit 1).
  Result<Program> p = parse_program(
      "tracecache 1\n"
      "input x : i64[281474976710656] = full(1)\n"
      "output x\n",
      "h.trace");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_TRUE(check_program(*p).is_ok());
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  Result<std::vector<StepResult>> r = run_program(*p, ctx);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            fmt::format("h.trace:2:15: 'x' is declared i64[281474976710656]: its 2251799813685248 "
                        "bytes cannot be allocated (this machine has {} bytes of memory); declare a "
                        "smaller shape",
                        physical_memory_bytes()));
}

TEST(HostileProgram, NestedCallsSayHowToSplitThem) {
  Result<Program> p = parse_program(
      "tracecache 1\n"
      "input x : f32[3] = full(1)\n"
      "y = relu(neg(x))  # one op per line\n"
      "output y\n",
      "h.trace");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kParseError);
  EXPECT_EQ(p.status().message(),
            "h.trace:3:10: nested calls are not supported; write 't = neg(x)' on its own line, "
            "then 'y = relu(t)'");
  // The suggested name is fresh.
  p = parse_program(
      "tracecache 1\n"
      "input t : f32[3] = full(1)\n"
      "y = add(t, mul(t, t))\n"
      "output y\n",
      "h.trace");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(),
            "h.trace:3:12: nested calls are not supported; write 't1 = mul(t, t)' on its own "
            "line, then 'y = add(t, t1)'");
}

TEST_F(HostileFiles, ProgramsMustBeRegularFiles) {
  for (const std::string& path : {std::string("/dev/null"), dir_.path().string()}) {
    Result<Program> p = load_program(path);
    ASSERT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().to_string();
    EXPECT_NE(p.status().message().find(path + " is not a regular file"), std::string::npos)
        << p.status().message();
  }
}

// ---- npy ---------------------------------------------------------------------------------

TEST(HostileNpy, WrappingShapeIsRefused) {
  // Two rows of 2^61 + 1 f32 backed by 8 bytes: used to load as a tensor of 8 bytes.
  Result<HostBuffer> r = parse_npy(
      npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2305843009213693953), }",
               std::string(8, '\0')),
      "x.npy");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "x.npy: npy header: shape [2, 2305843009213693953] has more than 2^48 elements (the "
            "limit is 281474976710656)");
}

TEST(HostileNpy, HeaderIsCheckedAgainstTheDataBeforeAllocating) {
  // 2^46 f32 = 256 TiB: more than any address space, so allocating first fails with bad_alloc.
  Result<HostBuffer> r = parse_npy(
      npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (70368744177664,), }",
               std::string(16, '\0')),
      "x.npy");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "x.npy: truncated data: f32[70368744177664] holds 281474976710656 bytes, the file has "
            "16 (the file is cut short or its header is wrong)");
}

TEST(HostileNpy, DuplicateKeysAreRefused) {
  Result<HostBuffer> r = parse_npy(
      npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'shape': (1,), }",
               std::string(4, '\0')),
      "x.npy");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kParseError);
  EXPECT_EQ(r.status().message(), "x.npy: malformed npy header: duplicate key 'shape'");
}

TEST_F(HostileFiles, NpyFromDiskValidatesBeforeReading) {
  std::string path = write(
      "claims_2gb.npy",
      npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (512, 1048576), }", "abcd"));
  Result<HostBuffer> r = read_npy(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            path + ": truncated data: f32[512, 1048576] holds 2147483648 bytes, the file has 4 "
                   "(the file is cut short or its header is wrong)");
  // A good file still reads, through the same path.
  std::string good = write(
      "good.npy", npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                           std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8)));
  Result<HostBuffer> ok = read_npy(good);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->data<int32_t>()[1], 2);
}

TEST_F(HostileFiles, NpyAndSafetensorsMustBeRegularFiles) {
  std::string fifo = dir_.file("pipe.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {std::string("/dev/null"), dir_.path().string(), fifo}) {
    SCOPED_TRACE(path);
    Result<HostBuffer> npy = read_npy(path);
    ASSERT_FALSE(npy.is_ok());
    EXPECT_EQ(npy.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(npy.status().message().find(path + " is not a regular file"), std::string::npos)
        << npy.status().message();
    Result<SafetensorsFile> st = SafetensorsFile::open(path);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.status().message().find(path + " is not a regular file"), std::string::npos)
        << st.status().message();
  }
}

// ---- safetensors -------------------------------------------------------------------------

TEST(HostileSafetensors, ShapesObeyTheElementLimit) {
  // 2^32 x 2^31 x 0 BOOL: zero bytes, but its element count overflowed int64 when read.
  Result<SafetensorsFile> f = SafetensorsFile::parse(
      safetensors_file(
          R"({"a": {"dtype": "BOOL", "shape": [4294967296, 2147483648, 0], "data_offsets": [0, 0]}})",
          ""),
      "x");
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message(),
            "x: tensor 'a': shape [4294967296, 2147483648, 0] is empty, but its other dims "
            "multiply to more than 2^48 elements (the limit is 281474976710656)");
}

TEST(HostileSafetensors, MisspelledTensorNameGetsASuggestion) {
  HostBuffer b(DType::kF32, Shape{2});
  NamedBuffer named[] = {{"encoder.weight", &b}, {"decoder.weight", &b}};
  Result<SafetensorsFile> f =
      SafetensorsFile::parse(encode_safetensors(named).value_or_throw(), "w.safetensors");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  Result<HostBuffer> r = f->tensor("encoder.wieght");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "w.safetensors: no tensor 'encoder.wieght' (did you mean 'encoder.weight'?)");
  r = f->tensor("bias");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "w.safetensors: no tensor 'bias'");
}

TEST(Suggest, NearestWithinTwoEdits) {
  const std::string_view names[] = {"matmul", "max", "mean"};
  EXPECT_EQ(did_you_mean("matmull", names), " (did you mean 'matmul'?)");
  EXPECT_EQ(did_you_mean("convolution", names), "");
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

}  // namespace
}  // namespace tracecache
