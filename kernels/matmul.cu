// Quantized matmul, two routes with one per-element reduction order (matmul.h states it).
//
// Decode route (MatmulDecodeKernel, T <= 6 in auto): a warp owns 4 * R rows (R = 1, 2 or 4 by shape);
// lane = 8 * slice + class runs the class chains of R rows, so each activation load serves R
// rows. Weights stream into a per-warp ring of shared-memory slots by cp.async, 3 steps ahead.
// Each lane decodes its chunk 8 elements at a time and runs the fma chains for up to 8 tokens;
// at T = 1 the activation row sits in shared memory (copied once per CTA), else it is read
// through L1 (docs/kernels.md, run 6).
// Class sums meet in a shuffle tree (xor 4, 2, 1).
// Tiled route (MatmulTiledKernel): a CTA owns 64 rows x 32 tokens; warp g is class g. Per group
// of 256 elements the CTA stages and decodes the 64 rows' weights into shared memory (transposed,
// float) and the 32 tokens' activations; warp g runs chunk g's 32 fmas for its 8x8 micro-tile
// per lane. Class sums go through shared memory into the same tree.
#include "kernels/matmul.h"

#include <cuda_fp16.h>

#include <cstdlib>

#include "engine/quant/types.h"
#include "kernels/matmul_mma.h"
#include "kernels/matmul_odd_cols.h"
#include "kernels/matmul_weights.cuh"
#include "kernels/pdl.cuh"

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;

using namespace matmul_internal;  // kernels/matmul_weights.cuh

// ---------------------------------------------------------------------------------------------
// Decode route.
//
// A warp owns kDecSlices * kR consecutive weight rows; lane = 8 * slice + class, and the lane runs
// the class chains of rows slice * kR .. slice * kR + kR - 1 (kR independent chains per lane,
// each token). All kR rows of a lane are at the same chunk at any time, so the lane loads that
// chunk's activations once (8 elements at a time, through L1) and uses them for kR rows.
// Weights reach shared memory through a per-warp ring of G::kStages slots filled with cp.async
// (16-byte cp.async.cg when every step is 16-byte aligned, else the widest unit that divides the
// row layout), kStages - 1 steps ahead of the one being computed; no CTA-wide barrier.
// Decoding is per type (DecFrag): Q4_K and Q8_0 read their raw bytes with vector shared loads
// and build each weight with the exact operations of DecodeBlock (see DecFrag below); the other
// types run WT<kType>::Decode on the staged group.
constexpr int kDecTT = 8;       // tokens per decode CTA (grid.y tiles T)
// The auto route's decode/tiled boundary: at T = 8 the tiled route was as fast or faster on every
// Llama-3-8B matrix (Q4_K 4096 x 4096 0.114 against 0.140 ms), at T = 4 the decode route was
// faster on all (0.080 against 0.111 ms); the boundary is set between (docs/kernels.md run 7).
// Q6_K keeps the decode route up to kDecTT (its tiled route: 0.204 against 0.153 ms at T = 8).
constexpr int64_t kDecodeMaxT = 6;
constexpr int kDecStages = 4;   // ring depth per warp
constexpr int kDecSlices = 4;   // row slices per warp (lane = 8 * slice + class)
constexpr int kDecMaxWarpSmem = 72 * 1024;

constexpr int StageAlign(int gb) {
  for (int s = 1; s <= 16; ++s)
    if ((s * gb) % 16 == 0) return s;
  return 16;
}
// Groups per ring step: about 2.3 KB per warp and step, a multiple of the 16-byte alignment.
constexpr int DecStageGroups(int gb, int r) {
  const int a = StageAlign(gb);
  int s = 2304 / (kDecSlices * r * gb) / a * a;
  if (s < a) s = a;
  if (s > 8 && a < 8) s = 8 / a * a;
  return s;
}

