// Gated DeltaNet kernels (gdn.h; reduction orders in docs/kernels.md, "Gated DeltaNet").
#include "kernels/gdn.h"

#include <cmath>

#include "kernels/pdl.cuh"

namespace lockstep::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDynamicSmem = 227 * 1024;  // sm_90's opt-in limit per block

unsigned GridFor(int64_t n, int threads = kThreads) {
  const int64_t want = (n + threads - 1) / threads;
  return (unsigned)(want < 132 * 64 ? (want < 1 ? 1 : want) : 132 * 64);
}

__device__ __forceinline__ float Silu(float a) { return __fdiv_rn(a, __fadd_rn(1.0f, expf(-a))); }

// One thread per (sequence, channel): its K - 1 history values in registers, every row in order.
__global__ void CausalConvSiluKernel(GdnStepParams st, const float* x, const float* __restrict__ w,
                                     int64_t C, int K, float* __restrict__ conv_state, float* y) {
  pdl::Begin();
  constexpr int kH = kGdnMaxConvKernel - 1;
  const int64_t conv_floats = (int64_t)(K - 1) * C;
  for (int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; item < st.n_seq * C;
       item += (int64_t)gridDim.x * blockDim.x) {
    const int64_t s = item / C, c = item % C;
    const int64_t r0 = st.query_start[s], r1 = st.query_start[s + 1];
    if (r0 == r1) continue;
    float* slot = conv_state + (int64_t)st.state_slots[s] * conv_floats;
    const bool fresh = st.positions[r0] == 0;
    float hist[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) hist[i] = (i < K - 1 && !fresh) ? slot[i * C + c] : 0.0f;
    float wc[kGdnMaxConvKernel];
#pragma unroll
    for (int i = 0; i < kGdnMaxConvKernel; ++i) wc[i] = i < K ? w[c * K + i] : 0.0f;
    for (int64_t t = r0; t < r1; ++t) {
      const float xt = x[t * C + c];
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        if (i < K - 1) acc = __fmaf_rn(wc[i], hist[i], acc);
      }
      // w[c, K - 1] times this row's input, last in the chain.
#pragma unroll
      for (int i = 0; i < kGdnMaxConvKernel; ++i) {
        if (i == K - 1) acc = __fmaf_rn(wc[i], xt, acc);
      }
      y[t * C + c] = Silu(acc);
#pragma unroll
      for (int i = 0; i + 1 < kH; ++i) {
        if (i + 1 < K - 1) hist[i] = hist[i + 1];
      }
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        if (i == K - 2) hist[i] = xt;
      }
      if (st.checkpoints != nullptr && st.checkpoints[t] >= 0) {
        float* cp = conv_state + (int64_t)st.checkpoints[t] * conv_floats;
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          if (i < K - 1) cp[i * C + c] = hist[i];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      if (i < K - 1) slot[i * C + c] = hist[i];
    }
  }
}

__global__ void GdnGatesKernel(const float* a, const float* b, const float* __restrict__ dt_bias,
                               const float* __restrict__ ssm_a, int64_t T, int64_t H, float* g,
                               float* beta) {
  pdl::Begin();
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < T * H;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t h = o % H;
    const float z = __fadd_rn(a[o], dt_bias[h]);
    const float sp = z > 20.0f ? z : log1pf(expf(z));
    const float bb = b[o];
    g[o] = __fmul_rn(ssm_a[h], sp);
    beta[o] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-bb)));
  }
}

// Sum of squares of v[0, n) by warp 0: lane l's fma chain over l, l + 32, ..., then the tree.
// Every lane of warp 0 returns the same bits.
__device__ __forceinline__ float WarpSumSquares(const float* v, int n, int lane) {
  float s = 0.0f;
  for (int i = lane; i < n; i += 32) s = __fmaf_rn(v[i], v[i], s);
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, o));
  return s;
}

