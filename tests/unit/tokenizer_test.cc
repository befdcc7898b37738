// Tokenizer unit tests on small vocabularies built in memory: merge priority, byte fallback,
// special-token parsing, invalid UTF-8, long words, and metadata errors naming their field.
#include "engine/tokenizer/tokenizer.h"

#include <chrono>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "gtest/gtest.h"

namespace lockstep::tokenizer {
namespace {

using gguf::KeyValue;
using gguf::Value;
using gguf::ValueType;

Value Strings(const std::vector<std::string>& items) {
  std::vector<Value> v;
  for (const std::string& s : items) v.push_back(Value::String(s));
  return Value::Array(ValueType::STRING, std::move(v));
}
Value Ints(const std::vector<int32_t>& items) {
  std::vector<Value> v;
  for (int32_t x : items) v.push_back(Value::I32(x));
  return Value::Array(ValueType::INT32, std::move(v));
}
Value Floats(const std::vector<float>& items) {
  std::vector<Value> v;
  for (float x : items) v.push_back(Value::F32(x));
  return Value::Array(ValueType::FLOAT32, std::move(v));
}

// GPT-2's byte alphabet spelling of byte b.
std::string ByteSymbol(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  uint32_t cp = b;
  if (!printable) {
    cp = 256;
    for (int k = 0; k < b; ++k) {
      if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE)) ++cp;
    }
  }
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// A byte-level vocabulary: ids 0..255 are the byte symbols, then `extra` tokens, then
// <|im_start|> <|im_end|> (CONTROL) and <think> (USER_DEFINED).
struct ByteLevelSpec {
  std::vector<std::string> extra;
  std::vector<std::string> merges;
  std::string pre = "gpt2";
  std::vector<int> drop_bytes;  // byte symbols left out of the vocabulary
};

std::vector<KeyValue> ByteLevelMetadata(const ByteLevelSpec& spec) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    const bool dropped =
        std::find(spec.drop_bytes.begin(), spec.drop_bytes.end(), b) != spec.drop_bytes.end();
    tokens.push_back(dropped ? "<unused" + std::to_string(b) + ">" : ByteSymbol(b));
    types.push_back(dropped ? 5 : 1);
  }
  for (const std::string& t : spec.extra) {
    tokens.push_back(t);
    types.push_back(1);
  }
  for (const char* t : {"<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(t);
    types.push_back(3);
  }
  tokens.push_back("<think>");
  types.push_back(4);
  const int32_t im_end = static_cast<int32_t>(tokens.size()) - 2;
  return {
      {"general.architecture", Value::String("llama")},
      {"tokenizer.ggml.model", Value::String("gpt2")},
      {"tokenizer.ggml.pre", Value::String(spec.pre)},
      {"tokenizer.ggml.tokens", Strings(tokens)},
      {"tokenizer.ggml.token_type", Ints(types)},
      {"tokenizer.ggml.merges", Strings(spec.merges)},
      {"tokenizer.ggml.bos_token_id", Value::U32(im_end - 1)},
      {"tokenizer.ggml.eos_token_id", Value::U32(im_end)},
  };
}

Tokenizer MustLoad(const std::vector<KeyValue>& md) {
  absl::StatusOr<Tokenizer> t = Tokenizer::FromMetadata(md);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

std::vector<std::string> Texts(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.TokenText(id));
  return out;
}

std::string MustDecode(const Tokenizer& t, const std::vector<int32_t>& ids) {
  absl::StatusOr<std::string> s = t.Decode(ids);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::string();
}

using Strs = std::vector<std::string>;

TEST(ByteLevelBpe, LowerRankMergesFirst) {
  ByteLevelSpec spec{.extra = {"ab", "bc"}, .merges = {"b c", "a b"}};
  Tokenizer t = MustLoad(ByteLevelMetadata(spec));
  EXPECT_EQ(Texts(t, t.Encode("abc", false, false)), (Strs{"a", "bc"}));
  spec.merges = {"a b", "b c"};
  Tokenizer u = MustLoad(ByteLevelMetadata(spec));
  EXPECT_EQ(Texts(u, u.Encode("abc", false, false)), (Strs{"ab", "c"}));
}

TEST(ByteLevelBpe, EqualRankMergesLeftmostFirst) {
  Tokenizer t = MustLoad(ByteLevelMetadata({.extra = {"aa"}, .merges = {"a a"}}));
  EXPECT_EQ(Texts(t, t.Encode("aaa", false, false)), (Strs{"aa", "a"}));
  EXPECT_EQ(Texts(t, t.Encode("aaaa", false, false)), (Strs{"aa", "aa"}));
}

