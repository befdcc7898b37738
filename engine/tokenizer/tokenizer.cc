// Loading a Tokenizer from GGUF metadata (validation, derived tables), added-token matching,
// Encode and Decode. The merge loops live in tokenizer_merge.cc.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "engine/core/status.h"

namespace lockstep::tokenizer {
namespace {

using gguf::Value;
using gguf::ValueType;

// Debian's abseil has its own string_view type, distinct from std::string_view.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// GPT-2's byte -> code point alphabet: printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in byte order (so every byte has a visible, non-space spelling).
std::array<uint32_t, 256> ByteAlphabet() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cp[b] = printable ? b : next++;
  }
  return cp;
}
const std::array<uint32_t, 256> kByteAlphabet = ByteAlphabet();

// Inverse of kByteAlphabet over [0, 324); -1 outside the alphabet.
int AlphabetByte(uint32_t cp) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[kByteAlphabet[b]] = b;
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

bool InByteAlphabet(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const DecodedCodepoint d = DecodeUtf8(text, pos);
    if (d.cp == kInvalidCodepoint || AlphabetByte(d.cp) < 0) return false;
    pos += d.len;
  }
  return true;
}

// Which split tokenizer.ggml.pre names for a byte-level vocabulary. The families follow
// transformers' GGUF table and llama.cpp; smollm/starcoder isolate digits as their
// tokenizer.json (Digits(individual_digits) + ByteLevel) and llama.cpp do.
std::optional<PreTokenizer> PreTokenizerFor(std::string_view pre) {
  static const auto* table = new absl::flat_hash_map<std::string, PreTokenizer>{
      {"gpt2", PreTokenizer::kGpt2}, {"default", PreTokenizer::kGpt2},
      {"mpt", PreTokenizer::kGpt2}, {"olmo", PreTokenizer::kGpt2}, {"jais", PreTokenizer::kGpt2},
      {"smollm", PreTokenizer::kGpt2IsolatedDigits},
      {"starcoder", PreTokenizer::kGpt2IsolatedDigits},
      {"refact", PreTokenizer::kGpt2IsolatedDigits},
      {"codeshell", PreTokenizer::kGpt2IsolatedDigits},
      {"llama3", PreTokenizer::kLlama3}, {"llama-v3", PreTokenizer::kLlama3},
      {"llama-bpe", PreTokenizer::kLlama3}, {"falcon3", PreTokenizer::kLlama3},
      {"falcon-h1", PreTokenizer::kLlama3}, {"pixtral", PreTokenizer::kLlama3},
      {"dbrx", PreTokenizer::kLlama3}, {"smaug-bpe", PreTokenizer::kLlama3},
      {"lfm2", PreTokenizer::kLlama3},
      {"qwen2", PreTokenizer::kQwen2}, {"deepseek-r1-qwen", PreTokenizer::kQwen2},
      {"megrez", PreTokenizer::kQwen2},
  };
  auto it = table->find(AV(pre));
  if (it == table->end()) return std::nullopt;
  return it->second;
}

// Texts of CONTROL tokens that end a turn in the chat formats we know.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "<|end|>",
    "<|end_of_text|>", "<EOT>", "<|return|>", "<|call|>",
};

absl::Status TypeError(std::string_view key, const Value& v, std::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(AV(key), ": expected ", AV(want), ", found ", gguf::ValueTypeName(v.type)));
}

bool IsNumeric(const Value& v) {
  return v.IsInteger() || v.type == ValueType::FLOAT32 || v.type == ValueType::FLOAT64;
}

absl::StatusOr<std::optional<std::string>> OptString(const Tokenizer::Lookup& find,
                                                     std::string_view key) {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->type != ValueType::STRING) return TypeError(key, *v, "STRING");
  return std::optional<std::string>(v->str);
}

