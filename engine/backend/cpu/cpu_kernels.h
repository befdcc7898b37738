// Building blocks of the cpu backend whose reduction order is the backend's contract.
// Internal to engine/backend/cpu.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_dot_kernels.h"
#include "engine/core/threads.h"

namespace lockstep::backend::cpu {

// Lanes of DotFixed: element c of a dot product is accumulated into lane c % kDotLanes.
inline constexpr int kDotLanes = 16;

// sum_c a[c] * b[c] over n floats, in one order fixed by n alone: lane l (0..15) sums the
// products c = l, l + 16, l + 32, ... in increasing c, then the lanes are combined by the tree
// lane[l] += lane[l + 8], += lane[l + 4], += lane[l + 2], += lane[l + 1]. Defined out of line, so
// every caller runs the same instructions (no per-call-site contraction or re-association).
float DotFixed(const float* a, const float* b, int64_t n);

// Two dots sharing `a`: *y0 = DotFixed(a, b0, n), *y1 = DotFixed(a, b1, n), bit for bit; it
// loads `a` once for both (the matmul inner kernel, where `a` is a dequantized weight row).
void DotFixedX2(const float* a, const float* b0, const float* b1, int64_t n, float* y0,
                float* y1);

// Row r of w, dequantized by the shared quant code into dst: [w.cols]. A type without a codec is
// an error naming the weight and the row.
absl::Status DequantizeRow(const Weight& w, int64_t r, float* dst);

// y = W x^T the slow, obvious way: each row of w dequantized by DequantizeRow, then
// y[t, r] = DotFixed(row, x[t, :], w.cols). W: [rows, cols], x: [T, cols], y: [T, rows].
// The reference CpuBackend::MatMul must equal bit for bit; single-threaded.
absl::Status MatMulReference(const Weight& w, const float* x, int64_t T, float* y);

// CpuBackend::MatMul with the fused kernels of `isa` (which must be available), rows split over
// `pool`; bit-identical to MatMulReference for every isa, T and pool size. A type without a codec
// is an error naming the weight and its type (checked before any row is computed).
absl::Status MatMulWithIsa(DotIsa isa, const Weight& w, const float* x, int64_t T, float* y,
                           core::ThreadPool& pool);

// acc[d] += p * v[d] for d in [0, n): each d is its own accumulator, so vectorizing over d
// changes no sum's order.   acc, v: [n]
void AxpyInto(float* acc, float p, const float* v, int64_t n);

// CpuBackend::PagedAttention's slow twin over one sequence's contiguous, already decoded K/V:
// for query t at position pos[t], head h (kv head g = h / (n_head / n_kv_head)), over the
// visible keys j in [lo, hi] = [max(0, pos - window + 1) (or 0), min(pos, n_kv - 1)]:
//   s_j = DotFixed(q, k_j, head_dim) * scale, then softcap * tanhf(s_j / softcap) if softcap;
//   m = max_j s_j (in increasing j);
//   for each piece i of keys [i * kKvPiece, (i + 1) * kKvPiece) meeting [lo, hi], in increasing
//   i: piece_sum = sum of e_j = expf(s_j - m) and piece_acc[d] = sum of e_j * v_j[d], both
//   sequential in increasing j from 0; then sum += piece_sum, acc[d] += piece_acc[d];
//   out[d] = acc[d] / sum.   No visible key: zeros.
// Single-threaded, written plainly; CpuBackend::PagedAttention equals it bit for bit on the
// decoded rows of its pool (properties/paged_attention_properties.cc).
// q, out: [T, n_head, head_dim]; pos: [T]; k, v: [n_kv, n_kv_head, head_dim]
void AttentionContiguous(const float* q, const int32_t* pos, int64_t T, const float* k,
                         const float* v, int64_t n_kv, int64_t n_head, int64_t n_kv_head,
                         int64_t head_dim, const AttentionParams& p, float* out);

}  // namespace lockstep::backend::cpu
