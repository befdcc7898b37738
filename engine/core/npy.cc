#include "engine/core/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace lockstep::npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

// Extracts the value text of 'key' from the header dict: "{'descr': '<f4', ...}".
bool DictValue(std::string_view dict, std::string_view key, std::string_view* out) {
  const std::string needle = absl::StrCat("'", std::string(key), "':");
  size_t at = dict.find(needle);
  if (at == std::string_view::npos) return false;
  std::string_view rest = dict.substr(at + needle.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  size_t end;
  if (!rest.empty() && rest.front() == '(') {
    end = rest.find(')');
    if (end == std::string_view::npos) return false;
    ++end;
  } else {
    end = rest.find(',');
    if (end == std::string_view::npos) end = rest.find('}');
    if (end == std::string_view::npos) return false;
  }
  *out = rest.substr(0, end);
  return true;
}

}  // namespace

absl::StatusOr<Array> Parse(std::string_view b) {
  if (b.size() < 10 || std::memcmp(b.data(), kMagic, 6) != 0) {
    return absl::InvalidArgumentError("npy: bad magic at offset 0 (not a .npy file)");
  }
  const uint8_t major = static_cast<uint8_t>(b[6]);
  size_t header_len, header_at;
  if (major == 1) {
    header_len = static_cast<uint8_t>(b[8]) | (static_cast<size_t>(static_cast<uint8_t>(b[9])) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return absl::InvalidArgumentError("npy: truncated header length at offset 8");
    uint32_t n;
    std::memcpy(&n, b.data() + 8, 4);
    header_len = n;
    header_at = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("npy: unsupported format version ", major,
                                                   " at offset 6"));
  }
  if (header_len > b.size() - header_at) {
    return absl::InvalidArgumentError(absl::StrCat("npy: header length ", header_len, " at offset 8 ",
                                                   "runs past the end of the file (size ", b.size(), ")"));
  }
  const std::string_view dict = b.substr(header_at, header_len);
  std::string_view descr, order, shape_text;
  if (!DictValue(dict, "descr", &descr) || !DictValue(dict, "fortran_order", &order) ||
      !DictValue(dict, "shape", &shape_text)) {
    return absl::InvalidArgumentError(absl::StrCat("npy: header at offset ", header_at,
                                                   " lacks descr, fortran_order or shape"));
  }
  if (descr != "'<f4'") {
    return absl::InvalidArgumentError(absl::StrCat("npy: dtype ", std::string(descr),
                                                   " at offset ", header_at, "; only '<f4' is read"));
  }
  if (order != "False") {
    return absl::InvalidArgumentError(absl::StrCat("npy: fortran_order ", std::string(order),
                                                   " at offset ", header_at, "; only C order is read"));
  }
  Array a;
  if (shape_text.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("npy: bad shape at offset ", header_at));
  }
  const std::string inner(shape_text.substr(1, shape_text.size() - 2));
  uint64_t count = 1;
  for (absl::string_view piece : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    const std::string part(absl::StripAsciiWhitespace(piece));
    int64_t dim;
    if (!absl::SimpleAtoi(part, &dim) || dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat("npy: bad shape entry \"", part,
                                                     "\" at offset ", header_at));
    }
    if (dim != 0 && count > (b.size() / 4) / static_cast<uint64_t>(dim)) {
      return absl::InvalidArgumentError(absl::StrCat("npy: shape ", std::string(shape_text),
                                                     " holds more elements than the file"));
    }
    count *= static_cast<uint64_t>(dim);
    a.shape.push_back(dim);
  }
  const size_t data_at = header_at + header_len;
  if (b.size() - data_at != count * 4) {
    return absl::InvalidArgumentError(absl::StrCat("npy: data at offset ", data_at, " is ",
                                                   b.size() - data_at, " bytes; shape ",
                                                   std::string(shape_text), " needs ", count * 4));
  }
  a.data.resize(count);
  if (count > 0) std::memcpy(a.data.data(), b.data() + data_at, count * 4);
  return a;
}

absl::StatusOr<Array> Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto a = Parse(ss.str());
  if (!a.ok()) return absl::Status(a.status().code(), absl::StrCat(path, ": ", a.status().message()));
  return a;
}

std::string Serialize(const std::vector<int64_t>& shape, const float* data) {
  std::string dims;
  uint64_t count = 1;
  for (int64_t d : shape) {
    absl::StrAppend(&dims, d, ",");
    count *= static_cast<uint64_t>(d);
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  // Pad so that the data starts on a 64-byte boundary, header ending in '\n' (NEP 1).
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xFF));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(reinterpret_cast<const char*>(data), count * 4);
  return out;
}

absl::Status Write(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  const std::string bytes = Serialize(shape, data);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return absl::DataLossError(absl::StrCat("short write to ", path));
  return absl::OkStatus();
}

}  // namespace lockstep::npy
