// Paged attention (attention.h): a piece kernel, one CTA of 8 warps per (piece, head, query row),
// warp w owning keys 32w..32w+31 of the piece (lane = key for the scores, lane = dims for the
// output), writes (max, sum, unnormalised output) per piece, or the finished row when the row's
// keys lie in one piece; a combine kernel, one CTA per (head, query row), merges the pieces of
// the other rows in order (launched only when the grid has more than one piece).
#include "kernels/attention.h"

#include "engine/quant/blocks.h"
#include "engine/quant/decode.h"
#include "engine/quant/fp.h"
#include "engine/quant/kv_format.h"

#include <cuda_fp16.h>

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;

constexpr int kThreads = 256;

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

// kMode 2 (the f32 route): the f32 case of KvElem fixed at compile time, so the loads need no
// per-element switch and can be issued together; the value and its use are KvElem's.
template <int kMode>
__device__ __forceinline__ float KvElemM(uint32_t fmt, const uint8_t* row, int e) {
  if constexpr (kMode == 2) {
    return reinterpret_cast<const float*>(row)[e];
  } else {
    return KvElem(fmt, row, e);
  }
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

// The piece's dot-product classes: dim d of a score goes to class d % kScoreClasses; the class
// chains meet in the fixed tree ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)).
constexpr int kScoreClasses = 8;
constexpr int kSubKeys = 32;                          // keys per warp: one per lane
constexpr int kWarps = kAttentionPiece / kSubKeys;    // 8 warps cover one piece
static_assert(kThreads == kWarps * 32, "one warp per sub-piece");

__device__ __forceinline__ float ClassTree(const float (&a)[kScoreClasses]) {
  return __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[4]), __fadd_rn(a[2], a[6])),
                   __fadd_rn(__fadd_rn(a[1], a[5]), __fadd_rn(a[3], a[7])));
}

// kMode 1 (kFast): K and V are f16 and every head's slice is 16-byte aligned (checked by the
// launcher); the loads are wider. kMode 2: K and V are f32 with 16-byte-aligned caches; the
// generic code with the format fixed at compile time. In both the arithmetic and its order are
// the generic path's (kMode 0); attention-invariance compares each with it bitwise.
template <int kMode>
__global__ void __launch_bounds__(kThreads) PieceKernel(PagedAttentionParams p, int n_pieces,
                                                        float* __restrict__ ws) {
  constexpr bool kFast = kMode == 1;
  __shared__ float qs[kAttentionMaxHeadDim];
  __shared__ float ps[kAttentionPiece];
  __shared__ int64_t slot_s[kAttentionPiece];
  __shared__ float ow[kWarps][kAttentionMaxHeadDim];
  __shared__ float red[kWarps];
  __shared__ float lw[kWarps];
  const int piece = blockIdx.x, h = blockIdx.y;
  const int64_t t = blockIdx.z;
  const RowInfo r = FindRow(p, t);
  const int D = p.head_dim;
  float* dst = p.out + (t * p.n_head + h) * D;
  if (r.hi < r.lo) {  // sees no key: zeros, written once (piece 0 is always in the grid)
    if (piece == 0) for (int d = threadIdx.x; d < D; d += kThreads) dst[d] = 0.0f;
    return;
  }
  const int base = piece * kAttentionPiece;
  const int j0 = max(base, r.lo);
  const int j1 = min(base + kAttentionPiece - 1, r.hi);
  if (j1 < j0) return;  // nothing visible: the combine kernel skips this piece
  const int kvh = h / (p.n_head / p.n_kv_head);
  const int64_t kv_dim = (int64_t)p.n_kv_head * D;
  const int64_t k_rb = q::KvRowBytes((q::KvFormat)p.k_format, kv_dim);
  const int64_t v_rb = q::KvRowBytes((q::KvFormat)p.v_format, kv_dim);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = p.q[(t * p.n_head + h) * D + d];
  {
    const int kk = threadIdx.x, j = base + kk;
    if (j >= j0 && j <= j1) {
      const int block = p.block_table[(int64_t)r.seq * p.max_blocks_per_seq + j / p.block_size];
      slot_s[kk] = (int64_t)block * p.block_size + j % p.block_size;
    }
  }
  __syncthreads();
  // Scores: lane l of warp w is key base + 32 w + l; its dot runs kScoreClasses fma chains over
  // the dims in increasing order, then the class tree.
  const int kk_own = warp * kSubKeys + lane;
  const int j_own = base + kk_own;
  const bool vis = j_own >= j0 && j_own <= j1;
  float s = -INFINITY;
  if (vis) {
    const uint8_t* krow = static_cast<const uint8_t*>(p.k_cache) + slot_s[kk_own] * k_rb;
    float a[kScoreClasses];
#pragma unroll
    for (int c = 0; c < kScoreClasses; ++c) a[c] = 0.0f;
    if constexpr (kFast) {
      const uint4* k8 = reinterpret_cast<const uint4*>(krow + (int64_t)kvh * D * 2);
      for (int g = 0; g < D / 8; ++g) {
        const uint4 w = k8[g];
        const __half2* hw = reinterpret_cast<const __half2*>(&w);
#pragma unroll
        for (int c2 = 0; c2 < 4; ++c2) {
          const float2 f = __half22float2(hw[c2]);
          a[2 * c2] = __fmaf_rn(qs[8 * g + 2 * c2], f.x, a[2 * c2]);
          a[2 * c2 + 1] = __fmaf_rn(qs[8 * g + 2 * c2 + 1], f.y, a[2 * c2 + 1]);
        }
      }
    } else {
#pragma unroll 4
      for (int g = 0; g < D; g += kScoreClasses) {
#pragma unroll
        for (int c = 0; c < kScoreClasses; ++c) {
          if (g + c < D) a[c] = __fmaf_rn(qs[g + c], KvElemM<kMode>(p.k_format, krow, kvh * D + g + c), a[c]);
        }
      }
    }
    s = __fmul_rn(ClassTree(a), p.scale);
    if (p.softcap > 0.0f) s = __fmul_rn(p.softcap, tanhf(__fdiv_rn(s, p.softcap)));
  }
  // Piece max (exact in any order).
  float mx = s;
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[w]);
  // p = expf(s - m); the piece sum: per warp a shfl_xor tree (16..1) over its 32 keys (invisible
  // keys add +0), then the warps' sums in warp order.
  const float pv = vis ? expf(__fsub_rn(s, m)) : 0.0f;
  ps[kk_own] = pv;
  float l = pv;
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) l = __fadd_rn(l, __shfl_xor_sync(0xFFFFFFFFu, l, o));
  if (lane == 0) lw[warp] = l;
  __syncwarp();
  // Output: warp w runs, per dim, the fma chain over its visible keys in key order.
  constexpr int kMaxPerLane = kAttentionMaxHeadDim / 32;
  float o[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) o[i] = 0.0f;
  const int w0 = max(warp * kSubKeys, j0 - base), w1 = min(warp * kSubKeys + kSubKeys - 1, j1 - base);
  const int64_t v_off = (int64_t)kvh * D;
