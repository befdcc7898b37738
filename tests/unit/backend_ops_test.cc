// Every op of the cpu backend against the ref backend (the op oracle) on seeded random inputs,
// over many shapes and every weight type with a codec, held to the bounds of
// engine/core/tolerances.h. Outputs are poisoned with NaN before each op; a non-finite value in
// either output fails (the inputs are finite and far from overflow, so neither may make one).
//
// Seed: LOCKSTEP_SEED=<n> replays a run; without it a fresh seed is drawn and printed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/core/tolerances.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "oracle/make_backend.h"

namespace lockstep {
namespace {

using testing::RunSeed;
using testing::TestRng;

using backend::Activation;
using backend::AttentionParams;
using backend::Backend;
using backend::RopeMode;
using backend::Weight;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> Uniform(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// What each op was checked over, printed at the end so "green" says over what (STYLE rule 5).
struct Coverage {
  std::map<std::string, int64_t> cases;
  std::map<std::string, std::map<std::string, int64_t>> types;  // op -> type -> cases
  std::map<std::string, double> worst;  // op -> max |cpu - ref| / bound over its elements
  int64_t elements = 0;
};
Coverage& Cov() {
  static Coverage c;
  return c;
}

class CoverageReporter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("[ coverage ] seed %llu, %lld output elements compared\n",
                static_cast<unsigned long long>(RunSeed()),
                static_cast<long long>(Cov().elements));
    for (const auto& [op, n] : Cov().cases) {
      std::string types;
      if (auto it = Cov().types.find(op); it != Cov().types.end()) {
        for (const auto& [t, k] : it->second) types += absl::StrFormat(" %s:%d", t, k);
      }
      std::printf("[ coverage ] %-10s %5lld cases, worst |cpu-ref|/bound %.3g%s\n", op.c_str(),
                  static_cast<long long>(n), Cov().worst[op],
                  types.empty() ? "" : ("\n[ coverage ]   types" + types).c_str());
    }
  }
};
[[maybe_unused]] const auto* const kReporter =
    ::testing::AddGlobalTestEnvironment(new CoverageReporter);

// Compares cpu against ref element by element: |cpu - ref| <= bound[i], both finite.
// Returns the number of failures and prints the first few with `what` (op, shape, type).
int64_t Compare(const std::string& what, const std::vector<float>& ref,
                const std::vector<float>& cpu, const std::vector<double>& bound) {
  int64_t failures = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool finite = std::isfinite(ref[i]) && std::isfinite(cpu[i]);
    const double err = finite ? std::fabs(double{cpu[i]} - double{ref[i]}) : INFINITY;
    if (bound[i] > 0) worst_ratio = std::max(worst_ratio, err / bound[i]);
    if (finite && err <= bound[i]) continue;
    if (++failures <= 5) {
      ADD_FAILURE() << what << ": element " << i << " cpu " << absl::StrFormat("%.9g", cpu[i])
                    << " ref " << absl::StrFormat("%.9g", ref[i]) << " |diff| "
                    << absl::StrFormat("%.3g", err) << " > bound "
                    << absl::StrFormat("%.3g", bound[i])
                    << (finite ? "" : " (non-finite output: NaN/Inf never passes)");
    }
  }
  if (failures > 5) ADD_FAILURE() << what << ": " << failures << " failing elements in all";
  double& worst = Cov().worst[what.substr(0, what.find(' '))];
  worst = std::max(worst, worst_ratio);
  Cov().elements += static_cast<int64_t>(ref.size());
  return failures;
}

