// Python semantics on chat-template values: truthiness, ==, <, str(), repr(), json.dumps, and the
// str methods templates call, all over code points as Python sees strings.
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/tokenizer/chat_template_internal.h"

namespace lockstep::tokenizer::chat_template_internal {

absl::Status TemplateError(Pos pos, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("chat template line %d:%d: %s", pos.line, pos.col, what));
}

Value Value::MakeUndefined(std::string hint) {
  return Value{Undefined{std::make_shared<const std::string>(std::move(hint))}};
}
Value Value::MakeStr(std::string s) { return Value{std::make_shared<const std::string>(std::move(s))}; }
Value Value::MakeList(std::vector<Value> items, SeqKind kind) {
  auto list = std::make_shared<List>();
  int depth = 0;
  for (const Value& item : items) {
    depth = std::max(depth, item.depth());
    list->holds_refs = list->holds_refs || item.holds_refs();
  }
  list->depth = depth + 1;
  list->items = std::move(items);
  list->kind = kind;
  return Value{std::shared_ptr<const List>(std::move(list))};
}
Value Value::MakeDict(std::vector<std::pair<std::string, Value>> items) {
  auto dict = std::make_shared<Dict>();
  int depth = 0;
  for (const auto& [key, value] : items) {
    depth = std::max(depth, value.depth());
    dict->holds_refs = dict->holds_refs || value.holds_refs();
  }
  dict->depth = depth + 1;
  dict->items = std::move(items);
  return Value{std::shared_ptr<const Dict>(std::move(dict))};
}
int Value::depth() const {
  if (is_list()) return list().depth;
  if (is_dict()) return dict().depth;
  return 0;
}

bool Value::holds_refs() const {
  if (is_list()) return list().holds_refs;
  if (is_dict()) return dict().holds_refs;
  return is_namespace() || is_loop() || is_callable();
}

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}
Value* Namespace::Find(std::string_view key) {
  for (auto& [k, v] : attrs) {
    if (k == key) return &v;
  }
  return nullptr;
}

absl::Status Budget::Charge(uint64_t n) {
  steps += n;
  if (steps > limits.max_steps) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "chat template exceeded its budget of %d evaluation steps (an unbounded loop?)",
        limits.max_steps));
  }
  return absl::OkStatus();
}
absl::Status Budget::CheckString(uint64_t size) const {
  if (size > limits.max_output_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "chat template built a string of %d bytes, over the limit of %d", size,
        limits.max_output_bytes));
  }
  return absl::OkStatus();
}
absl::Status Budget::CheckElements(uint64_t count) const {
  if (count > limits.max_container_elements) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "chat template built a container of %d elements, over the limit of %d", count,
        limits.max_container_elements));
  }
  return absl::OkStatus();
}

std::string TypeName(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int_like()) return "int";
  if (v.is_str()) return "str";
  if (v.is_list()) {
    switch (v.list().kind) {
      case SeqKind::kList: return "list";
      case SeqKind::kTuple: return "tuple";
      case SeqKind::kView: return "range or dict view";
      case SeqKind::kIterator: return "generator";
    }
  }
  if (v.is_dict()) return "dict";
  if (v.is_namespace()) return "Namespace";
  if (v.is_loop()) return "LoopContext";
  return "function";
}

bool Truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_int_like()) return v.as_int() != 0;
  if (v.is_str()) return !v.str().empty();
  if (v.is_list()) return !v.list().items.empty();
  if (v.is_dict()) return !v.dict().items.empty();
  return true;  // namespace, function, loop
}

