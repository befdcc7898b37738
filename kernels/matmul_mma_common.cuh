// Internal to the MMA route of the quantized matmul (kernels/matmul_mma.{h,cu}): the per-type
// decode and the per-chunk arithmetic that fixes the bits, shared by its three kernel families
// (matmul_mma_ksplit.cu, matmul_mma_tiled.cu, matmul_mma_staged.cu). Not a public header;
// kernels/matmul_mma.h states the reduction order.
//
// K-split CTA: 8 warps on one tile of 16 * kMR rows x 8 * kNR tokens; warp s runs K segment s. Per chunk
// of 32 elements a lane (g = lane / 4, t = lane % 4) builds
//   - the activation fragments of token g of each n-tile: elements 4t..4t+3 (k-step 0) and
//     16+4t..16+4t+3 (k-step 1) of the chunk, split into binary16 h + l after scaling by the
//     chunk's power of two (max and sum over the chunk by shuffles among the 4 lanes of g);
//   - the weight fragments of rows g and g + 8 of each m-tile: the same element positions, the
//     integer q of each weight as a binary16 (1024 + byte, minus the type's bias: exact).
// The MMA's physical k index p of k-step s maps to chunk element 16s + 4(p/2 % 4) + 2(p >= 8) +
// p % 2 for A and B alike, so the MMA sums the chunk's products (in the hardware's fixed order,
// the same for every T and tile). Segment sums meet in shared memory.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "engine/quant/types.h"
#include "kernels/mma_sync.cuh"
#include "kernels/matmul_mma.h"

namespace lockstep::kernels::mma_internal {

namespace q = ::lockstep::quant;

#define LS_DEV __device__ __forceinline__

constexpr int kSeg = 8;  // K segments = warps per CTA
constexpr int kStChunks = 8;  // chunks of 32 elements per split step / stage: 256 elements for every type
constexpr unsigned kFull = 0xFFFFFFFFu;

// Where the weight bytes are read from: global memory through the read-only path, or the staged
// kernel's shared-memory copy of them (the same bytes, so the same bits).
struct GlobalLd {
  LS_DEV static uint32_t L32(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
  LS_DEV static uint32_t L16(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned short*>(p)); }
};
struct SharedLd {
  LS_DEV static uint32_t L32(const uint8_t* p) { return *reinterpret_cast<const unsigned int*>(p); }
  LS_DEV static uint32_t L16(const uint8_t* p) { return *reinterpret_cast<const unsigned short*>(p); }
};
template <class L>
LS_DEV uint32_t Ld32Via16(const uint8_t* p) { return L::L16(p) | (L::L16(p + 2) << 16); }
LS_DEV float H2F(uint32_t h16) { return __half2float(__ushort_as_half((unsigned short)h16)); }

// Bytes 2 * kHi and 2 * kHi + 1 of v as the binary16 pair (byte - bias), exactly: 0x64bb is
// 1024 + bb, and 1024 + bb - bias is an integer below 2048.
template <int kHi>
LS_DEV uint32_t BytePairToHalf2(uint32_t v, __half2 bias) {
  const uint32_t p = __byte_perm(v, 0x64u, kHi ? 0x4342u : 0x4140u);
  __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&p), bias);
  return *reinterpret_cast<const uint32_t*>(&h);
}

using mma_sync::Mma;

// One row's part of one chunk: the two 4-byte words of biased integers (k-step 0 and 1, this
// lane's elements) and the scales: dl[s] for k-step s (equal for one-scale chunks), -ml.
struct RowChunk {
  uint32_t w[2];
  float dl[2];
  float nml;
};

// Per type: kCPB chunks per block; Header(blk) reads what the block's chunks share (once per
// block and row); chunk sub's part for this lane is Scales<sub>(hdr, rc) (dl and -ml, the same in
// every lane of the row) and Words<sub>(blk, t, rc) (this lane's biased integers): TypeChunk.
template <uint32_t kType>
struct MmaType;

