// kernel_check: the CUDA kernels against plain double-accumulating references written here
// (weights and KV rows dequantized with the host decoders, engine/quant), plus the bitwise
// invariance checks of docs/design.md section 1 and, with --bench, the weight-wall benchmark.
//
//   kernel_check [--seed N] [--bench] [--quick]
//
// Every output buffer is NaN-poisoned (0xFF bytes) before its launch; a NaN or Inf where the
// reference is finite fails; every tolerance is stated on the kernel's line. Prints one line per
// kernel, then ALL GREEN or the failures; exits non-zero on any failure or kernel not run.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
#include "kernels/sampling.h"

namespace lk = lockstep::kernels;
namespace q = lockstep::quant;

namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of binary32

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
Dev<T> Upload(const std::vector<T>& h) {
  Dev<T> d(h.size());
  d.Up(h);
  return d;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
bool SameBits(float a, float b) { return Bits(a) == Bits(b) || (std::isnan(a) && std::isnan(b)); }

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

std::vector<Line*>& Lines() {
  static std::vector<Line*> v;
  return v;
}
Line* NewLine(const std::string& name) {
  Line* l = new Line;
  l->name = name;
  Lines().push_back(l);
  return l;
}

// Compares a value against a reference with an absolute bound; NaN/Inf where ref is finite fail.
void Compare(Line* line, float got, double ref, double bound, const char* ctx) {
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

std::mt19937_64 g_rng;
float Uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g_rng); }
int64_t Int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g_rng); }
std::vector<float> RandVec(size_t n, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  for (auto& x : v) x = Uni(lo, hi);
  return v;
}

q::TypeTraits Tr(q::Type t) { return q::Traits(t); }

std::vector<uint8_t> QuantizeRows(q::Type t, const std::vector<float>& src) {
  const auto tr = Tr(t);
  std::vector<uint8_t> out(src.size() / tr.block_size * tr.type_size);
  const auto st = q::Quantize(t, src.data(), (int64_t)src.size(), out.data());
  if (!st.ok()) {
    std::fprintf(stderr, "host Quantize(%s) failed: %s\n", tr.name, std::string(st.message()).c_str());
    std::exit(2);
  }
  return out;
}
std::vector<float> DequantizeRows(q::Type t, const std::vector<uint8_t>& src, int64_t n) {
  std::vector<float> out(n);
  const auto st = q::Dequantize(t, src.data(), n, out.data());
  if (!st.ok()) {
    std::fprintf(stderr, "host Dequantize failed\n");
    std::exit(2);
  }
  return out;
}

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Matmul.
void CheckMatmul(bool quick) {
  Line* acc = NewLine("matmul");
  Line* inv = NewLine("matmul-invariance");
  Line* dec = NewLine("matmul-decode-weights");
  const std::vector<q::Type> types = {q::Type::F32,  q::Type::F16,  q::Type::BF16, q::Type::Q4_0,
                                      q::Type::Q4_1, q::Type::Q8_0, q::Type::Q4_K, q::Type::Q5_K,
                                      q::Type::Q6_K, q::Type::IQ4_XS, q::Type::NVFP4};
  const std::vector<int64_t> Ts = quick ? std::vector<int64_t>{1, 2, 3, 17, 64}
                                        : std::vector<int64_t>{1, 2, 3, 5, 8, 17, 64, 256, 2048};
  std::string type_names;
  int64_t shapes = 0;
  for (q::Type ty : types) {
    const auto tr = Tr(ty);
    type_names += std::string(type_names.empty() ? "" : ",") + tr.name;
    const int64_t bs = std::max<int64_t>(32, tr.block_size);
    // (rows, cols): odd row counts, cols not a multiple of 256 where the block allows it.
    std::vector<std::pair<int64_t, int64_t>> dims = {{1, bs}, {37, bs * 3}, {259, bs == 32 ? 2080 : (bs == 64 ? 2112 : 2304)}};
    if (bs == 32) dims.push_back({130, 800});
    for (auto [rows, cols] : dims) {
      ++shapes;
      const std::vector<float> wf = RandVec((size_t)(rows * cols));
      std::vector<uint8_t> wq;
      if (ty == q::Type::F32) {
        wq.resize(wf.size() * 4);
        std::memcpy(wq.data(), wf.data(), wq.size());
      } else {
        wq = QuantizeRows(ty, wf);
      }
      const std::vector<float> wd = DequantizeRows(ty, wq, rows * cols);
      Dev<uint8_t> dw = Upload(wq);
      // The matmul's own decoders vs the host decoders, bitwise.
      {
        Dev<float> o(rows * cols);
        o.Poison();
        LAUNCH(lk::LaunchMatmulDecodeWeights((uint32_t)ty, dw.p, rows, cols, o.p, 0));
        const auto h = o.Down();
        int64_t bad = 0;
        for (size_t i = 0; i < h.size(); ++i) bad += !SameBits(h[i], wd[i]);
        dec->Bit(bad == 0, std::string(tr.name) + " decoded weight differs from host");
      }
      const float w_scale = ty == q::Type::NVFP4 ? 0.75f : 1.0f;
      // Per-row reference sums: sum |w| |x| bounds the error of the fixed-order fp32 sum.
      for (int64_t T : Ts) {
        const std::vector<float> x = RandVec((size_t)(T * cols));
        Dev<float> dx = Upload(x);
        Dev<float> ya(T * rows), yd(T * rows), yt(T * rows);
        ya.Poison(), yd.Poison(), yt.Poison();
        LAUNCH(lk::LaunchMatmul((uint32_t)ty, dw.p, rows, cols, dx.p, T, ya.p, w_scale, lk::MatmulRoute::kAuto, 0));
        LAUNCH(lk::LaunchMatmul((uint32_t)ty, dw.p, rows, cols, dx.p, T, yd.p, w_scale, lk::MatmulRoute::kDecode, 0));
        LAUNCH(lk::LaunchMatmul((uint32_t)ty, dw.p, rows, cols, dx.p, T, yt.p, w_scale, lk::MatmulRoute::kTiled, 0));
        const auto ha = ya.Down(), hd = yd.Down(), ht = yt.Down();
        int64_t bad = 0;
        for (size_t i = 0; i < ha.size(); ++i) bad += !SameBits(ha[i], hd[i]) || !SameBits(ha[i], ht[i]);
        char ctx[160];
        std::snprintf(ctx, sizeof ctx, "%s rows=%" PRId64 " cols=%" PRId64 " T=%" PRId64, tr.name, rows, cols, T);
        inv->Bit(bad == 0, std::string(ctx) + ": decode route != tiled route");
        // Sampled token rows: all when T <= 17, else first, last and 14 random.
        std::vector<int64_t> ts;
        if (T <= 17) {
          for (int64_t t = 0; t < T; ++t) ts.push_back(t);
        } else {
          ts = {0, T - 1};
          for (int k = 0; k < 14; ++k) ts.push_back(Int(0, T - 1));
        }
        for (int64_t t : ts) {
          // Row t alone (T = 1), both routes: bitwise equal to row t of the T-row call.
          Dev<float> y1(rows), y1t(rows);
          y1.Poison(), y1t.Poison();
          LAUNCH(lk::LaunchMatmul((uint32_t)ty, dw.p, rows, cols, dx.p + t * cols, 1, y1.p, w_scale, lk::MatmulRoute::kAuto, 0));
          LAUNCH(lk::LaunchMatmul((uint32_t)ty, dw.p, rows, cols, dx.p + t * cols, 1, y1t.p, w_scale, lk::MatmulRoute::kTiled, 0));
          const auto h1 = y1.Down(), h1t = y1t.Down();
          int64_t b1 = 0;
          for (int64_t r = 0; r < rows; ++r) b1 += !SameBits(h1[r], ha[t * rows + r]) || !SameBits(h1t[r], ha[t * rows + r]);
          inv->Bit(b1 == 0, std::string(ctx) + ": row t of T-row call != T=1 call");
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < cols; ++k) {
              const double p = (double)wd[r * cols + k] * (double)x[t * cols + k];
              ref += p;
              mag += std::fabs(p);
            }
            ref *= w_scale;
            // fp32 fma chain of cols/8 terms + 3 tree levels + the scale: first-order bound.
            const double bound = ((double)cols / 8 + 4) * kU * mag * w_scale + kU * std::fabs(ref) + 1e-30;
            Compare(acc, ha[t * rows + r], ref, bound, ctx);
          }
        }
      }
    }
  }
  acc->shapes = "types " + type_names + "; " + std::to_string(shapes) + " (rows,cols) shapes, rows 1..259, cols 32..2304; T={" + Join(Ts) + "}; bound (cols/8+4)*u*sum|w||x|";
  inv->shapes = "route decode==tiled==auto for every (type,shape,T); row t of T-row call == T=1 call (sampled t)";
  dec->shapes = "matmul chunk decoders == host Dequantize, every type and shape";
}