template <uint32_t kType, int kR>
struct DecGeom {
  static constexpr int kGB = kGroupBytes<kType>;
  static constexpr int kS = DecStageGroups(kGB, kR);
  static constexpr int kRows = kDecSlices * kR;                     // rows per warp
  static constexpr int kStepBytes = kS * kGB;                       // per row and step
  static constexpr int kRowPad = (kStepBytes + 15) / 16 * 16 + 16;  // +16: rows on other banks
  static constexpr int kSlotBytes = kRows * kRowPad;
  // Ring depth: kDecStages, except for steps of 1.5 KB or more per row (Q6_K: 8 groups, the
  // fewest 210-byte groups that keep 16-byte copies), where one step ahead covers the latency
  // and a 2-slot ring leaves room for twice the warps or twice the rows per lane.
  static constexpr int kStages = kStepBytes >= 1536 ? 2 : kDecStages;
  static constexpr int kWarpSmem = kStages * kSlotBytes;
  static constexpr int kU16 = kStepBytes / 16;                      // 16-byte units per row-step
  static constexpr int kCopies = (kRows * kU16 + 31) / 32;          // per lane, fast path
  static_assert(kCopies <= 64, "fast-path copy mask");
};

LS_DEV float H2F(uint32_t h16) { return __half2float(__ushort_as_half((unsigned short)h16)); }

// 2^23 + byte b of v, as a float (one PRMT): bytes (v.b, 0, 0, 0x4B).
template <int kB>
LS_DEV float MagicByte(uint32_t v) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | kB));
}

// Per-lane chunk fragment: Load(group, class) reads what the lane needs of its chunk from the
// staged group; Quarter<q>(w) produces elements 8q .. 8q+7, bit-identical to DecodeBlock.
template <uint32_t kType>
struct DecFrag {
  float v[32];
  LS_DEV void Load(const uint8_t* g, int cls) { WT<kType>::Decode(g, cls, v); }
  template <int kQ>
  LS_DEV void Quarter(float (&w)[8]) const {
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e] = v[8 * kQ + e];
  }
};

// Q4_K: value = (d * sc) * q - (dmin * m), each product rounded (DecodeBlockQ4_K). d and dmin are
// binary16, sc and m < 64, so d * sc and dmin * m are exact in binary32 (at most 17 significant
// bits), and (d * sc) * q with q < 16 is exact too (21 bits); so the decoder's
// round(round(dl * q) - ml) equals the single rounding fma(dl, q, -ml), Inf/NaN included (NaN
// payloads aside). q comes from the magic float 2^23 + q minus 2^23 (exact); for the high nibble
// the masked byte is 16 q and dl / 16 (exact: a power of two, dl >= 2^-24) takes its place.
template <>
struct DecFrag<(uint32_t)q::Type::Q4_K> {
  float dls, nml;
  uint32_t mask;
  uint32_t qw[8];
  LS_DEV void Load(const uint8_t* g, int cls) {
    const uint4 h = *reinterpret_cast<const uint4*>(g);  // d, dmin | scales[0..11]
    const float d = H2F(h.x & 0xFFFFu), dmin = H2F(h.x >> 16);
    const int sh = 8 * (cls & 3);
    const uint32_t A = (h.y >> sh) & 0xFFu, B = (h.z >> sh) & 0xFFu, C = (h.w >> sh) & 0xFFu;
    // ScaleMinK4: j < 4: (q[j] & 63, q[j+4] & 63); else ((q[j+4] & 15) | (q[j-4] >> 6) << 4,
    // (q[j+4] >> 4) | (q[j] >> 6) << 4), with q[j] = byte j of the 12 scale bytes.
    const uint32_t sc = cls < 4 ? (A & 63u) : ((C & 15u) | ((A >> 2) & 48u));
    const uint32_t m = cls < 4 ? (B & 63u) : ((C >> 4) | ((B >> 2) & 48u));
    const float dl = __fmul_rn(d, SmallIntToF<0>(sc));
    const float ml = __fmul_rn(dmin, SmallIntToF<0>(m));
    dls = (cls & 1) ? __fmul_rn(dl, 0.0625f) : dl;
    nml = -ml;
    mask = (cls & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
    const uint4* qp = reinterpret_cast<const uint4*>(g + 16 + 32 * (cls / 2));
    const uint4 a = qp[0], b = qp[1];
    qw[0] = a.x, qw[1] = a.y, qw[2] = a.z, qw[3] = a.w;
    qw[4] = b.x, qw[5] = b.y, qw[6] = b.z, qw[7] = b.w;
  }
  template <int kQ>
  LS_DEV void Quarter(float (&w)[8]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t v = qw[2 * kQ + i] & mask;
      w[4 * i + 0] = __fmaf_rn(dls, __fsub_rn(MagicByte<0>(v), 8388608.0f), nml);
      w[4 * i + 1] = __fmaf_rn(dls, __fsub_rn(MagicByte<1>(v), 8388608.0f), nml);
      w[4 * i + 2] = __fmaf_rn(dls, __fsub_rn(MagicByte<2>(v), 8388608.0f), nml);
      w[4 * i + 3] = __fmaf_rn(dls, __fsub_rn(MagicByte<3>(v), 8388608.0f), nml);
    }
  }
};

