// UTF-8 decoding, code point classes and the byte-level pre-tokenizers (see unicode.h).
#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace lockstep::tokenizer {
namespace {

bool InRanges(uint32_t cp, const CodepointRange* ranges, size_t count) {
  const CodepointRange* end = ranges + count;
  const CodepointRange* it = std::upper_bound(
      ranges, end, cp, [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

// ASCII classes, so prose and code never reach the binary searches.
constexpr std::array<CpClass, 128> MakeAsciiClasses() {
  std::array<CpClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = CpClass::kLetter;
    else if (c >= '0' && c <= '9') t[c] = CpClass::kNumber;
    else if ((c >= 0x09 && c <= 0x0D) || c == ' ') t[c] = CpClass::kSpace;
    else t[c] = CpClass::kOther;
  }
  return t;
}
constexpr std::array<CpClass, 128> kAsciiClasses = MakeAsciiClasses();

// One decoded code point of the text being split.
struct Cp {
  uint32_t cp;
  CpClass cls;
};

bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Case-insensitive (Oniguruma Unicode folding) for the letters of the contraction suffixes;
// U+017F LATIN SMALL LETTER LONG S folds to 's'.
uint32_t FoldContractionLetter(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + ('a' - 'A');
  if (cp == 0x17F) return 's';
  return cp;
}

// 's|'t|'re|'ve|'m|'ll|'d at i; returns the match length in code points or 0.
size_t MatchContraction(const std::vector<Cp>& c, size_t i, size_t n, bool ignore_case) {
  if (c[i].cp != '\'' || i + 1 >= n) return 0;
  auto at = [&](size_t k) { return ignore_case ? FoldContractionLetter(c[k].cp) : c[k].cp; };
  const uint32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  const uint32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t RunEnd(const std::vector<Cp>& c, size_t i, size_t n, CpClass cls) {
  while (i < n && c[i].cls == cls) ++i;
  return i;
}

// \s+(?!\S)|\s+ at a whitespace code point i: the run minus its last code point when the run
// is followed by a non-space (that one joins the next word), else the whole run.
size_t MatchTrailingSpaces(const std::vector<Cp>& c, size_t i, size_t n) {
  const size_t j = RunEnd(c, i, n, CpClass::kSpace);
  if (j == n || j - i == 1) return j - i;
  return j - 1 - i;
}

// GPT-2: returns the length of the match at i within c[0, n).
size_t MatchGpt2(const std::vector<Cp>& c, size_t i, size_t n) {
  if (size_t k = MatchContraction(c, i, n, /*ignore_case=*/false)) return k;
  size_t j = i;
  if (c[i].cp == ' ' && i + 1 < n && c[i + 1].cls != CpClass::kSpace) j = i + 1;
  if (c[j].cls != CpClass::kSpace) return RunEnd(c, j, n, c[j].cls) - i;
  return MatchTrailingSpaces(c, i, n);
}

// Llama 3 (max_digits 3) and Qwen2 (max_digits 1).
size_t MatchLlama3(const std::vector<Cp>& c, size_t i, size_t n, size_t max_digits) {
  if (size_t k = MatchContraction(c, i, n, /*ignore_case=*/true)) return k;
  const Cp& x = c[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (x.cls == CpClass::kLetter) return RunEnd(c, i, n, CpClass::kLetter) - i;
  if (x.cls != CpClass::kNumber && !IsNewline(x.cp) && i + 1 < n &&
      c[i + 1].cls == CpClass::kLetter) {
    return RunEnd(c, i + 1, n, CpClass::kLetter) - i;
  }
  // \p{N}{1,max}
  if (x.cls == CpClass::kNumber) return std::min(RunEnd(c, i, n, CpClass::kNumber) - i, max_digits);
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t j = i;
  if (x.cp == ' ' && i + 1 < n && c[i + 1].cls == CpClass::kOther) j = i + 1;
  if (c[j].cls == CpClass::kOther) {
    size_t k = RunEnd(c, j, n, CpClass::kOther);
    while (k < n && IsNewline(c[k].cp)) ++k;
    return k - i;
  }
  // x is whitespace. \s*[\r\n]+ ends after the run's last newline, if it has one.
  const size_t run_end = RunEnd(c, i, n, CpClass::kSpace);
  for (size_t k = run_end; k > i; --k) {
    if (IsNewline(c[k - 1].cp)) return k - i;
  }
  return MatchTrailingSpaces(c, i, n);
}

}  // namespace

DecodedCodepoint DecodeUtf8(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b0 = s[pos];
  if (b0 < 0x80) return {b0, 1};
  uint32_t len, cp, min;
  if ((b0 & 0xE0) == 0xC0) { len = 2; cp = b0 & 0x1F; min = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; cp = b0 & 0x0F; min = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; cp = b0 & 0x07; min = 0x10000; }
  else return {kInvalidCodepoint, 1};
  if (pos + len > n) return {kInvalidCodepoint, 1};
  for (uint32_t k = 1; k < len; ++k) {
    const uint8_t b = s[pos + k];
    if ((b & 0xC0) != 0x80) return {kInvalidCodepoint, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalidCodepoint, 1};
  return {cp, len};
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

CpClass ClassifyCodepoint(uint32_t cp) {
  if (cp < 128) return kAsciiClasses[cp];
  if (cp == kInvalidCodepoint) return CpClass::kOther;
  if (InRanges(cp, kLetterRanges, kLetterRangesCount)) return CpClass::kLetter;
  if (InRanges(cp, kNumberRanges, kNumberRangesCount)) return CpClass::kNumber;
  if (InRanges(cp, kWhitespaceRanges, kWhitespaceRangesCount)) return CpClass::kSpace;
  return CpClass::kOther;
}

const char* PreTokenizerName(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::kGpt2: return "gpt2";
    case PreTokenizer::kGpt2IsolatedDigits: return "gpt2+isolated-digits";
    case PreTokenizer::kLlama3: return "llama3";
    case PreTokenizer::kQwen2: return "qwen2";
  }
  return "?";
}

void SplitWords(std::string_view text, PreTokenizer kind, std::vector<std::string_view>* words) {
  words->clear();
  std::vector<Cp> cps;
  std::vector<size_t> offsets;  // [cps.size() + 1] byte offset of each code point, then the end
  cps.reserve(text.size());
  offsets.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const DecodedCodepoint d = DecodeUtf8(text, pos);
    cps.push_back({d.cp, ClassifyCodepoint(d.cp)});
    offsets.push_back(pos);
    pos += d.len;
  }
  offsets.push_back(text.size());
  const size_t n = cps.size();
  auto emit = [&](size_t i, size_t len) {
    words->push_back(text.substr(offsets[i], offsets[i + len] - offsets[i]));
  };
  for (size_t i = 0; i < n;) {
    size_t len = 0;
    switch (kind) {
      case PreTokenizer::kGpt2: len = MatchGpt2(cps, i, n); break;
      case PreTokenizer::kGpt2IsolatedDigits: {
        if (cps[i].cls == CpClass::kNumber) { len = 1; break; }
        size_t stretch_end = i;
        while (stretch_end < n && cps[stretch_end].cls != CpClass::kNumber) ++stretch_end;
        len = MatchGpt2(cps, i, stretch_end);
        break;
      }
      case PreTokenizer::kLlama3: len = MatchLlama3(cps, i, n, 3); break;
      case PreTokenizer::kQwen2: len = MatchLlama3(cps, i, n, 1); break;
    }
    emit(i, len);
    i += len;
  }
}

}  // namespace lockstep::tokenizer
