// The op check's Gated DeltaNet and mixture-of-experts lines (op_check.h): every op of
// backend.h's two family sections against ref on seeded random steps — ragged batches of
// sequences that start at position 0 or continue from a state slot, speculative-verify steps
// with checkpoints, ties in the router's logits, every matmul weight type for the expert matmul
// — held to the bounds of engine/core/tolerances.h. MatMulExperts/bits holds the contract that
// a (token, rank) row's bits equal the plain MatMul of its expert's slice on that token and the
// same call with that token alone.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/core/tolerances.h"
#include "oracle/op_check_internal.h"

namespace lockstep::oracle::op_check_internal {
namespace {

using backend::GdnLayer;
using backend::GdnLayout;
using backend::IntTensor;

// A step of sequences with `lens` rows starting at `starts`; state slots and checkpoints set by
// the caller.
StepMeta SeqStep(const std::vector<int64_t>& lens, const std::vector<int64_t>& starts) {
  StepMeta m;
  m.query_start.push_back(0);
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int64_t i = 0; i < lens[s]; ++i) {
      m.tokens.push_back(0);
      m.positions.push_back(static_cast<int32_t>(starts[s] + i));
      m.slots.push_back(static_cast<int32_t>(m.slots.size()));
    }
    m.query_start.push_back(static_cast<int32_t>(m.tokens.size()));
    m.seq_len.push_back(static_cast<int32_t>(starts[s] + lens[s]));
  }
  return m;
}


std::vector<uint8_t> AsBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ---- Gated DeltaNet ----

