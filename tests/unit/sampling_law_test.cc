// The law of the sampler. On small vocabularies the exact law (softmax of the processed logits
// over the kept set, double) is written out by hand; a large seeded run of the real sampler is
// compared with it by a G-test, and a deliberately wrong sampler is shown to fail the same test.
//
// Threshold: fail when p < 1e-6. The draws are a pure function of the printed seeds, so a pass is
// reproducible, never flaky; 1e-6 leaves no room for a real bias of the size the mutation checks
// introduce (their p-values come out far below 1e-30) to hide.
//
// p-values: G is referred to chi-square with k - 1 degrees of freedom, the survival function
// computed from the regularized incomplete gamma Q(df/2, G/2) (series / continued fraction to
// 1e-15 relative, checked below against closed forms), not Wilson-Hilferty, which at p = 1e-6
// overstates the tail by a factor of 2 (df 4) to 4 (df 1): too coarse for a threshold there. The
// chi-square approximation of G itself is accurate when every expected count is large; the tests
// assert min E >= 1000.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "engine/sampling/law_stats.h"
#include "engine/sampling/philox.h"
#include "engine/sampling/processors.h"
#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace lockstep::sampling {
namespace {

constexpr double kPValueThreshold = 1e-6;
constexpr double kInf = std::numeric_limits<double>::infinity();

// --- the statistics themselves -------------------------------------------------------------

TEST(ChiSquareSurvival, MatchesClosedFormsForSmallDf) {
  // df = 2: e^{-x/2}. df = 4: e^{-x/2} (1 + x/2). df = 1: erfc(sqrt(x/2)).
  // df = 3: erfc(sqrt(x/2)) + sqrt(2x/pi) e^{-x/2}. Relative 1e-12, down to values ~1e-150.
  for (double x : {0.01, 0.5, 1.0, 2.5, 7.0, 20.0, 60.0, 300.0, 700.0}) {
    const double e = std::exp(-x / 2);
    const double want[] = {std::erfc(std::sqrt(x / 2)), e,
                           std::erfc(std::sqrt(x / 2)) + std::sqrt(2 * x / M_PI) * e,
                           e * (1 + x / 2)};
    for (int df = 1; df <= 4; ++df) {
      if (want[df - 1] < 1e-280) continue;  // erfc underflows before Q does
      EXPECT_NEAR(ChiSquareSurvival(x, df) / want[df - 1], 1.0, 1e-12) << "x " << x << " df " << df;
    }
  }
}

TEST(ChiSquareSurvival, MatchesTabulatedCriticalValues) {
  // Upper 5% and 0.1% points of chi-square (standard tables, 4-5 significant digits).
  EXPECT_NEAR(ChiSquareSurvival(11.0705, 5), 0.05, 1e-5);
  EXPECT_NEAR(ChiSquareSurvival(14.0671, 7), 0.05, 1e-5);
  EXPECT_NEAR(ChiSquareSurvival(29.5883, 10), 0.001, 1e-6);
  EXPECT_NEAR(ChiSquareSurvival(124.342, 100), 0.05, 1e-5);
}

TEST(GTest, PerfectFitAndImpossibleCategory) {
  const std::vector<double> law = {0.5, 0.25, 0.25, 0.0};
  const GTestResult fit = GTest(std::vector<int64_t>{200, 100, 100, 0}, law);
  EXPECT_EQ(fit.g, 0.0);
  EXPECT_EQ(fit.df, 2);
  EXPECT_EQ(fit.p_value, 1.0);
  const GTestResult bad = GTest(std::vector<int64_t>{200, 100, 99, 1}, law);
  EXPECT_EQ(bad.p_value, 0.0);  // a token outside the kept set was drawn
}

// --- the sampler's law ---------------------------------------------------------------------

// Draws `n` tokens from `draw(seed, position)` for positions 0..n-1 under one seed, then for
// seeds base+0..base+n-1 at one fixed position: both axes of the Philox key are exercised.
template <typename Draw>
std::vector<int64_t> CountDraws(size_t n_vocab, uint64_t seed, int64_t n, Draw draw) {
  std::vector<int64_t> counts(n_vocab, 0);
  for (int64_t pos = 0; pos < n; ++pos) ++counts[draw(seed, static_cast<uint64_t>(pos))];
  for (int64_t k = 0; k < n; ++k) ++counts[draw(seed + 1000003 + static_cast<uint64_t>(k), 77)];
  return counts;
}

GTestResult ReportGTest(const char* name, uint64_t seed, const std::vector<int64_t>& counts,
                        const std::vector<double>& law) {
  int64_t draws = 0;
  for (int64_t c : counts) draws += c;
  const GTestResult r = GTest(counts, law);
  std::printf("%s: seed %llu, draws %lld, G = %.3f, df = %lld, p = %.3g, min E = %.0f\n", name,
              static_cast<unsigned long long>(seed), static_cast<long long>(draws), r.g,
              static_cast<long long>(r.df), r.p_value, r.min_expected);
  return r;
}

std::vector<double> Softmax(const std::vector<double>& l) {
  double m = -kInf;
  for (double v : l) m = std::max(m, v);
  double s = 0.0;
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) s += (p[i] = l[i] == -kInf ? 0.0 : std::exp(l[i] - m));
  for (double& v : p) v /= s;
  return p;
}