absl::StatusOr<bool> Equal(const Value& a, const Value& b, Budget& budget) {
  RETURN_IF_ERROR(budget.Charge(1));
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_int_like() && b.is_int_like()) return a.as_int() == b.as_int();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_str() && b.is_str()) return a.str() == b.str();
  if ((a.is_list() && a.list().opaque()) || (b.is_list() && b.list().opaque())) {
    return absl::UnimplementedError(absl::StrFormat(
        "comparing a %s is unsupported", TypeName(a.is_list() && a.list().opaque() ? a : b)));
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.list();
    const List& y = b.list();
    if (x.kind != y.kind || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i) {
      ASSIGN_OR_RETURN(bool eq, Equal(x.items[i], y.items[i], budget));
      if (!eq) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict& x = a.dict();
    const Dict& y = b.dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [key, value] : x.items) {
      const Value* other = y.Find(key);
      if (other == nullptr) return false;
      ASSIGN_OR_RETURN(bool eq, Equal(value, *other, budget));
      if (!eq) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.ns() == &b.ns();
  if (a.is_loop() && b.is_loop()) return &a.loop() == &b.loop();
  if (a.is_callable() && b.is_callable()) {
    if (a.fn().id != b.fn().id) return false;
    return Equal(a.fn().receiver, b.fn().receiver, budget);
  }
  return false;
}

absl::StatusOr<bool> Less(const Value& a, const Value& b, Budget& budget) {
  RETURN_IF_ERROR(budget.Charge(1));
  if (a.is_int_like() && b.is_int_like()) return a.as_int() < b.as_int();
  // UTF-8 byte order is code-point order, which is how Python orders str.
  if (a.is_str() && b.is_str()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.list().kind == b.list().kind && !a.list().opaque()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      ASSIGN_OR_RETURN(bool eq, Equal(x[i], y[i], budget));
      if (!eq) return Less(x[i], y[i], budget);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "'<' not supported between instances of '%s' and '%s'", TypeName(a), TypeName(b)));
}

namespace {

// repr() of a str. Python leaves printable non-ASCII characters as they are and escapes the
// others, which takes the Unicode database to decide; without it, non-ASCII is refused.
absl::StatusOr<std::string> ReprStr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c >= 0x80) {
      return absl::UnimplementedError(
          "printing a list or dict that holds non-ASCII text is unsupported (Python's repr "
          "escapes some non-ASCII characters)");
    }
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

absl::Status AppendRepr(const Value& v, std::string& out, Budget& budget) {
  RETURN_IF_ERROR(budget.Charge(1));
  RETURN_IF_ERROR(budget.CheckString(out.size()));
  if (v.is_str()) {
    ASSIGN_OR_RETURN(std::string r, ReprStr(v.str()));
    RETURN_IF_ERROR(budget.ChargeBytes(r.size()));
    out += r;
    return absl::OkStatus();
  }
  if (v.is_undefined()) {
    out += "Undefined";
    return absl::OkStatus();
  }
  if (v.is_list() && !v.list().opaque()) {
    const List& list = v.list();
    bool is_tuple = list.kind == SeqKind::kTuple;
    out += is_tuple ? '(' : '[';
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i > 0) out += ", ";
      RETURN_IF_ERROR(AppendRepr(list.items[i], out, budget));
    }
    if (is_tuple && list.items.size() == 1) out += ',';
    out += is_tuple ? ')' : ']';
    return absl::OkStatus();
  }
  if (v.is_dict()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : v.dict().items) {
      if (!first) out += ", ";
      first = false;
      ASSIGN_OR_RETURN(std::string k, ReprStr(key));
      out += k;
      out += ": ";
      RETURN_IF_ERROR(AppendRepr(value, out, budget));
    }
    out += '}';
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string s, ToStr(v, budget));
  out += s;
  return absl::OkStatus();
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (uint32_t cp : DecodeUtf8(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
          if (cp >= 0x10000) {  // a surrogate pair, as Python writes it
            uint32_t v = cp - 0x10000;
            out += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += absl::StrFormat("\\u%04x", cp);
          }
        } else {
          AppendUtf8(out, cp);
        }
    }
  }
  out += '"';
}

