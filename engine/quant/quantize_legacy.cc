// Quantizers for the types gguf-py can quantize, bit-identical to its quantize_blocks (gguf
// 0.19.0, gguf/quants.py) and, for F16, to numpy's astype(float16).
//
// gguf-py works in binary32 throughout (numpy float32 arrays with Python-scalar operands, which
// numpy 2 keeps in float32), rounding after every operation; the code below repeats each
// operation in the same order with RoundedMul (no FMA). Where numpy casts a float to uint8/int8
// out of range (NaN, Inf, negatives) the C cast is undefined; numpy on x86-64 converts to int32
// with truncation (cvttss2si: NaN, Inf and |x| >= 2^31 give INT32_MIN) and keeps the low byte.
// CastLikeNumpyX86 spells that out, so the result does not depend on the compiler.
#include <cmath>
#include <cstring>

#include "engine/quant/blocks.h"
#include "engine/quant/fp.h"
#include "engine/quant/quantize_internal.h"

namespace lockstep::quant::internal {
namespace {

// numpy's float32 -> (u)int8 cast on x86-64: truncate to int32 (INT32_MIN when out of range
// or NaN), keep the low 8 bits.
uint8_t CastLikeNumpyX86(float v) {
  int32_t i = INT32_MIN;
  if (v > -2147483904.0f && v < 2147483648.0f) i = (int32_t)v;  // NaN fails both tests
  return (uint8_t)(uint32_t)i;
}

uint8_t ClipU8(uint8_t q, uint8_t hi) { return q > hi ? hi : q; }

// np.abs(x).argmax(): first index of the largest |x|; the first NaN wins outright.
int ArgMaxAbs(const float* x, int n) {
  int best = 0;
  float amax = std::fabs(x[0]);
  if (std::isnan(amax)) return 0;
  for (int j = 1; j < n; ++j) {
    const float a = std::fabs(x[j]);
    if (std::isnan(a)) return j;
    if (a > amax) {
      amax = a;
      best = j;
    }
  }
  return best;
}

// np.max / np.min along a block: any NaN makes the result NaN (the first one met); among equal
// extremes the LAST wins, which only shows as the sign of a zero (numpy's reduction keeps the
// new element on ties, as x86 minss/maxss do; checked on 3000 random +-0 patterns on an AVX-512
// machine). numpy's SIMD paths reduce in other orders, so where the extreme is a zero of mixed
// sign the package's own answer differs between machines (an AVX2 one gave the other zero); the
// goldens hold no such block (oracle/gen_quant_golden.py).
float MaxOf(const float* x, int n) {
  float m = x[0];
  for (int j = 0; j < n; ++j) {
    if (std::isnan(x[j])) return x[j];
    m = m > x[j] ? m : x[j];
  }
  return m;
}
float MinOf(const float* x, int n) {
  float m = x[0];
  for (int j = 0; j < n; ++j) {
    if (std::isnan(x[j])) return x[j];
    m = m < x[j] ? m : x[j];
  }
  return m;
}

// np.where(d == 0, 0, 1 / d) in float32.
float InverseOrZero(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

// gguf-py's np_roundf: |x| rounded half away from zero via floor(a) + floor(2 * (a - floor(a))),
// times sign(x); NaN and Inf come out NaN (Inf - Inf).
float NpRoundf(float x) {
  const float a = std::fabs(x);
  const float fl = std::floor(a);
  const float b = fl + std::floor(2.0f * (a - fl));
  const float sign = std::isnan(x) ? x : (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f));
  return RoundedMul(sign, b);
}

void StoreF16(uint8_t* dst, float v) {
  const uint16_t h = Fp32ToFp16(v);
  memcpy(dst, &h, 2);
}

// Packs 32 five-bit q: low nibbles as Q4_0, bit 4 of q[j] into bit j of the little-endian qh.
void PackQ5(const uint8_t* q, uint8_t* qh, uint8_t* qs) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= (uint32_t)((q[j] >> 4) != 0) << j;
  for (int k = 0; k < 4; ++k) qh[k] = (uint8_t)(h >> (8 * k));
  for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] << 4));
}

}  // namespace

void QuantizeF16(const float* src, int64_t n, void* dst) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) StoreF16(out + 2 * i, src[i]);
}

void QuantizeBF16(const float* src, int64_t n, void* dst) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = Fp32ToBf16(src[i]);
    memcpy(out + 2 * i, &h, 2);
  }
}

// d = x[argmax |x|] / -8 so the extreme value maps to q = 0; q = trunc(x / d + 8.5) clipped to 15.
void QuantizeQ4_0(const float* src, int64_t n, void* dst) {
  BlockQ4_0* out = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    const float* x = src + b * QK4_0;
    const float d = x[ArgMaxAbs(x, QK4_0)] / -8.0f;
    const float id = InverseOrZero(d);
    uint8_t q[QK4_0];
    for (int j = 0; j < QK4_0; ++j) {
      q[j] = ClipU8(CastLikeNumpyX86(std::trunc(RoundedMul(x[j], id) + 8.5f)), 15);
    }
    BlockQ4_0 blk;
    blk.d = Fp32ToFp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) blk.qs[j] = (uint8_t)(q[j] | (q[j + QK4_0 / 2] << 4));
    memcpy(out + b, &blk, sizeof blk);
  }
}

