// The MMA route of the quantized matmul (kernels/matmul_mma.h states the reduction order).
//
// CTA: 8 warps on one tile of 16 * kMR rows x 8 * kNR tokens; warp s runs K segment s. Per chunk
// of 32 elements a lane (g = lane / 4, t = lane % 4) builds
//   - the activation fragments of token g of each n-tile: elements 4t..4t+3 (k-step 0) and
//     16+4t..16+4t+3 (k-step 1) of the chunk, split into binary16 h + l after scaling by the
//     chunk's power of two (max and sum over the chunk by shuffles among the 4 lanes of g);
//   - the weight fragments of rows g and g + 8 of each m-tile: the same element positions, the
//     integer q of each weight as a binary16 (1024 + byte, minus the type's bias: exact).
// The MMA's physical k index p of k-step s maps to chunk element 16s + 4(p/2 % 4) + 2(p >= 8) +
// p % 2 for A and B alike, so the MMA sums the chunk's products (in the hardware's fixed order,
// the same for every T and tile). Segment sums meet in shared memory.
#include "kernels/matmul_mma.h"

#include <cuda_fp16.h>

#include <utility>

#include "engine/quant/types.h"

namespace lockstep::kernels {
namespace {

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

LS_DEV void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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

// K-split kernel: each warp builds its own tokens' fragments (LoadX, shuffles for the columns).
template <uint32_t kType, int kMR, int kNR, int kSub>
LS_DEV void OneChunk(const uint8_t* const (&wrow)[kMR][2], int64_t b, const typename MmaType<kType>::Hdr (&hdr)[kMR][2],
                     const float* const (&xrow)[kNR], int t, __half2 bias, float (&acc)[kMR][kNR][4]) {
  using WT = MmaType<kType>;
  const int64_t c = b * WT::kCPB + kSub;
  XTile<kNR> xt;
#pragma unroll
  for (int ni = 0; ni < kNR; ++ni) {
    XFrag f;
    LoadX(xrow[ni] + 32 * c, t, f);
    xt.bh[ni][0] = f.h[0][0], xt.bh[ni][1] = f.h[0][1], xt.bh[ni][2] = f.h[1][0], xt.bh[ni][3] = f.h[1][1];
    xt.bl[ni][0] = f.l[0][0], xt.bl[ni][1] = f.l[0][1], xt.bl[ni][2] = f.l[1][0], xt.bl[ni][3] = f.l[1][1];
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // token 2t + j of the n-tile: computed by lane 4 (2t + j)
      xt.isc[ni][j] = __shfl_sync(kFull, f.isc, 8 * t + 4 * j);
      xt.xs[ni][j] = __shfl_sync(kFull, f.sum, 8 * t + 4 * j);
    }
  }
  ChunkMath<kType, kMR, kNR, kSub>(wrow, b, hdr, xt, t, bias, acc);
}

template <uint32_t kType, int kMR, int kNR, int... kSubs>
LS_DEV void ChunksOfBlock(std::integer_sequence<int, kSubs...>, const uint8_t* const (&wrow)[kMR][2], int64_t b,
                          const typename MmaType<kType>::Hdr (&hdr)[kMR][2], const float* const (&xrow)[kNR], int t,
                          __half2 bias, float (&acc)[kMR][kNR][4]) {
  (OneChunk<kType, kMR, kNR, kSubs>(wrow, b, hdr, xrow, t, bias, acc), ...);
}

// The split once per (token, chunk) of a step of 8 chunks (small T, one n-tile): lane group g
// splits items g, g + 8, ... of the tt * nc items into the warp's fragment store, and every chunk
// of the step then reads its fragments from there (the same values SplitX gives each lane in
// OneChunk, so the same bits; at T = 1 one split per chunk instead of eight).
struct SplitStore {
  static constexpr int kTokStride = kStChunks * 4 + 1;  // uint4 per token (+1: tokens on other banks)
  uint4* h;     // [tt][kTokStride]: chunk c, lane part t at c * 4 + t
  uint4* l;
  float2* sx;   // [tt][kStChunks]: (2^-e, chunk sum)
  __host__ __device__ static constexpr int Bytes(int tt) { return tt * (2 * kTokStride * 16 + kStChunks * 8); }
  LS_DEV SplitStore(uint8_t* base, int tt)
      : h(reinterpret_cast<uint4*>(base)), l(h + tt * kTokStride), sx(reinterpret_cast<float2*>(l + tt * kTokStride)) {}
};

LS_DEV void SplitStep(const SplitStore& st, const float* x, int64_t cols, int tt, int64_t c_first, int nc, int g,
                      int t) {
  const int items = tt * nc;
  __syncwarp();  // the previous step's reads are done
  for (int it0 = 0; it0 < items; it0 += 8) {  // every lane runs every round: SplitX shuffles
    const int it = min(it0 + g, items - 1);
    const int n = it / nc, c = it % nc;
    XFrag f;
    LoadX(x + n * cols + 32 * (c_first + c), t, f);
    if (it0 + g < items) {
      st.h[n * SplitStore::kTokStride + 4 * c + t] = make_uint4(f.h[0][0], f.h[0][1], f.h[1][0], f.h[1][1]);
      st.l[n * SplitStore::kTokStride + 4 * c + t] = make_uint4(f.l[0][0], f.l[0][1], f.l[1][0], f.l[1][1]);
      if (t == 0) st.sx[n * kStChunks + c] = make_float2(f.isc, f.sum);
    }
  }
  __syncwarp();
}

// Chunk kSub of block b, its fragments from the store (chunk lc0 + kSub of the step).
template <uint32_t kType, int kMR, int kCols, int kSub>
LS_DEV void StoredChunk(const uint8_t* const (&wrow)[kMR][2], int64_t b, const typename MmaType<kType>::Hdr (&hdr)[kMR][2],
                        const SplitStore& st, int lc0, int tt, int g, int t, __half2 bias, float (&acc)[kMR][1][4]) {
  const int lc = lc0 + kSub;
  XTile<1> xt;
  const int ng = min(g, tt - 1);
  const uint4 h = st.h[ng * SplitStore::kTokStride + 4 * lc + t], l = st.l[ng * SplitStore::kTokStride + 4 * lc + t];
  xt.bh[0][0] = h.x, xt.bh[0][1] = h.y, xt.bh[0][2] = h.z, xt.bh[0][3] = h.w;
  xt.bl[0][0] = l.x, xt.bl[0][1] = l.y, xt.bl[0][2] = l.z, xt.bl[0][3] = l.w;
#pragma unroll
  for (int j = 0; j < 2; ++j) {  // token 2t + j of the n-tile (the C fragment's columns)
    const float2 v = st.sx[min(2 * t + j, tt - 1) * kStChunks + lc];
    xt.isc[0][j] = v.x, xt.xs[0][j] = v.y;
  }
  ChunkMath<kType, kMR, 1, kSub, GlobalLd, kCols>(wrow, b, hdr, xt, t, bias, acc);
}

template <uint32_t kType, int kMR, int kCols, int... kSubs>
LS_DEV void StoredChunksOfBlock(std::integer_sequence<int, kSubs...>, const uint8_t* const (&wrow)[kMR][2], int64_t b,
                                const typename MmaType<kType>::Hdr (&hdr)[kMR][2], const SplitStore& st, int lc0,
                                int tt, int g, int t, __half2 bias, float (&acc)[kMR][1][4]) {
  (StoredChunk<kType, kMR, kCols, kSubs>(wrow, b, hdr, st, lc0, tt, g, t, bias, acc), ...);
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

// One warp per 8 items (token, chunk) = lane group g; the 4 lanes of a group run SplitX together.
__global__ void __launch_bounds__(kSeg * 32) SplitKernel(const float* __restrict__ x, int64_t T, int64_t cols,
                                                         uint4* __restrict__ h, uint4* __restrict__ l,
                                                         float2* __restrict__ sx) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t nch = cols / 32, items = T * nch;
  const int64_t it0 = ((int64_t)blockIdx.x * kSeg + threadIdx.x / 32) * 8;
  if (it0 >= items) return;  // whole warps only: every lane of a live warp runs the shuffles
  const int64_t it = min(it0 + g, items - 1);
  XFrag f;
  LoadX(x + (it / nch) * cols + 32 * (it % nch), t, f);
  if (it0 + g < items) {
    h[it * 4 + t] = make_uint4(f.h[0][0], f.h[0][1], f.h[1][0], f.h[1][1]);
    l[it * 4 + t] = make_uint4(f.l[0][0], f.l[0][1], f.l[1][0], f.l[1][1]);
    if (t == 0) sx[it] = make_float2(f.isc, f.sum);
  }
}

// SplitKernel into scratch (>= PreSplit::Bytes(T, cols), 16-byte aligned: LaunchTyped checks),
// and ps pointing at it.
cudaError_t LaunchSplit(const float* x, int64_t T, int64_t cols, MatmulScratch scratch, PreSplit& ps,
                        cudaStream_t stream) {
  const int64_t nch = cols / 32, items = T * nch;
  uint4* h = static_cast<uint4*>(scratch.data);
  uint4* l = h + items * 4;
  float2* sx = reinterpret_cast<float2*>(l + items * 4);
  const int64_t blocks = (items + 8 * kSeg - 1) / (8 * kSeg);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  SplitKernel<<<(unsigned)blocks, kSeg * 32, 0, stream>>>(x, T, cols, h, l, sx);
  ps.h = h, ps.l = l, ps.sx = sx, ps.nch = nch;
  return cudaGetLastError();
}

// Chunk kSub of block b with its fragments read from the split (OneChunk's values: token xn[ni]
// of lane group g, and the C fragment's columns' tokens cn[ni][j] = token 2t + j of the n-tile).
template <uint32_t kType, int kMR, int kNR, int kSub>
LS_DEV void PreChunk(const uint8_t* const (&wrow)[kMR][2], int64_t b, const typename MmaType<kType>::Hdr (&hdr)[kMR][2],
                     const PreSplit& ps, const int64_t (&xn)[kNR], const int64_t (&cn)[kNR][2], int t, __half2 bias,
                     float (&acc)[kMR][kNR][4]) {
  using WT = MmaType<kType>;
  const int64_t c = b * WT::kCPB + kSub;
  XTile<kNR> xt;
#pragma unroll
  for (int ni = 0; ni < kNR; ++ni) {
    const uint4 h = __ldg(ps.h + (xn[ni] * ps.nch + c) * 4 + t), l = __ldg(ps.l + (xn[ni] * ps.nch + c) * 4 + t);
    xt.bh[ni][0] = h.x, xt.bh[ni][1] = h.y, xt.bh[ni][2] = h.z, xt.bh[ni][3] = h.w;
    xt.bl[ni][0] = l.x, xt.bl[ni][1] = l.y, xt.bl[ni][2] = l.z, xt.bl[ni][3] = l.w;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float2 v = __ldg(ps.sx + cn[ni][j] * ps.nch + c);
      xt.isc[ni][j] = v.x, xt.xs[ni][j] = v.y;
    }
  }
  ChunkMath<kType, kMR, kNR, kSub>(wrow, b, hdr, xt, t, bias, acc);
}