// ---------------------------------------------------------------------------------------------
// RMSNorm, RoPE, GLU, add, scale, softcap, GetRows.
void CheckElementwise() {
  {
    Line* l = NewLine("rmsnorm");
    for (int64_t T : {1, 3, 17}) {
      for (int64_t n : {1, 7, 64, 4096, 5003}) {
        for (bool with_w : {false, true}) {
          const auto x = RandVec(T * n, -3, 3);
          const auto w = RandVec(n, 0.5f, 1.5f);
          Dev<float> dx = Upload(x), dw = Upload(w), dy(T * n), d1(n);
          dy.Poison();
          const float eps = 1e-5f;
          LAUNCH(lk::LaunchRmsNorm(dx.p, with_w ? dw.p : nullptr, T, n, eps, dy.p, 0));
          const auto y = dy.Down();
          for (int64_t t = 0; t < T; ++t) {
            double ss = 0;
            for (int64_t i = 0; i < n; ++i) ss += (double)x[t * n + i] * x[t * n + i];
            const double s = 1.0 / std::sqrt(ss / n + eps);
            for (int64_t i = 0; i < n; ++i) {
              const double ref = x[t * n + i] * s * (with_w ? w[i] : 1.0);
              Compare(l, y[t * n + i], ref, ((double)n / 256 + 16) * kU * std::fabs(ref) + 1e-30, "rmsnorm");
            }
          }
          d1.Poison();
          LAUNCH(lk::LaunchRmsNorm(dx.p + (T - 1) * n, with_w ? dw.p : nullptr, 1, n, eps, d1.p, 0));
          const auto y1 = d1.Down();
          bool same = true;
          for (int64_t i = 0; i < n; ++i) same &= SameBits(y1[i], y[(T - 1) * n + i]);
          l->Bit(same, "rmsnorm row alone != in batch");
        }
      }
    }
    l->shapes = "T={1,3,17} n={1,7,64,4096,5003} w null/set; bound (n/256+16)*u*|ref|; row alone==in batch bitwise";
  }
  {
    Line* l = NewLine("rope");
    struct Cfg { int n_head, head_dim, n_rot; double base; bool ff; };
    for (const Cfg c : {Cfg{4, 64, 64, 10000.0, false}, Cfg{3, 128, 128, 500000.0, true},
                        Cfg{2, 80, 32, 10000.0, false}, Cfg{5, 256, 256, 1000000.0, false}}) {
      for (lk::RopeMode mode : {lk::RopeMode::kNormal, lk::RopeMode::kNeox}) {
        const int64_t T = 19;
        const auto x = RandVec(T * c.n_head * c.head_dim, -2, 2);
        std::vector<int32_t> pos(T);
        for (auto& p : pos) p = (int32_t)Int(0, 131071);
        pos[0] = 0;
        std::vector<float> ff(c.n_rot / 2);
        for (auto& f : ff) f = Uni(1.0f, 8.0f);
        Dev<float> dx = Upload(x), dy(x.size()), dff = Upload(ff);
        Dev<int32_t> dp = Upload(pos);
        dy.Poison();
        LAUNCH(lk::LaunchRope(dx.p, dp.p, T, c.n_head, c.head_dim, c.n_rot, c.base, c.ff ? dff.p : nullptr, mode, dy.p, 0));
        const auto y = dy.Down();
        const int half = c.n_rot / 2;
        for (int64_t t = 0; t < T; ++t) {
          for (int h = 0; h < c.n_head; ++h) {
            const float* xh = &x[(t * c.n_head + h) * c.head_dim];
            const float* yh = &y[(t * c.n_head + h) * c.head_dim];
            for (int i = 0; i < half; ++i) {
              double th = pos[t] * std::pow(c.base, -2.0 * i / c.n_rot);
              if (c.ff) th /= ff[i];
              const int d0 = mode == lk::RopeMode::kNeox ? i : 2 * i;
              const int d1 = mode == lk::RopeMode::kNeox ? i + half : 2 * i + 1;
              const double r0 = xh[d0] * std::cos(th) - xh[d1] * std::sin(th);
              const double r1 = xh[d0] * std::sin(th) + xh[d1] * std::cos(th);
              const double b = 4 * kU * (std::fabs(xh[d0]) + std::fabs(xh[d1])) + 1e-30;
              Compare(l, yh[d0], r0, b, "rope");
              Compare(l, yh[d1], r1, b, "rope");
            }
            for (int d = c.n_rot; d < c.head_dim; ++d) l->Bit(SameBits(yh[d], xh[d]), "rope pass-through dim changed");
          }
        }
      }
    }
    l->shapes = "normal+neox, head_dim {64,128,80(n_rot 32),256}, pos < 2^17, freq_factors; bound 4u(|x0|+|x1|)";
  }
  {
    Line* l = NewLine("glu");
    for (lk::GluOp op : {lk::GluOp::kSilu, lk::GluOp::kGeluTanh}) {
      for (int64_t n : {1, 333, 14336}) {
        const int64_t T = 5;
        const auto gu = RandVec(T * 2 * n, -12, 12);  // fused [T, 2n]: gate then up
        Dev<float> dgu = Upload(gu), dy(T * n);
        dy.Poison();
        LAUNCH(lk::LaunchGlu(op, dgu.p, 2 * n, dgu.p + n, 2 * n, T, n, dy.p, 0));
        const auto y = dy.Down();
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < n; ++i) {
            const double g = gu[t * 2 * n + i], u = gu[t * 2 * n + n + i];
            double a;
            if (op == lk::GluOp::kSilu) a = g / (1 + std::exp(-g));
            else a = 0.5 * g * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
            const double ref = a * u;
            Compare(l, y[t * n + i], ref, 16 * kU * (std::fabs(g * u) + std::fabs(ref)) + 1e-30, "glu");
          }
        }
      }
    }
    l->shapes = "silu+gelu_tanh, T=5, n={1,333,14336}, strided fused gate|up; bound 16u(|g u|+|ref|)";
  }
  {
    Line* l = NewLine("add-scale-softcap");
    for (int64_t n : {1, 1000, 100003}) {
      const auto a = RandVec(n, -100, 100), b = RandVec(n, -100, 100);
      Dev<float> da = Upload(a), db = Upload(b), dy(n);
      dy.Poison();
      LAUNCH(lk::LaunchAdd(da.p, db.p, n, dy.p, 0));
      auto y = dy.Down();
      for (int64_t i = 0; i < n; ++i) Compare(l, y[i], (double)a[i] + b[i], 0.5 * kU * 2 * std::fabs((double)a[i] + b[i]) + 1e-30, "add");
      dy.Poison();
      LAUNCH(lk::LaunchScale(da.p, 0.37f, n, dy.p, 0));
      y = dy.Down();
      for (int64_t i = 0; i < n; ++i) Compare(l, y[i], (double)a[i] * 0.37f, kU * std::fabs((double)a[i] * 0.37f) + 1e-30, "scale");
      dy.Poison();
      LAUNCH(lk::LaunchSoftcap(da.p, 30.0f, n, dy.p, 0));
      y = dy.Down();
      for (int64_t i = 0; i < n; ++i) {
        const double ref = 30.0 * std::tanh(a[i] / 30.0);
        Compare(l, y[i], ref, 8 * kU * 30.0, "softcap");
      }
    }
    l->shapes = "n={1,1000,100003}; add/scale bound 1 ulp; softcap cap=30 bound 8u*cap";
  }
  {
    Line* l = NewLine("get_rows");
    std::string names;
    for (q::Type ty : q::CodecTypes()) {
      const auto tr = Tr(ty);
      names += std::string(names.empty() ? "" : ",") + tr.name;
      const int64_t cols = std::max<int64_t>(tr.block_size, 1) * (tr.block_size >= 256 ? 3 : (tr.block_size == 1 ? 97 : 5));
      const int64_t n_rows = 23, T = 9;
      const auto wf = RandVec(n_rows * cols);
      std::vector<uint8_t> wq;
      if (ty == q::Type::F32) {
        wq.resize(wf.size() * 4);
        std::memcpy(wq.data(), wf.data(), wq.size());
      } else {
        wq = QuantizeRows(ty, wf);
      }
      const auto wd = DequantizeRows(ty, wq, n_rows * cols);
      std::vector<int32_t> ids(T);
      for (auto& i : ids) i = (int32_t)Int(0, n_rows - 1);
      Dev<uint8_t> dw = Upload(wq);
      Dev<int32_t> di = Upload(ids);
      Dev<float> dy(T * cols);
      dy.Poison();
      LAUNCH(lk::LaunchGetRows((uint32_t)ty, dw.p, n_rows, cols, di.p, T, dy.p, 0));
      const auto y = dy.Down();
      int64_t bad = 0;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < cols; ++c) bad += !SameBits(y[t * cols + c], wd[ids[t] * cols + c]);
      l->Bit(bad == 0, std::string(tr.name) + " get_rows differs from host Dequantize");
    }
    l->shapes = "bitwise == host Dequantize for every codec type (" + names + ")";
  }
}