// Q8_0: value = q * d (DecodeBlockQ8_0). The 34-byte block of class c starts 2 bytes past a
// 4-byte boundary when c is odd: the lane reads the 9 aligned words around it and realigns the
// quants with one PRMT per word; q ^ 0x80 in the magic float gives 2^23 + 128 + q exactly.
template <>
struct DecFrag<(uint32_t)q::Type::Q8_0> {
  float d;
  uint32_t qw[8];
  LS_DEV void Load(const uint8_t* g, int cls) {
    const int odd = cls & 1;
    const uint32_t* p = reinterpret_cast<const uint32_t*>(g + 34 * cls - 2 * odd);
    uint32_t W[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) W[k] = p[k];
    d = H2F(odd ? (W[0] >> 16) : (W[0] & 0xFFFFu));
    const uint32_t sel = odd ? 0x7654u : 0x5432u;
#pragma unroll
    for (int i = 0; i < 8; ++i) qw[i] = __byte_perm(W[i], W[i + 1], sel) ^ 0x80808080u;
  }
  template <int kQ>
  LS_DEV void Quarter(float (&w)[8]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t v = qw[2 * kQ + i];
      w[4 * i + 0] = __fmul_rn(__fsub_rn(MagicByte<0>(v), 8388736.0f), d);
      w[4 * i + 1] = __fmul_rn(__fsub_rn(MagicByte<1>(v), 8388736.0f), d);
      w[4 * i + 2] = __fmul_rn(__fsub_rn(MagicByte<2>(v), 8388736.0f), d);
      w[4 * i + 3] = __fmul_rn(__fsub_rn(MagicByte<3>(v), 8388736.0f), d);
    }
  }
};

// Q6_K: value = (d * scales[s]) * (q - 32), each product rounded (DecodeBlockQ6_K), q = low
// nibble of ql | 2 bits of qh << 4. The staged group starts 2 bytes past a 4-byte boundary for
// odd groups (210-byte blocks): the lane reads the 9 aligned words around its 32 ql bytes and
// its 32 qh bytes and realigns them with one PRMT per word (as Q8_0), then builds 4 quants per
// word with byte-parallel masks; q - 32 comes from the magic float 2^23 + q minus 2^23 + 32
// (exact), and the scale product is the decoder's single rounded multiply.
template <>
struct DecFrag<(uint32_t)q::Type::Q6_K> {
  float dl0, dl1;
  uint32_t qw[8];
  LS_DEV void Load(const uint8_t* g, int cls) {
    const uint32_t mis = (uint32_t)(reinterpret_cast<uintptr_t>(g) & 3u);  // 0 or 2
    const uint32_t* base = reinterpret_cast<const uint32_t*>(g - mis);
    const uint32_t sel = mis ? 0x5432u : 0x3210u;
    const int j = cls / 4;
    const int lo_w = (64 * j + 32 * (cls % 2)) / 4, hi_w = (128 + 32 * j) / 4;
    const int lshift = 4 * ((cls % 4) / 2), hshift = 2 * (cls % 4);
    uint32_t L[9], H[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) L[k] = base[lo_w + k], H[k] = base[hi_w + k];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t lw = __byte_perm(L[i], L[i + 1], sel), hw = __byte_perm(H[i], H[i + 1], sel);
      qw[i] = ((lw >> lshift) & 0x0F0F0F0Fu) | (((hw >> hshift) & 0x03030303u) << 4);
    }
    const auto* b = reinterpret_cast<const q::BlockQ6_K*>(g);
    const float d = H2F(*reinterpret_cast<const uint16_t*>(g + 208));
    const uint16_t sc = *reinterpret_cast<const uint16_t*>(b->scales + 2 * cls);
    dl0 = __fmul_rn(d, (float)(int8_t)(sc & 0xFFu));
    dl1 = __fmul_rn(d, (float)(int8_t)(sc >> 8));
  }
  template <int kQ>
  LS_DEV void Quarter(float (&w)[8]) const {
    const float dl = kQ < 2 ? dl0 : dl1;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t v = qw[2 * kQ + i];
      w[4 * i + 0] = __fmul_rn(dl, __fsub_rn(MagicByte<0>(v), 8388640.0f));
      w[4 * i + 1] = __fmul_rn(dl, __fsub_rn(MagicByte<1>(v), 8388640.0f));
      w[4 * i + 2] = __fmul_rn(dl, __fsub_rn(MagicByte<2>(v), 8388640.0f));
      w[4 * i + 3] = __fmul_rn(dl, __fsub_rn(MagicByte<3>(v), 8388640.0f));
    }
  }
};

