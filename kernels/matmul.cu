// Quantized matmul, two routes with one per-element reduction order (matmul.h states it).
//
// Decode route (MatmulDecodeKernel): a warp owns 4 weight rows; lane = 8 * row_in_warp + class.
// Per step the warp stages S groups of 256 elements (8 chunks) of its 4 rows into shared memory
// with wide loads, then each lane decodes chunk `class` of each group into 32 floats (registers)
// and runs the fma chain for up to 8 tokens. Class sums meet in a shuffle tree (xor 4, 2, 1).
// Tiled route (MatmulTiledKernel): a CTA owns 64 rows x 32 tokens; warp g is class g. Per group
// of 256 elements the CTA stages and decodes the 64 rows' weights into shared memory (transposed,
// float) and the 32 tokens' activations; warp g runs chunk g's 32 fmas for its 8x8 micro-tile
// per lane. Class sums go through shared memory into the same tree.
#include "kernels/matmul.h"

#include "engine/quant/blocks.h"
#include "engine/quant/decode.h"
#include "engine/quant/fp.h"
#include "engine/quant/types.h"

namespace lockstep::kernels {
namespace {

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

// Groups staged per decode-warp step: enough bytes in flight, bounded registers.
template <uint32_t kType>
constexpr int kStageGroups = 1152 / kGroupBytes<kType> < 1 ? 1 : (1152 / kGroupBytes<kType> > 8 ? 8 : 1152 / kGroupBytes<kType>);

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

// ---------------------------------------------------------------------------------------------
// Decode route.
constexpr int kDecRowsPerWarp = 4, kDecWarps = 4, kDecTT = 8;
constexpr size_t kDecXsMaxBytes = 96 * 1024;  // x row in shared memory up to 24576 columns

// Shared-memory layout of the decode kernel (dynamic): per warp 4 staged rows of kRowPad bytes
// (the step's bytes rounded up to 16, plus 16 so the 4 rows start on different banks), then for
// T = 1 the activation row with each 32-float chunk padded to 36 floats, so the 8 classes'
// 16-byte reads of their chunks fall in 8 different bank quads (no 8-way conflict).
constexpr int kXsChunkStride = 36;
template <uint32_t kType>
constexpr int kDecRowPad = (kStageGroups<kType> * kGroupBytes<kType> + 15) / 16 * 16 + 16;

template <uint32_t kType, int kUnit, int kTT, bool kXS>
__global__ void __launch_bounds__(kDecWarps * 32)
    MatmulDecodeKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                       const float* __restrict__ x, int64_t T, float* __restrict__ y,
                       float w_scale) {
  using U = typename UnitT<kUnit>::T;
  constexpr int kGB = kGroupBytes<kType>;
  constexpr int kS = kStageGroups<kType>;
  constexpr int kRowStage = kS * kGB;                       // bytes of one row per step
  constexpr int kUnitsPerRow = kRowStage / kUnit;           // when the whole step is present
  constexpr int kMaxUnitsPerLane = (kDecRowsPerWarp * kUnitsPerRow + 31) / 32;
  constexpr int kRowPad = kDecRowPad<kType>;
  extern __shared__ __align__(16) uint8_t dyn_smem[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int cls = lane % kClasses, rw = lane / kClasses;
  const int64_t row0 = ((int64_t)blockIdx.x * (blockDim.x / 32) + warp) * kDecRowsPerWarp;
  const int64_t t0 = (int64_t)blockIdx.y * kTT;
  const int n_tok = (int)Min64(kTT, T - t0);
  const int64_t n_chunks = cols / kChunk;
  const int64_t n_groups = (n_chunks + kClasses - 1) / kClasses;

  uint8_t* stage = dyn_smem + (size_t)warp * kDecRowsPerWarp * kRowPad;  // [4][kRowPad]
  // kXS (T = 1): the token's x row in shared memory, chunk c at c * 36 floats, loaded once.
  float* xs_dyn = reinterpret_cast<float*>(dyn_smem + (size_t)(blockDim.x / 32) * kDecRowsPerWarp * kRowPad);
  if constexpr (kXS) {
    const float4* src = reinterpret_cast<const float4*>(x + t0 * cols);
    for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      *reinterpret_cast<float4*>(xs_dyn + (i / 8) * kXsChunkStride + (i % 8) * 4) = __ldg(src + i);
    }
    __syncthreads();
  }

  float acc[kTT];
#pragma unroll
  for (int t = 0; t < kTT; ++t) acc[t] = 0.0f;

  // Bytes of the step starting at group g0 within a row (the last step may be short).
  auto step_bytes = [&](int64_t g0) -> int {
    const int64_t elems = Min64((int64_t)kS * kGroup, cols - g0 * kGroup);
    return (int)(elems / WT<kType>::kBE * WT<kType>::kBB);
  };
  U pre[kMaxUnitsPerLane];
  auto load = [&](int64_t g0) {
    const int units = step_bytes(g0) / kUnit;
#pragma unroll
    for (int k = 0; k < kMaxUnitsPerLane; ++k) {
      const int i = lane + 32 * k;
      const int r = i / kUnitsPerRow, u = i % kUnitsPerRow;
      if (r < kDecRowsPerWarp && u < units && row0 + r < rows) {
        const uint8_t* src = w + (row0 + r) * row_bytes + g0 * kGB + (int64_t)u * kUnit;
        pre[k] = __ldg(reinterpret_cast<const U*>(src));
      }
    }
  };
  auto store = [&](int64_t g0) {
    const int units = step_bytes(g0) / kUnit;
#pragma unroll
    for (int k = 0; k < kMaxUnitsPerLane; ++k) {
      const int i = lane + 32 * k;
      const int r = i / kUnitsPerRow, u = i % kUnitsPerRow;
      if (r < kDecRowsPerWarp && u < units && row0 + r < rows) {
        *reinterpret_cast<U*>(stage + r * kRowPad + u * kUnit) = pre[k];
      }
    }
  };

  if (row0 < rows) load(0);
  for (int64_t g0 = 0; g0 < n_groups; g0 += kS) {
    __syncwarp();
    if (row0 < rows) store(g0);
    __syncwarp();
    if (row0 < rows && g0 + kS < n_groups) load(g0 + kS);
#pragma unroll
    for (int s = 0; s < kS; ++s) {
      const int64_t c = (g0 + s) * kClasses + cls;
      if (c < n_chunks && row0 + rw < rows) {
        float wv[32];
        WT<kType>::Decode(stage + rw * kRowPad + s * kGB, cls, wv);
#pragma unroll
        for (int t = 0; t < kTT; ++t) {
          if (t < n_tok) {
            const float4* xp = kXS ? reinterpret_cast<const float4*>(xs_dyn + c * kXsChunkStride)
                                   : reinterpret_cast<const float4*>(x + (t0 + t) * cols + c * kChunk);
            float a = acc[t];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              const float4 xv = kXS ? xp[i] : __ldg(xp + i);
              a = __fmaf_rn(wv[4 * i], xv.x, a);
              a = __fmaf_rn(wv[4 * i + 1], xv.y, a);
              a = __fmaf_rn(wv[4 * i + 2], xv.z, a);
              a = __fmaf_rn(wv[4 * i + 3], xv.w, a);
            }
            acc[t] = a;
          }
        }
      }
    }
  }
  // Tree over the 8 classes of a row: xor 4 gives a0+a4 on lane 0 (a4+a0 on lane 4: the same
  // value), xor 2 then xor 1 complete ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)).
#pragma unroll
  for (int t = 0; t < kTT; ++t) {
    float v = acc[t];
    v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 4));
    v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
    v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
    if (cls == 0 && t < n_tok && row0 + rw < rows) y[(t0 + t) * rows + row0 + rw] = __fmul_rn(v, w_scale);
  }
}

