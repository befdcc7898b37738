// Q8_1 and the K-quants (Q2_K..Q6_K, Q8_K): ggml's reference quantizers (quantize_row_*_ref,
// no importance matrix), which is what ggml uses when it writes a model file without an
// imatrix. The gguf Python package cannot quantize these types, so there is no bit-exact oracle
// for the bytes; tests/unit/quantize_roundtrip_test.cc holds them to stated error bounds instead
// (docs/quantize-bounds.md). Arithmetic is float, in ggml's order, so the bytes also match ggml's.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/quant/blocks.h"
#include "engine/quant/fp.h"
#include "engine/quant/quantize_internal.h"

namespace lockstep::quant::internal {
namespace {

// A group whose largest |x| is below this is treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even (ggml's nearest_int): adding 1.5 * 2^23 leaves the integer in
// the low mantissa bits, rounded by the FPU's default mode. Valid for |f| <= 2^22.
inline int NearestInt(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// Symmetric codes with a least-squares scale (ggml's make_qx_quants, rmse_type 1, no weights):
// x [n] -> L [n] in [0, 2*nmax), returns the scale s with x ~ s * (L - nmax). Tries 19 trial
// inverse scales around -nmax/max and keeps the one whose refit has the smallest x^2-weighted
// squared error (maximising sumlx^2 / suml2 is the same thing).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = fabsf(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric 3-bit codes (ggml's make_q3_quants with do_rmse): start from -nmax/max, then up to
// five coordinate-descent passes, each moving one code at a time if that raises the x^2-weighted
// fit quality sumlx^2 / suml2. L [n] in [0, 2*nmax); returns the scale of (L - nmax).
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = fabsf(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = NearestInt(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Affine codes x ~ scale * L - the_min, L in [0, nmax] (ggml's make_qkx2_quants). The offset
// never goes above zero (min is clamped to <= 0), so all-positive groups keep 0 representable.
// Starts from the min/max fit, then tries nstep+1 inverse scales (rmin + rdelta*is + nmax) /
// (max - min), each refit by weighted least squares for both scale and min, keeping the one with
// the smallest weighted error (|diff| if use_mad, else diff^2). Returns scale; *the_min >= 0.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                     bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? fabsf(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K / Q5_K scales[12]: eight 6-bit (scale, min) pairs. Pairs 0-3 sit in the low 6 bits of
// bytes 0-3 (scale) and 4-7 (min); pairs 4-7 keep their low nibbles in bytes 8-11 (scale low,
// min high) and their top 2 bits in the spare top bits of bytes 0-3 (scale) and 4-7 (min).
void PackScaleMinK4(const uint8_t ls[8], const uint8_t lm[8], uint8_t scales[12]) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

void UnpackScaleMinK4(int j, const uint8_t scales[12], uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// 2-bit codes L [256] -> qs [64]: byte l of each 32-byte half holds elements l, l+32, l+64, l+96
// of that 128-element half, lowest bits first (Q2_K and the low bits of Q3_K).
void Pack2Bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
    }
  }
}

// Q4_K / Q5_K sub-block scales and mins (8 sub-blocks of 32) from the make_qkx2_quants searches,
// then the requantization of every element against the decoded (f16 x 6-bit) scale and min, so
// each code is the nearest one for the values the decoder will actually produce.
template <typename Block>
void QuantizeAffineK(const float* x, int nmax, float rmin, float rdelta, int nstep, Block* y,
                     uint8_t L[QK_K]) {
  uint8_t Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  float max_scale = 0, max_min = 0;  // both >= 0: the min is subtracted
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                               rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < QK_K / 32; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
  }
  PackScaleMinK4(ls, lm, y->scales);
  y->d = Fp32ToFp16(max_scale / 63.f);
  y->dmin = Fp32ToFp16(max_min / 63.f);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, y->scales, &sc, &m);
    const float d = Fp16ToFp32(y->d) * sc;
    if (d == 0) continue;  // the sub-block decodes to -dm whatever its codes
    const float dm = Fp16ToFp32(y->dmin) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void QuantizeQ8_1(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t ib = 0; ib < n / QK8_1; ++ib, src += QK8_1) {
    float amax = 0;
    for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, fabsf(src[j]));
    // Codes use the unrounded f32 d; only the stored d is f16. s pairs d with the code sum so a
    // Q4_1 x Q8_1 dot can add min * sum(x) without revisiting the codes.
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < QK8_1; ++j) {
      y[ib].qs[j] = static_cast<int8_t>(roundf(src[j] * id));
      sum += y[ib].qs[j];
    }
    y[ib].d = Fp32ToFp16(d);
    y[ib].s = Fp32ToFp16(sum * d);
  }
}

