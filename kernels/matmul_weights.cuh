// Shared pieces of the quantized matmul (kernels/matmul.cu): the chunk geometry, the per-type
// weight traits and chunk decoders (bit-identical to engine/quant/decode.h), the fixed class
// tree, and the staging unit types. Internal to matmul.cu; split out to keep each file to one
// concern (weight decoding here, the two routes and the launchers there).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "engine/quant/blocks.h"
#include "engine/quant/decode.h"
#include "engine/quant/fp.h"
#include "engine/quant/types.h"

namespace lockstep::kernels::matmul_internal {

namespace q = ::lockstep::quant;

constexpr int kChunk = 32;       // elements per chunk
constexpr int kClasses = 8;      // chunk c belongs to class c % 8
constexpr int kGroup = 256;      // elements per group (8 chunks, one per class)

// Weight traits per type: block geometry and the chunk decoder. Decode(g, c, w) writes the 32
// values of chunk c (0..7) of the group whose bytes start at g (group = 256 elements), each
// bit-identical to DecodeBlock's value for that element.
template <uint32_t kType>
struct WT;

#define LS_DEV __device__ __forceinline__

LS_DEV int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// (float)(v - kOff) for 0 <= v < 2^23, exactly, without the quarter-rate I2F: the float with
// bits 0x4B000000 | v is 2^23 + v, and subtracting 2^23 + kOff is exact. Same value as the cast.
template <int kOff>
LS_DEV float SmallIntToF(uint32_t v) {
  return __fsub_rn(__uint_as_float(0x4B000000u | v), 8388608.0f + (float)kOff);
}

template <>
struct WT<(uint32_t)q::Type::F32> {
  static constexpr int kBE = 1, kBB = 4;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const float4* p = reinterpret_cast<const float4*>(g + c * 128);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 v = p[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::F16> {
  static constexpr int kBE = 1, kBB = 2;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(g + c * 64);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t v = p[i];
      w[2 * i] = q::Fp16ToFp32((uint16_t)v), w[2 * i + 1] = q::Fp16ToFp32((uint16_t)(v >> 16));
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::BF16> {
  static constexpr int kBE = 1, kBB = 2;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(g + c * 64);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t v = p[i];
      w[2 * i] = __uint_as_float(v << 16), w[2 * i + 1] = __uint_as_float(v & 0xFFFF0000u);
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::Q4_0> {
  static constexpr int kBE = 32, kBB = 18;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockQ4_0*>(g + c * kBB);
    const float d = q::Fp16ToFp32(b->d);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(b->qs);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = qs[i];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t byte = (v >> (8 * h)) & 0xFF;
        w[2 * i + h] = q::RoundedMul(d, SmallIntToF<8>(byte & 0xF));
        w[2 * i + h + 16] = q::RoundedMul(d, SmallIntToF<8>(byte >> 4));
      }
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::Q4_1> {
  static constexpr int kBE = 32, kBB = 20;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockQ4_1*>(g + c * kBB);
    const float d = q::Fp16ToFp32(b->d), m = q::Fp16ToFp32(b->m);
    const uint32_t* qs = reinterpret_cast<const uint32_t*>(b->qs);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = qs[i];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const uint32_t byte = (v >> (8 * h)) & 0xFF;
        w[4 * i + h] = q::RoundedAdd(q::RoundedMul(d, SmallIntToF<0>(byte & 0xF)), m);
        w[4 * i + h + 16] = q::RoundedAdd(q::RoundedMul(d, SmallIntToF<0>(byte >> 4)), m);
      }
    }
  }
};
// Q5_0 / Q5_1: 22- and 24-byte blocks, so a block may start 2 bytes past a 4-byte boundary:
// every field is read as 16-bit words. Element l < 16 is the low nibble of qs[l] with bit l of
// qh as bit 4; element l + 16 the high nibble with bit l + 16 (DecodeBlockQ5_0/Q5_1). The
// 5-bit q minus 16 (Q5_0) or q (Q5_1) comes exactly from the magic float; the products and the
// sum are the decoder's roundings.
template <>
struct WT<(uint32_t)q::Type::Q5_0> {
  static constexpr int kBE = 32, kBB = 22;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(g + c * kBB);
    const float d = q::Fp16ToFp32(b[0]);
    const uint32_t qh = (uint32_t)b[1] | ((uint32_t)b[2] << 16);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = b[3 + i];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int l = 2 * i + h;
        const uint32_t byte = (v >> (8 * h)) & 0xFF;
        const uint32_t q0 = (byte & 0xF) | (((qh >> l) & 1u) << 4);
        const uint32_t q1 = (byte >> 4) | (((qh >> (l + 16)) & 1u) << 4);
        w[l] = q::RoundedMul(d, SmallIntToF<16>(q0));
        w[l + 16] = q::RoundedMul(d, SmallIntToF<16>(q1));
      }
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::Q5_1> {
  static constexpr int kBE = 32, kBB = 24;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(g + c * kBB);
    const float d = q::Fp16ToFp32(b[0]), m = q::Fp16ToFp32(b[1]);
    const uint32_t qh = (uint32_t)b[2] | ((uint32_t)b[3] << 16);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = b[4 + i];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int l = 2 * i + h;
        const uint32_t byte = (v >> (8 * h)) & 0xFF;
        const uint32_t q0 = (byte & 0xF) | (((qh >> l) & 1u) << 4);
        const uint32_t q1 = (byte >> 4) | (((qh >> (l + 16)) & 1u) << 4);
        w[l] = q::RoundedAdd(q::RoundedMul(d, SmallIntToF<0>(q0)), m);
        w[l + 16] = q::RoundedAdd(q::RoundedMul(d, SmallIntToF<0>(q1)), m);
      }
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::Q8_0> {
  static constexpr int kBE = 32, kBB = 34;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockQ8_0*>(g + c * kBB);
    const float d = q::Fp16ToFp32(b->d);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(b->qs);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t v = qs[i];
      w[2 * i] = q::RoundedMul(SmallIntToF<128>((v & 0xFF) ^ 0x80), d);
      w[2 * i + 1] = q::RoundedMul(SmallIntToF<128>((v >> 8) ^ 0x80), d);
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::Q4_K> {
  static constexpr int kBE = 256, kBB = 144;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockQ4_K*>(g);
    const float d = q::Fp16ToFp32(b->d), dmin = q::Fp16ToFp32(b->dmin);
    int sc, m;
    q::ScaleMinK4(b->scales, c, &sc, &m);
    const float dl = q::RoundedMul(d, (float)sc), ml = q::RoundedMul(dmin, (float)m);
    const uint32_t* qs = reinterpret_cast<const uint32_t*>(b->qs + 32 * (c / 2));
    const int shift = 4 * (c % 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = qs[i] >> shift;
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const uint32_t qv = (v >> (8 * h)) & 0xF;
        w[4 * i + h] = q::RoundedSub(q::RoundedMul(dl, SmallIntToF<0>(qv)), ml);
      }
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::Q5_K> {
  static constexpr int kBE = 256, kBB = 176;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockQ5_K*>(g);
    const float d = q::Fp16ToFp32(b->d), dmin = q::Fp16ToFp32(b->dmin);
    int sc, m;
    q::ScaleMinK4(b->scales, c, &sc, &m);
    const float dl = q::RoundedMul(d, (float)sc), ml = q::RoundedMul(dmin, (float)m);
    const uint32_t* qs = reinterpret_cast<const uint32_t*>(b->qs + 32 * (c / 2));
    const uint32_t* qh = reinterpret_cast<const uint32_t*>(b->qh);
    const int shift = 4 * (c % 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = qs[i] >> shift;
      const uint32_t hv = qh[i] >> c;
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const uint32_t qv = ((v >> (8 * h)) & 0xF) | (((hv >> (8 * h)) & 1) << 4);
        w[4 * i + h] = q::RoundedSub(q::RoundedMul(dl, SmallIntToF<0>(qv)), ml);
      }
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::Q6_K> {
  static constexpr int kBE = 256, kBB = 210;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockQ6_K*>(g);
    const float d = q::Fp16ToFp32(b->d);
    // Elements 32c .. 32c+31: j = c / 4, r = 32 * (c % 4) + l.
    const int j = c / 4, r0 = 32 * (c % 4);
    const float dl0 = q::RoundedMul(d, (float)b->scales[2 * c]);
    const float dl1 = q::RoundedMul(d, (float)b->scales[2 * c + 1]);
    const uint16_t* ql = reinterpret_cast<const uint16_t*>(b->ql + 64 * j + (r0 % 64));
    const uint16_t* qh = reinterpret_cast<const uint16_t*>(b->qh + 32 * j);
    const int lshift = 4 * (r0 / 64), hshift = 2 * (r0 / 32);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t lv = ql[i], hv = qh[i];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int l = 2 * i + h;
        const uint32_t low = (lv >> (8 * h + lshift)) & 0xF;
        const uint32_t high = (hv >> (8 * h + hshift)) & 3;
        w[l] = q::RoundedMul(l < 16 ? dl0 : dl1, SmallIntToF<32>(low | (high << 4)));
      }
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::IQ4_XS> {
  static constexpr int kBE = 256, kBB = 136;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockIQ4_XS*>(g);
    const float d = q::Fp16ToFp32(b->d);
    const int lo = (b->scales_l[c / 2] >> (4 * (c % 2))) & 0xF;
    const int hi = (b->scales_h >> (2 * c)) & 3;
    const float dl = q::RoundedMul(d, (float)((int8_t)(uint8_t)(lo | (hi << 4)) - 32));
    const uint32_t* qs = reinterpret_cast<const uint32_t*>(b->qs + 16 * c);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = qs[i];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const int byte = (v >> (8 * h)) & 0xFF;
        w[4 * i + h] = q::RoundedMul(dl, SmallIntToF<128>((uint32_t)(q::LookupIQ4NL(byte & 0xF) + 128)));
        w[4 * i + h + 16] = q::RoundedMul(dl, SmallIntToF<128>((uint32_t)(q::LookupIQ4NL(byte >> 4) + 128)));
      }
    }
  }
};
template <>
struct WT<(uint32_t)q::Type::NVFP4> {
  static constexpr int kBE = 64, kBB = 36;
  LS_DEV static void Decode(const uint8_t* g, int c, float (&w)[32]) {
    const auto* b = reinterpret_cast<const q::BlockNVFP4*>(g + (c / 2) * kBB);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int sub = 2 * (c % 2) + s;
      const float d = q::Ue4m3ToFp32Half(b->d[sub]);
      const uint32_t* qs = reinterpret_cast<const uint32_t*>(b->qs + 8 * sub);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t v = qs[i];
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const int byte = (v >> (8 * h)) & 0xFF;
          w[16 * s + 4 * i + h] = q::RoundedMul(d, SmallIntToF<128>((uint32_t)(q::LookupMXFP4(byte & 0xF) + 128)));
          w[16 * s + 4 * i + h + 8] = q::RoundedMul(d, SmallIntToF<128>((uint32_t)(q::LookupMXFP4(byte >> 4) + 128)));
        }
      }
    }
  }
};

template <uint32_t kType>
constexpr int kGroupBytes = kGroup / WT<kType>::kBE * WT<kType>::kBB;

// The fixed class tree over a[0..7].
LS_DEV float ClassTree(const float* a) {
  return __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[4]), __fadd_rn(a[2], a[6])),
                   __fadd_rn(__fadd_rn(a[1], a[5]), __fadd_rn(a[3], a[7])));
}

// Copies `bytes` (a multiple of kUnit) from global src to shared dst with kUnit-byte accesses,
// by `n_threads` threads starting at thread index `tid`.
template <int kUnit>
struct UnitT;
template <> struct UnitT<16> { using T = uint4; };
template <> struct UnitT<8> { using T = uint2; };
template <> struct UnitT<4> { using T = uint32_t; };
template <> struct UnitT<2> { using T = uint16_t; };

}  // namespace lockstep::kernels::matmul_internal
