// The fused decode-and-dot matmul kernels of the cpu backend (cpu_dot_impl.h), compiled once per
// instruction set (cpu_dot_base.cc: the build's baseline, x86-64-v2; cpu_dot_avx2.cc: AVX2 +
// F16C; cpu_dot_avx512.cc: AVX-512 F/VL/BW/DQ, 16-lane accumulators and, for T > 1, rows decoded
// once into a buffer and reused by every activation row, cpu_dot_impl512.h) and picked at run time. Internal to engine/backend/cpu.
//
// Every variant computes each output element with exactly the arithmetic of
// DequantizeRowOrDie + DotFixed (cpu_kernels.h): the weight value is the shared decoder's float
// (same binary32 operations, each rounded, no FMA), element c is multiplied by x[c] and added to
// lane c % 16 in increasing c, and the lanes are combined by DotFixed's tree. Only the
// instructions differ (8 lanes per register instead of 4, a block decoded in registers instead
// of a row in memory), never the operations, so results do not depend on the ISA chosen.
#pragma once

#include <cstdint>

#include "engine/quant/types.h"

namespace lockstep::backend::cpu {

// y[t, r] = sum_c W[r, c] * x[t, c] for rows [row_begin, row_end).
struct DotMatMulArgs {
  quant::Type type;
  const uint8_t* w;   // [rows, row_bytes] blocks of `type`, no alignment promise
  int64_t row_bytes;  // bytes of one weight row
  int64_t rows, cols;
  const float* x;     // [T, cols]
  int64_t T;
  float* y;           // [T, rows]
};

enum class DotIsa { kBase, kAvx2, kAvx512 };

// True when this machine runs `isa`'s instructions (kBase: always).
bool DotIsaAvailable(DotIsa isa);

// The fastest available variant, decided once per process. LOCKSTEP_CPU_ISA=base|avx2|avx512
// forces one (for side-by-side measurements); a value that is unknown or not available on this
// machine aborts with a message naming the variable (no silent fallback).
DotIsa BestDotIsa();

const char* DotIsaName(DotIsa isa);

// Rows [row_begin, row_end) of the matmul with the `isa` variant; `isa` must be available.
void DotMatMulRows(DotIsa isa, const DotMatMulArgs& a, int64_t row_begin, int64_t row_end);

// The per-ISA entry points behind DotMatMulRows.
void DotMatMulRowsBase(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end);
void DotMatMulRowsAvx2(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end);
void DotMatMulRowsAvx512(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end);

// out[i] = act(gate[i]) * up[i] for i < n, act = gelu-tanh (gelu) or silu, in double with a
// polynomial exp (cpu_act_impl.h); every isa gives the same bits.
void GluRows(DotIsa isa, bool gelu, const float* gate, const float* up, float* out, int64_t n);
void GluRowsBase(bool gelu, const float* gate, const float* up, float* out, int64_t n);
void GluRowsAvx2(bool gelu, const float* gate, const float* up, float* out, int64_t n);
void GluRowsAvx512(bool gelu, const float* gate, const float* up, float* out, int64_t n);

}  // namespace lockstep::backend::cpu
