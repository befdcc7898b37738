// The Gated DeltaNet ops (backend.h) of ref and cpu against transformers 5.17's own functions
// (modeling_qwen3_next.py: causal_conv1d_fn / causal_conv1d_update and
// torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule, use_qk_l2norm_in_kernel) on
// seeded random inputs dumped by oracle/gen_gdn_golden.py (golden/families/qwen3_5/ops/), and
// the cpu backend's bitwise invariances: a sequence cut into steps of any sizes, in a batch
// with another sequence, at any thread count, gives the bits of one pass; checkpoints hold the
// state a shorter step would have left.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/npy.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace lockstep {
namespace {

using backend::Backend;
using backend::GdnLayer;
using backend::GdnLayout;
using backend::StepMeta;
using backend::Tensor;
using backend::Weight;

constexpr double kU = 0x1p-24;

npy::Array Load(const std::string& name) {
  const std::string path =
      std::string(LOCKSTEP_SOURCE_DIR) + "/golden/families/qwen3_5/ops/" + name + ".npy";
  absl::StatusOr<npy::Array> a = npy::Read(path);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : npy::Array{};
}

std::unique_ptr<Backend> Make(const std::string& name, int threads = 2) {
  backend::BackendOptions o;
  o.threads = threads;
  absl::StatusOr<std::unique_ptr<Backend>> be = backend::MakeBackend(name, o);
  EXPECT_TRUE(be.ok()) << be.status();
  return std::move(*be);
}

// A step of sequences with `lens` rows starting at `starts`, state slots `slots`.
StepMeta Meta(const std::vector<int64_t>& lens, const std::vector<int64_t>& starts,
              const std::vector<int32_t>& slots) {
  StepMeta m;
  m.query_start.push_back(0);
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int64_t i = 0; i < lens[s]; ++i) {
      m.tokens.push_back(0);
      m.positions.push_back(static_cast<int32_t>(starts[s] + i));
      m.slots.push_back(0);
    }
    m.query_start.push_back(static_cast<int32_t>(m.tokens.size()));
    m.seq_len.push_back(static_cast<int32_t>(starts[s] + lens[s]));
  }
  m.state_slots = slots;
  return m;
}

Weight F32Weight(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Weight w;
  w.type = quant::Type::F32;
  w.rows = rows;
  w.cols = cols;
  w.data = v.data();
  w.name = "test";
  return w;
}

// max |a - b| / max |b|, failing on any NaN/Inf mismatch.
double RelErr(const float* a, const float* b, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num = std::max(num, std::fabs(double{a[i]} - double{b[i]}));
    den = std::max(den, std::fabs(double{b[i]}));
  }
  return num / std::max(den, 1e-30);
}

// ---- the causal conv: x [C, T] and w [C, K] as transformers laid them out ----
struct Conv {
  int64_t C, T, K;
  std::vector<float> x_tc, w, y_tc, y_update;  // ours: [T, C]; goldens transposed to match
};

Conv LoadConv() {
  Conv c;
  npy::Array x = Load("conv_x"), w = Load("conv_w"), y = Load("conv_y"), u = Load("conv_y_update");
  c.C = x.shape[0];
  c.T = x.shape[1];
  c.K = w.shape[1];
  auto transpose = [&](const npy::Array& a) {
    const int64_t cols = a.shape[1];
    std::vector<float> out(a.data.size());
    for (int64_t ch = 0; ch < c.C; ++ch) {
      for (int64_t t = 0; t < cols; ++t) out[t * c.C + ch] = a.data[ch * cols + t];
    }
    return out;
  };
  c.x_tc = transpose(x);
  c.y_tc = transpose(y);
  c.y_update = transpose(u);
  c.w = w.data;
  return c;
}

GdnLayout ConvLayout(const Conv& c, int64_t n_slots) {
  // channels() = 2 * 1 * (C / 4) + 2 * (C / 4) = C for C divisible by 4.
  GdnLayout l;
  l.n_slots = n_slots;
  l.conv_kernel = c.K;
  l.n_k_head = 1;
  l.n_v_head = 2;
  l.head_k_dim = c.C / 4;
  l.head_v_dim = c.C / 4;
  return l;
}

