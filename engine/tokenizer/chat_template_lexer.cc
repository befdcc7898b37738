// The chat-template lexer: jinja2's lexer with trim_blocks=True, lstrip_blocks=True and
// keep_trailing_newline=False, over {{ }}, {% %}, {# #} and {% raw %}. Whitespace control
// ({%- -%}, {{- -}}, {#- -#}, {%+) is applied here, so the parser sees final text.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/tokenizer/chat_template_internal.h"

namespace lockstep::tokenizer::chat_template_internal {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    // jinja2's `line_starting`: the previous tag's match ended with a newline (or nothing came
    // before), so lstrip_blocks may strip indentation that has no newline in front of it.
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t p = FindTagStart(pos);
      if (p == std::string::npos) {
        Emit(Tok::kData, src_.substr(pos), pos);
        break;
      }
      char kind = src_[p + 1];
      size_t after = p + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      size_t raw_body = kind == '%' ? MatchRawBegin(after) : std::string::npos;

      std::string text = src_.substr(pos, p - pos);
      ApplyLeftStrip(text, sign, kind != '{', line_starting);
      if (!text.empty()) Emit(Tok::kData, std::move(text), pos);

      if (raw_body != std::string::npos) {
        ASSIGN_OR_RETURN(pos, LexRaw(p, raw_body, line_starting));
      } else if (kind == '#') {
        ASSIGN_OR_RETURN(pos, SkipComment(p, after));
      } else {
        ASSIGN_OR_RETURN(pos, LexTag(p, kind, after));
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{Tok::kEof, "", 0, PosAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  // Line and column (in code points) of a byte offset. Offsets mostly grow, so counting
  // resumes from the previous answer when it is on the same line (long one-line templates
  // would otherwise cost quadratic time).
  Pos PosAt(size_t offset) {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_start = *(it - 1);
    size_t from = line_start;
    int col = 1;
    if (cache_offset_ >= line_start && cache_offset_ <= offset) {
      from = cache_offset_;
      col = cache_col_;
    }
    for (size_t i = from; i < offset && i < src_.size(); ++i) {
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++col;
    }
    cache_offset_ = offset;
    cache_col_ = col;
    return Pos{static_cast<int>(it - line_starts_.begin()), col};
  }

  void Emit(Tok kind, std::string text, size_t offset, int64_t int_value = 0) {
    tokens_.push_back(Token{kind, std::move(text), int_value, PosAt(offset)});
  }

  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // The whitespace character (Python's \s) at `i`, as its byte length; 0 if none.
  size_t WhitespaceAt(size_t i) const {
    if (i >= src_.size()) return 0;
    unsigned char c = src_[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    if (i + len > src_.size()) return 0;
    uint32_t cp = DecodeUtf8(std::string_view(src_).substr(i, len))[0];
    return IsPyWhitespace(cp) ? len : 0;
  }
  size_t SkipWhitespace(size_t i) const {
    while (size_t len = WhitespaceAt(i)) i += len;
    return i;
  }
  bool At(size_t i, std::string_view s) const {
    return src_.compare(i, s.size(), s) == 0;
  }

  // The text before a tag: `-` strips all whitespace; otherwise lstrip_blocks strips the
  // indentation of a block or comment tag that is alone at the start of its line.
  void ApplyLeftStrip(std::string& text, char sign, bool lstrip_applies, bool line_starting) {
    if (sign == '-') {
      text = PyStrip(text, nullptr, false, true);
      return;
    }
    if (sign == '+' || !lstrip_applies) return;
    size_t l_pos = text.rfind('\n');
    l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
    if (l_pos == 0 && !line_starting) return;
    std::string_view tail = std::string_view(text).substr(l_pos);
    if (PyStrip(tail, nullptr, true, false).empty()) text.resize(l_pos);
  }

  // `{% raw %}` / `{%- raw -%}` starting after the sign at `after`: where the raw body begins,
  // or npos if this is not a raw tag.
  size_t MatchRawBegin(size_t after) const {
    size_t i = SkipWhitespace(after);
    if (!At(i, "raw")) return std::string::npos;
    i = SkipWhitespace(i + 3);
    if (At(i, "-%}")) return SkipWhitespace(i + 3);
    if (At(i, "%}")) return i + 2;
    return std::string::npos;
  }

  absl::StatusOr<size_t> LexRaw(size_t tag_start, size_t body, bool line_starting) {
    // The raw-begin match decides line_starting for the endraw tag's lstrip.
    line_starting = body > 0 && src_[body - 1] == '\n';
    for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t i = q + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i = SkipWhitespace(i);
      if (!At(i, "endraw")) continue;
      i = SkipWhitespace(i + 6);
      size_t end;
      if (At(i, "+%}")) {
        end = i + 3;
      } else if (At(i, "-%}")) {
        end = SkipWhitespace(i + 3);
      } else if (At(i, "%}")) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = src_.substr(body, q - body);
      ApplyLeftStrip(text, sign, true, line_starting);
      if (!text.empty()) Emit(Tok::kData, std::move(text), body);
      return end;
    }
    return TemplateError(PosAt(tag_start), "missing {% endraw %} for this {% raw %}");
  }

  absl::StatusOr<size_t> SkipComment(size_t tag_start, size_t body) {
    size_t e = src_.find("#}", body);
    if (e == std::string::npos) return TemplateError(PosAt(tag_start), "unclosed comment {#");
    if (e > body && src_[e - 1] == '-') return SkipWhitespace(e + 2);
    if (e > body && src_[e - 1] == '+') return e + 2;
    size_t end = e + 2;
    if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
    return end;
  }

  // The inside of {{ }} or {% %}; returns the offset after the closing delimiter.
  absl::StatusOr<size_t> LexTag(size_t tag_start, char kind, size_t i) {
    Emit(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, kind == '{' ? "{{" : "{%", tag_start);
    std::vector<char> open_brackets;  // an end delimiter only counts when these are balanced
    while (true) {
      if (i >= src_.size()) {
        return TemplateError(PosAt(tag_start), kind == '{' ? "unclosed '{{' (missing '}}')"
                                                          : "unclosed '{%' (missing '%}')");
      }
      if (open_brackets.empty()) {
        if (kind == '%') {
          if (At(i, "-%}")) return EmitEnd(Tok::kBlockEnd, i, SkipWhitespace(i + 3));
          if (At(i, "+%}")) return EmitEnd(Tok::kBlockEnd, i, i + 3);
          if (At(i, "%}")) {
            size_t end = i + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
            return EmitEnd(Tok::kBlockEnd, i, end);
          }
        } else {
          if (At(i, "-}}")) return EmitEnd(Tok::kVarEnd, i, SkipWhitespace(i + 3));
          if (At(i, "}}")) return EmitEnd(Tok::kVarEnd, i, i + 2);
        }
      }
      if (size_t ws = WhitespaceAt(i)) {
        i += ws;
        continue;
      }
      char c = src_[i];
      if (IsDigit(c)) {
        ASSIGN_OR_RETURN(i, LexNumber(i));
      } else if (IsNameStart(c)) {
        size_t j = i;
        while (j < src_.size() && IsNameChar(src_[j])) ++j;
        Emit(Tok::kName, src_.substr(i, j - i), i);
        i = j;
      } else if (c == '\'' || c == '"') {
        ASSIGN_OR_RETURN(i, LexString(i));
      } else {
        ASSIGN_OR_RETURN(i, LexOperator(i, open_brackets));
      }
    }
  }

  size_t EmitEnd(Tok kind, size_t at, size_t end) {
    Emit(kind, kind == Tok::kVarEnd ? "}}" : "%}", at);
    return end;
  }

  // jinja2's float and integer rules: floats are refused (their printing is Python's repr),
  // integers may be 0b/0o/0x and carry underscores between digits.
  absl::StatusOr<size_t> LexNumber(size_t i) {
    auto digits = [&](size_t j, auto is_digit) {
      // (_?d)* after a first digit: returns the end.
      while (true) {
        if (j < src_.size() && is_digit(src_[j])) {
          ++j;
        } else if (j + 1 < src_.size() && src_[j] == '_' && is_digit(src_[j + 1])) {
          j += 2;
        } else {
          return j;
        }
      }
    };
    auto dec = [](char c) { return IsDigit(c); };
    if (i == 0 || src_[i - 1] != '.') {
      size_t j = digits(i + 1, dec);
      bool is_float = false;
      if (j + 1 < src_.size() && src_[j] == '.' && IsDigit(src_[j + 1])) is_float = true;
      if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
        size_t k = j + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && IsDigit(src_[k])) is_float = true;
      }
      if (is_float) {
        return TemplateError(PosAt(i), "unsupported float literal (Python prints floats with "
                                       "repr, which this interpreter does not reproduce)");
      }
    }
    int base = 10;
    size_t start = i, end;
    char prefix = i + 1 < src_.size() ? static_cast<char>(src_[i + 1] | 0x20) : 0;
    auto in_base = [&](char c) {
      int d = HexDigit(c);
      return d >= 0 && d < base;
    };
    if (src_[i] == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x')) {
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
      size_t j = i + 2;
      if (j < src_.size() && src_[j] == '_') ++j;
      if (j < src_.size() && in_base(src_[j])) {
        start = j;
        end = digits(j + 1, in_base);
      } else {
        base = 10;
        end = i + 1;
      }
    } else if (src_[i] == '0') {
      end = digits(i + 1, [](char c) { return c == '0'; });
    } else {
      end = digits(i + 1, dec);
    }
    int64_t value = 0;
    for (size_t k = start; k < end; ++k) {
      if (src_[k] == '_') continue;
      if (__builtin_mul_overflow(value, base, &value) ||
          __builtin_add_overflow(value, HexDigit(src_[k]), &value)) {
        return TemplateError(PosAt(i), "integer literal out of the 64-bit range");
      }
    }
    Emit(Tok::kInt, src_.substr(i, end - i), i, value);
    return end;
  }

