// Reader validation: one crafted file per rule; each error must name the field and its offset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <time.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"

namespace lockstep::gguf {
namespace {

using ::testing::HasSubstr;

// Little-endian GGUF byte builder; pos() gives the offset the next field will have.
struct Bytes {
  std::string b;
  uint64_t pos() const { return b.size(); }
  template <typename T>
  Bytes& Put(T x) {
    char c[sizeof(T)];
    std::memcpy(c, &x, sizeof(T));
    b.append(c, sizeof(T));
    return *this;
  }
  Bytes& U8(uint8_t x) { return Put(x); }
  Bytes& U32(uint32_t x) { return Put(x); }
  Bytes& U64(uint64_t x) { return Put(x); }
  Bytes& Str(std::string_view s) {
    U64(s.size());
    b.append(s);
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.append("GGUF");
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  Bytes& KeyU32(std::string_view key, uint32_t v) { return Str(key).U32(4).U32(v); }
  Bytes& KeyStr(std::string_view key, std::string_view v) { return Str(key).U32(8).Str(v); }
  Bytes& Info(std::string_view name, std::vector<uint64_t> shape, uint32_t type, uint64_t off) {
    Str(name).U32(static_cast<uint32_t>(shape.size()));
    for (uint64_t ne : shape) U64(ne);
    return U32(type).U64(off);
  }
  Bytes& PadTo(uint64_t a) {
    while (b.size() % a != 0) b.push_back('\0');
    return *this;
  }
  Bytes& Fill(size_t n, char c = '\x11') {
    b.append(n, c);
    return *this;
  }
};

// CPU seconds of this thread: the speed tests hold parsing to a budget that other processes on a
// shared machine must not make flaky.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The error message of parsing `bytes` (fails the test if parsing succeeds).
std::string ParseError(const Bytes& bytes) {
  auto f = File::FromBytes(bytes.b);
  EXPECT_FALSE(f.ok()) << "parsed a file that should be rejected";
  if (f.ok()) return "";
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(f.status().message());
}

std::string Off(uint64_t x) { return "offset " + std::to_string(x); }

TEST(GgufReader, ParsesMinimalFileWithTensor) {
  Bytes b;
  b.Header(1, 2).KeyStr("general.architecture", "llama").KeyU32("llama.block_count", 3);
  const uint64_t info_at = b.pos();
  b.Info("w", {4, 2}, 0, 0).PadTo(32);
  const uint64_t data_at = b.pos();
  for (int i = 0; i < 8; ++i) b.Put<float>(static_cast<float>(i));
  auto f = File::FromBytes(b.b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset(), data_at);
  EXPECT_EQ(f->file_size(), b.pos());
  ASSERT_NE(f->Find("general.architecture"), nullptr);
  EXPECT_EQ(f->Find("general.architecture")->str, "llama");
  EXPECT_EQ(f->Find("llama.block_count")->AsInt(), 3);
  EXPECT_EQ(f->Find("nope"), nullptr);
  const TensorInfo* t = f->FindTensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t->n_elements, 8u);
  EXPECT_EQ(t->n_bytes, 32u);
  EXPECT_EQ(t->info_offset, info_at);
  float x[8];
  std::memcpy(x, f->TensorData(*t), sizeof(x));
  EXPECT_EQ(x[7], 7.0f);
  EXPECT_EQ(f->FindTensor("v"), nullptr);
}

TEST(GgufReader, AcceptsVersion2AndScalarTensor) {
  Bytes b;
  b.Header(1, 0, 2).Info("s", {}, 0, 0).PadTo(32).Put<float>(1.5f);
  auto f = File::FromBytes(b.b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors()[0].n_elements, 1u);
  EXPECT_EQ(f->tensors()[0].n_bytes, 4u);
}

TEST(GgufReader, AcceptsNoTensorsWithoutDataPadding) {
  Bytes b;
  b.Header(0, 1).KeyStr("general.architecture", "llama");  // vocab-only: no padding
  auto f = File::FromBytes(b.b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->infos_end(), b.pos());
  EXPECT_GE(f->data_offset(), b.pos());
}

TEST(GgufReader, RejectsEmptyAndTinyFiles) {
  EXPECT_THAT(ParseError(Bytes{}), HasSubstr("file is 0 bytes"));
  Bytes b;
  b.b = "GG";
  EXPECT_THAT(ParseError(b), HasSubstr("file is 2 bytes"));
}

TEST(GgufReader, RejectsBadMagic) {
  Bytes b;
  b.b = "GGML";
  b.U32(3).U64(0).U64(0);
  EXPECT_THAT(ParseError(b), HasSubstr("bad magic 0x4c4d4747 at offset 0"));
}

TEST(GgufReader, RejectsVersion1) {
  Bytes b;
  b.Header(0, 0, 1);
  const std::string e = ParseError(b);
  EXPECT_THAT(e, HasSubstr("GGUF version 1 (at offset 4) is not supported"));
}

TEST(GgufReader, RejectsUnknownAndBigEndianVersions) {
  Bytes b;
  b.Header(0, 0, 4);
  EXPECT_THAT(ParseError(b), HasSubstr("GGUF version 4 (at offset 4) is not supported"));
  Bytes be;
  be.Header(0, 0, 0x03000000);
  EXPECT_THAT(ParseError(be), HasSubstr("big-endian"));
}

TEST(GgufReader, RejectsTruncatedHeader) {
  Bytes b;
  b.Header(0, 0);
  b.b.resize(20);
  EXPECT_THAT(ParseError(b), HasSubstr("header: metadata key count (8 bytes at offset 16) runs "
                                       "past end of file (size 20)"));
  b.b.resize(10);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor count (8 bytes at offset 8)"));
}

TEST(GgufReader, RejectsKeyCountBeyondFile) {
  Bytes b;
  b.Header(0, uint64_t{1} << 60).Fill(100);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key count 1152921504606846976 (at offset 16) "
                                       "needs at least 13 bytes per key but only 100 bytes"));
}