// Runs the conv over rows [0, T) of one sequence in steps of `cuts` rows (slot 0), optionally
// beside a second sequence (slot 1) that runs the same rows; returns y [T, C].
std::vector<float> RunConv(Backend& be, const Conv& c, const std::vector<int64_t>& cuts,
                           bool neighbour) {
  const GdnLayout l = ConvLayout(c, 2);
  std::vector<float> conv_state(2 * l.conv_floats(), NAN), ssm(2 * l.ssm_floats());
  GdnLayer st{conv_state.data(), ssm.data()};
  const Weight w = F32Weight(c.w, c.C, c.K);
  std::vector<float> y(c.T * c.C, NAN);
  int64_t at = 0;
  for (int64_t n : cuts) {
    StepMeta m = neighbour ? Meta({n, n}, {at, at}, {0, 1}) : Meta({n}, {at}, {0});
    EXPECT_TRUE(be.BeginStep(m).ok());
    std::vector<float> x(m.n_tokens() * c.C), out(m.n_tokens() * c.C, NAN);
    for (int64_t s = 0; s < (neighbour ? 2 : 1); ++s) {
      std::copy(c.x_tc.begin() + at * c.C, c.x_tc.begin() + (at + n) * c.C, x.begin() + s * n * c.C);
    }
    const absl::Status s = be.CausalConvSilu({x.data(), m.n_tokens(), c.C}, w, l, st,
                                             {out.data(), m.n_tokens(), c.C});
    EXPECT_TRUE(s.ok()) << s;
    std::copy(out.begin(), out.begin() + n * c.C, y.begin() + at * c.C);
    if (neighbour) {
      EXPECT_TRUE(std::equal(out.begin(), out.begin() + n * c.C, out.begin() + n * c.C))
          << "the neighbour's rows differ";
    }
    at += n;
  }
  return y;
}

// Bound for a K-tap conv + SiLU in float against transformers' float conv: both are within
// ~(K + 4) u of exact relative to the largest |term| (K products and sums, expf, the division);
// relative to max |y| that is a few times larger where terms cancel. 64 (K + 4) u covers it.
double ConvTol(const Conv& c) { return 64.0 * (c.K + 4) * kU; }

TEST(GdnOps, CausalConvMatchesTransformers) {
  const Conv c = LoadConv();
  ASSERT_GT(c.T, 0);
  for (const char* name : {"ref", "cpu"}) {
    std::unique_ptr<Backend> be = Make(name);
    const std::vector<float> y = RunConv(*be, c, {c.T}, false);
    EXPECT_LE(RelErr(y.data(), c.y_tc.data(), c.T * c.C), ConvTol(c)) << name << " one pass";
    // Prefill 70 rows, then one row per step from the state: transformers' causal_conv1d_update.
    const int64_t T0 = c.T - static_cast<int64_t>(c.y_update.size()) / c.C;
    std::vector<int64_t> cuts = {T0};
    for (int64_t t = T0; t < c.T; ++t) cuts.push_back(1);
    const std::vector<float> y2 = RunConv(*be, c, cuts, true);
    EXPECT_LE(RelErr(y2.data() + T0 * c.C, c.y_update.data(), (c.T - T0) * c.C), ConvTol(c))
        << name << " decode from the state";
  }
}

TEST(GdnOps, CpuConvIsBitwiseInvariantToCutsBatchAndThreads) {
  const Conv c = LoadConv();
  std::unique_ptr<Backend> one = Make("cpu", 1);
  const std::vector<float> base = RunConv(*one, c, {c.T}, false);
  std::mt19937_64 rng = testing::TestRng();
  for (int threads : {1, 2, 3}) {
    std::unique_ptr<Backend> be = Make("cpu", threads);
    std::vector<int64_t> cuts;
    for (int64_t left = c.T; left > 0;) {
      const int64_t n = std::min<int64_t>(left, 1 + static_cast<int64_t>(rng() % 9));
      cuts.push_back(n);
      left -= n;
    }
    const std::vector<float> y = RunConv(*be, c, cuts, threads != 1);
    EXPECT_EQ(0, std::memcmp(y.data(), base.data(), y.size() * sizeof(float)))
        << threads << " threads, " << cuts.size() << " steps";
  }
}

