// Mixture-of-experts kernels (moe.h; reduction orders in docs/kernels.md, "MoE").
#include "kernels/moe.h"

#include <climits>
#include <cmath>

#include "engine/quant/decode.h"
#include "engine/quant/types.h"
#include "kernels/matmul.h"
#include "kernels/matmul_mma.h"
#include "kernels/pdl.cuh"

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;

constexpr int kThreads = 256;
constexpr unsigned kMaxGridY = 65535;

unsigned GridFor(int64_t n, int threads = kThreads) {
  const int64_t want = (n + threads - 1) / threads;
  return (unsigned)(want < 132 * 64 ? (want < 1 ? 1 : want) : 132 * 64);
}

// ---- route ----

constexpr int kRouteMaxE = 2048;  // 64 experts per lane: one uint64 of "taken" bits
constexpr int kRouteMaxK = 64;

// (key, id) ranks before (bk, bi): larger key, then smaller id; bi == INT_MAX is "none yet".
__device__ __forceinline__ bool RanksBefore(float key, int id, float bk, int bi) {
  return bi == INT_MAX || key > bk || (key == bk && id < bi);
}

// One warp per token row.
__global__ void __launch_bounds__(kThreads) MoeRouteKernel(const float* __restrict__ logits,
                                                           int64_t T, int E, int k, bool normalize,
                                                           float* __restrict__ weights,
                                                           int32_t* __restrict__ ids) {
  pdl::Begin();
  const int lane = threadIdx.x % 32;
  const int64_t t = (int64_t)blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (t >= T) return;
  const float* l = logits + t * E;
  float m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, l[e]);
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  float sum = 0.0f;
  for (int e = lane; e < E; e += 32) sum = __fadd_rn(sum, expf(__fsub_rn(l[e], m)));
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(0xFFFFFFFFu, sum, o));
  uint64_t taken = 0;  // bit q: expert lane + 32 q is chosen
  float kept = 0.0f;
  for (int j = 0; j < k; ++j) {
    float bk = -INFINITY;
    int bi = INT_MAX;
    for (int e = lane, qi = 0; e < E; e += 32, ++qi) {
      if ((taken >> qi) & 1u) continue;
      const float v = l[e];
      const float key = isnan(v) ? -INFINITY : v;
      if (RanksBefore(key, e, bk, bi)) {
        bk = key;
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) {
      const float ok = __shfl_xor_sync(0xFFFFFFFFu, bk, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (oi != INT_MAX && RanksBefore(ok, oi, bk, bi)) {
        bk = ok;
        bi = oi;
      }
    }
    if (bi % 32 == lane) taken |= uint64_t{1} << (bi / 32);
    if (lane == 0) {
      const float w = __fdiv_rn(expf(__fsub_rn(l[bi], m)), sum);
      ids[t * k + j] = bi;
      weights[t * k + j] = w;
      kept = __fadd_rn(kept, w);
    }
  }
  if (normalize && lane == 0) {
    for (int j = 0; j < k; ++j) weights[t * k + j] = __fdiv_rn(weights[t * k + j], kept);
  }
}

// ---- expert matmul ----
//
// A CTA owns 32 weight rows of one (token, rank) row i's expert. Per group of 256 elements (8
// chunks of 32) it decodes the 32 rows' weights with the shared block decoders into shared
// memory (row stride 257 floats: conflict-free) and stages x's 256 values; warp p is class p and
// runs chunk p of the group (chunk 8 g + p, class p) on lane r's row. So class p's chain runs its
// chunks in increasing order, each chunk's 32 elements in increasing order, fma from 0: the
// matmul's order (matmul.h), and the 8 class sums meet in its tree.
constexpr int kExpRows = 32;
constexpr int kGroup = 256;
constexpr int kWStride = kGroup + 1;

__device__ __forceinline__ float ClassTree8(const float* a) {
  return __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[4]), __fadd_rn(a[2], a[6])),
                   __fadd_rn(__fadd_rn(a[1], a[5]), __fadd_rn(a[3], a[7])));
}

__global__ void __launch_bounds__(kThreads)
    MatmulExpertsKernel(uint32_t type_id, const uint8_t* __restrict__ w, int64_t n_expert,
                        int64_t rpe, int64_t cols, int64_t row_bytes, int block_size,
                        const int32_t* __restrict__ ids, int64_t n, int64_t k, bool x_per_token,
                        const float* __restrict__ x, float* __restrict__ y) {
  pdl::Begin();
  __shared__ float Ws[kExpRows * kWStride];
  __shared__ float Xs[kGroup];
  __shared__ float Ps[8 * kExpRows];
  const int tid = threadIdx.x, p = tid / 32, r = tid % 32;
  const int64_t row0 = (int64_t)blockIdx.x * kExpRows;
  const int rows_here = (int)(rpe - row0 < kExpRows ? rpe - row0 : kExpRows);
  const int64_t n_chunks = cols / 32;
  const int64_t n_groups = (n_chunks + 7) / 8;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int32_t e = ids[i];
    if (e < 0 || e >= n_expert) {  // uniform across the CTA
      if (tid < rows_here) y[i * rpe + row0 + tid] = __int_as_float(0x7fc00000);
      continue;
    }
    const float* xr = x + (x_per_token ? i / k : i) * cols;
    const uint8_t* wr = w + ((int64_t)e * rpe + row0) * row_bytes;
    float acc = 0.0f;
    for (int64_t g = 0; g < n_groups; ++g) {
      const int chunks_here = (int)(n_chunks - g * 8 < 8 ? n_chunks - g * 8 : 8);
      const int elems = chunks_here * 32;
      const int bpg = elems / block_size;  // blocks per row in this group
      for (int it = tid; it < kExpRows * bpg; it += kThreads) {
        const int rr = it / bpg, b = it % bpg;
        float* dst = Ws + rr * kWStride + b * block_size;
        if (rr < rows_here) {
          q::DecodeBlock(type_id, wr + rr * row_bytes, g * (kGroup / block_size) + b, dst);
        } else {
          for (int u = 0; u < block_size; ++u) dst[u] = 0.0f;
        }
      }
      if (tid < elems) Xs[tid] = xr[g * kGroup + tid];
      __syncthreads();
      if (p < chunks_here) {
        const float* wp = Ws + r * kWStride + p * 32;
        const float* xp = Xs + p * 32;
#pragma unroll 8
        for (int u = 0; u < 32; ++u) acc = __fmaf_rn(wp[u], xp[u], acc);
      }
      __syncthreads();
    }
    Ps[p * kExpRows + r] = acc;
    __syncthreads();
    if (tid < rows_here) {
      float a[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) a[c] = Ps[c * kExpRows + tid];
      y[i * rpe + row0 + tid] = ClassTree8(a);
    }
    __syncthreads();
  }
}

