// GGUF reader: maps the file, then walks it once. Every count, length and offset is compared
// with the bytes that remain (or the file size) before it is used, with overflow-checked
// arithmetic; errors name the field and the byte offset (decimal) they are about.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/gguf/gguf.h"

namespace lockstep::gguf {

// Owns the bytes a File points into: an mmap'd file or a heap copy.
struct File::Mapping {
  void* map = nullptr;  // mmap'd region, or nullptr
  size_t map_size = 0;
  uint8_t* heap = nullptr;  // 64-byte aligned copy, or nullptr
  ~Mapping() {
    if (map != nullptr) munmap(map, map_size);
    if (heap != nullptr) operator delete[](heap, std::align_val_t{64});
  }
};

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
// Smallest encodings, used to bound counts by the bytes that remain before allocating:
// key (u64 length) + value type (u32) + smallest value (1 byte).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
// name (u64 length) + n_dims (u32) + type (u32) + offset (u64).
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

// Encoded size of a scalar of type t (0 for STRING/ARRAY/invalid).
uint64_t ScalarBytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

// Smallest encoding of one array item of type t: strings carry a u64 length, arrays a u32
// element type and a u64 count.
uint64_t MinItemBytes(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 12;
  return ScalarBytes(t);
}

bool ValidType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

// Debian's abseil has its own string_view type, distinct from std::string_view.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A key or tensor name as it appears in an error: control and non-ASCII bytes escaped, and cut
// to 80 bytes so that a hostile 1 GB name does not become a 1 GB message.
std::string Printable(const std::string& s) {
  constexpr size_t kMax = 80;
  std::string e = absl::CHexEscape(AV(s).substr(0, kMax));
  if (s.size() > kMax) absl::StrAppend(&e, "...(", s.size(), " bytes)");
  return e;
}

}  // namespace

// One pass over the bytes. `Where()` describes the field being read for error messages; it is
// composed only when an error happens, so the hot loops over array items do no formatting.
class Parser {
 public:
  Parser(const uint8_t* base, uint64_t size) : p_(base), size_(size) {}

  absl::Status Run(File* f) {
    RETURN_IF_ERROR(ReadHeader(f));
    RETURN_IF_ERROR(ReadMetadata(f));
    RETURN_IF_ERROR(ReadTensorInfos(f));
    return CheckTensorData(f);
  }

 private:
  enum class Section { kHeader, kKey, kTensor };

