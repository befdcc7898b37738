// Row and element kernels (elementwise.h).
#include "kernels/elementwise.h"

#include <cmath>

#include "engine/quant/decode.h"
#include "engine/quant/types.h"
#include "kernels/pdl.cuh"

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;

constexpr int kThreads = 256;

unsigned GridFor(int64_t n, int threads = kThreads) {
  const int64_t want = (n + threads - 1) / threads;
  return (unsigned)(want < 132 * 64 ? (want < 1 ? 1 : want) : 132 * 64);
}

// One CTA per row.
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const float* __restrict__ x,
                                                          const float* __restrict__ w, int64_t n,
                                                          float eps, float* y) {
  pdl::Begin();
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float scale_s;
  const float* xr = x + (int64_t)blockIdx.x * n;
  float* yr = y + (int64_t)blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) ss = __fmaf_rn(xr[i], xr[i], ss);
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) ss = __fadd_rn(ss, __shfl_xor_sync(0xFFFFFFFFu, ss, o));
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = warp_sums[0];
    for (int k = 1; k < kThreads / 32; ++k) total = __fadd_rn(total, warp_sums[k]);
    const float mean = __fdiv_rn(total, (float)n);
    scale_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  }
  __syncthreads();
  const float s = scale_s;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = __fmul_rn(xr[i], s);
    yr[i] = w ? __fmul_rn(v, w[i]) : v;
  }
}

// One thread per (t, h, pair or copied dim).
__global__ void RopeKernel(const float* x, const int32_t* __restrict__ positions, int64_t T,
                           int n_head, int head_dim, int n_rot, double base,
                           const float* __restrict__ freq_factors, int mode, float* y) {
  pdl::Begin();
  const int half = n_rot / 2;
  const int per_head = half + (head_dim - n_rot);
  const int64_t total = T * n_head * per_head;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int j = (int)(idx % per_head);
    const int64_t th = idx / per_head;  // t * n_head + h
    const int64_t t = th / n_head;
    const float* xh = x + th * head_dim;
    float* yh = y + th * head_dim;
    if (j >= half) {  // pass-through dims n_rot .. head_dim-1
      const int d = n_rot + (j - half);
      yh[d] = xh[d];
      continue;
    }
    const int i = j;
    double theta = (double)positions[t] * pow(base, -2.0 * i / n_rot);
    if (freq_factors) theta /= (double)freq_factors[i];
    const float c = (float)cos(theta), s = (float)sin(theta);
    const int d0 = mode == (int)RopeMode::kNeox ? i : 2 * i;
    const int d1 = mode == (int)RopeMode::kNeox ? i + half : 2 * i + 1;
    const float x0 = xh[d0], x1 = xh[d1];
    yh[d0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    yh[d1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
}

__global__ void GluKernel(int op, const float* __restrict__ g, int64_t g_stride,
                          const float* __restrict__ u, int64_t u_stride, int64_t T, int64_t n,
                          float* __restrict__ y) {
  pdl::Begin();
  const int64_t total = T * n;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = idx / n, i = idx % n;
    const float gv = g[t * g_stride + i], uv = u[t * u_stride + i];
    float a;
    if (op == (int)GluOp::kSilu) {
      a = __fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv)));
    } else {
      const float k = 0.7978845608028654f;  // sqrt(2/pi)
      const float inner = __fmul_rn(k, __fadd_rn(gv, __fmul_rn(0.044715f, __fmul_rn(gv, __fmul_rn(gv, gv)))));
      a = __fmul_rn(__fmul_rn(0.5f, gv), __fadd_rn(1.0f, tanhf(inner)));
    }
    y[idx] = __fmul_rn(a, uv);
  }
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* y) {
  pdl::Begin();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = __fadd_rn(a[i], b[i]);
  }
}

__global__ void ScaleKernel(const float* a, float s, int64_t n, float* y) {
  pdl::Begin();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = __fmul_rn(a[i], s);
  }
}

__global__ void SoftcapKernel(const float* a, float cap, int64_t n, float* y) {
  pdl::Begin();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = __fmul_rn(cap, tanhf(__fdiv_rn(a[i], cap)));
  }
}

// One thread per (t, block).
__global__ void GetRowsKernel(uint32_t type_id, const uint8_t* __restrict__ table, int64_t n_rows,
                              int64_t row_bytes, int64_t blocks_per_row, uint32_t block_size,
                              const int32_t* __restrict__ ids, int64_t T, float* __restrict__ y) {
  pdl::Begin();
  const int64_t total = T * blocks_per_row;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = idx / blocks_per_row, b = idx % blocks_per_row;
    float* out = y + t * blocks_per_row * block_size + b * block_size;
    const int32_t id = ids[t];
    if (id < 0 || id >= n_rows) {
      for (uint32_t e = 0; e < block_size; ++e) out[e] = __int_as_float(0x7FC00000);
      continue;
    }
    q::DecodeBlock(type_id, table + id * row_bytes, b, out);
  }
}

