// Philox4x32-10 written out for the device (the same rounds as engine/sampling/philox.h, which is
// constexpr host code), and a Gumbel-max reduction whose order does not matter: (score, -id) is
// a total order, so any tree yields the same winner.
#include "kernels/sampling.h"
#include "kernels/pdl.cuh"

#include <cfloat>
#include <climits>

namespace lockstep::kernels {
namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

__device__ __forceinline__ uint32_t NoiseBitsDevice(uint64_t seed, uint64_t position,
                                                    uint32_t token, uint32_t stream) {
  uint32_t c0 = token, c1 = stream, c2 = (uint32_t)position, c3 = (uint32_t)(position >> 32);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint32_t hi0 = __umulhi(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = __umulhi(kM1, c2), lo1 = kM1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
  }
  return c0;
}

__global__ void NoiseKernel(uint64_t seed, const int64_t* __restrict__ positions, int64_t n_rows,
                            uint32_t token0, int64_t n_tokens, uint32_t stream_tag,
                            uint32_t* __restrict__ bits) {
  pdl::Begin();
  const int64_t total = n_rows * n_tokens;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / n_tokens, v = i % n_tokens;
    bits[i] = NoiseBitsDevice(seed, (uint64_t)positions[r], token0 + (uint32_t)v, stream_tag);
  }
}

constexpr int kThreads = 256;

__device__ __forceinline__ bool Better(double s, int id, double bs, int bid) {
  return bid < 0 || s > bs || (s == bs && id < bid);
}

__global__ void __launch_bounds__(kThreads) GumbelKernel(const float* __restrict__ logits,
                                                         int64_t vocab, double inv_t, uint64_t seed,
                                                         const int64_t* __restrict__ positions,
                                                         int32_t* __restrict__ out) {
  pdl::Begin();
  __shared__ double ss[kThreads];
  __shared__ int si[kThreads];
  const int64_t r = blockIdx.x;
  const uint64_t pos = (uint64_t)positions[r];
  double best = -DBL_MAX;
  int bid = -1;
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) {
    const uint32_t b = NoiseBitsDevice(seed, pos, (uint32_t)v, 0);
    const double u = ((double)b + 0.5) * 0x1p-32;
    const double g = -log(-log(u));
    const double s = (double)logits[r * vocab + v] * inv_t + g;
    if (Better(s, (int)v, best, bid)) best = s, bid = (int)v;
  }
  ss[threadIdx.x] = best;
  si[threadIdx.x] = bid;
  __syncthreads();
  for (int o = kThreads / 2; o >= 1; o /= 2) {
    if (threadIdx.x < o) {
      const double s2 = ss[threadIdx.x + o];
      const int i2 = si[threadIdx.x + o];
      if (i2 >= 0 && Better(s2, i2, ss[threadIdx.x], si[threadIdx.x])) {
        ss[threadIdx.x] = s2;
        si[threadIdx.x] = i2;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = si[0];
}

constexpr int kGreedyThreads = 256;
constexpr int kGreedyChunk = 8192;  // logits per CTA of the first pass

// (v, id) beats (bv, bid): a larger value, or the same value at a lower id; bid < 0 is empty.
__device__ __forceinline__ bool GreedyBetter(float v, int id, float bv, int bid) {
  return id >= 0 && (bid < 0 || v > bv || (v == bv && id < bid));
}

struct GreedyPartial {
  float v;
  int id, bad;  // bad: the lowest NaN / +inf id, INT_MAX for none
};

// Reduces one thread's (best, bad) over a warp with shfl_down; lane 0 holds the result.
__device__ __forceinline__ void GreedyWarp(float& best, int& bid, int& bad) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) {
    const float v2 = __shfl_down_sync(0xFFFFFFFFu, best, o);
    const int i2 = __shfl_down_sync(0xFFFFFFFFu, bid, o), b2 = __shfl_down_sync(0xFFFFFFFFu, bad, o);
    if (GreedyBetter(v2, i2, best, bid)) best = v2, bid = i2;
    bad = min(bad, b2);
  }
}

