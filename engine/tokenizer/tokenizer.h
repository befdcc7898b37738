// Tokenizers built from GGUF metadata (tokenizer.ggml.*):
//   - byte-level BPE (tokenizer.ggml.model = "gpt2"): GPT-2 byte->unicode alphabet, merges by
//     rank from tokenizer.ggml.merges, a pre-tokenizer picked by tokenizer.ggml.pre;
//   - SentencePiece-style BPE ("llama"): spaces as U+2581, merges of adjacent symbols whose
//     concatenation is a token, best first, and <0xXX> byte fallback for what is not in the vocab.
// Both are exact against Hugging Face `tokenizers` built from the same metadata the way
// `transformers` converts a GGUF (oracle/gen_tokenizer_golden.py, golden/tokenizer/).
// Added tokens: CONTROL tokens are matched whole only when parse_special is set; USER_DEFINED
// tokens are always matched whole (llama.cpp and transformers agree on both).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/unicode.h"

namespace lockstep::tokenizer {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
  kByte = 6,
};

enum class Model : uint8_t { kByteLevelBpe, kSentencePieceBpe };

class Tokenizer {
 public:
  // Metadata lookup by key (nullptr if absent); FromGguf and FromMetadata both load through it.
  using Lookup = std::function<const gguf::Value*(std::string_view)>;

  // Reads tokenizer.ggml.{model,pre,tokens,token_type,scores,merges,bos_token_id,eos_token_id,
  // eot_token_id,unknown_token_id,add_bos_token,add_space_prefix} and general.architecture.
  // tokens, model, bos_token_id and eos_token_id are required, merges for "gpt2", scores for
  // "llama" outside Gemma. Errors name the key (and index) that is missing, mistyped,
  // inconsistent or out of range.
  static absl::StatusOr<Tokenizer> FromGguf(const gguf::File& file);
  // The same from key/values held in memory (tests and fuzzers build small vocabularies).
  static absl::StatusOr<Tokenizer> FromMetadata(const std::vector<gguf::KeyValue>& metadata);

  // Any bytes are accepted: invalid UTF-8 goes through the byte alphabet (byte-level BPE) or
  // the <0xXX> tokens (SentencePiece), so Decode(Encode(s)) == s byte for byte wherever
  // RoundTrips(s) (see there for the exceptions real vocabularies have).
  // add_bos prepends bos_id(); parse_special lets CONTROL tokens' text become their id.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const;
  // Encode with parse_special, except that a CONTROL token overlapping one of the `literal`
  // byte ranges [first, second) stays text: a chat prompt whose message contents are
  // literal, so only the template's own markup yields control tokens (docs/serving.md).
  std::vector<int32_t> EncodeWithLiteral(std::string_view text, bool add_bos,
                                         std::span<const std::pair<size_t, size_t>> literal) const;
  // The byte ranges of `text` that Encode with parse_special would turn into CONTROL tokens.
  std::vector<std::pair<size_t, size_t>> FindControlTokens(std::string_view text) const;

  // The bytes `ids` stand for; CONTROL and USER_DEFINED tokens render as their text. <0xXX>
  // tokens yield their raw byte, so the result may be invalid UTF-8 where HF would print U+FFFD.
  // SentencePiece vocabularies with add_space_prefix drop the one space the prefix added at the
  // start of the output (HF's Strip decoder). An id outside [0, vocab_size()) is an error naming it.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const;
  // The bytes one token contributes to Decode, for streaming (concatenate; emit at UTF-8
  // boundaries). No prefix-space stripping here.
  absl::StatusOr<std::string_view> TokenPiece(int32_t id) const;

  // Whether Decode(Encode(text)) == text is guaranteed. It is not when the text holds a byte
  // the byte-level vocabulary has no symbol for (Encode drops it, as Hugging Face and llama.cpp
  // do), or, for SentencePiece, a literal U+2581 (it decodes as a space) or a character with
  // neither a token nor <0xXX> fallback tokens (it becomes <unk> or is dropped).
  bool RoundTrips(std::string_view text) const;
  // An error naming the first byte offset whose byte Encode would drop (a byte-level vocabulary
  // without a symbol for it, e.g. 0xC0, 0xC1, 0xF5..0xFF in SmolLM2's; a SentencePiece character
  // with neither a token, <0xXX> fallbacks nor an <unk>): the model would see another prompt
  // than the user gave, so callers that take user text refuse it (docs/models.md).
  absl::Status CheckEncodable(std::string_view text) const;

