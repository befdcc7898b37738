// The MMA route's tiled kernel for large T (kernels/matmul_mma_common.cuh states the per-chunk
// arithmetic, the K-split kernel's).
#include "kernels/matmul_mma_common.cuh"
#include "kernels/pdl.cuh"

namespace lockstep::kernels::mma_internal {

// Tiled kernel (large T; docs/kernels.md "MMA route", run 16): 8 warps as 4 (rows) x 2 (tokens),
// warp tile 32 x 32 (2 m-tiles x 4 n-tiles), CTA tile 128 x 64. Each warp runs the 8 K segments in
// turn: acc from 0 per segment, then tot = acc (segment 0) or tot + acc, the K-split kernel's
// segment chain (an empty segment adds its 0, as there). The memory traffic: the CTA's 128 weight
// rows stream through a ring of two shared-memory stages of 256 elements (one block of Q4_K or
// Q6_K, eight of Q8_0) by cp.async, one stage ahead, and each stage's scales (Scales: dl, -ml) are
// decoded once per (row, chunk) into a table when it lands; the activations of its 64 tokens are
// split two chunks at a time (thread = token tid / 4, lane part tid % 4: the K-split kernel's
// SplitX) into a double buffer of fragments, their raw loads issued one step ahead (kPre: the
// fragments of the split once per launch are loaded and stored there instead). One CTA
// barrier per step of two chunks, one more per stage. TileMath runs on the same words, scales and
// fragments as the K-split kernel's, so the bits are its bits (matmul-mma-invariance).
//
// Split K (kSplitK, MmaConfig::kTiledSplitK; run 21): the grid's z is the segment; CTA (x, y, s)
// runs segment s's blocks alone, from acc = 0, with the same per-chunk arithmetic, and writes acc
// to the caller's scratch; SumSegmentsKernel then forms tot = s0, tot = tot + s (s = 1..7) and
// y = tot * w_scale: the fold above, the same operations in the same order. A segment may start
// inside a weight stage or an activation step (Q8_0: 8 blocks a stage); its first chunk then runs
// the step as a stage start (wait, barrier, the stage's scales), which changes no value.
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


template <uint32_t kType, bool kPre, bool kSplitK>
struct TiledCtx {
  using WT = MmaType<kType>;
  using G = TiledGeom<kType>;
  const uint8_t* w;
  int64_t rows, row_bytes, row0, nblk, nch, nws;
  int64_t c_first;  // the first chunk this CTA runs (0, or its segment's first under kSplitK)
  // Whether a CTA's first chunk can fall inside a weight stage: under kSplitK with stages of
  // several blocks (Q8_0); else it starts a stage and a step (blocks of 8 chunks, or chunk 0).
  static constexpr bool kMidStart = kSplitK && TiledGeom<kType>::kBPS > 1;
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
    if (j >= nws) return;  // nws: the stages this CTA runs (its segment's last + 1 under kSplitK)
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
  // here (or the CTA's first stage: first), the barrier, then issue the next weight stage and
  // step s + 1's raw loads.
  LS_DEV void Step(int64_t s, bool first) {
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
    const bool wstart = first || (kTStep * s) % kStChunks == 0;
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

template <uint32_t kType, bool kPre, bool kSplitK, int kSub>
LS_DEV void TiledChunk(TiledCtx<kType, kPre, kSplitK>& cx, int64_t c, const uint8_t* const (&wrow)[kTM][2], int lb, __half2 bias,
                       float (&acc)[kTM][kTN][4]) {
  using WT = MmaType<kType>;
  const bool first = cx.kMidStart && c == cx.c_first;
  if (c % kTStep == 0 || first) cx.Step(c / kTStep, first);
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

template <uint32_t kType, bool kPre, bool kSplitK, int... kSubs>
LS_DEV void TiledBlock(std::integer_sequence<int, kSubs...>, TiledCtx<kType, kPre, kSplitK>& cx, int64_t c0,
                       const uint8_t* const (&wrow)[kTM][2], int lb, __half2 bias, float (&acc)[kTM][kTN][4]) {
  (TiledChunk<kType, kPre, kSplitK, kSubs>(cx, c0 + kSubs, wrow, lb, bias, acc), ...);
}

template <uint32_t kType, bool kPre, bool kSplitK>
__global__ void __launch_bounds__(kSeg * 32, TiledGeom<kType>::kMinBlocks)
MatmulMmaTiledKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                     const float* __restrict__ x, int64_t T, float* __restrict__ y, float w_scale, int units,
                     PreSplit ps, float* __restrict__ part) {
  pdl::Begin();
  using WT = MmaType<kType>;
  using G = TiledGeom<kType>;
  extern __shared__ __align__(16) uint8_t tsm[];
  TiledCtx<kType, kPre, kSplitK> cx;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  cx.g = lane / 4, cx.t = lane % 4, cx.wm = warp % kTWM, cx.wn = warp / kTWM;
  cx.w = w, cx.rows = rows, cx.row_bytes = row_bytes;
  cx.row0 = (int64_t)blockIdx.x * kTBM;
  const int64_t tok0 = (int64_t)blockIdx.y * kTBN;
  cx.nblk = cols / (32 * WT::kCPB), cx.nch = cols / 32, cx.nws = (cx.nblk + G::kBPS - 1) / G::kBPS;
  // kSplitK: this CTA's segment, blocks [b_begin, b_end); else all of them.
  const int64_t b_begin = kSplitK ? blockIdx.z * cx.nblk / kSeg : 0;
  const int64_t b_end = kSplitK ? (blockIdx.z + 1) * cx.nblk / kSeg : cx.nblk;
  if (kSplitK) cx.nws = (b_end + G::kBPS - 1) / G::kBPS;
  cx.c_first = b_begin * WT::kCPB;
  constexpr bool kTotSmem = G::kTotSmem && !kSplitK;
  cx.rstride = 16 * units, cx.wbytes = kTBM * cx.rstride;
  cx.wring = tsm, cx.xbuf = tsm + 2 * cx.wbytes;
  cx.stab = reinterpret_cast<float2*>(cx.xbuf + 2 * G::kXBytes);
  cx.st_tok = threadIdx.x / 4, cx.st_t = threadIdx.x % 4;
  cx.st_n = tok0 + cx.st_tok < T ? tok0 + cx.st_tok : T - 1;
  cx.xs_row = x + cx.st_n * cols;
  cx.ps = ps;
  const __half2 bias = __float2half2_rn((float)WT::kBias);
  if (b_begin < b_end) {  // an empty segment (fewer than 8 blocks) issues nothing and writes zeros
    cx.IssueW(b_begin / G::kBPS);
    cx.LoadRaw(cx.c_first / kTStep);
  }

  float tot[kTotSmem ? 1 : kTM][kTN][4], acc[kTM][kTN][4];  // tot: unused under kSplitK
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
  for (int64_t b = b_begin; b < b_end; ++b) {
    if constexpr (!kSplitK) {
      while (b >= seg_end) fold();
    }
    const int64_t j = b / G::kBPS;
    const int lb = (int)(b % G::kBPS);
    const uint8_t* wrow[kTM][2];
#pragma unroll
    for (int mi = 0; mi < kTM; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) wrow[mi][h] = cx.WRow(j, mi, h);
    TiledBlock<kType, kPre, kSplitK>(std::make_integer_sequence<int, WT::kCPB>{}, cx, b * WT::kCPB, wrow, lb, bias, acc);
  }
  if constexpr (!kSplitK) {
    while (seg < kSeg) fold();
  }
#pragma unroll
  for (int mi = 0; mi < kTM; ++mi)
#pragma unroll
    for (int ni = 0; ni < kTN; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t r = cx.row0 + 16 * kTM * cx.wm + 16 * mi + cx.g + 8 * (i / 2);
        const int64_t n = tok0 + 32 * cx.wn + 8 * ni + 2 * cx.t + (i % 2);
        if (r >= rows || n >= T) continue;
        if constexpr (kSplitK) {  // the segment's sum, for SumSegmentsKernel
          part[((int64_t)blockIdx.z * T + n) * rows + r] = acc[mi][ni][i];
        } else {
          const float v = kTotSmem ? tsw[((mi * kTN + ni) * 4 + i) * 32] : tot[kTotSmem ? 0 : mi][ni][i];
          y[n * rows + r] = __fmul_rn(v, w_scale);
        }
      }
}

// kSplitK's second kernel: y[i] = ((part[0][i] + part[1][i]) + ...) + part[7][i], times w_scale
// (the tiled kernel's fold, in the same order; i = n * rows + r).
__global__ void SumSegmentsKernel(const float* __restrict__ part, int64_t n, float* __restrict__ y, float w_scale) {
  pdl::Begin();
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = part[i];
#pragma unroll
  for (int s = 1; s < kSeg; ++s) v = __fadd_rn(v, part[s * n + i]);
  y[i] = __fmul_rn(v, w_scale);
}

template <uint32_t kType, bool kPre, bool kSplitK>
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
    const cudaError_t e = cudaFuncSetAttribute(MatmulMmaTiledKernel<kType, kPre, kSplitK>, cudaFuncAttributeMaxDynamicSharedMemorySize, G::Bytes(G::kUnitsAny));
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
  float* part = nullptr;
  if constexpr (kSplitK) part = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch.data) + TiledSplitKOffset(kPre, T, cols));
  const dim3 grid((unsigned)((rows + kTBM - 1) / kTBM), (unsigned)gy, kSplitK ? kSeg : 1);
  pdl::Launch(MatmulMmaTiledKernel<kType, kPre, kSplitK>, grid, kSeg * 32, smem, stream, w, rows, cols, row_bytes, x, T,
              y, w_scale, units, ps, part);
  if constexpr (kSplitK) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const int64_t n = T * rows;
    pdl::Launch(SumSegmentsKernel, (unsigned)((n + 255) / 256), 256, 0, stream, part, n, y, w_scale);
  }
  return cudaGetLastError();
}

template <uint32_t kType>
cudaError_t LaunchTiled(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                        float w_scale, MatmulScratch scratch, bool pre, bool split_k, cudaStream_t stream) {
  if (split_k) {
    if (pre) return LaunchTiledAs<kType, true, true>(w, rows, cols, x, T, y, w_scale, scratch, stream);
    return LaunchTiledAs<kType, false, true>(w, rows, cols, x, T, y, w_scale, scratch, stream);
  }
  if (pre) return LaunchTiledAs<kType, true, false>(w, rows, cols, x, T, y, w_scale, scratch, stream);
  return LaunchTiledAs<kType, false, false>(w, rows, cols, x, T, y, w_scale, scratch, stream);
}

template cudaError_t LaunchTiled<(uint32_t)q::Type::Q4_K>(const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, MatmulScratch, bool, bool, cudaStream_t);
template cudaError_t LaunchTiled<(uint32_t)q::Type::Q8_0>(const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, MatmulScratch, bool, bool, cudaStream_t);
template cudaError_t LaunchTiled<(uint32_t)q::Type::Q6_K>(const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, MatmulScratch, bool, bool, cudaStream_t);

}  // namespace lockstep::kernels::mma_internal
