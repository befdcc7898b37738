// Writer: every value type and several tensor types round-trip through the reader, the layout
// matches llama.cpp/gguf-py (aligned offsets, zero padding), and Reserialize reproduces bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"

namespace lockstep::gguf {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kSeed = 1234;

std::vector<KeyValue> EveryValueType() {
  std::vector<KeyValue> md;
  md.push_back({"general.architecture", Value::String("llama")});
  md.push_back({"u8", Value::Int(ValueType::UINT8, 250)});
  md.push_back({"i8", Value::Int(ValueType::INT8, -7)});
  md.push_back({"u16", Value::Int(ValueType::UINT16, 65535)});
  md.push_back({"i16", Value::Int(ValueType::INT16, -32768)});
  md.push_back({"u32", Value::U32(4000000000u)});
  md.push_back({"i32", Value::I32(-123456)});
  md.push_back({"f32", Value::F32(0.1f)});
  md.push_back({"bool", Value::Bool(true)});
  md.push_back({"string", Value::String(std::string("nul\0inside \xe2\x98\x83", 15))});
  md.push_back({"u64", Value::U64(~uint64_t{0})});
  md.push_back({"i64", Value::I64(INT64_MIN)});
  md.push_back({"f64", Value::F64(-1e-300)});
  md.push_back({"empty_array", Value::Array(ValueType::FLOAT32, {})});
  md.push_back({"strings", Value::Array(ValueType::STRING,
                                        {Value::String("a"), Value::String(""),
                                         Value::String("ccc")})});
  md.push_back({"nested", Value::Array(ValueType::ARRAY,
                                       {Value::Array(ValueType::INT32, {Value::I32(1)}),
                                        Value::Array(ValueType::STRING, {Value::String("x")}),
                                        Value::Array(ValueType::ARRAY, {})})});
  return md;
}

void ExpectSameValue(const Value& a, const Value& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  switch (a.type) {
    case ValueType::STRING: EXPECT_EQ(a.str, b.str) << where; break;
    case ValueType::FLOAT32: case ValueType::FLOAT64:
      EXPECT_EQ(std::bit_cast<uint64_t>(a.f), std::bit_cast<uint64_t>(b.f)) << where;
      break;
    case ValueType::ARRAY:
      ASSERT_EQ(a.elem_type, b.elem_type) << where;
      ASSERT_EQ(a.arr.size(), b.arr.size()) << where;
      for (size_t i = 0; i < a.arr.size(); ++i) {
        ExpectSameValue(a.arr[i], b.arr[i], where + "[" + std::to_string(i) + "]");
      }
      break;
    default: EXPECT_EQ(a.u, b.u) << where; break;
  }
}

// Random bytes for a tensor of `type` with `shape`.
std::string RandomData(const std::vector<int64_t>& shape, quant::Type type, std::mt19937* rng) {
  auto bytes = TensorBytes(shape, type);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  std::string s(*bytes, '\0');
  for (char& c : s) c = static_cast<char>((*rng)() & 0xff);
  return s;
}

TEST(GgufWriter, RoundTripsEveryValueType) {
  const auto md = EveryValueType();
  auto bytes = Serialize(md, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto f = File::FromBytes(*bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->metadata().size(), md.size());
  for (size_t i = 0; i < md.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].key, md[i].key);
    ExpectSameValue(f->metadata()[i].value, md[i].value, md[i].key);
  }
  EXPECT_EQ(f->Find("i8")->AsInt(), -7);
  EXPECT_EQ(f->Find("i64")->AsInt(), INT64_MIN);
  EXPECT_EQ(f->Find("u64")->u, ~uint64_t{0});
  EXPECT_FLOAT_EQ(static_cast<float>(f->Find("f32")->AsFloat()), 0.1f);
  EXPECT_EQ(f->Find("string")->str.size(), 15u);
  auto again = Reserialize(*f);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *bytes);
}