absl::StatusOr<std::optional<int64_t>> OptInt(const Tokenizer::Lookup& find,
                                              std::string_view key) {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->IsInteger()) return TypeError(key, *v, "an integer");
  return std::optional<int64_t>(v->AsInt());
}

// An array whose items all satisfy `ok`; nullptr if the key is absent.
absl::StatusOr<const std::vector<Value>*> OptArray(const Tokenizer::Lookup& find,
                                                    std::string_view key, bool (*ok)(const Value&),
                                                    std::string_view want) {
  const Value* v = find(key);
  if (v == nullptr) return nullptr;
  if (v->type != ValueType::ARRAY) return TypeError(key, *v, absl::StrCat("ARRAY of ", AV(want)));
  for (size_t i = 0; i < v->arr.size(); ++i) {
    if (!ok(v->arr[i])) return TypeError(absl::StrCat(AV(key), "[", i, "]"), v->arr[i], want);
  }
  return &v->arr;
}

absl::Status CheckArrayLength(std::string_view key, const std::vector<Value>* arr, size_t n) {
  if (arr == nullptr || arr->size() == n) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      AV(key), ": has ", arr->size(), " entries but tokenizer.ggml.tokens has ", n));
}

// A token id key: absent -> `fallback`; present -> must lie in [0, n).
absl::StatusOr<int32_t> TokenIdKey(const Tokenizer::Lookup& find, std::string_view key, size_t n,
                                   bool required) {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, OptInt(find, key));
  if (!v.has_value()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(AV(key), ": missing"));
    return -1;
  }
  if (*v < 0 || static_cast<uint64_t>(*v) >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(key), ": token id ", *v, " outside the vocabulary [0, ", n, ")"));
  }
  return static_cast<int32_t>(*v);
}

absl::StatusOr<std::optional<bool>> OptBool(const Tokenizer::Lookup& find, std::string_view key) {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->IsInteger()) return TypeError(key, *v, "BOOL");
  return std::optional<bool>(v->AsInt() != 0);
}

// Python's str.isspace (Unicode whitespace plus U+001C..U+001F), for transformers' Gemma rule.
bool IsPythonSpace(uint32_t cp) {
  return ClassifyCodepoint(cp) == CpClass::kSpace || (cp >= 0x1C && cp <= 0x1F);
}

