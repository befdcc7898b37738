// Paged attention (attention.h): a piece kernel, one CTA of 8 warps per (piece, head, query row),
// warp w owning keys 32w..32w+31 of the piece (lane = key for the scores, lane = dims for the
// output), writes (max, sum, unnormalised output) per piece, or the finished row when the row's
// keys lie in one piece; a combine kernel, one CTA per (head, query row), merges the pieces of
// the other rows in order (launched only when the grid has more than one piece). The f16 shapes
// of the MMA route (attention_internal.cuh) take attention_mma.cu's piece kernel instead.
#include "kernels/attention.h"
#include "kernels/attention_internal.cuh"
#include "kernels/pdl.cuh"

#include "engine/quant/blocks.h"
#include "engine/quant/decode.h"
#include "engine/quant/fp.h"
#include "engine/quant/kv_format.h"

#include <cuda_fp16.h>

#include <climits>

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;
using attention_internal::CpAsync16;
using attention_internal::FindRow;
using attention_internal::RowInfo;
using attention_internal::SegmentKeys;
using attention_internal::SmCount;

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
  pdl::Begin();
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

// The grouped f16 route (docs/kernels.md "Paged attention"): one CTA per (piece, KV head, group
// of query rows) stages the piece's K and V slices of its KV head into shared memory once by
// 16-byte cp.async, then runs every query head of the KV head (kGroupHeads at a time) for each of
// its rows against them. Per (row, head) the arithmetic and its order are PieceKernel's, operation
// for operation (lane = key for the scores, warp = sub-piece, the same trees, chains and writes);
// only where K and V are read from changes, so attention-invariance compares it with the generic
// route bitwise. Needs f16 K and V, head_dim % 8 == 0 and <= kGroupMaxDim, both caches 16-byte
// aligned.
constexpr int kGroupHeads = 4;
constexpr int kGroupMaxDim = 128;
constexpr int kGroupMaxPerLane = kGroupMaxDim / 32;

struct GroupLayout {
  int rs;  // halves per staged K or V row: head_dim + 8 (16 bytes of padding: conflict-free)
  size_t k, v, q, ps, ow, slot, red, lw, bytes;
};

__host__ __device__ inline GroupLayout MakeGroupLayout(int D, int G) {
  GroupLayout l;
  l.rs = D + 8;
  l.k = 0;
  l.v = l.k + (size_t)kAttentionPiece * l.rs * 2;
  l.q = l.v + (size_t)kAttentionPiece * l.rs * 2;
  l.ps = l.q + (size_t)G * D * 4;
  l.ow = l.ps + (size_t)kGroupHeads * kAttentionPiece * 4;
  l.slot = l.ow + (size_t)kWarps * kGroupHeads * D * 4;
  l.red = l.slot + (size_t)kAttentionPiece * 8;
  l.lw = l.red + (size_t)kGroupHeads * kWarps * 4;
  l.bytes = l.lw + (size_t)kGroupHeads * kWarps * 4;
  return l;
}

