// kernel_check: the CUDA kernels against plain double-accumulating references written here
// (weights and KV rows dequantized with the host decoders, engine/quant), plus the bitwise
// invariance checks of docs/design.md section 1 and, with --bench, the weight-wall benchmark.
//
//   kernel_check [--seed N] [--bench] [--quick]
//
// Every output buffer is NaN-poisoned (0xFF bytes) before its launch; a NaN or Inf where the
// reference is finite fails; every tolerance is stated on the kernel's line. Prints one line per
// kernel, then ALL GREEN or the failures; exits non-zero on any failure or kernel not run.
#include "kernels/check/check_support.h"

using namespace lockstep::kernels::check;

int main(int argc, char** argv) {
  uint64_t seed = 20260101;
  bool bench = false, quick = false, no_check = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--bench")) bench = true;
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--bench-only")) bench = true, no_check = true;
    else {
      std::fprintf(stderr, "usage: kernel_check [--seed N] [--quick] [--bench | --bench-only]\n");
      return 2;
    }
  }
  g_rng.seed(seed);
  int dev_count = 0;
  CK(cudaGetDeviceCount(&dev_count));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("kernel_check seed=%" PRIu64 " device=%s (sm_%d%d)\n", seed, prop.name, prop.major, prop.minor);
  int rc = 0;
  if (!no_check) {
    struct Stage { const char* name; void (*fn)(bool); };
    const auto t0 = std::chrono::steady_clock::now();
    CheckMatmul(quick);
    CheckMatmulMma(quick);
    const auto t1 = std::chrono::steady_clock::now();
    CheckElementwise();
    CheckKvWrite();
    CheckAttention(quick);
    CheckSampling();
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("(matmul checks %.1f s, others %.1f s)\n",
                std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
    std::vector<std::string> failures;
    for (const Line* l : Lines()) {
      std::printf("%-22s %s  checked %" PRId64 " values (worst err/bound %.3g), %" PRId64 " bitwise checks (%" PRId64 " differ) | %s\n",
                  l->name.c_str(), l->ok() ? "PASS" : "FAIL", l->checked, l->worst, l->bit_checked,
                  l->bit_fails, l->shapes.c_str());
      if (!l->ok()) {
        failures.push_back(l->name + (l->ran ? ": " + l->first_fail : ": not run"));
        std::printf("    first failure: %s\n", l->ran ? l->first_fail.c_str() : "kernel not run");
      }
    }
    if (failures.empty()) {
      std::printf("ALL GREEN\n");
    } else {
      std::printf("FAILURES (%zu):\n", failures.size());
      for (const auto& f : failures) std::printf("  %s\n", f.c_str());
      rc = 1;
    }
    std::fflush(stdout);
  }
  if (bench) Bench();
  return rc;
}