absl::Status CheckGdn(Pair& pair, std::mt19937_64& rng, Line& conv, Line& gates, Line& rule) {
  for (int c = 0; c < 9; ++c) {
    GdnLayout l;
    l.n_k_head = Pick(rng, std::vector<int64_t>{1, 2});
    l.n_v_head = l.n_k_head * Pick(rng, std::vector<int64_t>{1, 2, 3});
    l.head_k_dim = Pick(rng, std::vector<int64_t>{16, 32, 128});
    l.head_v_dim = Pick(rng, std::vector<int64_t>{16, 48, 128});
    l.conv_kernel = Pick(rng, std::vector<int64_t>{2, 4});
    l.tiled_k = c % 2 == 1;
    // kind 0: one prefill from position 0; 1: a ragged batch of fresh and continuing sequences;
    // 2: speculative verify (every row checkpointed) continuing from the slots.
    const int kind = c % 3;
    const int64_t n_seq = kind == 0 ? 1 : std::uniform_int_distribution<int64_t>(1, kind == 1 ? 4 : 2)(rng);
    std::vector<int64_t> lens(n_seq), starts(n_seq);
    for (int64_t s = 0; s < n_seq; ++s) {
      lens[s] = kind == 0 ? Pick(rng, std::vector<int64_t>{1, 17, 40})
                          : kind == 1 ? Pick(rng, std::vector<int64_t>{1, 1, 3, 9})
                                      : Pick(rng, std::vector<int64_t>{2, 4});
      starts[s] = kind == 0 ? 0 : kind == 1 ? Pick(rng, std::vector<int64_t>{0, 7}) : 12;
    }
    StepMeta m = SeqStep(lens, starts);
    const int64_t T = m.n_tokens();
    l.n_slots = n_seq + T + 1;
    std::vector<int32_t> slots = Iota(l.n_slots);
    std::shuffle(slots.begin(), slots.end(), rng);
    m.state_slots.assign(slots.begin(), slots.begin() + n_seq);
    if (kind == 2) {
      m.state_checkpoints.assign(slots.begin() + n_seq, slots.begin() + n_seq + T);
    } else if (kind == 1 && c % 2 == 0) {
      m.state_checkpoints.assign(T, -1);
      m.state_checkpoints[T - 1] = slots[n_seq];
    }
    RETURN_IF_ERROR(pair.Begin(m));
    const int64_t C = l.channels(), K = l.conv_kernel, Hv = l.n_v_head;
    const int64_t dk = l.head_k_dim, dv = l.head_v_dim;
    const std::vector<float> conv0 = Pair::Uniform(rng, l.n_slots * l.conv_floats(), -1.0f, 1.0f);
    const std::vector<float> ssm0 = Pair::Uniform(rng, l.n_slots * l.ssm_floats(), -0.5f, 0.5f);
    ASSIGN_OR_RETURN(auto conv_pool, pair.Upload(conv0, l.n_slots, l.conv_floats()));
    ASSIGN_OR_RETURN(auto ssm_pool, pair.Upload(ssm0, l.n_slots, l.ssm_floats()));
    const GdnLayer st[2] = {{conv_pool.t[0].data, ssm_pool.t[0].data},
                            {conv_pool.t[1].data, ssm_pool.t[1].data}};
    const std::string where = absl::StrFormat("case %d (T %d, %d seqs, heads %d/%d, dims %d/%d, K %d)",
                                              c, T, n_seq, l.n_k_head, Hv, dk, dv, K);

    // CausalConvSilu.
    std::vector<float> wd;
    ASSIGN_OR_RETURN(auto w, pair.Bind(Type::F32, C, K, rng, -0.7f, 0.7f, &wd));
    const std::vector<float> x = Pair::Uniform(rng, T * C, -1.0f, 1.0f);
    ASSIGN_OR_RETURN(auto xb, pair.Upload(x, T, C));
    ASSIGN_OR_RETURN(auto y, pair.Poisoned(T, C));
    RETURN_IF_ERROR(pair.cand().CausalConvSilu(xb.t[0], w.first, l, st[0], y.t[0]));
    RETURN_IF_ERROR(pair.ref().CausalConvSilu(xb.t[1], w.second, l, st[1], y.t[1]));
    std::vector<double> sum_abs(T * C);  // sum_i |w[c, i] u[p - K + 1 + i, c]|
    for (int64_t s = 0; s < n_seq; ++s) {
      const int64_t r0 = m.query_start[s];
      const float* slot = conv0.data() + m.state_slots[s] * l.conv_floats();
      for (int64_t ch = 0; ch < C; ++ch) {
        std::vector<float> u;
        for (int64_t i = 0; i < K - 1; ++i) u.push_back(starts[s] == 0 ? 0.0f : slot[i * C + ch]);
        for (int64_t r = 0; r < lens[s]; ++r) u.push_back(x[(r0 + r) * C + ch]);
        for (int64_t r = 0; r < lens[s]; ++r) {
          double a = 0;
          for (int64_t i = 0; i < K; ++i) a += std::fabs(double{wd[ch * K + i]} * u[r + i]);
          sum_abs[(r0 + r) * C + ch] = a;
        }
      }
    }
    RETURN_IF_ERROR(CompareOut(pair, y, conv, where + " y", [&](int64_t i, float r) {
      return tol::ConvSiluBound(K, sum_abs[i], std::fabs(r)) + tol::kAtol;
    }));
    {  // the conv state holds inputs: copies, bitwise
      ASSIGN_OR_RETURN(std::vector<float> pc, pair.Get(0, conv_pool.t[0]));
      ASSIGN_OR_RETURN(std::vector<float> pr, pair.Get(1, conv_pool.t[1]));
      conv.Bytes(AsBytes(pc), AsBytes(pr), where + " conv state");
    }
    conv.Case();
    conv.Cover("K", K);
    conv.Cover("channels", C);
    conv.Cover("T", T);
    conv.Cover("steps", kind == 0 ? "prefill" : kind == 1 ? "ragged" : "verify+checkpoints");

    // GdnGates.
    std::vector<float> a = Pair::Uniform(rng, T * Hv, -4.0f, 4.0f);
    a[0] = 25.0f;  // softplus' linear branch
    const std::vector<float> bv = Pair::Uniform(rng, T * Hv, -6.0f, 6.0f);
    std::vector<float> dtd, ad;
    ASSIGN_OR_RETURN(auto dt, pair.Bind(Type::F32, 1, Hv, rng, -1.0f, 1.0f, &dtd));
    ASSIGN_OR_RETURN(auto A, pair.Bind(Type::F32, 1, Hv, rng, -2.0f, -0.1f, &ad));
    ASSIGN_OR_RETURN(auto ab, pair.Upload(a, T, Hv));
    ASSIGN_OR_RETURN(auto bb, pair.Upload(bv, T, Hv));
    ASSIGN_OR_RETURN(auto g, pair.Poisoned(T, Hv));
    ASSIGN_OR_RETURN(auto beta, pair.Poisoned(T, Hv));
    RETURN_IF_ERROR(pair.cand().GdnGates(ab.t[0], bb.t[0], dt.first, A.first, g.t[0], beta.t[0]));
    RETURN_IF_ERROR(pair.ref().GdnGates(ab.t[1], bb.t[1], dt.second, A.second, g.t[1], beta.t[1]));
    RETURN_IF_ERROR(CompareOut(pair, g, gates, where + " g", [&](int64_t i, float r) {
      const double z = std::fabs(double{a[i]} + dtd[i % Hv]);
      return tol::GdnDecayRtol(z) * std::fabs(r) + tol::kAtol;
    }));
    RETURN_IF_ERROR(CompareOut(pair, beta, gates, where + " beta", [&](int64_t, float r) {
      return tol::kGdnBetaRtol * std::fabs(r) + tol::kAtol;
    }));
    gates.Case();
    gates.Cover("heads", Hv);
    gates.Cover("T", T);

    // GatedDeltaRule, on its own random q | k | v, decays and betas.
    const std::vector<float> qkvh = Pair::Uniform(rng, T * C, -1.0f, 1.0f);
    const std::vector<float> gdh = Pair::Uniform(rng, T * Hv, -1.5f, 0.0f);
    const std::vector<float> bth = Pair::Uniform(rng, T * Hv, 0.05f, 0.95f);
    ASSIGN_OR_RETURN(auto qkv, pair.Upload(qkvh, T, C));
    ASSIGN_OR_RETURN(auto gd, pair.Upload(gdh, T, Hv));
    ASSIGN_OR_RETURN(auto bt, pair.Upload(bth, T, Hv));
    ASSIGN_OR_RETURN(auto out, pair.Poisoned(T, Hv * dv));
    constexpr float kQkEps = 1e-6f;  // the rule's q/k L2-norm eps; q_norm below divides by it too
    RETURN_IF_ERROR(pair.cand().GatedDeltaRule(qkv.t[0], gd.t[0], bt.t[0], l, st[0], kQkEps, out.t[0]));
    RETURN_IF_ERROR(pair.ref().GatedDeltaRule(qkv.t[1], gd.t[1], bt.t[1], l, st[1], kQkEps, out.t[1]));
    const int64_t tau = *std::max_element(lens.begin(), lens.end());
    // Each output element is S^T q over dk terms, and S^T q can cancel: its error is bounded by
    // the column norms of S times |q| (engine/core/tolerances.h), not by |o|. col_norm[t, h, j]
    // bounds |column j of head h's state| after token t: N = |S0 column| (0 at position 0), then
    // N <- exp(g) N + beta |v_j| per token (I - beta k k^T with |k| = 1 is a contraction);
    // q_norm[t, h] = |q| after its L2 normalisation and 1/sqrt(dk) scale.
    std::vector<double> col_norm(T * Hv * dv), q_norm(T * Hv);
    for (int64_t s = 0; s < n_seq; ++s) {
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t kh = l.k_head_of(h);
        const float* s0 = ssm0.data() + m.state_slots[s] * l.ssm_floats() + h * dk * dv;
        std::vector<double> n(dv, 0.0);
        for (int64_t j = 0; j < dv && starts[s] != 0; ++j) {
          for (int64_t i = 0; i < dk; ++i) n[j] += double{s0[i * dv + j]} * s0[i * dv + j];
          n[j] = std::sqrt(n[j]);
        }
        for (int64_t t = m.query_start[s]; t < m.query_start[s + 1]; ++t) {
          const float* row = qkvh.data() + t * C;
          double qq = 0.0;
          for (int64_t i = 0; i < dk; ++i) qq += double{row[kh * dk + i]} * row[kh * dk + i];
          q_norm[t * Hv + h] = std::sqrt(qq / (qq + double{kQkEps}) / static_cast<double>(dk));
          const double decay = std::exp(double{gdh[t * Hv + h]}), b = bth[t * Hv + h];
          for (int64_t j = 0; j < dv; ++j) {
            n[j] = decay * n[j] + b * std::fabs(double{row[2 * l.n_k_head * dk + h * dv + j]});
            col_norm[(t * Hv + h) * dv + j] = n[j];
          }
        }
      }
    }
    RETURN_IF_ERROR(CompareOut(pair, out, rule, where + " out", [&](int64_t i, float) {
      const int64_t t = i / (Hv * dv), h = (i % (Hv * dv)) / dv;
      return tol::GatedDeltaRuleRtol(tau, dk) * col_norm[i] * q_norm[t * Hv + h] + tol::kAtol;
    }));
    ASSIGN_OR_RETURN(std::vector<float> sref, pair.Get(1, ssm_pool.t[1]));
    std::vector<double> state_max(l.n_slots * Hv, 0.0);  // per (slot, value head)
    for (int64_t i = 0; i < static_cast<int64_t>(sref.size()); ++i) {
      double& sm = state_max[i / (dk * dv)];
      sm = std::max(sm, std::fabs(double{sref[i]}));
    }
    RETURN_IF_ERROR(CompareOut(pair, ssm_pool, rule, where + " state", [&](int64_t i, float) {
      return tol::GatedDeltaRuleRtol(tau, dk) * state_max[i / (dk * dv)] + tol::kAtol;
    }));
    rule.Case();
    rule.Cover("head_k/v dims", absl::StrFormat("%d/%d", dk, dv));
    rule.Cover("heads k/v", absl::StrFormat("%d/%d%s", l.n_k_head, Hv, l.tiled_k ? " tiled" : ""));
    rule.Cover("T", T);
    rule.Cover("seqs", n_seq);
    rule.Cover("steps", kind == 0 ? "prefill" : kind == 1 ? "ragged" : "verify+checkpoints");
  }
  return absl::OkStatus();
}

