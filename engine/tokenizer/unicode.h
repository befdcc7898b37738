// UTF-8 decoding, the code point classes the pre-tokenizer regexes use (\p{L}, \p{N}, \s), and
// the pre-tokenizers themselves: hand-written matchers equivalent to the regexes Hugging Face
// `tokenizers` runs (Oniguruma, leftmost-first alternation), so no regex engine is needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::tokenizer {

// Inclusive code point range; the generated tables (unicode_tables.cc) are sorted and disjoint.
struct CodepointRange {
  uint32_t first;
  uint32_t last;
};
extern const char kUnicodeTablesVersion[];  // e.g. "14.0.0"
extern const CodepointRange kLetterRanges[];
extern const size_t kLetterRangesCount;
extern const CodepointRange kNumberRanges[];
extern const size_t kNumberRangesCount;
extern const CodepointRange kWhitespaceRanges[];
extern const size_t kWhitespaceRangesCount;

// Stands for one byte that does not start a valid UTF-8 sequence (bad lead byte, truncated or
// overlong sequence, surrogate, > U+10FFFF). It is classed kOther, so any byte string splits.
inline constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFFu;

struct DecodedCodepoint {
  uint32_t cp;   // kInvalidCodepoint for an invalid byte
  uint32_t len;  // bytes consumed, 1..4
};
// Decodes the code point starting at text[pos] (pos < text.size()).
DecodedCodepoint DecodeUtf8(std::string_view text, size_t pos);
// Appends the UTF-8 encoding of `cp` (<= U+10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// \p{L}, \p{N} and \s are disjoint, so each code point has one class.
enum class CpClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };
CpClass ClassifyCodepoint(uint32_t cp);

// How byte-level BPE splits text into words before merging; picked from tokenizer.ggml.pre.
enum class PreTokenizer : uint8_t {
  // GPT-2 / HF ByteLevel(use_regex=True):
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // HF Sequence[Digits(individual_digits=True), ByteLevel]: every \p{N} is its own word, then
  // kGpt2 on the stretches between (llama.cpp's "\p{N}" + GPT-2 pair for smollm/starcoder).
  kGpt2IsolatedDigits,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: as kLlama3 with \p{N} instead of \p{N}{1,3}.
  kQwen2,
};
const char* PreTokenizerName(PreTokenizer p);

// Splits `text` into words: consecutive byte ranges of `text` that cover it exactly, in order.
// Appends to `words` (cleared first).
void SplitWords(std::string_view text, PreTokenizer kind, std::vector<std::string_view>* words);

}  // namespace lockstep::tokenizer
