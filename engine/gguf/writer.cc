// GGUF writer: the layout of llama.cpp's gguf_write_to_buf and gguf-py's GGUFWriter (header,
// metadata, tensor infos, zero padding to the alignment, then each tensor's data padded with
// zeros to the alignment), so that reading and re-writing their files reproduces the bytes.
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/gguf/gguf.h"

namespace lockstep::gguf {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}

  template <typename T>
  void Put(T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    out_->append(b, sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_->append(s);
  }
  void PadTo(uint64_t alignment) {
    const uint64_t rem = out_->size() % alignment;
    if (rem != 0) out_->append(alignment - rem, '\0');
  }

  // `where` names the key for errors ("metadata key #3 'a.b'").
  absl::Status PutValue(const Value& v, uint32_t depth, const std::string& where) {
    switch (v.type) {
      case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL:
        Put(static_cast<uint8_t>(v.u)); return absl::OkStatus();
      case ValueType::UINT16: case ValueType::INT16:
        Put(static_cast<uint16_t>(v.u)); return absl::OkStatus();
      case ValueType::UINT32: case ValueType::INT32:
        Put(static_cast<uint32_t>(v.u)); return absl::OkStatus();
      case ValueType::UINT64: case ValueType::INT64:
        Put(v.u); return absl::OkStatus();
      case ValueType::FLOAT32: {
        const float x = static_cast<float>(v.f);
        uint32_t bits = std::bit_cast<uint32_t>(x);
        const uint32_t stored = static_cast<uint32_t>(v.u);
        if (std::isnan(x) && std::isnan(std::bit_cast<float>(stored))) bits = stored;
        Put(bits);
        return absl::OkStatus();
      }
      case ValueType::FLOAT64: {
        uint64_t bits = std::bit_cast<uint64_t>(v.f);
        if (std::isnan(v.f) && std::isnan(std::bit_cast<double>(v.u))) bits = v.u;
        Put(bits);
        return absl::OkStatus();
      }
      case ValueType::STRING:
        PutString(v.str);
        return absl::OkStatus();
      case ValueType::ARRAY: {
        if (depth + 1 > kMaxArrayDepth) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": arrays nested more than ", kMaxArrayDepth, " deep"));
        }
        if (static_cast<uint32_t>(v.elem_type) > static_cast<uint32_t>(ValueType::FLOAT64)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": array element type id ", static_cast<uint32_t>(v.elem_type),
              " is not a GGUF type (0..12)"));
        }
        Put(static_cast<uint32_t>(v.elem_type));
        Put<uint64_t>(v.arr.size());
        for (size_t i = 0; i < v.arr.size(); ++i) {
          if (v.arr[i].type != v.elem_type) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ": array item ", i, " has type ", ValueTypeName(v.arr[i].type),
                " but the array holds ", ValueTypeName(v.elem_type)));
          }
          RETURN_IF_ERROR(PutValue(v.arr[i], depth + 1, where));
        }
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": value type id ", static_cast<uint32_t>(v.type), " is not a GGUF type (0..12)"));
  }

 private:
  std::string* out_;
};

// The alignment the file will declare: general.alignment when present (must be a UINT32
// nonzero power of two), else options.alignment.
absl::StatusOr<uint64_t> ResolveAlignment(const std::vector<KeyValue>& metadata,
                                          const WriteOptions& options, bool* append_key) {
  *append_key = false;
  for (const KeyValue& kv : metadata) {
    if (kv.key != "general.alignment") continue;
    if (kv.value.type != ValueType::UINT32) {
      return absl::InvalidArgumentError(absl::StrCat("general.alignment has type ",
                                                     ValueTypeName(kv.value.type),
                                                     "; it must be UINT32"));
    }
    const uint64_t a = static_cast<uint32_t>(kv.value.u);
    if (a == 0 || !std::has_single_bit(a)) {
      return absl::InvalidArgumentError(
          absl::StrCat("general.alignment is ", a, "; it must be a nonzero power of two"));
    }
    return a;
  }
  const uint64_t a = options.alignment;
  if (a == 0 || !std::has_single_bit(a) || a > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "alignment ", a, " must be a nonzero power of two that fits in UINT32"));
  }
  *append_key = a != kDefaultAlignment;
  return a;
}