absl::Status AppendJson(const Value& v, const JsonFormat& f, int level, std::string& out,
                        Budget& budget) {
  RETURN_IF_ERROR(budget.Charge(1));
  RETURN_IF_ERROR(budget.CheckString(out.size()));
  auto newline = [&](int lvl) {
    if (f.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(f.indent) * lvl, ' ');
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += std::get<bool>(v.v) ? "true" : "false";
  } else if (v.is_int_like()) {
    out += absl::StrCat(v.as_int());
  } else if (v.is_str()) {
    RETURN_IF_ERROR(budget.ChargeBytes(v.str().size()));
    AppendJsonString(v.str(), f.ensure_ascii, out);
  } else if (v.is_list() && !v.list().opaque()) {
    const auto& items = v.list().items;
    if (items.empty()) {
      out += "[]";
      return absl::OkStatus();
    }
    out += '[';
    newline(level + 1);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) {
        out += f.item_sep;
        newline(level + 1);
      }
      RETURN_IF_ERROR(AppendJson(items[i], f, level + 1, out, budget));
    }
    newline(level);
    out += ']';
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : v.dict().items) entries.push_back(&entry);
    if (entries.empty()) {
      out += "{}";
      return absl::OkStatus();
    }
    if (f.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out += '{';
    newline(level + 1);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) {
        out += f.item_sep;
        newline(level + 1);
      }
      AppendJsonString(entries[i]->first, f.ensure_ascii, out);
      out += f.key_sep;
      RETURN_IF_ERROR(AppendJson(entries[i]->second, f, level + 1, out, budget));
    }
    newline(level);
    out += '}';
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("Object of type %s is not JSON serializable", TypeName(v)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ToStr(const Value& v, Budget& budget) {
  if (v.is_undefined()) return std::string();
  if (v.is_none()) return std::string("None");
  if (v.is_bool()) return std::string(std::get<bool>(v.v) ? "True" : "False");
  if (v.is_int_like()) return absl::StrCat(v.as_int());
  if (v.is_str()) return v.str();
  if ((v.is_list() && !v.list().opaque()) || v.is_dict()) {
    std::string out;
    RETURN_IF_ERROR(AppendRepr(v, out, budget));
    RETURN_IF_ERROR(budget.CheckString(out.size()));
    return out;
  }
  return absl::UnimplementedError(
      absl::StrFormat("printing a %s object is unsupported", TypeName(v)));
}

absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format, Budget& budget) {
  std::string out;
  RETURN_IF_ERROR(AppendJson(v, format, 0, out, budget));
  RETURN_IF_ERROR(budget.CheckString(out.size()));
  return out;
}

absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j, std::string_view where,
                               int depth) {
  if (depth > kMaxValueDepth) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: nested deeper than %d levels", where, kMaxValueDepth));
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::MakeNone();
    case nlohmann::ordered_json::value_t::boolean: return Value::MakeBool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::MakeInt(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: integer %d out of range", where, u));
      }
      return Value::MakeInt(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      size_t bad = 0;
      if (!IsValidUtf8(s, &bad)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: invalid UTF-8 at byte %d", where, bad));
      }
      return Value::MakeStr(s);
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (size_t i = 0; i < j.size(); ++i) {
        ASSIGN_OR_RETURN(Value item, FromJson(j[i], absl::StrFormat("%s[%d]", where, i), depth + 1));
        items.push_back(std::move(item));
      }
      return Value::MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (const auto& [key, value] : j.items()) {
        ASSIGN_OR_RETURN(Value item,
                         FromJson(value, absl::StrFormat("%s.%s", where, key), depth + 1));
        items.emplace_back(key, std::move(item));
      }
      return Value::MakeDict(std::move(items));
    }
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s values are unsupported (only integers, strings, booleans, null, arrays and "
          "objects)",
          where, j.type_name()));
  }
}

// ---------------------------------------------------------------------------------------------
// UTF-8 and str methods.

bool IsValidUtf8(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (n < 0 || i + n >= s.size()) {
      *bad_offset = i;
      return false;
    }
    uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k <= n; ++k) {
      unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) {
        *bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      *bad_offset = i;
      return false;
    }
    i += n + 1;
  }
  return true;
}

std::vector<uint32_t> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : 3;
    uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k <= n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string EncodeUtf8(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t cp : cps) AppendUtf8(out, cp);
  return out;
}

// str.isspace(): the characters Python strips, splits on, and `\s` matches.
bool IsPyWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::vector<uint32_t> set;
  if (chars != nullptr) set = DecodeUtf8(*chars);
  auto strip_it = [&](uint32_t cp) {
    if (chars == nullptr) return IsPyWhitespace(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e));
}