// One CTA per output row: y[i, :] = x[rows[i], :].
__global__ void GatherRowsKernel(const float* __restrict__ x, int64_t cols,
                                 const int32_t* __restrict__ rows, float* __restrict__ y) {
  pdl::Begin();
  const float* src = x + (int64_t)rows[blockIdx.x] * cols;
  float* dst = y + (int64_t)blockIdx.x * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) dst[c] = src[c];
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* w, int64_t T, int64_t n, float eps, float* y,
                          cudaStream_t stream) {
  if (x == nullptr || y == nullptr || T < 0 || n < 1 || T > 0x7FFFFFFF) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  pdl::Launch(RmsNormKernel, (unsigned)T, kThreads, 0, stream, x, w, n, eps, y);
  return cudaGetLastError();
}

cudaError_t LaunchRope(const float* x, const int32_t* positions, int64_t T, int n_head,
                       int head_dim, int n_rot, double base, const float* freq_factors,
                       RopeMode mode, float* y, cudaStream_t stream) {
  if (x == nullptr || y == nullptr || positions == nullptr || T < 0 || n_head < 1 ||
      head_dim < 1 || n_rot < 2 || n_rot % 2 != 0 || n_rot > head_dim) {
    return cudaErrorInvalidValue;
  }
  if (mode != RopeMode::kNormal && mode != RopeMode::kNeox) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  const int64_t total = T * n_head * (n_rot / 2 + head_dim - n_rot);
  pdl::Launch(RopeKernel, GridFor(total), kThreads, 0, stream, x, positions, T, n_head, head_dim, n_rot, base,
              freq_factors, (int)mode, y);
  return cudaGetLastError();
}

cudaError_t LaunchGlu(GluOp op, const float* g, int64_t g_stride, const float* u,
                      int64_t u_stride, int64_t T, int64_t n, float* y, cudaStream_t stream) {
  if (g == nullptr || u == nullptr || y == nullptr || T < 0 || n < 0) return cudaErrorInvalidValue;
  if (op != GluOp::kSilu && op != GluOp::kGeluTanh) return cudaErrorInvalidValue;
  if (T * n == 0) return cudaSuccess;
  pdl::Launch(GluKernel, GridFor(T * n), kThreads, 0, stream, (int)op, g, g_stride, u, u_stride, T, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream) {
  if (a == nullptr || b == nullptr || y == nullptr || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  pdl::Launch(AddKernel, GridFor(n), kThreads, 0, stream, a, b, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchScale(const float* a, float s, int64_t n, float* y, cudaStream_t stream) {
  if (a == nullptr || y == nullptr || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  pdl::Launch(ScaleKernel, GridFor(n), kThreads, 0, stream, a, s, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchSoftcap(const float* a, float cap, int64_t n, float* y, cudaStream_t stream) {
  if (a == nullptr || y == nullptr || n < 0 || !(cap > 0.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  pdl::Launch(SoftcapKernel, GridFor(n), kThreads, 0, stream, a, cap, n, y);
  return cudaGetLastError();
}

cudaError_t LaunchGetRows(uint32_t type_id, const void* table, int64_t n_rows, int64_t cols,
                          const int32_t* ids, int64_t T, float* y, cudaStream_t stream) {
  q::TypeTraits t;
  if (!q::LookupType(type_id, &t) || !t.lockstep_codec) return cudaErrorInvalidValue;
  if (table == nullptr || ids == nullptr || y == nullptr || n_rows < 1 || cols < 1 ||
      cols % t.block_size != 0 || T < 0 || reinterpret_cast<uintptr_t>(table) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const int64_t bpr = cols / t.block_size;
  pdl::Launch(GetRowsKernel, GridFor(T * bpr), kThreads, 0, stream, type_id, static_cast<const uint8_t*>(table), n_rows,
              bpr * t.type_size, bpr, t.block_size, ids, T, y);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t R,
                             float* y, cudaStream_t stream) {
  if (x == nullptr || rows == nullptr || y == nullptr || cols < 1 || R < 0 || R > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (R == 0) return cudaSuccess;
  pdl::Launch(GatherRowsKernel, (unsigned)R, kThreads, 0, stream, x, cols, rows, y);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