// A [rows, cols] weight of `type` quantized from random floats, and its dequantized values.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // [rows, cols]
  Weight w;
};
TestWeight MakeWeight(std::mt19937_64& rng, quant::Type type, int64_t rows, int64_t cols) {
  TestWeight tw;
  // Row magnitudes spread over two decades, as real projection rows are.
  std::vector<float> src(rows * cols);
  std::uniform_real_distribution<float> row_scale(0.05f, 5.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = row_scale(rng);
    std::vector<float> row = Uniform(rng, cols, -s, s);
    std::copy(row.begin(), row.end(), src.begin() + r * cols);
  }
  tw.w = Weight{type, rows, cols, nullptr, "test.weight"};
  tw.bytes.resize(rows * tw.w.row_bytes());
  EXPECT_TRUE(quant::Quantize(type, src.data(), rows * cols, tw.bytes.data()).ok());
  tw.w.data = tw.bytes.data();
  tw.dequantized.resize(rows * cols);
  EXPECT_TRUE(quant::Dequantize(type, tw.bytes.data(), rows * cols, tw.dequantized.data()).ok());
  return tw;
}

class BackendOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = *oracle::MakeBackend("ref");
    cpu_ = *oracle::MakeBackend("cpu", 3);  // more workers than rows in some shapes, on purpose
    rng_ = TestRng();
  }
  std::unique_ptr<Backend> ref_, cpu_;
  std::mt19937_64 rng_;
};

TEST_F(BackendOpsTest, MatMulEveryTypeManyShapes) {
  // (rows, T) pairs: a single row, rows that do not fill a tile, T odd and even.
  const std::vector<std::pair<int64_t, int64_t>> rows_t = {{1, 1}, {3, 2}, {8, 3}, {9, 8}, {17, 5}};
  for (quant::Type type : quant::CodecTypes()) {
    const quant::TypeTraits tr = quant::Traits(type);
    std::vector<int64_t> cols_list;
    if (tr.block_size == 1) {
      cols_list = {1, 3, 15, 16, 17, 33, 100, 576};  // every lane-tail length class
    } else {
      for (int64_t k : {1, 2, 3, 5}) cols_list.push_back(k * tr.block_size);
      if (tr.block_size <= 64) cols_list.push_back(576);  // SmolLM2's hidden size
    }
    for (int64_t cols : cols_list) {
      for (const auto& [rows, T] : rows_t) {
        TestWeight tw = MakeWeight(rng_, type, rows, cols);
        std::vector<float> x = Uniform(rng_, T * cols, -2.0f, 2.0f);
        std::vector<float> y_ref(T * rows, kNaN), y_cpu(T * rows, kNaN);
        ref_->MatMul(tw.w, x.data(), T, y_ref.data());
        cpu_->MatMul(tw.w, x.data(), T, y_cpu.data());
        std::vector<double> bound(T * rows);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            double abs_sum = 0.0;  // sum_c |w_rc x_tc|
            for (int64_t c = 0; c < cols; ++c) {
              abs_sum += std::fabs(double{tw.dequantized[r * cols + c]} * x[t * cols + c]);
            }
            bound[t * rows + r] = tol::MatMulRtol(cols) * abs_sum + tol::kAtol;
          }
        }
        Compare(absl::StrFormat("MatMul %s rows=%d cols=%d T=%d", tr.name, rows, cols, T), y_ref,
                y_cpu, bound);
        ++Cov().cases["MatMul"];
        ++Cov().types["MatMul"][tr.name];
      }
    }
  }
}

TEST_F(BackendOpsTest, GetRowsEveryTypeIsExact) {
  for (quant::Type type : quant::CodecTypes()) {
    const quant::TypeTraits tr = quant::Traits(type);
    for (int64_t blocks : {1, 3}) {
      const int64_t cols = blocks * tr.block_size * (tr.block_size == 1 ? 37 : 1);
      const int64_t rows = 11;
      TestWeight tw = MakeWeight(rng_, type, rows, cols);
      for (int64_t T : {1, 4, 9}) {
        std::vector<int32_t> ids(T);
        for (int32_t& id : ids) id = static_cast<int32_t>(rng_() % rows);  // repeats allowed
        std::vector<float> o_ref(T * cols, kNaN), o_cpu(T * cols, kNaN);
        ref_->GetRows(tw.w, ids.data(), T, o_ref.data());
        cpu_->GetRows(tw.w, ids.data(), T, o_cpu.data());
        Compare(absl::StrFormat("GetRows %s cols=%d T=%d", tr.name, cols, T), o_ref, o_cpu,
                std::vector<double>(T * cols, tol::kGetRowsAtol));
        ++Cov().cases["GetRows"];
        ++Cov().types["GetRows"][tr.name];
      }
    }
  }
}

