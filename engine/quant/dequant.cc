// Host Dequantize: validates the row, then decodes block by block with the shared scalar
// decoders (decode.h), which the CUDA kernel uses too.
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/quant/decode.h"
#include "engine/quant/quant.h"

namespace lockstep::quant {
namespace {

// Decodes n_blocks blocks of Block type. Each block is copied into an aligned local first:
// rows inside a mapped GGUF file carry no alignment promise beyond one byte.
template <typename Block, void (*Decode)(const Block*, float*)>
void DecodeRow(const void* src, int64_t n_blocks, int block_size, float* dst) {
  const unsigned char* p = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n_blocks; ++i) {
    Block b;
    memcpy(&b, p + i * (int64_t)sizeof(Block), sizeof(Block));
    Decode(&b, dst + i * block_size);
  }
}

}  // namespace

absl::Status Dequantize(Type type, const void* src, int64_t n, float* dst) {
  TypeTraits t;
  if (!LookupType(static_cast<uint32_t>(type), &t)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Dequantize: unknown ggml type id %u", static_cast<uint32_t>(type)));
  }
  if (!t.lockstep_codec) {
    return absl::UnimplementedError(absl::StrFormat(
        "Dequantize: type %s (id %u) has no lockstep codec", t.name, static_cast<uint32_t>(type)));
  }
  if (n < 0 || n % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Dequantize %s: n = %d elements is not a non-negative multiple of the block size %u",
        t.name, n, t.block_size));
  }
  if (n > 0 && (src == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Dequantize %s: null src or dst for n = %d", t.name, n));
  }
  const int64_t nb = n / t.block_size;
  switch (type) {
    case Type::F32: memcpy(dst, src, (size_t)n * 4); break;
    case Type::F16: {
      const unsigned char* p = static_cast<const unsigned char*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = Fp16ToFp32(h);
      }
      break;
    }
    case Type::BF16: {
      const unsigned char* p = static_cast<const unsigned char*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = Bf16ToFp32(h);
      }
      break;
    }
#define LOCKSTEP_ROW_CASE(T)                                                     \
  case Type::T:                                                                  \
    DecodeRow<Block##T, DecodeBlock##T>(src, nb, (int)t.block_size, dst); \
    break;
    LOCKSTEP_ROW_CASE(Q4_0)
    LOCKSTEP_ROW_CASE(Q4_1)
    LOCKSTEP_ROW_CASE(Q5_0)
    LOCKSTEP_ROW_CASE(Q5_1)
    LOCKSTEP_ROW_CASE(Q8_0)
    LOCKSTEP_ROW_CASE(Q8_1)
    LOCKSTEP_ROW_CASE(Q2_K)
    LOCKSTEP_ROW_CASE(Q3_K)
    LOCKSTEP_ROW_CASE(Q4_K)
    LOCKSTEP_ROW_CASE(Q5_K)
    LOCKSTEP_ROW_CASE(Q6_K)
    LOCKSTEP_ROW_CASE(Q8_K)
    LOCKSTEP_ROW_CASE(IQ4_NL)
    LOCKSTEP_ROW_CASE(IQ4_XS)
    LOCKSTEP_ROW_CASE(MXFP4)
    LOCKSTEP_ROW_CASE(NVFP4)
#undef LOCKSTEP_ROW_CASE
    default:
      // lockstep_codec is set in types.h for a type this switch lacks: a table/code mismatch.
      return absl::InternalError(absl::StrFormat(
          "Dequantize: type %s (id %u) is marked lockstep_codec but has no decoder", t.name,
          static_cast<uint32_t>(type)));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::quant