LS_DEV void CpAsync16(void* dst, const void* src) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
template <int kN>
LS_DEV void CpAsyncCa(void* dst, const void* src) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(src), "n"(kN) : "memory");
}
LS_DEV void CpCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kN>
LS_DEV void CpWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory"); }

// unit: bytes per copy (16, 8, 4 or 2) dividing w's address, row_bytes, the step and the row's
// last step; fast (unit == 16): full steps take precomputed per-lane offsets.
template <uint32_t kType, int kTT, int kR>
__global__ void __launch_bounds__(128)
    MatmulDecodeKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                       const float* __restrict__ x, int64_t T, float* __restrict__ y,
                       float w_scale, int unit, int x_smem_bytes) {
  pdl::Begin();
  using G = DecGeom<kType, kR>;
  extern __shared__ __align__(16) uint8_t dyn_smem[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int cls = lane % kClasses, sl = lane / kClasses;
  const int64_t row0 = ((int64_t)blockIdx.x * (blockDim.x / 32) + warp) * G::kRows;
  // T = 1 with x_smem_bytes > 0: the activation row is copied once per CTA into shared memory,
  // chunk c at floats [36 c, 36 c + 32) (the pad puts the 8 classes' chunks on different banks),
  // and read from there instead of through L1; the values and the arithmetic are the same.
  // When each thread copies 16 or more float4 (a small CTA or a long row), the copy is 16-byte
  // cp.async (every load in flight at once; the load-then-store loop waits one L2 round trip
  // per iteration), committed as the first group and awaited after the weight ring's prologue
  // has been issued. With fewer per thread the plain loop is faster: measured, docs/kernels.md
  // run 7 (many CTAs all streaming x at once slowed the 14336-row matrices and the head).
  const bool xs_on = kTT == 1 && x_smem_bytes > 0;
  const bool x_async = xs_on && cols / 4 >= 16 * (int64_t)blockDim.x;
  float* xs = reinterpret_cast<float*>(dyn_smem);
  if (xs_on) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    if (x_async) {
      for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
        CpAsync16(xs + (i / 8) * 36 + (i % 8) * 4, x4 + i);
      }
      CpCommit();
    } else {
      for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
        *reinterpret_cast<float4*>(xs + (i / 8) * 36 + (i % 8) * 4) = __ldg(x4 + i);
      }
    }
  }
  // A warp past the last row issues no copies but stays for the CTA barrier below.
  const bool active = row0 < rows;
  const int rows_here = active ? (int)Min64(G::kRows, rows - row0) : 0;
  const int64_t t0 = (int64_t)blockIdx.y * kTT;
  const int n_tok = (int)Min64(kTT, T - t0);
  const int64_t n_chunks = cols / kChunk;
  const int64_t n_groups = (n_chunks + kClasses - 1) / kClasses;
  const int64_t n_steps = (n_groups + G::kS - 1) / G::kS;
  const int64_t full_steps = cols / ((int64_t)G::kS * kGroup);
  uint8_t* ring = dyn_smem + (xs_on ? x_smem_bytes : 0) + (size_t)warp * G::kWarpSmem;
  const uint8_t* wrow = w + row0 * row_bytes;

  // Fast path: this lane's 16-byte copies of a full step, as offsets from the step's start.
  int64_t src_off[G::kCopies];
  uint32_t dst_off[G::kCopies];
  uint64_t ok = 0;  // kCopies <= 64 (Q6_K, 4 rows per lane: 53)