TEST_F(BackendOpsTest, RmsNorm) {
  for (int64_t d : {1, 5, 16, 17, 64, 576, 1000, 2048}) {
    for (int64_t T : {1, 3, 7}) {
      for (bool with_weight : {false, true}) {
        for (float eps : {1e-5f, 1e-6f}) {
          std::vector<float> x = Uniform(rng_, T * d, -3.0f, 3.0f);
          std::vector<float> w = Uniform(rng_, d, 0.5f, 1.5f);
          const float* wp = with_weight ? w.data() : nullptr;
          std::vector<float> y_ref(T * d, kNaN), y_cpu(T * d, kNaN);
          ref_->RmsNorm(x.data(), wp, T, d, eps, y_ref.data());
          cpu_->RmsNorm(x.data(), wp, T, d, eps, y_cpu.data());
          std::vector<double> bound(T * d);
          for (size_t i = 0; i < bound.size(); ++i) {
            bound[i] = tol::RmsNormRtol(d) * std::fabs(y_ref[i]) + tol::kAtol;
          }
          Compare(absl::StrFormat("RmsNorm d=%d T=%d weight=%d eps=%g", d, T, with_weight, eps),
                  y_ref, y_cpu, bound);
          ++Cov().cases["RmsNorm"];
        }
      }
    }
  }
}

TEST_F(BackendOpsTest, RopeNormalAndNeox) {
  struct Shape { int64_t n_heads, head_dim, n_rot; };
  const std::vector<Shape> shapes = {{1, 2, 2}, {1, 4, 4}, {3, 64, 64}, {2, 128, 64}, {4, 256, 256},
                                     {9, 64, 64}};
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (const Shape& s : shapes) {
      for (int64_t T : {1, 5}) {
        for (float base : {10000.0f, 1000000.0f}) {
          std::vector<int32_t> pos(T);
          for (int32_t& p : pos) p = static_cast<int32_t>(rng_() % 40000);
          const std::vector<float> x = Uniform(rng_, T * s.n_heads * s.head_dim, -2.0f, 2.0f);
          std::vector<float> y_ref = x, y_cpu = x;  // in place: the inputs are the outputs
          ref_->Rope(y_ref.data(), pos.data(), T, s.n_heads, s.head_dim, s.n_rot, base, mode);
          cpu_->Rope(y_cpu.data(), pos.data(), T, s.n_heads, s.head_dim, s.n_rot, base, mode);
          std::vector<double> bound(x.size(), 0.0);  // dims past n_rot: untouched, exact
          const int64_t half = s.n_rot / 2;
          for (int64_t th = 0; th < T * s.n_heads; ++th) {
            const int64_t base_i = th * s.head_dim;
            for (int64_t i = 0; i < half; ++i) {
              const int64_t a = base_i + (mode == RopeMode::kNormal ? 2 * i : i);
              const int64_t b = base_i + (mode == RopeMode::kNormal ? 2 * i + 1 : i + half);
              const double pair = std::fabs(x[a]) + std::fabs(x[b]);
              bound[a] = bound[b] = tol::kRopeRtol * pair + tol::kAtol;
            }
          }
          Compare(absl::StrFormat("Rope %s heads=%d head_dim=%d n_rot=%d T=%d base=%g",
                                  mode == RopeMode::kNormal ? "normal" : "neox", s.n_heads,
                                  s.head_dim, s.n_rot, T, base),
                  y_ref, y_cpu, bound);
          ++Cov().cases["Rope"];
        }
      }
    }
  }
}