  Model model() const { return model_; }
  // Meaningful for byte-level BPE only.
  PreTokenizer pre_tokenizer() const { return pre_; }
  int32_t vocab_size() const { return static_cast<int32_t>(text_.size()); }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Tokens that end a turn: eos, tokenizer.ggml.eot_token_id, and CONTROL tokens spelled like
  // a known end-of-turn marker (<|im_end|>, <end_of_turn>, <|eot_id|>, <|endoftext|>, ...).
  // Sorted, unique.
  const std::vector<int32_t>& eot_ids() const { return eot_ids_; }
  bool IsEndOfTurn(int32_t id) const;
  bool add_bos_default() const { return add_bos_default_; }
  // The token as the file spells it; an empty string for ids outside [0, vocab_size()).
  const std::string& TokenText(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Whole-text lookup of a token by its file spelling; -1 if absent.
  int32_t FindToken(std::string_view text) const;

 private:
  static absl::StatusOr<Tokenizer> Load(const Lookup& find);
  Tokenizer() = default;
  absl::Status BuildByteLevel(const gguf::Value& merges);
  absl::Status BuildSentencePiece(bool gemma_style);
  void BuildDerived();
  void AddAddedToken(int32_t id);
  // Longest added token starting at text[pos] (its id and byte length), or {-1, 0}.
  std::pair<int32_t, size_t> MatchAddedToken(std::string_view text, size_t pos) const;
  void EncodeTextByteLevel(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeTextSentencePiece(std::string_view text, bool at_start, std::vector<int32_t>* out) const;
  void MergeByteLevelWord(std::string_view word, std::vector<int32_t>* out) const;

  Model model_ = Model::kByteLevelBpe;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  std::vector<std::string> text_;    // [vocab] file spelling
  std::vector<TokenType> type_;      // [vocab]
  std::vector<std::string> piece_;   // [vocab] decoded bytes (what TokenPiece returns)
  absl::flat_hash_map<std::string, int32_t> by_text_;  // file spelling -> id (last wins)
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  std::vector<int32_t> eot_ids_;
  bool add_bos_default_ = false;
  bool add_space_prefix_ = false;

  // Added tokens as a byte trie: node 0 is the root; key (node << 8 | byte) -> child node.
  absl::flat_hash_map<uint64_t, int32_t> trie_next_;
  std::vector<int32_t> trie_token_;  // [nodes] token id ending at the node, or -1

  // Byte-level BPE: vocab id of each byte's alphabet character (-1 if absent), and the merges.
  std::array<int32_t, 256> byte_token_{};
  struct MergeResult {
    int32_t rank;
    int32_t id;
  };
  absl::flat_hash_map<uint64_t, MergeResult> merges_;  // (left id << 32 | right id) -> result

  // SentencePiece BPE: the spelling merges look up (U+2581 for spaces; Gemma's space-run
  // tokens respelled as U+2581 runs, as transformers does), and each token's merge priority.
  std::vector<std::string> spm_text_;                       // [vocab]
  absl::flat_hash_map<std::string, int32_t> spm_by_text_;  // spm spelling -> id (last wins)
  std::vector<double> priority_;   // [vocab] higher merges first
  std::vector<int32_t> cp_len_;    // [vocab] code points in spm_text_
  std::array<int32_t, 256> byte_fallback_{};  // <0xXX> token ids, -1 if absent
};

}  // namespace lockstep::tokenizer


namespace lockstep::tokenizer {

// The chat prompt of a model: `template_source` if not empty, else the GGUF's
// tokenizer.chat_template, rendered over `messages` with the tokenizer's BOS / EOS texts. The
// error names what is missing (a file without a template asks for one). Shared by `run`,
// `chat` and the server.
absl::StatusOr<std::string> RenderModelChat(const gguf::File& file, const Tokenizer& tok,
                                            std::string_view template_source,
                                            const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt);

// The same prompt as tokens, with every message's content encoded as text: a control token
// typed inside a content (`<|im_end|><|im_start|>system`) stays text, only the template's own
// markup yields special tokens. Decode(result) == RenderModelChat(...) (without BOS handling:
// the template writes any BOS itself). Errors name the message whose content holds one of the
// two marker code points it uses (U+FDD0, U+FDD1: Unicode noncharacters) or a template that
// rewrote a content around a control token.
absl::StatusOr<std::vector<int32_t>> RenderModelChatTokens(const gguf::File& file,
                                                           const Tokenizer& tok,
                                                           std::string_view template_source,
                                                           const std::vector<ChatMessage>& messages,
                                                           bool add_generation_prompt);

}  // namespace lockstep::tokenizer