absl::Status CheckGdnRows(Pair& pair, std::mt19937_64& rng, Line& norm, Line& split) {
  for (int64_t d : {int64_t{16}, int64_t{128}, int64_t{5003}}) {
    const int64_t T = Pick(rng, std::vector<int64_t>{1, 3, 17, 64});
    ASSIGN_OR_RETURN(auto x, pair.Upload(Pair::Uniform(rng, T * d, -2.0f, 2.0f), T, d));
    ASSIGN_OR_RETURN(auto z, pair.Upload(Pair::Uniform(rng, T * d, -4.0f, 4.0f), T, d));
    std::vector<float> wd;
    ASSIGN_OR_RETURN(auto w, pair.Bind(Type::F32, 1, d, rng, 0.5f, 1.5f, &wd));
    ASSIGN_OR_RETURN(auto y, pair.Poisoned(T, d));
    RETURN_IF_ERROR(pair.cand().GatedRmsNorm(x.t[0], w.first, z.t[0], 1e-6f, y.t[0]));
    RETURN_IF_ERROR(pair.ref().GatedRmsNorm(x.t[1], w.second, z.t[1], 1e-6f, y.t[1]));
    RETURN_IF_ERROR(CompareOut(pair, y, norm, absl::StrFormat("d %d T %d", d, T), [&](int64_t, float r) {
      return tol::GatedRmsNormRtol(d) * std::fabs(r) + tol::kAtol;
    }));
    norm.Case();
    norm.Cover("d", d);
    norm.Cover("T", T);
  }
  for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{128}}) {
    const int64_t T = Pick(rng, std::vector<int64_t>{1, 5}), n = Pick(rng, std::vector<int64_t>{1, 4});
    ASSIGN_OR_RETURN(auto x, pair.Upload(Pair::Uniform(rng, T * 2 * n * m, -1.0f, 1.0f), T, 2 * n * m));
    ASSIGN_OR_RETURN(auto a, pair.Poisoned(T, n * m));
    ASSIGN_OR_RETURN(auto b, pair.Poisoned(T, n * m));
    RETURN_IF_ERROR(pair.cand().SplitHalves(x.t[0], m, a.t[0], b.t[0]));
    RETURN_IF_ERROR(pair.ref().SplitHalves(x.t[1], m, a.t[1], b.t[1]));
    const auto exact = [](int64_t, float) { return 0.0; };
    RETURN_IF_ERROR(CompareOut(pair, a, split, absl::StrFormat("m %d a", m), exact));
    RETURN_IF_ERROR(CompareOut(pair, b, split, absl::StrFormat("m %d b", m), exact));
    split.Case();
    split.Cover("m", m);
    split.Cover("groups", n);
  }
  return absl::OkStatus();
}