// d = (max - min) / 15, m = min; q = trunc((x - min) / d + 0.5) clipped to 15.
void QuantizeQ4_1(const float* src, int64_t n, void* dst) {
  BlockQ4_1* out = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n / QK4_1; ++b) {
    const float* x = src + b * QK4_1;
    const float mx = MaxOf(x, QK4_1), mn = MinOf(x, QK4_1);
    const float d = (mx - mn) / 15.0f;
    const float id = InverseOrZero(d);
    uint8_t q[QK4_1];
    for (int j = 0; j < QK4_1; ++j) {
      q[j] = ClipU8(CastLikeNumpyX86(std::trunc(RoundedMul(x[j] - mn, id) + 0.5f)), 15);
    }
    BlockQ4_1 blk;
    blk.d = Fp32ToFp16(d);
    blk.m = Fp32ToFp16(mn);
    for (int j = 0; j < QK4_1 / 2; ++j) blk.qs[j] = (uint8_t)(q[j] | (q[j + QK4_1 / 2] << 4));
    memcpy(out + b, &blk, sizeof blk);
  }
}

void QuantizeQ5_0(const float* src, int64_t n, void* dst) {
  BlockQ5_0* out = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / QK5_0; ++b) {
    const float* x = src + b * QK5_0;
    const float d = x[ArgMaxAbs(x, QK5_0)] / -16.0f;
    const float id = InverseOrZero(d);
    uint8_t q[QK5_0];
    for (int j = 0; j < QK5_0; ++j) {
      q[j] = ClipU8(CastLikeNumpyX86(std::trunc(RoundedMul(x[j], id) + 16.5f)), 31);
    }
    BlockQ5_0 blk;
    blk.d = Fp32ToFp16(d);
    PackQ5(q, blk.qh, blk.qs);
    memcpy(out + b, &blk, sizeof blk);
  }
}

void QuantizeQ5_1(const float* src, int64_t n, void* dst) {
  BlockQ5_1* out = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / QK5_1; ++b) {
    const float* x = src + b * QK5_1;
    const float mx = MaxOf(x, QK5_1), mn = MinOf(x, QK5_1);
    const float d = (mx - mn) / 31.0f;
    const float id = InverseOrZero(d);
    uint8_t q[QK5_1];
    for (int j = 0; j < QK5_1; ++j) {
      q[j] = ClipU8(CastLikeNumpyX86(std::trunc(RoundedMul(x[j] - mn, id) + 0.5f)), 31);
    }
    BlockQ5_1 blk;
    blk.d = Fp32ToFp16(d);
    blk.m = Fp32ToFp16(mn);
    PackQ5(q, blk.qh, blk.qs);
    memcpy(out + b, &blk, sizeof blk);
  }
}

// d = max|x| / 127; q = round-half-away(x / d) as int8.
void QuantizeQ8_0(const float* src, int64_t n, void* dst) {
  BlockQ8_0* out = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    const float* x = src + b * QK8_0;
    float amax = std::fabs(x[0]);
    for (int j = 0; j < QK8_0 && !std::isnan(amax); ++j) {
      const float a = std::fabs(x[j]);
      if (std::isnan(a) || a > amax) amax = a;
    }
    const float d = amax / 127.0f;
    const float id = InverseOrZero(d);
    BlockQ8_0 blk;
    blk.d = Fp32ToFp16(d);
    for (int j = 0; j < QK8_0; ++j) blk.qs[j] = (int8_t)CastLikeNumpyX86(NpRoundf(RoundedMul(x[j], id)));
    memcpy(out + b, &blk, sizeof blk);
  }
}

// e = floor(log2(max|x|)) - 2 + 127 as E8M0 (0 when max|x| is not > 0), then each value takes
// the first code of kValuesMXFP4 minimising |2^(e-128) * code - x| (first NaN error wins, as
// np.argmin). log2 is numpy's float32 log2; only its floor matters, and the floor of the
// correctly rounded float32 log2 matches numpy's at every power-of-two boundary (checked over
// the 200 floats below each power of two, subnormals included, by oracle/gen_quant_golden.py's
// MXFP4 boundary blocks).
void QuantizeMXFP4(const float* src, int64_t n, void* dst) {
  BlockMXFP4* out = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n / QK_MXFP4; ++b) {
    const float* x = src + b * QK_MXFP4;
    float amax = std::fabs(x[0]);
    for (int j = 0; j < QK_MXFP4 && !std::isnan(amax); ++j) {
      const float a = std::fabs(x[j]);
      if (std::isnan(a) || a > amax) amax = a;
    }
    uint8_t e = 0;
    if (amax > 0.0f) {
      const float l2 = (float)std::log2((double)amax);  // Inf for Inf
      e = CastLikeNumpyX86(std::floor(l2) - 2.0f + 127.0f);
    }
    const float d = E8M0ToFp32Half(e);
    uint8_t q[QK_MXFP4];
    for (int j = 0; j < QK_MXFP4; ++j) {
      int best = 0;
      float best_err = 0.0f;
      for (int k = 0; k < 16; ++k) {
        const float err = std::fabs(RoundedMul(d, (float)kValuesMXFP4[k]) - x[j]);
        if (std::isnan(err)) {
          best = k;
          break;
        }
        if (k == 0 || err < best_err) {
          best = k;
          best_err = err;
        }
      }
      q[j] = (uint8_t)best;
    }
    BlockMXFP4 blk;
    blk.e = e;
    for (int j = 0; j < QK_MXFP4 / 2; ++j) blk.qs[j] = (uint8_t)(q[j] | (q[j + QK_MXFP4 / 2] << 4));
    memcpy(out + b, &blk, sizeof blk);
  }
}

}  // namespace lockstep::quant::internal
