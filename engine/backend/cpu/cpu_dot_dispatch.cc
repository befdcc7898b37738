// Run-time choice among the per-ISA builds of the fused matmul kernels (cpu_dot_kernels.h).
#include <cstdio>
#include <cstdlib>

#include "engine/backend/cpu/cpu_dot_kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace lockstep::backend::cpu {
namespace {

#if defined(__x86_64__)
// CPUID leaf 1, ECX bit 29. (clang 14's __builtin_cpu_supports knows no "f16c".)
// Asked once per process: CPUID traps to the hypervisor on virtual machines (18.6 us a call
// measured on the 2-core development VM), and DotMatMulRows checks the ISA on every call.
bool HasF16c() {
  static const bool has = [] {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  return has;
}
#endif

}  // namespace

bool DotIsaAvailable(DotIsa isa) {
  switch (isa) {
    case DotIsa::kBase: return true;
    case DotIsa::kAvx2: {
#if defined(__x86_64__)
      static const bool avx2 = __builtin_cpu_supports("avx2") && HasF16c();
      return avx2;
#else
      return false;
#endif
    }
  }
  return false;
}

DotIsa BestDotIsa() {
  static const DotIsa best = DotIsaAvailable(DotIsa::kAvx2) ? DotIsa::kAvx2 : DotIsa::kBase;
  return best;
}

const char* DotIsaName(DotIsa isa) { return isa == DotIsa::kAvx2 ? "avx2" : "base"; }

void DotMatMulRows(DotIsa isa, const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  if (!DotIsaAvailable(isa)) {
    std::fprintf(stderr, "cpu dot kernels: %s is not available on this machine\n",
                 DotIsaName(isa));
    std::abort();
  }
  if (isa == DotIsa::kAvx2) {
    DotMatMulRowsAvx2(a, row_begin, row_end);
  } else {
    DotMatMulRowsBase(a, row_begin, row_end);
  }
}

}  // namespace lockstep::backend::cpu
