// The MMA route of the paged attention (kernels/attention.h states its reduction order): f16 K and
// V, head_dim 64 or 128. One CTA of 8 warps per (piece, KV head, group of query rows) stages the
// piece's K and V slices of its KV head into shared memory by 16-byte cp.async; the rows' (row,
// query head) pairs are cut into m-tiles of 16 (pair i of a sequence's rows in the CTA: row
// i / G, head i % G), one warp per m-tile, and each m-tile runs the piece's keys 32 at a time in
// key order with binary16 tensor-core MMAs:
//   - scores: q of each pair scaled by a power of two 2^e (its largest |q| into [2^14, 2^15),
//     -60 <= e <= 60) and split into binary16 h + l; per n-tile of 8 keys one float chain over
//     the head dim's k-steps of 16, h then l in each; times scale * 2^-e (one rounding: the
//     same value as times 2^-e, exact, then times scale), optional softcap;
//   - softmax: the running max m (exact), alpha = expf(m_old - m_new), p = expf(s - m_new) (0 for
//     a key the pair does not see); the step's sum per pair: this lane's 8 p in (n-tile, column)
//     order, then the 4 lanes of the row by shfl_xor 1 and 2; l = fma(l, alpha, sum);
//   - output: o *= alpha, then per k-step of 16 keys (in key order) the MMA of p * 2^14 split
//     into binary16 h + l (h then l) with the f16 V; the piece's o is that chain times 2^-14.
// A CTA whose segments hold at most 16 pairs each (decode steps: G pairs) runs its one m-tile on
// all 8 warps instead of one: warp w computes step w's scores and their max per row (K and V are
// two cp.async groups, so this overlaps V's copy), then, once every step's max is in shared
// memory, step w's running max, alpha, p fragments and sums (the operations of the one-warp form,
// on the same values); then each warp runs, step by step, l, the rescale and the output chains of
// its own D / 64 n-tiles of 8 dims.
// Which warp or CTA runs a pair, which other pairs share its m-tile, and which of the step's keys
// were staged for other rows change no bit of it: a pair's MMA row sees only its own q and p, an
// invisible key gives p = 0 (+0 products), a step no pair of the m-tile sees is skipped (its
// alpha would be 1 and its sum +0), and keys no row of the CTA sees are staged as zeros. The
// records (m, l, o) and the single-piece finish are the other routes' (attention.cu), so the
// combine kernel is shared.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "engine/quant/kv_format.h"
#include "kernels/attention.h"
#include "kernels/attention_internal.cuh"
#include "kernels/mma_sync.cuh"
#include "kernels/pdl.cuh"

