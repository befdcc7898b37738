// The MMA route's K-split kernel (kernels/matmul_mma_common.cuh states the per-chunk arithmetic):
// 8 warps per CTA on one tile of 16 * kMR rows x 8 * kNR tokens, warp s running K segment s, the
// segment sums meeting in shared memory; its activation fragments split per lane group, once per
// warp (small T) or once per launch into the caller's scratch (SplitKernel); and its
// expert-indexed form.
#include "kernels/matmul_mma_common.cuh"
#include "kernels/pdl.cuh"

namespace lockstep::kernels::mma_internal {

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

// One warp per 8 items (token, chunk) = lane group g; the 4 lanes of a group run SplitX together.
__global__ void __launch_bounds__(kSeg * 32) SplitKernel(const float* __restrict__ x, int64_t T, int64_t cols,
                                                         uint4* __restrict__ h, uint4* __restrict__ l,
                                                         float2* __restrict__ sx) {
  pdl::Begin();
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

cudaError_t LaunchSplit(const float* x, int64_t T, int64_t cols, MatmulScratch scratch, PreSplit& ps,
                        cudaStream_t stream) {
  const int64_t nch = cols / 32, items = T * nch;
  uint4* h = static_cast<uint4*>(scratch.data);
  uint4* l = h + items * 4;
  float2* sx = reinterpret_cast<float2*>(l + items * 4);
  const int64_t blocks = (items + 8 * kSeg - 1) / (8 * kSeg);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  pdl::Launch(SplitKernel, (unsigned)blocks, kSeg * 32, 0, stream, x, T, cols, h, l, sx);
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
                ExpertRows ex, PreSplit ps, GroupRows gr) {
  pdl::Begin();
  using WT = MmaType<kType>;
  static_assert(!kOnce || kNR == 1, "the split once serves one n-tile");
  static_assert(!(kOnce && kPre), "one source of fragments");
  static_assert(!kT1 || kOnce, "the T = 1 form is a form of the split once");
  extern __shared__ __align__(16) float red[];  // [kSeg][kMR * kNR * 4][32], then with kOnce a SplitStore per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  int64_t bx = blockIdx.x;
  if (gr.n > 0) {  // the group form: CTA row tiles of matrix 0, then of matrix 1, ...
    w = gr.w[0], rows = gr.rows[0], y = gr.y[0];
#pragma unroll
    for (int i = 0; i + 1 < kMatmulGroupMax; ++i) {
      if (i + 1 >= gr.n || bx < gr.tiles[i]) break;
      bx -= gr.tiles[i];
      w = gr.w[i + 1], rows = gr.rows[i + 1], y = gr.y[i + 1];
    }
  }
  const int64_t row0 = bx * 16 * kMR;
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

// kOnce (one n-tile, T <= 2): the activation split once per (token, chunk) in a SplitStore per
// warp; the bits are those of the split in every lane group. kT1: T = 1, the unstored columns of
// the C fragment not computed. kPre: the split once per launch into the caller's scratch
// (SplitKernel), then the K-split kernel reading it.
template <uint32_t kType, int kMR, int kNR, bool kOnce = false, bool kT1 = false, bool kPre = false>
cudaError_t LaunchCfg(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T,
                      float* y, float w_scale, MatmulScratch scratch, cudaStream_t stream, GroupRows gr) {
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
  int64_t gx = (rows + 16 * kMR - 1) / (16 * kMR);
  if (gr.n > 0) {  // every matrix's row tiles in one grid
    gx = 0;
    for (int i = 0; i < gr.n; ++i) gx += gr.tiles[i] = (gr.rows[i] + 16 * kMR - 1) / (16 * kMR);
  }
  if (gx > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid((unsigned)gx, (unsigned)gy);
  pdl::Launch(MatmulMmaKernel<kType, kMR, kNR, kOnce, kT1, kPre>, grid, kSeg * 32, smem, stream, w, rows, cols,
              row_bytes, x, T, y, w_scale, ExpertRows{}, ps, gr);
  return cudaGetLastError();
}

// A K-split configuration without the split once per warp: the split once per launch when the
// caller gave scratch (MatmulScratch), else in the kernel.
template <uint32_t kType, int kMR, int kNR>
cudaError_t LaunchSplitCfg(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                           float w_scale, MatmulScratch scratch, cudaStream_t stream, const GroupRows& gr) {
  if (scratch.data != nullptr) return LaunchCfg<kType, kMR, kNR, false, false, true>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
  return LaunchCfg<kType, kMR, kNR>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
}

// The K-split configurations (LaunchTyped's dispatch in matmul_mma.cu); cfg is not auto, scratch
// already checked (or none).
template <uint32_t kType>
cudaError_t LaunchKSplit(MmaConfig cfg, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T,
                         float* y, float w_scale, MatmulScratch scratch, cudaStream_t stream, const GroupRows& gr) {
  switch (cfg) {
    case MmaConfig::k16x8:
      // The split once measured 17-21% faster at T = 1, 2-13% at T = 2 and 14% slower for Q4_K
      // at T = 4 (docs/kernels.md run 12).
      if (T == 1) return LaunchCfg<kType, 1, 1, true, true>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
      return T <= 2 ? LaunchCfg<kType, 1, 1, true>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr)
                    : LaunchCfg<kType, 1, 1>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
    case MmaConfig::k32x8: return LaunchSplitCfg<kType, 2, 1>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
    case MmaConfig::k64x8: return LaunchSplitCfg<kType, 4, 1>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
    case MmaConfig::k64x16: return LaunchSplitCfg<kType, 4, 2>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
    case MmaConfig::k32x16: return LaunchSplitCfg<kType, 2, 2>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
    case MmaConfig::k64x32: return LaunchSplitCfg<kType, 4, 4>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
    case MmaConfig::k32x32: return LaunchSplitCfg<kType, 2, 4>(w, rows, cols, x, T, y, w_scale, scratch, stream, gr);
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
    pdl::Launch(MatmulMmaKernel<kType, 1, 1, true, true>, dim3((unsigned)gx, (unsigned)m), kSeg * 32, smem, stream, w,
                rpe, cols, row_bytes, xs, 1, y + i0 * rpe, 1.0f, ex, PreSplit{}, GroupRows{});
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template cudaError_t LaunchKSplit<(uint32_t)q::Type::Q4_K>(MmaConfig, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, MatmulScratch, cudaStream_t, const GroupRows&);
template cudaError_t LaunchKSplit<(uint32_t)q::Type::Q8_0>(MmaConfig, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, MatmulScratch, cudaStream_t, const GroupRows&);
template cudaError_t LaunchKSplit<(uint32_t)q::Type::Q6_K>(MmaConfig, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, MatmulScratch, cudaStream_t, const GroupRows&);
template cudaError_t LaunchExpertsTyped<(uint32_t)q::Type::Q4_K>(const uint8_t*, int64_t, int64_t, int64_t, const int32_t*, int64_t, int64_t, bool, const float*, float*, cudaStream_t);
template cudaError_t LaunchExpertsTyped<(uint32_t)q::Type::Q8_0>(const uint8_t*, int64_t, int64_t, int64_t, const int32_t*, int64_t, int64_t, bool, const float*, float*, cudaStream_t);
template cudaError_t LaunchExpertsTyped<(uint32_t)q::Type::Q6_K>(const uint8_t*, int64_t, int64_t, int64_t, const int32_t*, int64_t, int64_t, bool, const float*, float*, cudaStream_t);

}  // namespace lockstep::kernels::mma_internal
