// GGUF v2/v3 reader and writer. The reader maps the file and validates every count, length,
// shape product, offset and size against the file size (and for overflow) before use; every
// error is an absl::Status whose message names the field and the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/quant/types.h"

namespace lockstep::gguf {

// GGUF metadata value types (gguf_type).
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* ValueTypeName(ValueType t);

// Limits the reader enforces (the writer enforces the same, so what it writes reads back).
inline constexpr uint32_t kMaxDims = 4;
// Arrays may nest; deeper nesting is rejected so that parsing never exhausts the stack.
inline constexpr uint32_t kMaxArrayDepth = 8;
// Every metadata Value costs ~88 bytes of memory while a u8 array item costs 1 byte of file, so
// the total number of values (all keys, all nesting levels) is capped: a 1 GiB file may not
// ask for ~90 GiB, and parsing stays well under 1 s (4M values: ~0.35 s on one core). The
// largest real vocabularies need ~1.5M (262144 tokens x 3 arrays, plus merges).
inline constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 22;
// Real models have ~50 metadata keys and at most a few thousand tensors; each key or tensor
// name costs a hash-map insert, so these bound the parse time (2^19 infos: ~0.4 s).
inline constexpr uint64_t kMaxKeys = uint64_t{1} << 16;
inline constexpr uint64_t kMaxTensors = uint64_t{1} << 19;
inline constexpr uint64_t kDefaultAlignment = 32;

// One metadata value. Scalars keep their declared type (so a round trip writes the same bytes);
// integers live in `u` (bit pattern, sign-extended for signed types; BOOL keeps the stored byte),
// floats in `f`, and for FLOAT32/FLOAT64 `u` also holds the stored bit pattern so that a NaN's
// payload survives a round trip (the writer uses `u` only when both it and `f` are NaN).
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
  static Value I64(int64_t v);
  static Value F32(float v);
  static Value F64(double v);
  // Any integer type (UINT8..INT64, BOOL); `v` is truncated to the type's width.
  static Value Int(ValueType type, int64_t v);
  static Value Bool(bool v);
  static Value Array(ValueType elem, std::vector<Value> items);

  int64_t AsInt() const;   // any integer type
  double AsFloat() const;  // any numeric type
  bool IsInteger() const;  // UINT8..INT64 or BOOL
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
  // Absolute start of the data section: the end of the tensor infos rounded up to alignment().
  // A file without tensors may end before it (vocab-only files carry no padding).
  uint64_t data_offset() const { return data_offset_; }
  // Where the tensor infos end (before the padding to the data section).
  uint64_t infos_end() const { return infos_end_; }
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
  uint64_t infos_end_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> key_index_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
  friend class Parser;
};

// What a writer needs for one tensor. `data` must hold exactly n_bytes for (shape, type).
struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  quant::Type type = quant::Type::F32;
  std::string_view data;
};

struct WriteOptions {
  uint32_t version = 3;  // 2 or 3 (identical layouts for little-endian files)
  // Taken from general.alignment in `metadata` when present there; otherwise this, and when it
  // is not the default 32 a general.alignment (UINT32) key is appended so readers find the data.
  uint64_t alignment = kDefaultAlignment;
  // With no tensors, whether to pad the (empty) data section start to the alignment, as
  // llama.cpp and gguf-py do; vocab-only files written header+metadata only carry no padding.
  bool pad_empty_data = true;
};

// Serializes a GGUF: header, metadata in the given order, tensor infos in the given order,
// data laid out in the given order, each tensor padded with zeros to the alignment (the last
// one too), as llama.cpp's gguf_write_to_buf and gguf-py's GGUFWriter do. Validates what the
// reader validates (types, shapes, duplicate names, nesting, alignment) and that every `data`
// holds n_bytes.
absl::StatusOr<std::string> Serialize(const std::vector<KeyValue>& metadata,
                                      const std::vector<WriteTensor>& tensors,
                                      const WriteOptions& options = {});
absl::Status WriteFile(const std::string& path, const std::vector<KeyValue>& metadata,
                       const std::vector<WriteTensor>& tensors, const WriteOptions& options = {});
// What Serialize writes before the tensor data, for writers that stream the data themselves
// (engine/models/synth.cc): the same validation except that each tensor's `data` is not read.
// The file is `bytes`, then for each tensor in order its n_bytes of data padded with zeros to
// `alignment` (the last one too); offsets[i] is tensor i's offset in that data section.
struct SerializedHeader {
  std::string bytes;
  std::vector<uint64_t> offsets;
  uint64_t alignment = kDefaultAlignment;
};
absl::StatusOr<SerializedHeader> SerializeHeader(const std::vector<KeyValue>& metadata,
                                                 const std::vector<WriteTensor>& tensors,
                                                 const WriteOptions& options = {});
// Re-serializes a parsed file (reader -> writer) through Serialize. Byte-identical to the input
// for files laid out the way llama.cpp's and gguf-py's writers lay them out. It is not
// byte-identical (but is a valid GGUF with the same metadata, tensor infos and tensor bytes)
// when the input has nonzero padding bytes, tensor data not in info order or with gaps,
// bytes after the last tensor's padding, or (without tensors) a partial padding tail.
absl::StatusOr<std::string> Reserialize(const File& file);

// Bytes per tensor of `type` with `shape` (ggml order), checking the rules the reader checks:
// 0..4 dims, each in [1, 2^63), element count < 2^63, shape[0] a multiple of the block size.
// On error the message names the failing rule (callers prefix which tensor).
absl::StatusOr<uint64_t> TensorBytes(const std::vector<int64_t>& shape, quant::Type type);

}  // namespace lockstep::gguf