// ---------------------------------------------------------------------------------------------
// KV write.
std::vector<uint8_t> HostKvRow(q::KvFormat f, const float* src, int64_t kv_dim) {
  std::vector<uint8_t> out(q::KvRowBytes(f, kv_dim));
  switch (f) {
    case q::KvFormat::kF32: std::memcpy(out.data(), src, kv_dim * 4); break;
    case q::KvFormat::kFp8E4M3:
      for (int64_t i = 0; i < kv_dim; ++i) out[i] = q::Fp32ToE4m3(src[i]);
      break;
    default: {
      const auto st = q::Quantize(q::KvFormatBlockType(f), src, kv_dim, out.data());
      if (!st.ok()) std::exit(2);
    }
  }
  return out;
}

void CheckKvWrite() {
  Line* l = NewLine("kv_write");
  for (int f = 0; f < q::kKvFormatCount; ++f) {
    const auto fmt = (q::KvFormat)f;
    for (int64_t kv_dim : {32, 96, 1024}) {
      for (int64_t T : {1, 5, 33}) {
        const int64_t n_slots = 200;
        std::vector<float> src = RandVec(T * kv_dim, -4, 4);
        if (fmt == q::KvFormat::kFp8E4M3) {  // saturation and subnormal ranges too
          for (int64_t i = 0; i < T * kv_dim; i += 7) src[i] *= 200.0f;
          for (int64_t i = 3; i < T * kv_dim; i += 11) src[i] *= 0.001f;
        }
        std::vector<int32_t> perm(n_slots);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), g_rng);
        std::vector<int32_t> slots(perm.begin(), perm.begin() + T);
        if (T > 2) slots[1] = -1;  // a padding row
        const int64_t rb = q::KvRowBytes(fmt, kv_dim);
        Dev<float> ds = Upload(src);
        Dev<int32_t> dsl = Upload(slots);
        Dev<uint8_t> cache(n_slots * rb);
        cache.Poison();
        LAUNCH(lk::LaunchKvWrite((uint32_t)f, ds.p, dsl.p, T, kv_dim, cache.p, 0));
        const auto h = cache.Down();
        std::vector<bool> written(n_slots, false);
        for (int64_t t = 0; t < T; ++t) {
          if (slots[t] < 0) continue;
          written[slots[t]] = true;
          const auto want = HostKvRow(fmt, &src[t * kv_dim], kv_dim);
          l->Bit(std::memcmp(want.data(), &h[slots[t] * rb], rb) == 0,
                 std::string("kv_write ") + q::KvFormatName(fmt) + " bytes differ from host");
        }
        bool untouched = true;
        for (int64_t s = 0; s < n_slots; ++s) {
          if (written[s]) continue;
          for (int64_t b = 0; b < rb; ++b) untouched &= h[s * rb + b] == 0xFF;
        }
        l->Bit(untouched, std::string("kv_write ") + q::KvFormatName(fmt) + " wrote outside its slots");
      }
    }
  }
  l->shapes = "all 7 formats, kv_dim {32,96,1024}, T {1,5,33}, shuffled slots + a -1 row; bytes == host Quantize/Fp32ToE4m3; other slots untouched";
}

