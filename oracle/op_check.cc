#include "oracle/op_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <array>
#include <deque>
#include <map>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/core/status.h"
#include "engine/core/tolerances.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "engine/sampling/processors.h"
#include "engine/sampling/sampling_params.h"
#include "oracle/op_check_internal.h"

namespace lockstep::oracle {
namespace {

using backend::Backend;
using backend::StepMeta;
using backend::Tensor;
using backend::Weight;
using quant::KvFormat;
using quant::Type;
using namespace op_check_internal;  // Line, Pair, RowsStep, CompareOut

absl::Status CheckEmbed(Pair& pair, std::mt19937_64& rng, Line& line) {
  for (Type type : quant::CodecTypes()) {
    const int64_t block = quant::Traits(type).block_size;
    for (int64_t cols : {int64_t{32}, int64_t{256}, int64_t{576}, int64_t{2304}}) {
      if (cols % block != 0) continue;
      const int64_t rows = 37, T = Pick(rng, std::vector<int64_t>{1, 7, 33});
      std::vector<float> decoded;
      ASSIGN_OR_RETURN(auto w, pair.Bind(type, rows, cols, rng, -2.0f, 2.0f, &decoded));
      std::vector<int32_t> tokens(T);
      for (auto& t : tokens) t = std::uniform_int_distribution<int32_t>(0, rows - 1)(rng);
      RETURN_IF_ERROR(pair.Begin(RowsStep(Iota(T), tokens)));
      ASSIGN_OR_RETURN(auto out, pair.Poisoned(T, cols));
      RETURN_IF_ERROR(pair.cand().Embed(w.first, out.t[0]));
      RETURN_IF_ERROR(pair.ref().Embed(w.second, out.t[1]));
      line.Case();
      line.Cover("types", quant::Traits(type).name);
      line.Cover("cols", cols);
      line.Cover("T", T);
      RETURN_IF_ERROR(CompareOut(pair, out, line, absl::StrFormat("%s cols %d", quant::Traits(type).name, cols),
                                 [](int64_t, float) { return tol::kGetRowsAtol; }));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMatMul(Pair& pair, std::mt19937_64& rng, Line& line) {
  const std::vector<int64_t> rows_set = {1, 3, 17, 64, 259}, cols_set = {32, 96, 256, 544, 2304},
                             t_set = {1, 2, 3, 5, 8, 17, 64, 130};
  for (Type type : MatmulTypes()) {
    const int64_t block = quant::Traits(type).block_size;
    std::vector<std::array<int64_t, 3>> shapes = {{1024, 4096, 1}};
    while (shapes.size() < 7) {
      const int64_t cols = Pick(rng, cols_set);
      if (cols % block == 0) shapes.push_back({Pick(rng, rows_set), cols, Pick(rng, t_set)});
    }
    for (auto [rows, cols, T] : shapes) {
      std::vector<float> wd;
      ASSIGN_OR_RETURN(auto w, pair.Bind(type, rows, cols, rng, -1.0f, 1.0f, &wd));
      std::vector<float> x = Pair::Uniform(rng, T * cols, -1.0f, 1.0f);
      ASSIGN_OR_RETURN(auto xb, pair.Upload(x, T, cols));
      ASSIGN_OR_RETURN(auto y, pair.Poisoned(T, rows));
      RETURN_IF_ERROR(pair.cand().MatMul(w.first, xb.t[0], y.t[0]));
      RETURN_IF_ERROR(pair.ref().MatMul(w.second, xb.t[1], y.t[1]));
      line.Case();
      line.Cover("types", quant::Traits(type).name);
      line.Cover("rows", rows);
      line.Cover("cols", cols);
      line.Cover("T", T);
      RETURN_IF_ERROR(CompareOut(
          pair, y, line, absl::StrFormat("%s [%d, %d] T %d", quant::Traits(type).name, rows, cols, T),
          [&](int64_t i, float) {
            const int64_t t = i / rows, r = i % rows;
            double s = 0;
            for (int64_t c = 0; c < cols; ++c) s += std::fabs(double{wd[r * cols + c]} * x[t * cols + c]);
            return tol::MatMulRtol(cols) * s + tol::kAtol;
          }));
    }
  }
  return absl::OkStatus();
}

// MatMulGroup: every output of a group (mixed types: a run of one type shares a launch on a
// device backend) has the candidate's own MatMul bits for that weight, and the ref's values within
// the MatMul bound.
absl::Status CheckMatMulGroup(Pair& pair, std::mt19937_64& rng, Line& line) {
  const std::vector<std::vector<Type>> groups = {{Type::Q4_K, Type::Q4_K, Type::Q6_K}, {Type::Q8_0, Type::Q8_0, Type::Q8_0},
                                                 {Type::Q6_K, Type::Q6_K}, {Type::Q4_K, Type::F16, Type::Q4_K}, {Type::Q4_0}};
  const int64_t cols = 2304, rows[3] = {259, 37, 16};
  for (const auto& types : groups) {
    for (int64_t T : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{9}, int64_t{33}}) {
      const size_t n = types.size();
      std::vector<std::pair<Weight, Weight>> w(n);
      std::vector<std::vector<float>> wd(n);
      for (size_t i = 0; i < n; ++i) {
        ASSIGN_OR_RETURN(w[i], pair.Bind(types[i], rows[i], cols, rng, -1.0f, 1.0f, &wd[i]));
      }
      std::vector<float> x = Pair::Uniform(rng, T * cols, -1.0f, 1.0f);
      ASSIGN_OR_RETURN(auto xb, pair.Upload(x, T, cols));
      std::vector<Pair::Buf> yg(n), ys(n);
      const Weight* wc[3];
      const Weight* wr[3];
      Tensor yc[3], yr[3];
      for (size_t i = 0; i < n; ++i) {
        ASSIGN_OR_RETURN(yg[i], pair.Poisoned(T, rows[i]));
        ASSIGN_OR_RETURN(ys[i], pair.Poisoned(T, rows[i]));
        wc[i] = &w[i].first, wr[i] = &w[i].second, yc[i] = yg[i].t[0], yr[i] = yg[i].t[1];
      }
      RETURN_IF_ERROR(pair.cand().MatMulGroup(std::span(wc, n), xb.t[0], std::span(yc, n)));
      RETURN_IF_ERROR(pair.ref().MatMulGroup(std::span(wr, n), xb.t[1], std::span(yr, n)));
      std::string names;
      for (size_t i = 0; i < n; ++i) {
        RETURN_IF_ERROR(pair.cand().MatMul(w[i].first, xb.t[0], ys[i].t[0]));
        names += std::string(i ? "," : "") + quant::Traits(types[i]).name;
        line.Cover("types", quant::Traits(types[i]).name);
      }
      line.Case();
      line.Cover("T", T);
      line.Cover("group size", static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        const std::string where = absl::StrFormat("group {%s} item %d [%d, %d] T %d", names, i, rows[i], cols, T);
        ASSIGN_OR_RETURN(auto g, pair.GetBytes(0, yg[i].t[0].data, T * rows[i] * 4));
        ASSIGN_OR_RETURN(auto alone, pair.GetBytes(0, ys[i].t[0].data, T * rows[i] * 4));
        line.Bytes(g, alone, where + " (group vs its own MatMul)");
        ASSIGN_OR_RETURN(auto c, pair.Get(0, yg[i].t[0]));
        ASSIGN_OR_RETURN(auto r, pair.Get(1, yg[i].t[1]));
        for (int64_t e = 0; e < T * rows[i]; ++e) {
          const int64_t t = e / rows[i], rr = e % rows[i];
          double mag = 0;
          for (int64_t k = 0; k < cols; ++k) mag += std::fabs(double{wd[i][rr * cols + k]} * x[t * cols + k]);
          line.Element(c[e], r[e], tol::MatMulRtol(cols) * mag + tol::kAtol, where);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRowOps(Pair& pair, std::mt19937_64& rng, std::vector<Line>& lines) {
  Line& norm = lines[0];
  Line& rope = lines[1];
  Line& glu = lines[2];
  Line& elem = lines[3];
  Line& gather = lines[4];
  // RmsNorm, with and without a weight.
  for (int64_t d : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{576}, int64_t{4096}, int64_t{5003}}) {
    for (bool with_w : {false, true}) {
      const int64_t T = Pick(rng, std::vector<int64_t>{1, 3, 17});
      ASSIGN_OR_RETURN(auto x, pair.Upload(Pair::Uniform(rng, T * d, -3.0f, 3.0f), T, d));
      ASSIGN_OR_RETURN(auto y, pair.Poisoned(T, d));
      std::vector<float> wd;
      std::pair<Weight, Weight> w;
      if (with_w) {
        ASSIGN_OR_RETURN(w, pair.Bind(Type::F32, 1, d, rng, 0.5f, 1.5f, &wd));
      }
      RETURN_IF_ERROR(pair.cand().RmsNorm(x.t[0], with_w ? &w.first : nullptr, 1e-6f, y.t[0]));
      RETURN_IF_ERROR(pair.ref().RmsNorm(x.t[1], with_w ? &w.second : nullptr, 1e-6f, y.t[1]));
      norm.Case();
      norm.Cover("d", d);
      norm.Cover("T", T);
      norm.Cover("weight", with_w ? "yes" : "no");
      RETURN_IF_ERROR(CompareOut(pair, y, norm, absl::StrFormat("d %d", d), [&](int64_t, float r) {
        return tol::RmsNormRtol(d) * std::fabs(r) + tol::kAtol;
      }));
    }
  }
  // Rope, both modes, partial rotation, large positions.
  for (auto mode : {backend::RopeMode::kNormal, backend::RopeMode::kNeox}) {
    for (auto [hd, n_rot] : {std::pair<int64_t, int64_t>{64, 64}, {128, 128}, {80, 32}, {256, 256}}) {
      const int64_t T = Pick(rng, std::vector<int64_t>{1, 5, 17}), H = Pick(rng, std::vector<int64_t>{1, 3, 8});
      std::vector<int32_t> pos(T);
      for (auto& p : pos) p = std::uniform_int_distribution<int32_t>(0, 1 << 17)(rng);
      RETURN_IF_ERROR(pair.Begin(RowsStep(pos)));
      std::vector<float> x = Pair::Uniform(rng, T * H * hd, -2.0f, 2.0f);
      ASSIGN_OR_RETURN(auto xb, pair.Upload(x, T, H * hd));
      // With frequency factors (RopeFreqFactors, gemma4's proportional RoPE) in every neox case
      // and the normal-mode 256-dim one: factors in [1, 8], and 1e30 on the last pair
      // (llama.cpp's "leave unrotated").
      const bool with_ff = mode == backend::RopeMode::kNeox || hd == 256;
      if (with_ff) {
        std::vector<float> ffv = Pair::Uniform(rng, n_rot / 2, 1.0f, 8.0f), ffd;
        ffv.back() = 1e30f;
        ASSIGN_OR_RETURN(auto ff, pair.BindValues(Type::F32, 1, n_rot / 2, ffv, &ffd));
        RETURN_IF_ERROR(pair.cand().RopeFreqFactors(xb.t[0], H, hd, n_rot, 10000.0f, mode, ff.first));
        RETURN_IF_ERROR(pair.ref().RopeFreqFactors(xb.t[1], H, hd, n_rot, 10000.0f, mode, ff.second));
      } else {
        RETURN_IF_ERROR(pair.cand().Rope(xb.t[0], H, hd, n_rot, 10000.0f, mode));
        RETURN_IF_ERROR(pair.ref().Rope(xb.t[1], H, hd, n_rot, 10000.0f, mode));
      }
      rope.Case();
      rope.Cover("mode", mode == backend::RopeMode::kNormal ? "normal" : "neox");
      rope.Cover("freq_factors", with_ff ? "yes" : "no");
      rope.Cover("head_dim/n_rot", absl::StrFormat("%d/%d", hd, n_rot));
      rope.Cover("T", T);
      const int64_t half = n_rot / 2;
      RETURN_IF_ERROR(CompareOut(pair, xb, rope, absl::StrFormat("head_dim %d", hd), [&](int64_t i, float) {
        const int64_t e = i % hd, base = i - e;
        if (e >= n_rot) return 0.0;  // not rotated: copied
        int64_t a, b;
        if (mode == backend::RopeMode::kNormal) {
          a = e & ~int64_t{1};
          b = a + 1;
        } else {
          a = e % half;
          b = a + half;
        }
        return tol::kRopeRtol * (std::fabs(x[base + a]) + std::fabs(x[base + b])) + tol::kAtol;
      }));
    }
  }
  // Glu.
  for (auto act : {backend::Activation::kSilu, backend::Activation::kGeluTanh}) {
    for (int64_t d : {int64_t{1}, int64_t{333}, int64_t{14336}}) {
      const int64_t T = Pick(rng, std::vector<int64_t>{1, 3, 17});
      std::vector<float> g = Pair::Uniform(rng, T * d, -8.0f, 8.0f), u = Pair::Uniform(rng, T * d, -2.0f, 2.0f);
      ASSIGN_OR_RETURN(auto gb, pair.Upload(g, T, d));
      ASSIGN_OR_RETURN(auto ub, pair.Upload(u, T, d));
      ASSIGN_OR_RETURN(auto o, pair.Poisoned(T, d));
      RETURN_IF_ERROR(pair.cand().Glu(gb.t[0], ub.t[0], act, o.t[0]));
      RETURN_IF_ERROR(pair.ref().Glu(gb.t[1], ub.t[1], act, o.t[1]));
      glu.Case();
      glu.Cover("act", act == backend::Activation::kSilu ? "silu" : "gelu_tanh");
      glu.Cover("d", d);
      RETURN_IF_ERROR(CompareOut(pair, o, glu, "glu", [&](int64_t i, float) {
        return tol::kGluRtol * std::fabs(double{g[i]} * u[i]) + tol::kAtol;
      }));
    }
  }
  // Add, Scale, Softcap.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}}) {
    std::vector<float> a = Pair::Uniform(rng, n, -100.0f, 100.0f), b = Pair::Uniform(rng, n, -100.0f, 100.0f);
    ASSIGN_OR_RETURN(auto ab, pair.Upload(a, 1, n));
    ASSIGN_OR_RETURN(auto bb, pair.Upload(b, 1, n));
    ASSIGN_OR_RETURN(auto o, pair.Poisoned(1, n));
    RETURN_IF_ERROR(pair.cand().Add(ab.t[0], bb.t[0], o.t[0]));
    RETURN_IF_ERROR(pair.ref().Add(ab.t[1], bb.t[1], o.t[1]));
    auto one_ulp = [](int64_t, float r) { return 2 * tol::kU * std::fabs(r) + tol::kAtol; };
    RETURN_IF_ERROR(CompareOut(pair, o, elem, "add", one_ulp));
    ASSIGN_OR_RETURN(auto s, pair.Poisoned(1, n));
    RETURN_IF_ERROR(pair.cand().Scale(ab.t[0], 0.37f, s.t[0]));
    RETURN_IF_ERROR(pair.ref().Scale(ab.t[1], 0.37f, s.t[1]));
    RETURN_IF_ERROR(CompareOut(pair, s, elem, "scale", one_ulp));
    RETURN_IF_ERROR(pair.cand().Softcap(ab.t[0], 30.0f));
    RETURN_IF_ERROR(pair.ref().Softcap(ab.t[1], 30.0f));
    RETURN_IF_ERROR(CompareOut(pair, ab, elem, "softcap", [](int64_t, float r) {
      return tol::kSoftcapRtol * std::fabs(r) + tol::kAtol;
    }));
    elem.Case();
    elem.Cover("ops", "add,scale,softcap");
    elem.Cover("n", n);
  }
  // GatherRows: rows picked with repeats, in any order.
  for (int64_t T : {int64_t{1}, int64_t{9}, int64_t{64}}) {
    const int64_t d = Pick(rng, std::vector<int64_t>{7, 576});
    StepMeta m = RowsStep(Iota(T));
    const int64_t R = std::uniform_int_distribution<int64_t>(1, T + 2)(rng);
    for (int64_t i = 0; i < R; ++i) m.output_rows.push_back(std::uniform_int_distribution<int32_t>(0, T - 1)(rng));
    RETURN_IF_ERROR(pair.Begin(m));
    ASSIGN_OR_RETURN(auto x, pair.Upload(Pair::Uniform(rng, T * d, -1.0f, 1.0f), T, d));
    ASSIGN_OR_RETURN(auto o, pair.Poisoned(R, d));
    RETURN_IF_ERROR(pair.cand().GatherRows(x.t[0], o.t[0]));
    RETURN_IF_ERROR(pair.ref().GatherRows(x.t[1], o.t[1]));
    gather.Case();
    gather.Cover("T", T);
    gather.Cover("R", R);
    RETURN_IF_ERROR(CompareOut(pair, o, gather, "gather", [](int64_t, float) { return 0.0; }));
  }
  return absl::OkStatus();
}

// GreedyTokens: bitwise against ref, and each row against the host sampler's plain-greedy pick
// (sampling::PlainGreedyToken, what the engine runs when the row comes to the host): its token
// when it has one, else the offending id its error names. Rows with many ties, -inf entries, a
// row of -inf alone, and NaN / +inf at random places.
absl::Status CheckGreedy(Pair& pair, std::mt19937_64& rng, Line& line) {
  const float kInf = std::numeric_limits<float>::infinity();
  sampling::SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int64_t V : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{49152}, int64_t{128256}}) {
    const int64_t R = Pick(rng, std::vector<int64_t>{1, 3, 17, 64});
    std::vector<float> x = Pair::Uniform(rng, R * V, -30.0f, 30.0f);
    std::vector<std::string> kinds(R);
    for (int64_t r = 0; r < R; ++r) {
      float* row = x.data() + r * V;
      auto at = [&] { return std::uniform_int_distribution<int64_t>(0, V - 1)(rng); };
      switch (r % 6) {
        case 0: kinds[r] = "plain"; break;
        case 1:  // integer steps: ties at the top, the lowest id must win
          for (int64_t i = 0; i < V; ++i) row[i] = std::round(row[i] / 8.0f);
          kinds[r] = "ties";
          break;
        case 2:  // mostly banned
          for (int64_t i = 0; i < V; ++i) {
            if (i % 5 != 3) row[i] = -kInf;
          }
          kinds[r] = "-inf";
          break;
        case 3:
          for (int64_t i = 0; i < V; ++i) row[i] = -kInf;
          kinds[r] = "all -inf";
          break;
        case 4: row[at()] = std::numeric_limits<float>::quiet_NaN(); row[at()] = kInf; kinds[r] = "nan/inf"; break;
        default: row[at()] = kInf; kinds[r] = "+inf"; break;
      }
    }
    ASSIGN_OR_RETURN(auto lb, pair.Upload(x, R, V));
    ASSIGN_OR_RETURN(auto out, UploadInts(pair, std::vector<int32_t>(R * 2, -7), R, 2));
    RETURN_IF_ERROR(pair.cand().GreedyTokens(lb.t[0], out.t[0]));
    RETURN_IF_ERROR(pair.ref().GreedyTokens(lb.t[1], out.t[1]));
    const std::string where = absl::StrFormat("V %d R %d", V, R);
    ASSIGN_OR_RETURN(auto oc, pair.GetBytes(0, out.t[0].data, R * 2 * 4));
    ASSIGN_OR_RETURN(auto orf, pair.GetBytes(1, out.t[1].data, R * 2 * 4));
    line.Bytes(oc, orf, where);
    std::vector<int32_t> got(R * 2);
    std::memcpy(got.data(), oc.data(), oc.size());
    for (int64_t r = 0; r < R; ++r) {
      const auto host = sampling::PlainGreedyToken(greedy, std::span<const float>(x).subspan(r * V, V), {});
      const int32_t best = got[2 * r], bad = got[2 * r + 1];
      const bool agree = host.ok() ? (bad < 0 && best == *host)
                                   : (bad >= 0 ? absl::StrContains(host.status().message(),
                                                                   absl::StrFormat("logits[%d] ", bad))
                                               : best < 0);
      if (!agree) {
        line.Fail(absl::StrFormat("%s row %d (%s): backend (%d, %d), host sampler %s", where, r,
                                  kinds[r], best, bad,
                                  host.ok() ? absl::StrFormat("token %d", *host) : host.status().ToString()));
      }
      line.Cover("rows", kinds[r]);
    }
    line.Case();
    line.Cover("V", V);
    line.Cover("R", R);
  }
  return absl::OkStatus();
}

std::vector<KvFormat> AllKvFormats() {
  std::vector<KvFormat> v;
  for (uint32_t i = 0; i < static_cast<uint32_t>(quant::kKvFormatCount); ++i) {
    v.push_back(static_cast<KvFormat>(i));
  }
  return v;
}

// The KV pool of one layer on both backends, filled with `fill` bytes.
struct PoolPair {
  backend::KvLayer layer[2];
};
absl::StatusOr<PoolPair> MakePools(Pair& pair, const backend::KvLayout& l, uint8_t fill) {
  PoolPair p;
  const std::vector<uint8_t> kb(l.k_bytes(), fill), vb(l.v_bytes(), fill);
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(p.layer[i].k, pair.Raw(i, l.k_bytes()));
    ASSIGN_OR_RETURN(p.layer[i].v, pair.Raw(i, l.v_bytes()));
    Backend& be = i == 0 ? pair.cand() : pair.ref();
    RETURN_IF_ERROR(be.Upload(p.layer[i].k, kb.data(), l.k_bytes()));
    RETURN_IF_ERROR(be.Upload(p.layer[i].v, vb.data(), l.v_bytes()));
  }
  return p;
}

// Every slot of a pool, decoded: [n_slots, kv_dim].
absl::StatusOr<std::vector<float>> DecodePool(Pair& pair, KvFormat f, const void* pool,
                                              int64_t n_slots, int64_t kv_dim) {
  const int64_t row = quant::KvRowBytes(f, kv_dim);
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, pair.GetBytes(1, pool, n_slots * row));
  std::vector<float> out(n_slots * kv_dim);
  for (int64_t s = 0; s < n_slots; ++s) {
    RETURN_IF_ERROR(quant::DecodeKvRow(f, bytes.data() + s * row, kv_dim, out.data() + s * kv_dim));
  }
  return out;
}

// KvWrite: the pools' bytes after the write equal the ref's, written slots and untouched ones.
absl::Status CheckKvWrite(Pair& pair, std::mt19937_64& rng, Line& line) {
  for (KvFormat f : AllKvFormats()) {
    for (int64_t kv_dim : {int64_t{32}, int64_t{96}, int64_t{1024}}) {
      const int64_t T = Pick(rng, std::vector<int64_t>{1, 5, 33});
      backend::KvLayout l{f, f, 8, 16, kv_dim};
      ASSIGN_OR_RETURN(PoolPair pools, MakePools(pair, l, 0xA5));
      std::vector<int32_t> slots = Iota(l.n_blocks * l.block_size);
      std::shuffle(slots.begin(), slots.end(), rng);
      StepMeta m = RowsStep(Iota(T));
      m.slots.assign(slots.begin(), slots.begin() + T);
      RETURN_IF_ERROR(pair.Begin(m));
      ASSIGN_OR_RETURN(auto k, pair.Upload(Pair::Uniform(rng, T * kv_dim, -4.0f, 4.0f), T, kv_dim));
      ASSIGN_OR_RETURN(auto v, pair.Upload(Pair::Uniform(rng, T * kv_dim, -4.0f, 4.0f), T, kv_dim));
      RETURN_IF_ERROR(pair.cand().KvWrite(l, k.t[0], v.t[0], pools.layer[0]));
      RETURN_IF_ERROR(pair.ref().KvWrite(l, k.t[1], v.t[1], pools.layer[1]));
      for (bool is_k : {true, false}) {
        const int64_t bytes = is_k ? l.k_bytes() : l.v_bytes();
        ASSIGN_OR_RETURN(auto c, pair.GetBytes(0, is_k ? pools.layer[0].k : pools.layer[0].v, bytes));
        ASSIGN_OR_RETURN(auto r, pair.GetBytes(1, is_k ? pools.layer[1].k : pools.layer[1].v, bytes));
        line.Bytes(c, r, absl::StrFormat("%s %s kv_dim %d T %d", quant::KvFormatName(f),
                                         is_k ? "K" : "V", kv_dim, T));
      }
      line.Case();
      line.Cover("formats", quant::KvFormatName(f));
      line.Cover("kv_dim", kv_dim);
      line.Cover("T", T);
    }
  }
  return absl::OkStatus();
}

// PagedAttention over ragged batches: fragmented block tables, lengths across piece (256) and
// block boundaries, decode and prefill rows, GQA, every format pair, windows and softcap.
absl::Status CheckAttention(Pair& pair, std::mt19937_64& rng, Line& line) {
  const std::vector<KvFormat> formats = AllKvFormats();
  const std::vector<int32_t> lens = {1, 2, 255, 256, 257, 511, 513, 700, 1030};
  const std::vector<std::pair<int64_t, int64_t>> gqa = {{4, 4}, {8, 2}, {6, 1}};
  for (int c = 0; c < 24; ++c) {
    const int64_t hd = Pick(rng, std::vector<int64_t>{64, 96, 128, 256});
    const auto [H, KVH] = Pick(rng, gqa);
    const KvFormat kf = formats[c % formats.size()], vf = Pick(rng, formats);
    const int64_t bs = Pick(rng, std::vector<int64_t>{16, 32}), kv_dim = KVH * hd;
    backend::AttentionParams ap;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ap.window = c % 4 == 3 ? 300 : 0;
    ap.softcap = c % 5 == 4 ? 20.0f : 0.0f;
    const int64_t n_seq = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    std::vector<int32_t> len(n_seq), qlen(n_seq);
    int64_t blocks = 5;
    for (int64_t s = 0; s < n_seq; ++s) {
      len[s] = Pick(rng, lens);
      const int32_t most = c % 3 == 0 ? 64 : 9;
      qlen[s] = std::min(len[s], std::uniform_int_distribution<int32_t>(1, most)(rng));
      blocks += (len[s] + bs - 1) / bs;
    }
    std::vector<int32_t> ids = Iota(blocks);
    std::shuffle(ids.begin(), ids.end(), rng);
    int64_t max_blocks = 0;
    for (int64_t s = 0; s < n_seq; ++s) max_blocks = std::max<int64_t>(max_blocks, (len[s] + bs - 1) / bs);
    std::vector<int32_t> table(n_seq * max_blocks, 0);
    for (int64_t s = 0, next = 0; s < n_seq; ++s) {
      for (int64_t b = 0; b < (len[s] + bs - 1) / bs; ++b) table[s * max_blocks + b] = ids[next++];
    }
    auto slot = [&](int64_t s, int64_t j) { return table[s * max_blocks + j / bs] * bs + j % bs; };
    backend::KvLayout l{kf, vf, blocks, bs, kv_dim};
    ASSIGN_OR_RETURN(PoolPair pools, MakePools(pair, l, 0));
    // Fill every key of every sequence in one step.
    StepMeta fill;
    for (int64_t s = 0; s < n_seq; ++s) {
      for (int32_t j = 0; j < len[s]; ++j) {
        fill.positions.push_back(j);
        fill.slots.push_back(static_cast<int32_t>(slot(s, j)));
      }
    }
    const int64_t TF = static_cast<int64_t>(fill.slots.size());
    fill.tokens.assign(TF, 0);
    fill.query_start = {0, static_cast<int32_t>(TF)};
    fill.seq_len = {static_cast<int32_t>(TF)};
    RETURN_IF_ERROR(pair.Begin(fill));
    ASSIGN_OR_RETURN(auto k, pair.Upload(Pair::Uniform(rng, TF * kv_dim, -1.0f, 1.0f), TF, kv_dim));
    ASSIGN_OR_RETURN(auto v, pair.Upload(Pair::Uniform(rng, TF * kv_dim, -1.0f, 1.0f), TF, kv_dim));
    RETURN_IF_ERROR(pair.cand().KvWrite(l, k.t[0], v.t[0], pools.layer[0]));
    RETURN_IF_ERROR(pair.ref().KvWrite(l, k.t[1], v.t[1], pools.layer[1]));
    // The query step: the last qlen[s] positions of each sequence.
    StepMeta m;
    m.query_start = {0};
    std::vector<int32_t> row_seq;
    for (int64_t s = 0; s < n_seq; ++s) {
      for (int32_t p = len[s] - qlen[s]; p < len[s]; ++p) {
        m.positions.push_back(p);
        m.slots.push_back(static_cast<int32_t>(slot(s, p)));
        row_seq.push_back(static_cast<int32_t>(s));
      }
      m.query_start.push_back(static_cast<int32_t>(m.positions.size()));
    }
    const int64_t T = static_cast<int64_t>(m.positions.size());
    m.tokens.assign(T, 0);
    m.seq_len = len;
    m.block_table = table;
    m.max_blocks = max_blocks;
    RETURN_IF_ERROR(pair.Begin(m));
    std::vector<float> q = Pair::Uniform(rng, T * H * hd, -1.0f, 1.0f);
    ASSIGN_OR_RETURN(auto qb, pair.Upload(q, T, H * hd));
    ASSIGN_OR_RETURN(auto out, pair.Poisoned(T, H * hd));
    RETURN_IF_ERROR(pair.cand().PagedAttention(qb.t[0], l, pools.layer[0], H, KVH, hd, ap, out.t[0]));
    RETURN_IF_ERROR(pair.ref().PagedAttention(qb.t[1], l, pools.layer[1], H, KVH, hd, ap, out.t[1]));
    const int64_t n_slots = blocks * bs;
    ASSIGN_OR_RETURN(std::vector<float> kd, DecodePool(pair, kf, pools.layer[1].k, n_slots, kv_dim));
    ASSIGN_OR_RETURN(std::vector<float> vd, DecodePool(pair, vf, pools.layer[1].v, n_slots, kv_dim));
    // Bound per (row, head), from the decoded keys and values it sees.
    std::vector<double> bound(T * H);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t s = row_seq[t], p = m.positions[t];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / KVH);
        double S = 0, V = 0;
        int64_t n = 0;
        for (int64_t j = 0; j <= p && j < len[s]; ++j) {
          if (ap.window > 0 && p - j >= ap.window) continue;
          ++n;
          const float* kr = kd.data() + slot(s, j) * kv_dim + g * hd;
          const float* vr = vd.data() + slot(s, j) * kv_dim + g * hd;
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) {
            dot += std::fabs(double{q[(t * H + h) * hd + d]} * kr[d]);
            V = std::max(V, std::fabs(double{vr[d]}));
          }
          S = std::max(S, std::fabs(double{ap.scale}) * dot);
        }
        bound[t * H + h] = n == 0 ? 0.0 : tol::AttentionBound(hd, n, S, V) + tol::kAtol;
      }
    }
    line.Case();
    line.Cover("formats K/V", absl::StrFormat("%s/%s", quant::KvFormatName(kf), quant::KvFormatName(vf)));
    line.Cover("head_dim", hd);
    line.Cover("heads/kv", absl::StrFormat("%d/%d", H, KVH));
    line.Cover("seq_len", *std::max_element(len.begin(), len.end()));
    line.Cover("seq_len", *std::min_element(len.begin(), len.end()));
    line.Cover("T", T);
    line.Cover("block", bs);
    if (ap.window > 0) line.Cover("extras", "window 300");
    if (ap.softcap > 0) line.Cover("extras", "softcap 20");
    RETURN_IF_ERROR(CompareOut(pair, out, line, absl::StrFormat("case %d", c), [&](int64_t i, float) {
      return bound[i / hd];
    }));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<OpCheckLine>> CheckBackendOps(Backend& cand, Backend& ref,
                                                          const OpCheckOptions& options) {
  std::mt19937_64 rng(options.seed);
  Pair pair(cand, ref);
  std::vector<Line> lines = {Line("Embed"),  Line("MatMul"), Line("RmsNorm"),      Line("Rope"),
                             Line("Glu"),    Line("Add/Scale/Softcap"), Line("GatherRows"),
                             Line("KvWrite"), Line("PagedAttention"), Line("GreedyTokens"),
                             Line("MatMulGroup")};
  std::vector<Line> family;  // Gated DeltaNet and MoE (op_check_families.cc)
  for (const std::string& name : FamilyOpNames()) family.emplace_back(name);
  for (int round = 0; round < std::max(options.rounds, 1); ++round) {
    RETURN_IF_ERROR(pair.Begin(RowsStep({0})));
    RETURN_IF_ERROR(CheckEmbed(pair, rng, lines[0]));
    RETURN_IF_ERROR(CheckMatMul(pair, rng, lines[1]));
    std::vector<Line> row_lines = {std::move(lines[2]), std::move(lines[3]), std::move(lines[4]),
                                   std::move(lines[5]), std::move(lines[6])};
    RETURN_IF_ERROR(pair.Begin(RowsStep({0})));
    RETURN_IF_ERROR(CheckRowOps(pair, rng, row_lines));
    for (int i = 0; i < 5; ++i) lines[2 + i] = std::move(row_lines[i]);
    RETURN_IF_ERROR(CheckKvWrite(pair, rng, lines[7]));
    RETURN_IF_ERROR(CheckAttention(pair, rng, lines[8]));
    RETURN_IF_ERROR(CheckGreedy(pair, rng, lines[9]));
    RETURN_IF_ERROR(pair.Begin(RowsStep({0})));
    RETURN_IF_ERROR(CheckMatMulGroup(pair, rng, lines[10]));
    RETURN_IF_ERROR(CheckFamilyOps(pair, rng, family));
  }
  for (Line& l : family) lines.push_back(std::move(l));
  std::vector<OpCheckLine> out;
  for (Line& l : lines) out.push_back(l.Finish());
  return out;
}

}  // namespace lockstep::oracle
