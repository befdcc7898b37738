// The mixture-of-experts ops (backend.h: MoeRoute, MatMulExperts, MoeCombine, SigmoidMul) on ref
// and cpu: the router's top-k and tie rule against a sort written here from the contract, cpu
// against ref within the matmul tolerance (engine/core/tolerances.h), and the invariance contract
// of the expert-grouped matmul, bitwise on cpu: a (token, rank) row equals the plain MatMul row of
// its expert, alone or beside any other tokens, whichever tokens share its expert, at any thread
// count (docs/models.md, docs/backends.md).
//
// Seed: LOCKSTEP_SEED=<n> replays a run; without it a fresh seed is drawn and printed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/host_backend.h"
#include "engine/core/tolerances.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace lockstep {
namespace {

using backend::IntTensor;
using backend::Tensor;
using backend::Weight;

std::unique_ptr<backend::Backend> Make(const std::string& name, int threads = 2) {
  auto be = backend::MakeBackend(name, {threads});
  EXPECT_TRUE(be.ok()) << be.status();
  return std::move(*be);
}

std::vector<float> Normal(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The expert tensor [E * rpe, cols] in `type` (its bytes in *store).
Weight ExpertWeight(quant::Type type, const std::vector<float>& values, int64_t rows, int64_t cols,
                    std::vector<uint8_t>* store) {
  Weight w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.name = "test_exps";
  const int64_t rb = w.row_bytes();
  store->assign(rows * rb, 0);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(quant::Quantize(type, values.data() + r * cols, cols, store->data() + r * rb).ok());
  }
  w.data = store->data();
  return w;
}

// The contract, directly: experts ordered by (logit descending, id ascending), softmax in long
// double, the kept probabilities renormalized over the k kept.
void ExpectRouteIsContract(const std::vector<float>& logits, int64_t E, int64_t k, bool norm,
                           const std::vector<float>& w, const std::vector<int32_t>& ids,
                           double rtol, const std::string& what) {
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.data() + t * E;
    std::vector<std::pair<float, int32_t>> order;
    for (int32_t e = 0; e < E; ++e) order.push_back({-l[e], e});
    std::sort(order.begin(), order.end());
    long double m = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; ++e) m = std::max<long double>(m, l[e]);
    for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<long double>(l[e]) - m);
    long double kept = 0;
    for (int64_t j = 0; j < k; ++j) kept += std::exp(static_cast<long double>(-order[j].first) - m) / sum;
    for (int64_t j = 0; j < k; ++j) {
      ASSERT_EQ(ids[t * k + j], order[j].second) << what << ": token " << t << " rank " << j;
      long double p = std::exp(static_cast<long double>(-order[j].first) - m) / sum;
      if (norm) p /= kept;
      EXPECT_NEAR(w[t * k + j], static_cast<double>(p), rtol * static_cast<double>(p))
          << what << ": token " << t << " rank " << j;
    }
  }
}

TEST(MoeOps, RouteIsTopKWithLowerIdWinningTies) {
  std::mt19937_64 rng = testing::TestRng();
  const int64_t E = 8, k = 3;
  // Row 0: ties at the k-th place (ids 2, 5, 6 share the value) and at the top (0 and 7).
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, -3.0f, 0.25f, 0.5f, 0.5f, 2.0f};
  for (int t = 0; t < 40; ++t) {
    std::vector<float> row = Normal(rng, E);
    if (t % 4 == 0) row[t % E] = row[(t + 3) % E];  // a tie somewhere
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  for (const char* name : {"ref", "cpu"}) {
    auto be = Make(name);
    for (bool norm : {true, false}) {
      std::vector<float> w(T * k, NAN);
      std::vector<int32_t> ids(T * k, -1);
      ASSERT_TRUE(be->MoeRoute({logits.data(), T, E}, k, norm, {w.data(), T, k}, {ids.data(), T, k}).ok());
      EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 3), (std::vector<int32_t>{0, 7, 2}))
          << name;
      // Float softmax (cpu): a few ulps of the sum and the exp; ref: double, rounded once.
      ExpectRouteIsContract(logits, E, k, norm, w, ids, 16 * tol::kU,
                            std::string(name) + (norm ? " normalized" : " plain"));
    }
  }
}