// transformers' gemma_tokenizer: a token made only of whitespace that contains a space is
// stored with real spaces but looked up as U+2581 x its length. Returns that respelling or "".
std::string GemmaRespelling(std::string_view text) {
  size_t n = 0;
  bool has_space = false;
  for (size_t pos = 0; pos < text.size(); ++n) {
    const DecodedCodepoint d = DecodeUtf8(text, pos);
    if (d.cp == kInvalidCodepoint || !IsPythonSpace(d.cp)) return "";
    has_space |= d.cp == ' ';
    pos += d.len;
  }
  if (!has_space) return "";
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kSpaceMark;
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xXX>" -> XX, else -1.
int ByteTokenValue(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int hi = HexDigit(text[3]), lo = HexDigit(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::FromGguf(const gguf::File& file) {
  return Load([&file](std::string_view key) { return file.Find(key); });
}

absl::StatusOr<Tokenizer> Tokenizer::FromMetadata(const std::vector<gguf::KeyValue>& metadata) {
  absl::flat_hash_map<std::string, const Value*> index;
  for (const gguf::KeyValue& kv : metadata) {
    if (!index.emplace(kv.key, &kv.value).second) {
      return absl::InvalidArgumentError(absl::StrCat(kv.key, ": duplicate key"));
    }
  }
  return Load([&index](std::string_view key) -> const Value* {
    auto it = index.find(AV(key));
    return it == index.end() ? nullptr : it->second;
  });
}

absl::StatusOr<Tokenizer> Tokenizer::Load(const Lookup& find) {
  Tokenizer t;
  ASSIGN_OR_RETURN(std::optional<std::string> model, OptString(find, "tokenizer.ggml.model"));
  if (!model.has_value()) return absl::InvalidArgumentError("tokenizer.ggml.model: missing");
  if (*model == "gpt2") {
    t.model_ = Model::kByteLevelBpe;
  } else if (*model == "llama") {
    t.model_ = Model::kSentencePieceBpe;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.ggml.model: unsupported \"", *model, "\" (supported: gpt2, llama)"));
  }

  ASSIGN_OR_RETURN(const std::vector<Value>* tokens,
                   OptArray(find, "tokenizer.ggml.tokens",
                            [](const Value& v) { return v.type == ValueType::STRING; }, "STRING"));
  if (tokens == nullptr) return absl::InvalidArgumentError("tokenizer.ggml.tokens: missing");
  if (tokens->empty() || tokens->size() > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.ggml.tokens: ", tokens->size(), " tokens (want 1 to 2^30)"));
  }
  const size_t n = tokens->size();
  ASSIGN_OR_RETURN(const std::vector<Value>* types,
                   OptArray(find, "tokenizer.ggml.token_type",
                            [](const Value& v) { return v.IsInteger(); }, "integers"));
  RETURN_IF_ERROR(CheckArrayLength("tokenizer.ggml.token_type", types, n));
  ASSIGN_OR_RETURN(const std::vector<Value>* scores,
                   OptArray(find, "tokenizer.ggml.scores", IsNumeric, "numbers"));
  RETURN_IF_ERROR(CheckArrayLength("tokenizer.ggml.scores", scores, n));

  t.text_.reserve(n);
  t.type_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    t.text_.push_back((*tokens)[i].str);
    TokenType type = TokenType::kNormal;
    if (types != nullptr) {
      const int64_t v = (*types)[i].AsInt();
      if (v < 0 || v > 6) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.ggml.token_type[", i, "]: ", v, " is not a token type (0..6)"));
      }
      type = static_cast<TokenType>(v);
    }
    if (type == TokenType::kByte && ByteTokenValue(t.text_[i]) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.tokens[", i, "]: BYTE token \"",
                                                     t.text_[i], "\" is not spelled <0xXX>"));
    }
    t.type_.push_back(type);
    t.by_text_[t.text_[i]] = static_cast<int32_t>(i);
  }

  ASSIGN_OR_RETURN(t.bos_id_, TokenIdKey(find, "tokenizer.ggml.bos_token_id", n, true));
  ASSIGN_OR_RETURN(t.eos_id_, TokenIdKey(find, "tokenizer.ggml.eos_token_id", n, true));
  ASSIGN_OR_RETURN(t.unk_id_, TokenIdKey(find, "tokenizer.ggml.unknown_token_id", n, false));
  ASSIGN_OR_RETURN(int32_t eot_id, TokenIdKey(find, "tokenizer.ggml.eot_token_id", n, false));
  ASSIGN_OR_RETURN(std::optional<bool> add_bos, OptBool(find, "tokenizer.ggml.add_bos_token"));
  ASSIGN_OR_RETURN(std::optional<bool> add_prefix,
                   OptBool(find, "tokenizer.ggml.add_space_prefix"));
  ASSIGN_OR_RETURN(std::optional<std::string> arch, OptString(find, "general.architecture"));
  ASSIGN_OR_RETURN(std::optional<std::string> pre, OptString(find, "tokenizer.ggml.pre"));

  if (t.model_ == Model::kByteLevelBpe) {
    // transformers adds no BOS to a byte-level vocabulary unless the file asks for it.
    t.add_bos_default_ = add_bos.value_or(false);
    const std::string pre_name = pre.value_or("default");
    std::optional<PreTokenizer> p = PreTokenizerFor(pre_name);
    if (!p.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.ggml.pre: \"", pre_name, "\" is not a pre-tokenizer lockstep knows for "
          "byte-level BPE (known: gpt2, default, smollm, starcoder, llama3, llama-bpe, qwen2, ...)"));
    }
    t.pre_ = *p;
    const Value* merges = find("tokenizer.ggml.merges");
    if (merges == nullptr) return absl::InvalidArgumentError("tokenizer.ggml.merges: missing");
    RETURN_IF_ERROR(t.BuildByteLevel(*merges));
  } else {
    // llama.cpp and transformers add BOS to a SentencePiece vocabulary that does not say.
    t.add_bos_default_ = add_bos.value_or(true);
    t.add_space_prefix_ = add_prefix.value_or(true);
    const bool gemma_style = arch.has_value() && (*arch == "gemma" || *arch == "gemma2" ||
                                                  *arch == "gemma3");
    if (!gemma_style && scores == nullptr) {
      return absl::InvalidArgumentError(
          "tokenizer.ggml.scores: missing (a SentencePiece vocabulary merges by score)");
    }
    t.priority_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      // transformers ranks Gemma merges by file position, other vocabularies by score.
      t.priority_[i] = gemma_style ? -static_cast<double>(i) : (*scores)[i].AsFloat();
    }
    RETURN_IF_ERROR(t.BuildSentencePiece(gemma_style));
  }

  absl::flat_hash_set<int32_t> eot = {t.eos_id_};
  if (eot_id >= 0) eot.insert(eot_id);
  for (std::string_view marker : kEndOfTurnTexts) {
    const int32_t id = t.FindToken(marker);
    if (id >= 0 && t.type_[id] == TokenType::kControl) eot.insert(id);
  }
  t.eot_ids_.assign(eot.begin(), eot.end());
  std::sort(t.eot_ids_.begin(), t.eot_ids_.end());
  return t;
}

