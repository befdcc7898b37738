// The fused matmul kernels (cpu_dot_impl.h) for the build's baseline instruction set (the cpu
// preset's x86-64-v2: SSE4.2; each 8-float operation becomes two 4-float ones).
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/backend/cpu/cpu_dot_kernels.h"
#include "engine/quant/decode.h"

// The 8-float vector type crosses function boundaries only between inlined helpers of this file;
// GCC's note that such a signature would change the ABI without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#define LOCKSTEP_DOT_AVX2 0
#define LOCKSTEP_DOT_NS base
#include "engine/backend/cpu/cpu_dot_impl.h"
#include "engine/backend/cpu/cpu_act_impl.h"
#undef LOCKSTEP_DOT_NS
#undef LOCKSTEP_DOT_AVX2

namespace lockstep::backend::cpu {

void GluRowsBase(bool gelu, const float* gate, const float* up, float* out, int64_t n) {
  base::GluRowsImpl(gelu, gate, up, out, n);
}

void DotMatMulRowsBase(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  base::DotMatMulRowsImpl(a, row_begin, row_end);
}

}  // namespace lockstep::backend::cpu
