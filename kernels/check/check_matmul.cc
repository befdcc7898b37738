// kernel_check: the matmul (every type, T-invariance) and the elementwise kernels.
#include "kernels/check/check_support.h"

namespace lockstep::kernels::check {

// ---------------------------------------------------------------------------------------------
// Matmul.
void CheckMatmul(bool quick) {
  Line* acc = NewLine("matmul");
  Line* inv = NewLine("matmul-invariance");
  Line* dec = NewLine("matmul-decode-weights");
  const std::vector<q::Type> types = {q::Type::F32,  q::Type::F16,  q::Type::BF16, q::Type::Q4_0,
                                      q::Type::Q4_1, q::Type::Q5_0, q::Type::Q5_1, q::Type::Q8_0, q::Type::Q4_K, q::Type::Q5_K,
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
    dims.push_back({67, 2048});  // 16-byte aligned rows: the decode route's cp.async fast path
    if (tr.block_size == 1) dims.push_back({5, 48}), dims.push_back({3, 8});  // the odd-columns route
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
      // The matmul's own decoders vs the host decoders, bitwise (whole chunks only).
      if (cols % 32 == 0) {
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
        // Auto is one of the float routes, or the MMA route for every T (matmul.h); the float
        // routes are checked here either way (the MMA route's accuracy: check_matmul_mma.cc).
        const bool mma = lk::MatmulAutoUsesMma((uint32_t)ty);
        int64_t bad = 0;
        for (size_t i = 0; i < ha.size(); ++i) bad += !SameBits(hd[i], ht[i]) || (!mma && !SameBits(ha[i], hd[i]));
        if (mma) {
          Dev<float> ym(T * rows);
          ym.Poison();
          LAUNCH(lk::LaunchMatmul((uint32_t)ty, dw.p, rows, cols, dx.p, T, ym.p, w_scale, lk::MatmulRoute::kMma, 0));
          const auto hm = ym.Down();
          for (size_t i = 0; i < ha.size(); ++i) bad += !SameBits(ha[i], hm[i]);
        }
        // Every rows-per-lane mapping of the decode route, forced.
        for (lk::MatmulRoute rr : {lk::MatmulRoute::kDecodeRows1, lk::MatmulRoute::kDecodeRows2, lk::MatmulRoute::kDecodeRows4}) {
          Dev<float> yr(T * rows);
          yr.Poison();
          LAUNCH(lk::LaunchMatmul((uint32_t)ty, dw.p, rows, cols, dx.p, T, yr.p, w_scale, rr, 0));
          const auto hr = yr.Down();
          for (size_t i = 0; i < ha.size(); ++i) bad += !SameBits(hd[i], hr[i]);
        }
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
          for (int64_t r = 0; r < rows; ++r) b1 += !SameBits(h1[r], ha[t * rows + r]) || !SameBits(h1t[r], hd[t * rows + r]);
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
            Compare(acc, hd[t * rows + r], ref, bound, ctx);
          }
        }
      }
    }
  }
  acc->shapes = "types " + type_names + "; " + std::to_string(shapes) + " (rows,cols) shapes, rows 1..259, cols 8..2304 (8, 48: F32/F16/BF16's odd-columns route); T={" + Join(Ts) + "}; bound (cols/8+4)*u*sum|w||x| (float routes)";
  inv->shapes = "float routes decode (auto and forced 1/2/4 rows per lane)==tiled, auto==its route (float or MMA) for every (type,shape,T); row t of T-row call == T=1 call (sampled t), auto and tiled";
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

}  // namespace lockstep::kernels::check