absl::Status Tokenizer::BuildByteLevel(const Value& merges) {
  if (merges.type != ValueType::ARRAY) return TypeError("tokenizer.ggml.merges", merges, "ARRAY");
  // Real vocabularies lack some bytes (SmolLM2: 21, e.g. 0x04, 0xC0, 0xF5..0xFF); such bytes
  // are dropped by Encode, as Hugging Face's BPE (no unk token) and llama.cpp do.
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    AppendUtf8(kByteAlphabet[b], &symbol);
    byte_token_[b] = FindToken(symbol);
  }
  merges_.reserve(merges.arr.size());
  for (size_t i = 0; i < merges.arr.size(); ++i) {
    const Value& m = merges.arr[i];
    const std::string key = absl::StrCat("tokenizer.ggml.merges[", i, "]");
    if (m.type != ValueType::STRING) return TypeError(key, m, "STRING");
    const size_t space = m.str.find(' ');
    if (space == std::string::npos || m.str.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": \"", m.str, "\" is not two tokens separated by one space"));
    }
    const std::string left = m.str.substr(0, space), right = m.str.substr(space + 1);
    const int32_t l = FindToken(left), r = FindToken(right), merged = FindToken(left + right);
    for (const auto& [id, name] : {std::pair{l, left}, {r, right}, {merged, left + right}}) {
      if (id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            key, ": \"", m.str, "\" needs token \"", name, "\", which tokenizer.ggml.tokens lacks"));
      }
    }
    // A repeated pair keeps its last rank, as Hugging Face's BPE builder does.
    merges_[(static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r)] =
        MergeResult{static_cast<int32_t>(i), merged};
  }
  piece_.resize(text_.size());
  for (size_t i = 0; i < text_.size(); ++i) {
    const std::string& text = text_[i];
    const bool added = type_[i] == TokenType::kControl || type_[i] == TokenType::kUserDefined;
    if (added) {
      piece_[i] = text;
      // transformers skips added tokens spelled outside the byte alphabet (llama.cpp mislabels).
      if (InByteAlphabet(text)) AddAddedToken(static_cast<int32_t>(i));
      continue;
    }
    for (size_t pos = 0; pos < text.size();) {
      const DecodedCodepoint d = DecodeUtf8(text, pos);
      const int b = d.cp == kInvalidCodepoint ? -1 : AlphabetByte(d.cp);
      if (b >= 0) piece_[i].push_back(static_cast<char>(b));
      else piece_[i].append(text, pos, d.len);
      pos += d.len;
    }
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::BuildSentencePiece(bool gemma_style) {
  const size_t n = text_.size();
  spm_text_.resize(n);
  cp_len_.resize(n);
  piece_.resize(n);
  byte_fallback_.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = text_[i];
    const std::string respelled = gemma_style ? GemmaRespelling(text) : std::string();
    spm_text_[i] = respelled.empty() ? text : respelled;
    spm_by_text_[spm_text_[i]] = static_cast<int32_t>(i);
    int32_t cps = 0;
    for (size_t pos = 0; pos < spm_text_[i].size(); ++cps) pos += DecodeUtf8(spm_text_[i], pos).len;
    cp_len_[i] = cps;
    if (type_[i] == TokenType::kByte) {
      piece_[i].assign(1, static_cast<char>(ByteTokenValue(text)));
    } else {
      piece_[i] = absl::StrReplaceAll(text, {{AV(kSpaceMark), " "}});
    }
    // transformers adds CONTROL tokens, and USER_DEFINED ones still spelled as in its vocab.
    if (type_[i] == TokenType::kControl ||
        (type_[i] == TokenType::kUserDefined && respelled.empty())) {
      AddAddedToken(static_cast<int32_t>(i));
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = spm_by_text_.find(absl::StrFormat("<0x%02X>", b));
    if (it != spm_by_text_.end()) byte_fallback_[b] = it->second;
  }
  return absl::OkStatus();
}

void Tokenizer::AddAddedToken(int32_t id) {
  const std::string& text = text_[id];
  if (text.empty()) return;
  if (trie_token_.empty()) trie_token_.push_back(-1);
  int32_t node = 0;
  for (unsigned char c : text) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
    auto it = trie_next_.find(key);
    if (it == trie_next_.end()) {
      const int32_t child = static_cast<int32_t>(trie_token_.size());
      trie_token_.push_back(-1);
      it = trie_next_.emplace(key, child).first;
    }
    node = it->second;
  }
  trie_token_[node] = id;
}