template <uint32_t kType, int kMR, int kNR, int... kSubs>
LS_DEV void PreChunksOfBlock(std::integer_sequence<int, kSubs...>, const uint8_t* const (&wrow)[kMR][2], int64_t b,
                             const typename MmaType<kType>::Hdr (&hdr)[kMR][2], const PreSplit& ps,
                             const int64_t (&xn)[kNR], const int64_t (&cn)[kNR][2], int t, __half2 bias,
                             float (&acc)[kMR][kNR][4]) {
  (PreChunk<kType, kMR, kNR, kSubs>(wrow, b, hdr, ps, xn, cn, t, bias, acc), ...);
}

// The expert-indexed form of the K-split kernel (LaunchMatmulMmaExperts): ids == nullptr for a
// plain matmul.
struct ExpertRows {
  const int32_t* ids = nullptr;  // [n] expert of (token, rank) row i
  int64_t n_expert = 0, k = 1;
  bool x_per_token = false;      // x row i / k, else i
};

template <uint32_t kType, int kMR, int kNR, bool kOnce = false, bool kT1 = false, bool kPre = false>
__global__ void __launch_bounds__(kSeg * 32)
MatmulMmaKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                const float* __restrict__ x, int64_t T, float* __restrict__ y, float w_scale,
                ExpertRows ex, PreSplit ps) {
  using WT = MmaType<kType>;
  static_assert(!kOnce || kNR == 1, "the split once serves one n-tile");
  static_assert(!(kOnce && kPre), "one source of fragments");
  static_assert(!kT1 || kOnce, "the T = 1 form is a form of the split once");
  extern __shared__ __align__(16) float red[];  // [kSeg][kMR * kNR * 4][32], then with kOnce a SplitStore per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row0 = (int64_t)blockIdx.x * 16 * kMR;
  int64_t tok0 = (int64_t)blockIdx.y * 8 * kNR;
  if (ex.ids != nullptr) {  // the expert-indexed form: CTA row blockIdx.y is (token, rank) row i
    const int64_t i = blockIdx.y;
    const int32_t e = ex.ids[i];
    x += (ex.x_per_token ? i / ex.k : i) * cols;
    y += i * rows;
    tok0 = 0, T = 1;
    if (e < 0 || e >= ex.n_expert) {  // a NaN row, never a read outside w (moe.h)
      for (int r = threadIdx.x; r < 16 * kMR; r += kSeg * 32)
        if (row0 + r < rows) y[row0 + r] = __int_as_float(0x7fc00000);
      return;
    }
    w += (int64_t)e * rows * row_bytes;
  }
  const int64_t nblk = cols / (32 * WT::kCPB);
  const int64_t b_begin = warp * nblk / kSeg, b_end = (warp + 1) * nblk / kSeg;
  const __half2 bias = __float2half2_rn((float)WT::kBias);
  // Rows and tokens past the end read the last valid one (results are not stored).
  const uint8_t* wrow[kMR][2];
#pragma unroll
  for (int mi = 0; mi < kMR; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + 16 * mi + g + 8 * h;
      wrow[mi][h] = w + (r < rows ? r : rows - 1) * row_bytes;
    }
  }
  const float* xrow[kNR];
#pragma unroll
  for (int ni = 0; ni < kNR; ++ni) {
    const int64_t n = tok0 + 8 * ni + g;
    xrow[ni] = x + (n < T ? n : T - 1) * cols;
  }
  [[maybe_unused]] int64_t xn[kNR], cn[kNR][2];  // kPre: the tokens of xrow and of the C fragment's columns
  if constexpr (kPre) {
#pragma unroll
    for (int ni = 0; ni < kNR; ++ni) {
      xn[ni] = min(tok0 + 8 * ni + g, T - 1);
#pragma unroll
      for (int j = 0; j < 2; ++j) cn[ni][j] = min(tok0 + 8 * ni + 2 * t + j, T - 1);
    }
  }
  float acc[kMR][kNR][4];