TEST(GgufReader, RejectsTensorCountBeyondFile) {
  Bytes b;
  b.Header(1000, 0).Fill(100);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor count 1000 (at offset 8) needs at least 24 bytes "
                                       "per tensor info but only 100 bytes remain after the "
                                       "header and 0 metadata keys"));
  Bytes huge;
  huge.Header(uint64_t{1} << 62, 0).Fill(100);
  EXPECT_THAT(ParseError(huge), HasSubstr("tensor count 4611686018427387904 (at offset 8)"));
}

TEST(GgufReader, RejectsKeyLengthPastEof) {
  Bytes b;
  b.Header(0, 1).U64(9999999).Fill(20);
  EXPECT_THAT(ParseError(b),
              HasSubstr("metadata key #0 at offset 24: key length 9999999 (at offset 24) runs "
                        "past end of file (size 52)"));
}

TEST(GgufReader, RejectsStringValueLengthPastEof) {
  Bytes b;
  b.Header(0, 2).KeyU32("a", 1);
  const uint64_t key_at = b.pos();
  b.Str("b").U32(8);
  const uint64_t len_at = b.pos();
  b.U64(9999999).Fill(16);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #1 'b' at " + Off(key_at) +
                                       ": string length 9999999 (at " + Off(len_at) +
                                       ") runs past end of file (size " +
                                       std::to_string(b.pos()) + ")"));
}

TEST(GgufReader, RejectsUnknownValueType) {
  Bytes b;
  b.Header(0, 1).Str("k").U32(13).Fill(16);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #0 'k' at offset 24: value type id 13 (at "
                                       "offset 33) is not a GGUF type"));
}

TEST(GgufReader, RejectsTruncatedScalarValue) {
  Bytes b;
  b.Header(0, 1).Str("k").U32(10).U32(7);  // UINT64 with 4 bytes left
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #0 'k' at offset 24: UINT64 value (8 bytes "
                                       "at offset 37) runs past end of file (size 41)"));
}

TEST(GgufReader, RejectsHugeArrayCountBeforeAllocating) {
  Bytes b;
  b.Header(0, 1).Str("k").U32(9).U32(4);
  const uint64_t count_at = b.pos();
  b.U64(uint64_t{1} << 60).Fill(64);
  const double t0 = ThreadCpuSeconds();
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #0 'k' at offset 24: array count "
                                       "1152921504606846976 (at " + Off(count_at) +
                                       ") of UINT32 needs at least 4 bytes per item but only 64"));
  EXPECT_LT(ThreadCpuSeconds() - t0, 1.0);
  Bytes s;
  s.Header(0, 1).Str("k").U32(9).U32(8).U64(100).Fill(799);  // 100 strings need >= 800 bytes
  EXPECT_THAT(ParseError(s),
              HasSubstr("array count 100 (at offset 41) of STRING needs at least 8"));
}

TEST(GgufReader, RejectsBadArrayElementType) {
  Bytes b;
  b.Header(0, 1).Str("k").U32(9).U32(77).U64(1).Fill(8);
  EXPECT_THAT(ParseError(b), HasSubstr("array element type id 77 (at offset 37) is not a GGUF"));
}