#pragma unroll
  for (int k = 0; k < G::kCopies; ++k) {
    const int i = lane + 32 * k;
    const int r = i / (G::kU16 > 0 ? G::kU16 : 1), u = i - r * (G::kU16 > 0 ? G::kU16 : 1);
    src_off[k] = (int64_t)r * row_bytes + 16 * u;
    dst_off[k] = (uint32_t)(r * G::kRowPad + 16 * u);
    if (i < G::kRows * G::kU16 && r < rows_here) ok |= 1ull << k;
  }

  auto issue = [&](int64_t step, int slot) {
    uint8_t* dst = ring + slot * G::kSlotBytes;
    const uint8_t* src = wrow + step * G::kStepBytes;
    if (unit == 16 && step < full_steps) {
#pragma unroll
      for (int k = 0; k < G::kCopies; ++k)
        if (ok & (1ull << k)) CpAsync16(dst + dst_off[k], src + src_off[k]);
      return;
    }
    const int64_t elems = Min64((int64_t)G::kS * kGroup, cols - step * G::kS * kGroup);
    const int bytes = (int)(elems / WT<kType>::kBE * WT<kType>::kBB);
    for (int r = 0; r < rows_here; ++r) {
      uint8_t* d = dst + r * G::kRowPad;
      const uint8_t* s = src + r * row_bytes;
      switch (unit) {
        case 16:
          for (int b = 16 * lane; b < bytes; b += 32 * 16) CpAsync16(d + b, s + b);
          break;
        case 8:
          for (int b = 8 * lane; b < bytes; b += 32 * 8) CpAsyncCa<8>(d + b, s + b);
          break;
        case 4:
          for (int b = 4 * lane; b < bytes; b += 32 * 4) CpAsyncCa<4>(d + b, s + b);
          break;
        default:
          for (int b = 2 * lane; b < bytes; b += 32 * 2)
            *reinterpret_cast<uint16_t*>(d + b) = __ldg(reinterpret_cast<const unsigned short*>(s + b));
          break;
      }
    }
  };

  float acc[kR][kTT];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int t = 0; t < kTT; ++t) acc[r][t] = 0.0f;

