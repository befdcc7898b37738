// Every op of the cpu backend against the ref backend (the op oracle) on seeded random inputs,
// over many shapes and every weight type with a codec, held to the bounds of
// engine/core/tolerances.h (PagedAttention: tests/unit/paged_attention_test.cc). Outputs are poisoned with NaN before each op; a non-finite value in
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
#include "tests/support/paged_kv.h"
#include "tests/support/test_seed.h"

namespace lockstep {
namespace {

using testing::HostTensor;
using testing::RowsStep;
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
    ref_ = *backend::MakeBackend("ref");
    cpu_ = *backend::MakeBackend("cpu", {3});  // more workers than rows in some shapes, on purpose
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
        ASSERT_TRUE(ref_->MatMul(tw.w, HostTensor(x, T, cols), HostTensor(y_ref, T, rows)).ok());
        ASSERT_TRUE(cpu_->MatMul(tw.w, HostTensor(x, T, cols), HostTensor(y_cpu, T, rows)).ok());
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

TEST_F(BackendOpsTest, EmbedEveryTypeIsExact) {
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
        for (Backend* be : {ref_.get(), cpu_.get()}) {
          ASSERT_TRUE(be->BeginStep(RowsStep(ids, {})).ok());
          std::vector<float>& o = be == ref_.get() ? o_ref : o_cpu;
          ASSERT_TRUE(be->Embed(tw.w, HostTensor(o, T, cols)).ok());
        }
        Compare(absl::StrFormat("Embed %s cols=%d T=%d", tr.name, cols, T), o_ref, o_cpu,
                std::vector<double>(T * cols, tol::kGetRowsAtol));
        ++Cov().cases["Embed"];
        ++Cov().types["Embed"][tr.name];
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
          const Weight norm{quant::Type::F32, 1, d, w.data(), "test.norm"};
          const Weight* wp = with_weight ? &norm : nullptr;
          std::vector<float> y_ref(T * d, kNaN), y_cpu(T * d, kNaN);
          ASSERT_TRUE(ref_->RmsNorm(HostTensor(x, T, d), wp, eps, HostTensor(y_ref, T, d)).ok());
          ASSERT_TRUE(cpu_->RmsNorm(HostTensor(x, T, d), wp, eps, HostTensor(y_cpu, T, d)).ok());
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
          const int64_t cols = s.n_heads * s.head_dim;
          for (Backend* be : {ref_.get(), cpu_.get()}) {
            ASSERT_TRUE(be->BeginStep(RowsStep(std::vector<int32_t>(T, 0), pos)).ok());
            std::vector<float>& y = be == ref_.get() ? y_ref : y_cpu;
            ASSERT_TRUE(be->Rope(HostTensor(y, T, cols), s.n_heads, s.head_dim, s.n_rot, base,
                                 mode).ok());
          }
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

// RopeFreqFactors (gemma4's proportional RoPE): factors of 1 give Rope's bits on each backend;
// factors of 1e30 (llama.cpp's rope_freqs for unrotated pairs) leave those pairs as they were;
// cpu against ref within Rope's bound over random factors in [1, 8].
TEST_F(BackendOpsTest, RopeFreqFactors) {
  const int64_t T = 5, n_heads = 3, head_dim = 32, n_rot = 32, half = n_rot / 2, cols = n_heads * head_dim;
  std::vector<int32_t> pos(T);
  for (int32_t& p : pos) p = static_cast<int32_t>(rng_() % 40000);
  const std::vector<float> x = Uniform(rng_, T * cols, -2.0f, 2.0f);
  std::vector<float> ones(half, 1.0f), prop(half, 1e30f), rnd = Uniform(rng_, half, 1.0f, 8.0f),
      short_f(3, 1.0f);
  for (int64_t i = 0; i < 4; ++i) prop[i] = 1.0f;  // 4 rotated pairs of 16, as 0.25 of the head
  auto factors = [](std::vector<float>& f) {
    return Weight{quant::Type::F32, 1, static_cast<int64_t>(f.size()), f.data(), "rope_freqs"};
  };
  std::vector<float> y_rnd[2];
  for (Backend* be : {ref_.get(), cpu_.get()}) {
    ASSERT_TRUE(be->BeginStep(RowsStep(std::vector<int32_t>(T, 0), pos)).ok());
    std::vector<float> plain = x, one = x, p = x, r = x;
    ASSERT_TRUE(be->Rope(HostTensor(plain, T, cols), n_heads, head_dim, n_rot, 1e6f, RopeMode::kNeox).ok());
    ASSERT_TRUE(be->RopeFreqFactors(HostTensor(one, T, cols), n_heads, head_dim, n_rot, 1e6f,
                                    RopeMode::kNeox, factors(ones)).ok());
    EXPECT_EQ(std::memcmp(plain.data(), one.data(), plain.size() * sizeof(float)), 0) << be->name();
    ASSERT_TRUE(be->RopeFreqFactors(HostTensor(p, T, cols), n_heads, head_dim, n_rot, 1e6f,
                                    RopeMode::kNeox, factors(prop)).ok());
    for (int64_t th = 0; th < T * n_heads; ++th) {
      for (int64_t i = 4; i < half; ++i) {
        for (int64_t j : {th * head_dim + i, th * head_dim + i + half}) {
          EXPECT_EQ(p[j], x[j]) << be->name() << " element " << j;
        }
      }
    }
    ASSERT_TRUE(be->RopeFreqFactors(HostTensor(r, T, cols), n_heads, head_dim, n_rot, 1e6f,
                                    RopeMode::kNeox, factors(rnd)).ok());
    y_rnd[be == ref_.get() ? 0 : 1] = r;
    // A factors tensor of the wrong length is refused, naming the op.
    std::vector<float> y = x;
    const absl::Status bad = be->RopeFreqFactors(HostTensor(y, T, cols), n_heads, head_dim, n_rot,
                                                 1e6f, RopeMode::kNeox, factors(short_f));
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("RopeFreqFactors"), std::string_view::npos) << bad;
  }
  std::vector<double> bound(x.size());
  for (int64_t th = 0; th < T * n_heads; ++th) {
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = th * head_dim + i, b = a + half;
      bound[a] = bound[b] = tol::kRopeRtol * (std::fabs(x[a]) + std::fabs(x[b])) + tol::kAtol;
    }
  }
  Compare("RopeFreqFactors neox heads=3 head_dim=32 n_rot=32 T=5", y_rnd[0], y_rnd[1], bound);
  ++Cov().cases["RopeFreqFactors"];
}

TEST_F(BackendOpsTest, GluSiluAndGeluTanh) {
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    for (int64_t n : {1, 7, 1000, 70000}) {
      std::vector<float> gate = Uniform(rng_, n, -12.0f, 12.0f);
      for (int64_t i = 0; i < n; i += 97) gate[i] *= 10.0f;  // tails: sigmoid / tanh saturated
      const std::vector<float> up = Uniform(rng_, n, -4.0f, 4.0f);
      std::vector<float> o_ref(n, kNaN), o_cpu(n, kNaN);
      ASSERT_TRUE(ref_->Glu(HostTensor(gate, 1, n), HostTensor(up, 1, n), act,
                            HostTensor(o_ref, 1, n)).ok());
      ASSERT_TRUE(cpu_->Glu(HostTensor(gate, 1, n), HostTensor(up, 1, n), act,
                            HostTensor(o_cpu, 1, n)).ok());
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
      ASSERT_TRUE(ref_->Add(HostTensor(a, 1, n), HostTensor(b, 1, n), HostTensor(o_ref, 1, n)).ok());
      ASSERT_TRUE(cpu_->Add(HostTensor(a, 1, n), HostTensor(b, 1, n), HostTensor(o_cpu, 1, n)).ok());
      Compare(absl::StrFormat("Add n=%d", n), o_ref, o_cpu, exact);
      std::vector<float> in_place = a;  // out aliases a
      ASSERT_TRUE(cpu_->Add(HostTensor(in_place, 1, n), HostTensor(b, 1, n),
                            HostTensor(in_place, 1, n)).ok());
      Compare(absl::StrFormat("Add in place n=%d", n), o_ref, in_place, exact);
      Cov().cases["Add"] += 2;
    }
    for (float s : {0.125f, 24.0f, 0.3f}) {  // powers of two and a rounding one
      std::vector<float> o_ref(n, kNaN), o_cpu(n, kNaN);
      ASSERT_TRUE(ref_->Scale(HostTensor(a, 1, n), s, HostTensor(o_ref, 1, n)).ok());
      ASSERT_TRUE(cpu_->Scale(HostTensor(a, 1, n), s, HostTensor(o_cpu, 1, n)).ok());
      Compare(absl::StrFormat("Scale n=%d s=%g", n, s), o_ref, o_cpu, exact);
      std::vector<float> in_place = a;
      ASSERT_TRUE(cpu_->Scale(HostTensor(in_place, 1, n), s, HostTensor(in_place, 1, n)).ok());
      Compare(absl::StrFormat("Scale in place n=%d s=%g", n, s), o_ref, in_place, exact);
      Cov().cases["Scale"] += 2;
    }
    for (float cap : {30.0f, 50.0f}) {
      std::vector<float> x = Uniform(rng_, n, -4.0f * cap, 4.0f * cap);
      std::vector<float> o_ref = x, o_cpu = x;  // in place by contract
      ASSERT_TRUE(ref_->Softcap(HostTensor(o_ref, 1, n), cap).ok());
      ASSERT_TRUE(cpu_->Softcap(HostTensor(o_cpu, 1, n), cap).ok());
      std::vector<double> bound(n);
      for (int64_t i = 0; i < n; ++i) {
        bound[i] = tol::kSoftcapRtol * std::fabs(o_ref[i]) + tol::kAtol;
      }
      Compare(absl::StrFormat("Softcap n=%d cap=%g", n, cap), o_ref, o_cpu, bound);
      ++Cov().cases["Softcap"];
    }
  }
}