__global__ void __launch_bounds__(kThreads, 1) GroupKernel(PagedAttentionParams p, int n_pieces,
                                                           int rows_per_cta, int heads_per_cta,
                                                           float* __restrict__ ws) {
  pdl::Begin();
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = p.head_dim, G = p.n_head / p.n_kv_head;
  const GroupLayout lay = MakeGroupLayout(D, G);
  __half* ks = reinterpret_cast<__half*>(smem + lay.k);
  __half* vs = reinterpret_cast<__half*>(smem + lay.v);
  float* qs = reinterpret_cast<float*>(smem + lay.q);
  float* ps = reinterpret_cast<float*>(smem + lay.ps);
  float* ow = reinterpret_cast<float*>(smem + lay.ow);
  int64_t* slot_s = reinterpret_cast<int64_t*>(smem + lay.slot);
  float* red = reinterpret_cast<float*>(smem + lay.red);
  float* lw = reinterpret_cast<float*>(smem + lay.lw);
  const int piece = blockIdx.x;
  const int splits = (G + heads_per_cta - 1) / heads_per_cta;
  const int kvh = blockIdx.y / splits;
  const int h_begin = (blockIdx.y % splits) * heads_per_cta, h_end = min(G, h_begin + heads_per_cta);
  const int base = piece * kAttentionPiece;
  const int64_t t_end = min(p.T, (int64_t)(blockIdx.z + 1) * rows_per_cta);
  const int64_t kv_dim = (int64_t)p.n_kv_head * D;
  const int64_t rb = kv_dim * 2;  // f16 rows, K and V alike
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kk_own = warp * kSubKeys + lane;
  const int j_own = base + kk_own;
  const int chunks = D / 8;  // 16-byte pieces per staged row
  int64_t t = (int64_t)blockIdx.z * rows_per_cta;
  while (t < t_end) {
    // The rows t..t_last of one sequence share one staging of the piece.
    const RowInfo r0 = FindRow(p, t);
    const int64_t t_last = min(t_end, (int64_t)p.query_start[r0.seq + 1]) - 1;
    int ulo, uhi;
    SegmentKeys(p, t, t_last, p.seq_len[r0.seq], base, ulo, uhi);
    __syncthreads();  // the previous staging's readers are done
    if (ulo <= uhi) {
      {
        // Only keys that some row of the group sees are read (a window's rows may leave a gap).
        const int j = base + (int)threadIdx.x;
        bool need = false;
        if (j >= ulo && j <= uhi) {
          for (int64_t tt = t; tt <= t_last && !need; ++tt) {
            const int pos = p.positions[tt];
            const int hi = min(pos, p.seq_len[r0.seq] - 1);
            const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
            need = j >= lo && j <= hi;
          }
        }
        slot_s[threadIdx.x] = -1;
        if (need) {
          const int block = p.block_table[(int64_t)r0.seq * p.max_blocks_per_seq + j / p.block_size];
          slot_s[threadIdx.x] = (int64_t)block * p.block_size + j % p.block_size;
        }
      }
      __syncthreads();
      const int n_keys = uhi - ulo + 1, k_first = ulo - base;
      const uint8_t* kc = static_cast<const uint8_t*>(p.k_cache) + (int64_t)kvh * D * 2;
      const uint8_t* vc = static_cast<const uint8_t*>(p.v_cache) + (int64_t)kvh * D * 2;
      for (int i = threadIdx.x; i < n_keys * chunks; i += kThreads) {
        const int kk = k_first + i / chunks, c = i % chunks;
        if (slot_s[kk] >= 0) CpAsync16(ks + kk * lay.rs + c * 8, kc + slot_s[kk] * rb + c * 16);
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
      for (int i = threadIdx.x; i < n_keys * chunks; i += kThreads) {
        const int kk = k_first + i / chunks, c = i % chunks;
        if (slot_s[kk] >= 0) CpAsync16(vs + kk * lay.rs + c * 8, vc + slot_s[kk] * rb + c * 16);
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // K has landed (V may not have)
    }
    __syncthreads();
    bool v_ready = false;
    for (int64_t tt = t; tt <= t_last; ++tt) {
      const RowInfo r = FindRow(p, tt);
      if (r.hi < r.lo) {  // sees no key: zeros, written once (piece 0 is always in the grid)
        if (piece == 0) {
          for (int i = threadIdx.x; i < (h_end - h_begin) * D; i += kThreads) {
            p.out[(tt * p.n_head + (int64_t)kvh * G + h_begin) * D + i] = 0.0f;
          }
        }
        continue;
      }
      const int j0 = max(base, r.lo);
      const int j1 = min(base + kAttentionPiece - 1, r.hi);
      if (j1 < j0) continue;  // nothing visible: the combine kernel skips this piece
      for (int i = threadIdx.x; i < G * D; i += kThreads) {
        qs[i] = p.q[(tt * p.n_head + (int64_t)kvh * G) * D + i];
      }
      __syncthreads();
      const bool vis = j_own >= j0 && j_own <= j1;
      const bool single = r.lo / kAttentionPiece == r.hi / kAttentionPiece;
      for (int hc = h_begin; hc < h_end; hc += kGroupHeads) {
        const int gc = min(kGroupHeads, h_end - hc);
        // Scores: PieceKernel<1>'s chains (class c = dim % 8, increasing dim), the class tree,
        // scale, softcap; one K row read serves the chunk's heads.
        float s[kGroupHeads];
        {
          float a[kGroupHeads][kScoreClasses];
#pragma unroll
          for (int gi = 0; gi < kGroupHeads; ++gi) {
#pragma unroll
            for (int c = 0; c < kScoreClasses; ++c) a[gi][c] = 0.0f;
          }
          if (vis) {
            const uint4* k8 = reinterpret_cast<const uint4*>(ks + kk_own * lay.rs);
#pragma unroll 2
            for (int g = 0; g < chunks; ++g) {
              const uint4 w = k8[g];
              const __half2* hw = reinterpret_cast<const __half2*>(&w);
              float f[8];
#pragma unroll
              for (int c2 = 0; c2 < 4; ++c2) {
                const float2 ff = __half22float2(hw[c2]);
                f[2 * c2] = ff.x;
                f[2 * c2 + 1] = ff.y;
              }
#pragma unroll
              for (int gi = 0; gi < kGroupHeads; ++gi) {
                if (gi < gc) {
                  // 32-byte aligned: the layout's offsets are multiples of 16 bytes, D % 8 == 0.
                  const float4* qh = reinterpret_cast<const float4*>(qs + (hc + gi) * D + 8 * g);
                  const float4 q0 = qh[0], q1 = qh[1];
                  const float qv[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
                  for (int c = 0; c < kScoreClasses; ++c) a[gi][c] = __fmaf_rn(qv[c], f[c], a[gi][c]);
                }
              }
            }
          }
#pragma unroll
          for (int gi = 0; gi < kGroupHeads; ++gi) {
            float sv = -INFINITY;
            if (vis) {
              sv = __fmul_rn(ClassTree(a[gi]), p.scale);
              if (p.softcap > 0.0f) sv = __fmul_rn(p.softcap, tanhf(__fdiv_rn(sv, p.softcap)));
            }
            s[gi] = sv;
          }
        }
        // Piece max per head (exact in any order).
#pragma unroll
        for (int gi = 0; gi < kGroupHeads; ++gi) {
          float mx = s[gi];
#pragma unroll
          for (int o = 16; o >= 1; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
          if (lane == 0) red[gi * kWarps + warp] = mx;
        }
        __syncthreads();
        // p = expf(s - m); the per-warp shfl_xor tree of the sums.
#pragma unroll
        for (int gi = 0; gi < kGroupHeads; ++gi) {
          float m = red[gi * kWarps];
#pragma unroll
          for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[gi * kWarps + w]);
          const float pv = vis ? expf(__fsub_rn(s[gi], m)) : 0.0f;
          ps[gi * kAttentionPiece + kk_own] = pv;
          float l = pv;
#pragma unroll
          for (int o = 16; o >= 1; o /= 2) l = __fadd_rn(l, __shfl_xor_sync(0xFFFFFFFFu, l, o));
          if (lane == 0) lw[gi * kWarps + warp] = l;
        }
        if (!v_ready) {
          asm volatile("cp.async.wait_group 0;\n" ::: "memory");
          __syncthreads();  // every thread's V copies visible (and ps, a superset of __syncwarp)
          v_ready = true;
        } else {
          __syncwarp();
        }
        // Output: per head and dim, the warp's fma chain over its visible keys in key order.
        float o[kGroupHeads][kGroupMaxPerLane];
#pragma unroll
        for (int gi = 0; gi < kGroupHeads; ++gi) {
#pragma unroll
          for (int i = 0; i < kGroupMaxPerLane; ++i) o[gi][i] = 0.0f;
        }
        const int w0 = max(warp * kSubKeys, j0 - base), w1 = min(warp * kSubKeys + kSubKeys - 1, j1 - base);
        for (int kk = w0; kk <= w1; ++kk) {
          const __half* vrow = vs + kk * lay.rs;
          float pk[kGroupHeads];
#pragma unroll
          for (int gi = 0; gi < kGroupHeads; ++gi) pk[gi] = ps[gi * kAttentionPiece + kk];
#pragma unroll
          for (int i = 0; i < kGroupMaxPerLane; ++i) {
            const int d = lane + 32 * i;
            if (d < D) {
              const float v = __half2float(vrow[d]);
#pragma unroll
              for (int gi = 0; gi < kGroupHeads; ++gi) {
                if (gi < gc) o[gi][i] = __fmaf_rn(pk[gi], v, o[gi][i]);
              }
            }
          }
        }
#pragma unroll
        for (int gi = 0; gi < kGroupHeads; ++gi) {
#pragma unroll
          for (int i = 0; i < kGroupMaxPerLane; ++i) {
            const int d = lane + 32 * i;
            if (gi < gc && d < D) ow[(warp * kGroupHeads + gi) * D + d] = o[gi][i];
          }
        }
        __syncthreads();
        // The piece per head: warps summed in warp order; PieceKernel's single-piece finish or
        // its workspace record.
        for (int i = threadIdx.x; i < gc * D; i += kThreads) {
          const int gi = i / D, d = i % D;
          const int h = kvh * G + hc + gi;
          float m = red[gi * kWarps];
#pragma unroll
          for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[gi * kWarps + w]);
          float L = 0.0f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) L = __fadd_rn(L, lw[gi * kWarps + w]);
          float acc = 0.0f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) acc = __fadd_rn(acc, ow[(w * kGroupHeads + gi) * D + d]);
          if (single) {
            const float M1 = fmaxf(-INFINITY, m);
            const float e1 = expf(__fsub_rn(m, M1));
            const float L1 = __fmaf_rn(L, e1, 0.0f);
            p.out[(tt * p.n_head + h) * D + d] = __fdiv_rn(__fmaf_rn(acc, e1, 0.0f), L1);
          } else {
            float* out = ws + (((int64_t)tt * p.n_head + h) * n_pieces + piece) * (D + 2);
            out[2 + d] = acc;
            if (d == 0) {
              out[0] = m;
              out[1] = L;
            }
          }
        }
        __syncthreads();  // red, lw, ps, ow and qs are reused by the next chunk or row
      }
    }
    // Copies of a staging whose rows all skipped the piece must land before the next staging
    // (or the exit) reuses the buffers.
    if (!v_ready) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    t = t_last + 1;
  }
}