// ---- the gated delta rule ----
struct Gdr {
  int64_t T, Hk, Hv, dk, dv;
  std::vector<float> qkv, g, beta, s0;  // qkv [T, 2 Hk dk + Hv dv]; s0 [Hv, dk, dv]
  npy::Array out_chunk, state_chunk, out_rec, state_rec;
  GdnLayout layout(int64_t n_slots) const {
    GdnLayout l;
    l.n_slots = n_slots;
    l.conv_kernel = 4;
    l.n_k_head = Hk;
    l.n_v_head = Hv;
    l.head_k_dim = dk;
    l.head_v_dim = dv;
    l.tiled_k = false;  // transformers' repeat_interleave
    return l;
  }
};

Gdr LoadGdr() {
  Gdr d;
  npy::Array q = Load("gdr_q"), k = Load("gdr_k"), v = Load("gdr_v");
  d.T = q.shape[0];
  d.Hk = q.shape[1];
  d.dk = q.shape[2];
  d.Hv = v.shape[1];
  d.dv = v.shape[2];
  const int64_t C = 2 * d.Hk * d.dk + d.Hv * d.dv;
  d.qkv.resize(d.T * C);
  for (int64_t t = 0; t < d.T; ++t) {
    std::copy_n(q.data.begin() + t * d.Hk * d.dk, d.Hk * d.dk, d.qkv.begin() + t * C);
    std::copy_n(k.data.begin() + t * d.Hk * d.dk, d.Hk * d.dk, d.qkv.begin() + t * C + d.Hk * d.dk);
    std::copy_n(v.data.begin() + t * d.Hv * d.dv, d.Hv * d.dv,
                d.qkv.begin() + t * C + 2 * d.Hk * d.dk);
  }
  d.g = Load("gdr_g").data;
  d.beta = Load("gdr_beta").data;
  d.s0 = Load("gdr_s0").data;
  d.out_chunk = Load("gdr_out_chunk");
  d.state_chunk = Load("gdr_state_chunk");
  d.out_rec = Load("gdr_out_recurrent");
  d.state_rec = Load("gdr_state_recurrent");
  return d;
}

struct GdrRun {
  std::vector<float> out, state;           // [T, Hv dv], [Hv, dk, dv]
  std::vector<std::vector<float>> checks;  // state after each row that was checkpointed
};

// The sequence starts at position kStart (> 0, so the slot's s0 is read), cut into steps of
// `cuts` rows; with `neighbour`, a second sequence (slot 1) runs the same rows beside it. With
// `checkpoint_every`, row t of each step checkpoints into slot 2 + t (t of the whole sequence).
constexpr int64_t kStart = 1000;
GdrRun RunGdr(Backend& be, const Gdr& d, const std::vector<int64_t>& cuts, bool neighbour,
              bool checkpoints = false) {
  const int64_t C = 2 * d.Hk * d.dk + d.Hv * d.dv;
  const GdnLayout l = d.layout(2 + (checkpoints ? d.T : 0));
  std::vector<float> conv(l.n_slots * l.conv_floats()), ssm(l.n_slots * l.ssm_floats(), NAN);
  std::copy(d.s0.begin(), d.s0.end(), ssm.begin());
  std::copy(d.s0.begin(), d.s0.end(), ssm.begin() + l.ssm_floats());
  GdnLayer st{conv.data(), ssm.data()};
  GdrRun r;
  r.out.assign(d.T * d.Hv * d.dv, NAN);
  int64_t at = 0;
  for (int64_t n : cuts) {
    StepMeta m = neighbour ? Meta({n, n}, {kStart + at, kStart + at}, {0, 1})
                           : Meta({n}, {kStart + at}, {0});
    if (checkpoints) {
      m.state_checkpoints.assign(m.n_tokens(), -1);
      for (int64_t i = 0; i < n; ++i) m.state_checkpoints[i] = static_cast<int32_t>(2 + at + i);
    }
    EXPECT_TRUE(be.BeginStep(m).ok());
    const int64_t rows = m.n_tokens(), HD = d.Hv * d.dv;
    std::vector<float> qkv(rows * C), g(rows * d.Hv), beta(rows * d.Hv), out(rows * HD, NAN);
    for (int64_t s = 0; s < (neighbour ? 2 : 1); ++s) {
      std::copy_n(d.qkv.begin() + at * C, n * C, qkv.begin() + s * n * C);
      std::copy_n(d.g.begin() + at * d.Hv, n * d.Hv, g.begin() + s * n * d.Hv);
      std::copy_n(d.beta.begin() + at * d.Hv, n * d.Hv, beta.begin() + s * n * d.Hv);
    }
    const absl::Status s = be.GatedDeltaRule({qkv.data(), rows, C}, {g.data(), rows, d.Hv},
                                             {beta.data(), rows, d.Hv}, l, st, 1e-6f,
                                             {out.data(), rows, HD});
    EXPECT_TRUE(s.ok()) << s;
    std::copy_n(out.begin(), n * HD, r.out.begin() + at * HD);
    if (neighbour) {
      EXPECT_TRUE(std::equal(out.begin(), out.begin() + n * HD, out.begin() + n * HD));
    }
    at += n;
  }
  r.state.assign(ssm.begin(), ssm.begin() + l.ssm_floats());
  if (neighbour) {
    EXPECT_TRUE(std::equal(r.state.begin(), r.state.end(), ssm.begin() + l.ssm_floats()));
  }
  if (checkpoints) {
    for (int64_t t = 0; t < d.T; ++t) {
      r.checks.emplace_back(ssm.begin() + (2 + t) * l.ssm_floats(),
                            ssm.begin() + (3 + t) * l.ssm_floats());
    }
  }
  return r;
}

