// The naive forward (oracle/naive_forward.h) as a model oracle for decode steps.
//
// First the oracle itself is held to oracles nobody here wrote: its dequantizer to the gguf
// package (golden/quant), its forward to transformers (golden/tiny: full logits of the tiny
// random models; golden/real: top-256 logits of the real models' prompts). Then the engine's
// decode path (models::Runner over a paged, shuffled KV pool, one token per step, greedy) is
// compared with it at every decode step: the tiny models, SmolLM2-135M Q4_1 and Gemma 3 270M
// Q4_K_M, whose run crosses the 512-token sliding window. The naive forward recomputes every
// position from scratch; that its rows over a whole sequence are what one call per step gives is
// checked bit for bit (every step on the tiny models, spot steps on the real ones).
// docs/testing.md, "The naive forward".
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/compare.h"
#include "engine/core/npy.h"
#include "engine/core/tolerances.h"
#include "engine/gguf/gguf.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"
#include "engine/store/model_store.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "oracle/naive_forward.h"
#include "tests/support/engine_decode.h"
#include "tests/support/golden_manifest.h"

namespace lockstep {
namespace {

const std::string kSrc = std::string(LOCKSTEP_SOURCE_DIR) + "/";

int Threads() { return std::max(1u, std::thread::hardware_concurrency()); }

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// ---- the dequantizer against the gguf package ----

// golden/quant/<T>.bin (layout: oracle/gen_quant_golden.py): every dequant block of every type
// the naive dequantizer covers must give the package's float32 bit for bit once rounded (NaN:
// any NaN); an uncovered type must be refused by name.
TEST(NaiveDequantize, MatchesGgufPackage) {
  for (const std::string& f : testing::CheckManifest(kSrc + "golden/quant")) ADD_FAILURE() << f;
  const nlohmann::json m = nlohmann::json::parse(ReadFile(kSrc + "golden/quant/MANIFEST.json"));
  int covered = 0, refused = 0;
  int64_t elements = 0;
  for (const auto& e : m.at("files")) {
    const std::string b = ReadFile(kSrc + "golden/quant/" + e.at("file").get<std::string>());
    ASSERT_GE(b.size(), 32u);
    uint32_t h[8];
    memcpy(h, b.data(), 32);
    const auto type = static_cast<quant::Type>(h[2]);
    const int64_t bs = h[3], ts = h[4], n_blocks = h[5];
    const auto* in = reinterpret_cast<const uint8_t*>(b.data() + 32);
    const char* want = b.data() + 32 + n_blocks * ts;
    std::vector<double> got(n_blocks * bs);
    const absl::Status s = oracle::NaiveDequantize(type, in, n_blocks * bs, got.data());
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
      EXPECT_NE(std::string(s.message()).find(quant::Traits(type).name), std::string::npos) << s;
      ++refused;
      continue;
    }
    int bad = 0;
    for (int64_t i = 0; i < n_blocks * bs; ++i) {
      float w;
      memcpy(&w, want + 4 * i, 4);
      const float g = static_cast<float>(got[i]);
      const bool ok = std::isnan(w) ? std::isnan(g) : memcmp(&w, &g, 4) == 0;
      if (!ok && ++bad <= 3) {
        ADD_FAILURE() << quant::Traits(type).name << " element " << i << ": package " << w
                      << " naive " << g;
      }
    }
    ++covered;
    elements += n_blocks * bs;
  }
  EXPECT_GE(covered, 14);  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K IQ4_NL IQ4_XS NVFP4
  std::printf("[ covered ] naive dequantizer: %d types, %lld elements bitwise vs gguf-py; "
              "%d types refused by name\n", covered, static_cast<long long>(elements), refused);
}

// ---- helpers ----

struct RowStats {
  int64_t rows = 0, decisive = 0, decisive_agree = 0;
  double err2 = 0, ref2 = 0, max_abs = 0, max_lse = 0;
  double nmse() const { return ref2 > 0 ? err2 / ref2 : INFINITY; }
};

double LogSumExp(const float* x, int64_t n) {
  double mx = -INFINITY, s = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return mx + std::log(s);
}
double LogSumExp(const double* x, int64_t n) {
  double mx = -INFINITY, s = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return mx + std::log(s);
}

// One full row `a` (under test) against the naive row `ref`, into *st. NaN fails.
void CompareRow(const float* a, const double* ref, int64_t V, double margin, RowStats* st,
                const std::string& where) {
  int64_t am = 0, r1 = 0, r2 = -1;
  for (int64_t v = 0; v < V; ++v) {
    if (!std::isfinite(a[v]) || !std::isfinite(ref[v])) {
      ADD_FAILURE() << where << ": non-finite logit at token " << v;
      return;
    }
    const double d = a[v] - ref[v];
    st->err2 += d * d;
    st->ref2 += ref[v] * ref[v];
    st->max_abs = std::max(st->max_abs, std::fabs(d));
    if (a[v] > a[am]) am = v;
    if (ref[v] > ref[r1]) {
      r2 = r1;
      r1 = v;
    } else if (v != r1 && (r2 < 0 || ref[v] > ref[r2])) {
      r2 = v;
    }
  }
  st->max_lse = std::max(st->max_lse, std::fabs(LogSumExp(a, V) - LogSumExp(ref, V)));
  ++st->rows;
  if (r2 >= 0 && ref[r1] - ref[r2] > margin) {
    ++st->decisive;
    if (am == r1) {
      ++st->decisive_agree;
    } else {
      ADD_FAILURE() << where << ": engine argmax " << am << ", naive " << r1 << " (margin "
                    << ref[r1] - ref[r2] << ")";
    }
  }
}

using testing_support::Decoded;
using testing_support::EngineDecode;

std::unique_ptr<oracle::NaiveModel> LoadNaive(const gguf::File& f) {
  auto m = oracle::NaiveModel::Load(f, Threads());
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// ---- tiny models: the oracle against transformers, then the engine's decode against it ----

class NaiveTiny : public ::testing::TestWithParam<std::string> {};

TEST_P(NaiveTiny, MatchesTransformersAndEngineDecode) {
  const std::string arch = GetParam(), dir = kSrc + "golden/tiny/" + arch + "/";
  for (const std::string& f : testing::CheckManifest(kSrc + "golden/tiny")) ADD_FAILURE() << f;
  auto file = gguf::File::Open(dir + arch + ".gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  std::unique_ptr<oracle::NaiveModel> naive = LoadNaive(*file);
  ASSERT_NE(naive, nullptr);
  const int64_t V = naive->config().n_vocab;

  // The oracle vs transformers' float32 eager forward, every position, full vocabulary.
  // Tolerance: kTinyGoldenNmse (tolerances.h: float32 rounding through <= 6 layers, 1e-10
  // expected); the naive side is exact to ~1e-16, so the whole budget is transformers'.
  RowStats hf;
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> ids = nlohmann::json::parse(
        ReadFile(dir + "prompt" + std::to_string(i) + ".json")).get<std::vector<int32_t>>();
    auto g = npy::Read(dir + "logits" + std::to_string(i) + ".npy");
    ASSERT_TRUE(g.ok()) << g.status();
    auto ours = naive->Logits(ids, 0);
    ASSERT_TRUE(ours.ok()) << ours.status();
    ASSERT_EQ(g->data.size(), ours->size());
    for (size_t t = 0; t < ids.size(); ++t) {
      // Roles swapped on purpose: transformers is the one under test here, the naive row the
      // reference, so NMSE is relative to the exact logits.
      CompareRow(g->data.data() + t * V, ours->data() + t * V, V, tol::kGoldenDecisiveMargin, &hf,
                 arch + " prompt " + std::to_string(i) + " position " + std::to_string(t));
    }
  }
  EXPECT_LE(hf.nmse(), tol::kTinyGoldenNmse);
  std::printf("[ golden ] naive %s vs transformers: %lld positions, NMSE %.3g, max |d| %.3g\n",
              arch.c_str(), static_cast<long long>(hf.rows), hf.nmse(), hf.max_abs);

  // The engine's greedy decode, 48 steps from prompt 2 (13 tokens): 61 positions, far past the
  // tiny gemma3's window of 4.
  auto model = models::Model::Load(dir + arch + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  auto be = backend::MakeBackend("cpu", {2});
  ASSERT_TRUE(be.ok()) << be.status();
  const std::vector<int32_t> prompt =
      nlohmann::json::parse(ReadFile(dir + "prompt2.json")).get<std::vector<int32_t>>();
  const int64_t steps = 48, P = static_cast<int64_t>(prompt.size());
  auto dec = EngineDecode(**model, **be, prompt, {}, steps);
  ASSERT_TRUE(dec.ok()) << dec.status();
  auto full = naive->Logits(dec->tokens, P - 1);
  ASSERT_TRUE(full.ok()) << full.status();
  // One thread gives the same bits as several.
  auto serial = oracle::NaiveModel::Load(*file, 1);
  ASSERT_TRUE(serial.ok()) << serial.status();
  auto full1 = (*serial)->Logits(dec->tokens, P - 1);
  ASSERT_TRUE(full1.ok()) << full1.status();
  ASSERT_EQ(0, memcmp(full1->data(), full->data(), full->size() * sizeof(double)));
  // Every step recomputed from scratch gives the row of the full pass, bit for bit.
  for (int64_t s = 0; s <= steps; ++s) {
    auto one = naive->Logits(std::span(dec->tokens).first(P + s), P + s - 1);
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_EQ(0, memcmp(one->data(), full->data() + s * V, V * sizeof(double))) << "step " << s;
  }
  RowStats st;
  for (int64_t s = 0; s <= steps; ++s) {
    CompareRow(dec->logits.data() + s * V, full->data() + s * V, V, tol::kGoldenDecisiveMargin,
               &st, arch + " decode step " + std::to_string(s));
  }
  // Same budget as against transformers: the cpu backend is float32 with its own order.
  EXPECT_LE(st.nmse(), tol::kTinyGoldenNmse);
  EXPECT_EQ(st.decisive, st.decisive_agree);
  std::printf("[ golden ] engine %s decode vs naive: %lld steps, NMSE %.3g, max |d| %.3g, "
              "top-1 %lld/%lld decisive\n", arch.c_str(), static_cast<long long>(st.rows),
              st.nmse(), st.max_abs, static_cast<long long>(st.decisive_agree),
              static_cast<long long>(st.decisive));
}

INSTANTIATE_TEST_SUITE_P(Archs, NaiveTiny, ::testing::Values("llama", "qwen3", "gemma3"),
                         [](const auto& info) { return info.param; });

// ---- real models ----

struct RealCase {
  std::string model;      // known model name
  int64_t prompt_tokens;  // the prompt: the first N ids of golden/tokenizer's long paragraph
  int64_t steps;          // decode steps
};
void PrintTo(const RealCase& c, std::ostream* os) { *os << c.model; }

class NaiveReal : public ::testing::TestWithParam<RealCase> {};

TEST_P(NaiveReal, MatchesTransformersAndEngineDecode) {
  const RealCase& c = GetParam();
  const store::KnownModel* km = store::FindKnownModel(c.model);
  ASSERT_NE(km, nullptr);
  ASSERT_TRUE(store::IsCached(*km)) << store::CachedPath(*km) << " is missing: run `build/bin/"
                                    << "lockstep pull " << c.model << "` (make test does)";
  auto t0 = std::chrono::steady_clock::now();
  auto file = gguf::File::Open(store::CachedPath(*km));
  ASSERT_TRUE(file.ok()) << file.status();
  std::unique_ptr<oracle::NaiveModel> naive = LoadNaive(*file);
  ASSERT_NE(naive, nullptr);
  const int64_t V = naive->config().n_vocab;
  std::printf("naive %s loaded in %.1f s\n", c.model.c_str(), Seconds(t0));

  // 1. The oracle vs transformers on golden/real's prompts (top-256 + log-sum-exp per position):
  // the same bounds real_golden_test holds the engine to (tolerances.h kRealGolden*).
  for (const std::string& f : testing::CheckManifest(kSrc + "golden/real")) ADD_FAILURE() << f;
  const nlohmann::json meta =
      nlohmann::json::parse(ReadFile(kSrc + "golden/real/" + c.model + ".json"));
  ASSERT_EQ(meta["model_sha256"], km->sha256);
  t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < meta["prompts"].size(); ++i) {
    const auto ids = meta["prompts"][i]["ids"].get<std::vector<int32_t>>();
    auto g = npy::Read(kSrc + "golden/real/" + c.model + ".p" + std::to_string(i) + ".npy");
    ASSERT_TRUE(g.ok()) << g.status();
    auto ours = naive->Logits(ids, 0);
    ASSERT_TRUE(ours.ok()) << ours.status();
    const std::vector<float> z(ours->begin(), ours->end());  // rounding: 6e-8 relative
    auto st = compare::TopKGolden(z.data(), static_cast<int64_t>(ids.size()), V, g->data.data(),
                                  g->shape[1], tol::kGoldenDecisiveMargin);
    ASSERT_TRUE(st.ok()) << st.status();
    SCOPED_TRACE(compare::Describe(*st));
    EXPECT_LE(st->max_lse_abs, tol::kRealGoldenLseAbs) << "position " << st->worst_lse_position;
    EXPECT_LE(st->max_abs, tol::kRealGoldenMaxAbs) << "position " << st->worst_abs_position;
    EXPECT_LE(st->nmse, tol::kRealGoldenNmse) << "prompt " << i;
    EXPECT_EQ(st->decisive_agree, st->decisive) << "position " << st->first_decisive_flip;
    std::printf("[ golden ] naive %s vs transformers, prompt %zu: %zu positions, top-%lld NMSE "
                "%.3g, max |d| %.3g\n", c.model.c_str(), i, ids.size(),
                static_cast<long long>(st->k), st->nmse, st->max_abs);
  }
  std::printf("naive vs golden/real in %.1f s\n", Seconds(t0));

  // 2. The engine's greedy decode from a prompt of Hugging Face token ids (golden/tokenizer's
  // long paragraph, BOS included where the model's tokenizer adds one).
  const nlohmann::json tj =
      nlohmann::json::parse(ReadFile(kSrc + "golden/tokenizer/" + c.model + ".json"));
  std::vector<int32_t> prompt;
  for (const auto& cs : tj["cases"]) {
    const auto ids = cs["ids_parse_special"].get<std::vector<int32_t>>();
    if (static_cast<int64_t>(ids.size()) >= c.prompt_tokens) {
      prompt.assign(ids.begin(), ids.begin() + c.prompt_tokens);
      break;
    }
  }
  ASSERT_EQ(static_cast<int64_t>(prompt.size()), c.prompt_tokens);
  auto model = models::Model::Load(store::CachedPath(*km));
  ASSERT_TRUE(model.ok()) << model.status();
  auto be = backend::MakeBackend("cpu", {0});
  ASSERT_TRUE(be.ok()) << be.status();
  t0 = std::chrono::steady_clock::now();
  auto dec = EngineDecode(**model, **be, prompt, {}, c.steps);
  ASSERT_TRUE(dec.ok()) << dec.status();
  std::printf("engine %s: prefill %lld + %lld decode steps in %.1f s\n", c.model.c_str(),
              static_cast<long long>(c.prompt_tokens), static_cast<long long>(c.steps),
              Seconds(t0));
  t0 = std::chrono::steady_clock::now();
  const int64_t P = c.prompt_tokens;
  auto full = naive->Logits(dec->tokens, P - 1);
  ASSERT_TRUE(full.ok()) << full.status();
  std::printf("naive %s: %zu positions, %lld logits rows in %.1f s\n", c.model.c_str(),
              dec->tokens.size(), static_cast<long long>(c.steps + 1), Seconds(t0));

  // 3. The first decode step recomputed alone equals the full pass's row, bit for bit.
  t0 = std::chrono::steady_clock::now();
  auto one = naive->Logits(std::span(dec->tokens).first(P + 1), P);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(0, memcmp(one->data(), full->data() + V, V * sizeof(double)));
  std::printf("naive %s: one step recomputed in %.1f s\n", c.model.c_str(), Seconds(t0));

  // Bounds: tolerances.h kRealGolden* (float32 order through 18-30 layers, measured <= 3.5e-12
  // NMSE and 1e-4 max |d| against transformers), over the full vocabulary here.
  RowStats st;
  int64_t past_window = 0;
  for (int64_t s = 0; s <= c.steps; ++s) {
    CompareRow(dec->logits.data() + s * V, full->data() + s * V, V, tol::kGoldenDecisiveMargin,
               &st, c.model + " step " + std::to_string(s) + " (position " +
                        std::to_string(P - 1 + s) + ")");
    if (P - 1 + s >= 512) ++past_window;
  }
  EXPECT_LE(st.nmse(), tol::kRealGoldenNmse);
  EXPECT_LE(st.max_abs, tol::kRealGoldenMaxAbs);
  EXPECT_LE(st.max_lse, tol::kRealGoldenLseAbs);
  EXPECT_EQ(st.decisive, st.decisive_agree);
  EXPECT_GE(c.steps, 128);
  if (naive->config().sliding_window > 0) {
    EXPECT_GE(past_window, 32) << "the run must reach past the sliding window";
  }
  std::printf("[ golden ] engine %s decode vs naive: %lld decode steps + prefill row, positions "
              "%lld..%lld (%lld at >= 512), NMSE %.3g, max |d| %.3g, max |d lse| %.3g, top-1 "
              "%lld/%lld decisive\n", c.model.c_str(), static_cast<long long>(c.steps),
              static_cast<long long>(P - 1), static_cast<long long>(P - 1 + c.steps),
              static_cast<long long>(past_window), st.nmse(), st.max_abs, st.max_lse,
              static_cast<long long>(st.decisive_agree), static_cast<long long>(st.decisive));
}

INSTANTIATE_TEST_SUITE_P(Models, NaiveReal,
                         ::testing::Values(RealCase{"smollm2-135m", 120, 160},
                                           RealCase{"gemma3-270m", 400, 160}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace lockstep