#pragma unroll
  for (int s = 0; s < G::kStages - 1; ++s) {
    if (s < n_steps) issue(s, s);
    CpCommit();
  }
  if (xs_on) {
    if (x_async) CpWait<G::kStages - 1>();  // the activation group (the oldest) has landed
    __syncthreads();
  }
  if (!active) return;  // whole warp
  const float* xl = x + t0 * cols;
  for (int64_t step = 0; step < n_steps; ++step) {
    const int64_t nxt = step + G::kStages - 1;
    if (nxt < n_steps) issue(nxt, (int)(nxt % G::kStages));
    CpCommit();
    CpWait<G::kStages - 1>();
    __syncwarp();
    const uint8_t* slot = ring + (int)(step % G::kStages) * G::kSlotBytes + sl * kR * G::kRowPad;
#pragma unroll 1
    for (int s = 0; s < G::kS; ++s) {
      const int64_t c = (step * G::kS + s) * kClasses + cls;
      if (c < n_chunks) {
        DecFrag<kType> f[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) f[r].Load(slot + r * G::kRowPad + s * G::kGB, cls);
        const float* xc = xl + c * kChunk;
#pragma unroll
        for (int qd = 0; qd < 4; ++qd) {
          float wq[kR][8];
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            switch (qd) {
              case 0: f[r].template Quarter<0>(wq[r]); break;
              case 1: f[r].template Quarter<1>(wq[r]); break;
              case 2: f[r].template Quarter<2>(wq[r]); break;
              default: f[r].template Quarter<3>(wq[r]); break;
            }
          }
#pragma unroll
          for (int t = 0; t < kTT; ++t) {
            if (kTT == 1 || t < n_tok) {
              float4 x0, x1;
              if (xs_on) {
                const float4* xp = reinterpret_cast<const float4*>(xs + c * 36 + 8 * qd);
                x0 = xp[0], x1 = xp[1];
              } else {
                const float4* xp = reinterpret_cast<const float4*>(xc + t * cols + 8 * qd);
                x0 = __ldg(xp), x1 = __ldg(xp + 1);
              }
              const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
              for (int r = 0; r < kR; ++r) {
                float a = acc[r][t];
#pragma unroll
                for (int e = 0; e < 8; ++e) a = __fmaf_rn(wq[r][e], xv[e], a);
                acc[r][t] = a;
              }
            }
          }
        }
      }
    }
    __syncwarp();
  }
  CpWait<0>();
  // Tree over the 8 classes of a row: xor 4 gives a0+a4 on lane 0 (a4+a0 on lane 4: the same
  // value), xor 2 then xor 1 complete ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)).
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int t = 0; t < kTT; ++t) {
      float v = acc[r][t];
      v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 4));
      v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 2));
      v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
      const int rr = sl * kR + r;
      if (cls == 0 && t < n_tok && rr < rows_here) y[(t0 + t) * rows + row0 + rr] = __fmul_rn(v, w_scale);
    }
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
  pdl::Begin();
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
  pdl::Begin();
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

// The T = 1 activation row in shared memory: on unless LOCKSTEP_DECODE_X_SMEM=0 (read once; the
// two settings give the same bits, kernel_check runs both).
bool DecodeXSmem() {
  static const bool on = [] {
    const char* e = std::getenv("LOCKSTEP_DECODE_X_SMEM");
    return !(e != nullptr && e[0] == '0' && e[1] == 0);
  }();
  return on;
}

int SmCount() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v < 1) v = 132;
    return v;
  }();
  return n;
}