// transformers runs both forms in float: T steps each touching every state entry a few times
// (decay, update, read: ~(dk + 4) u relative to the entry's scale per step), so its error, and
// ours, grows to ~T (dk + 4) u relative to the largest magnitude; the chunked form's triangular
// solve adds ~chunk (64) u. Tolerance: 4 (T + 64) (dk + 4) u relative to max |reference|.
double GdrTol(const Gdr& d) { return 4.0 * static_cast<double>((d.T + 64) * (d.dk + 4)) * kU; }

TEST(GdnOps, GatedDeltaRuleMatchesTransformersChunkedAndRecurrent) {
  const Gdr d = LoadGdr();
  ASSERT_GT(d.T, 64) << "the golden must cross transformers' 64-token chunk";
  for (const char* name : {"ref", "cpu"}) {
    std::unique_ptr<Backend> be = Make(name);
    const GdrRun r = RunGdr(*be, d, {d.T}, false);
    const double tol = GdrTol(d);
    EXPECT_LE(RelErr(r.out.data(), d.out_chunk.data.data(), r.out.size()), tol) << name;
    EXPECT_LE(RelErr(r.out.data(), d.out_rec.data.data(), r.out.size()), tol) << name;
    EXPECT_LE(RelErr(r.state.data(), d.state_chunk.data.data(), r.state.size()), tol) << name;
    EXPECT_LE(RelErr(r.state.data(), d.state_rec.data.data(), r.state.size()), tol) << name;
    std::printf("%s: out rel err %.3g (chunked) %.3g (recurrent), tol %.3g\n", name,
                RelErr(r.out.data(), d.out_chunk.data.data(), r.out.size()),
                RelErr(r.out.data(), d.out_rec.data.data(), r.out.size()), tol);
  }
}

TEST(GdnOps, CpuGatedDeltaRuleIsBitwiseInvariantToCutsBatchAndThreads) {
  const Gdr d = LoadGdr();
  std::unique_ptr<Backend> one = Make("cpu", 1);
  const GdrRun base = RunGdr(*one, d, {d.T}, false, true);
  std::mt19937_64 rng = testing::TestRng();
  for (int threads : {1, 2, 3}) {
    std::unique_ptr<Backend> be = Make("cpu", threads);
    std::vector<int64_t> cuts;
    for (int64_t left = d.T; left > 0;) {
      const int64_t n = std::min<int64_t>(left, 1 + static_cast<int64_t>(rng() % 70));
      cuts.push_back(n);
      left -= n;
    }
    const GdrRun r = RunGdr(*be, d, cuts, threads != 1);
    EXPECT_EQ(0, std::memcmp(r.out.data(), base.out.data(), r.out.size() * sizeof(float)))
        << threads << " threads, " << cuts.size() << " steps";
    EXPECT_EQ(0, std::memcmp(r.state.data(), base.state.data(), r.state.size() * sizeof(float)));
  }
}

