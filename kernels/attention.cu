// Paged attention (attention.h): a piece kernel, one CTA per (piece, head, query row), writes
// (max, sum, unnormalised output) per piece; a combine kernel, one CTA per (head, query row),
// merges the pieces in order.
#include "kernels/attention.h"

#include "engine/quant/blocks.h"
#include "engine/quant/decode.h"
#include "engine/quant/fp.h"
#include "engine/quant/kv_format.h"

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;

constexpr int kThreads = 128;

// Element e of a KV row in format fmt, decoded exactly as the host decoders do.
__device__ __forceinline__ float KvElem(uint32_t fmt, const uint8_t* row, int e) {
  switch ((q::KvFormat)fmt) {
    case q::KvFormat::kF32: return reinterpret_cast<const float*>(row)[e];
    case q::KvFormat::kF16: return q::Fp16ToFp32(reinterpret_cast<const uint16_t*>(row)[e]);
    case q::KvFormat::kBF16: return q::Bf16ToFp32(reinterpret_cast<const uint16_t*>(row)[e]);
    case q::KvFormat::kQ8_0: {
      const auto* b = reinterpret_cast<const q::BlockQ8_0*>(row) + e / 32;
      return q::RoundedMul((float)b->qs[e % 32], q::Fp16ToFp32(b->d));
    }
    case q::KvFormat::kQ5_1: {
      const auto* b = reinterpret_cast<const q::BlockQ5_1*>(row) + e / 32;
      const int l = e % 32;
      const uint32_t qh = q::LoadQh(b->qh);
      const int nib = l < 16 ? (b->qs[l] & 0xF) : (b->qs[l - 16] >> 4);
      const int qv = nib | (int)(((qh >> l) & 1u) << 4);
      return q::RoundedAdd(q::RoundedMul(q::Fp16ToFp32(b->d), (float)qv), q::Fp16ToFp32(b->m));
    }
    case q::KvFormat::kQ4_0: {
      const auto* b = reinterpret_cast<const q::BlockQ4_0*>(row) + e / 32;
      const int l = e % 32;
      const int nib = l < 16 ? (b->qs[l] & 0xF) : (b->qs[l - 16] >> 4);
      return q::RoundedMul(q::Fp16ToFp32(b->d), (float)(nib - 8));
    }
    case q::KvFormat::kFp8E4M3: return q::E4m3ToFp32(row[e]);
  }
  return 0.0f;
}

struct RowInfo {
  int seq, pos, lo, hi;  // visible keys lo..hi (hi < lo: none)
};

__device__ RowInfo FindRow(const PagedAttentionParams& p, int64_t t) {
  int a = 0, b = p.n_seq - 1;  // largest i with query_start[i] <= t
  while (a < b) {
    const int m = (a + b + 1) / 2;
    if (p.query_start[m] <= t) a = m; else b = m - 1;
  }
  RowInfo r;
  r.seq = a;
  r.pos = p.positions[t];
  const int len = p.seq_len[a];
  r.hi = min(r.pos, len - 1);
  r.lo = p.window > 0 ? max(0, r.pos - p.window + 1) : 0;
  return r;
}

__device__ __forceinline__ const uint8_t* SlotRow(const PagedAttentionParams& p, const void* cache,
                                                  int64_t row_bytes, int seq, int j) {
  const int block = p.block_table[(int64_t)seq * p.max_blocks_per_seq + j / p.block_size];
  const int64_t slot = (int64_t)block * p.block_size + j % p.block_size;
  return static_cast<const uint8_t*>(cache) + slot * row_bytes;
}

__global__ void __launch_bounds__(kThreads) PieceKernel(PagedAttentionParams p, int n_pieces,
                                                        float* __restrict__ ws) {
  __shared__ float qs[kAttentionMaxHeadDim];
  __shared__ float sc[kAttentionPiece];
  __shared__ float red[kThreads / 32];
  __shared__ float m_s, l_s;
  const int piece = blockIdx.x, h = blockIdx.y;
  const int64_t t = blockIdx.z;
  const RowInfo r = FindRow(p, t);
  const int j0 = max(piece * kAttentionPiece, r.lo);
  const int j1 = min(piece * kAttentionPiece + kAttentionPiece - 1, r.hi);
  if (j1 < j0) return;  // nothing visible: the combine kernel skips this piece
  const int D = p.head_dim;
  const int kvh = h / (p.n_head / p.n_kv_head);
  const int64_t kv_dim = (int64_t)p.n_kv_head * D;
  const int64_t k_rb = q::KvRowBytes((q::KvFormat)p.k_format, kv_dim);
  const int64_t v_rb = q::KvRowBytes((q::KvFormat)p.v_format, kv_dim);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = p.q[(t * p.n_head + h) * D + d];
  __syncthreads();
  const int base = piece * kAttentionPiece;
  const int n_keys = j1 - j0 + 1;
  // Scores: warp w takes keys j0 + w, j0 + w + 4, ...
  for (int kk = warp; kk < n_keys; kk += kThreads / 32) {
    const int j = j0 + kk;
    const uint8_t* krow = SlotRow(p, p.k_cache, k_rb, r.seq, j);
    float dot = 0.0f;
    for (int d = lane; d < D; d += 32) dot = __fmaf_rn(qs[d], KvElem(p.k_format, krow, kvh * D + d), dot);
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) dot = __fadd_rn(dot, __shfl_xor_sync(0xFFFFFFFFu, dot, o));
    float s = __fmul_rn(dot, p.scale);
    if (p.softcap > 0.0f) s = __fmul_rn(p.softcap, tanhf(__fdiv_rn(s, p.softcap)));
    if (lane == 0) sc[j - base] = s;
  }
  __syncthreads();
  // Max (exact in any order).
  float mx = -INFINITY;
  for (int kk = threadIdx.x; kk < n_keys; kk += kThreads) mx = fmaxf(mx, sc[j0 - base + kk]);
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = red[0];
    for (int k = 1; k < kThreads / 32; ++k) m = fmaxf(m, red[k]);
    m_s = m;
  }
  __syncthreads();
  const float m = m_s;
  for (int kk = threadIdx.x; kk < n_keys; kk += kThreads) {
    sc[j0 - base + kk] = expf(__fsub_rn(sc[j0 - base + kk], m));
  }
  __syncthreads();
  if (warp == 0) {
    float l = 0.0f;
    for (int kk = lane; kk < n_keys; kk += 32) l = __fadd_rn(l, sc[j0 - base + kk]);
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) l = __fadd_rn(l, __shfl_xor_sync(0xFFFFFFFFu, l, o));
    if (lane == 0) l_s = l;
  }
  __syncthreads();
  float* out = ws + (((int64_t)t * p.n_head + h) * n_pieces + piece) * (D + 2);
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.0f;
#pragma unroll 4
    for (int kk = 0; kk < n_keys; ++kk) {
      const int j = j0 + kk;
      const uint8_t* vrow = SlotRow(p, p.v_cache, v_rb, r.seq, j);
      o = __fmaf_rn(sc[j - base], KvElem(p.v_format, vrow, kvh * D + d), o);
    }
    out[2 + d] = o;
  }
  if (threadIdx.x == 0) {
    out[0] = m;
    out[1] = l_s;
  }
}