std::pair<int32_t, size_t> Tokenizer::MatchAddedToken(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  if (trie_token_.empty()) return best;
  int32_t node = 0;
  for (size_t k = pos; k < text.size(); ++k) {
    auto it = trie_next_.find((static_cast<uint64_t>(node) << 8) |
                              static_cast<unsigned char>(text[k]));
    if (it == trie_next_.end()) break;
    node = it->second;
    if (trie_token_[node] >= 0) best = {trie_token_[node], k + 1 - pos};
  }
  return best;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  if (!parse_special) {
    const std::pair<size_t, size_t> all{0, text.size()};
    return EncodeWithLiteral(text, add_bos, std::span(&all, 1));
  }
  return EncodeWithLiteral(text, add_bos, {});
}

std::vector<std::pair<size_t, size_t>> Tokenizer::FindControlTokens(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t pos = 0; pos < text.size();) {
    const auto [id, len] = MatchAddedToken(text, pos);
    if (id < 0) {
      ++pos;
      continue;
    }
    if (type_[id] == TokenType::kControl) out.push_back({pos, pos + len});
    pos += len;
  }
  return out;
}

std::vector<int32_t> Tokenizer::EncodeWithLiteral(
    std::string_view text, bool add_bos, std::span<const std::pair<size_t, size_t>> literal) const {
  // literal is sorted and disjoint; a match [pos, pos + len) that overlaps one stays text.
  size_t lit = 0;
  auto overlaps_literal = [&](size_t pos, size_t len) {
    while (lit < literal.size() && literal[lit].second <= pos) ++lit;
    return lit < literal.size() && literal[lit].first < pos + len;
  };
  std::vector<int32_t> out;
  if (add_bos) out.push_back(bos_id_);
  size_t segment = 0;  // start of the text not yet encoded
  auto flush = [&](size_t end) {
    if (end <= segment) return;
    const std::string_view part = text.substr(segment, end - segment);
    if (model_ == Model::kByteLevelBpe) EncodeTextByteLevel(part, &out);
    else EncodeTextSentencePiece(part, segment == 0, &out);
  };
  for (size_t pos = 0; pos < text.size();) {
    const auto [id, len] = MatchAddedToken(text, pos);
    if (id < 0) {
      ++pos;
      continue;
    }
    // Like Hugging Face's added-vocabulary matcher with encode_special_tokens: the longest
    // match is found first, and a CONTROL match that may not be parsed stays plain text.
    if (type_[id] == TokenType::kControl && overlaps_literal(pos, len)) {
      pos += len;
      continue;
    }
    flush(pos);
    out.push_back(id);
    pos += len;
    segment = pos;
  }
  flush(text.size());
  return out;
}