namespace lockstep::kernels::attention_internal {
namespace {

namespace q = ::lockstep::quant;
using mma_sync::Ldmatrix4;
using mma_sync::Ldmatrix4Trans;
using mma_sync::Mma;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTilePairs = 16;           // (row, head) pairs per m-tile: the MMA's M
constexpr int kStepKeys = 32;            // keys per softmax step: 4 n-tiles of 8
constexpr float kPScale = 16384.0f;      // p is split as p * 2^14 (exact), o taken back by 2^-14
constexpr float kPUnscale = 1.0f / 16384.0f;
static_assert(kThreads == kAttentionPiece, "one thread per key of the piece when staging");
static_assert(kAttentionPiece / kStepKeys == kWarps, "the decode form runs one step a warp");

// Halves per staged K or V row: head_dim + 8, so the 8 rows of an ldmatrix hit distinct banks.
template <int D>
constexpr int RowStride() { return D + 8; }
// K and V slices, the slot table, and (kOneTile) the p fragments of the piece's 8 steps and
// each step's m, alpha and sum per row.
template <int D, bool kOneTile>
constexpr size_t SmemBytes() {
  return 2 * (size_t)kAttentionPiece * RowStride<D>() * 2 + (size_t)kAttentionPiece * 8 +
         (kOneTile ? (size_t)kAttentionPiece * kTilePairs * 4 + 3 * (size_t)kWarps * kTilePairs * 4 : 0);
}

__device__ __forceinline__ uint32_t PackHalf2(__half lo, __half hi) {
  const __half2 h = __halves2half2(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 2^e for -126 <= e <= 127.
__device__ __forceinline__ float Pow2(int e) { return __int_as_float((e + 127) << 23); }

// x split into binary16 h + l: h = rn(x), l = rn(x - h) (x - h is exact in float).
__device__ __forceinline__ void Split(float x, __half& h, __half& l) {
  h = __float2half_rn(x);
  l = __float2half_rn(__fsub_rn(x, __half2float(h)));
}

// One pair row of this lane (row g or g + 8 of the m-tile).
struct PairRow {
  bool valid;   // a pair of the segment (not padding)
  int64_t t;    // query row
  int head;     // query head
  int lo, hi;   // visible keys (hi < lo: none)
};

// The pairs of m-tile mt of the segment t.. (n_pairs pairs) on this lane: rows g and g + 8.
__device__ __forceinline__ void TilePairs(const PagedAttentionParams& p, int64_t t, int64_t n_pairs, int64_t mt,
                                          int G, int kvh, int len, int g, PairRow (&pr)[2]) {
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int64_t i = mt * kTilePairs + g + 8 * h2;
    pr[h2].valid = i < n_pairs;
    pr[h2].t = t + (pr[h2].valid ? i / G : 0);
    pr[h2].head = kvh * G + (int)(pr[h2].valid ? i % G : 0);
    pr[h2].lo = 1, pr[h2].hi = 0;
    if (pr[h2].valid) {
      const int pos = p.positions[pr[h2].t];
      pr[h2].hi = min(pos, len - 1);
      pr[h2].lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    }
  }
}

// A pair that sees no key gets zeros, written once (piece 0 is always in the grid); then the
// m-tile's keys in this piece, tlo..thi: the steps that some pair of it sees (thi < tlo: none).
template <int D>
__device__ __forceinline__ void TileKeys(const PagedAttentionParams& p, const PairRow (&pr)[2], int piece, int base,
                                         int tq, bool write_zeros, int& tlo, int& thi) {
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    if (write_zeros && pr[h2].valid && pr[h2].hi < pr[h2].lo && piece == 0) {
      float* dst = p.out + (pr[h2].t * p.n_head + pr[h2].head) * D;
      for (int d = tq * 2; d < D; d += 8) dst[d] = 0.0f, dst[d + 1] = 0.0f;
    }
  }
  tlo = INT_MAX, thi = INT_MIN;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    if (pr[h2].hi >= pr[h2].lo) tlo = min(tlo, pr[h2].lo), thi = max(thi, pr[h2].hi);
  }
  tlo = max(__reduce_min_sync(0xFFFFFFFFu, tlo), base);
  thi = min(__reduce_max_sync(0xFFFFFFFFu, thi), base + kAttentionPiece - 1);
}

// q of both rows: the power of two that puts the row's largest |q| into [2^14, 2^15), then the
// h + l fragments (this lane's columns 2t, 2t+1, 2t+8, 2t+9 of each k-step); scale2 = scale *
// 2^-e, so that acc * 2^-e * scale is rounded once, as (acc * 2^-e) * scale.
template <int D>
__device__ __forceinline__ void QFragments(const PagedAttentionParams& p, const PairRow (&pr)[2], int tq,
                                           float (&scale2)[2], uint32_t (&qh)[D / 16][4], uint32_t (&ql)[D / 16][4]) {
  constexpr int kKSteps = D / 16;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const float* qr = p.q + (pr[h2].t * p.n_head + pr[h2].head) * D;
    float mx = 0.0f;
    if (pr[h2].valid) {
#pragma unroll
      for (int kstep = 0; kstep < kKSteps; ++kstep) {
        const float2 a = *reinterpret_cast<const float2*>(qr + 16 * kstep + 2 * tq);
        const float2 b = *reinterpret_cast<const float2*>(qr + 16 * kstep + 8 + 2 * tq);
        mx = fmaxf(mx, fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(b.x), fabsf(b.y))));
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    int x = 15;
    if (mx > 0.0f && mx <= 3.4e38f) frexpf(mx, &x);
    const int e = min(60, max(-60, 15 - x));
    const float up = Pow2(e);
    scale2[h2] = __fmul_rn(p.scale, Pow2(-e));  // exact: a power of two times scale
#pragma unroll
    for (int kstep = 0; kstep < kKSteps; ++kstep) {
      float2 a = make_float2(0.0f, 0.0f), b = make_float2(0.0f, 0.0f);
      if (pr[h2].valid) {
        a = *reinterpret_cast<const float2*>(qr + 16 * kstep + 2 * tq);
        b = *reinterpret_cast<const float2*>(qr + 16 * kstep + 8 + 2 * tq);
      }
      __half ah0, al0, ah1, al1, bh0, bl0, bh1, bl1;
      Split(__fmul_rn(a.x, up), ah0, al0);
      Split(__fmul_rn(a.y, up), ah1, al1);
      Split(__fmul_rn(b.x, up), bh0, bl0);
      Split(__fmul_rn(b.y, up), bh1, bl1);
      qh[kstep][h2] = PackHalf2(ah0, ah1);      // a[0] (row g) / a[1] (row g + 8): k 2t, 2t+1
      ql[kstep][h2] = PackHalf2(al0, al1);
      qh[kstep][2 + h2] = PackHalf2(bh0, bh1);  // a[2] / a[3]: k 2t+8, 2t+9
      ql[kstep][2 + h2] = PackHalf2(bl0, bl1);
    }
  }
}