// ---------------------------------------------------------------------------------------------
// Paged attention.
struct AttnBatch {
  int n_head, n_kv_head, head_dim, block_size = 16, window = 0;
  float scale, softcap = 0;
  q::KvFormat kf, vf;
  std::vector<int32_t> seq_len, q_len;  // per sequence
  // Host cache (pool) and tables.
  int n_blocks = 0, max_blocks = 0;
  std::vector<uint8_t> kc, vc;
  std::vector<int32_t> table;           // [n_seq, max_blocks]
  std::vector<float> kf32, vf32;        // dequantized per seq: [seq][j][kv_dim]
  std::vector<int64_t> seq_off;         // offset of seq in kf32 rows
  std::vector<float> qv;                // [T, n_head, head_dim]
  std::vector<int32_t> qstart, pos;
};

int64_t KvDim(const AttnBatch& b) { return (int64_t)b.n_kv_head * b.head_dim; }

// Lays out the batch's sequences in a pool with shuffled (fragmented) blocks.
void BuildCache(AttnBatch& b, const std::vector<std::vector<float>>& krows,
                const std::vector<std::vector<float>>& vrows, int extra_blocks) {
  const int n_seq = (int)b.seq_len.size();
  const int64_t kv_dim = KvDim(b);
  b.max_blocks = 1;
  int need = 0;
  for (int s = 0; s < n_seq; ++s) {
    const int nb = (b.seq_len[s] + b.block_size - 1) / b.block_size;
    b.max_blocks = std::max(b.max_blocks, nb);
    need += nb;
  }
  b.n_blocks = need + extra_blocks;
  std::vector<int32_t> ids(b.n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), g_rng);
  b.table.assign((size_t)n_seq * b.max_blocks, 0);
  const int64_t krb = q::KvRowBytes(b.kf, kv_dim), vrb = q::KvRowBytes(b.vf, kv_dim);
  b.kc.assign((size_t)b.n_blocks * b.block_size * krb, 0xFF);
  b.vc.assign((size_t)b.n_blocks * b.block_size * vrb, 0xFF);
  int next = 0;
  for (int s = 0; s < n_seq; ++s) {
    const int nb = (b.seq_len[s] + b.block_size - 1) / b.block_size;
    for (int k = 0; k < nb; ++k) b.table[(size_t)s * b.max_blocks + k] = ids[next++];
    for (int j = 0; j < b.seq_len[s]; ++j) {
      const int64_t slot = (int64_t)b.table[(size_t)s * b.max_blocks + j / b.block_size] * b.block_size + j % b.block_size;
      const auto kr = HostKvRow(b.kf, &krows[s][(size_t)j * kv_dim], kv_dim);
      const auto vr = HostKvRow(b.vf, &vrows[s][(size_t)j * kv_dim], kv_dim);
      std::memcpy(&b.kc[slot * krb], kr.data(), krb);
      std::memcpy(&b.vc[slot * vrb], vr.data(), vrb);
    }
  }
}