// ---------------------------------------------------------------------------------------------
// Tiled route.
constexpr int kBM = 64, kBN = 32, kTiledThreads = 256;

template <uint32_t kType>
constexpr size_t TiledSmemBytes() {
  return (size_t)kGroup * kBM * 4 + (size_t)kGroup * kBN * 4 + (size_t)kBM * kGroupBytes<kType>;
}

template <uint32_t kType, int kUnit>
__global__ void __launch_bounds__(kTiledThreads, 2)
    MatmulTiledKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                      const float* __restrict__ x, int64_t T, float* __restrict__ y,
                      float w_scale) {
  using U = typename UnitT<kUnit>::T;
  constexpr int kGB = kGroupBytes<kType>;
  extern __shared__ __align__(16) uint8_t smem[];
  float* Ws = reinterpret_cast<float*>(smem);                    // [256][kBM]
  float* Xs = Ws + kGroup * kBM;                                  // [256][kBN]
  uint8_t* Sb = reinterpret_cast<uint8_t*>(Xs + kGroup * kBN);    // [kBM][kGB]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rq = lane % 8, tq = lane / 8;  // micro-tile: rows rq*8.., tokens tq*8..
  const int64_t row0 = (int64_t)blockIdx.x * kBM, t0 = (int64_t)blockIdx.y * kBN;
  const int64_t n_chunks = cols / kChunk;
  const int64_t n_groups = (n_chunks + kClasses - 1) / kClasses;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int64_t g = 0; g < n_groups; ++g) {
    const int chunks_here = (int)Min64(kClasses, n_chunks - g * kClasses);
    const int gbytes = chunks_here * kChunk / WT<kType>::kBE * WT<kType>::kBB;
    // 1. Stage raw weight bytes of kBM rows.
    const int units = gbytes / kUnit;
    for (int i = tid; i < kBM * units; i += kTiledThreads) {
      const int r = i / units, u = i % units;
      if (row0 + r < rows) {
        *reinterpret_cast<U*>(Sb + r * kGB + u * kUnit) =
            __ldg(reinterpret_cast<const U*>(w + (row0 + r) * row_bytes + g * kGB + (int64_t)u * kUnit));
      }
    }
    // Activations: Xs[k][t] = x[t0 + t][256 g + k].
    for (int i = tid; i < kBN * (kGroup / 4); i += kTiledThreads) {
      const int t = i % kBN, k4 = i / kBN;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (t0 + t < T && 4 * k4 < chunks_here * kChunk) {
        v = __ldg(reinterpret_cast<const float4*>(x + (t0 + t) * cols + g * kGroup + 4 * k4));
      }
      Xs[(4 * k4) * kBN + t] = v.x;
      Xs[(4 * k4 + 1) * kBN + t] = v.y;
      Xs[(4 * k4 + 2) * kBN + t] = v.z;
      Xs[(4 * k4 + 3) * kBN + t] = v.w;
    }
    __syncthreads();
    // 2. Decode into Ws[k][r].
    for (int i = tid; i < kBM * chunks_here; i += kTiledThreads) {
      const int r = i % kBM, c = i / kBM;
      float wv[32];
      if (row0 + r < rows) {
        WT<kType>::Decode(Sb + r * kGB, c, wv);
      } else {
#pragma unroll
        for (int e = 0; e < 32; ++e) wv[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < 32; ++e) Ws[(c * kChunk + e) * kBM + r] = wv[e];
    }
    __syncthreads();
    // 3. Warp `warp` is class `warp`: chunk `warp` of this group.
    if (warp < chunks_here) {
#pragma unroll 4
      for (int e = 0; e < kChunk; ++e) {
        const int k = warp * kChunk + e;
        const float4 w0 = *reinterpret_cast<const float4*>(Ws + k * kBM + rq * 8);
        const float4 w1 = *reinterpret_cast<const float4*>(Ws + k * kBM + rq * 8 + 4);
        const float4 x0 = *reinterpret_cast<const float4*>(Xs + k * kBN + tq * 8);
        const float4 x1 = *reinterpret_cast<const float4*>(Xs + k * kBN + tq * 8 + 4);
        const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][j] = __fmaf_rn(wv[i], xv[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
  // Class sums: Ps[class][r][t] (reuses Ws: 8 * 64 * 32 floats = 64 KiB).
  float* Ps = Ws;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) Ps[(warp * kBM + rq * 8 + i) * kBN + tq * 8 + j] = acc[i][j];
  __syncthreads();
  for (int o = tid; o < kBM * kBN; o += kTiledThreads) {
    const int r = o % kBM, t = o / kBM;
    if (row0 + r < rows && t0 + t < T) {
      float a[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) a[c] = Ps[(c * kBM + r) * kBN + t];
      y[(t0 + t) * rows + row0 + r] = __fmul_rn(ClassTree(a), w_scale);
    }
  }
}

template <uint32_t kType>
__global__ void DecodeWeightsKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols,
                                    int64_t row_bytes, float* __restrict__ out) {
  constexpr int kGB = kGroupBytes<kType>;
  const int64_t n_chunks = cols / kChunk;
  const int64_t total = rows * n_chunks;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / n_chunks, c = i % n_chunks;
    float wv[32];
    // Generic pointer into global memory: the decoders only need natural alignment.
    WT<kType>::Decode(w + r * row_bytes + (c / kClasses) * kGB, (int)(c % kClasses), wv);
#pragma unroll
    for (int e = 0; e < 32; ++e) out[r * cols + c * kChunk + e] = wv[e];
  }
}

int PickUnit(const void* w, int64_t row_bytes, int64_t tail_bytes, int group_bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(w);
  for (int u : {16, 8, 4}) {
    if (a % u == 0 && row_bytes % u == 0 && tail_bytes % u == 0 && group_bytes % u == 0) return u;
  }
  return 2;
}

template <uint32_t kType>
cudaError_t LaunchTyped(const void* wv, int64_t rows, int64_t cols, const float* x, int64_t T,
                        float* y, float w_scale, MatmulRoute route, cudaStream_t stream) {
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  constexpr int kGB = kGroupBytes<kType>;
  const int64_t row_bytes = cols / WT<kType>::kBE * WT<kType>::kBB;
  const int64_t tail_bytes = row_bytes % kGB;
  const int unit = PickUnit(w, row_bytes, tail_bytes, kGB);
  if (route == MatmulRoute::kAuto) route = T <= kDecTT ? MatmulRoute::kDecode : MatmulRoute::kTiled;
  if (route == MatmulRoute::kDecode) {
    // The decode step stages kS groups; a short last step must also be a whole number of units.
    const int64_t step_tail = row_bytes % ((int64_t)kStageGroups<kType> * kGB);
    const int u = (step_tail % unit == 0) ? unit : PickUnit(w, row_bytes, step_tail, kGB);
    // Warps per CTA: 4, unless that leaves fewer than two CTAs per SM (132 on an H200); small
    // matrices then spread over more SMs. Rows map to warps the same way at any CTA size.
    const int nw = rows / 16 >= 264 ? 4 : (rows / 8 >= 264 ? 2 : 1);
    const int rows_per_cta = nw * kDecRowsPerWarp;
    const dim3 grid((unsigned)((rows + rows_per_cta - 1) / rows_per_cta), (unsigned)((T + kDecTT - 1) / kDecTT));
    const dim3 block(nw * 32);
#define LS_DEC(U, TT, XS)                                                                           \
  do {                                                                                              \
    const size_t xs_bytes = (size_t)nw * kDecRowsPerWarp * kDecRowPad<kType> +                       \
                            (XS ? (size_t)cols / kChunk * kXsChunkStride * 4 : 0);                  \
    if (xs_bytes > 48 * 1024) {                                                                     \
      static bool attr_set = false;                                                                 \
      if (!attr_set) {                                                                              \
        const cudaError_t ea = cudaFuncSetAttribute(                                                \
            MatmulDecodeKernel<kType, U, TT, XS>, cudaFuncAttributeMaxDynamicSharedMemorySize,      \
            (int)(kDecWarps * kDecRowsPerWarp * kDecRowPad<kType> + kDecXsMaxBytes / 32 * kXsChunkStride)); \
        if (ea != cudaSuccess) return ea;                                                           \
        attr_set = true;                                                                            \
      }                                                                                             \
    }                                                                                               \
    MatmulDecodeKernel<kType, U, TT, XS><<<grid, block, xs_bytes, stream>>>(w, rows, cols, row_bytes, x, T, y, w_scale); \
  } while (0)
    // T == 1: the token's activations go to shared memory once per CTA (no dependent global
    // loads inside the fma chain); T > 1 reads them through L1 (8 rows of x need not fit).
    if (T == 1 && (size_t)cols * 4 <= kDecXsMaxBytes) {
      switch (u) {
        case 16: LS_DEC(16, 1, true); break;
        case 8: LS_DEC(8, 1, true); break;
        case 4: LS_DEC(4, 1, true); break;
        default: LS_DEC(2, 1, true); break;
      }
    } else if (T == 1) {
      switch (u) {
        case 16: LS_DEC(16, 1, false); break;
        case 8: LS_DEC(8, 1, false); break;
        case 4: LS_DEC(4, 1, false); break;
        default: LS_DEC(2, 1, false); break;
      }
    } else {
      switch (u) {
        case 16: LS_DEC(16, kDecTT, false); break;
        case 8: LS_DEC(8, kDecTT, false); break;
        case 4: LS_DEC(4, kDecTT, false); break;
        default: LS_DEC(2, kDecTT, false); break;
      }
    }
#undef LS_DEC
    return cudaGetLastError();
  }
  const dim3 grid((unsigned)((rows + kBM - 1) / kBM), (unsigned)((T + kBN - 1) / kBN));
  constexpr size_t smem = TiledSmemBytes<kType>();
  cudaError_t e = cudaSuccess;
#define LS_TILED(U)                                                                              \
  do {                                                                                           \
    static bool attr_set = false;                                                                \
    if (!attr_set) {                                                                             \
      e = cudaFuncSetAttribute(MatmulTiledKernel<kType, U>,                                      \
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);          \
      if (e != cudaSuccess) return e;                                                            \
      attr_set = true;                                                                           \
    }                                                                                            \
    MatmulTiledKernel<kType, U><<<grid, kTiledThreads, smem, stream>>>(w, rows, cols, row_bytes, \
                                                                       x, T, y, w_scale);        \
  } while (0)
  switch (unit) {
    case 16: LS_TILED(16); break;
    case 8: LS_TILED(8); break;
    case 4: LS_TILED(4); break;
    default: LS_TILED(2); break;
  }
#undef LS_TILED
  return cudaGetLastError();
}

template <uint32_t kType>
cudaError_t LaunchDecodeTyped(const void* w, int64_t rows, int64_t cols, float* out,
                              cudaStream_t stream) {
  const int64_t row_bytes = cols / WT<kType>::kBE * WT<kType>::kBB;
  const int64_t total = rows * (cols / kChunk);
  const int64_t want = (total + 127) / 128;
  const unsigned grid = (unsigned)(want < 132 * 16 ? want : 132 * 16);
  DecodeWeightsKernel<kType><<<grid, 128, 0, stream>>>(static_cast<const uint8_t*>(w), rows, cols,
                                                       row_bytes, out);
  return cudaGetLastError();
}

bool ShapeOk(uint32_t type_id, int64_t rows, int64_t cols) {
  q::TypeTraits t;
  if (!q::LookupType(type_id, &t)) return false;
  return rows >= 1 && cols >= kChunk && cols % kChunk == 0 && cols % t.block_size == 0;
}

}  // namespace