TEST(MoeOps, RouteRefusesNonFiniteLogitsByPosition) {
  std::vector<float> logits = {0.0f, 1.0f, NAN, 2.0f};
  std::vector<float> w(2);
  std::vector<int32_t> ids(2);
  for (const char* name : {"ref", "cpu"}) {
    const absl::Status s = Make(name)->MoeRoute({logits.data(), 2, 2}, 1, true, {w.data(), 2, 1},
                                                {ids.data(), 2, 1});
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("logits[1, 0]"), std::string_view::npos) << s;
  }
}

// cpu within the matmul bound of ref for every op, F32 and F16 experts, x of T and T * k rows.
TEST(MoeOps, CpuMatchesRef) {
  std::mt19937_64 rng = testing::TestRng();
  const int64_t E = 6, k = 2, rpe = 24, cols = 64, T = 9;
  auto ref = Make("ref"), cpu = Make("cpu", 3);
  std::vector<int32_t> ids(T * k);
  for (int64_t t = 0; t < T; ++t) {  // distinct experts per token
    ids[t * k] = static_cast<int32_t>(rng() % E);
    ids[t * k + 1] = static_cast<int32_t>((ids[t * k] + 1 + rng() % (E - 1)) % E);
  }
  for (quant::Type type : {quant::Type::F32, quant::Type::F16}) {
    std::vector<uint8_t> store;
    const Weight w = ExpertWeight(type, Normal(rng, E * rpe * cols), E * rpe, cols, &store);
    for (int64_t xrows : {T, T * k}) {
      std::vector<float> x = Normal(rng, xrows * cols);
      std::vector<float> yr(T * k * rpe, NAN), yc(T * k * rpe, NAN);
      ASSERT_TRUE(ref->MatMulExperts(w, E, {x.data(), xrows, cols}, {ids.data(), T, k},
                                     {yr.data(), T * k, rpe}).ok());
      ASSERT_TRUE(cpu->MatMulExperts(w, E, {x.data(), xrows, cols}, {ids.data(), T, k},
                                     {yc.data(), T * k, rpe}).ok());
      std::vector<float> wrow(cols);
      for (int64_t i = 0; i < T * k; ++i) {
        const int64_t e = ids[i];
        const float* xi = x.data() + (xrows == T ? i / k : i) * cols;
        for (int64_t r = 0; r < rpe; ++r) {
          ASSERT_TRUE(quant::Dequantize(type, store.data() + (e * rpe + r) * w.row_bytes(), cols,
                                        wrow.data()).ok());
          double mag = 0;
          for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double{wrow[c]} * xi[c]);
          EXPECT_NEAR(yc[i * rpe + r], yr[i * rpe + r], tol::MatMulRtol(cols) * mag + tol::kAtol)
              << "row " << i << " r " << r;
        }
      }
    }
  }
  // MoeCombine and SigmoidMul: a handful of roundings each.
  const int64_t d = 40;
  std::vector<float> y = Normal(rng, T * k * d), wts = Normal(rng, T * k);
  std::vector<float> outr(T * d), outc(T * d);
  ASSERT_TRUE(ref->MoeCombine({y.data(), T * k, d}, {wts.data(), T, k}, {outr.data(), T, d}).ok());
  ASSERT_TRUE(cpu->MoeCombine({y.data(), T * k, d}, {wts.data(), T, k}, {outc.data(), T, d}).ok());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      double mag = 0;
      for (int64_t j = 0; j < k; ++j) mag += std::fabs(double{wts[t * k + j]} * y[(t * k + j) * d + c]);
      EXPECT_NEAR(outc[t * d + c], outr[t * d + c], (2 * k + 2) * tol::kU * mag) << t << "," << c;
    }
  }
  for (int64_t gcols : {d, int64_t{1}}) {
    std::vector<float> x = Normal(rng, T * d), g = Normal(rng, T * gcols);
    std::vector<float> sr(T * d), sc(T * d);
    ASSERT_TRUE(ref->SigmoidMul({x.data(), T, d}, {g.data(), T, gcols}, {sr.data(), T, d}).ok());
    ASSERT_TRUE(cpu->SigmoidMul({x.data(), T, d}, {g.data(), T, gcols}, {sc.data(), T, d}).ok());
    for (int64_t i = 0; i < T * d; ++i) {
      EXPECT_NEAR(sc[i], sr[i], 8 * tol::kU * std::fabs(sr[i])) << i;
    }
  }
}