template <uint32_t kType, int kTT, int kR>
cudaError_t LaunchDecodeR(const uint8_t* w, int64_t rows, int64_t cols, int64_t row_bytes,
                          const float* x, int64_t T, float* y, float w_scale, cudaStream_t stream) {
  using G = DecGeom<kType, kR>;
  // Copy unit: divides the base address, the row stride, a full step and the row's last step.
  const int unit = PickUnit(w, row_bytes, row_bytes % G::kStepBytes, G::kStepBytes);
  const int64_t warps = (rows + G::kRows - 1) / G::kRows;
  // Warps per CTA: small CTAs spread a small launch over all SMs; shared memory per warp is
  // G::kWarpSmem (the CTA has no barrier, so the CTA size changes nothing but placement).
  int nw = warps >= 16LL * SmCount() ? 4 : (warps >= 8LL * SmCount() ? 2 : 1);
  // T = 1: the activation row in shared memory (36 floats per 32-element chunk) when it takes at
  // most 72 KB (cols <= 16384) and DecodeXSmem() is on. Each CTA copies the row, so CTAs then
  // hold up to 4 warps (while that still leaves a CTA per SM), which also keeps a large row from
  // capping the warps per SM.
  int x_smem = 0;
  if (T == 1 && DecodeXSmem() && cols / kChunk * 144 <= 72 * 1024) {
    x_smem = (int)(cols / kChunk * 144);
    nw = warps >= 4LL * SmCount() ? 4 : (warps >= 2LL * SmCount() ? 2 : 1);
  }
  while (nw > 1 && x_smem + (size_t)nw * G::kWarpSmem > 200 * 1024) nw /= 2;
  const size_t smem = x_smem + (size_t)nw * G::kWarpSmem;
  if (smem > 48 * 1024) {
    static int attr_bytes = 0;
    if ((int)smem > attr_bytes) {
      const cudaError_t ea = cudaFuncSetAttribute(MatmulDecodeKernel<kType, kTT, kR>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
      if (ea != cudaSuccess) return ea;
      attr_bytes = (int)smem;
    }
  }
  const dim3 grid((unsigned)((warps + nw - 1) / nw), (unsigned)((T + kTT - 1) / kTT));
  pdl::Launch(MatmulDecodeKernel<kType, kTT, kR>, grid, nw * 32, smem, stream, w, rows, cols, row_bytes, x, T, y,
              w_scale, unit, x_smem);
  return cudaGetLastError();
}

// Rows per lane: r_force when the caller forces it (the check tool), else by type, T and row
// count, as measured on the H200 (docs/kernels.md run 7, `LOCKSTEP_BENCH=decode kernel_check
// --bench-only`, every mapping forced per Llama-3-8B matrix): Q4_K and Q8_0 take 4 rows per lane
// when that still gives every SM 6 warps (14336 rows), else 1 at T = 1 (4096 x 4096 16.1 us at 1
// against 17.6 at 2; 4096 x 14336 42.3 against 52.4) and 2 at T > 1; Q6_K takes 1 at T = 1 (its
// 2-row kernel holds 168+ registers) and 2 at T > 1. The other types (WT<>::Decode, 32 floats per
// row) keep 2 when that gives every SM 3 warps, else 1. All within the per-warp shared memory.
template <uint32_t kType>
cudaError_t LaunchDecode(const uint8_t* w, int64_t rows, int64_t cols, int64_t row_bytes, const float* x,
                         int64_t T, float* y, float w_scale, int r_force, cudaStream_t stream) {
  constexpr bool kFast = kType == (uint32_t)q::Type::Q4_K || kType == (uint32_t)q::Type::Q8_0 ||
                        kType == (uint32_t)q::Type::Q6_K;
  constexpr bool kQ6 = kType == (uint32_t)q::Type::Q6_K;
  constexpr bool kFits4 = DecGeom<kType, 4>::kWarpSmem <= kDecMaxWarpSmem / 2;
  constexpr bool kFits2 = DecGeom<kType, 2>::kWarpSmem <= kDecMaxWarpSmem / 2;
  int r = r_force;
  if (r == 0) {
    const int64_t sms = SmCount();
    r = 1;
    if (kFast) {
      if (!kQ6 && kFits4 && (rows + 15) / 16 >= 6 * sms) {
        r = 4;
      } else if (T > 1 && kFits2) {
        r = 2;
      }
    } else if (kFits2 && (rows + 7) / 8 >= 3 * sms) {
      r = 2;
    }
  }
#define LS_DR(TT, R) return LaunchDecodeR<kType, TT, R>(w, rows, cols, row_bytes, x, T, y, w_scale, stream)
  if (T == 1) {
    if (r == 4) LS_DR(1, 4);
    if (r == 2) LS_DR(1, 2);
    LS_DR(1, 1);
  }
  if (r == 4) LS_DR(kDecTT, 4);
  if (r == 2) LS_DR(kDecTT, 2);
  LS_DR(kDecTT, 1);
#undef LS_DR
}

template <uint32_t kType>
cudaError_t LaunchTyped(const void* wv, int64_t rows, int64_t cols, const float* x, int64_t T,
                        float* y, float w_scale, MatmulRoute route, cudaStream_t stream) {
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  constexpr int kGB = kGroupBytes<kType>;
  const int64_t row_bytes = cols / WT<kType>::kBE * WT<kType>::kBB;
  const int64_t tail_bytes = row_bytes % kGB;
  const int unit = PickUnit(w, row_bytes, tail_bytes, kGB);
  // Q6_K's tiled decoder (WT<Q6_K>::Decode) is slow enough that its decode route wins up to T = 8.
  const int64_t max_t = kType == (uint32_t)q::Type::Q6_K ? kDecTT : kDecodeMaxT;
  if (route == MatmulRoute::kAuto) route = T <= max_t ? MatmulRoute::kDecode : MatmulRoute::kTiled;
  if (route != MatmulRoute::kTiled) {
    int r_force = 0;
    if (route == MatmulRoute::kDecodeRows1) r_force = 1;
    if (route == MatmulRoute::kDecodeRows2) r_force = 2;
    if (route == MatmulRoute::kDecodeRows4) r_force = 4;
    if (route != MatmulRoute::kDecode && r_force == 0) return cudaErrorInvalidValue;
    return LaunchDecode<kType>(w, rows, cols, row_bytes, x, T, y, w_scale, r_force, stream);
  }
  const dim3 grid((unsigned)((rows + kBM - 1) / kBM), (unsigned)((T + kBN - 1) / kBN));
  constexpr size_t smem = TiledSmemBytes<kType>();
  cudaError_t e = cudaSuccess;
#define LS_TILED(U)                                                                                                  \
  do {                                                                                                               \
    static bool attr_set = false;                                                                                    \
    if (!attr_set) {                                                                                                 \
      e = cudaFuncSetAttribute(MatmulTiledKernel<kType, U>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem); \
      if (e != cudaSuccess) return e;                                                                                \
      attr_set = true;                                                                                               \
    }                                                                                                                \
    pdl::Launch(MatmulTiledKernel<kType, U>, grid, kTiledThreads, smem, stream, w, rows, cols, row_bytes, x, T, y,   \
                w_scale);                                                                                            \
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
  pdl::Launch(DecodeWeightsKernel<kType>, grid, 128, 0, stream, static_cast<const uint8_t*>(w), rows, cols, row_bytes,
              out);
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
    case q::Type::Q4_1: case q::Type::Q5_0: case q::Type::Q5_1: case q::Type::Q8_0:
    case q::Type::Q4_K: case q::Type::Q5_K:
    case q::Type::Q6_K: case q::Type::IQ4_XS: case q::Type::NVFP4:
      return true;
    default:
      return false;
  }
}

#define LS_FOR_EACH_TYPE(X) \
  X(F32) X(F16) X(BF16) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_XS) X(NVFP4)