bool MatmulSupportsType(uint32_t type_id) {
  switch ((q::Type)type_id) {
    case q::Type::F32: case q::Type::F16: case q::Type::BF16: case q::Type::Q4_0:
    case q::Type::Q4_1: case q::Type::Q8_0: case q::Type::Q4_K: case q::Type::Q5_K:
    case q::Type::Q6_K: case q::Type::IQ4_XS: case q::Type::NVFP4:
      return true;
    default:
      return false;
  }
}

#define LS_FOR_EACH_TYPE(X) \
  X(F32) X(F16) X(BF16) X(Q4_0) X(Q4_1) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_XS) X(NVFP4)

cudaError_t LaunchMatmul(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                         const float* x, int64_t T, float* y, float w_scale, MatmulRoute route,
                         cudaStream_t stream) {
  if (!MatmulSupportsType(type_id) || !ShapeOk(type_id, rows, cols) || T < 1) return cudaErrorInvalidValue;
  if (w == nullptr || x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(w) % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (T > 65535LL * kBN) return cudaErrorInvalidValue;
  switch ((q::Type)type_id) {
#define LS_CASE(N) \
  case q::Type::N: return LaunchTyped<(uint32_t)q::Type::N>(w, rows, cols, x, T, y, w_scale, route, stream);
    LS_FOR_EACH_TYPE(LS_CASE)
#undef LS_CASE
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchMatmulDecodeWeights(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                                      float* out, cudaStream_t stream) {
  if (!MatmulSupportsType(type_id) || !ShapeOk(type_id, rows, cols)) return cudaErrorInvalidValue;
  if (w == nullptr || out == nullptr || reinterpret_cast<uintptr_t>(w) % 4 != 0) return cudaErrorInvalidValue;
  switch ((q::Type)type_id) {
#define LS_CASE(N) \
  case q::Type::N: return LaunchDecodeTyped<(uint32_t)q::Type::N>(w, rows, cols, out, stream);
    LS_FOR_EACH_TYPE(LS_CASE)
#undef LS_CASE
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace lockstep::kernels
