// Building blocks of the cpu backend whose reduction order is the backend's contract.
// Internal to engine/backend/cpu.
#pragma once

#include <cstdint>

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

// Row r of w, dequantized by the shared quant code into dst: [w.cols]. A type without a codec
// breaks the caller's precondition (the model loader rejects such files): it stops the program.
void DequantizeRowOrDie(const Weight& w, int64_t r, float* dst);

// y = W x^T the slow, obvious way: each row of w dequantized by DequantizeRowOrDie, then
// y[t, r] = DotFixed(row, x[t, :], w.cols). W: [rows, cols], x: [T, cols], y: [T, rows].
// The reference CpuBackend::MatMul must equal bit for bit; single-threaded.
void MatMulReference(const Weight& w, const float* x, int64_t T, float* y);

// CpuBackend::MatMul with the fused kernels of `isa` (which must be available), rows split over
// `pool`; bit-identical to MatMulReference for every isa, T and pool size. A type without a codec
// goes to MatMulReference, which stops the program naming the weight.
void MatMulWithIsa(DotIsa isa, const Weight& w, const float* x, int64_t T, float* y,
                   core::ThreadPool& pool);

}  // namespace lockstep::backend::cpu