constexpr int64_t kDrawsPerAxis = 100000;  // 200k draws per law test

TEST(SamplerLaw, TemperatureOnlyEightTokens) {
  // Law: softmax(l / T) over all 8 tokens.
  const std::vector<float> logits = {0.3f, -1.2f, 2.0f, 0.0f, 1.1f, -0.4f, 0.9f, 1.6f};
  const float temperature = 1.3f;
  std::vector<double> scaled(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) scaled[i] = double{logits[i]} / double{temperature};
  const std::vector<double> law = Softmax(scaled);

  SamplingParams p;
  p.temperature = temperature;
  Sampler sampler = *Sampler::Create(p);
  const std::vector<double> dist = *sampler.ProcessedDistribution(logits, {});
  for (size_t i = 0; i < law.size(); ++i) EXPECT_NEAR(dist[i], law[i], 1e-15) << "token " << i;

  const uint64_t seed = 0x5eed0001;
  const std::vector<int64_t> counts =
      CountDraws(logits.size(), seed, kDrawsPerAxis, [&](uint64_t s, uint64_t pos) {
        return sampler.Sample(logits, s, static_cast<int64_t>(pos), {})->token;
      });
  const GTestResult r = ReportGTest("temperature 1.3, 8 tokens", seed, counts, law);
  EXPECT_GE(r.min_expected, 1000.0);
  EXPECT_GE(r.p_value, kPValueThreshold);

  // Mutation: temperature applied twice (logits / T^2). Same seeds, same G-test: must fail.
  const ProcessedLogits processed = *ProcessLogits(p, logits, {});
  std::vector<double> twice = processed.logits;
  for (double& v : twice) v /= double{temperature};
  const std::vector<int64_t> wrong = CountDraws(
      logits.size(), seed, kDrawsPerAxis,
      [&](uint64_t s, uint64_t pos) { return GumbelArgmax(twice, processed.kept, s, pos); });
  const GTestResult m = ReportGTest("mutation: temperature twice", seed, wrong, law);
  EXPECT_LT(m.p_value, kPValueThreshold);
}

TEST(SamplerLaw, FullPipelineWithPenaltiesAndTruncation) {
  // Eight tokens through every processor. Hand derivation (all in double, float params widened):
  //   bias: token 4 += 1 -> 0; token 7 banned (-inf).
  //   repetition 1.3 on {3, 5}: 2 / 1.3, 1.5 / 1.3.
  //   presence 0.2, frequency 0.1, counts {3: 2, 5: 1}: token 3 -= 0.4, token 5 -= 0.3.
  //   temperature 0.8: l / 0.8 = 1.25, 2.5, 0.625, 1.4231, 0, 1.0673, 0.3125, -inf.
  //   top_k 6: ranking 1, 3, 0, 5, 2, 6, 4 -> token 4 (the 7th) is dropped.
  //   top_p 0.93: probabilities over the six 0.4692, 0.1598, 0.1344, 0.1120, 0.0720, 0.0526,
  //     cumulative reaches 0.9474 >= 0.93 at token 2 -> token 6 is dropped.
  //   min_p 0.2: ratio of token 2 to token 1 is e^{0.625 - 2.5} = 0.153 < 0.2 -> dropped;
  //     token 5's ratio 0.239 stays.
  //   kept {0, 1, 3, 5}; law = softmax of their logits.
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f, 1.5f, 0.25f, -0.5f};
  const std::vector<int32_t> previous = {3, 3, 5};
  SamplingParams p;
  p.logit_bias = {{4, 1.0f}, {7, -std::numeric_limits<float>::infinity()}};
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.2f;
  p.frequency_penalty = 0.1f;
  p.temperature = 0.8f;
  p.top_k = 6;
  p.top_p = 0.93f;
  p.min_p = 0.2f;

  const double r = double{1.3f}, pres = double{0.2f}, freq = double{0.1f}, t = double{0.8f};
  std::vector<double> l = {1.0,   2.0,
                           -kInf, (2.0 / r - (pres + freq * 2)) / t,
                           -kInf, (1.5 / r - (pres + freq * 1)) / t,
                           -kInf, -kInf};
  l[0] /= t;
  l[1] /= t;
  const std::vector<double> law = Softmax(l);

  const ProcessedLogits processed = *ProcessLogits(p, logits, previous);
  std::vector<int> kept_ids;
  for (size_t i = 0; i < processed.kept.size(); ++i) {
    if (processed.kept[i]) kept_ids.push_back(static_cast<int>(i));
  }
  EXPECT_EQ(kept_ids, (std::vector<int>{0, 1, 3, 5}));
  Sampler sampler = *Sampler::Create(p);
  const std::vector<double> dist = *sampler.ProcessedDistribution(logits, previous);
  for (size_t i = 0; i < law.size(); ++i) EXPECT_NEAR(dist[i], law[i], 1e-15) << "token " << i;

  const uint64_t seed = 0x5eed0002;
  const std::vector<int64_t> counts =
      CountDraws(logits.size(), seed, kDrawsPerAxis, [&](uint64_t s, uint64_t pos) {
        return sampler.Sample(logits, s, static_cast<int64_t>(pos), previous)->token;
      });
  const GTestResult g = ReportGTest("full pipeline, 8 tokens, 4 kept", seed, counts, law);
  EXPECT_GE(g.min_expected, 1000.0);
  EXPECT_GE(g.p_value, kPValueThreshold);

  // Mutation: temperature twice on the kept set.
  std::vector<double> twice = processed.logits;
  for (double& v : twice) v /= t;
  const GTestResult m = ReportGTest("mutation: temperature twice", seed,
                                    CountDraws(logits.size(), seed, kDrawsPerAxis,
                                               [&](uint64_t s, uint64_t pos) {
                                                 return GumbelArgmax(twice, processed.kept, s, pos);
                                               }),
                                    law);
  EXPECT_LT(m.p_value, kPValueThreshold);

  // Mutation: min_p forgotten (token 2 stays kept): a token outside the law shows up.
  std::vector<uint8_t> loose = processed.kept;
  loose[2] = 1;
  const GTestResult m2 = ReportGTest(
      "mutation: min_p skipped", seed,
      CountDraws(
          logits.size(), seed, kDrawsPerAxis,
          [&](uint64_t s, uint64_t pos) { return GumbelArgmax(processed.logits, loose, s, pos); }),
      law);
  EXPECT_LT(m2.p_value, kPValueThreshold);
}

