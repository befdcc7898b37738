// Formats of the paged KV cache (docs/runtime.md): one cached token of one layer is a "KV row"
// of kv_dim = n_kv_head * head_dim elements, stored as whole blocks of the format. K and V pick
// their formats independently. Host and device code: no engine types, no allocation.
//
// Layout of one layer's K (or V) storage in a pool of n_blocks blocks of block_size tokens:
//   [n_blocks, block_size, RowBytes(fmt, kv_dim)] bytes; the row of slot s = block * block_size
//   + offset starts at s * RowBytes(fmt, kv_dim).
// Quantized formats (q8_0, q5_1, q4_0) are ggml's blocks of 32 consecutive row elements
// (engine/quant/blocks.h), encoded by the quant layer's quantizers; fp8 e4m3 is one byte per
// element, no scale (OCP FP8 E4M3FN: max 448, saturating, round to nearest even).
#pragma once

#include <cstdint>

#include "engine/quant/fp.h"
#include "engine/quant/types.h"

namespace lockstep::quant {

enum class KvFormat : uint32_t { kF32 = 0, kF16, kBF16, kQ8_0, kQ5_1, kQ4_0, kFp8E4M3 };
inline constexpr int kKvFormatCount = 7;

// The ggml type whose blocks hold the format; F32 for fp8 (which has no ggml type: its bytes are
// handled by the E4M3 functions below).
LOCKSTEP_HD constexpr Type KvFormatBlockType(KvFormat f) {
  switch (f) {
    case KvFormat::kF16: return Type::F16;
    case KvFormat::kBF16: return Type::BF16;
    case KvFormat::kQ8_0: return Type::Q8_0;
    case KvFormat::kQ5_1: return Type::Q5_1;
    case KvFormat::kQ4_0: return Type::Q4_0;
    default: return Type::F32;
  }
}

LOCKSTEP_HD constexpr const char* KvFormatName(KvFormat f) {
  switch (f) {
    case KvFormat::kF32: return "f32";
    case KvFormat::kF16: return "f16";
    case KvFormat::kBF16: return "bf16";
    case KvFormat::kQ8_0: return "q8_0";
    case KvFormat::kQ5_1: return "q5_1";
    case KvFormat::kQ4_0: return "q4_0";
    case KvFormat::kFp8E4M3: return "fp8";
  }
  return "?";
}

// Elements per block of the format (1 for f32/f16/bf16/fp8, 32 for the ggml block formats);
// kv_dim must be a multiple of it.
LOCKSTEP_HD constexpr int64_t KvFormatBlockElems(KvFormat f) {
  return f == KvFormat::kFp8E4M3 ? 1 : Traits(KvFormatBlockType(f)).block_size;
}

// Bytes of one KV row of kv_dim elements (kv_dim a multiple of KvFormatBlockElems).
LOCKSTEP_HD constexpr int64_t KvRowBytes(KvFormat f, int64_t kv_dim) {
  if (f == KvFormat::kFp8E4M3) return kv_dim;
  const TypeTraits t = Traits(KvFormatBlockType(f));
  return kv_dim / t.block_size * t.type_size;
}

// E4M3FN byte -> float, exact. 0x7F / 0xFF are NaN.
LOCKSTEP_HD inline float E4m3ToFp32(uint8_t x) {
  const uint32_t sign = (uint32_t)(x & 0x80u) << 24;
  const uint32_t exp = (x >> 3) & 0xFu;
  const uint32_t man = x & 0x7u;
  if (exp == 0xF && man == 0x7) return BitsFloat(sign | 0x7FC00000u);
  if (exp == 0) {  // subnormal: man * 2^-9
    const float v = (float)man * 0.001953125f;
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((exp + 127 - 7) << 23) | (man << 20));
}

// float -> E4M3FN byte: round to nearest, ties to even; |x| beyond the largest finite value
// (448) saturates to +-448 (as cuda_fp8's __NV_SATFINITE does); NaN -> 0x7F (sign kept).
LOCKSTEP_HD inline uint8_t Fp32ToE4m3(float f) {
  const uint32_t x = FloatBits(f);
  const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx > 0x7F800000u) return (uint8_t)(sign | 0x7F);
  if (absx >= 0x43E00000u) return (uint8_t)(sign | 0x7E);  // >= 448 (and Inf): saturate
  const int32_t e = (int32_t)(absx >> 23) - 127;            // unbiased exponent
  if (e < -6) {
    // Subnormal range of E4M3 (or zero): units of 2^-9, rounded to nearest even.
    const float a = BitsFloat(absx) * 512.0f;  // exact: a power-of-two scale
    uint32_t q = (uint32_t)a;
    const float rem = a - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return (uint8_t)(sign | q);  // q == 8 carries into the smallest normal (exp 1, man 0)
  }
  // Normal: keep 3 mantissa bits, round the 20 dropped bits to nearest even.
  uint32_t man = absx & 0x7FFFFFu;
  uint32_t ebits = (uint32_t)(e + 7);
  uint32_t keep = man >> 20;
  const uint32_t dropped = man & 0xFFFFFu;
  if (dropped > 0x80000u || (dropped == 0x80000u && (keep & 1u))) ++keep;
  if (keep == 8) {
    keep = 0;
    ++ebits;
  }
  if (ebits > 15 || (ebits == 15 && keep == 7)) return (uint8_t)(sign | 0x7E);
  return (uint8_t)(sign | (ebits << 3) | keep);
}

}  // namespace lockstep::quant