  absl::Status Error(std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": ", AV(msg)));
  }

  std::string Where() const {
    std::string w;
    switch (section_) {
      case Section::kHeader: w = "header"; break;
      case Section::kKey:
        w = absl::StrCat("metadata key #", index_,
                         key_ ? absl::StrCat(" '", Printable(*key_), "'") : "", " at offset ",
                         item_offset_);
        break;
      case Section::kTensor:
        w = name_ ? absl::StrCat("tensor \"", Printable(*name_), "\" (info at offset ",
                                 item_offset_, ")")
                  : absl::StrCat("tensor #", index_, " (info at offset ", item_offset_, ")");
        break;
    }
    for (const auto& [item, offset] : path_) {
      absl::StrAppend(&w, ": array item ", item, " at offset ", offset);
    }
    return w;
  }

  absl::Status PastEnd(std::string_view what, uint64_t need) const {
    return Error(absl::StrCat(AV(what), " (", need, " bytes at offset ", pos_,
                              ") runs past end of file (size ", size_, ")"));
  }

  template <typename T>
  absl::Status Read(std::string_view what, T* out) {
    if (sizeof(T) > size_ - pos_) return PastEnd(what, sizeof(T));
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string_view what, std::string* out) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    if (sizeof(len) > size_ - pos_) return PastEnd(absl::StrCat(AV(what), " length"), 8);
    std::memcpy(&len, p_ + pos_, sizeof(len));
    pos_ += sizeof(len);
    if (len > size_ - pos_) {
      return Error(absl::StrCat(AV(what), " length ", len, " (at offset ", at,
                                ") runs past end of file (size ", size_, ")"));
    }
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status ReadHeader(File* f) {
    section_ = Section::kHeader;
    uint32_t magic = 0;
    if (size_ < 4) {
      return Error(absl::StrCat("file is ", size_, " bytes, too small for the GGUF magic"));
    }
    RETURN_IF_ERROR(Read("magic", &magic));
    if (magic != kMagic) {
      return Error(absl::StrFormat(
          "bad magic 0x%08x at offset 0 (expected \"GGUF\"); not a GGUF file", magic));
    }
    uint32_t version = 0;
    RETURN_IF_ERROR(Read("version", &version));
    if (version == 1) {
      return Error("GGUF version 1 (at offset 4) is not supported (only 2 and 3); "
                   "re-convert the model with a current llama.cpp");
    }
    if (version == 0x02000000 || version == 0x03000000) {
      return Error("big-endian GGUF (version at offset 4 is byte-swapped) is not supported");
    }
    if (version != 2 && version != 3) {
      return Error(absl::StrCat("GGUF version ", version,
                                " (at offset 4) is not supported (only 2 and 3)"));
    }
    f->version_ = version;
    RETURN_IF_ERROR(Read("tensor count", &n_tensors_));
    RETURN_IF_ERROR(Read("metadata key count", &n_kv_));
    // Bound both counts by the bytes left before any allocation sized from them.
    const uint64_t left = size_ - pos_;
    if (n_kv_ > left / kMinKvBytes) {
      return Error(absl::StrCat("metadata key count ", n_kv_, " (at offset 16) needs at least ",
                                kMinKvBytes, " bytes per key but only ", left,
                                " bytes remain (file size ", size_, ")"));
    }
    if (n_kv_ > kMaxKeys) {
      return Error(absl::StrCat("metadata key count ", n_kv_, " (at offset 16) exceeds the limit ",
                                kMaxKeys));
    }
    if (n_tensors_ > kMaxTensors) {
      return Error(absl::StrCat("tensor count ", n_tensors_,
                                " (at offset 8) exceeds the limit ", kMaxTensors));
    }
    const uint64_t after_kv = left - n_kv_ * kMinKvBytes;  // n_kv_ <= left / kMinKvBytes
    if (n_tensors_ > after_kv / kMinTensorInfoBytes) {
      return Error(absl::StrCat("tensor count ", n_tensors_, " (at offset 8) needs at least ",
                                kMinTensorInfoBytes, " bytes per tensor info but only ", after_kv,
                                " bytes remain after the header and ", n_kv_,
                                " metadata keys (file size ", size_, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status ReadMetadata(File* f) {
    section_ = Section::kKey;
    f->metadata_.resize(n_kv_);
    f->key_index_.reserve(n_kv_);
    for (uint64_t i = 0; i < n_kv_; ++i) {
      index_ = i;
      item_offset_ = pos_;
      key_ = nullptr;
      KeyValue& kv = f->metadata_[i];
      RETURN_IF_ERROR(ReadString("key", &kv.key));
      key_ = &kv.key;
      if (!f->key_index_.emplace(kv.key, i).second) {
        return Error(absl::StrCat("duplicate key (first defined as key #",
                                  f->key_index_.at(kv.key), ")"));
      }
      uint32_t type = 0;
      const uint64_t type_at = pos_;
      RETURN_IF_ERROR(Read("value type", &type));
      if (!ValidType(type)) {
        return Error(absl::StrCat("value type id ", type, " (at offset ", type_at,
                                  ") is not a GGUF type (0..12)"));
      }
      RETURN_IF_ERROR(CountValues(1));
      RETURN_IF_ERROR(ReadValue(static_cast<ValueType>(type), 0, &kv.value));
      if (kv.key == "general.alignment") RETURN_IF_ERROR(ReadAlignment(kv.value, f));
    }
    return absl::OkStatus();
  }

  absl::Status ReadAlignment(const Value& v, File* f) {
    if (v.type != ValueType::UINT32) {
      return Error(absl::StrCat("general.alignment has type ", ValueTypeName(v.type),
                                "; it must be UINT32"));
    }
    if (v.u == 0 || !std::has_single_bit(v.u)) {
      return Error(absl::StrCat("general.alignment is ", v.u,
                                "; it must be a nonzero power of two"));
    }
    f->alignment_ = v.u;
    return absl::OkStatus();
  }

  absl::Status CountValues(uint64_t n) {
    if (n > kMaxMetadataValues - n_values_) {
      return Error(absl::StrCat("metadata would hold more than ", kMaxMetadataValues,
                                " values (", n_values_, " so far, ", n, " more); refusing"));
    }
    n_values_ += n;
    return absl::OkStatus();
  }

  // Reads one scalar of fixed-size type t at pos_ (caller checked the bytes are there).
  void ReadScalarUnchecked(ValueType t, Value* v) {
    v->type = t;
    const uint8_t* q = p_ + pos_;
    switch (t) {
      case ValueType::UINT8: case ValueType::BOOL: v->u = q[0]; pos_ += 1; break;
      case ValueType::INT8: v->u = static_cast<uint64_t>(int64_t{static_cast<int8_t>(q[0])});
        pos_ += 1; break;
      case ValueType::UINT16: { uint16_t x; std::memcpy(&x, q, 2); v->u = x; pos_ += 2; break; }
      case ValueType::INT16: { int16_t x; std::memcpy(&x, q, 2);
        v->u = static_cast<uint64_t>(int64_t{x}); pos_ += 2; break; }
      case ValueType::UINT32: { uint32_t x; std::memcpy(&x, q, 4); v->u = x; pos_ += 4; break; }
      case ValueType::INT32: { int32_t x; std::memcpy(&x, q, 4);
        v->u = static_cast<uint64_t>(int64_t{x}); pos_ += 4; break; }
      case ValueType::UINT64: case ValueType::INT64: std::memcpy(&v->u, q, 8); pos_ += 8; break;
      case ValueType::FLOAT32: { uint32_t x; std::memcpy(&x, q, 4); v->u = x;
        v->f = std::bit_cast<float>(x); pos_ += 4; break; }
      case ValueType::FLOAT64: std::memcpy(&v->u, q, 8); v->f = std::bit_cast<double>(v->u);
        pos_ += 8; break;
      default: break;
    }
    if (t != ValueType::FLOAT32 && t != ValueType::FLOAT64) v->f = v->AsFloat();
  }

  absl::Status ReadValue(ValueType t, uint32_t depth, Value* v) {
    v->type = t;
    if (const uint64_t n = ScalarBytes(t); n != 0) {
      if (n > size_ - pos_) return PastEnd(absl::StrCat(ValueTypeName(t), " value"), n);
      ReadScalarUnchecked(t, v);
      return absl::OkStatus();
    }
    if (t == ValueType::STRING) return ReadString("string", &v->str);
    return ReadArray(depth + 1, v);
  }

  absl::Status ReadArray(uint32_t depth, Value* v) {
    if (depth > kMaxArrayDepth) {
      return Error(absl::StrCat("arrays nested more than ", kMaxArrayDepth,
                                " deep (at offset ", pos_, ")"));
    }
    uint32_t elem = 0;
    const uint64_t elem_at = pos_;
    RETURN_IF_ERROR(Read("array element type", &elem));
    if (!ValidType(elem)) {
      return Error(absl::StrCat("array element type id ", elem, " (at offset ", elem_at,
                                ") is not a GGUF type (0..12)"));
    }
    v->elem_type = static_cast<ValueType>(elem);
    uint64_t count = 0;
    const uint64_t count_at = pos_;
    RETURN_IF_ERROR(Read("array count", &count));
    const uint64_t min_item = MinItemBytes(v->elem_type);
    const uint64_t left = size_ - pos_;
    if (count > left / min_item) {
      return Error(absl::StrCat("array count ", count, " (at offset ", count_at, ") of ",
                                ValueTypeName(v->elem_type), " needs at least ", min_item,
                                " bytes per item but only ", left,
                                " bytes remain before end of file (size ", size_, ")"));
    }
    RETURN_IF_ERROR(CountValues(count));
    v->arr.resize(count);
    if (ScalarBytes(v->elem_type) != 0) {
      // Fixed-size items: count * size <= left was checked above.
      for (Value& item : v->arr) ReadScalarUnchecked(v->elem_type, &item);
      return absl::OkStatus();
    }
    path_.emplace_back(0, 0);
    for (uint64_t i = 0; i < count; ++i) {
      path_.back() = {i, pos_};
      RETURN_IF_ERROR(ReadValue(v->elem_type, depth, &v->arr[i]));
    }
    path_.pop_back();
    return absl::OkStatus();
  }

  absl::Status ReadTensorInfos(File* f) {
    section_ = Section::kTensor;
    f->tensors_.resize(n_tensors_);
    f->tensor_index_.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      index_ = i;
      item_offset_ = pos_;
      name_ = nullptr;
      TensorInfo& t = f->tensors_[i];
      t.info_offset = pos_;
      RETURN_IF_ERROR(ReadString("name", &t.name));
      name_ = &t.name;
      if (!f->tensor_index_.emplace(t.name, i).second) {
        const TensorInfo& first = f->tensors_[f->tensor_index_.at(t.name)];
        return Error(absl::StrCat("duplicate tensor name (first defined by the info at offset ",
                                  first.info_offset, ")"));
      }
      uint32_t n_dims = 0;
      const uint64_t n_dims_at = pos_;
      RETURN_IF_ERROR(Read("n_dims", &n_dims));
      if (n_dims > kMaxDims) {
        return Error(absl::StrCat("n_dims is ", n_dims, " (at offset ", n_dims_at,
                                  "), more than ", kMaxDims));
      }
      t.shape.resize(n_dims);
      if (uint64_t{8} * n_dims > size_ - pos_) {
        pos_ += (size_ - pos_) / 8 * 8;
        return PastEnd(absl::StrCat("dimension ", (pos_ - n_dims_at - 4) / 8), 8);
      }
      if (n_dims > 0) std::memcpy(t.shape.data(), p_ + pos_, uint64_t{8} * n_dims);  // u64 as i64
      pos_ += uint64_t{8} * n_dims;
      uint32_t type = 0;
      const uint64_t type_at = pos_;
      RETURN_IF_ERROR(Read("type", &type));
      quant::TypeTraits tr;
      if (!quant::LookupType(type, &tr)) {
        return Error(absl::StrCat("unknown tensor type id ", type, " (at offset ", type_at, ")"));
      }
      t.type = static_cast<quant::Type>(type);
      RETURN_IF_ERROR(Read("data offset", &t.offset));
      auto bytes = TensorBytes(t.shape, t.type);
      if (!bytes.ok()) return Error(std::string(bytes.status().message()));
      t.n_bytes = *bytes;
      t.n_elements = 1;
      for (int64_t ne : t.shape) t.n_elements *= static_cast<uint64_t>(ne);
    }
    f->infos_end_ = pos_;
    // infos_end_ <= size_ < 2^64 and alignment <= 2^31, so rounding up cannot overflow unless
    // the file is within 2 GiB of 2^64 bytes; checked anyway.
    const uint64_t a = f->alignment_;
    if (pos_ > UINT64_MAX - (a - 1)) return Error("data section offset overflows");
    f->data_offset_ = (pos_ + a - 1) / a * a;
    return absl::OkStatus();
  }

  absl::Status CheckTensorData(File* f) {
    section_ = Section::kTensor;
    const uint64_t a = f->alignment_;
    if (!f->tensors_.empty() && f->data_offset_ > size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data section starts at offset ", f->data_offset_, " (tensor infos end at ",
          f->infos_end_, ", padded to alignment ", a, "), past end of file (size ", size_, ")"));
    }
    const uint64_t data_size = f->tensors_.empty() ? 0 : size_ - f->data_offset_;
    for (uint64_t i = 0; i < f->tensors_.size(); ++i) {
      const TensorInfo& t = f->tensors_[i];
      index_ = i;
      item_offset_ = t.info_offset;
      name_ = &t.name;
      if (t.offset % a != 0) {
        return Error(absl::StrCat("data offset ", t.offset, " is not a multiple of the alignment ",
                                  a));
      }
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        return Error(absl::StrCat("data (", t.n_bytes, " bytes at data offset ", t.offset,
                                  ", file offset ", f->data_offset_, " + ", t.offset,
                                  ") runs past end of file (size ", size_, ")"));
      }
    }
    // Overlap: sort by start; each tensor must end at or before the next one starts.
    std::vector<std::pair<uint64_t, uint64_t>> order(f->tensors_.size());  // (offset, index)
    for (uint64_t i = 0; i < order.size(); ++i) order[i] = {f->tensors_[i].offset, i};
    std::sort(order.begin(), order.end());
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = f->tensors_[order[k - 1].second];
      const TensorInfo& cur = f->tensors_[order[k].second];
      if (prev.offset + prev.n_bytes > cur.offset) {
        index_ = order[k].second;
        item_offset_ = cur.info_offset;
        name_ = &cur.name;
        return Error(absl::StrCat("data [", cur.offset, ", ", cur.offset + cur.n_bytes,
                                  ") overlaps tensor \"", Printable(prev.name), "\" data [",
                                  prev.offset, ", ", prev.offset + prev.n_bytes,
                                  ") (data-section offsets)"));
      }
    }
    return absl::OkStatus();
  }

  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_values_ = 0;  // metadata values so far, against kMaxMetadataValues
  // Error context: what is being read.
  Section section_ = Section::kHeader;
  uint64_t index_ = 0;
  uint64_t item_offset_ = 0;
  const std::string* key_ = nullptr;
  const std::string* name_ = nullptr;
  std::vector<std::pair<uint64_t, uint64_t>> path_;  // (array item, its offset) per nesting level

 public:
  static absl::StatusOr<File> Parse(std::shared_ptr<File::Mapping> mapping, const uint8_t* base,
                                    uint64_t size) {
    File f;
    f.mapping_ = std::move(mapping);
    f.base_ = base;
    f.size_ = size;
    Parser parser(base, size);
    RETURN_IF_ERROR(parser.Run(&f));
    return f;
  }
};

absl::StatusOr<File> File::FromBytes(std::string_view bytes) {
  auto m = std::make_shared<Mapping>();
  if (!bytes.empty()) {
    m->heap = static_cast<uint8_t*>(operator new[](bytes.size(), std::align_val_t{64}));
    std::memcpy(m->heap, bytes.data(), bytes.size());
  }
  const uint8_t* base = m->heap;
  return Parser::Parse(std::move(m), base, bytes.size());
}

absl::StatusOr<File> File::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  auto m = std::make_shared<Mapping>();
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot mmap ", path, ": ", std::strerror(e)));
    }
    m->map = p;
    m->map_size = size;
  }
  ::close(fd);
  const uint8_t* base = static_cast<const uint8_t*>(m->map);
  auto f = Parser::Parse(std::move(m), base, size);
  if (!f.ok()) {
    return absl::Status(f.status().code(), absl::StrCat(path, ": ", f.status().message()));
  }
  return f;
}

const Value* File::Find(std::string_view key) const {
  auto it = key_index_.find(AV(key));
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const TensorInfo* File::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(AV(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace lockstep::gguf