  // A quoted string, unescaped as jinja2 does it: Python's "unicode-escape" codec applied to
  // the text after non-ASCII characters were turned into \x/\u/\U escapes.
  absl::StatusOr<size_t> LexString(size_t i) {
    char quote = src_[i];
    std::string value;
    size_t j = i + 1;
    while (true) {
      if (j >= src_.size()) return TemplateError(PosAt(i), "unterminated string literal");
      char c = src_[j];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++j;
        continue;
      }
      if (j + 1 >= src_.size()) return TemplateError(PosAt(i), "unterminated string literal");
      ASSIGN_OR_RETURN(j, Unescape(j, value));
    }
    Emit(Tok::kString, std::move(value), i);
    return j + 1;
  }

  // The escape starting with the backslash at `j`; returns the offset after it.
  absl::StatusOr<size_t> Unescape(size_t j, std::string& value) {
    char e = src_[j + 1];
    size_t next = j + 2;
    auto hex = [&](int n, const char* what) -> absl::StatusOr<uint32_t> {
      uint32_t cp = 0;
      for (int k = 0; k < n; ++k) {
        int d = next + k < src_.size() ? HexDigit(src_[next + k]) : -1;
        if (d < 0) return TemplateError(PosAt(j), absl::StrFormat("truncated %s escape", what));
        cp = cp * 16 + d;
      }
      next += n;
      return cp;
    };
    switch (e) {
      case '\n': return next;  // a line continuation
      case '\\': value += '\\'; return next;
      case '\'': value += '\''; return next;
      case '"': value += '"'; return next;
      case 'a': value += '\a'; return next;
      case 'b': value += '\b'; return next;
      case 'f': value += '\f'; return next;
      case 'n': value += '\n'; return next;
      case 'r': value += '\r'; return next;
      case 't': value += '\t'; return next;
      case 'v': value += '\v'; return next;
      case 'x': case 'u': case 'U': {
        ASSIGN_OR_RETURN(uint32_t cp, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8,
                                          e == 'x' ? "\\xXX" : e == 'u' ? "\\uXXXX" : "\\UXXXXXXXX"));
        if (cp > 0x10FFFF) return TemplateError(PosAt(j), "illegal Unicode character in escape");
        if (cp >= 0xD800 && cp <= 0xDFFF) {
          return TemplateError(PosAt(j), "unsupported escape of a lone surrogate");
        }
        AppendUtf8(value, cp);
        return next;
      }
      case 'N': return TemplateError(PosAt(j), "unsupported escape \\N{...}");
      default: break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t cp = e - '0';
      for (int k = 0; k < 2 && next < src_.size() && src_[next] >= '0' && src_[next] <= '7'; ++k) {
        cp = cp * 8 + (src_[next++] - '0');
      }
      AppendUtf8(value, cp);
      return next;
    }
    value += '\\';
    if (static_cast<unsigned char>(e) >= 0x80) {
      // backslashreplace turned the character into \xNN/\uNNNN/\UNNNNNNNN, whose backslash the
      // escaped backslash consumed: the escape text stays literally.
      unsigned char lead = e;
      size_t len = (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : 4;
      uint32_t cp = DecodeUtf8(std::string_view(src_).substr(j + 1, len))[0];
      value += cp <= 0xFF ? absl::StrFormat("x%02x", cp)
               : cp <= 0xFFFF ? absl::StrFormat("u%04x", cp)
                              : absl::StrFormat("U%08x", cp);
      return j + 1 + len;
    }
    value += e;  // an unknown escape keeps its backslash
    return next;
  }

  absl::StatusOr<size_t> LexOperator(size_t i, std::vector<char>& open_brackets) {
    static constexpr const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                           "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                           ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
    for (const char* op : kOps) {
      if (!At(i, op)) continue;
      char c = op[0];
      if (op[1] == 0 && (c == '(' || c == '[' || c == '{')) {
        open_brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (op[1] == 0 && (c == ')' || c == ']' || c == '}')) {
        if (open_brackets.empty()) return TemplateError(PosAt(i), absl::StrFormat("unexpected '%c'", c));
        if (open_brackets.back() != c) {
          return TemplateError(PosAt(i), absl::StrFormat("unexpected '%c', expected '%c'", c,
                                                         open_brackets.back()));
        }
        open_brackets.pop_back();
      }
      Emit(Tok::kOp, op, i);
      return i + std::strlen(op);
    }
    unsigned char c = src_[i];
    if (c >= 0x20 && c < 0x7f) {
      return TemplateError(PosAt(i), absl::StrFormat("unexpected character '%c'", c));
    }
    return TemplateError(PosAt(i), absl::StrFormat("unexpected character (byte 0x%02x)", c));
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t cache_offset_ = 0;
  int cache_col_ = 1;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  size_t bad = 0;
  if (!IsValidUtf8(source, &bad)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chat template is not valid UTF-8 (byte %d)", bad));
  }
  // jinja2 splits on \r\n, \r and \n, joins with \n, and drops one trailing newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace lockstep::tokenizer::chat_template_internal