// A token's expert rows, bitwise, do not depend on the other tokens of the step (how many, which
// experts they chose, so how many rows share its expert) nor on the thread count, and equal the
// plain MatMul of the expert's rows on that token (the same reduction order as a dense layer).
TEST(MoeOps, ExpertRowsIndependentOfOtherTokens) {
  std::mt19937_64 rng = testing::TestRng();
  const int64_t E = 5, k = 2, rpe = 33, cols = 96, T = 11;
  for (quant::Type type : {quant::Type::F32, quant::Type::F16, quant::Type::Q8_0}) {
    std::vector<uint8_t> store;
    const Weight w = ExpertWeight(type, Normal(rng, E * rpe * cols), E * rpe, cols, &store);
    std::vector<float> x = Normal(rng, T * cols);
    std::vector<int32_t> ids(T * k);
    for (int32_t& e : ids) e = static_cast<int32_t>(rng() % E);
    auto cpu2 = Make("cpu", 2);
    std::vector<float> y(T * k * rpe, NAN);
    ASSERT_TRUE(cpu2->MatMulExperts(w, E, {x.data(), T, cols}, {ids.data(), T, k},
                                    {y.data(), T * k, rpe}).ok());
    for (int threads : {1, 3, 4}) {
      auto cpu = Make("cpu", threads);
      for (int64_t t = 0; t < T; ++t) {
        // Alone: T = 1, only this token's ids.
        std::vector<float> y1(k * rpe, NAN);
        ASSERT_TRUE(cpu->MatMulExperts(w, E, {x.data() + t * cols, 1, cols},
                                       {ids.data() + t * k, 1, k}, {y1.data(), k, rpe}).ok());
        EXPECT_TRUE(SameBits(y.data() + t * k * rpe, y1.data(), k * rpe))
            << quant::Traits(type).name << " token " << t << " alone, " << threads << " threads";
        // Beside other neighbours: every other token re-routed to this token's first expert, so
        // its expert's group grows to ~T * k rows.
        std::vector<int32_t> crowd(T * k, ids[t * k]);
        std::copy(ids.begin() + t * k, ids.begin() + (t + 1) * k, crowd.begin() + t * k);
        std::vector<float> yc(T * k * rpe, NAN);
        ASSERT_TRUE(cpu->MatMulExperts(w, E, {x.data(), T, cols}, {crowd.data(), T, k},
                                       {yc.data(), T * k, rpe}).ok());
        EXPECT_TRUE(SameBits(y.data() + t * k * rpe, yc.data() + t * k * rpe, k * rpe))
            << quant::Traits(type).name << " token " << t << " in a crowd, " << threads << " threads";
        // The plain MatMul of expert e's rows on this token.
        for (int64_t j = 0; j < k; ++j) {
          Weight we = w;
          we.rows = rpe;
          we.data = store.data() + ids[t * k + j] * rpe * w.row_bytes();
          std::vector<float> yp(rpe, NAN);
          ASSERT_TRUE(cpu->MatMul(we, {x.data() + t * cols, 1, cols}, {yp.data(), 1, rpe}).ok());
          EXPECT_TRUE(SameBits(y.data() + (t * k + j) * rpe, yp.data(), rpe))
              << quant::Traits(type).name << " token " << t << " rank " << j << " vs MatMul";
        }
      }
    }
  }
}