// The step's scores (keys k0 .. k0 + 31 of the piece; n-tile nt holds keys k0 + 8 nt .. + 7):
// the MMA chains, then scale, softcap, and -inf for a key the pair does not see.
template <int D>
__device__ __forceinline__ void StepScores(const PagedAttentionParams& p, const __half* ks, int k0, int base,
                                           const PairRow (&pr)[2], const float (&scale2)[2],
                                           const uint32_t (&qh)[D / 16][4], const uint32_t (&ql)[D / 16][4],
                                           int lane, float (&s)[4][4]) {
  constexpr int kRs = RowStride<D>();
  const int tq = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int kstep = 0; kstep < D / 16; ++kstep) {
#pragma unroll
    for (int np = 0; np < 2; ++np) {  // n-tiles 2 np and 2 np + 1 in one ldmatrix
      uint32_t b[4];
      const int key = k0 + 8 * (2 * np + lane / 16) + lane % 8;
      Ldmatrix4(b, ks + key * kRs + 16 * kstep + 8 * ((lane / 8) % 2));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        Mma(s[2 * np + h], qh[kstep], b[2 * h], b[2 * h + 1]);
        Mma(s[2 * np + h], ql[kstep], b[2 * h], b[2 * h + 1]);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int h2 = c / 2;
      const int j = base + k0 + 8 * nt + 2 * tq + (c % 2);
      float v = __fmul_rn(s[nt][c], scale2[h2]);
      if (p.softcap > 0.0f) v = __fmul_rn(p.softcap, tanhf(__fdiv_rn(v, p.softcap)));
      const bool vis = j >= pr[h2].lo && j <= pr[h2].hi;
      s[nt][c] = vis ? v : -INFINITY;
    }
  }
}

// The online softmax of one step, in two parts that the decode form runs on different warps:
// StepMax, the step's max per row (this lane's 8, then the row's 4 lanes); StepP, given the
// running max after the step, p and the step's sums (this lane's 8 p in (n-tile, column) order,
// then the row's 4 lanes) and the p fragments (n-tiles 2 kk and 2 kk + 1 form k-step kk of the
// output). StepSoftmax is the two with m, alpha and l between them.
__device__ __forceinline__ void StepMax(const float (&s)[4][4], float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) mx[c / 2] = fmaxf(mx[c / 2], s[nt][c]);
  }
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xFFFFFFFFu, mx[h2], 1));
    mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xFFFFFFFFu, mx[h2], 2));
  }
}

// m_new = fmaxf(m_old, the step's max); alpha = expf(m_old - m_new) (1 while both are -inf).
__device__ __forceinline__ float StepAlpha(float m_old, float m_new) {
  return m_new == -INFINITY ? 1.0f : expf(__fsub_rn(m_old, m_new));
}

__device__ __forceinline__ void StepP(const float (&s)[4][4], const float (&m_new)[2], float (&sum)[2],
                                      uint32_t (&ph)[2][4], uint32_t (&pl)[2][4]) {
  sum[0] = sum[1] = 0.0f;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    __half hh[4], ll[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int h2 = c / 2;
      const float pv = s[nt][c] == -INFINITY ? 0.0f : expf(__fsub_rn(s[nt][c], m_new[h2]));
      sum[h2] = __fadd_rn(sum[h2], pv);
      Split(__fmul_rn(pv, kPScale), hh[c], ll[c]);
    }
    const int kk = nt / 2, hi8 = nt % 2;
    ph[kk][2 * hi8] = PackHalf2(hh[0], hh[1]);
    ph[kk][2 * hi8 + 1] = PackHalf2(hh[2], hh[3]);
    pl[kk][2 * hi8] = PackHalf2(ll[0], ll[1]);
    pl[kk][2 * hi8 + 1] = PackHalf2(ll[2], ll[3]);
  }
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    sum[h2] = __fadd_rn(sum[h2], __shfl_xor_sync(0xFFFFFFFFu, sum[h2], 1));
    sum[h2] = __fadd_rn(sum[h2], __shfl_xor_sync(0xFFFFFFFFu, sum[h2], 2));
  }
}