#pragma unroll 2
  for (int kk = w0; kk <= w1; ++kk) {
    const uint8_t* vrow = static_cast<const uint8_t*>(p.v_cache) + slot_s[kk] * v_rb;
    const float pk = ps[kk];
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) {
        float v;
        if constexpr (kFast) {
          v = __half2float(reinterpret_cast<const __half*>(vrow)[v_off + d]);
        } else {
          v = KvElemM<kMode>(p.v_format, vrow, (int)(v_off + d));
        }
        o[i] = __fmaf_rn(pk, v, o[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) ow[warp][d] = o[i];
  }
  __syncthreads();
  // The piece: warps summed in warp order.
  float L = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) L = __fadd_rn(L, lw[w]);
  const bool single = r.lo / kAttentionPiece == r.hi / kAttentionPiece;
  float* out = ws + (((int64_t)t * p.n_head + h) * n_pieces + piece) * (D + 2);
  // A row whose keys lie in one piece is finished here with the combine kernel's arithmetic for
  // one piece (M = max(-inf, m), weights expf(m - M)), so its bits are the combine's.
  const float M1 = fmaxf(-INFINITY, m);
  const float e1 = expf(__fsub_rn(m, M1));
  const float L1 = __fmaf_rn(L, e1, 0.0f);
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc = __fadd_rn(acc, ow[w][d]);
    if (single) {
      dst[d] = __fdiv_rn(__fmaf_rn(acc, e1, 0.0f), L1);
    } else {
      out[2 + d] = acc;
    }
  }
  if (!single && threadIdx.x == 0) {
    out[0] = m;
    out[1] = L;
  }
}

__global__ void __launch_bounds__(kThreads) CombineKernel(PagedAttentionParams p, int n_pieces,
                                                          const float* __restrict__ ws) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const RowInfo r = FindRow(p, t);
  const int D = p.head_dim;
  float* dst = p.out + (t * p.n_head + h) * D;
  const int pa = r.lo / kAttentionPiece, pb = r.hi / kAttentionPiece;
  // Rows that see no key, or whose keys lie in one piece, were finished by the piece kernel.
  if (r.hi < r.lo || pa == pb) return;
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
  const dim3 grid(n_pieces, p.n_head, (unsigned)p.T);
  // The f16 route reads 16-byte vectors of K: each head's slice of a row must be 16-byte aligned.
  const bool fast = p.k_format == (uint32_t)q::KvFormat::kF16 &&
                    p.v_format == (uint32_t)q::KvFormat::kF16 && p.head_dim % 8 == 0 &&
                    reinterpret_cast<uintptr_t>(p.k_cache) % 16 == 0;
  // The f32 route: both caches 16-byte aligned (so that the check can force the generic route on
  // the same values by placing them 4 bytes off).
  const bool f32 = p.k_format == (uint32_t)q::KvFormat::kF32 &&
                   p.v_format == (uint32_t)q::KvFormat::kF32 &&
                   reinterpret_cast<uintptr_t>(p.k_cache) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.v_cache) % 16 == 0;
  if (fast) {
    PieceKernel<1><<<grid, kThreads, 0, stream>>>(p, n_pieces, ws);
  } else if (f32) {
    PieceKernel<2><<<grid, kThreads, 0, stream>>>(p, n_pieces, ws);
  } else {
    PieceKernel<0><<<grid, kThreads, 0, stream>>>(p, n_pieces, ws);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  // With one piece every row was finished by the piece kernel (the combine would skip them all).
  if (n_pieces == 1) return cudaSuccess;
  CombineKernel<<<dim3(p.n_head, (unsigned)p.T), kThreads, 0, stream>>>(p, n_pieces, ws);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
