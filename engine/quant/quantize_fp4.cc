// NVFP4 (ggml's block_nvfp4: 64 values in 4 sub-blocks of 16, one UE4M3 scale each, E2M1
// codes): ggml's quantize_row_nvfp4_ref. The scale byte is what gguf-py's NVFP4.fp32_to_ue4m3
// (= ggml_fp32_to_ue4m3) makes of amax / 6, so the sub-block's largest value lands on the
// largest E2M1 magnitude (6); each value then takes the nearest of the 16 codes. Decoding, and
// hence the scale the codes are chosen against, is fp.h's Ue4m3ToFp32Half (gguf-py's decoding).
#include <cmath>
#include <cstring>

#include "engine/quant/blocks.h"
#include "engine/quant/fp.h"
#include "engine/quant/quantize_internal.h"

namespace lockstep::quant::internal {
namespace {

// float -> UE4M3 byte exactly as ggml_fp32_to_ue4m3 / gguf-py's fp32_to_ue4m3: inputs <= 0 (and
// NaN) give 0, inputs above 448 clip to 448. Normal range: keep 3 mantissa bits, rounding half
// up on the 4th; a carry out of the mantissa bumps the exponent, and exponent 15 saturates to
// 0x7E (448) - so [248, 448) also encodes as 448, the only place the scale is far from amax / 6.
// Subnormal range (< 2^-6): round(x * 2^9) half up, clamped to 1..7 (so [15.5, 16) * 2^-10
// becomes 7 * 2^-9, not 2^-6), and below 2^-10 gives 0.
uint8_t Fp32ToUe4m3(float x) {
  if (!(x > 0.0f)) return 0;
  if (x > 448.0f) x = 448.0f;
  uint32_t bits;
  memcpy(&bits, &x, 4);
  const int fp32_exp = static_cast<int>((bits >> 23) & 0xFF) - 127;
  const int fp32_man = static_cast<int>((bits >> 20) & 0x7);
  int exp = fp32_exp + 7;
  if (exp <= 0) {
    int man = static_cast<int>(x * 512.0f + 0.5f);
    if (man > 7) man = 7;
    return man < 1 ? 0 : static_cast<uint8_t>(man);
  }
  if (exp >= 15) return 0x7E;
  int man = fp32_man + static_cast<int>((bits >> 19) & 1);
  if (man > 7) {
    man = 0;
    if (++exp >= 15) return 0x7E;
  }
  return static_cast<uint8_t>((exp << 3) | man);
}

// Nearest of the 16 codes to x for scale d (value = kValuesMXFP4[code] * d); ties keep the lower
// code, so 0 is code 0, never the negative zero 8 (ggml's best_index_mxfp4).
int BestIndexE2M1(float x, float d) {
  int best = 0;
  float best_err = fabsf(kValuesMXFP4[0] * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = fabsf(kValuesMXFP4[i] * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void QuantizeNVFP4(const float* src, int64_t n, void* dst) {
  auto* y = static_cast<BlockNVFP4*>(dst);
  for (int64_t ib = 0; ib < n / QK_NVFP4; ++ib) {
    for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; ++s) {
      const float* xb = src + ib * QK_NVFP4 + s * QK_NVFP4_SUB;
      float amax = 0.0f;
      for (int j = 0; j < QK_NVFP4_SUB; ++j) {
        if (amax < fabsf(xb[j])) amax = fabsf(xb[j]);
      }
      const uint8_t ue = Fp32ToUe4m3(amax / 6.0f);
      y[ib].d[s] = ue;
      const float d = Ue4m3ToFp32Half(ue);  // carries the 1/2 of the doubled code values
      // qs: 8 bytes per sub-block; byte j holds element j (low nibble) and j + 8 (high).
      for (int j = 0; j < QK_NVFP4_SUB / 2; ++j) {
        const int lo = BestIndexE2M1(xb[j], d);
        const int hi = BestIndexE2M1(xb[QK_NVFP4_SUB / 2 + j], d);
        y[ib].qs[s * (QK_NVFP4_SUB / 2) + j] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

}  // namespace lockstep::quant::internal
