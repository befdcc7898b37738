// Text and JSON summaries of a GGUF. Abbreviation keeps the output of a 256k-token vocabulary
// to a line; `full` prints everything.
#include "engine/gguf/inspect.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lockstep::gguf {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((c & 0xe0) == 0xc0) { n = 2; cp = c & 0x1f; }
  else if ((c & 0xf0) == 0xe0) { n = 3; cp = c & 0x0f; }
  else if ((c & 0xf8) == 0xf0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  // Reject overlong forms, surrogates and code points past U+10FFFF.
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

// `s` cut to at most `max` bytes without splitting a UTF-8 sequence, unless !abbreviate.
std::string_view Prefix(std::string_view s, bool abbreviate, bool* cut) {
  *cut = abbreviate && s.size() > kInspectStringBytes;
  if (!*cut) return s;
  size_t n = kInspectStringBytes;
  for (int back = 0; back < 3 && n > 0 && (static_cast<uint8_t>(s[n]) & 0xc0) == 0x80; ++back) {
    --n;
  }
  return s.substr(0, n);
}

std::string EscapeText(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    switch (c) {
      case '\n': out += "\\n"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      default: break;
    }
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
      continue;
    }
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string QuotedText(std::string_view s, bool abbreviate) {
  bool cut = false;
  std::string_view p = Prefix(s, abbreviate, &cut);
  std::string out = absl::StrCat("\"", EscapeText(p), "\"");
  if (cut) absl::StrAppend(&out, "... (", s.size(), " bytes)");
  return out;
}

// The shortest %g form (between min_digits and max_digits) that reads back to the same value
// (as a float when as_float): 1e-06 rather than 9.99999997e-07.
std::string ShortestFloat(double x, int min_digits, int max_digits, bool as_float) {
  std::string s;
  for (int d = min_digits; d <= max_digits; ++d) {
    s = absl::StrFormat("%.*g", d, x);
    const double back = std::strtod(s.c_str(), nullptr);
    if (as_float ? static_cast<float>(back) == static_cast<float>(x) : back == x) break;
  }
  return s;
}

std::string ScalarText(const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
      return absl::StrCat(v.u);
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return absl::StrCat(static_cast<int64_t>(v.u));
    case ValueType::BOOL:
      return v.u == 0 ? "false" : v.u == 1 ? "true" : absl::StrCat("true (byte ", v.u, ")");
    case ValueType::FLOAT32: return ShortestFloat(v.f, 6, 9, true);
    case ValueType::FLOAT64: return ShortestFloat(v.f, 15, 17, false);
    default: return "?";
  }
}

std::string ValueText(const Value& v, bool full) {
  if (v.type == ValueType::STRING) return QuotedText(v.str, !full);
  if (v.type != ValueType::ARRAY) return ScalarText(v);
  const size_t shown = full ? v.arr.size() : std::min(v.arr.size(), kInspectItems);
  std::string out = "[";
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += ValueText(v.arr[i], full);
  }
  out += "]";
  if (shown < v.arr.size()) absl::StrAppend(&out, " ... (", v.arr.size(), " items)");
  return out;
}

// "STRING" or "ARRAY[FLOAT32 x 49152]" (nested arrays give the outer element type only).
std::string TypeText(const Value& v) {
  if (v.type != ValueType::ARRAY) return ValueTypeName(v.type);
  return absl::StrCat("ARRAY[", ValueTypeName(v.elem_type), " x ", v.arr.size(), "]");
}

nlohmann::json ValueJson(const Value& v, bool full, bool* truncated) {
  switch (v.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
      return v.u;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return static_cast<int64_t>(v.u);
    case ValueType::BOOL: return v.u != 0;
    case ValueType::FLOAT32: case ValueType::FLOAT64: return v.f;
    case ValueType::STRING: {
      bool cut = false;
      std::string s = ValidUtf8(Prefix(v.str, !full, &cut));
      if (cut) {
        absl::StrAppend(&s, "... (", v.str.size(), " bytes)");
        *truncated = true;
      }
      return s;
    }
    case ValueType::ARRAY: {
      nlohmann::json a = nlohmann::json::array();
      const size_t shown = full ? v.arr.size() : std::min(v.arr.size(), kInspectItems);
      if (shown < v.arr.size()) *truncated = true;
      for (size_t i = 0; i < shown; ++i) a.push_back(ValueJson(v.arr[i], full, truncated));
      return a;
    }
  }
  return nullptr;
}