// The checkpoint after row t is the final state of a run of rows [0, t] alone (ref and cpu).
TEST(GdnOps, CheckpointsAreTheStatesOfShorterRuns) {
  const Gdr d = LoadGdr();
  for (const char* name : {"ref", "cpu"}) {
    std::unique_ptr<Backend> be = Make(name);
    const GdrRun full = RunGdr(*be, d, {d.T}, false, true);
    for (int64_t t : {int64_t{0}, int64_t{40}, d.T - 2}) {
      const GdrRun prefix = RunGdr(*be, d, {t + 1}, false);
      EXPECT_EQ(0, std::memcmp(full.checks[t].data(), prefix.state.data(),
                               prefix.state.size() * sizeof(float)))
          << name << ": checkpoint after row " << t;
    }
    EXPECT_EQ(0, std::memcmp(full.checks[d.T - 1].data(), full.state.data(),
                             full.state.size() * sizeof(float)));
  }
}

TEST(GdnOps, StartAtPositionZeroIgnoresTheSlot) {
  const Gdr d = LoadGdr();
  const int64_t C = 2 * d.Hk * d.dk + d.Hv * d.dv;
  for (const char* name : {"ref", "cpu"}) {
    std::unique_ptr<Backend> be = Make(name);
    const GdnLayout l = d.layout(1);
    std::vector<float> conv(l.conv_floats(), NAN), ssm(l.ssm_floats(), NAN);  // garbage slot
    StepMeta m = Meta({4}, {0}, {0});
    ASSERT_TRUE(be->BeginStep(m).ok());
    std::vector<float> out(4 * d.Hv * d.dv, NAN);
    ASSERT_TRUE(be->GatedDeltaRule({const_cast<float*>(d.qkv.data()), 4, C},
                                   {const_cast<float*>(d.g.data()), 4, d.Hv},
                                   {const_cast<float*>(d.beta.data()), 4, d.Hv}, l,
                                   {conv.data(), ssm.data()}, 1e-6f, {out.data(), 4, d.Hv * d.dv})
                    .ok());
    for (float v : out) ASSERT_TRUE(std::isfinite(v)) << name;
    for (float v : ssm) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

// The element-wise GDN ops, cpu against ref on seeded random inputs. Bounds, per element:
//   GdnGates: g = A softplus(a + dt): the sum (u), expf / logf (2 ulp each, glibc), 1 +, the
//     product, the ref's rounding: ~8u relative to |g| away from cancellation; beta = 1 / (1 +
//     expf(-b)): ~5u. 32u covers both with the libm doubling of tolerances.h.
//   GatedRmsNorm: the RmsNorm bound (tolerances.h RmsNormRtol) plus silu(z) (kGluRtol).
TEST(GdnOps, CpuGatesAndGatedNormMatchRef) {
  std::mt19937_64 rng = testing::TestRng();
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::unique_ptr<Backend> ref = Make("ref"), cpu = Make("cpu", 3);
  const int64_t T = 37, H = 6, d = 16;
  auto fill = [&](std::vector<float>& v, float scale) {
    for (float& x : v) x = scale * n01(rng);
  };
  std::vector<float> a(T * H), b(T * H), dt(H), A(H);
  fill(a, 3.0f);
  fill(b, 3.0f);
  fill(dt, 1.0f);
  for (float& x : A) x = -std::exp(0.5f * n01(rng));
  a[5] = 25.0f;  // softplus' linear branch
  const Weight wdt = F32Weight(dt, 1, H), wa = F32Weight(A, 1, H);
  std::vector<float> g_ref(T * H, NAN), be_ref(T * H, NAN), g_cpu(T * H, NAN), be_cpu(T * H, NAN);
  ASSERT_TRUE(ref->GdnGates({a.data(), T, H}, {b.data(), T, H}, wdt, wa, {g_ref.data(), T, H},
                            {be_ref.data(), T, H}).ok());
  ASSERT_TRUE(cpu->GdnGates({a.data(), T, H}, {b.data(), T, H}, wdt, wa, {g_cpu.data(), T, H},
                            {be_cpu.data(), T, H}).ok());
  for (int64_t i = 0; i < T * H; ++i) {
    ASSERT_LE(std::fabs(g_cpu[i] - g_ref[i]), 32 * kU * std::fabs(g_ref[i]) + 0x1p-126) << i;
    ASSERT_LE(std::fabs(be_cpu[i] - be_ref[i]), 32 * kU * std::fabs(be_ref[i]) + 0x1p-126) << i;
  }
  // softplus(x) = x above 20 (torch, ggml): g = A * (25 + dt) there.
  EXPECT_NEAR(g_ref[5], A[5] * (25.0 + dt[5]), 1e-5 * std::fabs(g_ref[5]));

  std::vector<float> x(T * d), z(T * d), w(d), y_ref(T * d, NAN), y_cpu(T * d, NAN);
  fill(x, 2.0f);
  fill(z, 2.0f);
  for (float& v : w) v = 1.0f + 0.2f * n01(rng);
  const Weight ww = F32Weight(w, 1, d);
  ASSERT_TRUE(ref->GatedRmsNorm({x.data(), T, d}, ww, {z.data(), T, d}, 1e-6f, {y_ref.data(), T, d}).ok());
  ASSERT_TRUE(cpu->GatedRmsNorm({x.data(), T, d}, ww, {z.data(), T, d}, 1e-6f, {y_cpu.data(), T, d}).ok());
  const double rtol = static_cast<double>(d + 12) * kU + 16 * kU;
  for (int64_t i = 0; i < T * d; ++i) {
    ASSERT_LE(std::fabs(y_cpu[i] - y_ref[i]), rtol * std::fabs(y_ref[i]) + 0x1p-126) << i;
  }
  // The formula itself, in long double, for one row.
  long double ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += static_cast<long double>(x[i]) * x[i];
  const long double inv = 1.0L / std::sqrt(ss / d + 1e-6L);
  for (int64_t i = 0; i < d; ++i) {
    const long double want = x[i] * inv * w[i] * (z[i] / (1.0L + std::exp(-static_cast<long double>(z[i]))));
    EXPECT_NEAR(y_ref[i], static_cast<double>(want), 4 * kU * std::fabs(static_cast<double>(want)) + 1e-30);
  }
}

TEST(GdnOps, SplitHalvesSplitsEveryGroup) {
  for (const char* name : {"ref", "cpu"}) {
    std::unique_ptr<Backend> be = Make(name);
    const int64_t T = 3, n = 4, m = 5;
    std::vector<float> x(T * 2 * n * m), a(T * n * m, NAN), b(T * n * m, NAN);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    ASSERT_TRUE(be->SplitHalves({x.data(), T, 2 * n * m}, m, {a.data(), T, n * m}, {b.data(), T, n * m}).ok());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t g = 0; g < n; ++g) {
        for (int64_t i = 0; i < m; ++i) {
          ASSERT_EQ(a[t * n * m + g * m + i], x[t * 2 * n * m + 2 * g * m + i]) << name;
          ASSERT_EQ(b[t * n * m + g * m + i], x[t * 2 * n * m + 2 * g * m + m + i]) << name;
        }
      }
    }
  }
}

TEST(GdnOps, MissingStateSlotsAreRefusedByName) {
  std::unique_ptr<Backend> be = Make("cpu");
  const Gdr d = LoadGdr();
  const GdnLayout l = d.layout(1);
  std::vector<float> conv(l.conv_floats()), ssm(l.ssm_floats()), buf(1024);
  StepMeta m = Meta({1}, {5}, {});
  ASSERT_TRUE(be->BeginStep(m).ok());
  const int64_t C = l.channels();
  const absl::Status s = be->GatedDeltaRule({buf.data(), 1, C}, {buf.data(), 1, d.Hv},
                                            {buf.data(), 1, d.Hv}, l, {conv.data(), ssm.data()},
                                            1e-6f, {buf.data(), 1, d.Hv * d.dv});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("state_slots"), std::string::npos) << s;
}

}  // namespace
}  // namespace lockstep
