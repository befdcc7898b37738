// libFuzzer target: encode arbitrary bytes with small in-memory tokenizers (byte-level BPE under
// each pre-tokenizer, and SentencePiece BPE with byte fallback), then decode. Aborts when an id
// is out of range, Decode fails, or Decode(Encode(s)) != s where RoundTrips(s) promises it (for
// the byte-level vocabularies here, which hold all 256 byte symbols, that is every input).
// Input: byte 0 picks the tokenizer and parse_special; the rest is the text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using lockstep::gguf::KeyValue;
using lockstep::gguf::Value;
using lockstep::gguf::ValueType;
using lockstep::tokenizer::Tokenizer;

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

bool Printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

// GPT-2's byte alphabet, ids 0..255.
std::vector<std::string> ByteSymbols() {
  std::vector<std::string> out;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    lockstep::tokenizer::AppendUtf8(Printable(b) ? b : next++, &s);
    out.push_back(s);
  }
  return out;
}

// Shared pieces for both vocabularies: merges of common English fragments, digits and runs.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"t", "h"}, {"th", "e"}, {"i", "n"}, {"in", "g"}, {"a", "n"}, {"an", "d"}, {"e", "r"},
    {"1", "2"}, {"12", "3"}, {"a", "a"}, {"aa", "aa"}, {"o", "n"}, {"'", "s"}, {"<", "|"},
};

Tokenizer MakeByteLevel(const std::string& pre) {
  const std::vector<std::string> symbols = ByteSymbols();
  const std::string space = symbols[' '];
  std::vector<std::string> tokens = symbols;
  std::vector<std::string> merges;
  for (const auto& [l, r] : kMerges) {
    tokens.push_back(l + r);
    merges.push_back(l + " " + r);
  }
  for (const char* w : {"the", "and", "ing"}) {
    tokens.push_back(space + w);
    merges.push_back(space + " " + w);
  }
  std::vector<int32_t> types(tokens.size(), 1);
  for (const char* t : {"<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(t);
    types.push_back(3);
  }
  tokens.push_back("<think>");
  types.push_back(4);
  const std::vector<KeyValue> md = {
      {"tokenizer.ggml.model", Value::String("gpt2")},
      {"tokenizer.ggml.pre", Value::String(pre)},
      {"tokenizer.ggml.tokens", Strings(tokens)},
      {"tokenizer.ggml.token_type", Ints(types)},
      {"tokenizer.ggml.merges", Strings(merges)},
      {"tokenizer.ggml.bos_token_id", Value::U32(static_cast<uint32_t>(tokens.size() - 3))},
      {"tokenizer.ggml.eos_token_id", Value::U32(static_cast<uint32_t>(tokens.size() - 2))},
  };
  absl::StatusOr<Tokenizer> t = Tokenizer::FromMetadata(md);
  if (!t.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", t.status().ToString().c_str());
    std::abort();
  }
  return *std::move(t);
}

Tokenizer MakeSentencePiece() {
  const std::string sp = "\xE2\x96\x81";
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<start_of_turn>", "<b>"};
  std::vector<int32_t> types = {3, 3, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  for (const char* c : {"a", "e", "h", "t", "n", "d", "g", "i", "1", "2", "3", "'", "s", "<", "|"}) {
    tokens.push_back(c);
  }
  tokens.push_back(sp);
  for (const auto& [l, r] : kMerges) tokens.push_back(l + r);
  for (const char* w : {"the", "and", "ing"}) tokens.push_back(sp + w);
  std::vector<Value> scores;
  for (size_t i = 0; i < tokens.size(); ++i) scores.push_back(Value::F32(-static_cast<float>(i)));
  types.resize(tokens.size(), 1);
  const std::vector<KeyValue> md = {
      {"tokenizer.ggml.model", Value::String("llama")},
      {"tokenizer.ggml.tokens", Strings(tokens)},
      {"tokenizer.ggml.scores", Value::Array(ValueType::FLOAT32, std::move(scores))},
      {"tokenizer.ggml.token_type", Ints(types)},
      {"tokenizer.ggml.bos_token_id", Value::U32(1)},
      {"tokenizer.ggml.eos_token_id", Value::U32(2)},
      {"tokenizer.ggml.unknown_token_id", Value::U32(0)},
      {"tokenizer.ggml.add_space_prefix", Value::Bool(false)},
  };
  absl::StatusOr<Tokenizer> t = Tokenizer::FromMetadata(md);
  if (!t.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", t.status().ToString().c_str());
    std::abort();
  }
  return *std::move(t);
}

[[noreturn]] void Fail(const char* what, const std::string& text) {
  std::fprintf(stderr, "tokenizer_fuzz: %s (input %zu bytes)\n", what, text.size());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Tokenizer>* tokenizers = new std::vector<Tokenizer>{
      MakeByteLevel("gpt2"), MakeByteLevel("smollm"), MakeByteLevel("llama3"),
      MakeByteLevel("qwen2"), MakeSentencePiece()};
  if (size == 0) return 0;
  const Tokenizer& tok = (*tokenizers)[data[0] % tokenizers->size()];
  const bool parse_special = (data[0] >> 4) & 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids = tok.Encode(text, false, parse_special);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) Fail("id out of range", text);
  }
  absl::StatusOr<std::string> back = tok.Decode(ids);
  if (!back.ok()) Fail("Decode failed", text);
  const bool promised = tok.RoundTrips(text);
  if (tok.model() == lockstep::tokenizer::Model::kByteLevelBpe && !promised) {
    Fail("byte-level vocabulary with all 256 symbols does not promise a round trip", text);
  }
  if (promised && *back != text) Fail("Decode(Encode(s)) != s", text);
  return 0;
}