// Q4_K and Q6_K take the MMA route for every T: on the H200's Llama-3-8B layer set it matched the
// float route at T = 1 (Q4_K 0.166 vs 0.163 ms, Q6_K 0.197 vs 0.207) and beat it 3-7x at T = 2..8
// and 2.6-3x at T = 2048 (docs/kernels.md run 9). Q8_0 joined them in run 17: with the staged
// kernel at T <= 4 its MMA route beat the float route at every T on an H100 (layer set 0.171 vs
// 0.183 ms at T = 1, 0.28 vs 1.32 at T = 8, 16.0 vs 44.6 at T = 2048); its 16x8 kernel alone had
// been 1.6x slower at T = 1 (0.294 vs 0.182 ms, run 9).
bool MatmulAutoUsesMma(uint32_t type_id) {
  return type_id == (uint32_t)q::Type::Q4_K || type_id == (uint32_t)q::Type::Q6_K || type_id == (uint32_t)q::Type::Q8_0;
}

size_t MatmulScratchBytes(uint32_t type_id, int64_t rows, int64_t cols, int64_t T) {
  return MatmulAutoUsesMma(type_id) ? MatmulMmaScratchBytes(type_id, rows, cols, T, MmaConfig::kAutoByT) : 0;
}

cudaError_t LaunchMatmul(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                         const float* x, int64_t T, float* y, float w_scale, MatmulRoute route,
                         cudaStream_t stream, MatmulScratch scratch) {
  if (matmul_internal::OddColsFloat(type_id, cols)) {
    return matmul_internal::LaunchMatmulOddCols(type_id, w, rows, cols, x, T, y, w_scale, stream);
  }
  if (!MatmulSupportsType(type_id) || !ShapeOk(type_id, rows, cols) || T < 1) return cudaErrorInvalidValue;
  if (route == MatmulRoute::kMma || (route == MatmulRoute::kAuto && MatmulAutoUsesMma(type_id))) {
    return LaunchMatmulMma(type_id, w, rows, cols, x, T, y, w_scale, MmaConfig::kAutoByT, stream, scratch);
  }
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
