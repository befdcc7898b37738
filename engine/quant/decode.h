// Scalar decoding of one quant block to floats: the single definition shared by the host
// Dequantize (dequant.cc) and the CUDA dequant kernel (kernels/dequant.cu).
//
// Every decoder reproduces gguf-py's dequantize_blocks bit for bit: the same binary32 operations
// in the same order (e.g. Q2_K is (d*sc)*q - (dmin*m), two products rounded before the
// subtraction), each rounded on its own (RoundedMul/Add/Sub, never an FMA). NaN and Inf scales
// propagate as IEEE says; only NaN payloads may differ between host and device.
//
// Blocks must be naturally aligned (alignof the Block struct); dequant.cc copies unaligned input.
#pragma once

#include <cstdint>

#include "engine/quant/blocks.h"
#include "engine/quant/fp.h"
#include "engine/quant/types.h"

namespace lockstep::quant {

// out: [32]. value = d * (nibble - 8); element l < 16 is the low nibble of qs[l], l >= 16 the high
// nibble of qs[l - 16].
LOCKSTEP_HD inline void DecodeBlockQ4_0(const BlockQ4_0* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  for (int l = 0; l < QK4_0 / 2; ++l) {
    out[l] = RoundedMul(d, (float)((b->qs[l] & 0xF) - 8));
    out[l + QK4_0 / 2] = RoundedMul(d, (float)((b->qs[l] >> 4) - 8));
  }
}

// out: [32]. value = d * nibble + m.
LOCKSTEP_HD inline void DecodeBlockQ4_1(const BlockQ4_1* b, float* out) {
  const float d = Fp16ToFp32(b->d), m = Fp16ToFp32(b->m);
  for (int l = 0; l < QK4_1 / 2; ++l) {
    out[l] = RoundedAdd(RoundedMul(d, (float)(b->qs[l] & 0xF)), m);
    out[l + QK4_1 / 2] = RoundedAdd(RoundedMul(d, (float)(b->qs[l] >> 4)), m);
  }
}

// Bit j of the little-endian uint32 qh is the fifth bit of element j.
LOCKSTEP_HD inline uint32_t LoadQh(const uint8_t qh[4]) {
  return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

// out: [32]. value = d * (5-bit q - 16).
LOCKSTEP_HD inline void DecodeBlockQ5_0(const BlockQ5_0* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  const uint32_t qh = LoadQh(b->qh);
  for (int l = 0; l < QK5_0 / 2; ++l) {
    const int q0 = (b->qs[l] & 0xF) | (int)(((qh >> l) & 1u) << 4);
    const int q1 = (b->qs[l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
    out[l] = RoundedMul(d, (float)(q0 - 16));
    out[l + QK5_0 / 2] = RoundedMul(d, (float)(q1 - 16));
  }
}

// out: [32]. value = d * (5-bit q) + m.
LOCKSTEP_HD inline void DecodeBlockQ5_1(const BlockQ5_1* b, float* out) {
  const float d = Fp16ToFp32(b->d), m = Fp16ToFp32(b->m);
  const uint32_t qh = LoadQh(b->qh);
  for (int l = 0; l < QK5_1 / 2; ++l) {
    const int q0 = (b->qs[l] & 0xF) | (int)(((qh >> l) & 1u) << 4);
    const int q1 = (b->qs[l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
    out[l] = RoundedAdd(RoundedMul(d, (float)q0), m);
    out[l + QK5_1 / 2] = RoundedAdd(RoundedMul(d, (float)q1), m);
  }
}

// out: [32]. value = d * q.
LOCKSTEP_HD inline void DecodeBlockQ8_0(const BlockQ8_0* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  for (int l = 0; l < QK8_0; ++l) out[l] = RoundedMul((float)b->qs[l], d);
}

// out: [32]. value = d * q; s (= d * sum q, for dot products) does not enter the values.
LOCKSTEP_HD inline void DecodeBlockQ8_1(const BlockQ8_1* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  for (int l = 0; l < QK8_1; ++l) out[l] = RoundedMul(d, (float)b->qs[l]);
}

// out: [256]. 16 sub-blocks of 16; scales[i] = (min << 4) | scale, 4 bits each.
// value = (d * scale) * q - (dmin * min); q is 2 bits: element 128*j + 32*s + l is bits
// [2s, 2s+2) of qs[32*j + l].
LOCKSTEP_HD inline void DecodeBlockQ2_K(const BlockQ2_K* b, float* out) {
  const float d = Fp16ToFp32(b->d), dmin = Fp16ToFp32(b->dmin);
  for (int i = 0; i < QK_K; ++i) {
    const int sub = i / 16, j = i / 128, s = (i / 32) % 4, l = i % 32;
    const float dl = RoundedMul(d, (float)(b->scales[sub] & 0xF));
    const float ml = RoundedMul(dmin, (float)(b->scales[sub] >> 4));
    const int q = (b->qs[32 * j + l] >> (2 * s)) & 3;
    out[i] = RoundedSub(RoundedMul(dl, (float)q), ml);
  }
}

// Q3_K's 16 signed 6-bit scales: low 4 bits from scales[0..7] (low nibble for sub-blocks 0-7,
// high nibble for 8-15), high 2 bits from scales[8 + i%4] >> 2*(i/4); stored offset by 32.
LOCKSTEP_HD inline int ScaleQ3_K(const uint8_t* scales, int i) {
  const int lo = (scales[i % 8] >> (4 * (i / 8))) & 0xF;
  const int hi = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (int8_t)(uint8_t)(lo | (hi << 4)) - 32;
}

// out: [256]. value = (d * scale) * q with q = (2 low bits) - 4 * (1 - hmask bit), so q is in
// [-4, 3]; element 128*j + 32*s + l: low bits [2s, 2s+2) of qs[32*j + l], high bit
// (i / 32) of hmask[l].
LOCKSTEP_HD inline void DecodeBlockQ3_K(const BlockQ3_K* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  for (int i = 0; i < QK_K; ++i) {
    const int j = i / 128, s = (i / 32) % 4, l = i % 32;
    const float dl = RoundedMul(d, (float)ScaleQ3_K(b->scales, i / 16));
    const int low = (b->qs[32 * j + l] >> (2 * s)) & 3;
    const int high = (b->hmask[l] >> (i / 32)) & 1;
    out[i] = RoundedMul(dl, (float)(low - ((high ^ 1) << 2)));
  }
}

// Q4_K/Q5_K's 8 (scale, min) pairs of 6 bits packed in 12 bytes (ggml's get_scale_min_k4).
LOCKSTEP_HD inline void ScaleMinK4(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// out: [256]. 8 sub-blocks of 32; value = (d * sc) * q - (dmin * m); element 64*j + 32*s + l
// is nibble s of qs[32*j + l].
LOCKSTEP_HD inline void DecodeBlockQ4_K(const BlockQ4_K* b, float* out) {
  const float d = Fp16ToFp32(b->d), dmin = Fp16ToFp32(b->dmin);
  for (int sub = 0; sub < QK_K / 32; ++sub) {
    int sc, m;
    ScaleMinK4(b->scales, sub, &sc, &m);
    const float dl = RoundedMul(d, (float)sc), ml = RoundedMul(dmin, (float)m);
    const int j = sub / 2, s = sub % 2;
    for (int l = 0; l < 32; ++l) {
      const int q = (b->qs[32 * j + l] >> (4 * s)) & 0xF;
      out[32 * sub + l] = RoundedSub(RoundedMul(dl, (float)q), ml);
    }
  }
}

// out: [256]. As Q4_K with a fifth bit: bit `sub` of qh[l].
LOCKSTEP_HD inline void DecodeBlockQ5_K(const BlockQ5_K* b, float* out) {
  const float d = Fp16ToFp32(b->d), dmin = Fp16ToFp32(b->dmin);
  for (int sub = 0; sub < QK_K / 32; ++sub) {
    int sc, m;
    ScaleMinK4(b->scales, sub, &sc, &m);
    const float dl = RoundedMul(d, (float)sc), ml = RoundedMul(dmin, (float)m);
    const int j = sub / 2, s = sub % 2;
    for (int l = 0; l < 32; ++l) {
      const int q = ((b->qs[32 * j + l] >> (4 * s)) & 0xF) | (((b->qh[l] >> sub) & 1) << 4);
      out[32 * sub + l] = RoundedSub(RoundedMul(dl, (float)q), ml);
    }
  }
}

// out: [256]. 16 sub-blocks of 16 with int8 scales; value = (d * scale) * (q - 32), q 6 bits.
// Element 128*j + 64*s + l (l < 64): nibble s of ql[64*j + l]; element 128*j + 32*t + l
// (l < 32): bits [2t, 2t+2) of qh[32*j + l] are its high two bits.
LOCKSTEP_HD inline void DecodeBlockQ6_K(const BlockQ6_K* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  for (int i = 0; i < QK_K; ++i) {
    const int j = i / 128, r = i % 128;
    const int low = (b->ql[64 * j + r % 64] >> (4 * (r / 64))) & 0xF;
    const int high = (b->qh[32 * j + r % 32] >> (2 * (r / 32))) & 3;
    const float dl = RoundedMul(d, (float)b->scales[i / 16]);
    out[i] = RoundedMul(dl, (float)((low | (high << 4)) - 32));
  }
}

// out: [256]. value = d * q, d already binary32.
LOCKSTEP_HD inline void DecodeBlockQ8_K(const BlockQ8_K* b, float* out) {
  for (int l = 0; l < QK_K; ++l) out[l] = RoundedMul(b->d, (float)b->qs[l]);
}

// out: [32]. value = d * LookupIQ4NL(nibble); nibble order as Q4_0.
LOCKSTEP_HD inline void DecodeBlockIQ4_NL(const BlockIQ4_NL* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  for (int l = 0; l < QK4_NL / 2; ++l) {
    out[l] = RoundedMul(d, (float)LookupIQ4NL(b->qs[l] & 0xF));
    out[l + QK4_NL / 2] = RoundedMul(d, (float)LookupIQ4NL(b->qs[l] >> 4));
  }
}

// out: [256]. 8 sub-blocks of 32 with 6-bit scales (low 4 bits: nibble sub%2 of
// scales_l[sub/2]; high 2 bits: bits [2*sub, 2*sub+2) of scales_h), offset by 32.
// value = (d * scale) * LookupIQ4NL(nibble), nibbles within a sub-block ordered as IQ4_NL.
LOCKSTEP_HD inline void DecodeBlockIQ4_XS(const BlockIQ4_XS* b, float* out) {
  const float d = Fp16ToFp32(b->d);
  for (int sub = 0; sub < QK_K / 32; ++sub) {
    const int lo = (b->scales_l[sub / 2] >> (4 * (sub % 2))) & 0xF;
    const int hi = (b->scales_h >> (2 * sub)) & 3;
    const float dl = RoundedMul(d, (float)((int8_t)(uint8_t)(lo | (hi << 4)) - 32));
    const uint8_t* qs = b->qs + 16 * sub;
    for (int l = 0; l < 16; ++l) {
      out[32 * sub + l] = RoundedMul(dl, (float)LookupIQ4NL(qs[l] & 0xF));
      out[32 * sub + l + 16] = RoundedMul(dl, (float)LookupIQ4NL(qs[l] >> 4));
    }
  }
}

// out: [32]. value = 2^(e-128) * LookupMXFP4(nibble) (doubled E2M1 values); nibble order as
// Q4_0. E8M0 255 is a finite 2^127 here, not NaN, as in ggml and gguf-py.
LOCKSTEP_HD inline void DecodeBlockMXFP4(const BlockMXFP4* b, float* out) {
  const float d = E8M0ToFp32Half(b->e);
  for (int l = 0; l < QK_MXFP4 / 2; ++l) {
    out[l] = RoundedMul(d, (float)LookupMXFP4(b->qs[l] & 0xF));
    out[l + QK_MXFP4 / 2] = RoundedMul(d, (float)LookupMXFP4(b->qs[l] >> 4));
  }
}

// out: [64]. 4 sub-blocks of 16; value = UE4M3(d[sub]) / 2 * LookupMXFP4(nibble), where
// element l < 8 of a sub-block is the low nibble of qs[8*sub + l] and l >= 8 the high nibble of
// qs[8*sub + l - 8]. The per-tensor scale (tensor "<name>.scale2") is applied by the caller.
LOCKSTEP_HD inline void DecodeBlockNVFP4(const BlockNVFP4* b, float* out) {
  for (int sub = 0; sub < QK_NVFP4 / QK_NVFP4_SUB; ++sub) {
    const float d = Ue4m3ToFp32Half(b->d[sub]);
    const uint8_t* qs = b->qs + 8 * sub;
    for (int l = 0; l < 8; ++l) {
      out[16 * sub + l] = RoundedMul(d, (float)LookupMXFP4(qs[l] & 0xF));
      out[16 * sub + l + 8] = RoundedMul(d, (float)LookupMXFP4(qs[l] >> 4));
    }
  }
}

// Decodes block `i` of a row of `type_id` blocks into out[0, block_size). Returns false for a type
// without a lockstep codec (the caller reports it). F32/F16/BF16 "blocks" are one element.
LOCKSTEP_HD inline bool DecodeBlock(uint32_t type_id, const void* blocks, int64_t i, float* out) {
  const unsigned char* p = static_cast<const unsigned char*>(blocks);
  switch (type_id) {
    case (uint32_t)Type::F32: memcpy(out, p + 4 * i, 4); return true;
    case (uint32_t)Type::F16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      *out = Fp16ToFp32(h);
      return true;
    }
    case (uint32_t)Type::BF16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      *out = Bf16ToFp32(h);
      return true;
    }
#define LOCKSTEP_DECODE_CASE(T)                                                     \
  case (uint32_t)Type::T:                                                           \
    DecodeBlock##T(reinterpret_cast<const Block##T*>(p) + i, out); \
    return true;
    LOCKSTEP_DECODE_CASE(Q4_0)
    LOCKSTEP_DECODE_CASE(Q4_1)
    LOCKSTEP_DECODE_CASE(Q5_0)
    LOCKSTEP_DECODE_CASE(Q5_1)
    LOCKSTEP_DECODE_CASE(Q8_0)
    LOCKSTEP_DECODE_CASE(Q8_1)
    LOCKSTEP_DECODE_CASE(Q2_K)
    LOCKSTEP_DECODE_CASE(Q3_K)
    LOCKSTEP_DECODE_CASE(Q4_K)
    LOCKSTEP_DECODE_CASE(Q5_K)
    LOCKSTEP_DECODE_CASE(Q6_K)
    LOCKSTEP_DECODE_CASE(Q8_K)
    LOCKSTEP_DECODE_CASE(IQ4_NL)
    LOCKSTEP_DECODE_CASE(IQ4_XS)
    LOCKSTEP_DECODE_CASE(MXFP4)
    LOCKSTEP_DECODE_CASE(NVFP4)
#undef LOCKSTEP_DECODE_CASE
    default: return false;
  }
}

}  // namespace lockstep::quant
