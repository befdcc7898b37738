// Shared pieces of kernel_check (the CUDA gate, kernels/check/): device buffers, result lines,
// the run's random generator, host quantize/dequantize helpers. One line per kernel is collected
// in Lines() and printed by main (kernel_check.cc).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/decode.h"
#include "engine/quant/fp.h"
#include "engine/quant/kv_format.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "engine/sampling/philox.h"
#include "kernels/attention.h"
#include "kernels/check/curand_check.h"
#include "kernels/elementwise.h"
#include "kernels/kv_write.h"
#include "kernels/matmul.h"
#include "kernels/matmul_mma.h"
#include "kernels/sampling.h"


namespace lockstep::kernels::check {

namespace lk = lockstep::kernels;
namespace q = lockstep::quant;


inline constexpr double kU = 0x1p-24;  // unit roundoff of binary32
// Every forced MMA tile configuration (all give auto's bits), with the names the bench prints.
inline constexpr lk::MmaConfig kMmaConfigs[] = {lk::MmaConfig::k16x8, lk::MmaConfig::k32x8, lk::MmaConfig::k64x8,
                                               lk::MmaConfig::k64x16, lk::MmaConfig::k32x16, lk::MmaConfig::kTiled128x64,
                                               lk::MmaConfig::kStaged16x8, lk::MmaConfig::k64x32, lk::MmaConfig::k32x32,
                                               lk::MmaConfig::kTiledSplitK};
inline constexpr const char* kMmaConfigNames[] = {"16x8", "32x8", "64x8", "64x16", "32x16", "tiled", "staged", "64x32", "32x32", "splitk"};
static_assert(std::size(kMmaConfigs) == std::size(kMmaConfigNames));

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__, #call);                                                      \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

// Launch + synchronise, so that an asynchronous fault is attributed to its kernel.
#define LAUNCH(call)                      \
  do {                                    \
    CK(call);                             \
    CK(cudaDeviceSynchronize());          \
  } while (0)

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev() = default;
  explicit Dev(size_t count) { Alloc(count); }
  void Alloc(size_t count) {
    Free();
    n = count;
    CK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  }
  void Free() {
    if (p) cudaFree(p);
    p = nullptr;
  }
  ~Dev() { Free(); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr, o.n = 0; }
  void Up(const std::vector<T>& h) {
    if (h.size() != n) Alloc(h.size());
    CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> Down() const {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void Poison() { CK(cudaMemset(p, 0xFF, std::max<size_t>(n, 1) * sizeof(T))); }
};

template <typename T>
inline Dev<T> Upload(const std::vector<T>& h) {
  Dev<T> d(h.size());
  d.Up(h);
  return d;
}

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline bool SameBits(float a, float b) { return Bits(a) == Bits(b) || (std::isnan(a) && std::isnan(b)); }

// One result line per kernel.
struct Line {
  std::string name, shapes;
  double worst = 0.0;  // worst |err| / bound
  int64_t checked = 0, fails = 0, bit_checked = 0, bit_fails = 0;
  std::string first_fail;
  bool ran = false;
  void Err(double err_over_bound) {
    ran = true;
    ++checked;
    if (!(err_over_bound <= worst)) worst = std::isnan(err_over_bound) ? INFINITY : err_over_bound;
    if (!(err_over_bound <= 1.0)) ++fails;
  }
  void Fail(const std::string& what) {
    ran = true;
    ++fails;
    if (first_fail.empty()) first_fail = what;
  }
  void Bit(bool same, const std::string& what) {
    ran = true;
    ++bit_checked;
    if (!same) {
      ++bit_fails;
      if (first_fail.empty()) first_fail = what;
    }
  }
  bool ok() const { return ran && fails == 0 && bit_fails == 0; }
};

inline std::vector<Line*>& Lines() {
  static std::vector<Line*> v;
  return v;
}
inline Line* NewLine(const std::string& name) {
  Line* l = new Line;
  l->name = name;
  Lines().push_back(l);
  return l;
}

// Compares a value against a reference with an absolute bound; NaN/Inf where ref is finite fail.
inline void Compare(Line* line, float got, double ref, double bound, const char* ctx) {
  if (!std::isfinite(got) && std::isfinite(ref)) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: got %g, ref %g", ctx, (double)got, ref);
    line->Fail(buf);
    line->Err(INFINITY);
    return;
  }
  const double err = std::fabs((double)got - ref);
  const double r = bound > 0 ? err / bound : (err == 0 ? 0.0 : INFINITY);
  if (!(r <= 1.0) && line->first_fail.empty()) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: got %.9g ref %.9g err %.3g bound %.3g", ctx, (double)got,
                  ref, err, bound);
    line->first_fail = buf;
  }
  line->Err(r);
}

inline std::mt19937_64 g_rng;  // seeded once by main (--seed)
inline float Uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g_rng); }
inline int64_t Int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g_rng); }
inline std::vector<float> RandVec(size_t n, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  for (auto& x : v) x = Uni(lo, hi);
  return v;
}

inline q::TypeTraits Tr(q::Type t) { return q::Traits(t); }

inline std::vector<uint8_t> QuantizeRows(q::Type t, const std::vector<float>& src) {
  const auto tr = Tr(t);
  std::vector<uint8_t> out(src.size() / tr.block_size * tr.type_size);
  const auto st = q::Quantize(t, src.data(), (int64_t)src.size(), out.data());
  if (!st.ok()) {
    std::fprintf(stderr, "host Quantize(%s) failed: %s\n", tr.name, std::string(st.message()).c_str());
    std::exit(2);
  }
  return out;
}
inline std::vector<float> DequantizeRows(q::Type t, const std::vector<uint8_t>& src, int64_t n) {
  std::vector<float> out(n);
  const auto st = q::Dequantize(t, src.data(), n, out.data());
  if (!st.ok()) {
    std::fprintf(stderr, "host Dequantize failed\n");
    std::exit(2);
  }
  return out;
}

inline std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}


// The checks, one file per kernel family; each adds its Line(s).
void CheckMatmul(bool quick);       // check_matmul.cc
void CheckMatmulMma(bool quick);    // check_matmul_mma.cc
void CheckElementwise();            // check_matmul.cc
void CheckKvWrite();                // check_attention.cc
void CheckAttention(bool quick);    // check_attention.cc
void CheckSampling();               // check_sampling.cc
void Bench();                       // bench.cc

}  // namespace lockstep::kernels::check
