// Run-time choice among the per-ISA builds of the fused matmul kernels (cpu_dot_kernels.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

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
    case DotIsa::kAvx512: {
#if defined(__x86_64__)
      // libgcc's checks include the OS's XSAVE support of the zmm state.
      static const bool avx512 =
          DotIsaAvailable(DotIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512dq");
      return avx512;
#else
      return false;
#endif
    }
  }
  return false;
}

DotIsa BestDotIsa() {
  static const DotIsa best = [] {
    if (const char* forced = std::getenv("LOCKSTEP_CPU_ISA"); forced && *forced) {
      for (DotIsa isa : {DotIsa::kBase, DotIsa::kAvx2, DotIsa::kAvx512}) {
        if (std::strcmp(forced, DotIsaName(isa)) != 0) continue;
        if (DotIsaAvailable(isa)) return isa;
        std::fprintf(stderr, "LOCKSTEP_CPU_ISA=%s: this machine does not run %s\n", forced,
                     forced);
        std::abort();
      }
      std::fprintf(stderr, "LOCKSTEP_CPU_ISA=%s: want base, avx2 or avx512\n", forced);
      std::abort();
    }
    if (DotIsaAvailable(DotIsa::kAvx512)) return DotIsa::kAvx512;
    return DotIsaAvailable(DotIsa::kAvx2) ? DotIsa::kAvx2 : DotIsa::kBase;
  }();
  return best;
}

const char* DotIsaName(DotIsa isa) {
  switch (isa) {
    case DotIsa::kAvx512: return "avx512";
    case DotIsa::kAvx2: return "avx2";
    case DotIsa::kBase: break;
  }
  return "base";
}

void DotMatMulRows(DotIsa isa, const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  if (!DotIsaAvailable(isa)) {
    std::fprintf(stderr, "cpu dot kernels: %s is not available on this machine\n",
                 DotIsaName(isa));
    std::abort();
  }
  if (isa == DotIsa::kAvx512) {
    DotMatMulRowsAvx512(a, row_begin, row_end);
  } else if (isa == DotIsa::kAvx2) {
    DotMatMulRowsAvx2(a, row_begin, row_end);
  } else {
    DotMatMulRowsBase(a, row_begin, row_end);
  }
}

void GluRows(DotIsa isa, bool gelu, const float* gate, const float* up, float* out, int64_t n) {
  if (!DotIsaAvailable(isa)) {
    std::fprintf(stderr, "cpu glu kernels: %s is not available on this machine\n",
                 DotIsaName(isa));
    std::abort();
  }
  if (isa == DotIsa::kAvx512) {
    GluRowsAvx512(gelu, gate, up, out, n);
  } else if (isa == DotIsa::kAvx2) {
    GluRowsAvx2(gelu, gate, up, out, n);
  } else {
    GluRowsBase(gelu, gate, up, out, n);
  }
}

}  // namespace lockstep::backend::cpu
