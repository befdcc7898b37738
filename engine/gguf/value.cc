// Metadata values: constructors and conversions, plus the shared tensor-size rule.
#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/gguf/gguf.h"

namespace lockstep::gguf {

const char* ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "INVALID";
}

Value Value::String(std::string s) {
  Value v;
  v.type = ValueType::STRING;
  v.str = std::move(s);
  return v;
}

Value Value::Int(ValueType type, int64_t x) {
  Value v;
  v.type = type;
  const uint64_t bits = static_cast<uint64_t>(x);
  switch (type) {
    case ValueType::UINT8: v.u = bits & 0xff; break;
    case ValueType::UINT16: v.u = bits & 0xffff; break;
    case ValueType::UINT32: v.u = bits & 0xffffffff; break;
    case ValueType::INT8: v.u = static_cast<uint64_t>(int64_t{static_cast<int8_t>(x)}); break;
    case ValueType::INT16: v.u = static_cast<uint64_t>(int64_t{static_cast<int16_t>(x)}); break;
    case ValueType::INT32: v.u = static_cast<uint64_t>(int64_t{static_cast<int32_t>(x)}); break;
    case ValueType::BOOL: v.u = bits & 0xff; break;
    default: v.u = bits; break;
  }
  v.f = v.AsFloat();
  return v;
}

Value Value::U32(uint32_t x) { return Int(ValueType::UINT32, x); }
Value Value::I32(int32_t x) { return Int(ValueType::INT32, x); }
Value Value::U64(uint64_t x) { return Int(ValueType::UINT64, static_cast<int64_t>(x)); }
Value Value::I64(int64_t x) { return Int(ValueType::INT64, x); }
Value Value::Bool(bool x) { return Int(ValueType::BOOL, x ? 1 : 0); }

Value Value::F32(float x) {
  Value v;
  v.type = ValueType::FLOAT32;
  v.f = x;
  v.u = std::bit_cast<uint32_t>(x);
  return v;
}

Value Value::F64(double x) {
  Value v;
  v.type = ValueType::FLOAT64;
  v.f = x;
  v.u = std::bit_cast<uint64_t>(x);
  return v;
}

Value Value::Array(ValueType elem, std::vector<Value> items) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.arr = std::move(items);
  return v;
}

bool Value::IsInteger() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
    case ValueType::BOOL:
      return true;
    default:
      return false;
  }
}

int64_t Value::AsInt() const {
  if (IsInteger()) return static_cast<int64_t>(u);
  if (type == ValueType::FLOAT32 || type == ValueType::FLOAT64) {
    // Saturate: a float outside int64 (or NaN) has no integer meaning; callers check ranges.
    if (!(f == f)) return 0;
    if (f >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
    if (f <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(f);
  }
  return 0;
}

double Value::AsFloat() const {
  switch (type) {
    case ValueType::FLOAT32: case ValueType::FLOAT64: return f;
    case ValueType::UINT64: case ValueType::BOOL: return static_cast<double>(u);
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32:
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return static_cast<double>(static_cast<int64_t>(u));
    default: return 0;
  }
}

absl::StatusOr<uint64_t> TensorBytes(const std::vector<int64_t>& shape, quant::Type type) {
  quant::TypeTraits tr;
  if (!quant::LookupType(static_cast<uint32_t>(type), &tr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tensor type id ", static_cast<uint32_t>(type)));
  }
  if (shape.size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_dims is ", shape.size(), ", more than ", kMaxDims));
  }
  uint64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", d, " is ", shape[d], shape[d] < 0 ? " (negative)" : "",
          "; dimensions must be at least 1"));
    }
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(shape[d]), &n) ||
        n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(shape, ", "), "] has more than 2^63-1 elements"));
    }
  }
  const int64_t ne0 = shape.empty() ? 1 : shape[0];
  if (ne0 % tr.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("dimension 0 (", ne0,
                                                   ") is not a multiple of the ", tr.name,
                                                   " block size ", tr.block_size));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n / tr.block_size, uint64_t{tr.type_size}, &bytes) ||
      bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape [", absl::StrJoin(shape, ", "), "] of ", tr.name, " needs more than 2^63-1 bytes"));
  }
  return bytes;
}

}  // namespace lockstep::gguf