TEST_F(BackendOpsTest, AttentionCausalGqaWindowSoftcap) {
  struct Shape { int64_t n_head, n_kv_head, head_dim; };
  const std::vector<Shape> shapes = {{1, 1, 4}, {4, 1, 64}, {4, 2, 20}, {8, 8, 16}, {6, 2, 128},
                                     {2, 1, 256}, {9, 3, 64}};
  // (T, n_kv): decode, a chunk at the end of the cache, a whole prefill.
  const std::vector<std::pair<int64_t, int64_t>> t_kv = {{1, 1}, {1, 37}, {5, 40}, {16, 16}};
  for (const Shape& s : shapes) {
    for (const auto& [T, n_kv] : t_kv) {
      for (int64_t window : {0, 1, 4, 16}) {
        for (float softcap : {0.0f, 50.0f, 3.0f}) {
          AttentionParams p;
          p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
          p.window = window;
          p.softcap = softcap;
          std::vector<int32_t> pos(T);
          for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(n_kv - T + t);
          const int64_t q_n = T * s.n_head * s.head_dim, kv_n = n_kv * s.n_kv_head * s.head_dim;
          const std::vector<float> q = Uniform(rng_, q_n, -2.0f, 2.0f);
          const std::vector<float> k = Uniform(rng_, kv_n, -2.0f, 2.0f);
          const std::vector<float> v = Uniform(rng_, kv_n, -3.0f, 3.0f);
          std::vector<float> o_ref(q_n, kNaN), o_cpu(q_n, kNaN);
          ref_->Attention(q.data(), pos.data(), T, k.data(), v.data(), n_kv, s.n_head,
                          s.n_kv_head, s.head_dim, p, o_ref.data());
          cpu_->Attention(q.data(), pos.data(), T, k.data(), v.data(), n_kv, s.n_head,
                          s.n_kv_head, s.head_dim, p, o_cpu.data());
          std::vector<double> bound(q_n);
          const int64_t group = s.n_head / s.n_kv_head;
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t h = 0; h < s.n_head; ++h) {
              const int64_t g = h / group;
              const float* qth = q.data() + (t * s.n_head + h) * s.head_dim;
              int64_t n_keys = 0;
              double score_abs_max = 0.0;
              std::vector<double> v_abs_max(s.head_dim, 0.0);
              for (int64_t j = 0; j < n_kv; ++j) {
                if (j > pos[t] || (window > 0 && pos[t] - j >= window)) continue;
                ++n_keys;
                const float* kj = k.data() + (j * s.n_kv_head + g) * s.head_dim;
                const float* vj = v.data() + (j * s.n_kv_head + g) * s.head_dim;
                double abs_dot = 0.0;
                for (int64_t d = 0; d < s.head_dim; ++d) {
                  abs_dot += std::fabs(double{qth[d]} * kj[d]);
                }
                score_abs_max = std::max(score_abs_max, std::fabs(p.scale) * abs_dot);
                for (int64_t d = 0; d < s.head_dim; ++d) {
                  v_abs_max[d] = std::max(v_abs_max[d], double{std::fabs(vj[d])});
                }
              }
              for (int64_t d = 0; d < s.head_dim; ++d) {
                bound[(t * s.n_head + h) * s.head_dim + d] =
                    tol::AttentionBound(s.head_dim, n_keys, score_abs_max, v_abs_max[d]) +
                    tol::kAtol;
              }
            }
          }
          Compare(absl::StrFormat("Attention heads=%d/%d head_dim=%d T=%d n_kv=%d window=%d "
                                  "softcap=%g",
                                  s.n_head, s.n_kv_head, s.head_dim, T, n_kv, window, softcap),
                  o_ref, o_cpu, bound);
          ++Cov().cases["Attention"];
        }
      }
    }
  }
}