TEST(GgufWriter, RoundTripsTensorsOfSeveralTypesWithLlamaCppLayout) {
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  struct Spec {
    const char* name;
    std::vector<int64_t> shape;
    quant::Type type;
  };
  const std::vector<Spec> specs = {
      {"f32", {3, 5}, quant::Type::F32},      {"f16", {7}, quant::Type::F16},
      {"bf16", {2, 2, 2}, quant::Type::BF16}, {"q4_0", {64, 2}, quant::Type::Q4_0},
      {"q8_0", {32}, quant::Type::Q8_0},      {"q4_k", {256, 3}, quant::Type::Q4_K},
      {"q6_k", {512}, quant::Type::Q6_K},     {"iq4_xs", {256}, quant::Type::IQ4_XS},
      {"i8", {5, 1, 1, 3}, quant::Type::I8},  {"mxfp4", {32, 2}, quant::Type::MXFP4},
  };
  std::vector<std::string> data;
  for (const Spec& s : specs) data.push_back(RandomData(s.shape, s.type, &rng));
  std::vector<WriteTensor> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    tensors.push_back({specs[i].name, specs[i].shape, specs[i].type, data[i]});
  }
  auto bytes = Serialize({{"general.architecture", Value::String("llama")}}, tensors);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto f = File::FromBytes(*bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors().size(), specs.size());
  EXPECT_EQ(f->data_offset() % 32, 0u);
  uint64_t expect_offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.shape, specs[i].shape);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.offset, expect_offset) << t.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->TensorData(t)), t.n_bytes), data[i]);
    // Padding after each tensor (the last one too) is zeros.
    const uint64_t end = f->data_offset() + t.offset + t.n_bytes;
    const uint64_t padded = (end + 31) / 32 * 32;
    for (uint64_t k = end; k < padded; ++k) EXPECT_EQ((*bytes)[k], '\0') << t.name << " pad " << k;
    expect_offset += (t.n_bytes + 31) / 32 * 32;
  }
  EXPECT_EQ(bytes->size(), f->data_offset() + expect_offset);
  for (uint64_t k = f->infos_end(); k < f->data_offset(); ++k) EXPECT_EQ((*bytes)[k], '\0');
  auto again = Reserialize(*f);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *bytes);
}

TEST(GgufWriter, AlignmentFromMetadataOrOptions) {
  const std::string one(4, '\x01');
  auto from_md = Serialize({{"general.alignment", Value::U32(128)}},
                           {{"a", {1}, quant::Type::F32, one}, {"b", {1}, quant::Type::F32, one}});
  ASSERT_TRUE(from_md.ok()) << from_md.status();
  auto f = File::FromBytes(*from_md);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->data_offset(), 128u);
  EXPECT_EQ(f->tensors()[1].offset, 128u);
  EXPECT_EQ(from_md->size(), 128u * 3);

  WriteOptions opt;
  opt.alignment = 64;
  auto from_opt = Serialize({}, {{"a", {1}, quant::Type::F32, one}}, opt);
  ASSERT_TRUE(from_opt.ok()) << from_opt.status();
  auto g = File::FromBytes(*from_opt);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->alignment(), 64u);
  ASSERT_NE(g->Find("general.alignment"), nullptr);
  EXPECT_EQ(g->Find("general.alignment")->type, ValueType::UINT32);
  EXPECT_EQ(*Reserialize(*g), *from_opt);
}

TEST(GgufWriter, WritesVersion2AndEmptyDataSections) {
  WriteOptions v2;
  v2.version = 2;
  auto bytes = Serialize({{"k", Value::String("v")}}, {}, v2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ((*bytes)[4], 2);
  EXPECT_EQ(bytes->size() % 32, 0u);
  auto f = File::FromBytes(*bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(*Reserialize(*f), *bytes);

  WriteOptions vocab_only;
  vocab_only.pad_empty_data = false;
  auto unpadded = Serialize({{"k", Value::String("v")}}, {}, vocab_only);
  ASSERT_TRUE(unpadded.ok());
  EXPECT_EQ(unpadded->size(), 24u + 8 + 1 + 4 + 8 + 1);
  auto g = File::FromBytes(*unpadded);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*Reserialize(*g), *unpadded);
}

TEST(GgufWriter, KeepsNanPayloads) {
  Value f32 = Value::F32(std::bit_cast<float>(0x7fa00001u));  // signalling NaN with payload
  Value f64 = Value::F64(std::bit_cast<double>(uint64_t{0xfff8000000000042}));
  auto bytes = Serialize({{"a", f32}, {"b", f64}}, {});
  ASSERT_TRUE(bytes.ok());
  auto f = File::FromBytes(*bytes);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Find("a")->u, 0x7fa00001u);
  EXPECT_EQ(f->Find("b")->u, uint64_t{0xfff8000000000042});
  EXPECT_EQ(*Reserialize(*f), *bytes);
  // A value built by hand (only `f` set) is written from `f`.
  Value hand;
  hand.type = ValueType::FLOAT32;
  hand.f = 2.5;
  auto h = File::FromBytes(*Serialize({{"h", hand}}, {}));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->Find("h")->AsFloat(), 2.5);
}

