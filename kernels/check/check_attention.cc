// kernel_check: KV write in every format and paged attention (alone == batched).
#include "kernels/check/check_support.h"

namespace lockstep::kernels::check {

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
        // The bytes of one cache against the host quantizer; slots not listed stay poisoned.
        auto verify = [&](q::KvFormat cf, const std::vector<float>& x, const std::vector<uint8_t>& h,
                          const std::string& what) {
          const int64_t rb = q::KvRowBytes(cf, kv_dim);
          std::vector<bool> written(n_slots, false);
          for (int64_t t = 0; t < T; ++t) {
            if (slots[t] < 0) continue;
            written[slots[t]] = true;
            const auto want = HostKvRow(cf, &x[t * kv_dim], kv_dim);
            l->Bit(std::memcmp(want.data(), &h[slots[t] * rb], rb) == 0,
                   what + q::KvFormatName(cf) + " bytes differ from host");
          }
          bool untouched = true;
          for (int64_t s = 0; s < n_slots; ++s) {
            if (written[s]) continue;
            for (int64_t b = 0; b < rb; ++b) untouched &= h[s * rb + b] == 0xFF;
          }
          l->Bit(untouched, what + q::KvFormatName(cf) + " wrote outside its slots");
        };
        Dev<float> ds = Upload(src);
        Dev<int32_t> dsl = Upload(slots);
        Dev<uint8_t> cache(n_slots * q::KvRowBytes(fmt, kv_dim));
        cache.Poison();
        LAUNCH(lk::LaunchKvWrite((uint32_t)f, ds.p, dsl.p, T, kv_dim, cache.p, 0));
        verify(fmt, src, cache.Down(), "kv_write ");
        // LaunchKvWritePair: V in the same format (one launch) and in another format group's
        // format (f + 3: per element against per block, two launches), its own source rows.
        for (int vi : {f, (f + 3) % q::kKvFormatCount}) {
          const auto vfmt = (q::KvFormat)vi;
          std::vector<float> vsrc = RandVec(T * kv_dim, -4, 4);
          Dev<float> dv = Upload(vsrc);
          Dev<uint8_t> kc(n_slots * q::KvRowBytes(fmt, kv_dim)), vc(n_slots * q::KvRowBytes(vfmt, kv_dim));
          kc.Poison();
          vc.Poison();
          LAUNCH(lk::LaunchKvWritePair((uint32_t)f, ds.p, kc.p, (uint32_t)vi, dv.p, vc.p, dsl.p, T, kv_dim, 0));
          verify(fmt, src, kc.Down(), "kv_write pair K ");
          verify(vfmt, vsrc, vc.Down(), "kv_write pair V ");
        }
      }
    }
  }
  l->shapes = "all 7 formats, kv_dim {32,96,1024}, T {1,5,33}, shuffled slots + a -1 row; bytes == host Quantize/Fp32ToE4m3; other slots untouched; LaunchKvWritePair with V in the same format and in format f+3";
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

// shift > 0 places both caches `shift` bytes past a 16-byte boundary (the f16 and f32 routes need
// 16-byte-aligned caches, so this forces the generic route on the same values).
// rows_per_cta / heads_per_cta > 0 force the grouped f16 route's work split.
// mma_off sends the MMA route's shapes to the CUDA-core routes.
lk::PagedAttentionParams AttentionParams(const AttnBatch& b) {
  lk::PagedAttentionParams p;
  p.k_format = (uint32_t)b.kf, p.v_format = (uint32_t)b.vf;
  p.T = b.qstart.back(), p.n_seq = (int)b.seq_len.size(), p.n_head = b.n_head, p.n_kv_head = b.n_kv_head;
  p.head_dim = b.head_dim, p.block_size = b.block_size, p.max_blocks_per_seq = b.max_blocks;
  p.max_seq_len = *std::max_element(b.seq_len.begin(), b.seq_len.end());
  p.window = b.window, p.scale = b.scale, p.softcap = b.softcap;
  return p;
}