// ---- combine, sigmoid gate ----

__global__ void MoeCombineKernel(const float* __restrict__ y, const float* __restrict__ weights,
                                 int64_t T, int64_t k, int64_t d, float* __restrict__ out) {
  pdl::Begin();
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < T * d;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = o / d, c = o % d;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) acc = __fmaf_rn(weights[t * k + j], y[(t * k + j) * d + c], acc);
    out[o] = acc;
  }
}

__global__ void SigmoidMulKernel(const float* x, const float* __restrict__ g, int64_t g_cols,
                                 int64_t T, int64_t d, float* out) {
  pdl::Begin();
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < T * d;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = o / d, c = o % d;
    const float gv = g[t * g_cols + (g_cols == 1 ? 0 : c)];
    out[o] = __fdiv_rn(x[o], __fadd_rn(1.0f, expf(-gv)));
  }
}

}  // namespace

cudaError_t LaunchMoeRoute(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize,
                           float* weights, int32_t* ids, cudaStream_t stream) {
  if (logits == nullptr || weights == nullptr || ids == nullptr || T < 0 || E < 1 ||
      E > kRouteMaxE || k < 1 || k > E || k > kRouteMaxK) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const int64_t ctas = (T + kThreads / 32 - 1) / (kThreads / 32);
  if (ctas > 0x7fffffff) return cudaErrorInvalidValue;
  pdl::Launch(MoeRouteKernel, (unsigned)ctas, kThreads, 0, stream, logits, T, (int)E, (int)k, normalize, weights, ids);
  return cudaGetLastError();
}

cudaError_t LaunchMatmulExperts(uint32_t type_id, const void* w, int64_t n_expert, int64_t rpe,
                                int64_t cols, const int32_t* ids, int64_t n, int64_t k,
                                bool x_per_token, const float* x, float* y, cudaStream_t stream) {
  q::TypeTraits t;
  if (!MatmulSupportsType(type_id) || !q::LookupType(type_id, &t)) return cudaErrorInvalidValue;
  if (w == nullptr || ids == nullptr || x == nullptr || y == nullptr || n_expert < 1 || rpe < 1 ||
      cols < 32 || cols % 32 != 0 || cols % t.block_size != 0 || kGroup % t.block_size != 0 ||
      n < 0 || k < 1 || (x_per_token && n % k != 0) || reinterpret_cast<uintptr_t>(w) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  // The types LaunchMatmul runs on the MMA route get that route's bits (kernels/matmul_mma.h).
  if (MatmulAutoUsesMma(type_id)) {
    return LaunchMatmulMmaExperts(type_id, w, n_expert, rpe, cols, ids, n, k, x_per_token, x, y, stream);
  }
  const int64_t row_bytes = cols / t.block_size * t.type_size;
  const int64_t gx = (rpe + kExpRows - 1) / kExpRows;
  if (gx > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid((unsigned)gx, (unsigned)(n < kMaxGridY ? n : kMaxGridY));
  pdl::Launch(MatmulExpertsKernel, grid, kThreads, 0, stream, type_id, static_cast<const uint8_t*>(w), n_expert, rpe,
              cols, row_bytes, t.block_size, ids, n, k, x_per_token, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombine(const float* y, const float* weights, int64_t T, int64_t k,
                             int64_t d, float* out, cudaStream_t stream) {
  if (y == nullptr || weights == nullptr || out == nullptr || T < 0 || k < 1 || d < 1) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  pdl::Launch(MoeCombineKernel, GridFor(T * d), kThreads, 0, stream, y, weights, T, k, d, out);
  return cudaGetLastError();
}

cudaError_t LaunchSigmoidMul(const float* x, const float* g, int64_t g_cols, int64_t T, int64_t d,
                             float* out, cudaStream_t stream) {
  if (x == nullptr || g == nullptr || out == nullptr || T < 0 || d < 1 ||
      (g_cols != d && g_cols != 1)) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  pdl::Launch(SigmoidMulKernel, GridFor(T * d), kThreads, 0, stream, x, g, g_cols, T, d, out);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
