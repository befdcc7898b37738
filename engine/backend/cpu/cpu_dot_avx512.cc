// The fused matmul kernels compiled for AVX-512 (F, VL, BW, DQ) + F16C, chosen at run time by
// BestDotIsa (cpu_dot_dispatch.cc) on machines that have them: the codecs of cpu_dot_impl.h
// (32 ymm registers instead of 16) and the 16-lane driver of cpu_dot_impl512.h.
//
// The avx512f target implies FMA in GCC, and GCC contracts a * b + c into an FMA by default
// (-ffp-contract=fast), which would round once where the reference rounds twice: the
// `optimize("fp-contract=off")` pragma below forbids that for every function of this file
// (LAB.md: `objdump -d` of this object shows no vfmadd; the bit-for-bit test would fail if it did).
//
// Headers come first so that their inline functions keep the baseline target (see
// cpu_dot_avx2.cc).
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/backend/cpu/cpu_dot_kernels.h"
#include "engine/quant/decode.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#pragma clang attribute push(                                                          \
    __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,f16c")
#endif
// The pragma does not define __AVX2__ / __AVX512F__ for the code after it, so the kernels ask these.
#define LOCKSTEP_DOT_AVX2 1
#define LOCKSTEP_DOT_NS avx512
#include "engine/backend/cpu/cpu_dot_impl.h"
#define LOCKSTEP_ACT_LANES 8
#include "engine/backend/cpu/cpu_act_impl.h"
#undef LOCKSTEP_ACT_LANES
#include "engine/backend/cpu/cpu_dot_impl512.h"
#undef LOCKSTEP_DOT_NS
#undef LOCKSTEP_DOT_AVX2

namespace lockstep::backend::cpu {

void GluRowsAvx512(bool gelu, const float* gate, const float* up, float* out, int64_t n) {
  avx512::GluRowsImpl(gelu, gate, up, out, n);
}

void DotMatMulRowsAvx512(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  avx512::DotMatMulRows512(a, row_begin, row_end);
}

}  // namespace lockstep::backend::cpu
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
