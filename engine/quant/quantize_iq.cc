// IQ4_NL and IQ4_XS: ggml's quantizer without an importance matrix (quantize_iq4_nl /
// quantize_iq4_xs with quant_weights == NULL, ntry = 7), which is what ggml runs when it writes
// a model file of these types. Codes index the non-linear code book kValuesIQ4NL; the scale is
// the best x^2-weighted least-squares fit over 15 trial scales. Float arithmetic in ggml's order.
#include <cmath>
#include <cstring>

#include "engine/quant/blocks.h"
#include "engine/quant/fp.h"
#include "engine/quant/quantize_internal.h"

namespace lockstep::quant::internal {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: smaller amax counts as zero
constexpr int kNtry = 7;                // trial scales: max maps to code value -127 + [-7, 7]

inline int NearestInt(float f) {  // ties to even, as ggml's nearest_int; |f| <= 2^22
  const float v = f + 12582912.f;
  int32_t i;
  memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// Index of the code-book value nearest to x (values sorted ascending; a tie takes the larger).
// Comparing 2x with the sum of neighbours keeps the midpoint exact.
inline int BestIndexIQ4(float x) {
  const float x2 = x + x;
  int idx = 0;
  for (int i = 1; i < 16; ++i) {
    if (x2 >= static_cast<float>(kValuesIQ4NL[i - 1] + kValuesIQ4NL[i])) idx = i;
  }
  return idx;
}

// One super-block of `super_size` elements in sub-blocks of 32 (IQ4_NL: one sub-block, IQ4_XS:
// eight). Writes the f16 super scale *dh, codes q4 [super_size / 2] (element j of a 32-group in
// the low nibble of byte j, element j + 16 in the high nibble) and, for IQ4_XS, the 6-bit
// sub-block scales (+32; low nibbles in scales_l, top 2 bits in scales_h).
void QuantizeIQ4Block(int super_size, const float* x, uint16_t* dh, uint8_t* q4,
                      uint16_t* scales_h, uint8_t* scales_l) {
  constexpr int kBlock = 32;
  const int nsub = super_size / kBlock;
  uint8_t L[QK_K];
  float scales[QK_K / kBlock];
  float weight[kBlock];
  memset(q4, 0, super_size / 2);
  *dh = Fp32ToFp16(0.f);
  float max_scale = 0, amax_scale = 0;  // max_scale keeps its sign
  for (int ib = 0; ib < nsub; ++ib) {
    const float* xb = x + ib * kBlock;
    uint8_t* Lb = L + ib * kBlock;
    for (int j = 0; j < kBlock; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j) {
      const float ax = fabsf(xb[j]);
      if (ax > amax) { amax = ax; max = xb[j]; }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    // First guess maps max to +127 (clamped onto the code book's +113), then the trials map it
    // to the -127 end at slightly different stretches; each fit is refit by least squares and
    // the best (largest sumqx^2 / sumq2, i.e. smallest weighted error) is kept.
    float d = -max / kValuesIQ4NL[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int l = BestIndexIQ4(id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = kValuesIQ4NL[l];
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    if (sumq2 == 0) {  // every x^2 underflowed to 0 (amax < ~1e-22): ggml would store NaN
      scales[ib] = 0;
      continue;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -kNtry; itry <= kNtry; ++itry) {
      id = (itry + kValuesIQ4NL[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < kBlock; ++j) {
        const float q = kValuesIQ4NL[BestIndexIQ4(id * xb[j])];
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (fabsf(d) > amax_scale) { amax_scale = fabsf(d); max_scale = d; }
  }

  if (nsub > 1) {
    // IQ4_XS: sub-block scale = d * (ls - 32), ls 6-bit; the largest |scale| maps to -32.
    memset(scales_h, 0, sizeof(uint16_t));
    const float d = -max_scale / 32;
    *dh = Fp32ToFp16(d);
    const float id = d != 0 ? 1 / d : 0.f;
    for (int ib = 0; ib < nsub; ++ib) {
      int l = NearestInt(id * scales[ib]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = d * l;
      const float idl = dl != 0 ? 1 / dl : 0.f;
      for (int j = 0; j < kBlock; ++j) {
        L[ib * kBlock + j] = static_cast<uint8_t>(BestIndexIQ4(idl * x[ib * kBlock + j]));
      }
      l += 32;
      if (ib % 2 == 0) {
        scales_l[ib / 2] = static_cast<uint8_t>(l & 0xF);
      } else {
        scales_l[ib / 2] |= static_cast<uint8_t>((l & 0xF) << 4);
      }
      *scales_h |= static_cast<uint16_t>((l >> 4) << (2 * ib));
    }
  } else {
    // IQ4_NL: the scale itself is the f16 d; codes are redone against it (unrounded).
    *dh = Fp32ToFp16(scales[0]);
    const float id = scales[0] != 0 ? 1 / scales[0] : 0;
    for (int j = 0; j < super_size; ++j) L[j] = static_cast<uint8_t>(BestIndexIQ4(id * x[j]));
  }

  for (int i = 0; i < super_size / kBlock; ++i) {
    for (int j = 0; j < 16; ++j) {
      q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
    }
  }
}

}  // namespace

void QuantizeIQ4_NL(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t ib = 0; ib < n / QK4_NL; ++ib) {
    QuantizeIQ4Block(QK4_NL, src + ib * QK4_NL, &y[ib].d, y[ib].qs, nullptr, nullptr);
  }
}

void QuantizeIQ4_XS(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    QuantizeIQ4Block(QK_K, src + ib * QK_K, &y[ib].d, y[ib].qs, &y[ib].scales_h, y[ib].scales_l);
  }
}

}  // namespace lockstep::quant::internal
