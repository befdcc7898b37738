// InspectText / InspectJson: header fields, abbreviation of long arrays and strings (and `full`),
// tensor lines and totals, and output that stays printable / valid UTF-8 for hostile strings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/gguf/inspect.h"

namespace lockstep::gguf {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

File Sample() {
  std::vector<Value> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back(Value::String("tok" + std::to_string(i)));
  std::vector<KeyValue> md = {
      {"general.architecture", Value::String("llama")},
      {"tokenizer.ggml.tokens", Value::Array(ValueType::STRING, tokens)},
      {"tokenizer.chat_template", Value::String(std::string(1000, 'x') + "END")},
      {"weird", Value::String(std::string("a\n\"b\"\x01\xff\xc3", 8))},
      {"f32", Value::F32(1e-6f)},
      {"i8", Value::Int(ValueType::INT8, -5)},
      {"flag", Value::Bool(false)},
      {"nested", Value::Array(ValueType::ARRAY, {Value::Array(ValueType::UINT8, {Value::U32(1)})})},
  };
  md.back().value.arr[0].arr[0] = Value::Int(ValueType::UINT8, 1);
  const std::string f32(4 * 6, '\0'), q(18 * 2, '\0');
  auto bytes = Serialize(md, {{"a.weight", {3, 2}, quant::Type::F32, f32},
                              {"b.weight", {64}, quant::Type::Q4_0, q}});
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto f = File::FromBytes(*bytes);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

TEST(GgufInspect, TextAbbreviatesUnlessFull) {
  const File f = Sample();
  const std::string t = InspectText(f, false);
  EXPECT_THAT(t, HasSubstr("GGUF v3, " + std::to_string(f.file_size()) + " bytes"));
  EXPECT_THAT(t, HasSubstr("alignment 32, 8 metadata keys, 2 tensors, data at offset " +
                           std::to_string(f.data_offset())));
  EXPECT_THAT(t, HasSubstr("tokenizer.ggml.tokens: ARRAY[STRING x 100] = [\"tok0\", \"tok1\", "
                           "\"tok2\", \"tok3\", \"tok4\", \"tok5\", \"tok6\", \"tok7\"] ... "
                           "(100 items)"));
  EXPECT_THAT(t, Not(HasSubstr("tok8")));
  EXPECT_THAT(t, HasSubstr("\"... (1003 bytes)"));
  EXPECT_THAT(t, Not(HasSubstr("END")));
  EXPECT_THAT(t, HasSubstr("f32: FLOAT32 = 1e-06"));
  EXPECT_THAT(t, HasSubstr("i8: INT8 = -5"));
  EXPECT_THAT(t, HasSubstr("flag: BOOL = false"));
  EXPECT_THAT(t, HasSubstr("nested: ARRAY[ARRAY x 1] = [[1]]"));
  EXPECT_THAT(t, HasSubstr("a.weight  F32"));
  EXPECT_THAT(t, HasSubstr("[3, 2]"));
  EXPECT_THAT(t, HasSubstr("b.weight  Q4_0"));
  EXPECT_THAT(t, HasSubstr("total: 2 tensors, 70 elements, 60 bytes"));

  const std::string full = InspectText(f, true);
  EXPECT_THAT(full, HasSubstr("\"tok99\"]"));
  EXPECT_THAT(full, Not(HasSubstr("(100 items)")));
  EXPECT_THAT(full, HasSubstr("xEND\""));
}

TEST(GgufInspect, TextEscapesControlAndInvalidBytes) {
  const std::string t = InspectText(Sample(), false);
  EXPECT_THAT(t, HasSubstr(R"(weird: STRING = "a\n\"b\"\x01\xff\xc3")"));
}

TEST(GgufInspect, JsonHasHeaderMetadataTensorsTotal) {
  const File f = Sample();
  const nlohmann::json j = InspectJson(f, false);
  EXPECT_EQ(j["header"]["version"], 3);
  EXPECT_EQ(j["header"]["alignment"], 32);
  EXPECT_EQ(j["header"]["n_kv"], 8);
  EXPECT_EQ(j["header"]["n_tensors"], 2);
  EXPECT_EQ(j["header"]["data_offset"], f.data_offset());
  EXPECT_EQ(j["header"]["file_size"], f.file_size());
  const auto& tokens = j["metadata"][1];
  EXPECT_EQ(tokens["key"], "tokenizer.ggml.tokens");
  EXPECT_EQ(tokens["type"], "ARRAY");
  EXPECT_EQ(tokens["elem_type"], "STRING");
  EXPECT_EQ(tokens["count"], 100);
  EXPECT_EQ(tokens["value"].size(), kInspectItems);
  EXPECT_EQ(tokens["truncated"], true);
  EXPECT_EQ(j["metadata"][0].count("truncated"), 0u);
  EXPECT_EQ(j["metadata"][4]["value"].get<double>(), static_cast<double>(1e-6f));
  EXPECT_EQ(j["metadata"][5]["value"], -5);
  EXPECT_EQ(j["metadata"][6]["value"], false);
  EXPECT_EQ(j["tensors"][1]["name"], "b.weight");
  EXPECT_EQ(j["tensors"][1]["type"], "Q4_0");
  EXPECT_EQ(j["tensors"][1]["shape"], nlohmann::json({64}));
  EXPECT_EQ(j["tensors"][1]["offset"], 32);
  EXPECT_EQ(j["tensors"][1]["bytes"], 36);
  EXPECT_EQ(j["total"]["bytes"], 60);
  EXPECT_EQ(j["total"]["elements"], 70);

  const nlohmann::json full = InspectJson(f, true);
  EXPECT_EQ(full["metadata"][1]["value"].size(), 100u);
  EXPECT_EQ(full["metadata"][1].count("truncated"), 0u);
}

TEST(GgufInspect, JsonStringsAreValidUtf8) {
  const nlohmann::json j = InspectJson(Sample(), true);
  std::string dumped;
  ASSERT_NO_THROW(dumped = j.dump());
  EXPECT_EQ(j["metadata"][3]["value"].get<std::string>(),
            "a\n\"b\"\x01\xef\xbf\xbd\xef\xbf\xbd");  // \xff and a cut \xc3: U+FFFD each
}

TEST(GgufInspect, AbbreviationDoesNotSplitUtf8) {
  std::string s;
  while (s.size() < kInspectStringBytes + 10) s += "\xe2\x98\x83";  // U+2603, 3 bytes
  auto bytes = Serialize({{"snow", Value::String(s)}}, {});
  ASSERT_TRUE(bytes.ok());
  auto f = File::FromBytes(*bytes);
  ASSERT_TRUE(f.ok());
  const std::string t = InspectText(*f, false);
  EXPECT_THAT(t, Not(HasSubstr("\\x")));
  EXPECT_THAT(t, HasSubstr("... (" + std::to_string(s.size()) + " bytes)"));
  const std::string v = InspectJson(*f, false)["metadata"][0]["value"];
  EXPECT_THAT(v, Not(HasSubstr("\xef\xbf\xbd")));
}

}  // namespace
}  // namespace lockstep::gguf