TEST(GgufWriter, RejectsWhatTheReaderWouldReject) {
  const std::string four(4, '\0');
  auto err = [](const absl::StatusOr<std::string>& s) {
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : std::string(s.status().message());
  };
  EXPECT_THAT(err(Serialize({{"a", Value::U32(1)}, {"a", Value::U32(2)}}, {})),
              HasSubstr("metadata key #1 'a': duplicate key"));
  EXPECT_THAT(err(Serialize({}, {{"t", {1}, quant::Type::F32, four},
                                 {"t", {1}, quant::Type::F32, four}})),
              HasSubstr("tensor #1 \"t\": duplicate tensor name"));
  EXPECT_THAT(err(Serialize({}, {{"t", {2}, quant::Type::F32, four}})),
              HasSubstr("tensor #0 \"t\": data is 4 bytes, shape and type need 8"));
  EXPECT_THAT(err(Serialize({}, {{"t", {1, 0}, quant::Type::F32, four}})),
              HasSubstr("tensor #0 \"t\": dimension 1 is 0"));
  EXPECT_THAT(err(Serialize({}, {{"t", {1, 1, 1, 1, 1}, quant::Type::F32, four}})),
              HasSubstr("n_dims is 5, more than 4"));
  EXPECT_THAT(err(Serialize({}, {{"t", {16}, quant::Type::Q4_0, four}})),
              HasSubstr("dimension 0 (16) is not a multiple of the Q4_0 block size 32"));
  EXPECT_THAT(err(Serialize({}, {{"t", {1}, static_cast<quant::Type>(4), four}})),
              HasSubstr("unknown tensor type id 4"));
  EXPECT_THAT(err(Serialize({{"a", Value::Array(ValueType::UINT8, {Value::U32(1)})}}, {})),
              HasSubstr("metadata key #0 'a': array item 0 has type UINT32 but the array holds "
                        "UINT8"));
  Value deep = Value::Array(ValueType::UINT8, {});
  for (uint32_t i = 0; i < kMaxArrayDepth; ++i) deep = Value::Array(ValueType::ARRAY, {deep});
  EXPECT_THAT(err(Serialize({{"deep", deep}}, {})), HasSubstr("arrays nested more than 8 deep"));
  EXPECT_THAT(err(Serialize({{"general.alignment", Value::I32(32)}}, {})),
              HasSubstr("general.alignment has type INT32; it must be UINT32"));
  EXPECT_THAT(err(Serialize({{"general.alignment", Value::U32(24)}}, {})),
              HasSubstr("general.alignment is 24"));
  WriteOptions v1;
  v1.version = 1;
  EXPECT_THAT(err(Serialize({}, {}, v1)), HasSubstr("GGUF version 1 cannot be written"));
  WriteOptions bad_align;
  bad_align.alignment = 0;
  EXPECT_THAT(err(Serialize({}, {}, bad_align)), HasSubstr("alignment 0 must be a nonzero power"));
}

TEST(GgufWriter, WriteFileThenOpen) {
  const std::string path = ::testing::TempDir() + "/gguf_writer_test.gguf";
  const std::string data(68, '\x05');
  ASSERT_TRUE(WriteFile(path, {{"general.architecture", Value::String("gemma3")}},
                        {{"w", {32, 2}, quant::Type::Q8_0, data}})
                  .ok());
  auto f = File::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Find("general.architecture")->str, "gemma3");
  EXPECT_EQ(f->FindTensor("w")->n_bytes, 68u);
  std::remove(path.c_str());
  EXPECT_FALSE(WriteFile("/nonexistent/dir/x.gguf", {}, {}).ok());
}

// Files whose layout the writer does not reproduce still re-serialize to a valid file with the
// same metadata, infos and tensor bytes (and that output is then a fixed point).
void ExpectValidButDifferent(const std::string& input) {
  auto f = File::FromBytes(input);
  ASSERT_TRUE(f.ok()) << f.status();
  auto out = Reserialize(*f);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(*out, input);
  auto g = File::FromBytes(*out);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->tensors().size(), f->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const TensorInfo& a = f->tensors()[i];
    const TensorInfo& b = g->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(0, std::memcmp(f->TensorData(a), g->TensorData(b), a.n_bytes));
  }
  EXPECT_EQ(*Reserialize(*g), *out);
}

TEST(GgufWriter, ReserializesNonCanonicalLayoutsToValidFiles) {
  const std::string a(4, '\x0a'), b(4, '\x0b');
  auto canonical =
      Serialize({}, {{"a", {1}, quant::Type::F32, a}, {"b", {1}, quant::Type::F32, b}});
  ASSERT_TRUE(canonical.ok());
  auto f = File::FromBytes(*canonical);
  ASSERT_TRUE(f.ok());
  const uint64_t d = f->data_offset();

  std::string nonzero_pad = *canonical;
  nonzero_pad[d + 5] = '\x7f';
  ExpectValidButDifferent(nonzero_pad);

  ExpectValidButDifferent(*canonical + "trailing");

  // Swap the two tensors' data: infos say a at 32, b at 0.
  std::string swapped = *canonical;
  const uint64_t off_a = f->tensors()[0].info_offset + 8 + 1 + 4 + 8 + 4;
  const uint64_t off_b = f->tensors()[1].info_offset + 8 + 1 + 4 + 8 + 4;
  swapped[off_a] = 32;
  swapped[off_b] = 0;
  swapped.replace(d, 4, b);
  swapped.replace(d + 32, 4, a);
  ExpectValidButDifferent(swapped);
}

}  // namespace
}  // namespace lockstep::gguf
