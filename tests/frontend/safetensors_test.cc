// safetensors files: round trips of every readable dtype through memory and disk, the exact
// bytes of a small file, and one malformed file per validation rule with its error.
#include "frontend/files/safetensors.h"
#include "tests/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <type_traits>

namespace tracecache {
namespace {

namespace fs = std::filesystem;

HostBuffer sample(DType t, const Shape& s, int salt = 0) {
  HostBuffer b(t, s);
  dispatch_dtype(t, [&]<typename T>() {
    T* p = b.data<T>();
    for (int64_t i = 0; i < b.numel(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = (i + salt) % 3 == 0;
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] = static_cast<T>(i + salt) * 0.5f - 3.25f;
      } else {
        p[i] = static_cast<T>((i + salt) * 7 - 20);
      }
    }
  });
  return b;
}

// A file from a hand-written header and data section.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

TEST(Safetensors, RoundTripsEveryReadableDtypeAndRank) {
  std::vector<HostBuffer> buffers;
  std::vector<NamedBuffer> named;
  int k = 0;
  for (DType t : {DType::kBool, DType::kI32, DType::kI64, DType::kF32}) {
    for (const Shape& s : {Shape{}, Shape{5}, Shape{2, 3}, Shape{0, 3}, Shape{2, 1, 2, 1, 2}}) {
      buffers.push_back(sample(t, s, k));
      ++k;
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    named.push_back({"layer." + std::to_string(i) + ".weight", &buffers[i]});
  }
  Result<std::string> bytes = encode_safetensors(named, {{"format", "pt"}});
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  Result<SafetensorsFile> f = SafetensorsFile::parse(*bytes, "mem");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->entries().size(), buffers.size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  for (size_t i = 0; i < buffers.size(); ++i) {
    SCOPED_TRACE(named[i].name);
    Result<HostBuffer> r = f->tensor(named[i].name);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->dtype(), buffers[i].dtype());
    EXPECT_EQ(r->shape(), buffers[i].shape());
    EXPECT_EQ(r->checksum(), buffers[i].checksum());
  }

  const testing::TempDir dir;
  const fs::path path = dir.file("roundtrip.safetensors");
  ASSERT_TRUE(write_safetensors(path.string(), named).is_ok());
  Result<SafetensorsFile> disk = SafetensorsFile::open(path.string());
  ASSERT_TRUE(disk.is_ok()) << disk.status().to_string();
  for (size_t i = 0; i < buffers.size(); ++i) {
    Result<HostBuffer> r = disk->tensor(named[i].name);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->checksum(), buffers[i].checksum()) << named[i].name;
  }
}

TEST(Safetensors, WritesTheReferenceLayout) {
  HostBuffer a = sample(DType::kF32, Shape{2});
  HostBuffer b = sample(DType::kI64, Shape{1});
  NamedBuffer named[] = {{"b", &b}, {"a", &a}};
  Result<std::string> bytes = encode_safetensors(named);
  ASSERT_TRUE(bytes.is_ok());
  std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data(reinterpret_cast<const char*>(a.bytes()), 8);
  data.append(reinterpret_cast<const char*>(b.bytes()), 8);
  EXPECT_EQ(*bytes, file_bytes(header, data));
  EXPECT_EQ((bytes->size() - 8 - 16) % 8, 0u);
}

TEST(Safetensors, ReadsEscapesUnknownDtypesAndReportsUnreadableOnes) {
  std::string header =
      R"({"__metadata__": {"note": "a\"b\u00e9"}, "h\u00e9\/x": {"dtype": "U16", "shape": [2], )"
      R"("data_offsets": [0, 4]}, "ok": {"dtype": "I32", "shape": [], "data_offsets": [4, 8]}})";
  std::string data("\x01\x02\x03\x04\x07\x00\x00\x00", 8);
  Result<SafetensorsFile> f = SafetensorsFile::parse(file_bytes(header, data), "m.st");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata().at("note"), "a\"b\xc3\xa9");
  ASSERT_NE(f->find("h\xc3\xa9/x"), nullptr);
  Result<HostBuffer> half = f->tensor("h\xc3\xa9/x");
  ASSERT_FALSE(half.is_ok());
  EXPECT_EQ(half.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(half.status().message(),
            "m.st: tensor 'h\xc3\xa9/x' has dtype U16; readable dtypes are F32, F64, BF16, F16, I64, I32, I16, I8, U8 "
            "and BOOL");
  Result<HostBuffer> ok = f->tensor("ok");
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->element_as_double(0), 7);
  Result<HostBuffer> missing = f->tensor("nope");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "m.st: no tensor 'nope'");
}