absl::StatusOr<std::string_view> Tokenizer::TokenPiece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    return absl::OutOfRangeError(
        absl::StrCat("token id ", id, " outside the vocabulary [0, ", vocab_size(), ")"));
  }
  return std::string_view(piece_[id]);
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StatusOr<std::string_view> piece = TokenPiece(ids[i]);
    if (!piece.ok()) {
      return absl::OutOfRangeError(absl::StrCat("ids[", i, "]: ", piece.status().message()));
    }
    out.append(*piece);
  }
  if (model_ == Model::kSentencePieceBpe && add_space_prefix_ && !out.empty() && out[0] == ' ') {
    out.erase(0, 1);
  }
  return out;
}

bool Tokenizer::RoundTrips(std::string_view text) const {
  if (model_ == Model::kByteLevelBpe) {
    for (unsigned char c : text) {
      if (byte_token_[c] < 0) return false;
    }
    return true;
  }
  if (text.find(kSpaceMark) != std::string_view::npos) return false;
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t len = DecodeUtf8(text, pos).len;
    if (!spm_by_text_.contains(AV(text.substr(pos, len)))) {
      for (uint32_t k = 0; k < len; ++k) {
        if (byte_fallback_[static_cast<unsigned char>(text[pos + k])] < 0) return false;
      }
    }
    pos += len;
  }
  return true;
}

absl::Status Tokenizer::CheckEncodable(std::string_view text) const {
  auto refuse = [&](size_t offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "byte 0x%02X at offset %d cannot be encoded: this vocabulary has no token for it (it is "
        "not valid UTF-8 here), and dropping it would change the prompt",
        static_cast<unsigned char>(text[offset]), offset));
  };
  if (model_ == Model::kByteLevelBpe) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (byte_token_[static_cast<unsigned char>(text[i])] < 0) return refuse(i);
    }
    return absl::OkStatus();
  }
  if (unk_id_ >= 0) return absl::OkStatus();  // an unknown character becomes <unk>, not nothing
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t len = DecodeUtf8(text, pos).len;
    if (!spm_by_text_.contains(AV(text.substr(pos, len)))) {
      for (uint32_t k = 0; k < len; ++k) {
        if (byte_fallback_[static_cast<unsigned char>(text[pos + k])] < 0) return refuse(pos + k);
      }
    }
    pos += len;
  }
  return absl::OkStatus();
}

bool Tokenizer::IsEndOfTurn(int32_t id) const {
  return std::binary_search(eot_ids_.begin(), eot_ids_.end(), id);
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < vocab_size() ? text_[id] : kEmpty;
}

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < vocab_size() ? type_[id] : TokenType::kUndefined;
}

int32_t Tokenizer::FindToken(std::string_view text) const {
  auto it = by_text_.find(AV(text));
  return it == by_text_.end() ? -1 : it->second;
}

}  // namespace lockstep::tokenizer