// Q4_K: value = (d * sc) * q - (dmin * m), sub-block = chunk (engine/quant/decode.h).
template <>
struct MmaType<(uint32_t)q::Type::Q4_K> {
  static constexpr int kBE = 256, kBB = 144, kBias = 1024, kCPB = 8;
  static constexpr bool kMin = true, kTwoScales = false;
  struct Hdr { uint32_t h0, sa, sb, sc; };
  template <class L>
  LS_DEV static void Header(const uint8_t* blk, Hdr& h) {
    h.h0 = L::L32(blk), h.sa = L::L32(blk + 4), h.sb = L::L32(blk + 8), h.sc = L::L32(blk + 12);
  }
  template <int kSub>
  LS_DEV static void Scales(const Hdr& h, RowChunk& r) {
    constexpr int sh = 8 * (kSub & 3);
    const uint32_t A = (h.sa >> sh) & 0xFFu, B = (h.sb >> sh) & 0xFFu, C = (h.sc >> sh) & 0xFFu;
    const uint32_t sc = kSub < 4 ? (A & 63u) : ((C & 15u) | ((A >> 2) & 48u));
    const uint32_t m = kSub < 4 ? (B & 63u) : ((C >> 4) | ((B >> 2) & 48u));
    const float dl = __fmul_rn(H2F(h.h0 & 0xFFFFu), (float)sc);
    r.dl[0] = r.dl[1] = dl;
    r.nml = -__fmul_rn(H2F(h.h0 >> 16), (float)m);
  }
  template <int kSub, class L>
  LS_DEV static void Words(const uint8_t* blk, int t, RowChunk& r) {
    const uint8_t* qs = blk + 16 + 32 * (kSub / 2) + 4 * t;
    constexpr int shift = 4 * (kSub & 1);
    r.w[0] = (L::L32(qs) >> shift) & 0x0F0F0F0Fu;
    r.w[1] = (L::L32(qs + 16) >> shift) & 0x0F0F0F0Fu;
  }
};

// Q8_0: value = q * d; 34-byte blocks, so 16-bit loads. Bytes carry q + 128.
template <>
struct MmaType<(uint32_t)q::Type::Q8_0> {
  static constexpr int kBE = 32, kBB = 34, kBias = 1152, kCPB = 1;
  static constexpr bool kMin = false, kTwoScales = false;
  struct Hdr { float d; };
  template <class L>
  LS_DEV static void Header(const uint8_t* blk, Hdr& h) { h.d = H2F(L::L16(blk)); }
  template <int kSub>
  LS_DEV static void Scales(const Hdr& h, RowChunk& r) {
    r.dl[0] = r.dl[1] = h.d;
    r.nml = 0.f;
  }
  template <int kSub, class L>
  LS_DEV static void Words(const uint8_t* blk, int t, RowChunk& r) {
    r.w[0] = Ld32Via16<L>(blk + 2 + 4 * t) ^ 0x80808080u;
    r.w[1] = Ld32Via16<L>(blk + 18 + 4 * t) ^ 0x80808080u;
  }
};

// Q6_K: value = (d * sc) * (q - 32), a scale per 16 elements (k-step). 210-byte blocks, so
// 16-bit loads.
template <>
struct MmaType<(uint32_t)q::Type::Q6_K> {
  static constexpr int kBE = 256, kBB = 210, kBias = 1056, kCPB = 8;
  static constexpr bool kMin = false, kTwoScales = true;
  struct Hdr { float d; uint32_t s[8]; };  // s[k]: scales 2k, 2k+1
  template <class L>
  LS_DEV static void Header(const uint8_t* blk, Hdr& h) {
    h.d = H2F(L::L16(blk + 208));
#pragma unroll
    for (int k = 0; k < 8; ++k) h.s[k] = L::L16(blk + 192 + 2 * k);
  }
  template <int kSub>
  LS_DEV static void Scales(const Hdr& h, RowChunk& r) {
    r.dl[0] = __fmul_rn(h.d, (float)(int8_t)(h.s[kSub] & 0xFFu));
    r.dl[1] = __fmul_rn(h.d, (float)(int8_t)(h.s[kSub] >> 8));
    r.nml = 0.f;
  }
  template <int kSub, class L>
  LS_DEV static void Words(const uint8_t* blk, int t, RowChunk& r) {
    constexpr int j = kSub / 4, r0 = 32 * (kSub % 4);
    const uint8_t* ql = blk + 64 * j + (r0 % 64) + 4 * t;
    const uint8_t* qh = blk + 128 + 32 * j + 4 * t;
    constexpr int lshift = 4 * (r0 / 64), hshift = 2 * (kSub % 4);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t lo = (Ld32Via16<L>(ql + 16 * k) >> lshift) & 0x0F0F0F0Fu;
      const uint32_t hi = (Ld32Via16<L>(qh + 16 * k) >> hshift) & 0x03030303u;
      r.w[k] = lo | (hi << 4);
    }
  }
};

