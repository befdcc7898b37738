// kernel_check: the MMA route of the matmul (kernels/matmul_mma.h) against the double reference,
// and its bitwise invariance over T, tile configuration and neighbours.
#include "kernels/check/check_support.h"
#include "kernels/matmul_mma.h"

namespace lockstep::kernels::check {
namespace {

// Per element, |m| of the min term of its chunk (Q4_K: dmin * m; 0 for the types without one),
// which the factored arithmetic dl * sum(q x) - ml * sum(x) carries as well as |w|.
std::vector<float> ChunkMins(q::Type ty, const std::vector<uint8_t>& wq, int64_t n) {
  std::vector<float> m(n, 0.f);
  if (ty != q::Type::Q4_K) return m;
  const auto* b = reinterpret_cast<const q::BlockQ4_K*>(wq.data());
  for (int64_t blk = 0; blk < n / 256; ++blk) {
    const float dmin = q::Fp16ToFp32(b[blk].dmin);
    for (int c = 0; c < 8; ++c) {
      int sc, mm;
      q::ScaleMinK4(b[blk].scales, c, &sc, &mm);
      for (int l = 0; l < 32; ++l) m[blk * 256 + 32 * c + l] = std::fabs(dmin * (float)mm);
    }
  }
  return m;
}

}  // namespace

void CheckMatmulMma(bool quick) {
  Line* acc = NewLine("matmul-mma");
  Line* inv = NewLine("matmul-mma-invariance");
  const std::vector<q::Type> types = {q::Type::Q4_K, q::Type::Q8_0, q::Type::Q6_K};
  const std::vector<int64_t> Ts = quick ? std::vector<int64_t>{1, 2, 9, 33}
                                        : std::vector<int64_t>{1, 2, 3, 7, 8, 9, 17, 33, 64, 100, 256, 2048};
  std::string type_names;
  int64_t shapes = 0;
  for (q::Type ty : types) {
    const auto tr = Tr(ty);
    type_names += std::string(type_names.empty() ? "" : ",") + tr.name;
    const int64_t bs = std::max<int64_t>(32, tr.block_size);
    // Rows off the 16-row tiles, column counts whose chunk count is not a multiple of the 8 K
    // segments (so segments differ in length), a long row.
    std::vector<std::pair<int64_t, int64_t>> dims = {{1, bs}, {37, bs * 3}, {259, bs == 32 ? 2080 : 2304}, {67, 4096}};
    if (bs == 32) dims.push_back({130, 800});
    for (auto [rows, cols] : dims) {
      ++shapes;
      const std::vector<float> wf = RandVec((size_t)(rows * cols));
      const std::vector<uint8_t> wq = QuantizeRows(ty, wf);
      const std::vector<float> wd = DequantizeRows(ty, wq, rows * cols);
      const std::vector<float> wm = ChunkMins(ty, wq, rows * cols);
      // Every other shape has its weights 4 bytes past a 16-byte boundary (the staged kernel
      // copies 16-byte units around each row's span).
      const size_t woff = shapes % 2 == 0 ? 4 : 0;
      Dev<uint8_t> dwbuf(wq.size() + woff);
      CK(cudaMemcpy(dwbuf.p + woff, wq.data(), wq.size(), cudaMemcpyHostToDevice));
      struct { const uint8_t* p; } dw{dwbuf.p + woff};
      for (int64_t T : Ts) {
        if (T >= 256 && rows * cols > 300000) continue;  // keeps the double reference short
        // Activations spread over magnitudes, so the per-chunk power-of-two scaling is exercised.
        std::vector<float> x = RandVec((size_t)(T * cols));
        for (auto& v : x) v *= std::ldexp(1.0f, (int)Int(-6, 6));
        Dev<float> dx = Upload(x);
        Dev<float> ya(T * rows), yc(T * rows);
        ya.Poison();
        LAUNCH(lk::LaunchMatmulMma((uint32_t)ty, dw.p, rows, cols, dx.p, T, ya.p, 1.0f, lk::MmaConfig::kAutoByT, 0));
        const auto ha = ya.Down();
        char ctx[160];
        std::snprintf(ctx, sizeof ctx, "%s rows=%" PRId64 " cols=%" PRId64 " T=%" PRId64, tr.name, rows, cols, T);
        // Every configuration, and auto, with the split once per launch (scratch, poisoned
        // first) and without it.
        int64_t bad = 0, bad_pre = 0, pre_runs = 0;
        for (int ci = -1; ci < (int)std::size(kMmaConfigs); ++ci) {
          const lk::MmaConfig cfg = ci < 0 ? lk::MmaConfig::kAutoByT : kMmaConfigs[ci];
          const size_t sb = lk::MatmulMmaScratchBytes((uint32_t)ty, rows, cols, T, cfg);
          if (ci >= 0 && lk::MatmulMmaConfigNeedsScratch(cfg)) {
            // The split-K tiles keep their segment sums in scratch: without it they are refused.
            inv->Bit(lk::LaunchMatmulMma((uint32_t)ty, dw.p, rows, cols, dx.p, T, yc.p, 1.0f, cfg, 0) == cudaErrorInvalidValue,
                     std::string(ctx) + ": " + kMmaConfigNames[ci] + " without scratch was not refused");
            inv->Bit(sb > 0, std::string(ctx) + ": " + kMmaConfigNames[ci] + " asks for no scratch");
          } else if (ci >= 0) {
            yc.Poison();
            LAUNCH(lk::LaunchMatmulMma((uint32_t)ty, dw.p, rows, cols, dx.p, T, yc.p, 1.0f, cfg, 0));
            const auto hc = yc.Down();
            for (size_t i = 0; i < ha.size(); ++i) bad += !SameBits(ha[i], hc[i]);
          }
          if (sb == 0) continue;
          ++pre_runs;
          Dev<uint8_t> scratch(sb);
          CK(cudaMemset(scratch.p, 0xFF, sb));  // NaN bit patterns where a fragment is not written
          yc.Poison();
          LAUNCH(lk::LaunchMatmulMma((uint32_t)ty, dw.p, rows, cols, dx.p, T, yc.p, 1.0f, cfg, 0, {scratch.p, sb}));
          const auto hc = yc.Down();
          for (size_t i = 0; i < ha.size(); ++i) bad_pre += !SameBits(ha[i], hc[i]);
          // Scratch one byte short is refused, not used in part.
          inv->Bit(lk::LaunchMatmulMma((uint32_t)ty, dw.p, rows, cols, dx.p, T, yc.p, 1.0f, cfg, 0, {scratch.p, sb - 1}) ==
                       cudaErrorInvalidValue,
                   std::string(ctx) + ": scratch one byte short was not refused");
        }
        inv->Bit(bad == 0, std::string(ctx) + ": a tile configuration changed bits");
        inv->Bit(bad_pre == 0, std::string(ctx) + ": the split once per launch or the split-K tiles changed bits");
        // 32x8, 64x8, 64x16, 32x16 and 64x32 take the split for every type (matmul_mma.cu
        // UsesPreSplit), and the split-K tiles always take scratch.
        inv->Bit(pre_runs >= 6, std::string(ctx) + ": fewer than six configurations took scratch");
        std::vector<int64_t> ts;
        if (T <= 9) {
          for (int64_t t = 0; t < T; ++t) ts.push_back(t);
        } else {
          ts = {0, T - 1};
          for (int k = 0; k < 6; ++k) ts.push_back(Int(0, T - 1));
        }
        for (int64_t t : ts) {
          Dev<float> y1(rows);
          y1.Poison();
          LAUNCH(lk::LaunchMatmulMma((uint32_t)ty, dw.p, rows, cols, dx.p + t * cols, 1, y1.p, 1.0f, lk::MmaConfig::kAutoByT, 0));
          const auto h1 = y1.Down();
          int64_t b1 = 0;
          for (int64_t r = 0; r < rows; ++r) b1 += !SameBits(h1[r], ha[t * rows + r]);
          inv->Bit(b1 == 0, std::string(ctx) + ": row t of the T-row call != the T=1 call");
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < cols; ++k) {
              const double xv = x[t * cols + k];
              ref += (double)wd[r * cols + k] * xv;
              mag += (std::fabs((double)wd[r * cols + k]) + 2.0 * wm[r * cols + k]) * std::fabs(xv);
            }
            // Split of x into two binary16 (4u), the MMA's f32 sums over a chunk (<= 64u, twice
            // the 32-term sequential bound), the scale fmas and the chunk chain (cols / 64), the
            // tree; |dl q| <= |w| + |ml| gives the magnitude (matmul_mma.h).
            const double bound = ((double)cols / 64 + 80) * kU * mag + kU * std::fabs(ref) + 1e-30;
            Compare(acc, ha[t * rows + r], ref, bound, ctx);
          }
        }
      }
    }
  }
  // The group form: each item's rows == its own auto launch, bitwise, with and without scratch.
  int64_t group_checks = 0;
  for (q::Type ty : types) {
    const auto tr = Tr(ty);
    const int64_t cols = tr.block_size == 32 ? 2080 : 2304;
    const int64_t rows[3] = {259, 37, 16};
    std::vector<Dev<uint8_t>*> dws;
    for (int64_t r : rows) {
      const std::vector<uint8_t> wq = QuantizeRows(ty, RandVec((size_t)(r * cols)));
      dws.push_back(new Dev<uint8_t>(wq.size()));
      CK(cudaMemcpy(dws.back()->p, wq.data(), wq.size(), cudaMemcpyHostToDevice));
    }
    for (int64_t T : quick ? std::vector<int64_t>{1, 9} : std::vector<int64_t>{1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64}) {
      Dev<float> dx = Upload(RandVec((size_t)(T * cols)));
      for (int n = 1; n <= lk::kMatmulGroupMax; ++n) {
        std::vector<Dev<float>*> ys;
        lk::MatmulGroupItem items[lk::kMatmulGroupMax];
        for (int i = 0; i < n; ++i) {
          ys.push_back(new Dev<float>(T * rows[i]));
          items[i] = {dws[i]->p, rows[i], ys.back()->p};
        }
        const size_t sb = lk::MatmulMmaGroupScratchBytes((uint32_t)ty, items, n, cols, T);
        Dev<uint8_t> scratch(std::max<size_t>(sb, 16));
        for (int with = 0; with < 2; ++with) {
          for (auto* y : ys) y->Poison();
          CK(cudaMemset(scratch.p, 0xFF, scratch.n));
          const lk::MatmulScratch sc = with && sb > 0 ? lk::MatmulScratch{scratch.p, sb} : lk::MatmulScratch{};
          LAUNCH(lk::LaunchMatmulMmaGroup((uint32_t)ty, items, n, cols, dx.p, T, 0, sc));
          int64_t bad = 0;
          for (int i = 0; i < n; ++i) {
            Dev<float> y1(T * rows[i]);
            y1.Poison();
            LAUNCH(lk::LaunchMatmulMma((uint32_t)ty, dws[i]->p, rows[i], cols, dx.p, T, y1.p, 1.0f, lk::MmaConfig::kAutoByT, 0));
            const auto a1 = y1.Down(), ag = ys[i]->Down();
            for (size_t k = 0; k < a1.size(); ++k) bad += !SameBits(a1[k], ag[k]);
          }
          char ctx[160];
          std::snprintf(ctx, sizeof ctx, "%s group of %d, cols=%" PRId64 " T=%" PRId64 "%s", tr.name, n, cols, T, with ? " with scratch" : "");
          inv->Bit(bad == 0, std::string(ctx) + ": an item's rows != its own launch");
          ++group_checks;
        }
        for (auto* y : ys) delete y;
      }
    }
    lk::MatmulGroupItem none[1] = {{dws[0]->p, rows[0], nullptr}};
    inv->Bit(lk::LaunchMatmulMmaGroup((uint32_t)ty, none, 1, cols, nullptr, 1, 0) == cudaErrorInvalidValue, "group: null x not refused");
    inv->Bit(lk::LaunchMatmulMmaGroup((uint32_t)ty, none, 0, cols, nullptr, 1, 0) == cudaErrorInvalidValue, "group: n = 0 not refused");
    for (auto* d : dws) delete d;
  }
  acc->shapes = "types " + type_names + "; " + std::to_string(shapes) + " (rows,cols) shapes, rows 1..259, cols 32..4096, weights 16-byte aligned or 4 bytes off; T={" + Join(Ts) +
                "}; x scaled by 2^-6..2^6; bound (cols/64+80)*u*sum(|w|+2|ml|)|x|";
  inv->shapes = "K-split configs 16x8/32x8/64x8/64x16/32x16/64x32/32x32, the tiled 128x64 and the staged 16x8 == auto for every (type,shape,T), "
                "each config that takes the split once per launch (by type), the split-K tiles and auto also with scratch (poisoned; one byte short refused; "
                "split-K without scratch refused); row t of T-row call == T=1 call; the group form (1-3 matrices of rows 259/37/16, T 1..64, "
                "with and without scratch) == each matrix's own launch (" + std::to_string(group_checks) + " checks)";
}

}  // namespace lockstep::kernels::check