TEST(ByteLevelBpe, SpaceJoinsTheFollowingWord) {
  const std::string g = ByteSymbol(' ');  // "Ġ"
  Tokenizer t = MustLoad(ByteLevelMetadata({.extra = {g + "b"}, .merges = {g + " b"}}));
  EXPECT_EQ(Texts(t, t.Encode("a b", false, false)), (Strs{"a", g + "b"}));
  // \s+(?!\S): of three spaces before a word, the last one joins the word.
  EXPECT_EQ(Texts(t, t.Encode("a   b", false, false)), (Strs{"a", g, g, g + "b"}));
  EXPECT_EQ(MustDecode(t, t.Encode("a   b", false, false)), "a   b");
}

TEST(ByteLevelBpe, IsolatedDigitsPreTokenizer) {
  Tokenizer t = MustLoad(ByteLevelMetadata({.extra = {"12"}, .merges = {"1 2"}, .pre = "smollm"}));
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kGpt2IsolatedDigits);
  EXPECT_EQ(Texts(t, t.Encode("12", false, false)), (Strs{"1", "2"}));
  Tokenizer u = MustLoad(ByteLevelMetadata({.extra = {"12"}, .merges = {"1 2"}, .pre = "gpt2"}));
  EXPECT_EQ(Texts(u, u.Encode("12", false, false)), (Strs{"12"}));
}

TEST(ByteLevelBpe, SpecialTokensParsedOnlyWhenAsked) {
  Tokenizer t = MustLoad(ByteLevelMetadata({}));
  const int32_t start = t.FindToken("<|im_start|>"), end = t.FindToken("<|im_end|>");
  const int32_t think = t.FindToken("<think>");
  const std::string text = "<|im_start|>hi<think><|im_end|>";
  const std::vector<int32_t> parsed = t.Encode(text, false, true);
  EXPECT_EQ(parsed.front(), start);
  EXPECT_EQ(parsed.back(), end);
  const std::vector<int32_t> plain = t.Encode(text, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  // USER_DEFINED tokens are matched whole either way.
  EXPECT_EQ(std::count(plain.begin(), plain.end(), think), 1);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), think), 1);
  EXPECT_EQ(MustDecode(t, parsed), text);
  EXPECT_EQ(MustDecode(t, plain), text);
  EXPECT_EQ(t.Encode("x", true, false).front(), t.bos_id());
  EXPECT_TRUE(t.IsEndOfTurn(end));
  EXPECT_FALSE(t.IsEndOfTurn(start));
}

TEST(ByteLevelBpe, InvalidUtf8RoundTrips) {
  Tokenizer t = MustLoad(ByteLevelMetadata({.extra = {"ab"}, .merges = {"a b"}}));
  const std::string text("\xff\xfe\x80 ab\xc3 \xed\xa0\x80 \xf4\x90\x80\x80\0z", 19);
  EXPECT_TRUE(t.RoundTrips(text));
  EXPECT_EQ(MustDecode(t, t.Encode(text, false, true)), text);
}

TEST(ByteLevelBpe, BytesWithoutASymbolAreDropped) {
  Tokenizer t = MustLoad(ByteLevelMetadata({.drop_bytes = {0x04}}));
  EXPECT_FALSE(t.RoundTrips("a\x04" "b"));
  EXPECT_EQ(Texts(t, t.Encode("a\x04" "b", false, false)), (Strs{"a", "b"}));
}

// Issue 9: a dropped byte changes the prompt, so callers that take user text ask first; the
// error names the byte and its offset.
TEST(ByteLevelBpe, CheckEncodableNamesTheFirstDroppedByte) {
  Tokenizer t = MustLoad(ByteLevelMetadata({.drop_bytes = {0xC0, 0xF5}}));
  EXPECT_TRUE(t.CheckEncodable("plain text").ok());
  const absl::Status s = t.CheckEncodable("ab\xC0" "cd\xF5");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("byte 0xC0 at offset 2"), std::string_view::npos) << s;
  Tokenizer full = MustLoad(ByteLevelMetadata({}));
  EXPECT_TRUE(full.CheckEncodable("ab\xC0" "cd\xF5").ok());  // every byte has a symbol
}