__device__ __forceinline__ void StepSoftmax(const float (&s)[4][4], float (&m_run)[2], float (&l_run)[2],
                                            float (&alpha)[2], uint32_t (&ph)[2][4], uint32_t (&pl)[2][4]) {
  float mx[2];
  StepMax(s, mx);
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const float m_new = fmaxf(m_run[h2], mx[h2]);
    alpha[h2] = StepAlpha(m_run[h2], m_new);
    m_run[h2] = m_new;
  }
  float sum[2];
  StepP(s, m_run, sum, ph, pl);
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) l_run[h2] = __fmaf_rn(l_run[h2], alpha[h2], sum[h2]);
}

// The step's output for the n-tiles nt0 .. nt0 + kN - 1 (8 dims each): o *= alpha, then per k-step
// of 16 keys V's n-tiles by transposed ldmatrix (two n-tiles per load), h then l. Each n-tile's
// chain is the same whichever others run beside it.
template <int D, int kN>
__device__ __forceinline__ void StepOutput(float (&o)[kN][4], const float (&alpha)[2], const uint32_t (&ph)[2][4],
                                           const uint32_t (&pl)[2][4], const __half* vs, int k0, int nt0, int lane) {
  constexpr int kRs = RowStride<D>();
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) {
    o[nt][0] = __fmul_rn(o[nt][0], alpha[0]);
    o[nt][1] = __fmul_rn(o[nt][1], alpha[0]);
    o[nt][2] = __fmul_rn(o[nt][2], alpha[1]);
    o[nt][3] = __fmul_rn(o[nt][3], alpha[1]);
  }
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const int key = k0 + 16 * kk + 8 * ((lane / 8) % 2) + lane % 8;
    if constexpr (kN == 1) {  // half of the pair (nt0 & ~1, nt0 | 1)
      uint32_t b[4];
      Ldmatrix4Trans(b, vs + key * kRs + 8 * ((nt0 & ~1) + lane / 16));
      const uint32_t b0 = (nt0 & 1) ? b[2] : b[0], b1 = (nt0 & 1) ? b[3] : b[1];
      Mma(o[0], ph[kk], b0, b1);
      Mma(o[0], pl[kk], b0, b1);
    } else {
      static_assert(kN % 2 == 0, "n-tiles in pairs");
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        uint32_t b[4];
        Ldmatrix4Trans(b, vs + key * kRs + 8 * (nt0 + 2 * np + lane / 16));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          Mma(o[2 * np + h], ph[kk], b[2 * h], b[2 * h + 1]);
          Mma(o[2 * np + h], pl[kk], b[2 * h], b[2 * h + 1]);
        }
      }
    }
  }
}

