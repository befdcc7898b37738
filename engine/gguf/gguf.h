// GGUF v2/v3 reader and writer. The reader maps the file and validates every count, length,
// shape product, offset and size against the file size (and for overflow) before use; every
// error is an absl::Status whose message names the field and the byte offset.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/quant/types.h"

namespace lockstep::gguf {

// GGUF metadata value types (gguf_type).
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* ValueTypeName(ValueType t);

// One metadata value. Scalars keep their declared type (so a round trip writes the same bytes);
// integers live in `u` (bit pattern, sign-extended for signed types), floats in `f`.
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t u = 0;
  double f = 0;
  std::string str;
  ValueType elem_type = ValueType::UINT8;  // for ARRAY
  std::vector<Value> arr;                  // for ARRAY (may nest)

  static Value String(std::string s);
  static Value U32(uint32_t v);
  static Value I32(int32_t v);
  static Value U64(uint64_t v);
  static Value F32(float v);
  static Value Bool(bool v);
  static Value Array(ValueType elem, std::vector<Value> items);

  int64_t AsInt() const;   // any integer type
  double AsFloat() const;  // any numeric type
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous (fastest) dimension
  quant::Type type = quant::Type::F32;
  uint64_t offset = 0;      // relative to the data section, as stored
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;     // n_elements / block_size * type_size
  uint64_t info_offset = 0; // byte offset of this tensor's info record in the file (for errors)
};

class File {
 public:
  // Maps `path` read-only and parses it.
  static absl::StatusOr<File> Open(const std::string& path);
  // Parses bytes held in memory (copied); used by tests and the fuzzer.
  static absl::StatusOr<File> FromBytes(std::string_view bytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
  uint64_t file_size() const { return size_; }
  const std::vector<KeyValue>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* Find(std::string_view key) const;          // nullptr if absent
  const TensorInfo* FindTensor(std::string_view name) const;
  // The tensor's bytes inside the mapping ([n_bytes]); valid as long as the File lives.
  const uint8_t* TensorData(const TensorInfo& t) const { return base_ + data_offset_ + t.offset; }
  // The whole file's bytes.
  const uint8_t* bytes() const { return base_; }

 private:
  struct Mapping;
  std::shared_ptr<Mapping> mapping_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  friend absl::StatusOr<File> Parse(std::shared_ptr<Mapping>, const uint8_t*, uint64_t);
};

// What a writer needs for one tensor. `data` must hold exactly n_bytes for (shape, type).
struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  quant::Type type = quant::Type::F32;
  std::string_view data;
};

struct WriteOptions {
  uint32_t version = 3;
  // Taken from general.alignment in `metadata` when present there; otherwise this.
  uint64_t alignment = 32;
};

// Serializes a GGUF: header, metadata in the given order, tensor infos in the given order,
// data laid out in the given order, each tensor padded with zeros to the alignment.
absl::StatusOr<std::string> Serialize(const std::vector<KeyValue>& metadata,
                                      const std::vector<WriteTensor>& tensors,
                                      const WriteOptions& options = {});
absl::Status WriteFile(const std::string& path, const std::vector<KeyValue>& metadata,
                       const std::vector<WriteTensor>& tensors, const WriteOptions& options = {});
// Re-serializes a parsed file (reader -> writer). Byte-identical to the input for files laid
// out the way llama.cpp's and gguf-py's writers lay them out.
absl::StatusOr<std::string> Reserialize(const File& file);

}  // namespace lockstep::gguf