TEST(SamplerLaw, MutationNoiseSharedAcrossTokensIsCaught) {
  // A classic bug: one uniform per position instead of one per (position, token). Then
  // argmax(l + g) = argmax(l) always: greedy in disguise. The G-test must reject it.
  const std::vector<double> logits = {0.0, 0.5, 1.0, 0.2, -0.3};
  const std::vector<double> law = Softmax(logits);
  const std::vector<uint8_t> kept(logits.size(), 1);
  const uint64_t seed = 0x5eed0003;
  const std::vector<int64_t> wrong =
      CountDraws(logits.size(), seed, kDrawsPerAxis, [&](uint64_t s, uint64_t pos) {
        int32_t best = 0;
        const double g = GumbelNoise(s, pos, 0);
        for (size_t i = 1; i < logits.size(); ++i) {
          if (logits[i] + g > logits[best] + g) best = static_cast<int32_t>(i);
        }
        return best;
      });
  EXPECT_LT(ReportGTest("mutation: shared noise", seed, wrong, law).p_value, kPValueThreshold);
  const std::vector<int64_t> right =
      CountDraws(logits.size(), seed, kDrawsPerAxis,
                 [&](uint64_t s, uint64_t pos) { return GumbelArgmax(logits, kept, s, pos); });
  EXPECT_GE(ReportGTest("per-token noise", seed, right, law).p_value, kPValueThreshold);
}

// --- coupled mode: the draw of a position is a pure function -------------------------------

TEST(SamplerCoupling, DrawDependsOnlyOnSeedPositionAndRow) {
  // Positions visited forwards, backwards, and interleaved with another request (as in a batch
  // or a speculative verify of K positions): identical tokens.
  const std::vector<float> a = {0.1f, 1.0f, 0.7f, -0.2f, 0.4f, 0.9f};
  const std::vector<float> b = {2.0f, -1.0f, 0.0f, 0.3f, 0.3f, 1.0f};
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 5;
  Sampler sampler = *Sampler::Create(p);
  const uint64_t seed = 123456789;
  std::vector<int32_t> forward;
  for (int64_t pos = 0; pos < 500; ++pos)
    forward.push_back(sampler.Sample(a, seed, pos, {})->token);
  for (int64_t pos = 499; pos >= 0; --pos) {
    (void)sampler.Sample(b, seed + 1, pos, {});  // a neighbour in the batch
    ASSERT_EQ(sampler.Sample(a, seed, pos, {})->token, forward[pos]) << "position " << pos;
  }
  // And it is exactly argmax over the kept set of (processed logit + Philox Gumbel noise).
  const ProcessedLogits processed = *ProcessLogits(p, a, {});
  for (int64_t pos = 0; pos < 500; ++pos) {
    int32_t best = -1;
    double best_score = -kInf;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!processed.kept[i]) continue;
      const double score = processed.logits[i] + GumbelNoise(seed, pos, static_cast<uint32_t>(i));
      if (score > best_score) best = static_cast<int32_t>(i), best_score = score;
    }
    ASSERT_EQ(forward[pos], best) << "position " << pos;
  }
}

}  // namespace
}  // namespace lockstep::sampling