// The piece per pair, n-tiles nt0 .. nt0 + kN - 1: the single-piece finish (the combine's
// arithmetic for one piece) or the record (m, l, o) for the combine kernel (m and l written where
// write_ml).
template <int D, int kN>
__device__ __forceinline__ void WritePiece(const PagedAttentionParams& p, const PairRow (&pr)[2], const float (&m_run)[2],
                                           const float (&l_run)[2], const float (&o)[kN][4], int nt0, int piece,
                                           int n_pieces, int base, int tq, bool write_ml, float* __restrict__ ws) {
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const PairRow& r = pr[h2];
    if (!r.valid || r.hi < r.lo || max(base, r.lo) > min(base + kAttentionPiece - 1, r.hi)) continue;
    const bool single = r.lo / kAttentionPiece == r.hi / kAttentionPiece;
    const float m = m_run[h2], L = l_run[h2];
    if (single) {
      const float M1 = fmaxf(-INFINITY, m);
      const float e1 = expf(__fsub_rn(m, M1));
      const float L1 = __fmaf_rn(L, e1, 0.0f);
      float* dst = p.out + (r.t * p.n_head + r.head) * D;
#pragma unroll
      for (int nt = 0; nt < kN; ++nt) {
        const float a = __fmul_rn(o[nt][2 * h2], kPUnscale), b = __fmul_rn(o[nt][2 * h2 + 1], kPUnscale);
        *reinterpret_cast<float2*>(dst + 8 * (nt0 + nt) + 2 * tq) =
            make_float2(__fdiv_rn(__fmaf_rn(a, e1, 0.0f), L1), __fdiv_rn(__fmaf_rn(b, e1, 0.0f), L1));
      }
    } else {
      float* rec = ws + ((r.t * p.n_head + r.head) * n_pieces + piece) * (D + 2);
#pragma unroll
      for (int nt = 0; nt < kN; ++nt) {
        rec[2 + 8 * (nt0 + nt) + 2 * tq] = __fmul_rn(o[nt][2 * h2], kPUnscale);
        rec[2 + 8 * (nt0 + nt) + 2 * tq + 1] = __fmul_rn(o[nt][2 * h2 + 1], kPUnscale);
      }
      if (write_ml && tq == 0) rec[0] = m, rec[1] = L;
    }
  }
}