__global__ void __launch_bounds__(kThreads) CombineKernel(PagedAttentionParams p, int n_pieces,
                                                          const float* __restrict__ ws) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const RowInfo r = FindRow(p, t);
  const int D = p.head_dim;
  float* dst = p.out + (t * p.n_head + h) * D;
  if (r.hi < r.lo) {
    for (int d = threadIdx.x; d < D; d += kThreads) dst[d] = 0.0f;
    return;
  }
  const int pa = r.lo / kAttentionPiece, pb = r.hi / kAttentionPiece;
  const float* base = ws + ((int64_t)t * p.n_head + h) * n_pieces * (D + 2);
  float M = -INFINITY;
  for (int i = pa; i <= pb; ++i) M = fmaxf(M, base[i * (D + 2)]);
  float L = 0.0f;
  for (int i = pa; i <= pb; ++i) {
    L = __fmaf_rn(base[i * (D + 2) + 1], expf(__fsub_rn(base[i * (D + 2)], M)), L);
  }
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.0f;
    for (int i = pa; i <= pb; ++i) {
      o = __fmaf_rn(base[i * (D + 2) + 2 + d], expf(__fsub_rn(base[i * (D + 2)], M)), o);
    }
    dst[d] = __fdiv_rn(o, L);
  }
}

}  // namespace

size_t PagedAttentionWorkspaceBytes(int64_t T, int n_head, int head_dim, int max_seq_len) {
  const int64_t pieces = (max_seq_len + kAttentionPiece - 1) / kAttentionPiece;
  return (size_t)(T * n_head * (pieces < 1 ? 1 : pieces) * (head_dim + 2)) * sizeof(float);
}

cudaError_t LaunchPagedAttention(const PagedAttentionParams& p, void* workspace,
                                 size_t workspace_bytes, cudaStream_t stream) {
  if (p.T < 0 || p.n_seq < 1 || p.n_head < 1 || p.n_kv_head < 1 || p.n_head % p.n_kv_head != 0 ||
      p.head_dim < 1 || p.head_dim > kAttentionMaxHeadDim || p.block_size < 1 ||
      p.max_blocks_per_seq < 1 || p.max_seq_len < 0 || p.window < 0 ||
      p.k_format >= (uint32_t)q::kKvFormatCount || p.v_format >= (uint32_t)q::kKvFormatCount) {
    return cudaErrorInvalidValue;
  }
  if (p.q == nullptr || p.k_cache == nullptr || p.v_cache == nullptr || p.query_start == nullptr ||
      p.seq_len == nullptr || p.block_table == nullptr || p.positions == nullptr ||
      p.out == nullptr || workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int64_t kv_dim = (int64_t)p.n_kv_head * p.head_dim;
  if (kv_dim % q::KvFormatBlockElems((q::KvFormat)p.k_format) != 0 ||
      kv_dim % q::KvFormatBlockElems((q::KvFormat)p.v_format) != 0) {
    return cudaErrorInvalidValue;
  }
  if (workspace_bytes < PagedAttentionWorkspaceBytes(p.T, p.n_head, p.head_dim, p.max_seq_len)) {
    return cudaErrorInvalidValue;
  }
  if (p.T == 0) return cudaSuccess;
  if (p.T > 65535) return cudaErrorInvalidValue;  // grid.z / grid.y limit
  const int n_pieces = p.max_seq_len < 1 ? 1 : (p.max_seq_len + kAttentionPiece - 1) / kAttentionPiece;
  float* ws = static_cast<float*>(workspace);
  PieceKernel<<<dim3(n_pieces, p.n_head, (unsigned)p.T), kThreads, 0, stream>>>(p, n_pieces, ws);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  CombineKernel<<<dim3(p.n_head, (unsigned)p.T), kThreads, 0, stream>>>(p, n_pieces, ws);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