#pragma unroll
  for (int mi = 0; mi < kMR; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNR; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mi][ni][i] = 0.f;

  constexpr int kAcc = kMR * kNR * 4;
  const int tt = (int)min((int64_t)8, T - tok0);
  [[maybe_unused]] const SplitStore st(reinterpret_cast<uint8_t*>(red + kSeg * kAcc * 32) + warp * SplitStore::Bytes(tt), tt);
  for (int64_t b = b_begin; b < b_end; ++b) {
    [[maybe_unused]] const int lc0 = (int)((b - b_begin) * WT::kCPB % kStChunks);
    if constexpr (kOnce) {
      if (lc0 == 0) SplitStep(st, x + tok0 * cols, cols, tt, b * WT::kCPB, (int)min((int64_t)kStChunks, (b_end - b) * WT::kCPB), g, t);
    }
    typename WT::Hdr hdr[kMR][2];
#pragma unroll
    for (int mi = 0; mi < kMR; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) WT::template Header<GlobalLd>(wrow[mi][h] + b * WT::kBB, hdr[mi][h]);
    if constexpr (kOnce) {
      StoredChunksOfBlock<kType, kMR, kT1 ? 1 : 2>(std::make_integer_sequence<int, WT::kCPB>{}, wrow, b, hdr, st, lc0, tt,
                                                   g, t, bias, acc);
    } else if constexpr (kPre) {
      PreChunksOfBlock<kType, kMR, kNR>(std::make_integer_sequence<int, WT::kCPB>{}, wrow, b, hdr, ps, xn, cn, t, bias, acc);
    } else {
      ChunksOfBlock<kType, kMR, kNR>(std::make_integer_sequence<int, WT::kCPB>{}, wrow, b, hdr, xrow, t, bias, acc);
    }
  }
  // Segment sums through shared memory, then the segment chain and the store.
#pragma unroll
  for (int mi = 0; mi < kMR; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNR; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[(warp * kAcc + (mi * kNR + ni) * 4 + i) * 32 + lane] = acc[mi][ni][i];
  __syncthreads();
  for (int e = threadIdx.x; e < kAcc * 32; e += kSeg * 32) {
    const int idx = e / 32, ln = e % 32;
    float s[kSeg];
#pragma unroll
    for (int k = 0; k < kSeg; ++k) s[k] = red[(k * kAcc + idx) * 32 + ln];
    float v = s[0];
#pragma unroll
    for (int k = 1; k < kSeg; ++k) v = __fadd_rn(v, s[k]);  // the segment chain (matmul_mma.h)
    const int mi = idx / 4 / kNR, ni = idx / 4 % kNR, i = idx % 4;
    const int64_t r = row0 + 16 * mi + ln / 4 + 8 * (i / 2);
    const int64_t n = tok0 + 8 * ni + 2 * (ln % 4) + (i % 2);
    if (r < rows && n < T) y[n * rows + r] = __fmul_rn(v, w_scale);
  }
}

// Tiled kernel (large T; docs/kernels.md "MMA route", run 16): 8 warps as 4 (rows) x 2 (tokens),
// warp tile 32 x 32 (2 m-tiles x 4 n-tiles), CTA tile 128 x 64. Each warp runs the 8 K segments in
// turn: acc from 0 per segment, then tot = acc (segment 0) or tot + acc, the K-split kernel's
// segment chain (an empty segment adds its 0, as there). The memory traffic: the CTA's 128 weight
// rows stream through a ring of two shared-memory stages of 256 elements (one block of Q4_K or
// Q6_K, eight of Q8_0) by cp.async, one stage ahead, and each stage's scales (Scales: dl, -ml) are
// decoded once per (row, chunk) into a table when it lands; the activations of its 64 tokens are
// split two chunks at a time (thread = token tid / 4, lane part tid % 4: the K-split kernel's
// SplitX) into a double buffer of fragments, their raw loads issued one step ahead. One CTA
// barrier per step of two chunks, one more per stage. TileMath runs on the same words, scales and
// fragments as the K-split kernel's, so the bits are its bits (matmul-mma-invariance).
constexpr int kTM = 2, kTN = 4, kTWM = 4, kTWN = 2;
constexpr int kTBM = 16 * kTM * kTWM, kTBN = 8 * kTN * kTWN;  // 128 rows, 64 tokens
constexpr int kTStep = 2;                                      // chunks per activation step
static_assert(kTBN * 4 == kSeg * 32, "one staging thread per (token, lane part)");
static_assert(kStChunks % kTStep == 0, "a weight stage starts on a step");

template <uint32_t kType>
struct TiledGeom {
  using WT = MmaType<kType>;
  static constexpr int kBPS = kStChunks / WT::kCPB;          // blocks per weight stage
  static constexpr int kSpan = kBPS * WT::kBB;               // a row's bytes per stage
  // A row's stride in the ring, in 16-byte units, odd (rows g on distinct banks): the span's own
  // units when every row's span starts 16-byte aligned, else the units around a misaligned span.
  static constexpr int kUnitsAligned = ((kSpan + 15) / 16) | 1, kUnitsAny = ((kSpan + 30) / 16) | 1;
  static constexpr int kXFrag = kTStep * kTBN * 4;           // uint4 per h or l buffer: [chunk][token][part]
  static constexpr int kXBytes = 2 * kXFrag * 16 + 2 * kTStep * kTBN * 4;  // h, l, isc, sum of one step
  static constexpr int kSBytes = kStChunks * kTBM * 8;      // the stage's scales: [chunk][row] float2
  // Q4_K keeps the segment total in shared memory and fits two CTAs an SM (aligned rows); Q6_K
  // and Q8_0 keep it in registers, one CTA an SM (docs/kernels.md run 16: spills otherwise).
  static constexpr bool kTotSmem = kType == (uint32_t)q::Type::Q4_K;
  static constexpr int kMinBlocks = kTotSmem ? 2 : 1;
  static constexpr int kTotBytes = kTotSmem ? kSeg * kTM * kTN * 4 * 32 * 4 : 0;  // per warp [value][lane]
  __host__ __device__ static constexpr int Bytes(int units) { return 2 * kTBM * 16 * units + 2 * kXBytes + kSBytes + kTotBytes; }
};

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

template <uint32_t kType, bool kPre>
struct TiledCtx {
  using WT = MmaType<kType>;
  using G = TiledGeom<kType>;
  const uint8_t* w;
  int64_t rows, row_bytes, row0, nblk, nch, nws;
  int rstride, wbytes;  // a row's stride and a stage's bytes in the ring
  uint8_t* wring;  // [2][kTBM][rstride]
  uint8_t* xbuf;   // [2] steps of kXBytes
  float2* stab;    // [kStChunks][kTBM]: (dl, -ml) or, two-scale types, (dl of k-step 0, of k-step 1)
  const float* xs_row;
  int st_tok, st_t, wm, wn, g, t;
  XRaw raw[kTStep];
  // kPre: the staging thread's fragments of the next step, read from the split once per launch.
  PreSplit ps;
  int64_t st_n;  // the staging thread's token (clamped, as xs_row)
  uint4 ph[kTStep], pl[kTStep];
  float2 psx[kTStep];

  LS_DEV uint4* Xh(int buf) const { return reinterpret_cast<uint4*>(xbuf + buf * G::kXBytes); }
  LS_DEV uint4* Xl(int buf) const { return Xh(buf) + G::kXFrag; }
  LS_DEV float* Xi(int buf) const { return reinterpret_cast<float*>(Xl(buf) + G::kXFrag); }
  LS_DEV float* Xs(int buf) const { return Xi(buf) + kTStep * kTBN; }