std::vector<float> RunAttention(const AttnBatch& b, int shift = 0, int rows_per_cta = 0, int heads_per_cta = 0,
                                bool mma_off = false) {
  const int n_seq = (int)b.seq_len.size();
  const int64_t T = b.qstart[n_seq];
  Dev<float> dq = Upload(b.qv), dout(T * b.n_head * b.head_dim);
  Dev<uint8_t> dk(b.kc.size() + 16), dv(b.vc.size() + 16);
  CK(cudaMemcpy(dk.p + shift, b.kc.data(), b.kc.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv.p + shift, b.vc.data(), b.vc.size(), cudaMemcpyHostToDevice));
  Dev<int32_t> dqs = Upload(b.qstart), dsl = Upload(b.seq_len), dbt = Upload(b.table), dpos = Upload(b.pos);
  lk::PagedAttentionParams p = AttentionParams(b);
  p.q = dq.p, p.k_cache = dk.p + shift, p.v_cache = dv.p + shift;
  p.query_start = dqs.p, p.seq_len = dsl.p, p.block_table = dbt.p, p.positions = dpos.p;
  p.out = dout.p;
  p.group_rows_per_cta = rows_per_cta, p.group_heads_per_cta = heads_per_cta;
  p.mma_off = mma_off;
  const size_t wsb = lk::PagedAttentionWorkspaceBytes(T, b.n_head, b.head_dim, p.max_seq_len);
  Dev<uint8_t> ws(wsb);
  dout.Poison();
  LAUNCH(lk::LaunchPagedAttention(p, ws.p, wsb, 0));
  return dout.Down();
}

