// Scalar float formats used inside quant blocks: f16, bf16, E8M0 (MXFP4 scale), UE4M3 (NVFP4
// scale). Host and device; bit manipulation only, so results do not depend on the FPU mode.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/quant/types.h"

namespace lockstep::quant {

LOCKSTEP_HD inline uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
LOCKSTEP_HD inline float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 -> binary32, exact (every f16 is a f32), NaN payload kept in the high bits.
LOCKSTEP_HD inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      int e = -1;
      uint32_t m = man;
      do { m <<= 1; ++e; } while ((m & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((m & 0x3FFu) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (man << 13);
  }
  return BitsFloat(bits);
}

// binary32 -> binary16, round to nearest even, as numpy's astype(float16) does it (the quant
// oracle; verified over all 2^32 inputs). NaN keeps its sign and the top 10 payload bits and is
// NOT quieted (numpy's npy_floatbits_to_halfbits); a payload that would vanish becomes 1 so the
// result stays NaN. ggml's F16C path would quiet it (0x7E00 | payload): the two differ only on
// signalling NaNs. Overflow (>= 65520 after rounding) goes to +-Inf.
LOCKSTEP_HD inline uint16_t Fp32ToFp16(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx > 0x7F800000u) {  // NaN
    uint32_t h = 0x7C00u + ((absx & 0x7FFFFFu) >> 13);
    if (h == 0x7C00u) ++h;
    return (uint16_t)(sign | h);
  }
  if (absx >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // rounds to >= 65520: Inf
  if (absx < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    if (absx <= 0x33000000u) return (uint16_t)sign;  // <= 2^-25: rounds to zero (tie to even 0)
    const uint32_t e = absx >> 23;                      // 102..112
    const uint32_t m = (absx & 0x7FFFFFu) | 0x800000u;  // value = m * 2^(e-150)
    const uint32_t shift = 126 - e;                     // to units of 2^-24: 14..24 bits dropped
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // a carry to 0x400 is the smallest normal
    return (uint16_t)(sign | r);
  }
  uint32_t r = (absx >> 13) - ((127 - 15) << 10);  // rebias; the carry of rounding may bump exp
  const uint32_t rem = absx & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return (uint16_t)(sign | r);
}

LOCKSTEP_HD inline float Bf16ToFp32(uint16_t h) { return BitsFloat((uint32_t)h << 16); }

// binary32 -> bfloat16 as gguf-py and ggml do it: NaN forced quiet, else round to nearest even.
LOCKSTEP_HD inline uint16_t Fp32ToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 64);
  return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

// E8M0 (MXFP4 block scale) -> float, in ggml's "half" convention: ggml stores MXFP4 values
// doubled (kvalues 0,1,2,3,4,6,8,12), so the scale is 2^(e-128) rather than 2^(e-127).
LOCKSTEP_HD inline float E8M0ToFp32Half(uint8_t e) {
  const uint32_t bits = (e < 2) ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23);
  return BitsFloat(bits);
}

// UE4M3 (NVFP4 sub-block scale: unsigned, 4 exponent bits with bias 7, 3 mantissa bits) ->
// float, times 0.5 to match the doubled E2M1 values (gguf-py's NVFP4.ue4m3_to_fp32). Bit 7 is
// ignored except that 0x7F (E4M3's NaN) decodes to 0; every result is exact in binary32.
LOCKSTEP_HD inline float Ue4m3ToFp32Half(uint8_t x) {
  if (x == 0x7F) return 0.0f;
  const uint32_t e = (x >> 3) & 0xFu, m = x & 0x7u;
  if (e == 0) return BitsFloat(m == 0 ? 0u : FloatBits((float)m) - (10u << 23));  // m * 2^-10
  return BitsFloat(((e - 8u + 127u) << 23) | (m << 20));  // (1 + m/8) * 2^(e-7) * 0.5
}

// Binary32 products and sums rounded one at a time, never fused into an FMA: the quant oracle
// (numpy) rounds after every operation, and a contracted a*b+c would differ in the last bit.
// nvcc contracts by default; GCC contracts in C++ whenever the target has FMA (-march=x86-64-v3
// and up), so the host path pins the product in a register when __FMA__ is defined.
LOCKSTEP_HD inline float RoundedMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float p = a * b;
#if defined(__FMA__) || defined(__aarch64__)
#if defined(__x86_64__)
  __asm__("" : "+x"(p));
#elif defined(__aarch64__)
  __asm__("" : "+w"(p));
#else
  volatile float v = p;
  p = v;
#endif
#endif
  return p;
#endif
}
LOCKSTEP_HD inline float RoundedAdd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LOCKSTEP_HD inline float RoundedSub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

}  // namespace lockstep::quant