template <uint32_t kType, int kSub, class L>
LS_DEV void TypeChunk(const uint8_t* blk, const typename MmaType<kType>::Hdr& h, int t, RowChunk& r) {
  MmaType<kType>::template Scales<kSub>(h, r);
  MmaType<kType>::template Words<kSub, L>(blk, t, r);
}

// Activation fragments of one token's chunk for this lane (see the file comment).
struct XFrag {
  uint32_t h[2][2], l[2][2];  // [k-step][register]
  float isc, sum;             // 2^-e and the chunk's sum, the same in the 4 lanes of the token
};

// This lane's 8 elements of a token's chunk xc: 4t..4t+3 and 16+4t..16+4t+3.
struct XRaw {
  float4 a, b;
};
LS_DEV XRaw LoadXRaw(const float* xc, int t) {
  return {__ldg(reinterpret_cast<const float4*>(xc + 4 * t)), __ldg(reinterpret_cast<const float4*>(xc + 16 + 4 * t))};
}

// The fragments from the raw elements; the 4 lanes of a token (lanes 4g..4g+3) run it together.
LS_DEV void SplitX(const XRaw& raw, XFrag& f) {
  const float v[8] = {raw.a.x, raw.a.y, raw.a.z, raw.a.w, raw.b.x, raw.b.y, raw.b.z, raw.b.w};
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(v[i]));
  m = fmaxf(m, __shfl_xor_sync(kFull, m, 1));
  m = fmaxf(m, __shfl_xor_sync(kFull, m, 2));
  float p = __fadd_rn(__fadd_rn(__fadd_rn(v[0], v[1]), __fadd_rn(v[2], v[3])),
                      __fadd_rn(__fadd_rn(v[4], v[5]), __fadd_rn(v[6], v[7])));
  p = __fadd_rn(p, __shfl_xor_sync(kFull, p, 1));
  f.sum = __fadd_rn(p, __shfl_xor_sync(kFull, p, 2));
  // m in [2^e, 2^(e+1)) -> scaled max in [2^14, 2^15): binary16 keeps 11 bits of every element.
  const int e = (int)((__float_as_uint(m) >> 23) & 0xFFu) - 127;
  const int sh = min(max(14 - e, -126), 126);
  const float fs = __uint_as_float((uint32_t)(127 + sh) << 23);
  f.isc = __uint_as_float((uint32_t)(127 - sh) << 23);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float x0 = __fmul_rn(v[4 * k + 2 * r], fs), x1 = __fmul_rn(v[4 * k + 2 * r + 1], fs);
      const __half2 hh = __floats2half2_rn(x0, x1);
      const float2 hf = __half22float2(hh);
      const __half2 ll = __floats2half2_rn(__fsub_rn(x0, hf.x), __fsub_rn(x1, hf.y));
      f.h[k][r] = *reinterpret_cast<const uint32_t*>(&hh);
      f.l[k][r] = *reinterpret_cast<const uint32_t*>(&ll);
    }
  }
}

LS_DEV void LoadX(const float* xc, int t, XFrag& f) { SplitX(LoadXRaw(xc, t), f); }

// Activation fragments of the kNR n-tiles for one chunk, as the MMA wants them: bh/bl[ni] =
// h/l registers {k-step 0 reg 0, k-step 0 reg 1, k-step 1 reg 0, k-step 1 reg 1} of token g, and
// isc/xs[ni][j] = 2^-e and the chunk sum of token 2t + j (the C fragment's columns).
template <int kNR>
struct XTile {
  uint32_t bh[kNR][4], bl[kNR][4];
  float isc[kNR][2], xs[kNR][2];
};