std::vector<float> RunAttention(const AttnBatch& b) {
  const int n_seq = (int)b.seq_len.size();
  const int64_t T = b.qstart[n_seq];
  Dev<float> dq = Upload(b.qv), dout(T * b.n_head * b.head_dim);
  Dev<uint8_t> dk = Upload(b.kc), dv = Upload(b.vc);
  Dev<int32_t> dqs = Upload(b.qstart), dsl = Upload(b.seq_len), dbt = Upload(b.table), dpos = Upload(b.pos);
  lk::PagedAttentionParams p;
  p.q = dq.p, p.k_cache = dk.p, p.v_cache = dv.p;
  p.k_format = (uint32_t)b.kf, p.v_format = (uint32_t)b.vf;
  p.query_start = dqs.p, p.seq_len = dsl.p, p.block_table = dbt.p, p.positions = dpos.p;
  p.out = dout.p;
  p.T = T, p.n_seq = n_seq, p.n_head = b.n_head, p.n_kv_head = b.n_kv_head, p.head_dim = b.head_dim;
  p.block_size = b.block_size, p.max_blocks_per_seq = b.max_blocks;
  p.max_seq_len = *std::max_element(b.seq_len.begin(), b.seq_len.end());
  p.window = b.window, p.scale = b.scale, p.softcap = b.softcap;
  const size_t wsb = lk::PagedAttentionWorkspaceBytes(T, b.n_head, b.head_dim, p.max_seq_len);
  Dev<uint8_t> ws(wsb);
  dout.Poison();
  LAUNCH(lk::LaunchPagedAttention(p, ws.p, wsb, 0));
  return dout.Down();
}

void CheckAttention(bool quick) {
  Line* acc = NewLine("paged_attention");
  Line* inv = NewLine("attention-invariance");
  const std::vector<int> lens = {1, 2, 255, 256, 257, 511, 513, 700, 1030};
  int configs = 0;
  const int n_cfg = quick ? 8 : 28;
  for (int cfg = 0; cfg < n_cfg; ++cfg) {
    ++configs;
    AttnBatch b;
    const int heads[3][2] = {{4, 4}, {8, 2}, {6, 1}};
    const int hsel = cfg % 3;
    b.n_head = heads[hsel][0], b.n_kv_head = heads[hsel][1];
    b.head_dim = (cfg % 4 == 0) ? 128 : (cfg % 4 == 1 ? 64 : (cfg % 4 == 2 ? 96 : 256));
    b.kf = (q::KvFormat)(cfg % q::kKvFormatCount);
    b.vf = (q::KvFormat)((cfg / 2 + cfg) % q::kKvFormatCount);
    b.window = (cfg % 5 == 3) ? 300 : 0;
    b.softcap = (cfg % 6 == 5) ? 20.0f : 0.0f;
    b.scale = 1.0f / std::sqrt((float)b.head_dim);
    b.block_size = (cfg % 2) ? 16 : 32;
    const int n_seq = 1 + (int)Int(0, 4);
    const int64_t kv_dim = KvDim(b);
    std::vector<std::vector<float>> kr(n_seq), vr(n_seq);
    b.qstart.push_back(0);
    for (int s = 0; s < n_seq; ++s) {
      const int L = lens[Int(0, (int64_t)lens.size() - 1)];
      const bool decode = Int(0, 1) == 0;
      const int ql = decode ? 1 : (int)Int(1, std::min(L, 70));
      b.seq_len.push_back(L);
      b.q_len.push_back(ql);
      kr[s] = RandVec((size_t)L * kv_dim, -2, 2);
      vr[s] = RandVec((size_t)L * kv_dim, -2, 2);
      for (int i = 0; i < ql; ++i) b.pos.push_back(L - ql + i);
      b.qstart.push_back(b.qstart.back() + ql);
    }
    const int64_t T = b.qstart.back();
    b.qv = RandVec((size_t)T * b.n_head * b.head_dim, -2, 2);
    BuildCache(b, kr, vr, 7);
    const auto out = RunAttention(b);
    char ctx[200];
    std::snprintf(ctx, sizeof ctx, "cfg %d heads %d/%d D=%d k=%s v=%s win=%d cap=%g", cfg, b.n_head,
                  b.n_kv_head, b.head_dim, q::KvFormatName(b.kf), q::KvFormatName(b.vf), b.window,
                  (double)b.softcap);
    // Reference: double, from the host-dequantized cache rows.
    for (int s = 0; s < n_seq; ++s) {
      const int L = b.seq_len[s];
      std::vector<float> kd((size_t)L * kv_dim), vd((size_t)L * kv_dim);
      for (int j = 0; j < L; ++j) {
        const auto krow = HostKvRow(b.kf, &kr[s][(size_t)j * kv_dim], kv_dim);
        const auto vrow = HostKvRow(b.vf, &vr[s][(size_t)j * kv_dim], kv_dim);
        auto dec = [&](q::KvFormat f, const std::vector<uint8_t>& row, float* o) {
          if (f == q::KvFormat::kFp8E4M3) {
            for (int64_t e = 0; e < kv_dim; ++e) o[e] = q::E4m3ToFp32(row[e]);
          } else {
            const auto d = DequantizeRows(q::KvFormatBlockType(f), row, kv_dim);
            std::memcpy(o, d.data(), kv_dim * 4);
          }
        };
        dec(b.kf, krow, &kd[(size_t)j * kv_dim]);
        dec(b.vf, vrow, &vd[(size_t)j * kv_dim]);
      }
      for (int64_t t = b.qstart[s]; t < b.qstart[s + 1]; ++t) {
        const int p = b.pos[t];
        const int hi = std::min(p, L - 1), lo = b.window > 0 ? std::max(0, p - b.window + 1) : 0;
        for (int h = 0; h < b.n_head; ++h) {
          const int kvh = h / (b.n_head / b.n_kv_head);
          const float* qh = &b.qv[(t * b.n_head + h) * b.head_dim];
          std::vector<double> sc(L);
          double mx = -INFINITY, ds_max = 0, vmax = 0;
          for (int j = lo; j <= hi; ++j) {
            double d = 0, mag = 0;
            for (int e = 0; e < b.head_dim; ++e) {
              const double pr = (double)qh[e] * kd[(size_t)j * kv_dim + kvh * b.head_dim + e];
              d += pr;
              mag += std::fabs(pr);
            }
            double sv = d * b.scale;
            if (b.softcap > 0) sv = b.softcap * std::tanh(sv / b.softcap);
            sc[j] = sv;
            mx = std::max(mx, sv);
            ds_max = std::max(ds_max, ((double)b.head_dim / 32 + 8) * kU * mag * b.scale + 8 * kU * std::fabs(sv));
            for (int e = 0; e < b.head_dim; ++e) vmax = std::max(vmax, (double)std::fabs(vd[(size_t)j * kv_dim + kvh * b.head_dim + e]));
          }
          double l = 0;
          for (int j = lo; j <= hi; ++j) l += std::exp(sc[j] - mx);
          const int n_keys = hi - lo + 1;
          // Score errors ds move each weight by a factor exp(+-2 ds); the fp32 sums add
          // (keys per piece + pieces + 8) u relative error, times max|v|.
          const double bound = vmax * (4 * ds_max + (std::min(n_keys, 256) + n_keys / 256 + 16) * 2 * kU) + 1e-30;
          for (int e = 0; e < b.head_dim; ++e) {
            double o = 0;
            for (int j = lo; j <= hi; ++j) o += std::exp(sc[j] - mx) * vd[(size_t)j * kv_dim + kvh * b.head_dim + e];
            Compare(acc, out[(t * b.n_head + h) * b.head_dim + e], o / l, bound, ctx);
          }
        }
      }
    }
    // Invariance 1: each sequence alone, in a freshly shuffled pool (other slots, other blocks).
    const int64_t row_elems = (int64_t)b.n_head * b.head_dim;
    for (int s = 0; s < n_seq; ++s) {
      AttnBatch a = b;
      a.seq_len = {b.seq_len[s]};
      a.q_len = {b.q_len[s]};
      a.qstart = {0, b.q_len[s]};
      a.pos.assign(b.pos.begin() + b.qstart[s], b.pos.begin() + b.qstart[s + 1]);
      a.qv.assign(b.qv.begin() + b.qstart[s] * row_elems, b.qv.begin() + b.qstart[s + 1] * row_elems);
      BuildCache(a, {kr[s]}, {vr[s]}, (int)Int(0, 40));
      const auto o1 = RunAttention(a);
      bool same = true;
      for (int64_t i = 0; i < (int64_t)o1.size(); ++i) same &= SameBits(o1[i], out[b.qstart[s] * row_elems + i]);
      inv->Bit(same, std::string(ctx) + ": sequence alone (other pool layout) != in batch");
      // Invariance 2: each query row of a prefill run as its own decode step (seq_len = pos+1),
      // all of them in one batch with the sequence's table.
      if (b.q_len[s] > 1) {
        AttnBatch d = a;
        const int ql = b.q_len[s];
        d.seq_len.clear();
        d.qstart = {0};
        for (int i = 0; i < ql; ++i) {
          d.seq_len.push_back(a.pos[i] + 1);
          d.qstart.push_back(i + 1);
        }
        d.table.clear();
        for (int i = 0; i < ql; ++i) d.table.insert(d.table.end(), a.table.begin(), a.table.begin() + a.max_blocks);
        const auto o2 = RunAttention(d);
        bool same2 = true;
        for (int64_t i = 0; i < (int64_t)o2.size(); ++i) same2 &= SameBits(o2[i], o1[i]);
        inv->Bit(same2, std::string(ctx) + ": prefill rows != the same rows as decode steps");
      }
    }
  }
  acc->shapes = std::to_string(configs) + " ragged batches of 1-5 seqs, seq_len {1,2,255,256,257,511,513,700,1030}, decode+prefill rows, GQA 4/4 8/2 6/1, D {64,96,128,256}, all 7 KV formats for K and V, window 300, softcap 20, block 16/32, fragmented tables; bound from score error and fp32 sums";
  inv->shapes = "seq alone in another pool layout == in batch; prefill rows == per-row decode steps (bitwise)";
}