// One CTA per (sequence, value head); thread j < dv owns column j of S.
__global__ void GatedDeltaRuleKernel(GdnStepParams st, GatedDeltaRuleParams p) {
  pdl::Begin();
  extern __shared__ float smem[];
  const int dk = p.dk, dv = p.dv, Hv = p.n_v_head;
  float* S = smem;           // [dk, dv]
  float* qs = S + dk * dv;   // [dk]
  float* ks = qs + dk;       // [dk]
  float* norms = ks + dk;    // [2]: q and k scale
  const int s = blockIdx.x / Hv, h = blockIdx.x % Hv;
  const int64_t r0 = st.query_start[s], r1 = st.query_start[s + 1];
  if (r0 == r1) return;
  const int kh = p.tiled_k ? h % p.n_k_head : h / (Hv / p.n_k_head);
  const int64_t C = 2 * (int64_t)p.n_k_head * dk + (int64_t)Hv * dv;
  const int64_t k_off = (int64_t)p.n_k_head * dk, v_off = 2 * (int64_t)p.n_k_head * dk;
  const int64_t head_floats = (int64_t)dk * dv;
  float* slot = p.ssm + ((int64_t)st.state_slots[s] * Hv + h) * head_floats;
  const int j = threadIdx.x;
  const bool owner = j < dv;
  if (owner) {
    const bool fresh = st.positions[r0] == 0;
    for (int i = 0; i < dk; ++i) S[i * dv + j] = fresh ? 0.0f : slot[i * dv + j];
  }
  const float q_scale = __fdiv_rn(1.0f, __fsqrt_rn((float)dk));
  for (int64_t t = r0; t < r1; ++t) {
    const float* row = p.qkv + t * C;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      qs[i] = row[(int64_t)kh * dk + i];
      ks[i] = row[k_off + (int64_t)kh * dk + i];
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const float qq = WarpSumSquares(qs, dk, threadIdx.x);
      const float kk = WarpSumSquares(ks, dk, threadIdx.x);
      if (threadIdx.x == 0) {
        norms[0] = __fdiv_rn(q_scale, __fsqrt_rn(__fadd_rn(qq, p.eps)));
        norms[1] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(kk, p.eps)));
      }
    }
    __syncthreads();
    const float qn = norms[0], kn = norms[1];
    if (owner) {
      const float decay = expf(p.g[t * Hv + h]), b = p.beta[t * Hv + h];
      float kv = 0.0f;
      for (int i = 0; i < dk; ++i) {
        const float sij = __fmul_rn(S[i * dv + j], decay);
        S[i * dv + j] = sij;
        kv = __fmaf_rn(sij, __fmul_rn(ks[i], kn), kv);
      }
      const float delta = __fmul_rn(__fsub_rn(row[v_off + (int64_t)h * dv + j], kv), b);
      float o = 0.0f;
      for (int i = 0; i < dk; ++i) {
        const float sij = __fmaf_rn(__fmul_rn(ks[i], kn), delta, S[i * dv + j]);
        S[i * dv + j] = sij;
        o = __fmaf_rn(sij, __fmul_rn(qs[i], qn), o);
      }
      p.out[t * Hv * dv + (int64_t)h * dv + j] = o;
      if (st.checkpoints != nullptr && st.checkpoints[t] >= 0) {
        float* cp = p.ssm + ((int64_t)st.checkpoints[t] * Hv + h) * head_floats;
        for (int i = 0; i < dk; ++i) cp[i * dv + j] = S[i * dv + j];
      }
    }
    __syncthreads();  // qs, ks, norms are rewritten by the next row
  }
  if (owner) {
    for (int i = 0; i < dk; ++i) slot[i * dv + j] = S[i * dv + j];
  }
}

// One CTA of 256 per row (the sum of squares as RmsNormKernel in elementwise.cu).
__global__ void __launch_bounds__(kThreads)
    GatedRmsNormKernel(const float* x, const float* __restrict__ w, const float* z, int64_t d,
                       float eps, float* y) {
  pdl::Begin();
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float scale_s;
  const float* xr = x + (int64_t)blockIdx.x * d;
  const float* zr = z + (int64_t)blockIdx.x * d;
  float* yr = y + (int64_t)blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += kThreads) ss = __fmaf_rn(xr[i], xr[i], ss);
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) ss = __fadd_rn(ss, __shfl_xor_sync(0xFFFFFFFFu, ss, o));
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = warp_sums[0];
    for (int k = 1; k < kThreads / 32; ++k) total = __fadd_rn(total, warp_sums[k]);
    scale_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)d), eps)));
  }
  __syncthreads();
  const float inv = scale_s;
  for (int64_t i = threadIdx.x; i < d; i += kThreads) {
    yr[i] = __fmul_rn(__fmul_rn(__fmul_rn(xr[i], inv), w[i]), Silu(zr[i]));
  }
}