TEST(GgufReader, RejectsTruncatedNestedItemWithPath) {
  Bytes b;
  b.Header(0, 1).Str("k").U32(9).U32(9).U64(2);  // ARRAY of 2 ARRAYs
  const uint64_t item0 = b.pos();
  b.U32(8).U64(1).Str("x");                       // item 0: ["x"]
  const uint64_t item1 = b.pos();
  b.U32(8).U64(1);                                 // item 1: [<string>]
  const uint64_t inner = b.pos();
  b.U64(500).Fill(3);
  EXPECT_THAT(ParseError(b), HasSubstr(": array item 1 at " + Off(item1) + ": array item 0 at " +
                                       Off(inner) + ": string length 500"));
  (void)item0;
}

// Nested ARRAY-of-ARRAY values, `levels` deep, innermost a one-item u8 array.
Bytes NestedArrays(int levels) {
  Bytes b;
  b.Header(0, 1).Str("k").U32(9);
  for (int i = 1; i < levels; ++i) b.U32(9).U64(1);
  b.U32(0).U64(1).U8(5);
  return b;
}

TEST(GgufReader, LimitsArrayNestingDepth) {
  auto ok = File::FromBytes(NestedArrays(kMaxArrayDepth).b);
  ASSERT_TRUE(ok.ok()) << ok.status();
  const Value* v = ok->Find("k");
  for (uint32_t i = 1; i < kMaxArrayDepth; ++i) v = &v->arr.at(0);
  EXPECT_EQ(v->arr.at(0).u, 5u);
  EXPECT_THAT(ParseError(NestedArrays(kMaxArrayDepth + 1)),
              HasSubstr("arrays nested more than 8 deep"));
  // Far deeper than the limit must still be an error, not a stack overflow.
  EXPECT_THAT(ParseError(NestedArrays(100000)), HasSubstr("arrays nested more than 8 deep"));
}

TEST(GgufReader, RejectsAlignmentOfWrongType) {
  Bytes b;
  b.Header(0, 1).Str("general.alignment").U32(5).U32(32);  // INT32
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #0 'general.alignment' at offset 24: "
                                       "general.alignment has type INT32; it must be UINT32"));
}

TEST(GgufReader, RejectsZeroAlignment) {
  Bytes b;
  b.Header(0, 2).KeyStr("a", "b");
  const uint64_t at = b.pos();
  b.KeyU32("general.alignment", 0);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #1 'general.alignment' at " + Off(at) +
                                       ": general.alignment is 0; it must be a nonzero power"));
}

TEST(GgufReader, RejectsNonPowerOfTwoAlignment) {
  Bytes b;
  b.Header(0, 1).KeyU32("general.alignment", 48);
  EXPECT_THAT(ParseError(b), HasSubstr("general.alignment is 48; it must be a nonzero power of"));
}

TEST(GgufReader, UsesCustomAlignment) {
  Bytes b;
  b.Header(1, 1).KeyU32("general.alignment", 256).Info("w", {1}, 0, 0).PadTo(256).Put<float>(2);
  auto f = File::FromBytes(b.b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset(), 256u);
}

TEST(GgufReader, RejectsDuplicateKey) {
  Bytes b;
  b.Header(0, 3).KeyU32("a", 1).KeyU32("b", 2);
  const uint64_t at = b.pos();
  b.KeyU32("a", 3);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #2 'a' at " + Off(at) +
                                       ": duplicate key (first defined as key #0)"));
}

TEST(GgufReader, EscapesAndCutsNamesInErrors) {
  Bytes b;
  b.Header(0, 2).KeyU32("a\nb\xff", 1).KeyU32("a\nb\xff", 2);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key #1 'a\\nb\\xff' at offset"));
  const std::string long_name(5000, 'n');
  Bytes t;
  t.Header(1, 0).Info(long_name, {1, 0}, 0, 0).PadTo(32).Fill(32);
  const std::string e = ParseError(t);
  EXPECT_THAT(e, HasSubstr("tensor \"" + std::string(80, 'n') + "...(5000 bytes)\" (info at"));
  EXPECT_LT(e.size(), 300u);
}

TEST(GgufReader, RejectsDuplicateTensorName) {
  Bytes b;
  b.Header(2, 0);
  const uint64_t first = b.pos();
  b.Info("w", {8}, 0, 0);
  const uint64_t second = b.pos();
  b.Info("w", {8}, 0, 32).PadTo(32).Fill(64);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at " + Off(second) +
                                       "): duplicate tensor name (first defined by the info at " +
                                       Off(first) + ")"));
}

TEST(GgufReader, RejectsTooManyDims) {
  Bytes b;
  b.Header(1, 0);
  b.Info("w", {1, 1, 1, 1, 1}, 0, 0).PadTo(32).Fill(4);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at offset 24): n_dims is 5 (at "
                                       "offset 33), more than 4"));
}