// ---------------------------------------------------------------------------------------------
// Sampling.
void CheckSampling() {
  Line* l = NewLine("philox-noise");
  int64_t counters = 0;
  for (uint32_t stream_tag : {0u, 1u, 7u}) {
    const int64_t n_rows = stream_tag == 0 ? 8 : 2;
    const int64_t n_tok = 131072 + 77;
    std::vector<int64_t> pos(n_rows);
    for (auto& p : pos) p = Int(0, INT64_C(1) << 40);
    pos[0] = 0;
    const uint64_t seed = g_rng();
    const uint32_t token0 = stream_tag == 7 ? 0xFFFF0000u : 0;
    Dev<int64_t> dp = Upload(pos);
    Dev<uint32_t> db(n_rows * n_tok), dc(n_rows * n_tok);
    db.Poison(), dc.Poison();
    LAUNCH(lk::LaunchPhiloxNoise(seed, dp.p, n_rows, token0, n_tok, stream_tag, db.p, 0));
    LAUNCH(lockstep::kernels::check::LaunchCurandBits(seed, dp.p, n_rows, token0, n_tok, stream_tag, dc.p, 0));
    const auto hb = db.Down(), hc = dc.Down();
    int64_t bad = 0, bad_c = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t v = 0; v < n_tok; ++v) {
        const uint32_t want = lockstep::sampling::NoiseBits(seed, (uint64_t)pos[r], token0 + (uint32_t)v, stream_tag);
        bad += hb[r * n_tok + v] != want;
        bad_c += hc[r * n_tok + v] != want;
      }
    }
    counters += n_rows * n_tok;
    l->Bit(bad == 0, "device Philox != host NoiseBits");
    l->Bit(bad_c == 0, "cuRAND (curand_init keying of philox.h) != host NoiseBits");
  }
  l->shapes = std::to_string(counters) + " counters (3 stream tags, positions up to 2^40, token wrap) device == host, and cuRAND == host";
  Line* g = NewLine("gumbel-argmax");
  int64_t rows_checked = 0;
  for (int64_t vocab : {7, 32000, 128256}) {
    const int64_t n_rows = 12;
    const auto logits = RandVec(n_rows * vocab, -5, 5);
    std::vector<int64_t> pos(n_rows);
    for (auto& p : pos) p = Int(0, 1 << 20);
    const uint64_t seed = g_rng();
    const double inv_t = 1.0 / 0.8;
    Dev<float> dl = Upload(logits);
    Dev<int64_t> dp = Upload(pos);
    Dev<int32_t> dout(n_rows);
    dout.Poison();
    LAUNCH(lk::LaunchGumbelArgmax(dl.p, n_rows, vocab, inv_t, seed, dp.p, dout.p, 0));
    const auto out = dout.Down();
    for (int64_t r = 0; r < n_rows; ++r) {
      int32_t best = -1;
      double bs = -INFINITY, second = -INFINITY;
      for (int64_t v = 0; v < vocab; ++v) {
        const double s = (double)logits[r * vocab + v] * inv_t + lockstep::sampling::GumbelNoise(seed, pos[r], (uint32_t)v);
        if (best < 0 || s > bs) {
          second = bs;
          bs = s, best = (int32_t)v;
        } else if (s > second) {
          second = s;
        }
      }
      ++rows_checked;
      // The device log() may differ from glibc's by an ulp: a winner within 1e-12 of the
      // runner-up is a near tie, reported but not failed.
      if (out[r] != best && !(bs - second < 1e-12 * std::fabs(bs))) {
        g->Fail("gumbel argmax " + std::to_string(out[r]) + " != host " + std::to_string(best));
      } else {
        g->Bit(true, "");
      }
    }
  }
  g->shapes = std::to_string(rows_checked) + " rows, vocab {7,32000,128256}, T=0.8; token == host GumbelArgmax formula";
}