  // Weight stage j (blocks [j * kBPS, ...)) of the CTA's rows into ring slot j & 1.
  LS_DEV void IssueW(int64_t j) const {
    if (j >= nws) return;
    uint8_t* sw = wring + (j & 1) * wbytes;
    const int nb = (int)min((int64_t)G::kBPS, nblk - j * G::kBPS);
    const int units = rstride / 16;
    for (int u = threadIdx.x; u < kTBM * units; u += kSeg * 32) {
      const int r = u / units, k = u % units;
      const int64_t rr = min(row0 + r, rows - 1);
      const uintptr_t src = reinterpret_cast<uintptr_t>(w + rr * row_bytes + j * G::kBPS * WT::kBB);
      const uintptr_t us = (src & ~(uintptr_t)15) + 16 * (uintptr_t)k, end = src + (uintptr_t)nb * WT::kBB;
      if (us < end) CpAsync16Z(sw + r * rstride + 16 * k, reinterpret_cast<const void*>(us), (int)min((uintptr_t)16, end - us));
    }
    CpAsyncCommit();
  }
  // Where block b's bytes of row (16 mi + g + 8 h of this warp's rows) lie in the ring.
  LS_DEV const uint8_t* WRow(int64_t j, int mi, int h) const {
    const int r = 16 * kTM * wm + 16 * mi + g + 8 * h;
    const int64_t rr = min(row0 + r, rows - 1);
    const uintptr_t src = reinterpret_cast<uintptr_t>(w + rr * row_bytes + j * G::kBPS * WT::kBB);
    return wring + (j & 1) * wbytes + r * rstride + (src & 15);
  }
  LS_DEV void LoadRaw(int64_t s) {
#pragma unroll
    for (int kc = 0; kc < kTStep; ++kc) {
      const int64_t c = kTStep * s + kc;
      if (c >= nch) continue;
      if constexpr (kPre) {
        ph[kc] = __ldg(ps.h + (st_n * nch + c) * 4 + st_t), pl[kc] = __ldg(ps.l + (st_n * nch + c) * 4 + st_t);
        if (st_t == 0) psx[kc] = __ldg(ps.sx + st_n * nch + c);
      } else {
        raw[kc] = LoadXRaw(xs_row + 32 * c, st_t);
      }
    }
  }
  // Step s: split its raw activations into buffer s & 1, wait for a weight stage that starts
  // here, the barrier, then issue the next weight stage and step s + 1's raw loads.
  LS_DEV void Step(int64_t s) {
    const int buf = (int)(s & 1);
#pragma unroll
    for (int kc = 0; kc < kTStep; ++kc) {
      if (kPre && kTStep * s + kc < nch) {
        Xh(buf)[(kc * kTBN + st_tok) * 4 + st_t] = ph[kc];
        Xl(buf)[(kc * kTBN + st_tok) * 4 + st_t] = pl[kc];
        if (st_t == 0) Xi(buf)[kc * kTBN + st_tok] = psx[kc].x, Xs(buf)[kc * kTBN + st_tok] = psx[kc].y;
      } else if (kTStep * s + kc < nch) {  // uniform over the CTA: SplitX's shuffles see every lane
        XFrag f;
        SplitX(raw[kc], f);
        Xh(buf)[(kc * kTBN + st_tok) * 4 + st_t] = make_uint4(f.h[0][0], f.h[0][1], f.h[1][0], f.h[1][1]);
        Xl(buf)[(kc * kTBN + st_tok) * 4 + st_t] = make_uint4(f.l[0][0], f.l[0][1], f.l[1][0], f.l[1][1]);
        if (st_t == 0) Xi(buf)[kc * kTBN + st_tok] = f.isc, Xs(buf)[kc * kTBN + st_tok] = f.sum;
      }
    }
    const bool wstart = (kTStep * s) % kStChunks == 0;
    if (wstart) CpAsyncWait<0>();
    __syncthreads();
    LoadRaw(s + 1);
    if (wstart) {  // the stage's scales, once per (row, chunk) for the CTA
      const int64_t j = kTStep * s / kStChunks;
      IssueW(j + 1);
      const int r = threadIdx.x % kTBM, half = threadIdx.x / kTBM;
      const int nb = (int)min((int64_t)G::kBPS, nblk - j * G::kBPS);
      const int64_t rr = min(row0 + r, rows - 1);
      const uintptr_t src = reinterpret_cast<uintptr_t>(w + rr * row_bytes + j * G::kBPS * WT::kBB);
      ScalesOf(std::make_integer_sequence<int, kStChunks>{}, wring + (j & 1) * wbytes + r * rstride + (src & 15),
               r, half, nb);
      __syncthreads();
    }
  }
  // Chunk kC of the stage for row r, by the half of the CTA that owns it (chunks 4 half..).
  template <int kC>
  LS_DEV void ScaleOf(const uint8_t* sw, int r, int half, int nb) const {
    constexpr int lb = kC / WT::kCPB, sub = kC % WT::kCPB;
    static_assert(kSeg * 32 == 2 * kTBM, "two threads per row");
    if (kC / (kStChunks / 2) != half || lb >= nb) return;
    typename WT::Hdr h;
    WT::template Header<SharedLd>(sw + lb * WT::kBB, h);
    RowChunk rc;
    WT::template Scales<sub>(h, rc);
    stab[kC * kTBM + r] = make_float2(rc.dl[0], WT::kTwoScales ? rc.dl[1] : rc.nml);
  }
  template <int... kCs>
  LS_DEV void ScalesOf(std::integer_sequence<int, kCs...>, const uint8_t* sw, int r, int half, int nb) const {
    (ScaleOf<kCs>(sw, r, half, nb), ...);
  }
};

template <uint32_t kType, bool kPre, int kSub>
LS_DEV void TiledChunk(TiledCtx<kType, kPre>& cx, int64_t c, const uint8_t* const (&wrow)[kTM][2], int lb, __half2 bias,
                       float (&acc)[kTM][kTN][4]) {
  using WT = MmaType<kType>;
  if (c % kTStep == 0) cx.Step(c / kTStep);
  const int buf = (int)((c / kTStep) & 1), kc = (int)(c % kTStep);
  const uint4* xh = cx.Xh(buf) + kc * kTBN * 4;
  const uint4* xl = cx.Xl(buf) + kc * kTBN * 4;
  const float* xi = cx.Xi(buf) + kc * kTBN;
  const float* xsum = cx.Xs(buf) + kc * kTBN;
  // TypeChunk's values: the words from the ring, the scales from the stage's table.
  RowChunk rc[kTM][2];
  uint32_t a[kTM][2][4];
  const float2* sc = cx.stab + (lb * WT::kCPB + kSub) * kTBM + 16 * kTM * cx.wm + cx.g;
#pragma unroll
  for (int mi = 0; mi < kTM; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      WT::template Words<kSub, SharedLd>(wrow[mi][h] + lb * WT::kBB, cx.t, rc[mi][h]);
      const float2 v = sc[16 * mi + 8 * h];
      rc[mi][h].dl[0] = v.x, rc[mi][h].dl[1] = WT::kTwoScales ? v.y : v.x, rc[mi][h].nml = WT::kMin ? v.y : 0.f;
    }
    HalfFrags(rc[mi], bias, a[mi]);
  }
#pragma unroll
  for (int ni = 0; ni < kTN; ++ni) {
    const int tok = 32 * cx.wn + 8 * ni + cx.g;
    const uint4 h = xh[tok * 4 + cx.t], l = xl[tok * 4 + cx.t];
    const uint32_t bh[4] = {h.x, h.y, h.z, h.w}, bl[4] = {l.x, l.y, l.z, l.w};
    const int n2 = 32 * cx.wn + 8 * ni + 2 * cx.t;
    const float isc[2] = {xi[n2], xi[n2 + 1]}, xs[2] = {xsum[n2], xsum[n2 + 1]};
#pragma unroll
    for (int mi = 0; mi < kTM; ++mi) TileMath<kType, 2>(a[mi], rc[mi], bh, bl, isc, xs, acc[mi][ni]);
  }
}

template <uint32_t kType, bool kPre, int... kSubs>
LS_DEV void TiledBlock(std::integer_sequence<int, kSubs...>, TiledCtx<kType, kPre>& cx, int64_t c0,
                       const uint8_t* const (&wrow)[kTM][2], int lb, __half2 bias, float (&acc)[kTM][kTN][4]) {
  (TiledChunk<kType, kPre, kSubs>(cx, c0 + kSubs, wrow, lb, bias, acc), ...);
}