TEST_F(BackendOpsTest, GatherRowsIsExact) {
  const int64_t T = 7, d = 33;
  const std::vector<float> x = Uniform(rng_, T * d, -5.0f, 5.0f);
  for (const std::vector<int32_t>& rows : {std::vector<int32_t>{6}, {0, 3, 3, 6}, {}}) {
    const int64_t R = static_cast<int64_t>(rows.size());
    std::vector<float> o_ref(R * d, kNaN), o_cpu(R * d, kNaN);
    for (Backend* be : {ref_.get(), cpu_.get()}) {
      backend::StepMeta m = RowsStep(std::vector<int32_t>(T, 0), {});
      m.output_rows = rows;
      ASSERT_TRUE(be->BeginStep(m).ok());
      std::vector<float>& o = be == ref_.get() ? o_ref : o_cpu;
      ASSERT_TRUE(be->GatherRows(HostTensor(x, T, d), HostTensor(o, R, d)).ok());
    }
    for (int64_t i = 0; i < R; ++i) {
      for (int64_t c = 0; c < d; ++c) ASSERT_EQ(o_ref[i * d + c], x[rows[i] * d + c]);
    }
    Compare(absl::StrFormat("GatherRows R=%d", R), o_ref, o_cpu,
            std::vector<double>(R * d, 0.0));
    ++Cov().cases["GatherRows"];
  }
}