__global__ void SplitHalvesKernel(const float* __restrict__ x, int64_t T, int64_t half, int64_t m,
                                  float* __restrict__ a, float* __restrict__ b) {
  pdl::Begin();
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < T * half;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = o / half, col = o % half, grp = col / m, i = col % m;
    const float* src = x + t * 2 * half + 2 * grp * m + i;
    a[o] = src[0];
    b[o] = src[m];
  }
}

bool StepOk(const GdnStepParams& st) {
  return st.query_start != nullptr && st.positions != nullptr && st.state_slots != nullptr &&
         st.T >= 0 && st.n_seq >= 0;
}

}  // namespace

cudaError_t LaunchCausalConvSilu(const GdnStepParams& step, const float* x, const float* w,
                                 int64_t C, int K, float* conv_state, float* y,
                                 cudaStream_t stream) {
  if (!StepOk(step) || x == nullptr || w == nullptr || y == nullptr || C < 1 || K < 1 ||
      K > kGdnMaxConvKernel || (K > 1 && conv_state == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (step.T == 0 || step.n_seq == 0) return cudaSuccess;
  pdl::Launch(CausalConvSiluKernel, GridFor(step.n_seq * C), kThreads, 0, stream, step, x, w, C, K, conv_state, y);
  return cudaGetLastError();
}

cudaError_t LaunchGdnGates(const float* a, const float* b, const float* dt_bias,
                           const float* ssm_a, int64_t T, int64_t H, float* g, float* beta,
                           cudaStream_t stream) {
  if (a == nullptr || b == nullptr || dt_bias == nullptr || ssm_a == nullptr || g == nullptr ||
      beta == nullptr || T < 0 || H < 1) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  pdl::Launch(GdnGatesKernel, GridFor(T * H), kThreads, 0, stream, a, b, dt_bias, ssm_a, T, H, g, beta);
  return cudaGetLastError();
}

cudaError_t LaunchGatedDeltaRule(const GdnStepParams& step, const GatedDeltaRuleParams& p,
                                 cudaStream_t stream) {
  if (!StepOk(step) || p.qkv == nullptr || p.g == nullptr || p.beta == nullptr ||
      p.ssm == nullptr || p.out == nullptr || p.n_k_head < 1 || p.n_v_head < 1 ||
      p.n_v_head % p.n_k_head != 0 || p.dk < 1 || p.dv < 1 || p.dv > 1024) {
    return cudaErrorInvalidValue;
  }
  const int64_t smem = ((int64_t)p.dk * p.dv + 2 * (int64_t)p.dk + 2) * 4;
  if (smem > kMaxDynamicSmem) return cudaErrorInvalidValue;
  if (step.T == 0 || step.n_seq == 0) return cudaSuccess;
  const int64_t ctas = (int64_t)step.n_seq * p.n_v_head;
  if (ctas > 0x7fffffff) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    // Raised once per size, as matmul.cu does: a shape's first step runs eagerly, so a graph
    // capture never sees this call.
    static int attr_bytes = 0;
    if ((int)smem > attr_bytes) {
      const cudaError_t e = cudaFuncSetAttribute(
          GatedDeltaRuleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
      if (e != cudaSuccess) return e;
      attr_bytes = (int)smem;
    }
  }
  const int threads = p.dv < 32 ? 32 : (p.dv + 31) / 32 * 32;
  pdl::Launch(GatedDeltaRuleKernel, (unsigned)ctas, threads, (size_t)smem, stream, step, p);
  return cudaGetLastError();
}

cudaError_t LaunchGatedRmsNorm(const float* x, const float* w, const float* z, int64_t T,
                               int64_t d, float eps, float* y, cudaStream_t stream) {
  if (x == nullptr || w == nullptr || z == nullptr || y == nullptr || T < 0 || d < 1 ||
      T > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  pdl::Launch(GatedRmsNormKernel, (unsigned)T, kThreads, 0, stream, x, w, z, d, eps, y);
  return cudaGetLastError();
}

cudaError_t LaunchSplitHalves(const float* x, int64_t T, int64_t half, int64_t m, float* a,
                              float* b, cudaStream_t stream) {
  if (x == nullptr || a == nullptr || b == nullptr || T < 0 || m < 1 || half < 1 ||
      half % m != 0) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  pdl::Launch(SplitHalvesKernel, GridFor(T * half), kThreads, 0, stream, x, T, half, m, a, b);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