template <uint32_t kType, bool kPre>
__global__ void __launch_bounds__(kSeg * 32, TiledGeom<kType>::kMinBlocks)
MatmulMmaTiledKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                     const float* __restrict__ x, int64_t T, float* __restrict__ y, float w_scale, int units,
                     PreSplit ps) {
  using WT = MmaType<kType>;
  using G = TiledGeom<kType>;
  extern __shared__ __align__(16) uint8_t tsm[];
  TiledCtx<kType, kPre> cx;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  cx.g = lane / 4, cx.t = lane % 4, cx.wm = warp % kTWM, cx.wn = warp / kTWM;
  cx.w = w, cx.rows = rows, cx.row_bytes = row_bytes;
  cx.row0 = (int64_t)blockIdx.x * kTBM;
  const int64_t tok0 = (int64_t)blockIdx.y * kTBN;
  cx.nblk = cols / (32 * WT::kCPB), cx.nch = cols / 32, cx.nws = (cx.nblk + G::kBPS - 1) / G::kBPS;
  constexpr bool kTotSmem = G::kTotSmem;
  cx.rstride = 16 * units, cx.wbytes = kTBM * cx.rstride;
  cx.wring = tsm, cx.xbuf = tsm + 2 * cx.wbytes;
  cx.stab = reinterpret_cast<float2*>(cx.xbuf + 2 * G::kXBytes);
  cx.st_tok = threadIdx.x / 4, cx.st_t = threadIdx.x % 4;
  cx.st_n = tok0 + cx.st_tok < T ? tok0 + cx.st_tok : T - 1;
  cx.xs_row = x + cx.st_n * cols;
  cx.ps = ps;
  const __half2 bias = __float2half2_rn((float)WT::kBias);
  cx.IssueW(0);
  cx.LoadRaw(0);

  float tot[kTotSmem ? 1 : kTM][kTN][4], acc[kTM][kTN][4];
  float* tsw = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(cx.stab) + G::kSBytes) + warp * kTM * kTN * 4 * 32 + lane;
#pragma unroll
  for (int mi = 0; mi < kTM; ++mi)
#pragma unroll
    for (int ni = 0; ni < kTN; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mi][ni][i] = 0.f;
  int seg = 0;
  int64_t seg_end = cx.nblk / kSeg;
  auto fold = [&]() {
#pragma unroll
    for (int mi = 0; mi < kTM; ++mi)
#pragma unroll
      for (int ni = 0; ni < kTN; ++ni)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (kTotSmem) {
            float& tv = tsw[((mi * kTN + ni) * 4 + i) * 32];
            tv = seg == 0 ? acc[mi][ni][i] : __fadd_rn(tv, acc[mi][ni][i]);
          } else {
            tot[mi][ni][i] = seg == 0 ? acc[mi][ni][i] : __fadd_rn(tot[mi][ni][i], acc[mi][ni][i]);
          }
          acc[mi][ni][i] = 0.f;
        }
    ++seg;
    seg_end = (seg + 1) * cx.nblk / kSeg;
  };
#pragma unroll 1
  for (int64_t b = 0; b < cx.nblk; ++b) {
    while (b >= seg_end) fold();
    const int64_t j = b / G::kBPS;
    const int lb = (int)(b % G::kBPS);
    const uint8_t* wrow[kTM][2];
#pragma unroll
    for (int mi = 0; mi < kTM; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) wrow[mi][h] = cx.WRow(j, mi, h);
    TiledBlock<kType, kPre>(std::make_integer_sequence<int, WT::kCPB>{}, cx, b * WT::kCPB, wrow, lb, bias, acc);
  }
  while (seg < kSeg) fold();
#pragma unroll
  for (int mi = 0; mi < kTM; ++mi)
#pragma unroll
    for (int ni = 0; ni < kTN; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t r = cx.row0 + 16 * kTM * cx.wm + 16 * mi + cx.g + 8 * (i / 2);
        const int64_t n = tok0 + 32 * cx.wn + 8 * ni + 2 * cx.t + (i % 2);
        const float v = kTotSmem ? tsw[((mi * kTN + ni) * 4 + i) * 32] : tot[kTotSmem ? 0 : mi][ni][i];
        if (r < rows && n < T) y[n * rows + r] = __fmul_rn(v, w_scale);
      }
}

// Staged kernel (small T; docs/kernels.md "MMA route", run 11): the K-split kernel's arithmetic
// with one m-tile and one n-tile (ChunkMath<kType, 1, 1>, segment s on warp s, the same segment
// chain), its memory traffic reorganised. Each warp streams its segment's weight blocks (16 rows)
// and the matching activation pieces through a ring of kStages shared-memory stages by cp.async,
// so kStages - 1 stages are in flight while one is computed; with kSplitOnce a stage's
// (token, chunk) activation splits are made once each (lane group g takes items g, g + 8, ...)
// instead of by all 8 lane groups; a CTA walks several 16-row tiles in turn, so a short K segment
// (cols = 4096: 2 blocks per warp) still keeps the ring full and the grid is one wave.

template <uint32_t kType>
struct StagedGeom {
  using WT = MmaType<kType>;
  static constexpr int kBPS = kStChunks / WT::kCPB;         // blocks per stage
  static constexpr int kUnits = (kBPS * WT::kBB + 30) / 16;  // 16-byte units a row's span can take
  static constexpr int kRowStride = 16 * (kUnits | 1);       // odd unit count: lanes (g, t) hit distinct banks
  static constexpr int kWBytes = 16 * kRowStride;            // one stage's weights (16 rows)
  static constexpr int kRedBytes = 2 * kSeg * 4 * 32 * 4;    // segment sums, two tiles
  static constexpr int kFragBytes = kStChunks * (4 * 32 + 8);  // split fragments of one token's stage
  __host__ __device__ static int StageBytes(int tmax) { return kWBytes + tmax * kStChunks * 32 * 4; }
  __host__ __device__ static int Bytes(int stages, int tmax, bool once) {
    return kRedBytes + kSeg * (stages * StageBytes(tmax) + (once ? tmax * kFragBytes : 0));
  }
};


// Chunk kSub of block lb of a stage: the fragments of the chunk (from the stage's split or split
// here, as OneChunk does), then ChunkMath on the staged weight bytes.
template <uint32_t kType, bool kSplitOnce, int kSub>
LS_DEV void StagedChunk(const uint8_t* const (&wrow)[1][2], int lb, const typename MmaType<kType>::Hdr (&hdr)[1][2],
                        const float* sx, const uint4* fh, const uint4* fl, const float* fis, const float* fsum,
                        int tt, int g, int t, __half2 bias, float (&acc)[1][1][4]) {
  using WT = MmaType<kType>;
  const int c = lb * WT::kCPB + kSub;
  const int ng = min(g, tt - 1);
  XTile<1> xt;
  if constexpr (kSplitOnce) {
    const uint4 h = fh[(ng * kStChunks + c) * 4 + t], l = fl[(ng * kStChunks + c) * 4 + t];
    xt.bh[0][0] = h.x, xt.bh[0][1] = h.y, xt.bh[0][2] = h.z, xt.bh[0][3] = h.w;
    xt.bl[0][0] = l.x, xt.bl[0][1] = l.y, xt.bl[0][2] = l.z, xt.bl[0][3] = l.w;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int nj = min(2 * t + j, tt - 1);
      xt.isc[0][j] = fis[nj * kStChunks + c];
      xt.xs[0][j] = fsum[nj * kStChunks + c];
    }
  } else {
    const float* xc = sx + ng * kStChunks * 32 + 32 * c;
    XFrag f;
    SplitX({*reinterpret_cast<const float4*>(xc + 4 * t), *reinterpret_cast<const float4*>(xc + 16 + 4 * t)}, f);
    xt.bh[0][0] = f.h[0][0], xt.bh[0][1] = f.h[0][1], xt.bh[0][2] = f.h[1][0], xt.bh[0][3] = f.h[1][1];
    xt.bl[0][0] = f.l[0][0], xt.bl[0][1] = f.l[0][1], xt.bl[0][2] = f.l[1][0], xt.bl[0][3] = f.l[1][1];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      xt.isc[0][j] = __shfl_sync(kFull, f.isc, 8 * t + 4 * j);
      xt.xs[0][j] = __shfl_sync(kFull, f.sum, 8 * t + 4 * j);
    }
  }
  ChunkMath<kType, 1, 1, kSub, SharedLd>(wrow, lb, hdr, xt, t, bias, acc);
}