// Bad calls are errors (never aborts) that name what is wrong, on both backends.
TEST_F(BackendOpsTest, BadCallsAreErrorsThatNameTheCulprit) {
  quant::Type no_codec = quant::Type::F32;
  for (uint32_t id = 0; id < 64; ++id) {
    quant::TypeTraits tr;
    if (quant::LookupType(id, &tr) && !tr.lockstep_codec && tr.block_size > 0) {
      no_codec = static_cast<quant::Type>(id);
      break;
    }
  }
  ASSERT_NE(no_codec, quant::Type::F32) << "every type has a codec: pick another error case";
  const int64_t bs = quant::Traits(no_codec).block_size;
  std::vector<uint8_t> bytes(4096);
  const Weight bad_w{no_codec, 2, bs, bytes.data(), "nocodec.weight"};
  std::vector<float> x(4 * 64, 1.0f), y(4 * 64, kNaN);
  auto expect_error = [](const absl::Status& s, const std::string& needle, const char* be) {
    EXPECT_FALSE(s.ok()) << be << ": expected an error naming " << needle;
    EXPECT_NE(s.message().find(needle), std::string_view::npos)
        << be << ": '" << s.message() << "' does not name " << needle;
  };
  for (Backend* be : {ref_.get(), cpu_.get()}) {
    const char* n = be == ref_.get() ? "ref" : "cpu";
    expect_error(be->MatMul(bad_w, HostTensor(x, 1, bs), HostTensor(y, 1, 2)), "nocodec.weight", n);
    expect_error(be->MatMul(bad_w, HostTensor(x, 1, bs), HostTensor(y, 1, 2)),
                 quant::Traits(no_codec).name, n);
    ASSERT_TRUE(be->BeginStep(RowsStep({0}, {})).ok());
    expect_error(be->Embed(bad_w, HostTensor(y, 1, bs)), "nocodec.weight", n);
    const Weight f32_w{quant::Type::F32, 3, 16, bytes.data(), "f32.weight"};
    expect_error(be->MatMul(f32_w, HostTensor(x, 2, 15), HostTensor(y, 2, 3)), "x is [2, 15]", n);
    expect_error(be->MatMul(f32_w, HostTensor(x, 2, 16), HostTensor(y, 1, 3)), "y is [1, 3]", n);
    ASSERT_TRUE(be->BeginStep(RowsStep({5}, {})).ok());
    expect_error(be->Embed(f32_w, HostTensor(y, 1, 16)), "tokens[0] = 5", n);
    const Weight q_norm{quant::Type::Q8_0, 1, 32, bytes.data(), "q8.norm"};
    expect_error(be->RmsNorm(HostTensor(x, 2, 32), &q_norm, 1e-6f, HostTensor(y, 2, 32)),
                 "q8.norm", n);
    const Weight short_norm{quant::Type::F32, 1, 16, bytes.data(), "short.norm"};
    expect_error(be->RmsNorm(HostTensor(x, 2, 32), &short_norm, 1e-6f, HostTensor(y, 2, 32)),
                 "short.norm", n);
    expect_error(be->Add(HostTensor(x, 2, 8), HostTensor(x, 2, 9), HostTensor(y, 2, 8)),
                 "b is [2, 9]", n);
    ASSERT_TRUE(be->BeginStep(RowsStep({0, 0}, {})).ok());
    expect_error(be->Rope(HostTensor(x, 3, 8), 1, 8, 8, 10000.0f, RopeMode::kNeox), "x is [3, 8]",
                 n);
    std::vector<int32_t> picks(8, -7);
    expect_error(be->GreedyTokens(HostTensor(x, 2, 8), backend::IntTensor{picks.data(), 2, 1}),
                 "out is [2, 1], want [2, 2]", n);
    expect_error(be->GreedyTokens(HostTensor(x, 2, 0), backend::IntTensor{picks.data(), 2, 2}),
                 "logits is [2, 0]", n);
  }
  // Ops that read step metadata refuse to run before any step.
  auto fresh = *backend::MakeBackend("cpu", {1});
  expect_error(fresh->Rope(HostTensor(x, 1, 8), 1, 8, 8, 10000.0f, RopeMode::kNeox), "BeginStep",
               "cpu");
}

TEST(MakeBackendTest, KnownNamesAndErrors) {
  const std::vector<std::string> names = backend::BackendNames();
  EXPECT_EQ(names, (std::vector<std::string>{"cpu", "ref"}));  // ref registered from oracle/
  for (const char* name : {"ref", "cpu"}) {
    auto b = backend::MakeBackend(name, {2});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->name(), name);
  }
  auto bad = backend::MakeBackend("cuda-typo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cpu, ref"), std::string_view::npos) << bad.status();
  auto neg = backend::MakeBackend("cpu", {-1});
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("threads"), std::string_view::npos) << neg.status();
  EXPECT_FALSE(backend::RegisterBackend("cpu", nullptr));  // a name registers once
}

}  // namespace
}  // namespace lockstep