TEST(GgufReader, RejectsZeroDimension) {
  Bytes b;
  b.Header(1, 1).KeyStr("general.architecture", "llama");
  const uint64_t at = b.pos();
  b.Info("blk.0.attn_q.weight", {4, 4, 0}, 0, 0).PadTo(32).Fill(64);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"blk.0.attn_q.weight\" (info at " + Off(at) +
                                       "): dimension 2 is 0"));
}

TEST(GgufReader, RejectsNegativeDimension) {
  Bytes b;
  b.Header(1, 0).Info("w", {4, ~uint64_t{0}}, 0, 0).PadTo(32).Fill(64);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at offset 24): dimension 1 is -1 "
                                       "(negative)"));
}

TEST(GgufReader, RejectsShapeProductOverflow) {
  Bytes b;
  b.Header(1, 0).Info("w", {uint64_t{1} << 40, uint64_t{1} << 30}, 0, 0).PadTo(32).Fill(64);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at offset 24): shape [1099511627776, "
                                       "1073741824] has more than 2^63-1 elements"));
  // Element count fits but bytes do not (F64: 8 bytes per element).
  Bytes c;
  c.Header(1, 0).Info("w", {uint64_t{1} << 61}, 28, 0).PadTo(32).Fill(64);
  EXPECT_THAT(ParseError(c), HasSubstr("needs more than 2^63-1 bytes"));
}

TEST(GgufReader, RejectsUnknownTensorType) {
  for (uint32_t id : {4u, 5u, 31u, 99u}) {
    Bytes b;
    b.Header(1, 0);
    b.Info("w", {32}, id, 0).PadTo(32).Fill(64);
    EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at offset 24): unknown tensor type "
                                         "id " +
                                         std::to_string(id) + " (at offset 45)"));
  }
}

TEST(GgufReader, RejectsRowNotMultipleOfBlock) {
  Bytes b;
  b.Header(1, 0).Info("w", {48, 2}, 2, 0).PadTo(32).Fill(128);  // Q4_0: blocks of 32
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at offset 24): dimension 0 (48) is not "
                                       "a multiple of the Q4_0 block size 32"));
}

TEST(GgufReader, RejectsMisalignedDataOffset) {
  Bytes b;
  b.Header(1, 0).Info("w", {4}, 0, 8).PadTo(32).Fill(64);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at offset 24): data offset 8 is not a "
                                       "multiple of the alignment 32"));
}

TEST(GgufReader, RejectsDataPastEof) {
  Bytes b;
  b.Header(1, 0).Info("w", {64}, 0, 0).PadTo(32).Fill(100);  // needs 256 bytes
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"w\" (info at offset 24): data (256 bytes at data "
                                       "offset 0, file offset 64 + 0) runs past end of file "
                                       "(size 164)"));
  Bytes wrap;  // offset + size wraps around 2^64
  wrap.Header(1, 0).Info("w", {8}, 0, ~uint64_t{0} - 31).PadTo(32).Fill(64);
  EXPECT_THAT(ParseError(wrap), HasSubstr("runs past end of file"));
}

TEST(GgufReader, RejectsDataSectionPastEof) {
  Bytes b;
  b.Header(1, 0).Info("w", {1}, 0, 0);  // infos end at 57, data would start at 64
  EXPECT_THAT(ParseError(b), HasSubstr("data section starts at offset 64 (tensor infos end at 57, "
                                       "padded to alignment 32), past end of file (size 57)"));
}

TEST(GgufReader, RejectsOverlappingTensorData) {
  Bytes b;
  b.Header(2, 0).Info("a", {16}, 0, 0);  // [0, 64)
  const uint64_t at = b.pos();
  b.Info("b", {8}, 0, 32).PadTo(32).Fill(128);  // [32, 64)
  EXPECT_THAT(ParseError(b), HasSubstr("tensor \"b\" (info at " + Off(at) +
                                       "): data [32, 64) overlaps tensor \"a\" data [0, 64)"));
}

TEST(GgufReader, RejectsTruncatedTensorInfo) {
  Bytes b;
  b.Header(1, 0).Str("w").U32(2).U64(4);
  b.Fill(6);  // dimension 1 cut short; long enough for the tensor count to pass its bound
  b.b.resize(b.b.size() - 2);
  const std::string e = ParseError(b);
  EXPECT_THAT(e, HasSubstr("tensor \"w\" (info at offset 24): dimension 1 (8 bytes at offset 45) "
                           "runs past end of file"));
}