// A backend that implements only the dense ops (as cuda does today): the MoE ops' default bodies
// refuse, naming the op and the backend.
class DenseOnlyBackend final : public backend::HostBackend {
 public:
  std::string_view name() const override { return "dense-only"; }
  absl::Status Embed(const Weight&, Tensor) override { return absl::OkStatus(); }
  absl::Status MatMul(const Weight&, Tensor, Tensor) override { return absl::OkStatus(); }
  absl::Status RmsNorm(Tensor, const Weight*, float, Tensor) override { return absl::OkStatus(); }
  absl::Status Rope(Tensor, int64_t, int64_t, int64_t, float, backend::RopeMode) override {
    return absl::OkStatus();
  }
  absl::Status KvWrite(const backend::KvLayout&, Tensor, Tensor, backend::KvLayer) override {
    return absl::OkStatus();
  }
  absl::Status PagedAttention(Tensor, const backend::KvLayout&, backend::KvLayer, int64_t, int64_t,
                              int64_t, const backend::AttentionParams&, Tensor) override {
    return absl::OkStatus();
  }
  absl::Status GatherRows(Tensor, Tensor) override { return absl::OkStatus(); }
  absl::Status Glu(Tensor, Tensor, backend::Activation, Tensor) override { return absl::OkStatus(); }
  absl::Status Add(Tensor, Tensor, Tensor) override { return absl::OkStatus(); }
  absl::Status Scale(Tensor, float, Tensor) override { return absl::OkStatus(); }
  absl::Status Softcap(Tensor, float) override { return absl::OkStatus(); }
};

TEST(MoeOps, BackendWithoutThemRefusesByName) {
  DenseOnlyBackend be;
  std::vector<float> f(64);
  std::vector<int32_t> ids(8);
  const Weight w{quant::Type::F32, 8, 8, f.data(), "w"};
  const absl::Status s[] = {
      be.MoeRoute({f.data(), 2, 4}, 2, true, {f.data(), 2, 2}, {ids.data(), 2, 2}),
      be.MatMulExperts(w, 2, {f.data(), 2, 8}, {ids.data(), 2, 1}, {f.data(), 2, 4}),
      be.MoeCombine({f.data(), 4, 4}, {f.data(), 2, 2}, {f.data(), 2, 4}),
      be.SigmoidMul({f.data(), 2, 4}, {f.data(), 2, 1}, {f.data(), 2, 4})};
  const char* ops[] = {"MoeRoute", "MatMulExperts", "MoeCombine", "SigmoidMul"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i].code(), absl::StatusCode::kUnimplemented) << ops[i];
    EXPECT_NE(s[i].message().find(std::string("the dense-only backend does not implement ") + ops[i]),
              std::string_view::npos)
        << s[i];
  }
}

TEST(MoeOps, ArgumentErrorsNameTheField) {
  std::vector<float> x(4 * 32), y(8 * 8);
  std::vector<int32_t> ids = {0, 1, 2, 9, 0, 0, 1, 1};
  std::vector<uint8_t> store;
  std::mt19937_64 rng(1);
  const Weight w = ExpertWeight(quant::Type::F32, Normal(rng, 4 * 8 * 32), 4 * 8, 32, &store);
  for (const char* name : {"ref", "cpu"}) {
    auto be = Make(name);
    absl::Status s = be->MatMulExperts(w, 4, {x.data(), 4, 32}, {ids.data(), 4, 2}, {y.data(), 8, 8});
    EXPECT_NE(s.message().find("ids[1, 1] = 9"), std::string_view::npos) << s;
    s = be->MatMulExperts(w, 3, {x.data(), 4, 32}, {ids.data(), 4, 2}, {y.data(), 8, 8});
    EXPECT_NE(s.message().find("3 experts"), std::string_view::npos) << s;
    s = be->MoeCombine({y.data(), 8, 8}, {x.data(), 4, 2}, {y.data(), 4, 8});
    EXPECT_NE(s.message().find("alias"), std::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace lockstep