namespace {
// Non-ASCII ranges without case mappings (so upper/lower leave them as they are): Latin-1
// symbols, punctuation, currency, arrows/math/technical, box drawing to dingbats, CJK and kana,
// Hangul, variation selectors, emoji and pictographs, tags.
bool IsCaseless(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0xBF && cp != 0xAA && cp != 0xB5 && cp != 0xBA) || cp == 0xD7 ||
         cp == 0xF7 || (cp >= 0x2000 && cp <= 0x206F) || (cp >= 0x20A0 && cp <= 0x20CF) ||
         (cp >= 0x2190 && cp <= 0x23FF) || (cp >= 0x2500 && cp <= 0x27BF) ||
         (cp >= 0x3000 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
         (cp >= 0xFE00 && cp <= 0xFE0F) || (cp >= 0x1F000 && cp <= 0x1FAFF) ||
         (cp >= 0xE0000 && cp <= 0xE007F);
}
}  // namespace

absl::StatusOr<std::string> PyCase(std::string_view s, char mode) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (uint32_t cp : DecodeUtf8(s)) {
    if (cp >= 0x80) {
      if (!IsCaseless(cp)) {
        return absl::UnimplementedError(absl::StrFormat(
            "changing the case of non-ASCII text (U+%04X) is unsupported", cp));
      }
      AppendUtf8(out, cp);
    } else {
      bool up = mode == 'u' || (mode == 'c' && first);
      char c = static_cast<char>(cp);
      if (up && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (!up && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      out += c;
    }
    first = false;
  }
  return out;
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  std::vector<uint32_t> cps = DecodeUtf8(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsPyWhitespace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      // The remainder keeps its trailing whitespace, as Python's does.
      parts.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.end())));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPyWhitespace(cps[j])) ++j;
    parts.push_back(EncodeUtf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return parts;
}

absl::StatusOr<std::string> PyReplace(std::string_view s, std::string_view old_s,
                                      std::string_view new_s, int64_t count, Budget& budget) {
  std::string out;
  int64_t done = 0;
  auto append = [&](std::string_view piece) -> absl::Status {
    out.append(piece);
    RETURN_IF_ERROR(budget.ChargeBytes(piece.size()));
    return budget.CheckString(out.size());
  };
  if (old_s.empty()) {
    // Python inserts `new` before every character and at the end.
    std::vector<uint32_t> cps = DecodeUtf8(s);
    for (uint32_t cp : cps) {
      if (count < 0 || done < count) {
        RETURN_IF_ERROR(append(new_s));
        ++done;
      }
      std::string c;
      AppendUtf8(c, cp);
      RETURN_IF_ERROR(append(c));
    }
    if (count < 0 || done < count) RETURN_IF_ERROR(append(new_s));
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old_s, start);
    if (at == std::string_view::npos) break;
    RETURN_IF_ERROR(append(s.substr(start, at - start)));
    RETURN_IF_ERROR(append(new_s));
    start = at + old_s.size();
    ++done;
  }
  RETURN_IF_ERROR(append(s.substr(start)));
  return out;
}

absl::Status PySliceIndices(int64_t len, const Value& start_v, const Value& stop_v,
                            const Value& step_v, std::vector<int64_t>& picked) {
  int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  step = std::max(step, -INT64_MAX);  // so that -step exists; no sequence is that long anyway
  int64_t start, stop;
  if (step > 0) {
    start = start_v.is_none() ? 0 : start_v.as_int();
    stop = stop_v.is_none() ? len : stop_v.as_int();
    if (start < 0) start = std::max<int64_t>(0, start + len);
    if (stop < 0) stop = std::max<int64_t>(0, stop + len);
    start = std::min(start, len);
    stop = std::min(stop, len);
    for (int64_t i = start; i < stop; i += step) {
      picked.push_back(i);
      if (stop - i <= step) break;  // the next index would pass `stop` (or overflow)
    }
  } else {
    start = start_v.is_none() ? len - 1 : start_v.as_int();
    stop = stop_v.is_none() ? -1 : stop_v.as_int();
    if (start < 0) start = std::max<int64_t>(-1, start + len);
    if (!stop_v.is_none() && stop < 0) stop = std::max<int64_t>(-1, stop + len);
    start = std::min(start, len - 1);
    stop = std::min(stop, len - 1);
    for (int64_t i = start; i > stop; i += step) {
      picked.push_back(i);
      if (i - stop <= -step) break;
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::tokenizer::chat_template_internal