template <uint32_t kType, bool kSplitOnce, int... kSubs>
LS_DEV void StagedBlock(std::integer_sequence<int, kSubs...>, const uint8_t* const (&wrow)[1][2], int lb,
                        const typename MmaType<kType>::Hdr (&hdr)[1][2], const float* sx, const uint4* fh,
                        const uint4* fl, const float* fis, const float* fsum, int tt, int g, int t, __half2 bias,
                        float (&acc)[1][1][4]) {
  (StagedChunk<kType, kSplitOnce, kSubs>(wrow, lb, hdr, sx, fh, fl, fis, fsum, tt, g, t, bias, acc), ...);
}

template <uint32_t kType, int kStages, bool kSplitOnce>
__global__ void __launch_bounds__(kSeg * 32)
MatmulMmaStagedKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                      const float* __restrict__ x, int64_t T, float* __restrict__ y, float w_scale, int tmax) {
  using WT = MmaType<kType>;
  using G = StagedGeom<kType>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t tok0 = (int64_t)blockIdx.y * 8;
  const int tt = (int)min((int64_t)8, T - tok0);
  const int stage_bytes = G::StageBytes(tmax);
  float* red = reinterpret_cast<float*>(smem);  // [2][kSeg][4][32]
  uint8_t* ring = smem + G::kRedBytes + warp * (kStages * stage_bytes + (kSplitOnce ? tmax * G::kFragBytes : 0));
  uint4* fh = reinterpret_cast<uint4*>(ring + kStages * stage_bytes);  // [tmax][chunk][lane part]
  uint4* fl = fh + tmax * kStChunks * 4;
  float* fis = reinterpret_cast<float*>(fl + tmax * kStChunks * 4);  // [tmax][chunk]
  float* fsum = fis + tmax * kStChunks;
  const __half2 bias = __float2half2_rn((float)WT::kBias);

  const int64_t nblk = cols / (32 * WT::kCPB);
  const int64_t b_begin = warp * nblk / kSeg, b_end = (warp + 1) * nblk / kSeg;
  const int spt = (int)((b_end - b_begin + G::kBPS - 1) / G::kBPS);  // stages per row tile
  const int64_t ntile = (rows + 15) / 16;
  const int64_t tile_begin = blockIdx.x * ntile / gridDim.x, tile_end = (blockIdx.x + 1) * ntile / gridDim.x;
  const int nst = (int)(tile_end - tile_begin) * spt;
  // Stage i: row tile tile_begin + i / spt, blocks [fb, fb + nb) of this warp's segment.
  auto span = [&](int i, int64_t r, int64_t& fb, int& nb) {
    fb = b_begin + (int64_t)(i % spt) * G::kBPS;
    nb = (int)min((int64_t)G::kBPS, b_end - fb);
    const int64_t rr = min((tile_begin + i / spt) * 16 + r, rows - 1);
    return w + rr * row_bytes + fb * WT::kBB;
  };
  auto issue = [&](int i) {
    if (i >= nst) return;
    uint8_t* sw = ring + (i % kStages) * stage_bytes;
    int64_t fb;
    int nb;
    for (int u = lane; u < 16 * G::kUnits; u += 32) {
      const int r = u / G::kUnits, k = u % G::kUnits;
      const uint8_t* src = span(i, r, fb, nb);
      const uintptr_t a0 = reinterpret_cast<uintptr_t>(src) & ~(uintptr_t)15;
      const uintptr_t a1 = (reinterpret_cast<uintptr_t>(src) + (uintptr_t)nb * WT::kBB + 15) & ~(uintptr_t)15;
      if (a0 + 16 * (uintptr_t)k < a1) CpAsync16(sw + r * G::kRowStride + 16 * k, reinterpret_cast<const void*>(a0 + 16 * k));
    }
    span(i, 0, fb, nb);
    float* sx = reinterpret_cast<float*>(sw + G::kWBytes);
    const int xunits = nb * WT::kCPB * 8;  // 16-byte units of one token's piece
    for (int u = lane; u < tt * xunits; u += 32) {
      const int n = u / xunits, k = u % xunits;
      CpAsync16(sx + n * kStChunks * 32 + 4 * k, x + (tok0 + n) * cols + fb * WT::kBE + 4 * k);
    }
  };

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    issue(i);
    CpAsyncCommit();
  }
  int i = 0;
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    float acc[1][1][4] = {{{0.f, 0.f, 0.f, 0.f}}};
    for (int st = 0; st < spt; ++st, ++i) {
      CpAsyncWait<kStages - 2>();
      __syncwarp();
      issue(i + kStages - 1);
      CpAsyncCommit();
      const uint8_t* sw = ring + (i % kStages) * stage_bytes;
      const float* sx = reinterpret_cast<const float*>(sw + G::kWBytes);
      int64_t fb;
      int nb;
      const uint8_t* wrow[1][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* src = span(i, g + 8 * h, fb, nb);
        wrow[0][h] = sw + (g + 8 * h) * G::kRowStride + (reinterpret_cast<uintptr_t>(src) & 15);
      }
      if constexpr (kSplitOnce) {
        const int nch = nb * WT::kCPB, items = tt * nch;
        for (int it0 = 0; it0 < items; it0 += 8) {
          const int it = min(it0 + g, items - 1);
          const int n = it / nch, c = it % nch;
          const float* xc = sx + n * kStChunks * 32 + 32 * c;
          XFrag f;
          SplitX({*reinterpret_cast<const float4*>(xc + 4 * t), *reinterpret_cast<const float4*>(xc + 16 + 4 * t)}, f);
          if (it0 + g < items) {
            fh[(n * kStChunks + c) * 4 + t] = make_uint4(f.h[0][0], f.h[0][1], f.h[1][0], f.h[1][1]);
            fl[(n * kStChunks + c) * 4 + t] = make_uint4(f.l[0][0], f.l[0][1], f.l[1][0], f.l[1][1]);
            if (t == 0) fis[n * kStChunks + c] = f.isc, fsum[n * kStChunks + c] = f.sum;
          }
        }
        __syncwarp();
      }
      for (int lb = 0; lb < nb; ++lb) {
        typename WT::Hdr hdr[1][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) WT::template Header<SharedLd>(wrow[0][h] + lb * WT::kBB, hdr[0][h]);
        StagedBlock<kType, kSplitOnce>(std::make_integer_sequence<int, WT::kCPB>{}, wrow, lb, hdr, sx, fh, fl, fis,
                                       fsum, tt, g, t, bias, acc);
      }
    }
    // The K-split kernel's epilogue: segment sums, the chain in segment order, the store.
    float* rb = red + (tile & 1) * kSeg * 4 * 32;
#pragma unroll
    for (int k = 0; k < 4; ++k) rb[(warp * 4 + k) * 32 + lane] = acc[0][0][k];
    __syncthreads();
    if (threadIdx.x < 4 * 32) {
      const int idx = threadIdx.x / 32, ln = threadIdx.x % 32;
      float v = rb[idx * 32 + ln];
#pragma unroll
      for (int k = 1; k < kSeg; ++k) v = __fadd_rn(v, rb[(k * 4 + idx) * 32 + ln]);  // the segment chain
      const int64_t r = tile * 16 + ln / 4 + 8 * (idx / 2);
      const int64_t n = tok0 + 2 * (ln % 4) + (idx % 2);
      if (r < rows && n < T) y[n * rows + r] = __fmul_rn(v, w_scale);
    }
  }
}

