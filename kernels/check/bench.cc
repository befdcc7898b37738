// kernel_check --bench: copy bandwidth (the weight wall) and matmul / attention timings.
#include "kernels/check/check_support.h"

namespace lockstep::kernels::check {

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

// Llama-3-8B layer set per MMA tile configuration (all give the same bits) and the auto route,
// T in {1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 2048}; sum of single-launch medians, two weight
// copies. Columns: auto without scratch, auto with it (the backend's call: the split once per
// launch, kernels/matmul_mma.h), each configuration without scratch, then (T <= 256) each
// configuration that takes the split for the type with it ("+s").
// t1_rows (LOCKSTEP_BENCH=mma1): T = 1 only, and each matrix's median besides the sum.
void BenchMmaConfigs(bool t1_rows) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  struct M { int64_t rows, cols; };
  const std::vector<M> layer = {{4096, 4096}, {1024, 4096}, {1024, 4096}, {4096, 4096}, {14336, 4096}, {14336, 4096}, {4096, 14336}};
  constexpr size_t kCfgs = std::size(kMmaConfigs);
  // Variant v: 0 auto, 1 auto + scratch, 2..kCfgs+1 config v - 2, then config v - kCfgs - 2 + scratch.
  auto cfg_of = [&](size_t v) { return v < 2 ? lk::MmaConfig::kAutoByT : kMmaConfigs[(v - 2) % kCfgs]; };
  auto with_scratch = [&](size_t v) { return v == 1 || v >= 2 + kCfgs; };
  for (q::Type ty : {q::Type::Q4_K, q::Type::Q8_0, q::Type::Q6_K}) {
    const auto tr = Tr(ty);
    std::vector<Dev<uint8_t>*> ws[2];
    int64_t bytes = 0;
    for (int c = 0; c < 2; ++c)
      for (const auto& m : layer) {
        auto* d = new Dev<uint8_t>(m.rows * m.cols / tr.block_size * tr.type_size);
        FillQuantWeights(*d, ty);
        ws[c].push_back(d);
        if (c == 0) bytes += d->n;
      }
    std::printf("MMA configs %s (layer set %.1f MB): ms per layer set, the auto route (float or MMA, matmul.h) first; +s: with scratch\n", tr.name, bytes / 1e6);
    std::printf("%6s %9s %9s", "T", "auto", "auto+s");
    for (const char* n : kMmaConfigNames) std::printf(" %9s", n);
    for (size_t c = 0; c < kCfgs; ++c)
      if (lk::MatmulMmaScratchBytes((uint32_t)ty, 4096, 4096, 64, kMmaConfigs[c]) > 0) std::printf(" %9s", (std::string(kMmaConfigNames[c]) + "+s").c_str());
    std::printf("\n");
    const std::vector<int64_t> Ts = t1_rows ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 2048};
    for (int64_t T : Ts) {
      Dev<float> x(T * 14336), y(T * 14336);
      x.Up(RandVec(T * 14336));
      size_t scratch_bytes = 0;
      for (const auto& m : layer)
        for (size_t v = 0; v < 2 + kCfgs; ++v)
          scratch_bytes = std::max(scratch_bytes, lk::MatmulMmaScratchBytes((uint32_t)ty, m.rows, m.cols, T, cfg_of(v)));
      Dev<uint8_t> scratch(scratch_bytes);
      const int reps = T <= 64 ? 30 : 5;
      // The columns: a "+s" column only for a configuration that takes the split (by type), and
      // only up to T = 256 (-1 prints "-"). The reps are interleaved over the columns (rep r of
      // every column, then rep r + 1), so a drift of the clocks during the run reaches every
      // column alike; each column is the sum over the matrices of their medians.
      std::vector<size_t> cols;
      std::vector<double> t;
      for (size_t v = 0; v < 2 + 2 * kCfgs; ++v) {
        if (v >= 2 + kCfgs && lk::MatmulMmaScratchBytes((uint32_t)ty, 4096, 4096, 64, cfg_of(v)) == 0) continue;
        if (v >= 2 && v < 2 + kCfgs && lk::MatmulMmaConfigNeedsScratch(cfg_of(v))) {  // runs only with scratch
          cols.push_back(v);
          t.push_back(-1);
          continue;
        }
        cols.push_back(v);
        t.push_back(v >= 2 + kCfgs && T > 256 ? -1 : 0);
      }
      std::vector<std::vector<std::vector<float>>> ts(cols.size(), std::vector<std::vector<float>>(layer.size()));
      for (int r = -1; r < reps; ++r) {
        for (size_t k = 0; k < cols.size(); ++k) {
          if (t[k] < 0) continue;
          const size_t v = cols[k];
          const lk::MmaConfig cfg = cfg_of(v);
          for (size_t i = 0; i < layer.size(); ++i) {
            const size_t sb = with_scratch(v) ? lk::MatmulMmaScratchBytes((uint32_t)ty, layer[i].rows, layer[i].cols, T, cfg) : 0;
            const lk::MatmulScratch sc = sb > 0 ? lk::MatmulScratch{scratch.p, scratch.n} : lk::MatmulScratch{};
            const auto* w = ws[(r + 2) % 2][i];
            CK(cudaEventRecord(e0));
            if (v < 2) CK(lk::LaunchMatmul((uint32_t)ty, w->p, layer[i].rows, layer[i].cols, x.p, T, y.p, 1.0f, lk::MatmulRoute::kAuto, 0, sc));
            else CK(lk::LaunchMatmulMma((uint32_t)ty, w->p, layer[i].rows, layer[i].cols, x.p, T, y.p, 1.0f, cfg, 0, sc));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) ts[k][i].push_back(ms);
          }
        }
      }
      std::vector<std::vector<double>> per(layer.size(), std::vector<double>(cols.size(), -1));
      for (size_t k = 0; k < cols.size(); ++k) {
        if (t[k] < 0) continue;
        for (size_t i = 0; i < ts[k].size(); ++i) {
          auto& m = ts[k][i];
          std::sort(m.begin(), m.end());
          t[k] += m[m.size() / 2];
          per[i][k] = m[m.size() / 2];
        }
      }
      for (size_t i = 0; t1_rows && i < layer.size(); ++i) {
        std::printf("%11s", (std::to_string(layer[i].rows) + "x" + std::to_string(layer[i].cols)).c_str());
        for (double v : per[i]) {
          if (v < 0) std::printf(" %9s", "-");
          else std::printf(" %9.4f", v);
        }
        std::printf("\n");
      }
      std::printf("%6" PRId64, T);
      for (double v : t) {
        if (v < 0) std::printf(" %9s", "-");
        else std::printf(" %9.4f", v);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    for (auto& c : ws)
      for (auto* d : c) delete d;
  }
}