// The MMA's A fragments of one m-tile from the two rows' words.
LS_DEV void HalfFrags(const RowChunk (&rc)[2], __half2 bias, uint32_t (&a)[2][4]) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // [k-step]: rows g, g+8 x element pairs (4t, 4t+1), (4t+2, 4t+3)
    a[k][0] = BytePairToHalf2<0>(rc[0].w[k], bias);
    a[k][1] = BytePairToHalf2<0>(rc[1].w[k], bias);
    a[k][2] = BytePairToHalf2<1>(rc[0].w[k], bias);
    a[k][3] = BytePairToHalf2<1>(rc[1].w[k], bias);
  }
}

// The route's arithmetic per chunk (the bits): the weight fragments of one m-tile (WeightFrags) and
// the MMAs and scale fmas of one (m-tile, n-tile) (TileMath). ChunkMath runs them m-tile by
// m-tile; the tiled kernel decodes its m-tiles first and walks the n-tiles outside (the same
// operations on every output, in the same order).
template <uint32_t kType, int kSub, class L>
LS_DEV void WeightFrags(const uint8_t* w0, const uint8_t* w1, const typename MmaType<kType>::Hdr& h0,
                        const typename MmaType<kType>::Hdr& h1, int t, __half2 bias, RowChunk (&rc)[2],
                        uint32_t (&a)[2][4]) {
  TypeChunk<kType, kSub, L>(w0, h0, t, rc[0]);
  TypeChunk<kType, kSub, L>(w1, h1, t, rc[1]);
  HalfFrags(rc, bias, a);
}

// kCols 1: only the C fragment's even columns are computed (T = 1: token 2t + 1 >= 1 is never
// stored), the others stay 0; the computed ones are exactly those of kCols 2.
template <uint32_t kType, int kCols>
LS_DEV void TileMath(const uint32_t (&a)[2][4], const RowChunk (&rc)[2], const uint32_t* bh, const uint32_t* bl,
                     const float* isc, const float* xs, float (&o4)[4]) {
  using WT = MmaType<kType>;
  // S over the chunk's two k-steps, or one S per k-step for the two-scale types (Q6_K).
  float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
  float (&sk1)[4] = WT::kTwoScales ? s1 : s0;
  Mma(s0, a[0], bh[0], bh[1]);
  Mma(s0, a[0], bl[0], bl[1]);
  Mma(sk1, a[1], bh[2], bh[3]);
  Mma(sk1, a[1], bl[2], bl[3]);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (kCols == 1 && i % 2 == 1) continue;
    const RowChunk& r = rc[i / 2];
    float& o = o4[i];
    o = __fmaf_rn(r.dl[0], __fmul_rn(s0[i], isc[i % 2]), o);
    if constexpr (WT::kTwoScales) o = __fmaf_rn(r.dl[1], __fmul_rn(s1[i], isc[i % 2]), o);
    if constexpr (WT::kMin) o = __fmaf_rn(r.nml, xs[i % 2], o);
  }
}

// Chunk kSub of block b: weight fragments, the MMAs and the scale fmas of every tile.
template <uint32_t kType, int kMR, int kNR, int kSub, class L = GlobalLd, int kCols = 2>
LS_DEV void ChunkMath(const uint8_t* const (&wrow)[kMR][2], int64_t b, const typename MmaType<kType>::Hdr (&hdr)[kMR][2],
                      const XTile<kNR>& xt, int t, __half2 bias, float (&acc)[kMR][kNR][4]) {
  using WT = MmaType<kType>;
#pragma unroll
  for (int mi = 0; mi < kMR; ++mi) {
    RowChunk rc[2];
    uint32_t a[2][4];
    WeightFrags<kType, kSub, L>(wrow[mi][0] + b * WT::kBB, wrow[mi][1] + b * WT::kBB, hdr[mi][0], hdr[mi][1], t, bias, rc, a);
#pragma unroll
    for (int ni = 0; ni < kNR; ++ni)
      TileMath<kType, kCols>(a, rc, xt.bh[ni], xt.bl[ni], xt.isc[ni], xt.xs[ni], acc[mi][ni]);
  }
}