TEST(GgufReader, RejectsTooManyMetadataValues) {
  Bytes b;
  b.Header(0, 1).Str("k").U32(9).U32(0).U64(kMaxMetadataValues).Fill(kMaxMetadataValues);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata would hold more than 4194304 values"));
}

// Largest array the value budget allows, parsed well within the 1 s budget for < 1 GiB files.
TEST(GgufReader, ParsesLargeArraysFast) {
  Bytes b;
  const uint64_t n_u8 = kMaxMetadataValues / 2;
  const uint64_t n_str = kMaxMetadataValues / 4;
  b.Header(0, 2).Str("bytes").U32(9).U32(0).U64(n_u8).Fill(n_u8, 7);
  b.Str("strings").U32(9).U32(8).U64(n_str);
  for (uint64_t i = 0; i < n_str; ++i) b.Str("tok");
  const double t0 = ThreadCpuSeconds();
  auto f = File::FromBytes(b.b);
  const double s = ThreadCpuSeconds() - t0;
  ASSERT_TRUE(f.ok()) << f.status();
  std::printf("parsed %llu u8 + %llu string items (%zu bytes) in %.3f s of CPU\n",
              static_cast<unsigned long long>(n_u8), static_cast<unsigned long long>(n_str),
              b.b.size(), s);
  EXPECT_LT(s, 1.0);
  EXPECT_EQ(f->Find("strings")->arr.back().str, "tok");
}

TEST(GgufReader, ParsesMostTensorsFast) {
  Bytes b;
  b.Header(kMaxTensors, 0);
  for (uint64_t i = 0; i < kMaxTensors; ++i) {
    // Data in reverse info order, so the overlap check has to sort.
    b.Info("blk." + std::to_string(i) + ".ffn_down.weight", {8}, 0, (kMaxTensors - 1 - i) * 32);
  }
  b.PadTo(32).Fill(kMaxTensors * 32, 0);
  const double t0 = ThreadCpuSeconds();
  auto f = File::FromBytes(b.b);
  const double s = ThreadCpuSeconds() - t0;
  ASSERT_TRUE(f.ok()) << f.status();
  std::printf("parsed %llu tensor infos (%zu bytes) in %.3f s of CPU\n",
              static_cast<unsigned long long>(kMaxTensors), b.b.size(), s);
  EXPECT_LT(s, 1.0);
  EXPECT_EQ(f->FindTensor("blk.7.ffn_down.weight")->offset, (kMaxTensors - 8) * 32);
}

TEST(GgufReader, RejectsTooManyTensors) {
  Bytes b;
  b.Header(kMaxTensors + 1, 0).Fill((kMaxTensors + 1) * 24);
  EXPECT_THAT(ParseError(b), HasSubstr("tensor count 524289 (at offset 8) exceeds the limit "
                                       "524288"));
}

TEST(GgufReader, RejectsTooManyKeys) {
  Bytes b;
  b.Header(0, kMaxKeys + 1).Fill((kMaxKeys + 1) * 13);
  EXPECT_THAT(ParseError(b), HasSubstr("metadata key count 65537 (at offset 16) exceeds the limit "
                                       "65536"));
}

TEST(GgufReader, OpenNamesThePath) {
  auto missing = File::Open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/dir/model.gguf"));

  const std::string path = ::testing::TempDir() + "/gguf_reader_test_bad.gguf";
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fputs("GGUF", fp);
  std::fclose(fp);
  auto bad = File::Open(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(path + ": header: version"));

  fp = std::fopen(path.c_str(), "wb");
  std::fclose(fp);
  auto empty = File::Open(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("file is 0 bytes"));
  std::remove(path.c_str());
}

TEST(GgufReader, KeepsScalarBitsAndTypes) {
  Bytes b;
  b.Header(0, 4);
  b.Str("i8").U32(1).U8(0xff);
  b.Str("bool").U32(7).U8(1);
  b.Str("f32").U32(6).U32(0x7fc00123);  // NaN with a payload
  b.Str("i64").U32(11).U64(~uint64_t{0});
  auto f = File::FromBytes(b.b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Find("i8")->AsInt(), -1);
  EXPECT_EQ(f->Find("i8")->type, ValueType::INT8);
  EXPECT_EQ(f->Find("bool")->AsInt(), 1);
  EXPECT_TRUE(std::isnan(f->Find("f32")->AsFloat()));
  EXPECT_EQ(f->Find("f32")->u, 0x7fc00123u);
  EXPECT_EQ(f->Find("i64")->AsInt(), -1);
  EXPECT_EQ(f->Find("i64")->AsFloat(), -1.0);
}

}  // namespace
}  // namespace lockstep::gguf
