// The fused matmul kernels (cpu_dot_impl.h) compiled for AVX2 + F16C, chosen at run time by
// BestDotIsa (cpu_dot_dispatch.cc) on machines that have both. FMA is deliberately not enabled: the
// reference's products are rounded before they are added.
//
// Headers come first so that their inline functions keep the baseline target (an out-of-line
// copy emitted here may be the one the linker keeps for every caller); only the code of
// cpu_dot_impl.h, defined after the pragma, is AVX2.
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/backend/cpu/cpu_dot_kernels.h"
#include "engine/quant/decode.h"

#if defined(__clang__)
// clang ignores `#pragma GCC target`; its equivalent gives every function below the target.
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif
// The pragma does not define __AVX2__ / __F16C__ for the code after it, so the kernels ask this.
#define LOCKSTEP_DOT_AVX2 1
#define LOCKSTEP_DOT_NS avx2
#include "engine/backend/cpu/cpu_dot_impl.h"
#include "engine/backend/cpu/cpu_act_impl.h"
#undef LOCKSTEP_DOT_NS
#undef LOCKSTEP_DOT_AVX2

namespace lockstep::backend::cpu {

void GluRowsAvx2(bool gelu, const float* gate, const float* up, float* out, int64_t n) {
  avx2::GluRowsImpl(gelu, gate, up, out, n);
}

void DotMatMulRowsAvx2(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  avx2::DotMatMulRowsImpl(a, row_begin, row_end);
}

}  // namespace lockstep::backend::cpu
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