// Validates (as the reader would) and writes everything before the tensor data: header, metadata,
// tensor infos, padding to the alignment. With `check_data`, every tensor's `data` must hold its
// n_bytes. Fills `h->offsets` (relative to the data section), `h->alignment` and `*data_bytes`
// (the data section's size, padding included).
absl::Status WriteHeader(const std::vector<KeyValue>& metadata,
                         const std::vector<WriteTensor>& tensors, const WriteOptions& options,
                         bool check_data, SerializedHeader* h, uint64_t* data_bytes) {
  if (options.version != 2 && options.version != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF version ", options.version, " cannot be written (only 2 and 3)"));
  }
  bool append_alignment = false;
  ASSIGN_OR_RETURN(const uint64_t alignment,
                   ResolveAlignment(metadata, options, &append_alignment));
  if (metadata.size() + (append_alignment ? 1 : 0) > kMaxKeys) {
    return absl::InvalidArgumentError(
        absl::StrCat(metadata.size(), " metadata keys exceed the limit ", kMaxKeys));
  }
  if (tensors.size() > kMaxTensors) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensors.size(), " tensors exceed the limit ", kMaxTensors));
  }

  // Sizes first: data offsets, and the total to reserve.
  std::vector<uint64_t>& offsets = h->offsets;
  offsets.assign(tensors.size(), 0);
  *data_bytes = 0;
  absl::flat_hash_set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const WriteTensor& t = tensors[i];
    auto bytes = TensorBytes(t.shape, t.type);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", i, " \"", t.name, "\": ", bytes.status().message()));
    }
    if (check_data && t.data.size() != *bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor #", i, " \"", t.name, "\": data is ",
                                                     t.data.size(), " bytes, shape and type need ",
                                                     *bytes));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", i, " \"", t.name, "\": duplicate tensor name"));
    }
    offsets[i] = *data_bytes;
    const uint64_t padded = (*bytes + alignment - 1) / alignment * alignment;
    if (__builtin_add_overflow(*data_bytes, padded, data_bytes)) {
      return absl::InvalidArgumentError("total tensor data overflows 64 bits");
    }
  }
  absl::flat_hash_set<std::string_view> keys;
  for (size_t i = 0; i < metadata.size(); ++i) {
    if (!keys.insert(metadata[i].key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key #", i, " '", metadata[i].key, "': duplicate key"));
    }
  }

  std::string& out = h->bytes;
  out.clear();
  Writer w(&out);
  out.append(kMagic, 4);
  w.Put<uint32_t>(options.version);
  w.Put<uint64_t>(tensors.size());
  w.Put<uint64_t>(metadata.size() + (append_alignment ? 1 : 0));
  for (size_t i = 0; i < metadata.size(); ++i) {
    const KeyValue& kv = metadata[i];
    w.PutString(kv.key);
    w.Put(static_cast<uint32_t>(kv.value.type));
    RETURN_IF_ERROR(w.PutValue(kv.value, 0, absl::StrCat("metadata key #", i, " '", kv.key, "'")));
  }
  if (append_alignment) {
    w.PutString("general.alignment");
    w.Put(static_cast<uint32_t>(ValueType::UINT32));
    w.Put(static_cast<uint32_t>(alignment));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const WriteTensor& t = tensors[i];
    w.PutString(t.name);
    w.Put(static_cast<uint32_t>(t.shape.size()));
    for (int64_t ne : t.shape) w.Put(static_cast<uint64_t>(ne));
    w.Put(static_cast<uint32_t>(t.type));
    w.Put(offsets[i]);
  }
  if (!tensors.empty() || options.pad_empty_data) w.PadTo(alignment);
  h->alignment = alignment;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> Serialize(const std::vector<KeyValue>& metadata,
                                      const std::vector<WriteTensor>& tensors,
                                      const WriteOptions& options) {
  SerializedHeader h;
  uint64_t data_bytes = 0;
  RETURN_IF_ERROR(WriteHeader(metadata, tensors, options, /*check_data=*/true, &h, &data_bytes));
  std::string out = std::move(h.bytes);
  Writer w(&out);
  out.reserve(out.size() + data_bytes);
  for (const WriteTensor& t : tensors) {
    out.append(t.data);
    w.PadTo(h.alignment);
  }
  return out;
}

absl::StatusOr<SerializedHeader> SerializeHeader(const std::vector<KeyValue>& metadata,
                                                 const std::vector<WriteTensor>& tensors,
                                                 const WriteOptions& options) {
  SerializedHeader h;
  uint64_t data_bytes = 0;
  RETURN_IF_ERROR(WriteHeader(metadata, tensors, options, /*check_data=*/false, &h, &data_bytes));
  return h;
}

absl::Status WriteFile(const std::string& path, const std::vector<KeyValue>& metadata,
                       const std::vector<WriteTensor>& tensors, const WriteOptions& options) {
  ASSIGN_OR_RETURN(const std::string bytes, Serialize(metadata, tensors, options));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  const size_t wrote = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (wrote != bytes.size() || !closed) {
    return absl::InternalError(absl::StrCat("cannot write ", path, " (", wrote, " of ",
                                            bytes.size(), " bytes): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Reserialize(const File& file) {
  std::vector<WriteTensor> tensors;
  tensors.reserve(file.tensors().size());
  for (const TensorInfo& t : file.tensors()) {
    tensors.push_back(WriteTensor{
        t.name, t.shape, t.type,
        std::string_view(reinterpret_cast<const char*>(file.TensorData(t)), t.n_bytes)});
  }
  WriteOptions options;
  options.version = file.version();
  options.alignment = file.alignment();
  // Vocab-only files (header + metadata, written without the data padding) stay that way.
  options.pad_empty_data = file.file_size() >= file.data_offset();
  return Serialize(file.metadata(), tensors, options);
}

}  // namespace lockstep::gguf
