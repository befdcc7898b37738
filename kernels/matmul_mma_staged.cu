// The MMA route's staged kernel for small T (kernels/matmul_mma_common.cuh states the per-chunk
// arithmetic, the K-split kernel's).
#include "kernels/matmul_mma_common.cuh"
#include "kernels/pdl.cuh"

namespace lockstep::kernels::mma_internal {

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
  pdl::Begin();
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
  pdl::Launch(MatmulMmaStagedKernel<kType, kStages, kSplitOnce>, dim3((unsigned)gx, (unsigned)gy), kSeg * 32, smem,
              stream, w, rows, cols, cols / WT::kBE * WT::kBB, x, T, y, w_scale, tmax);
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

template cudaError_t LaunchStaged<(uint32_t)q::Type::Q4_K>(const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, cudaStream_t);
template cudaError_t LaunchStaged<(uint32_t)q::Type::Q8_0>(const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, cudaStream_t);
template cudaError_t LaunchStaged<(uint32_t)q::Type::Q6_K>(const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, float, cudaStream_t);

}  // namespace lockstep::kernels::mma_internal