// kOneTile: every segment of the CTA has at most 16 pairs (rows per CTA * G <= 16: decode steps),
// so its one m-tile is run by all 8 warps: warp w computes step w's scores, max, alpha, p
// fragments and sums (StepMax, StepAlpha, StepP: StepSoftmax's parts) while V is still in
// flight, then every warp runs l, the rescale and the output MMAs of its own D / 64 n-tiles over
// the steps in order. Otherwise one warp per m-tile runs all of it. The two give the same bits:
// every value is computed by the same operations on the same values, only by other warps.
template <int D, bool kOneTile>
__global__ void __launch_bounds__(kThreads, 1) MmaPieceKernel(PagedAttentionParams p, int n_pieces,
                                                              int rows_per_cta, float* __restrict__ ws) {
  pdl::Begin();
  constexpr int kRs = RowStride<D>();
  constexpr int kONt = D / 8;  // n-tiles of the output
  constexpr int kOwn = kONt / kWarps;  // kOneTile: n-tiles per warp
  extern __shared__ __align__(16) uint8_t smem[];
  __half* ks = reinterpret_cast<__half*>(smem);
  __half* vs = ks + (size_t)kAttentionPiece * kRs;
  int64_t* slot_s = reinterpret_cast<int64_t*>(vs + (size_t)kAttentionPiece * kRs);
  // kOneTile: each step's p fragments [step][16 words][lane], and per step and row the max of
  // the step's scores, alpha and the step's sum.
  uint32_t* p_buf = reinterpret_cast<uint32_t*>(slot_s + kAttentionPiece);
  float* rec_m = reinterpret_cast<float*>(p_buf + (size_t)kAttentionPiece * kTilePairs);
  float* rec_a = rec_m + kWarps * kTilePairs;
  float* rec_s = rec_a + kWarps * kTilePairs;
  const int G = p.n_head / p.n_kv_head;
  const int piece = blockIdx.x, kvh = blockIdx.y;
  const int base = piece * kAttentionPiece;
  const int64_t t_end = min(p.T, (int64_t)(blockIdx.z + 1) * rows_per_cta);
  const int64_t rb = (int64_t)p.n_kv_head * D * 2;  // f16 rows, K and V alike
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  int64_t t = (int64_t)blockIdx.z * rows_per_cta;
  while (t < t_end) {
    // The rows t..t_last of one sequence share one staging of the piece.
    const RowInfo r0 = FindRow(p, t);
    const int64_t t_last = min(t_end, (int64_t)p.query_start[r0.seq + 1]) - 1;
    const int len = p.seq_len[r0.seq];
    int ulo, uhi;
    SegmentKeys(p, t, t_last, len, base, ulo, uhi);
    __syncthreads();  // the previous staging's readers are done
    if (ulo <= uhi) {
      // Keys ulo..uhi are staged; the rest of the steps that hold them are zeros. K and V are two
      // cp.async groups, so the scores can start before V has landed.
      const int kk = threadIdx.x, j = base + kk;
      const int s_lo = (ulo - base) / kStepKeys * kStepKeys, s_hi = (uhi - base) / kStepKeys * kStepKeys + kStepKeys;
      slot_s[kk] = -1;
      if (j >= ulo && j <= uhi) {
        const int block = p.block_table[(int64_t)r0.seq * p.max_blocks_per_seq + j / p.block_size];
        slot_s[kk] = (int64_t)block * p.block_size + j % p.block_size;
      }
      __syncthreads();
      constexpr int kChunks = D / 8;  // 16-byte pieces per row
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const uint8_t* cache = static_cast<const uint8_t*>(kv == 0 ? p.k_cache : p.v_cache) + (int64_t)kvh * D * 2;
        __half* dst = kv == 0 ? ks : vs;
        for (int i = threadIdx.x; i < (s_hi - s_lo) * kChunks; i += kThreads) {
          const int k2 = s_lo + i / kChunks, c = i % kChunks;
          __half* d = dst + k2 * kRs + c * 8;
          if (slot_s[k2] >= 0) {
            CpAsync16(d, cache + slot_s[k2] * rb + c * 16);
          } else {
            *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
          }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
      }
      if constexpr (kOneTile) {
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // K
      } else {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
      }
    }
    __syncthreads();
    const int64_t n_pairs = (t_last - t + 1) * G;
    if constexpr (kOneTile) {
      PairRow pr[2];
      TilePairs(p, t, n_pairs, 0, G, kvh, len, g, pr);
      int tlo, thi;
      TileKeys<D>(p, pr, piece, base, tq, warp == 0, tlo, thi);
      if (thi >= tlo) {  // the same in every warp: thi < tlo iff ulo > uhi
        float scale2[2];
        uint32_t qh[D / 16][4], ql[D / 16][4];
        QFragments<D>(p, pr, tq, scale2, qh, ql);
        const int st_lo = (tlo - base) / kStepKeys, st_hi = (thi - base) / kStepKeys;
        // Step `warp` (a piece has one step a warp) on its own warp: its scores and max per row;
        // then, with every step's max in shared memory, its m before and after (the running max
        // over the steps before it, in step order), alpha, p fragments and sums: StepSoftmax's
        // operations on the same values, so the serial loop below keeps only l, the rescale and
        // the output MMAs.
        const int st = warp;
        const bool mine = st >= st_lo && st <= st_hi;
        float s[4][4];
        if (mine) {
          StepScores<D>(p, ks, st * kStepKeys, base, pr, scale2, qh, ql, lane, s);
          float mx[2];
          StepMax(s, mx);
          if (tq == 0) rec_m[st * kTilePairs + g] = mx[0], rec_m[st * kTilePairs + g + 8] = mx[1];
        }
        __syncthreads();  // every step's max
        if (mine) {
          float m_old[2] = {-INFINITY, -INFINITY}, m_new[2], alpha[2], sum[2];
          for (int j = st_lo; j < st; ++j) {
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2) m_old[h2] = fmaxf(m_old[h2], rec_m[j * kTilePairs + g + 8 * h2]);
          }
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            m_new[h2] = fmaxf(m_old[h2], rec_m[st * kTilePairs + g + 8 * h2]);
            alpha[h2] = StepAlpha(m_old[h2], m_new[h2]);
          }
          uint32_t ph[2][4], pl[2][4];
          StepP(s, m_new, sum, ph, pl);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            p_buf[(st * 16 + i) * 32 + lane] = ph[i / 4][i % 4];
            p_buf[(st * 16 + 8 + i) * 32 + lane] = pl[i / 4][i % 4];
          }
          if (tq == 0) {
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2) {
              rec_a[st * kTilePairs + g + 8 * h2] = alpha[h2];
              rec_s[st * kTilePairs + g + 8 * h2] = sum[h2];
            }
          }
        }
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");  // V
        __syncthreads();
        float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
        float o[kOwn][4];