TEST(ByteLevelBpe, LongWordIsNotQuadratic) {
  // Merges doubling runs of 'a' up to 1024; a 1 MiB word of 'a' takes ~1M heap operations.
  ByteLevelSpec spec;
  std::string run = "a";
  for (int k = 0; k < 10; ++k) {
    spec.merges.push_back(run + " " + run);
    run += run;
    spec.extra.push_back(run);
  }
  Tokenizer t = MustLoad(ByteLevelMetadata(spec));
  const std::string text(1 << 20, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t.Encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("1 MiB single word: %zu tokens in %.3f s\n", ids.size(), s);
  EXPECT_EQ(ids.size(), 1024u);
  EXPECT_EQ(MustDecode(t, ids), text);
  EXPECT_LT(s, 10.0);
}

// A SentencePiece vocabulary: <unk> <s> </s> (CONTROL), <start_of_turn> (CONTROL), <b>
// (USER_DEFINED), the 256 <0xXX> BYTE tokens, then `pieces` with `scores`.
std::vector<KeyValue> SpmMetadata(const std::vector<std::string>& pieces,
                                  const std::vector<float>& scores, bool add_space_prefix,
                                  const std::string& arch = "llama") {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<start_of_turn>", "<b>"};
  std::vector<int32_t> types = {3, 3, 3, 3, 4};
  std::vector<float> all_scores(5, 0.0f);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
    all_scores.push_back(0.0f);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    tokens.push_back(pieces[i]);
    types.push_back(1);
    all_scores.push_back(scores[i]);
  }
  return {
      {"general.architecture", Value::String(arch)},
      {"tokenizer.ggml.model", Value::String("llama")},
      {"tokenizer.ggml.tokens", Strings(tokens)},
      {"tokenizer.ggml.scores", Floats(all_scores)},
      {"tokenizer.ggml.token_type", Ints(types)},
      {"tokenizer.ggml.bos_token_id", Value::U32(1)},
      {"tokenizer.ggml.eos_token_id", Value::U32(2)},
      {"tokenizer.ggml.unknown_token_id", Value::U32(0)},
      {"tokenizer.ggml.add_space_prefix", Value::Bool(add_space_prefix)},
  };
}

const std::string kSp = "\xE2\x96\x81";  // U+2581

TEST(SentencePieceBpe, HigherScoreMergesFirst) {
  const Strs pieces = {kSp, "a", "b", "c", "ab", "bc"};
  Tokenizer t = MustLoad(SpmMetadata(pieces, {-1, -2, -3, -4, -5, -6}, false));
  EXPECT_EQ(t.model(), Model::kSentencePieceBpe);
  EXPECT_TRUE(t.add_bos_default());
  EXPECT_EQ(Texts(t, t.Encode("abc", false, false)), (Strs{"ab", "c"}));
  Tokenizer u = MustLoad(SpmMetadata(pieces, {-1, -2, -3, -4, -6, -5}, false));
  EXPECT_EQ(Texts(u, u.Encode("abc", false, false)), (Strs{"a", "bc"}));
  // Gemma files rank merges by position (transformers), whatever the scores say.
  Tokenizer g = MustLoad(SpmMetadata(pieces, {-1, -2, -3, -4, -6, -5}, false, "gemma3"));
  EXPECT_EQ(Texts(g, g.Encode("abc", false, false)), (Strs{"ab", "c"}));
}

TEST(SentencePieceBpe, SpacesAndPrefix) {
  const Strs pieces = {kSp, "a", "b", kSp + "a", kSp + "b"};
  Tokenizer t = MustLoad(SpmMetadata(pieces, {-1, -2, -3, -4, -5}, true));
  EXPECT_EQ(Texts(t, t.Encode("a b", true, false)), (Strs{"<s>", kSp + "a", kSp + "b"}));
  EXPECT_EQ(MustDecode(t, t.Encode("a b", false, false)), "a b");
  Tokenizer u = MustLoad(SpmMetadata(pieces, {-1, -2, -3, -4, -5}, false));
  EXPECT_EQ(Texts(u, u.Encode("a b", false, false)), (Strs{"a", kSp + "b"}));
  EXPECT_EQ(MustDecode(u, u.Encode(" a b", false, false)), " a b");
}

TEST(SentencePieceBpe, ByteFallbackAndInvalidUtf8) {
  Tokenizer t = MustLoad(SpmMetadata({kSp, "a"}, {-1, -2}, false));
  EXPECT_EQ(Texts(t, t.Encode("a\xC3\xA9", false, false)), (Strs{"a", "<0xC3>", "<0xA9>"}));
  const std::string bad("\xff" "a\xc3\0\xe2\x82", 6);
  EXPECT_TRUE(t.RoundTrips(bad));
  EXPECT_EQ(MustDecode(t, t.Encode(bad, false, true)), bad);
  EXPECT_FALSE(t.RoundTrips("x" + kSp));  // a literal U+2581 decodes as a space
}