TEST_F(BackendOpsTest, GluSiluAndGeluTanh) {
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    for (int64_t n : {1, 7, 1000, 70000}) {
      std::vector<float> gate = Uniform(rng_, n, -12.0f, 12.0f);
      for (int64_t i = 0; i < n; i += 97) gate[i] *= 10.0f;  // tails: sigmoid / tanh saturated
      const std::vector<float> up = Uniform(rng_, n, -4.0f, 4.0f);
      std::vector<float> o_ref(n, kNaN), o_cpu(n, kNaN);
      ref_->Glu(gate.data(), up.data(), n, act, o_ref.data());
      cpu_->Glu(gate.data(), up.data(), n, act, o_cpu.data());
      std::vector<double> bound(n);
      for (int64_t i = 0; i < n; ++i) {
        bound[i] = tol::kGluRtol * std::fabs(double{gate[i]} * up[i]) + tol::kAtol;
      }
      Compare(absl::StrFormat("Glu %s n=%d", act == Activation::kSilu ? "silu" : "gelu-tanh", n),
              o_ref, o_cpu, bound);
      ++Cov().cases["Glu"];
    }
  }
}

TEST_F(BackendOpsTest, AddScaleSoftcapIncludingInPlace) {
  for (int64_t n : {1, 17, 40000, 100003}) {
    const std::vector<float> a = Uniform(rng_, n, -100.0f, 100.0f);
    const std::vector<float> b = Uniform(rng_, n, -1.0f, 1.0f);
    const std::vector<double> exact(n, tol::kElementwiseAtol);
    {
      std::vector<float> o_ref(n, kNaN), o_cpu(n, kNaN);
      ref_->Add(a.data(), b.data(), n, o_ref.data());
      cpu_->Add(a.data(), b.data(), n, o_cpu.data());
      Compare(absl::StrFormat("Add n=%d", n), o_ref, o_cpu, exact);
      std::vector<float> in_place = a;  // out aliases a
      cpu_->Add(in_place.data(), b.data(), n, in_place.data());
      Compare(absl::StrFormat("Add in place n=%d", n), o_ref, in_place, exact);
      Cov().cases["Add"] += 2;
    }
    for (float s : {0.125f, 24.0f, 0.3f}) {  // powers of two and a rounding one
      std::vector<float> o_ref(n, kNaN), o_cpu(n, kNaN);
      ref_->Scale(a.data(), s, n, o_ref.data());
      cpu_->Scale(a.data(), s, n, o_cpu.data());
      Compare(absl::StrFormat("Scale n=%d s=%g", n, s), o_ref, o_cpu, exact);
      std::vector<float> in_place = a;
      cpu_->Scale(in_place.data(), s, n, in_place.data());
      Compare(absl::StrFormat("Scale in place n=%d s=%g", n, s), o_ref, in_place, exact);
      Cov().cases["Scale"] += 2;
    }
    for (float cap : {30.0f, 50.0f}) {
      std::vector<float> x = Uniform(rng_, n, -4.0f * cap, 4.0f * cap);
      std::vector<float> o_ref = x, o_cpu = x;  // in place by contract
      ref_->Softcap(o_ref.data(), n, cap);
      cpu_->Softcap(o_cpu.data(), n, cap);
      std::vector<double> bound(n);
      for (int64_t i = 0; i < n; ++i) {
        bound[i] = tol::kSoftcapRtol * std::fabs(o_ref[i]) + tol::kAtol;
      }
      Compare(absl::StrFormat("Softcap n=%d cap=%g", n, cap), o_ref, o_cpu, bound);
      ++Cov().cases["Softcap"];
    }
  }
}

TEST(MakeBackendTest, KnownNamesAndError) {
  for (const char* name : {"ref", "cpu"}) {
    auto b = oracle::MakeBackend(name, 2);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->name(), name);
  }
  auto bad = oracle::MakeBackend("cuda-typo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ref, cpu"), std::string_view::npos) << bad.status();
  EXPECT_FALSE(oracle::MakeBackend("cpu", -1).ok());
}

}  // namespace
}  // namespace lockstep