// ---- mixture of experts ----

absl::Status CheckRoute(Pair& pair, std::mt19937_64& rng, Line& line) {
  for (int c = 0; c < 8; ++c) {
    const int64_t E = Pick(rng, std::vector<int64_t>{8, 60, 128, 256});
    const int64_t k = std::min(E, Pick(rng, std::vector<int64_t>{1, 2, 4, 8}));
    const int64_t T = Pick(rng, std::vector<int64_t>{1, 7, 33});
    const bool normalize = c % 2 == 0, ties = c % 4 < 2;
    std::vector<float> logits = Pair::Uniform(rng, T * E, -4.0f, 4.0f);
    if (ties) {  // quarter steps: many equal logits, at the k-th place too
      for (float& v : logits) v = std::round(v * 2.0f) / 4.0f;
    }
    ASSIGN_OR_RETURN(auto lb, pair.Upload(logits, T, E));
    ASSIGN_OR_RETURN(auto wts, pair.Poisoned(T, k));
    ASSIGN_OR_RETURN(auto ids, UploadInts(pair, std::vector<int32_t>(T * k, -1), T, k));
    RETURN_IF_ERROR(pair.cand().MoeRoute(lb.t[0], k, normalize, wts.t[0], ids.t[0]));
    RETURN_IF_ERROR(pair.ref().MoeRoute(lb.t[1], k, normalize, wts.t[1], ids.t[1]));
    const std::string where = absl::StrFormat("E %d k %d T %d%s", E, k, T, ties ? " ties" : "");
    ASSIGN_OR_RETURN(auto ic, pair.GetBytes(0, ids.t[0].data, T * k * 4));
    ASSIGN_OR_RETURN(auto ir, pair.GetBytes(1, ids.t[1].data, T * k * 4));
    line.Bytes(ic, ir, where + " ids");
    RETURN_IF_ERROR(CompareOut(pair, wts, line, where + " weights", [&](int64_t, float r) {
      return tol::MoeRouteRtol(E, k) * std::fabs(r) + tol::kAtol;
    }));
    line.Case();
    line.Cover("E", E);
    line.Cover("k", k);
    line.Cover("T", T);
    line.Cover("logits", ties ? "with ties" : "continuous");
    line.Cover("normalize", normalize ? "yes" : "no");
  }
  return absl::OkStatus();
}