constexpr int kCombineSmemPieces = 1024;  // 262,144 keys; longer rows take the loop below

__global__ void __launch_bounds__(kThreads) CombineKernel(PagedAttentionParams p, int n_pieces,
                                                          const float* __restrict__ ws) {
  pdl::Begin();
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const RowInfo r = FindRow(p, t);
  const int D = p.head_dim;
  float* dst = p.out + (t * p.n_head + h) * D;
  const int pa = r.lo / kAttentionPiece, pb = r.hi / kAttentionPiece;
  // Rows that see no key, or whose keys lie in one piece, were finished by the piece kernel.
  if (r.hi < r.lo || pa == pb) return;
  const float* base = ws + ((int64_t)t * p.n_head + h) * n_pieces * (D + 2);
  const int np = pb - pa + 1;
  if (np <= kCombineSmemPieces) {
    // The same arithmetic with each piece's weight expf(m_i - M) computed once into shared memory
    // (by the thread of that piece) instead of once per dim: the values are the same, and the
    // loads of the output chain no longer wait on an expf each.
    __shared__ float m_s[kCombineSmemPieces], l_s[kCombineSmemPieces], e_s[kCombineSmemPieces];
    for (int i = threadIdx.x; i < np; i += kThreads) {
      m_s[i] = base[(pa + i) * (D + 2)];
      l_s[i] = base[(pa + i) * (D + 2) + 1];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < np; ++i) M = fmaxf(M, m_s[i]);
    for (int i = threadIdx.x; i < np; i += kThreads) e_s[i] = expf(__fsub_rn(m_s[i], M));
    __syncthreads();
    float L = 0.0f;
    for (int i = 0; i < np; ++i) L = __fmaf_rn(l_s[i], e_s[i], L);
    for (int d = threadIdx.x; d < D; d += kThreads) {
      float o = 0.0f;
      const float* col = base + (int64_t)pa * (D + 2) + 2 + d;
#pragma unroll 8
      for (int i = 0; i < np; ++i) o = __fmaf_rn(col[(int64_t)i * (D + 2)], e_s[i], o);
      dst[d] = __fdiv_rn(o, L);
    }
    return;
  }
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

namespace attention_internal {

int64_t SmCount() {
  static const int64_t n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return (int64_t)132;
    }
    return (int64_t)v;
  }();
  return n;
}