template <uint32_t kType, int kStages, bool kSplitOnce>
cudaError_t LaunchStagedAs(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                           float w_scale, int tmax, int smem, int gx, int gy, cudaStream_t stream) {
  static bool attr_set = false;
  if (!attr_set) {
    const cudaError_t e = cudaFuncSetAttribute(MatmulMmaStagedKernel<kType, kStages, kSplitOnce>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  using WT = MmaType<kType>;
  MatmulMmaStagedKernel<kType, kStages, kSplitOnce><<<dim3((unsigned)gx, (unsigned)gy), kSeg * 32, smem, stream>>>(
      w, rows, cols, cols / WT::kBE * WT::kBB, x, T, y, w_scale, tmax);
  return cudaGetLastError();
}

// Stages: 3 if two CTAs of them fit an SM, else 2; the split once per item up to 4 tokens a tile
// (beyond, each lane group splits its own token's chunk, as OneChunk does). Grid: one wave of
// row-tile ranges (two CTAs per SM where they fit), times the 8-token tiles.
template <uint32_t kType>
cudaError_t LaunchStaged(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                         float w_scale, cudaStream_t stream) {
  using G = StagedGeom<kType>;
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
  }
  const int tmax = (int)(T < 8 ? T : 8);
  const bool once = tmax <= 4;
  constexpr int kTwoPerSm = 113 * 1024;
  const int stages = G::Bytes(3, tmax, once) <= kTwoPerSm ? 3 : 2;
  const int smem = G::Bytes(stages, tmax, once);
  const int64_t gy = (T + 7) / 8;
  if (gy > 65535 || smem > 227 * 1024) return cudaErrorInvalidValue;
  const int64_t ntile = (rows + 15) / 16;
  const int64_t want = (int64_t)sms * (smem <= kTwoPerSm ? 2 : 1) / gy;
  const int gx = (int)(ntile < want ? ntile : (want < 1 ? 1 : want));
  if (stages == 3) {
    return once ? LaunchStagedAs<kType, 3, true>(w, rows, cols, x, T, y, w_scale, tmax, smem, gx, (int)gy, stream)
                : LaunchStagedAs<kType, 3, false>(w, rows, cols, x, T, y, w_scale, tmax, smem, gx, (int)gy, stream);
  }
  return once ? LaunchStagedAs<kType, 2, true>(w, rows, cols, x, T, y, w_scale, tmax, smem, gx, (int)gy, stream)
              : LaunchStagedAs<kType, 2, false>(w, rows, cols, x, T, y, w_scale, tmax, smem, gx, (int)gy, stream);
}

template <uint32_t kType, bool kPre>
cudaError_t LaunchTiledAs(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                          float w_scale, MatmulScratch scratch, cudaStream_t stream) {
  using WT = MmaType<kType>;
  using G = TiledGeom<kType>;
  const int64_t row_bytes = cols / WT::kBE * WT::kBB;
  const bool aligned = reinterpret_cast<uintptr_t>(w) % 16 == 0 && row_bytes % 16 == 0 && G::kSpan % 16 == 0;
  const int units = aligned ? G::kUnitsAligned : G::kUnitsAny;
  const int smem = G::Bytes(units);
  static bool attr_set = false;
  if (!attr_set) {
    const cudaError_t e = cudaFuncSetAttribute(MatmulMmaTiledKernel<kType, kPre>, cudaFuncAttributeMaxDynamicSharedMemorySize, G::Bytes(G::kUnitsAny));
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  const int64_t gy = (T + kTBN - 1) / kTBN;
  if (gy > 65535) return cudaErrorInvalidValue;
  PreSplit ps;
  if constexpr (kPre) {
    const cudaError_t e = LaunchSplit(x, T, cols, scratch, ps, stream);
    if (e != cudaSuccess) return e;
  }
  const dim3 grid((unsigned)((rows + kTBM - 1) / kTBM), (unsigned)gy);
  MatmulMmaTiledKernel<kType, kPre><<<grid, kSeg * 32, smem, stream>>>(w, rows, cols, row_bytes, x, T, y, w_scale, units, ps);
  return cudaGetLastError();
}

template <uint32_t kType>
cudaError_t LaunchTiled(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                        float w_scale, MatmulScratch scratch, cudaStream_t stream) {
  if (scratch.data != nullptr) return LaunchTiledAs<kType, true>(w, rows, cols, x, T, y, w_scale, scratch, stream);
  return LaunchTiledAs<kType, false>(w, rows, cols, x, T, y, w_scale, scratch, stream);
}

// kOnce (one n-tile, T <= 2): the activation split once per (token, chunk) in a SplitStore per
// warp; the bits are those of the split in every lane group. kT1: T = 1, the unstored columns of
// the C fragment not computed. kPre: the split once per launch into the caller's scratch
// (SplitKernel), then the K-split kernel reading it.
template <uint32_t kType, int kMR, int kNR, bool kOnce = false, bool kT1 = false, bool kPre = false>
cudaError_t LaunchCfg(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T,
                      float* y, float w_scale, MatmulScratch scratch, cudaStream_t stream) {
  using WT = MmaType<kType>;
  const int64_t row_bytes = cols / WT::kBE * WT::kBB;
  constexpr size_t red = (size_t)kSeg * kMR * kNR * 4 * 32 * sizeof(float);
  const size_t smem = red + (kOnce ? (size_t)kSeg * SplitStore::Bytes((int)(T < 8 ? T : 8)) : 0);
  if constexpr (red > 48 * 1024) {
    static bool attr_set = false;
    if (!attr_set) {
      const cudaError_t e = cudaFuncSetAttribute(MatmulMmaKernel<kType, kMR, kNR, kOnce, kT1, kPre>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)red);
      if (e != cudaSuccess) return e;
      attr_set = true;
    }
  }
  const int64_t gy = (T + 8 * kNR - 1) / (8 * kNR);
  if (gy > 65535) return cudaErrorInvalidValue;
  PreSplit ps;
  if constexpr (kPre) {
    const cudaError_t e = LaunchSplit(x, T, cols, scratch, ps, stream);
    if (e != cudaSuccess) return e;
  }
  const dim3 grid((unsigned)((rows + 16 * kMR - 1) / (16 * kMR)), (unsigned)gy);
  MatmulMmaKernel<kType, kMR, kNR, kOnce, kT1, kPre><<<grid, kSeg * 32, smem, stream>>>(w, rows, cols, row_bytes, x, T, y, w_scale, ExpertRows{}, ps);
  return cudaGetLastError();
}

// A K-split configuration without the split once per warp: the split once per launch when the
// caller gave scratch (MatmulScratch), else in the kernel.
template <uint32_t kType, int kMR, int kNR>
cudaError_t LaunchSplitCfg(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                           float w_scale, MatmulScratch scratch, cudaStream_t stream) {
  if (scratch.data != nullptr) return LaunchCfg<kType, kMR, kNR, false, false, true>(w, rows, cols, x, T, y, w_scale, scratch, stream);
  return LaunchCfg<kType, kMR, kNR>(w, rows, cols, x, T, y, w_scale, scratch, stream);
}

// The auto configuration by type and T (docs/kernels.md runs 9, 16 and 17; the layer-set bench,
// H100). Q4_K and Q6_K: 16x8 up to 8 tokens, 32x16 up to 16, then four n-tiles a CTA (each
// chunk's weight fragments serve 32 tokens): 32x32 (Q6_K up to 192, Q4_K up to 96), 64x32 (Q4_K
// up to 192), the tiled kernel beyond. Q8_0 (34-byte blocks, read by 16-bit loads): the staged
// kernel up to 4 tokens, 16x8 up to 8, 32x16 up to 32, 64x32 up to 128, the tiled kernel beyond.
// Every configuration gives the same bits.
template <uint32_t kType>
MmaConfig AutoConfig(int64_t T) {
  if constexpr (kType == (uint32_t)q::Type::Q8_0) {
    if (T <= 4) return MmaConfig::kStaged16x8;
    if (T <= 8) return MmaConfig::k16x8;
    return T <= 32 ? MmaConfig::k32x16 : (T <= 128 ? MmaConfig::k64x32 : MmaConfig::kTiled128x64);
  }
  if (T <= 8) return MmaConfig::k16x8;
  if (T <= 16) return MmaConfig::k32x16;
  if constexpr (kType == (uint32_t)q::Type::Q6_K) return T <= 192 ? MmaConfig::k32x32 : MmaConfig::kTiled128x64;
  return T <= 96 ? MmaConfig::k32x32 : (T <= 192 ? MmaConfig::k64x32 : MmaConfig::kTiled128x64);
}

// Whether configuration cfg (not auto) at T splits the activations once per launch given scratch.
bool UsesPreSplit(MmaConfig cfg, int64_t T) {
  switch (cfg) {
    case MmaConfig::k16x8: return T > 2;  // T <= 2: the split once per warp (kOnce)
    case MmaConfig::k32x8: case MmaConfig::k64x8: case MmaConfig::k64x16: case MmaConfig::k32x16:
    case MmaConfig::k64x32: case MmaConfig::k32x32: case MmaConfig::kTiled128x64: return true;
    default: return false;  // the staged kernel splits in shared memory
  }
}

template <uint32_t kType>
cudaError_t LaunchTyped(const void* wv, int64_t rows, int64_t cols, const float* x, int64_t T,
                        float* y, float w_scale, MmaConfig cfg, MatmulScratch scratch, cudaStream_t stream) {
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  if (cfg == MmaConfig::kAutoByT) cfg = AutoConfig<kType>(T);
  if (scratch.data != nullptr && UsesPreSplit(cfg, T) &&
      ((int64_t)scratch.bytes < PreSplit::Bytes(T, cols) || reinterpret_cast<uintptr_t>(scratch.data) % 16 != 0)) {
    return cudaErrorInvalidValue;  // scratch given but unusable: never a silent change of path
  }
  if (!UsesPreSplit(cfg, T)) scratch = MatmulScratch{};
  switch (cfg) {
    case MmaConfig::k16x8:
      // The split once measured 17-21% faster at T = 1, 2-13% at T = 2 and 14% slower for Q4_K
      // at T = 4 (docs/kernels.md run 12).
      if (T == 1) return LaunchCfg<kType, 1, 1, true, true>(w, rows, cols, x, T, y, w_scale, scratch, stream);
      return T <= 2 ? LaunchCfg<kType, 1, 1, true>(w, rows, cols, x, T, y, w_scale, scratch, stream)
                    : LaunchSplitCfg<kType, 1, 1>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::k32x8: return LaunchSplitCfg<kType, 2, 1>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::k64x8: return LaunchSplitCfg<kType, 4, 1>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::k64x16: return LaunchSplitCfg<kType, 4, 2>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::k32x16: return LaunchSplitCfg<kType, 2, 2>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::k64x32: return LaunchSplitCfg<kType, 4, 4>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::k32x32: return LaunchSplitCfg<kType, 2, 4>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::kTiled128x64: return LaunchTiled<kType>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    case MmaConfig::kStaged16x8: return LaunchStaged<kType>(w, rows, cols, x, T, y, w_scale, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <uint32_t kType>
cudaError_t LaunchExpertsTyped(const uint8_t* w, int64_t n_expert, int64_t rpe, int64_t cols, const int32_t* ids,
                               int64_t n, int64_t k, bool x_per_token, const float* x, float* y, cudaStream_t stream) {
  using WT = MmaType<kType>;
  const int64_t row_bytes = cols / WT::kBE * WT::kBB;
  constexpr size_t smem = (size_t)kSeg * 1 * 1 * 4 * 32 * sizeof(float) + kSeg * SplitStore::Bytes(1);
  const int64_t gx = (rpe + 15) / 16;
  if (gx > 0x7fffffff) return cudaErrorInvalidValue;
  // grid.y <= 65535 rows per launch; with x per token a piece holds whole tokens (k rows each).
  const int64_t piece = x_per_token ? 65535 / k * k : 65535;
  for (int64_t i0 = 0; i0 < n; i0 += piece) {
    const int64_t m = n - i0 < piece ? n - i0 : piece;
    ExpertRows ex;
    ex.ids = ids + i0, ex.n_expert = n_expert, ex.k = k, ex.x_per_token = x_per_token;
    const float* xs = x;
    xs += (x_per_token ? i0 / k : i0) * cols;
    MatmulMmaKernel<kType, 1, 1, true, true><<<dim3((unsigned)gx, (unsigned)m), kSeg * 32, smem, stream>>>(
        w, rpe, cols, row_bytes, xs, 1, y + i0 * rpe, 1.0f, ex, PreSplit{});
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchMatmulMmaExperts(uint32_t type_id, const void* w, int64_t n_expert, int64_t rpe, int64_t cols,
                                   const int32_t* ids, int64_t n, int64_t k, bool x_per_token, const float* x,
                                   float* y, cudaStream_t stream) {
  q::TypeTraits tr;
  if (!MatmulMmaSupportsType(type_id) || !q::LookupType(type_id, &tr)) return cudaErrorInvalidValue;
  if (w == nullptr || ids == nullptr || x == nullptr || y == nullptr || n_expert < 1 || rpe < 1 || cols < 32 ||
      cols % 32 != 0 || cols % tr.block_size != 0 || n < 0 || k < 1 || (x_per_token && n % k != 0) ||
      reinterpret_cast<uintptr_t>(w) % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: return LaunchExpertsTyped<(uint32_t)q::Type::Q4_K>(wb, n_expert, rpe, cols, ids, n, k, x_per_token, x, y, stream);
    case q::Type::Q8_0: return LaunchExpertsTyped<(uint32_t)q::Type::Q8_0>(wb, n_expert, rpe, cols, ids, n, k, x_per_token, x, y, stream);
    case q::Type::Q6_K: return LaunchExpertsTyped<(uint32_t)q::Type::Q6_K>(wb, n_expert, rpe, cols, ids, n, k, x_per_token, x, y, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool MatmulMmaSupportsType(uint32_t type_id) {
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: case q::Type::Q8_0: case q::Type::Q6_K: return true;
    default: return false;
  }
}

size_t MatmulMmaScratchBytes(uint32_t type_id, int64_t T, int64_t cols, MmaConfig config) {
  if (T < 1 || cols < 32) return 0;
  if (config == MmaConfig::kAutoByT) {
    switch ((q::Type)type_id) {
      case q::Type::Q4_K: config = AutoConfig<(uint32_t)q::Type::Q4_K>(T); break;
      case q::Type::Q8_0: config = AutoConfig<(uint32_t)q::Type::Q8_0>(T); break;
      case q::Type::Q6_K: config = AutoConfig<(uint32_t)q::Type::Q6_K>(T); break;
      default: return 0;
    }
  }
  return UsesPreSplit(config, T) ? (size_t)PreSplit::Bytes(T, cols) : 0;
}

cudaError_t LaunchMatmulMma(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                            const float* x, int64_t T, float* y, float w_scale, MmaConfig config,
                            cudaStream_t stream, MatmulScratch scratch) {
  q::TypeTraits tr;
  if (!MatmulMmaSupportsType(type_id) || !q::LookupType(type_id, &tr)) return cudaErrorInvalidValue;
  if (rows < 1 || T < 1 || cols < 32 || cols % 32 != 0 || cols % tr.block_size != 0) return cudaErrorInvalidValue;
  if (w == nullptr || x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(w) % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return cudaErrorInvalidValue;
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: return LaunchTyped<(uint32_t)q::Type::Q4_K>(w, rows, cols, x, T, y, w_scale, config, scratch, stream);
    case q::Type::Q8_0: return LaunchTyped<(uint32_t)q::Type::Q8_0>(w, rows, cols, x, T, y, w_scale, config, scratch, stream);
    case q::Type::Q6_K: return LaunchTyped<(uint32_t)q::Type::Q6_K>(w, rows, cols, x, T, y, w_scale, config, scratch, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace lockstep::kernels