struct Totals {
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

Totals Sum(const File& file) {
  Totals t;
  for (const TensorInfo& ti : file.tensors()) {
    t.elements += ti.n_elements;
    t.bytes += ti.n_bytes;
  }
  return t;
}

const char* TypeName(quant::Type t) {
  const char* name = quant::Traits(t).name;
  return name != nullptr ? name : "?";
}

}  // namespace

std::string InspectText(const File& file, bool full) {
  std::string out = absl::StrFormat(
      "GGUF v%u, %u bytes\n  alignment %u, %u metadata keys, %u tensors, data at offset %u\n",
      file.version(), file.file_size(), file.alignment(), file.metadata().size(),
      file.tensors().size(), file.data_offset());
  absl::StrAppend(&out, "metadata (", file.metadata().size(), " keys):\n");
  for (const KeyValue& kv : file.metadata()) {
    absl::StrAppend(&out, "  ", EscapeText(kv.key), ": ", TypeText(kv.value), " = ",
                    ValueText(kv.value, full), "\n");
  }
  absl::StrAppend(&out, "tensors (", file.tensors().size(), "):\n");
  // Columns: name, type, shape [ne0, ne1, ...], data-section offset, bytes.
  std::vector<std::string> names, shapes;
  size_t name_w = 4, shape_w = 5;
  for (const TensorInfo& t : file.tensors()) {
    names.push_back(EscapeText(t.name));
    shapes.push_back(absl::StrCat("[", absl::StrJoin(t.shape, ", "), "]"));
    name_w = std::max(name_w, names.back().size());
    shape_w = std::max(shape_w, shapes.back().size());
  }
  if (!file.tensors().empty()) {
    absl::StrAppendFormat(&out, "  %-*s  %-7s  %-*s  %12s  %12s\n", name_w, "name", "type", shape_w,
                          "shape", "offset", "bytes");
  }
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const TensorInfo& t = file.tensors()[i];
    absl::StrAppendFormat(&out, "  %-*s  %-7s  %-*s  %12u  %12u\n", name_w, names[i],
                          TypeName(t.type), shape_w, shapes[i], t.offset, t.n_bytes);
  }
  const Totals tot = Sum(file);
  absl::StrAppend(&out, "total: ", file.tensors().size(), " tensors, ", tot.elements,
                  " elements, ", tot.bytes, " bytes\n");
  return out;
}

nlohmann::json InspectJson(const File& file, bool full) {
  nlohmann::json j;
  j["header"] = {{"version", file.version()},
                 {"alignment", file.alignment()},
                 {"n_kv", file.metadata().size()},
                 {"n_tensors", file.tensors().size()},
                 {"data_offset", file.data_offset()},
                 {"file_size", file.file_size()}};
  nlohmann::json md = nlohmann::json::array();
  for (const KeyValue& kv : file.metadata()) {
    bool truncated = false;
    nlohmann::json e = {{"key", ValidUtf8(kv.key)}, {"type", ValueTypeName(kv.value.type)}};
    e["value"] = ValueJson(kv.value, full, &truncated);
    if (kv.value.type == ValueType::ARRAY) {
      e["elem_type"] = ValueTypeName(kv.value.elem_type);
      e["count"] = kv.value.arr.size();
    }
    if (truncated) e["truncated"] = true;
    md.push_back(std::move(e));
  }
  j["metadata"] = std::move(md);
  nlohmann::json ts = nlohmann::json::array();
  for (const TensorInfo& t : file.tensors()) {
    ts.push_back({{"name", ValidUtf8(t.name)},
                  {"type", TypeName(t.type)},
                  {"shape", t.shape},
                  {"offset", t.offset},
                  {"bytes", t.n_bytes},
                  {"elements", t.n_elements}});
  }
  j["tensors"] = std::move(ts);
  const Totals tot = Sum(file);
  j["total"] = {{"tensors", file.tensors().size()},
                {"elements", tot.elements},
                {"bytes", tot.bytes}};
  return j;
}

}  // namespace lockstep::gguf