TEST(Safetensors, MalformedFilesAreRejectedWithTheirReason) {
  const std::string f8(8, '\0');
  std::string huge_len(8, '\0');
  huge_len[7] = 0x01;
  struct Case {
    std::string bytes;
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"abc", StatusCode::kInvalidArgument, "x: 3 bytes is too short for a safetensors file"},
      {huge_len + "{}", StatusCode::kInvalidArgument,
       "x: header length 72057594037927936 does not fit the file (10 bytes)"},
      {file_bytes("{}", "").substr(0, 9), StatusCode::kInvalidArgument,
       "x: header length 2 does not fit the file (9 bytes)"},
      {file_bytes("[]", ""), StatusCode::kParseError,
       "x: malformed safetensors header at byte 0: expected '{' at the start of the header"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", f8),
       StatusCode::kParseError,
       "x: malformed safetensors header at byte 60: expected ',' or '}' between header entries"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2]}})", f8), StatusCode::kParseError,
       "x: malformed safetensors header at byte 36: tensor 'a': 'dtype', 'shape' and "
       "'data_offsets' are required"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", f8),
       StatusCode::kParseError,
       "x: malformed safetensors header at byte 33: tensor 'a': 'shape' must be an array of "
       "non-negative integers"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", f8),
       StatusCode::kParseError,
       "x: malformed safetensors header at byte 34: tensor 'a': 'shape' must be an array of "
       "non-negative integers"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", f8),
       StatusCode::kParseError,
       "x: malformed safetensors header at byte 56: tensor 'a': 'data_offsets' must hold exactly "
       "two integers [begin, end]"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}})", f8),
       StatusCode::kParseError,
       "x: malformed safetensors header at byte 66: tensor 'a': unexpected key 'x'"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {}})",
                  f8),
       StatusCode::kParseError, "x: malformed safetensors header at byte 65: duplicate key 'a'"},
      {file_bytes(R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", f8),
       StatusCode::kParseError, "x: tensor 'a': unknown dtype 'Q4'"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", f8),
       StatusCode::kInvalidArgument, "x: tensor 'a': data_offsets [8, 0] end before they begin"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", f8),
       StatusCode::kInvalidArgument,
       "x: tensor 'a': data_offsets [0, 16] run past the data section (8 bytes)"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", f8),
       StatusCode::kInvalidArgument,
       "x: tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                  R"("b": {"dtype": "I32", "shape": [1], "data_offsets": [4, 8]}})",
                  f8),
       StatusCode::kInvalidArgument,
       "x: tensors 'a' and 'b' overlap (bytes [0, 8) and [4, 8))"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", f8),
       StatusCode::kInvalidArgument, "x: bytes [0, 4) of the data section belong to no tensor"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", f8),
       StatusCode::kInvalidArgument, "x: bytes [4, 8) of the data section belong to no tensor"},
      {file_bytes(R"({"__metadata__": {"k": 1}})", ""), StatusCode::kParseError,
       "x: malformed safetensors header at byte 23: metadata value 'k' must be a string"},
      {file_bytes(R"({"a\q": {}})", ""), StatusCode::kParseError,
       "x: malformed safetensors header at byte 5: bad escape '\\q' in a string"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}} x)", f8),
       StatusCode::kParseError,
       "x: malformed safetensors header at byte 62: unexpected text after the header object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    Result<SafetensorsFile> r = SafetensorsFile::parse(c.bytes, "x");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(Safetensors, BoolBytesOtherThanZeroOrOneAreCorrupt) {
  Result<SafetensorsFile> f = SafetensorsFile::parse(
      file_bytes(R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})",
                 std::string("\x01\x00\x02", 3)),
      "x");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  Result<HostBuffer> r = f->tensor("m");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "x: tensor 'm': bool element 2 is 2, not 0 or 1");
}

TEST(Safetensors, FileErrorsNameThePath) {
  Result<SafetensorsFile> missing = SafetensorsFile::open("/nonexistent/w.safetensors");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "/nonexistent/w.safetensors: no such file");

  const testing::TempDir dir;
  const fs::path path = dir.file("truncated.safetensors");
  HostBuffer a = sample(DType::kF32, Shape{4});
  NamedBuffer named[] = {{"a", &a}};
  ASSERT_TRUE(write_safetensors(path.string(), named).is_ok());
  fs::resize_file(path, fs::file_size(path) - 4);
  Result<SafetensorsFile> truncated = SafetensorsFile::open(path.string());
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(truncated.status().message(),
            path.string() + ": tensor 'a': data_offsets [0, 16] run past the data section (12 bytes)");
}

TEST(Safetensors, WriterRejectsBadNames) {
  HostBuffer a = sample(DType::kF32, Shape{1});
  NamedBuffer twice[] = {{"w", &a}, {"w", &a}};
  Result<std::string> r = encode_safetensors(twice);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "safetensors: tensor 'w' is given twice");
  NamedBuffer reserved[] = {{"__metadata__", &a}};
  EXPECT_FALSE(encode_safetensors(reserved).is_ok());
  NamedBuffer empty[] = {{"", &a}};
  EXPECT_FALSE(encode_safetensors(empty).is_ok());
}

}  // namespace
}  // namespace tracecache