void QuantizeQ2_K(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  constexpr float kQ4Scale = 15.f;  // sub-block scales and mins are 4-bit
  uint8_t L[QK_K], Laux[16];
  float weights[16], mins[QK_K / 16], scales[QK_K / 16];
  for (int64_t ib = 0; ib < n / QK_K; ++ib, src += QK_K) {
    const float* x = src;
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
      scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    // scales[j]: low nibble = sub-block scale, high nibble = sub-block min, each in units of
    // d (resp. dmin) = largest / 15.
    if (max_scale > 0) {
      const float iscale = kQ4Scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        y[ib].scales[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      }
      y[ib].d = Fp32ToFp16(max_scale / kQ4Scale);
    } else {
      for (int j = 0; j < QK_K / 16; ++j) y[ib].scales[j] = 0;
      y[ib].d = Fp32ToFp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = kQ4Scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j) {
        y[ib].scales[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
      }
      y[ib].dmin = Fp32ToFp16(max_min / kQ4Scale);
    } else {
      y[ib].dmin = Fp32ToFp16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = Fp16ToFp32(y[ib].d) * (y[ib].scales[j] & 0xF);
      if (d == 0) continue;
      const float dm = Fp16ToFp32(y[ib].dmin) * (y[ib].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = NearestInt((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    Pack2Bit(L, y[ib].qs);
  }
}

void QuantizeQ3_K(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t ib = 0; ib < n / QK_K; ++ib, src += QK_K) {
    const float* x = src;
    float max_scale = 0, amax = 0;  // max_scale keeps its sign: d = max_scale / -32
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = fabsf(scales[j]);
      if (scale > amax) { amax = scale; max_scale = scales[j]; }
    }
    // scales[12]: sixteen 6-bit values stored +32. Low nibbles: sub-blocks 0-7 in the low
    // nibble of bytes 0-7, 8-15 in the high nibble. High 2 bits: sub-block j in bits 2*(j/4) of
    // byte 8 + j%4.
    memset(y[ib].scales, 0, 12);
    if (max_scale != 0) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        int l = NearestInt(iscale * scales[j]);
        l = std::max(-32, std::min(31, l)) + 32;
        if (j < 8) {
          y[ib].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[ib].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        }
        y[ib].scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      y[ib].d = Fp32ToFp16(1 / iscale);
    } else {
      y[ib].d = Fp32ToFp16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const int lo = j < 8 ? y[ib].scales[j] & 0xF : y[ib].scales[j - 8] >> 4;
      const int sc = (lo | (((y[ib].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      const float d = Fp16ToFp32(y[ib].d) * sc;
      if (d == 0) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = NearestInt(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    // Codes 0..7 (value code - 4): bit 2 goes to hmask (bit b of byte m holds element 32*b + m),
    // the low 2 bits to qs as in Q2_K.
    memset(y[ib].hmask, 0, QK_K / 8);
    uint8_t low[QK_K];
    for (int j = 0; j < QK_K; ++j) {
      const int m = j % (QK_K / 8), bit = j / (QK_K / 8);
      if (L[j] > 3) y[ib].hmask[m] |= static_cast<uint8_t>(1u << bit);
      low[j] = static_cast<uint8_t>(L[j] & 3);
    }
    Pack2Bit(low, y[ib].qs);
  }
}

void QuantizeQ4_K(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[QK_K];
  for (int64_t ib = 0; ib < n / QK_K; ++ib, src += QK_K) {
    QuantizeAffineK(src, 15, -1.f, 0.1f, 20, &y[ib], L);
    // qs: each 32-byte chunk holds 64 elements, the first 32 in low nibbles.
    for (int j = 0; j < QK_K; j += 64) {
      for (int l = 0; l < 32; ++l) {
        y[ib].qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      }
    }
  }
}

void QuantizeQ5_K(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[QK_K];
  for (int64_t ib = 0; ib < n / QK_K; ++ib, src += QK_K) {
    QuantizeAffineK(src, 31, -0.5f, 0.1f, 15, &y[ib], L);
    // Low 4 bits as Q4_K; bit 4 of element 64*c + l goes to qh[l] bit 2c, of 64*c + 32 + l to
    // bit 2c + 1.
    memset(y[ib].qh, 0, QK_K / 8);
    for (int c = 0; c < QK_K / 64; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[64 * c + l], l2 = L[64 * c + l + 32];
        y[ib].qh[l] |= static_cast<uint8_t>(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
        y[ib].qs[32 * c + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
    }
  }
}

void QuantizeQ6_K(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t ib = 0; ib < n / QK_K; ++ib, src += QK_K) {
    const float* x = src;
    float max_scale = 0, max_abs_scale = 0;  // max_scale keeps its sign: d = max_scale / -128
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = MakeQxQuants(16, 32, x + 16 * j, L + 16 * j);
      const float abs_scale = fabsf(scales[j]);
      if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scales[j]; }
    }
    if (max_abs_scale < kGroupMaxEps) {
      memset(&y[ib], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[ib].d = Fp32ToFp16(1 / iscale);
    for (int j = 0; j < QK_K / 16; ++j) {
      y[ib].scales[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[j])));
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = Fp16ToFp32(y[ib].d) * y[ib].scales[j];
      if (d == 0) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = NearestInt(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    // Codes 0..63 (value code - 32), per 128-element half: ql[l] holds elements l (low nibble)
    // and l+64 (high), ql[l+32] holds l+32 and l+96; qh[l] holds the top 2 bits of l, l+32,
    // l+64, l+96 at bits 0, 2, 4, 6.
    for (int h = 0; h < QK_K / 128; ++h) {
      const int8_t* Lh = L + 128 * h;
      uint8_t* ql = y[ib].ql + 64 * h;
      uint8_t* qh = y[ib].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                     ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

void QuantizeQ8_K(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, src += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = fabsf(src[j]);
      if (ax > amax) { amax = ax; max = src[j]; }
    }
    if (amax == 0) {  // ggml leaves bsums unwritten here; lockstep zeroes them
      memset(&y[ib], 0, sizeof(BlockQ8_K));
      continue;
    }
    // -127 / max rather than 127 / amax: ggml's convention (the max element gets code -127 and
    // d carries the sign), kept so the bytes match ggml's.
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) {
      y[ib].qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * src[j])));
    }
    // bsums: sum of each 16 codes, for the K-quant dots' min/offset terms.
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[ib].qs[16 * j + ii];
      y[ib].bsums[j] = static_cast<int16_t>(sum);
    }
    y[ib].d = 1 / iscale;
  }
}

}  // namespace lockstep::quant::internal
