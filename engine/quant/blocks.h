// Block layouts of ggml's quant formats, byte for byte as they sit in a GGUF file.
// Host and device; f16 fields are raw uint16_t bits (see fp.h).
#pragma once

#include <cstdint>

#include "engine/quant/types.h"

namespace lockstep::quant {

inline constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
inline constexpr int QK_K = 256, K_SCALE_SIZE = 12, QK4_NL = 32, QK_MXFP4 = 32;
inline constexpr int QK_NVFP4 = 64, QK_NVFP4_SUB = 16;

struct BlockQ4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[QK4_1 / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[QK8_0]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[QK8_1]; };  // s = d * sum(qs)
struct BlockQ2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[QK4_NL / 2]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
struct BlockMXFP4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };
struct BlockNVFP4 { uint8_t d[QK_NVFP4 / QK_NVFP4_SUB]; uint8_t qs[QK_NVFP4 / 2]; };

// The layouts must match the type table exactly; a mismatch would misread every file.
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == Traits(Type::Q2_K).type_size);
static_assert(sizeof(BlockQ3_K) == Traits(Type::Q3_K).type_size);
static_assert(sizeof(BlockQ4_K) == Traits(Type::Q4_K).type_size);
static_assert(sizeof(BlockQ5_K) == Traits(Type::Q5_K).type_size);
static_assert(sizeof(BlockQ6_K) == Traits(Type::Q6_K).type_size);
static_assert(sizeof(BlockQ8_K) == Traits(Type::Q8_K).type_size);
static_assert(sizeof(BlockIQ4_NL) == Traits(Type::IQ4_NL).type_size);
static_assert(sizeof(BlockIQ4_XS) == Traits(Type::IQ4_XS).type_size);
static_assert(sizeof(BlockMXFP4) == Traits(Type::MXFP4).type_size);
static_assert(sizeof(BlockNVFP4) == Traits(Type::NVFP4).type_size);

// Non-linear 4-bit code books.
inline constexpr int8_t kValuesIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1, 13, 25, 38, 53, 69, 89, 113};
// E2M1 values doubled, as ggml stores MXFP4 and NVFP4 (scales carry the matching 1/2).
inline constexpr int8_t kValuesMXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The code books as two uint64 each (byte k = entry k, little end first), so that device code,
// which may not index a host constexpr array at run time, looks them up in registers.
constexpr uint64_t PackInt8x8(const int8_t* v) {
  uint64_t r = 0;
  for (int k = 7; k >= 0; --k) r = (r << 8) | (uint8_t)v[k];
  return r;
}
inline constexpr uint64_t kValuesIQ4NLLo = PackInt8x8(kValuesIQ4NL), kValuesIQ4NLHi = PackInt8x8(kValuesIQ4NL + 8);
inline constexpr uint64_t kValuesMXFP4Lo = PackInt8x8(kValuesMXFP4), kValuesMXFP4Hi = PackInt8x8(kValuesMXFP4 + 8);

// i: a 4-bit code, 0..15.
LOCKSTEP_HD inline int LookupIQ4NL(int i) {
  return (int8_t)(uint8_t)(((i < 8) ? kValuesIQ4NLLo : kValuesIQ4NLHi) >> (8 * (i & 7)));
}
LOCKSTEP_HD inline int LookupMXFP4(int i) {
  return (int8_t)(uint8_t)(((i < 8) ? kValuesMXFP4Lo : kValuesMXFP4Hi) >> (8 * (i & 7)));
}

}  // namespace lockstep::quant