// The split once per launch (kernels/matmul_mma.h, MatmulScratch): SplitKernel writes every (token,
// chunk)'s fragments to the caller's scratch, and the K-split kernel's warps read them there
// instead of splitting their tokens' chunks themselves (which repeats the split in every CTA of a
// token column: rows / (16 kMR) times). SplitKernel runs SplitX on the same raw elements with the
// same 4 lanes per item, so the fragments, and the bits, are those of the split in the kernel.
struct PreSplit {
  const uint4* h = nullptr;    // [T][nch][4]: token n, chunk c, lane part t at (n * nch + c) * 4 + t
  const uint4* l = nullptr;
  const float2* sx = nullptr;  // [T][nch]: (2^-e, chunk sum)
  int64_t nch = 0;             // chunks per row: cols / 32
  __host__ __device__ static constexpr int64_t Bytes(int64_t T, int64_t cols) { return T * (cols / 32) * (2 * 64 + 8); }
};

// Where kTiledSplitK's segment sums start in scratch: after the split's fragments (pre), 16-byte
// aligned.
inline int64_t TiledSplitKOffset(bool pre, int64_t T, int64_t cols) { return pre ? (PreSplit::Bytes(T, cols) + 15) / 16 * 16 : 0; }
inline int64_t TiledSplitKBytes(int64_t T, int64_t rows) { return (int64_t)kSeg * T * rows * 4; }

// SplitKernel into scratch (>= PreSplit::Bytes(T, cols), 16-byte aligned: LaunchTyped checks),
// and ps pointing at it (matmul_mma_ksplit.cu).
cudaError_t LaunchSplit(const float* x, int64_t T, int64_t cols, MatmulScratch scratch, PreSplit& ps,
                        cudaStream_t stream);

LS_DEV void CpAsync16(void* dst, const void* src) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
LS_DEV void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kN>
LS_DEV void CpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory"); }
// Cp.async of src_bytes (1..16) from src, the rest of the 16 zero-filled (no read past a span).
LS_DEV void CpAsync16Z(void* dst, const void* src, int src_bytes) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
}

// The group form of the K-split kernel (LaunchMatmulMmaGroup): gr.n matrices of one type and
// column count read the same x; the grid's row tiles are matrix 0's, then matrix 1's, ...; n == 0
// for a single matrix. tiles[i] is filled by the launcher.
struct GroupRows {
  const uint8_t* w[kMatmulGroupMax] = {};
  int64_t rows[kMatmulGroupMax] = {};
  float* y[kMatmulGroupMax] = {};
  int64_t tiles[kMatmulGroupMax] = {};
  int n = 0;
};

// The kernel families, instantiated for Q4_K, Q8_0 and Q6_K in their files. Shapes, scratch and
// configuration are checked by LaunchMatmulMma.
template <uint32_t kType>
cudaError_t LaunchKSplit(MmaConfig cfg, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T,
                         float* y, float w_scale, MatmulScratch scratch, cudaStream_t stream,
                         const GroupRows& gr = GroupRows{});
// pre: the split once per launch into scratch; split_k: MmaConfig::kTiledSplitK, its segment sums
// in scratch at TiledSplitKOffset (8 * T * rows floats).
template <uint32_t kType>
cudaError_t LaunchTiled(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                        float w_scale, MatmulScratch scratch, bool pre, bool split_k, cudaStream_t stream);
template <uint32_t kType>
cudaError_t LaunchStaged(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                         float w_scale, cudaStream_t stream);
template <uint32_t kType>
cudaError_t LaunchExpertsTyped(const uint8_t* w, int64_t n_expert, int64_t rpe, int64_t cols, const int32_t* ids,
                               int64_t n, int64_t k, bool x_per_token, const float* x, float* y, cudaStream_t stream);

}  // namespace lockstep::kernels::mma_internal