TEST(SentencePieceBpe, ControlAndUserDefinedTokens) {
  Tokenizer t = MustLoad(SpmMetadata({kSp, "a"}, {-1, -2}, false));
  EXPECT_EQ(Texts(t, t.Encode("<start_of_turn>a<b>", false, true)),
            (Strs{"<start_of_turn>", "a", "<b>"}));
  const std::vector<int32_t> plain = t.Encode("<start_of_turn>a<b>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 3), 0);
  EXPECT_EQ(plain.back(), 4);  // USER_DEFINED <b> still whole
  EXPECT_EQ(MustDecode(t, plain), "<start_of_turn>a<b>");
}

TEST(Tokenizer, DecodeRejectsOutOfRangeIds) {
  Tokenizer t = MustLoad(SpmMetadata({kSp, "a"}, {-1, -2}, false));
  const std::vector<int32_t> ids = {5, t.vocab_size(), 1};
  absl::StatusOr<std::string> s = t.Decode(ids);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.status().message().find("ids[1]"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find(std::to_string(t.vocab_size())), std::string::npos);
  EXPECT_FALSE(t.TokenPiece(-1).ok());
  EXPECT_EQ(t.TokenText(-1), "");
}

// Replaces (or removes, with an empty name) one key of `md`.
std::vector<KeyValue> With(std::vector<KeyValue> md, const std::string& key,
                           std::optional<Value> v) {
  std::erase_if(md, [&](const KeyValue& kv) { return kv.key == key; });
  if (v.has_value()) md.push_back({key, *std::move(v)});
  return md;
}

void ExpectError(const std::vector<KeyValue>& md, const std::vector<std::string>& mentions) {
  absl::StatusOr<Tokenizer> t = Tokenizer::FromMetadata(md);
  ASSERT_FALSE(t.ok());
  for (const std::string& m : mentions) {
    EXPECT_NE(t.status().message().find(m), std::string::npos)
        << "error \"" << t.status().message() << "\" does not mention \"" << m << "\"";
  }
}

TEST(TokenizerErrors, NameTheField) {
  const std::vector<KeyValue> bpe = ByteLevelMetadata({.extra = {"ab"}, .merges = {"a b"}});
  ExpectError(With(bpe, "tokenizer.ggml.merges", Strings({"a b", "a zz"})),
              {"tokenizer.ggml.merges[1]", "\"zz\""});
  ExpectError(With(bpe, "tokenizer.ggml.merges", Strings({"a b c"})),
              {"tokenizer.ggml.merges[0]", "one space"});
  ExpectError(With(bpe, "tokenizer.ggml.merges", std::nullopt), {"tokenizer.ggml.merges", "missing"});
  ExpectError(With(bpe, "tokenizer.ggml.token_type", Ints({1, 1})),
              {"tokenizer.ggml.token_type", "2 entries", "260"});
  ExpectError(With(bpe, "tokenizer.ggml.tokens", Value::String("x")),
              {"tokenizer.ggml.tokens", "ARRAY"});
  ExpectError(With(bpe, "tokenizer.ggml.tokens", std::nullopt), {"tokenizer.ggml.tokens"});
  ExpectError(With(bpe, "tokenizer.ggml.bos_token_id", Value::U32(100000)),
              {"tokenizer.ggml.bos_token_id", "100000"});
  ExpectError(With(bpe, "tokenizer.ggml.eos_token_id", std::nullopt),
              {"tokenizer.ggml.eos_token_id", "missing"});
  ExpectError(With(bpe, "tokenizer.ggml.pre", Value::String("nope")), {"tokenizer.ggml.pre", "nope"});
  ExpectError(With(bpe, "tokenizer.ggml.model", Value::String("wordpiece")),
              {"tokenizer.ggml.model", "wordpiece"});

  const std::vector<KeyValue> spm = SpmMetadata({kSp, "a"}, {-1, -2}, false);
  ExpectError(With(spm, "tokenizer.ggml.scores", Floats({0, 0, 0})),
              {"tokenizer.ggml.scores", "3 entries"});
  ExpectError(With(spm, "tokenizer.ggml.scores", std::nullopt), {"tokenizer.ggml.scores"});
  std::vector<int32_t> types(263, 1);
  types[7] = 9;
  ExpectError(With(spm, "tokenizer.ggml.token_type", Ints(types)), {"tokenizer.ggml.token_type[7]"});
  types[7] = 6;  // BYTE, but id 7 is spelled <0x02>, fine; make id 262 ("a") BYTE instead
  types[262] = 6;
  ExpectError(With(spm, "tokenizer.ggml.token_type", Ints(types)),
              {"tokenizer.ggml.tokens[262]", "<0xXX>"});
  std::vector<KeyValue> dup = spm;
  dup.push_back({"tokenizer.ggml.model", Value::String("llama")});
  ExpectError(dup, {"tokenizer.ggml.model", "duplicate"});
}

TEST(Tokenizer, LoadsThroughAGgufFile) {
  absl::StatusOr<std::string> bytes =
      gguf::Serialize(ByteLevelMetadata({.extra = {"ab"}, .merges = {"a b"}}), {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<gguf::File> file = gguf::File::FromBytes(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tokenizer> t = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Texts(*t, t->Encode("ab", false, false)), (Strs{"ab"}));
}

}  // namespace
}  // namespace lockstep::tokenizer