#pragma unroll
        for (int nt = 0; nt < kOwn; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
        for (int sj = st_lo; sj <= st_hi; ++sj) {
          float alpha[2];
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            const int r = sj * kTilePairs + g + 8 * h2;
            m_run[h2] = fmaxf(m_run[h2], rec_m[r]);
            alpha[h2] = rec_a[r];
            l_run[h2] = __fmaf_rn(l_run[h2], alpha[h2], rec_s[r]);
          }
          uint32_t ph[2][4], pl[2][4];
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            ph[i / 4][i % 4] = p_buf[(sj * 16 + i) * 32 + lane];
            pl[i / 4][i % 4] = p_buf[(sj * 16 + 8 + i) * 32 + lane];
          }
          StepOutput<D, kOwn>(o, alpha, ph, pl, vs, sj * kStepKeys, warp * kOwn, lane);
        }
        WritePiece<D, kOwn>(p, pr, m_run, l_run, o, warp * kOwn, piece, n_pieces, base, tq, warp == 0, ws);
      }
    } else {
      for (int64_t mt = warp; mt * kTilePairs < n_pairs; mt += kWarps) {
        PairRow pr[2];
        TilePairs(p, t, n_pairs, mt, G, kvh, len, g, pr);
        int tlo, thi;
        TileKeys<D>(p, pr, piece, base, tq, true, tlo, thi);
        if (thi < tlo) continue;
        float scale2[2];
        uint32_t qh[D / 16][4], ql[D / 16][4];
        QFragments<D>(p, pr, tq, scale2, qh, ql);
        float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
        float o[kONt][4];
#pragma unroll
        for (int nt = 0; nt < kONt; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
        const int st_lo = (tlo - base) / kStepKeys, st_hi = (thi - base) / kStepKeys;
        for (int st = st_lo; st <= st_hi; ++st) {
          float s[4][4];
          StepScores<D>(p, ks, st * kStepKeys, base, pr, scale2, qh, ql, lane, s);
          float alpha[2];
          uint32_t ph[2][4], pl[2][4];
          StepSoftmax(s, m_run, l_run, alpha, ph, pl);
          StepOutput<D, kONt>(o, alpha, ph, pl, vs, st * kStepKeys, 0, lane);
        }
        WritePiece<D, kONt>(p, pr, m_run, l_run, o, 0, piece, n_pieces, base, tq, true, ws);
      }
    }
    t = t_last + 1;
  }
}

template <int D, bool kOneTile>
cudaError_t Launch(const PagedAttentionParams& p, int n_pieces, int rows, float* ws, cudaStream_t stream) {
  constexpr size_t bytes = SmemBytes<D, kOneTile>();
  static bool attr_set = false;  // raised once (a shape's first step runs eagerly, not in capture)
  if (!attr_set) {
    const cudaError_t e =
        cudaFuncSetAttribute(MmaPieceKernel<D, kOneTile>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  const int64_t groups = (p.T + rows - 1) / rows;
  pdl::Launch(MmaPieceKernel<D, kOneTile>, dim3(n_pieces, (unsigned)p.n_kv_head, (unsigned)groups), kThreads, bytes,
              stream, p, n_pieces, rows, ws);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchD(const PagedAttentionParams& p, int n_pieces, float* ws, cudaStream_t stream) {
  // Rows per CTA: the batch's mean rows per sequence, at most the rows whose pairs fill the 8
  // warps' m-tiles (decode steps: 1). Forced by the check through group_rows_per_cta; no bit
  // depends on it, nor on the kernel form it picks (one m-tile per segment: all warps on it).
  const int G = p.n_head / p.n_kv_head;
  const int64_t per_seq = p.T / p.n_seq;
  const int64_t fill = std::max<int64_t>(1, (int64_t)kWarps * kTilePairs / G);
  int rows = (int)std::clamp<int64_t>(per_seq, 1, fill);
  if (p.group_rows_per_cta > 0) rows = p.group_rows_per_cta;
  return (int64_t)rows * G <= kTilePairs ? Launch<D, true>(p, n_pieces, rows, ws, stream)
                                          : Launch<D, false>(p, n_pieces, rows, ws, stream);
}

}  // namespace

bool MmaRouteTakes(const PagedAttentionParams& p) {
  if (p.mma_off || p.k_format != (uint32_t)q::KvFormat::kF16 || p.v_format != (uint32_t)q::KvFormat::kF16) return false;
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  if (reinterpret_cast<uintptr_t>(p.k_cache) % 16 != 0 || reinterpret_cast<uintptr_t>(p.v_cache) % 16 != 0) return false;
  return (p.head_dim == 64 ? SmemBytes<64, true>() : SmemBytes<128, true>()) <= SmemOptinLimit();
}

cudaError_t LaunchMmaPieces(const PagedAttentionParams& p, int n_pieces, float* ws, cudaStream_t stream) {
  return p.head_dim == 64 ? LaunchD<64>(p, n_pieces, ws, stream) : LaunchD<128>(p, n_pieces, ws, stream);
}

}  // namespace lockstep::kernels::attention_internal