void Bench() {
  // LOCKSTEP_BENCH=decode: only the copy ceiling and the small-T matmuls (T <= 16), with every
  // forced rows-per-lane mapping and the tiled route per matrix.
  const char* mode_env = std::getenv("LOCKSTEP_BENCH");
  const bool decode_only = mode_env != nullptr && std::strcmp(mode_env, "decode") == 0;
  // LOCKSTEP_BENCH=attention: only the copy ceiling and the attention cases.
  const bool attention_only = mode_env != nullptr && std::strcmp(mode_env, "attention") == 0;
  // LOCKSTEP_BENCH=mma: the MMA route's tile configurations forced, beside the float route.
  // LOCKSTEP_BENCH=mma1: the same at T = 1 only, with each matrix's time.
  if (mode_env != nullptr && (std::strcmp(mode_env, "mma") == 0 || std::strcmp(mode_env, "mma1") == 0)) {
    BenchMmaConfigs(std::strcmp(mode_env, "mma1") == 0);
    return;
  }
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
  if (!decode_only) {
    const int n_head = 32, n_kv = 8, D = 128, bs = 16;
    const int64_t kv_dim = (int64_t)n_kv * D;
    // "cc": the same f16 case with mma_off (the CUDA-core grouped route, other bits), beside it.
    struct Case { const char* name; int n_seq, seq_len, q_len; q::KvFormat f; int shift = 0; bool mma_off = false; };
    const q::KvFormat f16 = q::KvFormat::kF16, f32 = q::KvFormat::kF32;
    for (const Case c : {Case{"decode depth 64", 1, 64, 1, f16}, Case{"decode depth 64 cc", 1, 64, 1, f16, 0, true},
                         Case{"decode depth 1024", 1, 1024, 1, f16}, Case{"decode depth 1024 cc", 1, 1024, 1, f16, 0, true},
                         Case{"decode depth 8192", 1, 8192, 1, f16}, Case{"decode depth 8192 cc", 1, 8192, 1, f16, 0, true},
                         Case{"decode c=64 depth 1024", 64, 1024, 1, f16}, Case{"decode c=64 depth 1024 cc", 64, 1024, 1, f16, 0, true},
                         Case{"prefill 512", 1, 512, 512, f16}, Case{"prefill 512 cc", 1, 512, 512, f16, 0, true},
                         Case{"prefill 2048", 1, 2048, 2048, f16}, Case{"prefill 2048 cc", 1, 2048, 2048, f16, 0, true},
                         Case{"decode depth 64 f32", 1, 64, 1, f32},
                         Case{"decode depth 1024 f32", 1, 1024, 1, f32},
                         Case{"depth 64 f32 generic", 1, 64, 1, f32, 4}, Case{"depth 1024 f32 generic", 1, 1024, 1, f32, 4}}) {
      const int nb = (c.seq_len + bs - 1) / bs;
      const int64_t n_slots = (int64_t)c.n_seq * nb * bs;
      const auto fmt = (uint32_t)c.f;
      // shift 4: caches 4 bytes past a 16-byte boundary, which sends f32 to the generic route.
      Dev<uint8_t> kc(n_slots * q::KvRowBytes(c.f, kv_dim) + 16), vc(kc.n);
      {
        Dev<float> src(n_slots * kv_dim);
        src.Up(RandVec(n_slots * kv_dim, -2, 2));
        std::vector<int32_t> sl(n_slots);
        std::iota(sl.begin(), sl.end(), 0);
        Dev<int32_t> dsl = Upload(sl);
        CK(lk::LaunchKvWrite(fmt, src.p, dsl.p, n_slots, kv_dim, kc.p + c.shift, 0));
        CK(lk::LaunchKvWrite(fmt, src.p, dsl.p, n_slots, kv_dim, vc.p + c.shift, 0));
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
      p.q = dq.p, p.k_cache = kc.p + c.shift, p.v_cache = vc.p + c.shift, p.k_format = fmt, p.v_format = fmt;
      p.query_start = dqs.p, p.seq_len = dl.p, p.block_table = dt.p, p.positions = dp.p, p.out = dout.p;
      p.T = T, p.n_seq = c.n_seq, p.n_head = n_head, p.n_kv_head = n_kv, p.head_dim = D;
      p.block_size = bs, p.max_blocks_per_seq = nb, p.max_seq_len = c.seq_len;
      p.scale = 1.0f / std::sqrt((float)D);
      p.mma_off = c.mma_off;
      const size_t wsb = lk::PagedAttentionWorkspaceBytes(T, n_head, D, c.seq_len);
      Dev<uint8_t> ws(wsb);
      auto [ms, spread] = time_ms([&] { CK(lk::LaunchPagedAttention(p, ws.p, wsb, 0)); }, 20);
      const double kv_gb = 2.0 * c.n_seq * (double)c.seq_len * (double)q::KvRowBytes(c.f, kv_dim) / 1e9;
      std::printf("attention %-27s %9.4f ms (spread %.4f)  KV %.1f MB -> %6.0f GB/s = %5.1f%% of wall\n", c.name, ms,
                  spread, kv_gb * 1e3, kv_gb / (ms * 1e-3), 100.0 * kv_gb / (ms * 1e-3) / copy_gbs);
    }
    std::fflush(stdout);
  }
  if (attention_only) return;
  // 3. Llama-3-8B layer set and head.
  struct M { const char* name; int64_t rows, cols; };
  const std::vector<M> layer = {{"attn_q 4096x4096", 4096, 4096}, {"attn_k 1024x4096", 1024, 4096},
                                {"attn_v 1024x4096", 1024, 4096}, {"attn_o 4096x4096", 4096, 4096},
                                {"ffn_gate 14336x4096", 14336, 4096}, {"ffn_up 14336x4096", 14336, 4096},
                                {"ffn_down 4096x14336", 4096, 14336}};
  const M head = {"output 128256x4096", 128256, 4096};
  for (q::Type ty : {q::Type::Q4_K, q::Type::Q8_0, q::Type::Q6_K}) {
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
    const std::vector<int64_t> bench_ts = decode_only ? std::vector<int64_t>{1, 2, 4, 8, 16} : std::vector<int64_t>{1, 8, 64, 2048};
    for (int64_t T : bench_ts) {
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
        }, T <= 16 ? 50 : 5);
        total_ms += ms;
        const double gb = bytes_of(m) / 1e9;
        const double tflops = 2.0 * T * m.rows * m.cols / (ms * 1e-3) / 1e12;
        std::printf("  %-22s %9.4f ms (spread %.4f)  %7.0f GB/s weights = %5.1f%% of wall  %7.2f TFLOP/s\n",
                    m.name, ms, spread, gb / (ms * 1e-3), 100.0 * gb / (ms * 1e-3) / copy_gbs, tflops);
#ifdef LOCKSTEP_MATMUL_DECODE_ROWS_ROUTES
        if (decode_only) {
          const lk::MatmulRoute forced[4] = {lk::MatmulRoute::kDecodeRows1, lk::MatmulRoute::kDecodeRows2,
                                             lk::MatmulRoute::kDecodeRows4, lk::MatmulRoute::kTiled};
          for (int fr = 0; fr < 4; ++fr) {
            auto [fms, fspread] = time_ms([&] {
              CK(lk::LaunchMatmul((uint32_t)ty, ws[copy][i]->p, m.rows, m.cols, x.p, T, y.p, 1.0f, forced[fr], 0));
              copy = (copy + 1) % n_copies;
            }, 30);
            std::printf("    %-22s %9.4f ms (spread %.4f)  %5.1f%% of wall\n",
                        fr < 3 ? (fr == 0 ? "rows/lane 1" : fr == 1 ? "rows/lane 2" : "rows/lane 4") : "tiled route", fms, fspread,
                        100.0 * gb / (fms * 1e-3) / copy_gbs);
          }
        }
#endif
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
      for (int rep = 0; rep < (T <= 16 ? 60 : 6); ++rep) {
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
      // The MMA route (kernels/matmul_mma.h) on the same weights: per matrix and summed.
      if (lk::MatmulMmaSupportsType((uint32_t)ty)) {
        double mma_ms = 0;
        std::string per;
        for (size_t i = 0; i < layer.size(); ++i) {
          auto [ms, spread] = time_ms([&] {
            CK(lk::LaunchMatmulMma((uint32_t)ty, ws[copy][i]->p, layer[i].rows, layer[i].cols, x.p, T, y.p, 1.0f, lk::MmaConfig::kAutoByT, 0));
            copy = (copy + 1) % n_copies;
          }, T <= 16 ? 50 : 5);
          mma_ms += ms;
          char b[48];
          std::snprintf(b, sizeof b, " %s %.4f", layer[i].name, ms);
          per += b;
        }
        const double lgb_m = layer_bytes / 1e9;
        int64_t flop_m = 0;
        for (const auto& m : layer) flop_m += 2 * T * m.rows * m.cols;
        std::printf("  MMA ROUTE layer set    %9.4f ms (sum of single launches)  %7.0f GB/s weights = %5.1f%% of wall  %7.2f TFLOP/s  [auto route %.4f ms]\n    per matrix:%s\n",
                    mma_ms, lgb_m / (mma_ms * 1e-3), 100.0 * lgb_m / (mma_ms * 1e-3) / copy_gbs, (double)flop_m / (mma_ms * 1e-3) / 1e12, total_ms, per.c_str());
        auto [hms, hspread] = time_ms([&] {
          CK(lk::LaunchMatmulMma((uint32_t)ty, wh.p, head.rows, head.cols, x.p, T, y.p, 1.0f, lk::MmaConfig::kAutoByT, 0));
        }, T <= 8 ? 30 : 3);
        const double hgb = bytes_of(head) / 1e9;
        std::printf("  MMA ROUTE %-12s %9.4f ms (spread %.4f)  %5.1f%% of wall\n", "head", hms, hspread, 100.0 * hgb / (hms * 1e-3) / copy_gbs);
      }
      for (int c = 0; c < n_copies; ++c) {
        cudaGraphExecDestroy(execs[c]);
        cudaGraphDestroy(graphs[c]);
      }
      cudaStreamDestroy(st);
      if (!decode_only || T == 1 || T == 8) {
        auto [ms, spread] = time_ms([&] {
          CK(lk::LaunchMatmul((uint32_t)ty, wh.p, head.rows, head.cols, x.p, T, y.p, 1.0f, lk::MatmulRoute::kAuto, 0));
        }, T <= 8 ? 30 : 3);
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

}  // namespace lockstep::kernels::check