void CheckAttention(bool quick) {
  Line* acc = NewLine("paged_attention");
  Line* inv = NewLine("attention-invariance");
  Line* acc_mma = NewLine("paged_attention-mma");
  const std::vector<int> lens = {1, 2, 255, 256, 257, 511, 513, 700, 1030};
  int configs = 0, mma_configs = 0;
  const int n_cfg = quick ? 8 : 28;
  // Then f16 K and V only, more GQA groups: the grouped f16 route (kernels/attention.cu) runs
  // head chunks of 4 (group sizes 1, 4, 6, 8) and rows per CTA up to 16, each compared with the
  // generic route bitwise (invariance 0) and with the double reference.
  const int n_f16 = quick ? 6 : 24;
  for (int cfg = 0; cfg < n_cfg + n_f16; ++cfg) {
    ++configs;
    AttnBatch b;
    const bool f16_cfg = cfg >= n_cfg;
    const int heads[6][2] = {{4, 4}, {8, 2}, {6, 1}, {32, 8}, {16, 2}, {8, 1}};
    const int hsel = f16_cfg ? cfg % 6 : cfg % 3;
    b.n_head = heads[hsel][0], b.n_kv_head = heads[hsel][1];
    b.head_dim = (cfg % 4 == 0) ? 128 : (cfg % 4 == 1 ? 64 : (cfg % 4 == 2 ? 96 : 256));
    b.kf = f16_cfg ? q::KvFormat::kF16 : (q::KvFormat)(cfg % q::kKvFormatCount);
    b.vf = f16_cfg ? q::KvFormat::kF16 : (q::KvFormat)((cfg / 2 + cfg) % q::kKvFormatCount);
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
    // The MMA route's shapes (f16 K and V, head_dim 64 or 128) also run on the CUDA-core routes
    // (mma_off): both are held to the reference, each route to its own invariances below.
    alignas(16) static const uint8_t kAligned[16] = {};  // RunAttention's caches are aligned too
    lk::PagedAttentionParams route_p = AttentionParams(b);
    route_p.k_cache = route_p.v_cache = kAligned;
    const bool mma = lk::PagedAttentionUsesMma(route_p);
    const std::vector<float> out_off = mma ? RunAttention(b, 0, 0, 0, true) : std::vector<float>{};
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
          double mx = -INFINITY, ds_max = 0, ds_mma = 0, vmax = 0;
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
            // CUDA-core routes: the 8 class chains and their tree. MMA route: D / 8 MMAs per
            // score, each allowed one ulp (2u) of the chain's magnitude (the hardware's
            // accumulation is not specified as round-to-nearest), and 4u for q's h + l split.
            ds_max = std::max(ds_max, ((double)b.head_dim / 8 + 8) * kU * mag * b.scale + 8 * kU * std::fabs(sv));
            ds_mma = std::max(ds_mma, ((double)b.head_dim / 4 + 8) * kU * mag * b.scale + 8 * kU * std::fabs(sv));
            for (int e = 0; e < b.head_dim; ++e) vmax = std::max(vmax, (double)std::fabs(vd[(size_t)j * kv_dim + kvh * b.head_dim + e]));
          }
          double l = 0;
          for (int j = lo; j <= hi; ++j) l += std::exp(sc[j] - mx);
          const int n_keys = hi - lo + 1;
          // Score errors ds move each weight by a factor exp(+-2 ds); the fp32 sums add
          // (keys per piece + pieces + 8) u relative error, times max|v|.
          // (The MMA route's output chain: keys / 8 MMAs of the same allowance, within it.)
          const double sums = (std::min(n_keys, 256) + n_keys / 256 + 16) * 2 * kU;
          const double bound = vmax * (4 * (mma ? ds_mma : ds_max) + sums) + 1e-30;
          const double bound_off = vmax * (4 * ds_max + sums) + 1e-30;
          for (int e = 0; e < b.head_dim; ++e) {
            double o = 0;
            for (int j = lo; j <= hi; ++j) o += std::exp(sc[j] - mx) * vd[(size_t)j * kv_dim + kvh * b.head_dim + e];
            Compare(mma ? acc_mma : acc, out[(t * b.n_head + h) * b.head_dim + e], o / l, bound, ctx);
            if (mma) Compare(acc, out_off[(t * b.n_head + h) * b.head_dim + e], o / l, bound_off, ctx);
          }
        }
      }
    }
    // Invariance 0: the f16 route (16-byte K loads) == the generic route on the same cache (for
    // the MMA route's shapes, its CUDA-core counterpart: mma_off).
    if (b.kf == q::KvFormat::kF16 && b.vf == q::KvFormat::kF16) {
      const std::vector<float>& cuda_core = mma ? out_off : out;
      const auto og = RunAttention(b, 2);
      bool same = true;
      for (size_t i = 0; i < og.size(); ++i) same &= SameBits(og[i], cuda_core[i]);
      inv->Bit(same, std::string(ctx) + ": f16 route != generic route (cache 2 bytes off)");
      // Invariance 0c: the grouped route's forced work splits (rows and query heads per CTA,
      // head chunks of 4 or fewer) == its own choice.
      if (b.head_dim <= 128) {
        const int G = b.n_head / b.n_kv_head;
        const int forced[4][2] = {{1, 1}, {3, 2}, {16, 4}, {7, G}};
        for (const auto& f : forced) {
          const auto of = RunAttention(b, 0, f[0], f[1], mma);
          bool same_f = true;
          for (size_t i = 0; i < of.size(); ++i) same_f &= SameBits(of[i], cuda_core[i]);
          inv->Bit(same_f, std::string(ctx) + ": grouped route with " + std::to_string(f[0]) + " rows x " +
                               std::to_string(f[1]) + " heads per CTA != its own split");
        }
      }
      // Invariance 0d: the MMA route's forced rows per CTA (40 rows of 4+ heads: warps take
      // several m-tiles) == its own choice.
      if (mma) {
        for (const int rows : {1, 3, 16, 40, 7}) {
          const auto of = RunAttention(b, 0, rows, 0);
          bool same_f = true;
          for (size_t i = 0; i < of.size(); ++i) same_f &= SameBits(of[i], out[i]);
          inv->Bit(same_f, std::string(ctx) + ": MMA route with " + std::to_string(rows) + " rows per CTA != its own choice");
        }
        ++mma_configs;
      }
    }
    // Invariance 0b: the f32 route (format fixed at compile time) == the generic route.
    if (b.kf == q::KvFormat::kF32 && b.vf == q::KvFormat::kF32) {
      const auto og = RunAttention(b, 4);
      bool same = true;
      for (size_t i = 0; i < og.size(); ++i) same &= SameBits(og[i], out[i]);
      inv->Bit(same, std::string(ctx) + ": f32 route != generic route (cache 4 bytes off)");
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
  acc_mma->shapes = std::to_string(mma_configs) + " of the batches above with f16 K and V and head_dim 64 or 128 (the MMA route); bound as paged_attention's with (D/4 + 8) u for the score's D/8 MMAs and q's split";
  acc->shapes = std::to_string(configs) + " (" + std::to_string(mma_configs) + " on the MMA route, also run with mma_off) ragged batches of 1-5 seqs, seq_len {1,2,255,256,257,511,513,700,1030}, decode+prefill rows, GQA 4/4 8/2 6/1 (f16 also 32/8 16/2 8/1), D {64,96,128,256}, all 7 KV formats for K and V, window 300, softcap 20, block 16/32, fragmented tables; bound from score error and fp32 sums";
  inv->shapes = "MMA route: forced rows per CTA == auto; f16 route (grouped, forced work splits too; mma_off on the MMA shapes) and f32 route == generic route; seq alone in another pool layout == in batch; prefill rows == per-row decode steps (bitwise)";
}

}  // namespace lockstep::kernels::check