// A route of T tokens over E experts, k distinct each; `crowd`: every token's rank 0 is expert 1.
std::vector<int32_t> RandomIds(std::mt19937_64& rng, int64_t T, int64_t E, int64_t k, bool crowd) {
  std::vector<int32_t> ids;
  std::vector<int32_t> all = Iota(E);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    if (crowd) std::iter_swap(all.begin(), std::find(all.begin(), all.end(), 1));
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return ids;
}

absl::Status CheckExperts(Pair& pair, std::mt19937_64& rng, Line& line, Line& bits) {
  int c = 0;
  for (Type type : MatmulTypes()) {
    const int64_t block = quant::Traits(type).block_size;
    const int64_t cols = block >= 256 ? Pick(rng, std::vector<int64_t>{256, 512})
                                      : Pick(rng, std::vector<int64_t>{64, 192, 512});
    const int64_t E = 8, rpe = Pick(rng, std::vector<int64_t>{24, 40}), k = Pick(rng, std::vector<int64_t>{1, 2, 4});
    const int64_t T = Pick(rng, std::vector<int64_t>{1, 5, 17});
    const bool per_token = c % 2 == 0, crowd = c % 3 == 0;
    ++c;
    std::vector<float> wd;
    ASSIGN_OR_RETURN(auto w, pair.Bind(type, E * rpe, cols, rng, -1.0f, 1.0f, &wd));
    const std::vector<int32_t> idv = RandomIds(rng, T, E, k, crowd);
    ASSIGN_OR_RETURN(auto ids, UploadInts(pair, idv, T, k));
    const int64_t xr = per_token ? T : T * k;
    const std::vector<float> x = Pair::Uniform(rng, xr * cols, -1.0f, 1.0f);
    ASSIGN_OR_RETURN(auto xb, pair.Upload(x, xr, cols));
    ASSIGN_OR_RETURN(auto y, pair.Poisoned(T * k, rpe));
    RETURN_IF_ERROR(pair.cand().MatMulExperts(w.first, E, xb.t[0], ids.t[0], y.t[0]));
    RETURN_IF_ERROR(pair.ref().MatMulExperts(w.second, E, xb.t[1], ids.t[1], y.t[1]));
    const std::string where = absl::StrFormat("%s [%d x %d, %d] T %d k %d%s", quant::Traits(type).name,
                                              E, rpe, cols, T, k, per_token ? "" : " x per row");
    RETURN_IF_ERROR(CompareOut(pair, y, line, where, [&](int64_t i, float) {
      const int64_t row = i / rpe, r = i % rpe, e = idv[row];
      const float* xi = x.data() + (per_token ? row / k : row) * cols;
      double s = 0;
      for (int64_t cc = 0; cc < cols; ++cc) s += std::fabs(double{wd[(e * rpe + r) * cols + cc]} * xi[cc]);
      return tol::MatMulRtol(cols) * s + tol::kAtol;
    }));
    line.Case();
    line.Cover("types", quant::Traits(type).name);
    line.Cover("cols", cols);
    line.Cover("T", T);
    line.Cover("k", k);
    line.Cover("x", per_token ? "per token" : "per (token, rank)");
    if (crowd) line.Cover("route", "crowded expert");

    // Bits: token t alone, and each row against the plain MatMul of its expert's slice.
    ASSIGN_OR_RETURN(std::vector<float> yc, pair.Get(0, y.t[0]));
    Backend& be = pair.cand();
    for (int64_t t = 0; t < T; ++t) {
      const int64_t x0 = per_token ? t : t * k, xn = per_token ? 1 : k;
      ASSIGN_OR_RETURN(auto y1, pair.Poisoned(k, rpe));
      const IntTensor ids1{ids.t[0].data + t * k, 1, k};
      RETURN_IF_ERROR(be.MatMulExperts(w.first, E, xb.t[0].Rows(x0, xn), ids1, y1.t[0]));
      ASSIGN_OR_RETURN(std::vector<float> a1, pair.Get(0, y1.t[0]));
      const std::vector<float> want(yc.begin() + t * k * rpe, yc.begin() + (t + 1) * k * rpe);
      bits.Bytes(AsBytes(a1), AsBytes(want), absl::StrFormat("%s token %d alone", where, t));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = idv[t * k + j];
        Weight we = w.first;
        we.rows = rpe;
        we.data = static_cast<const uint8_t*>(w.first.data) + e * rpe * w.first.row_bytes();
        ASSIGN_OR_RETURN(auto yp, pair.Poisoned(1, rpe));
        RETURN_IF_ERROR(be.MatMul(we, xb.t[0].Rows(per_token ? t : t * k + j, 1), yp.t[0]));
        ASSIGN_OR_RETURN(std::vector<float> ap, pair.Get(0, yp.t[0]));
        const std::vector<float> row(yc.begin() + (t * k + j) * rpe, yc.begin() + (t * k + j + 1) * rpe);
        bits.Bytes(AsBytes(ap), AsBytes(row),
                   absl::StrFormat("%s token %d rank %d vs MatMul of expert %d", where, t, j, e));
      }
    }
    bits.Case();
    bits.Cover("types", quant::Traits(type).name);
    bits.Cover("T", T);
  }
  return absl::OkStatus();
}