// ---------------------------------------------------------------------------------------------
// Bench.
__attribute__((unused)) double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Weights for the bench: real quantized blocks of one random 1 MiB-element tile, repeated
// (the kernel's speed does not depend on values; finite scales keep the arithmetic honest).
void FillQuantWeights(Dev<uint8_t>& d, q::Type ty) {
  const auto tr = Tr(ty);
  const int64_t n = 1 << 20;
  const auto wq = QuantizeRows(ty, RandVec(n));
  for (size_t off = 0; off < d.n; off += wq.size()) {
    CK(cudaMemcpy(d.p + off, wq.data(), std::min(wq.size(), d.n - off), cudaMemcpyHostToDevice));
  }
  (void)tr;
}

void Bench() {
  std::printf("\n== bench (device: ");
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MiB)\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto time_ms = [&](auto&& fn, int reps) {
    std::vector<double> ts;
    fn();  // warm-up
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < reps; ++i) {
      CK(cudaEventRecord(e0));
      fn();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return std::make_pair(ts[ts.size() / 2], ts.back() - ts.front());
  };
  // 1. Copy bandwidth: 2 GiB D2D, bytes read + written.
  const size_t cb = (size_t)2 << 30;
  double copy_gbs;
  {
    Dev<uint8_t> a(cb), b(cb);
    CK(cudaMemset(a.p, 1, cb));
    auto [ms, spread] = time_ms([&] { CK(cudaMemcpyAsync(b.p, a.p, cb, cudaMemcpyDeviceToDevice)); }, 20);
    copy_gbs = 2.0 * cb / (ms * 1e-3) / 1e9;
    std::printf("copy D2D 2 GiB: median %.3f ms (spread %.3f) -> %.0f GB/s (read+write) = the weight wall\n", ms, spread, copy_gbs);
  }
  // 2. Paged attention at the Llama-3-8B layer shape: 32 heads, 8 KV heads, head_dim 128, f16
  //    K and V, blocks of 16 tokens.
  {
    const int n_head = 32, n_kv = 8, D = 128, bs = 16;
    const int64_t kv_dim = (int64_t)n_kv * D;
    struct Case { const char* name; int n_seq, seq_len, q_len; };
    for (const Case c : {Case{"decode depth 1024", 1, 1024, 1}, Case{"decode depth 8192", 1, 8192, 1},
                         Case{"decode c=64 depth 1024", 64, 1024, 1}, Case{"prefill 512", 1, 512, 512},
                         Case{"prefill 2048", 1, 2048, 2048}}) {
      const int nb = (c.seq_len + bs - 1) / bs;
      const int64_t n_slots = (int64_t)c.n_seq * nb * bs;
      const auto fmt = (uint32_t)q::KvFormat::kF16;
      Dev<uint8_t> kc(n_slots * q::KvRowBytes(q::KvFormat::kF16, kv_dim)), vc(kc.n);
      {
        Dev<float> src(n_slots * kv_dim);
        src.Up(RandVec(n_slots * kv_dim, -2, 2));
        std::vector<int32_t> sl(n_slots);
        std::iota(sl.begin(), sl.end(), 0);
        Dev<int32_t> dsl = Upload(sl);
        CK(lk::LaunchKvWrite(fmt, src.p, dsl.p, n_slots, kv_dim, kc.p, 0));
        CK(lk::LaunchKvWrite(fmt, src.p, dsl.p, n_slots, kv_dim, vc.p, 0));
        CK(cudaDeviceSynchronize());
      }
      std::vector<int32_t> qs = {0}, lens, table, pos;
      for (int s = 0; s < c.n_seq; ++s) {
        qs.push_back(qs.back() + c.q_len);
        lens.push_back(c.seq_len);
        for (int b = 0; b < nb; ++b) table.push_back(s * nb + b);
        for (int i = 0; i < c.q_len; ++i) pos.push_back(c.seq_len - c.q_len + i);
      }
      const int64_t T = qs.back();
      Dev<float> dq(T * n_head * D), dout(T * n_head * D);
      dq.Up(RandVec(T * n_head * D));
      Dev<int32_t> dqs = Upload(qs), dl = Upload(lens), dt = Upload(table), dp = Upload(pos);
      lk::PagedAttentionParams p;
      p.q = dq.p, p.k_cache = kc.p, p.v_cache = vc.p, p.k_format = fmt, p.v_format = fmt;
      p.query_start = dqs.p, p.seq_len = dl.p, p.block_table = dt.p, p.positions = dp.p, p.out = dout.p;
      p.T = T, p.n_seq = c.n_seq, p.n_head = n_head, p.n_kv_head = n_kv, p.head_dim = D;
      p.block_size = bs, p.max_blocks_per_seq = nb, p.max_seq_len = c.seq_len;
      p.scale = 1.0f / std::sqrt((float)D);
      const size_t wsb = lk::PagedAttentionWorkspaceBytes(T, n_head, D, c.seq_len);
      Dev<uint8_t> ws(wsb);
      auto [ms, spread] = time_ms([&] { CK(lk::LaunchPagedAttention(p, ws.p, wsb, 0)); }, 20);
      const double kv_gb = 2.0 * c.n_seq * (double)c.seq_len * kv_dim * 2 / 1e9;
      std::printf("attention %-24s %9.4f ms (spread %.4f)  KV %.1f MB -> %6.0f GB/s = %5.1f%% of wall\n", c.name, ms,
                  spread, kv_gb * 1e3, kv_gb / (ms * 1e-3), 100.0 * kv_gb / (ms * 1e-3) / copy_gbs);
    }
    std::fflush(stdout);
  }
  // 3. Llama-3-8B layer set and head.
  struct M { const char* name; int64_t rows, cols; };
  const std::vector<M> layer = {{"attn_q 4096x4096", 4096, 4096}, {"attn_k 1024x4096", 1024, 4096},
                                {"attn_v 1024x4096", 1024, 4096}, {"attn_o 4096x4096", 4096, 4096},
                                {"ffn_gate 14336x4096", 14336, 4096}, {"ffn_up 14336x4096", 14336, 4096},
                                {"ffn_down 4096x14336", 4096, 14336}};
  const M head = {"output 128256x4096", 128256, 4096};
  for (q::Type ty : {q::Type::Q4_K, q::Type::Q8_0}) {
    const auto tr = Tr(ty);
    auto bytes_of = [&](const M& m) { return m.rows * m.cols / tr.block_size * tr.type_size; };
    // Two copies of the layer set, alternated, so that no rep reads weights out of L2.
    int64_t layer_bytes = 0;
    for (const auto& m : layer) layer_bytes += bytes_of(m);
    const int n_copies = 2;
    std::vector<std::vector<Dev<uint8_t>*>> ws(n_copies);
    for (int c = 0; c < n_copies; ++c) {
      for (const auto& m : layer) {
        auto* d = new Dev<uint8_t>(bytes_of(m));
        FillQuantWeights(*d, ty);
        ws[c].push_back(d);
      }
    }
    Dev<uint8_t> wh(bytes_of(head));
    FillQuantWeights(wh, ty);
    for (int64_t T : {1, 2048}) {
      Dev<float> x(T * 14336), y(T * 128256);
      {
        std::vector<float> hx = RandVec(T * 14336);
        x.Up(hx);
      }
      int copy = 0;
      double total_ms = 0;
      std::printf("%s T=%" PRId64 ":\n", tr.name, T);
      for (size_t i = 0; i < layer.size(); ++i) {
        const auto& m = layer[i];
        auto [ms, spread] = time_ms([&] {
          CK(lk::LaunchMatmul((uint32_t)ty, ws[copy][i]->p, m.rows, m.cols, x.p, T, y.p, 1.0f, lk::MatmulRoute::kAuto, 0));
          copy = (copy + 1) % n_copies;
        }, T == 1 ? 50 : 5);
        total_ms += ms;
        const double gb = bytes_of(m) / 1e9;
        const double tflops = 2.0 * T * m.rows * m.cols / (ms * 1e-3) / 1e12;
        std::printf("  %-22s %9.4f ms (spread %.4f)  %7.0f GB/s weights = %5.1f%% of wall  %7.2f TFLOP/s\n",
                    m.name, ms, spread, gb / (ms * 1e-3), 100.0 * gb / (ms * 1e-3) / copy_gbs, tflops);
      }
      // The whole layer set as one CUDA graph (7 launches), both copies alternating.
      cudaStream_t st;
      CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      cudaGraph_t graphs[n_copies];
      cudaGraphExec_t execs[n_copies];
      for (int c = 0; c < n_copies; ++c) {
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (size_t i = 0; i < layer.size(); ++i) {
          CK(lk::LaunchMatmul((uint32_t)ty, ws[c][i]->p, layer[i].rows, layer[i].cols, x.p, T, y.p, 1.0f, lk::MatmulRoute::kAuto, st));
        }
        CK(cudaStreamEndCapture(st, &graphs[c]));
        CK(cudaGraphInstantiate(&execs[c], graphs[c], 0));
      }
      std::vector<double> ts;
      for (int rep = 0; rep < (T == 1 ? 60 : 6); ++rep) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(execs[rep % n_copies], st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep >= 2) ts.push_back(ms);
      }
      std::sort(ts.begin(), ts.end());
      const double gms = ts[ts.size() / 2];
      const double lgb = layer_bytes / 1e9;
      int64_t layer_flop = 0;
      for (const auto& m : layer) layer_flop += 2 * T * m.rows * m.cols;
      std::printf("  LAYER SET (graph)      %9.4f ms (spread %.4f)  %7.0f GB/s weights = %5.1f%% of wall  %7.2f TFLOP/s  [sum of single launches %.4f ms]\n",
                  gms, ts.back() - ts.front(), lgb / (gms * 1e-3), 100.0 * lgb / (gms * 1e-3) / copy_gbs,
                  (double)layer_flop / (gms * 1e-3) / 1e12, total_ms);
      for (int c = 0; c < n_copies; ++c) {
        cudaGraphExecDestroy(execs[c]);
        cudaGraphDestroy(graphs[c]);
      }
      cudaStreamDestroy(st);
      {
        auto [ms, spread] = time_ms([&] {
          CK(lk::LaunchMatmul((uint32_t)ty, wh.p, head.rows, head.cols, x.p, T, y.p, 1.0f, lk::MatmulRoute::kAuto, 0));
        }, T == 1 ? 30 : 3);
        const double gb = bytes_of(head) / 1e9;
        std::printf("  %-22s %9.4f ms (spread %.4f)  %7.0f GB/s weights = %5.1f%% of wall  %7.2f TFLOP/s\n",
                    head.name, ms, spread, gb / (ms * 1e-3), 100.0 * gb / (ms * 1e-3) / copy_gbs,
                    2.0 * T * head.rows * head.cols / (ms * 1e-3) / 1e12);
      }
      std::fflush(stdout);
    }
    for (auto& c : ws)
      for (auto* d : c) delete d;
  }
}

}  // namespace

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