// Pass 1: CTA (c, r) reduces logits [c * kGreedyChunk, (c + 1) * kGreedyChunk) of row r.
__global__ void __launch_bounds__(kGreedyThreads) GreedyChunkKernel(const float* __restrict__ logits,
                                                                    int64_t vocab, int n_chunks,
                                                                    GreedyPartial* __restrict__ part) {
  pdl::Begin();
  __shared__ GreedyPartial sw[kGreedyThreads / 32];
  const float* row = logits + (int64_t)blockIdx.y * vocab;
  const int64_t v0 = (int64_t)blockIdx.x * kGreedyChunk;
  const int64_t v1 = min(v0 + kGreedyChunk, vocab);
  float best = 0.f;
  int bid = -1, bad = INT_MAX;
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kGreedyThreads) {
    const float x = __ldg(row + v);
    if (isnan(x) || x == INFINITY) {
      bad = min(bad, (int)v);
    } else if (x > -INFINITY && GreedyBetter(x, (int)v, best, bid)) {
      best = x, bid = (int)v;
    }
  }
  GreedyWarp(best, bid, bad);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sw[warp] = {best, bid, bad};
  __syncthreads();
  if (warp == 0) {
    const GreedyPartial q = lane < kGreedyThreads / 32 ? sw[lane] : GreedyPartial{0.f, -1, INT_MAX};
    best = q.v, bid = q.id, bad = q.bad;
    GreedyWarp(best, bid, bad);
    if (lane == 0) part[(int64_t)blockIdx.y * n_chunks + blockIdx.x] = {best, bid, bad};
  }
}

// Pass 2: one warp per row over its chunks' partials.
__global__ void GreedyRowKernel(const GreedyPartial* __restrict__ part, int n_chunks,
                                int32_t* __restrict__ out) {
  pdl::Begin();
  const int64_t r = blockIdx.x;
  float best = 0.f;
  int bid = -1, bad = INT_MAX;
  for (int c = threadIdx.x; c < n_chunks; c += 32) {
    const GreedyPartial q = part[r * n_chunks + c];
    if (GreedyBetter(q.v, q.id, best, bid)) best = q.v, bid = q.id;
    bad = min(bad, q.bad);
  }
  GreedyWarp(best, bid, bad);
  if (threadIdx.x == 0) {
    out[2 * r] = bid;
    out[2 * r + 1] = bad == INT_MAX ? -1 : bad;
  }
}

}  // namespace

size_t GreedyTokensWorkspaceBytes(int64_t n_rows, int64_t vocab) {
  const int64_t chunks = (vocab + kGreedyChunk - 1) / kGreedyChunk;
  return (size_t)((n_rows < 1 ? 1 : n_rows) * (chunks < 1 ? 1 : chunks)) * sizeof(GreedyPartial);
}

cudaError_t LaunchGreedyTokens(const float* logits, int64_t n_rows, int64_t vocab, void* workspace,
                               size_t workspace_bytes, int32_t* out, cudaStream_t stream) {
  if (logits == nullptr || out == nullptr || workspace == nullptr || n_rows < 0 || vocab < 1 ||
      vocab > 0x7FFFFFFF || n_rows > 65535 ||
      workspace_bytes < GreedyTokensWorkspaceBytes(n_rows, vocab)) {
    return cudaErrorInvalidValue;
  }
  if (n_rows == 0) return cudaSuccess;
  const int chunks = (int)((vocab + kGreedyChunk - 1) / kGreedyChunk);
  auto* part = static_cast<GreedyPartial*>(workspace);
  pdl::Launch(GreedyChunkKernel, dim3(chunks, (unsigned)n_rows), kGreedyThreads, 0, stream, logits, vocab, chunks,
              part);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  pdl::Launch(GreedyRowKernel, (unsigned)n_rows, 32, 0, stream, part, chunks, out);
  return cudaGetLastError();
}

cudaError_t LaunchPhiloxNoise(uint64_t seed, const int64_t* positions, int64_t n_rows,
                              uint32_t token0, int64_t n_tokens, uint32_t stream_tag,
                              uint32_t* bits, cudaStream_t stream) {
  if (positions == nullptr || bits == nullptr || n_rows < 0 || n_tokens < 0) return cudaErrorInvalidValue;
  if (n_rows * n_tokens == 0) return cudaSuccess;
  const int64_t want = (n_rows * n_tokens + 255) / 256;
  pdl::Launch(NoiseKernel, (unsigned)(want < 132 * 64 ? want : 132 * 64), 256, 0, stream, seed, positions, n_rows,
              token0, n_tokens, stream_tag, bits);
  return cudaGetLastError();
}

cudaError_t LaunchGumbelArgmax(const float* logits, int64_t n_rows, int64_t vocab,
                               double inv_temperature, uint64_t seed, const int64_t* positions,
                               int32_t* out, cudaStream_t stream) {
  if (logits == nullptr || positions == nullptr || out == nullptr || n_rows < 0 || vocab < 1 ||
      vocab > 0x7FFFFFFF || n_rows > 0x7FFFFFFF) {
    return cudaErrorInvalidValue;
  }
  if (n_rows == 0) return cudaSuccess;
  pdl::Launch(GumbelKernel, (unsigned)n_rows, kThreads, 0, stream, logits, vocab, inv_temperature, seed, positions,
              out);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