size_t SmemOptinLimit() {
  static const size_t limit = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      return (size_t)48 * 1024;
    }
    return (size_t)v;
  }();
  return limit;
}

}  // namespace attention_internal

bool PagedAttentionUsesMma(const PagedAttentionParams& p) { return attention_internal::MmaRouteTakes(p); }

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
  // The grouped f16 route: both caches aligned, head_dim <= kGroupMaxDim, and its shared memory
  // within the device's opt-in limit. Rows per CTA: the batch's mean rows per sequence, at most
  // 16 (decode steps: 1); the bits do not depend on it (docs/kernels.md).
  const int G = p.n_head / p.n_kv_head;
  const size_t group_smem = MakeGroupLayout(p.head_dim, G).bytes;
  if (attention_internal::MmaRouteTakes(p)) {
    const cudaError_t e = attention_internal::LaunchMmaPieces(p, n_pieces, ws, stream);
    if (e != cudaSuccess) return e;
  } else if (fast && p.head_dim <= kGroupMaxDim && reinterpret_cast<uintptr_t>(p.v_cache) % 16 == 0 &&
      group_smem <= attention_internal::SmemOptinLimit()) {
    static size_t attr_bytes = 0;  // raised once per size (a shape's first step runs eagerly)
    if (group_smem > 48 * 1024 && group_smem > attr_bytes) {
      const cudaError_t e = cudaFuncSetAttribute(GroupKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)group_smem);
      if (e != cudaSuccess) return e;
      attr_bytes = group_smem;
    }
    const int64_t per_seq = p.T / p.n_seq;
    int rows = (int)(per_seq < 1 ? 1 : (per_seq > 16 ? 16 : per_seq));
    if (p.group_rows_per_cta > 0) rows = p.group_rows_per_cta;
    const int64_t groups = (p.T + rows - 1) / rows;
    // A grid smaller than the GPU splits each KV head's query heads over CTAs (each then stages
    // the piece itself): short decodes get the parallelism back.
    const int64_t ctas = (int64_t)n_pieces * p.n_kv_head * groups;
    int splits = 1;
    while (splits < G && ctas * splits < SmCount()) splits *= 2;
    if (splits > G) splits = G;
    int hpc = (G + splits - 1) / splits;
    if (p.group_heads_per_cta > 0) hpc = p.group_heads_per_cta < G ? p.group_heads_per_cta : G;
    splits = (G + hpc - 1) / hpc;
    pdl::Launch(GroupKernel, dim3(n_pieces, (unsigned)(p.n_kv_head * splits), (unsigned)groups), kThreads, group_smem,
                stream, p, n_pieces, rows, hpc, ws);
  } else if (fast) {
    pdl::Launch(PieceKernel<1>, grid, kThreads, 0, stream, p, n_pieces, ws);
  } else if (f32) {
    pdl::Launch(PieceKernel<2>, grid, kThreads, 0, stream, p, n_pieces, ws);
  } else {
    pdl::Launch(PieceKernel<0>, grid, kThreads, 0, stream, p, n_pieces, ws);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  // With one piece every row was finished by the piece kernel (the combine would skip them all).
  if (n_pieces == 1) return cudaSuccess;
  pdl::Launch(CombineKernel, dim3(p.n_head, (unsigned)p.T), kThreads, 0, stream, p, n_pieces, ws);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