absl::Status CheckCombineAndGate(Pair& pair, std::mt19937_64& rng, Line& combine, Line& gate) {
  for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{8}}) {
    const int64_t T = Pick(rng, std::vector<int64_t>{1, 9}), d = Pick(rng, std::vector<int64_t>{7, 576});
    const std::vector<float> y = Pair::Uniform(rng, T * k * d, -2.0f, 2.0f);
    const std::vector<float> wv = Pair::Uniform(rng, T * k, 0.0f, 1.0f);
    ASSIGN_OR_RETURN(auto yb, pair.Upload(y, T * k, d));
    ASSIGN_OR_RETURN(auto wb, pair.Upload(wv, T, k));
    ASSIGN_OR_RETURN(auto o, pair.Poisoned(T, d));
    RETURN_IF_ERROR(pair.cand().MoeCombine(yb.t[0], wb.t[0], o.t[0]));
    RETURN_IF_ERROR(pair.ref().MoeCombine(yb.t[1], wb.t[1], o.t[1]));
    RETURN_IF_ERROR(CompareOut(pair, o, combine, absl::StrFormat("k %d d %d", k, d), [&](int64_t i, float) {
      const int64_t t = i / d, cc = i % d;
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += std::fabs(double{wv[t * k + j]} * y[(t * k + j) * d + cc]);
      return tol::MoeCombineRtol(k) * s + tol::kAtol;
    }));
    combine.Case();
    combine.Cover("k", k);
    combine.Cover("d", d);
    combine.Cover("T", T);
  }
  for (int64_t d : {int64_t{1}, int64_t{333}, int64_t{2048}}) {
    for (bool per_row : {false, true}) {
      const int64_t T = Pick(rng, std::vector<int64_t>{1, 5}), gc = per_row ? 1 : d;
      ASSIGN_OR_RETURN(auto x, pair.Upload(Pair::Uniform(rng, T * d, -3.0f, 3.0f), T, d));
      ASSIGN_OR_RETURN(auto g, pair.Upload(Pair::Uniform(rng, T * gc, -8.0f, 8.0f), T, gc));
      ASSIGN_OR_RETURN(auto o, pair.Poisoned(T, d));
      RETURN_IF_ERROR(pair.cand().SigmoidMul(x.t[0], g.t[0], o.t[0]));
      RETURN_IF_ERROR(pair.ref().SigmoidMul(x.t[1], g.t[1], o.t[1]));
      RETURN_IF_ERROR(CompareOut(pair, o, gate, absl::StrFormat("d %d", d), [](int64_t, float r) {
        return tol::kSigmoidMulRtol * std::fabs(r) + tol::kAtol;
      }));
      gate.Case();
      gate.Cover("d", d);
      gate.Cover("gate", per_row ? "per row" : "per element");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFamilyOps(Pair& pair, std::mt19937_64& rng, std::vector<Line>& lines) {
  RETURN_IF_ERROR(CheckGdn(pair, rng, lines[0], lines[1], lines[2]));
  RETURN_IF_ERROR(CheckGdnRows(pair, rng, lines[3], lines[4]));
  RETURN_IF_ERROR(pair.Begin(RowsStep({0})));
  RETURN_IF_ERROR(CheckRoute(pair, rng, lines[5]));
  RETURN_IF_ERROR(CheckExperts(pair, rng, lines[6], lines[7]));
  return CheckCombineAndGate(pair, rng, lines[8], lines[9]);
}

}  // namespace lockstep::oracle::op_check_internal
