// Each logits processor against a hand-computed expectation on crafted rows: kept sets on ties,
// boundaries that are exact in binary, penalties on repeated tokens, bans, greedy, logprobs.
#include <cmath>
#include <limits>
#include <vector>

#include "engine/sampling/processors.h"
#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace lockstep::sampling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

using Mask = std::vector<uint8_t>;

Mask AllKept(size_t n) { return Mask(n, 1); }

// The kept set as a list of ids, ascending, for readable failures.
std::vector<int> KeptIdsOf(const Mask& kept) {
  std::vector<int> ids;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i]) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

ProcessedLogits MustProcess(const SamplingParams& p, const std::vector<float>& logits,
                            const std::vector<int32_t>& previous = {}) {
  absl::StatusOr<ProcessedLogits> r = ProcessLogits(p, logits, previous);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : ProcessedLogits{};
}

TEST(LogitBias, AddsBiasAndMinusInfinityBans) {
  SamplingParams p;
  p.logit_bias = {{0, 1.5f}, {2, -kInfF}};
  const ProcessedLogits r = MustProcess(p, {1.0f, 2.0f, 3.0f, 4.0f});
  EXPECT_EQ(r.logits, (std::vector<double>{2.5, 2.0, -kInf, 4.0}));
  EXPECT_EQ(KeptIdsOf(r.kept), (std::vector<int>{0, 1, 3}));
  // A banned token has probability exactly 0 in the law the sampler draws from.
  Sampler s = *Sampler::Create(p);
  const std::vector<double> dist = *s.ProcessedDistribution(std::vector<float>{1, 2, 3, 4}, {});
  EXPECT_EQ(dist[2], 0.0);
}

TEST(LogitBias, BanningEveryTokenIsAnErrorNamingLogitBias) {
  SamplingParams p;
  p.logit_bias = {{0, -kInfF}, {1, -kInfF}};
  const absl::StatusOr<ProcessedLogits> r = ProcessLogits(p, std::vector<float>{1, 2}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("logit_bias"), std::string::npos) << r.status();
}

TEST(LogitBias, TokenOutsideVocabularyIsAnError) {
  SamplingParams p;
  p.logit_bias = {{4, 1.0f}};
  const absl::StatusOr<ProcessedLogits> r = ProcessLogits(p, std::vector<float>{1, 2, 3, 4}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("logit_bias[0].token 4"), std::string::npos) << r.status();
}

TEST(RepetitionPenalty, DividesPositiveMultipliesNegativeOncePerDistinctToken) {
  // Token 0 appears three times but is penalized once: 2 / 2 = 1. Token 1: -2 * 2 = -4.
  // Token 2 (logit 0) stays 0. Tokens 3, 4 are not in the window.
  std::vector<double> logits = {2.0, -2.0, 0.0, 3.0, 1.0};
  const std::vector<int32_t> window = {0, 1, 2, 0, 0};
  ASSERT_TRUE(ApplyRepetitionPenalty(2.0f, window, logits).ok());
  EXPECT_EQ(logits, (std::vector<double>{1.0, -4.0, 0.0, 3.0, 1.0}));
}

TEST(PresenceFrequency, SubtractsPresenceOnceAndFrequencyPerOccurrence) {
  // Token 0: count 3 -> 1 - (0.5 + 0.25 * 3) = -0.25. Token 2: count 1 -> 1 - 0.75 = 0.25.
  std::vector<double> logits = {1.0, 1.0, 1.0, 1.0};
  const std::vector<int32_t> window = {0, 0, 0, 2};
  ASSERT_TRUE(ApplyPresenceFrequencyPenalties(0.5f, 0.25f, window, logits).ok());
  EXPECT_EQ(logits, (std::vector<double>{-0.25, 1.0, 0.25, 1.0}));
}

TEST(PresenceFrequency, PenaltyWindowCountsOnlyTheLastTokens) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.penalty_window = 2;  // of {0, 0, 0, 2}: {0, 2}, each once
  const ProcessedLogits r = MustProcess(p, {1, 1, 1, 1}, {0, 0, 0, 2});
  EXPECT_EQ(r.logits, (std::vector<double>{0.25, 1.0, 0.25, 1.0}));
  p.penalty_window = 0;  // no token is penalized
  EXPECT_EQ(MustProcess(p, {1, 1, 1, 1}, {0, 0, 0, 2}).logits, (std::vector<double>{1, 1, 1, 1}));
}

TEST(ProcessorOrder, BiasThenRepetitionThenPresenceThenTemperature) {
  // Token 0, logit 2, seen once: bias +2 -> 4; repetition 2 -> 2; presence 0.5 -> 1.5;
  // temperature 0.5 -> 3. Other orders give other numbers (repetition before bias:
  // (2 / 2 + 2 - 0.5) / 0.5 = 5; temperature first: (4 + 2) / 2 - 0.5 = 2.5), so this pins it.
  SamplingParams p;
  p.logit_bias = {{0, 2.0f}};
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.temperature = 0.5f;
  const ProcessedLogits r = MustProcess(p, {2.0f, 0.0f}, {0});
  EXPECT_EQ(r.logits, (std::vector<double>{3.0, 0.0}));
}

TEST(Temperature, DividesEveryLogit) {
  SamplingParams p;
  p.temperature = 0.5f;
  EXPECT_EQ(MustProcess(p, {1.0f, -3.0f, 0.25f}).logits, (std::vector<double>{2.0, -6.0, 0.5}));
}

TEST(Temperature, ZeroIsGreedyWithTiesToLowestId) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1;
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  const ProcessedLogits r = MustProcess(p, logits);
  EXPECT_TRUE(r.greedy);
  EXPECT_EQ(r.greedy_token, 1);
  EXPECT_EQ(KeptIdsOf(r.kept), (std::vector<int>{1}));
  Sampler s = *Sampler::Create(p);
  EXPECT_EQ(*s.ProcessedDistribution(logits, {}), (std::vector<double>{0, 1, 0, 0}));
  for (uint64_t seed : {0ULL, 1ULL, 99ULL}) {
    for (int64_t pos = 0; pos < 50; ++pos) {
      const SampledToken t = *s.Sample(logits, seed, pos, {});
      ASSERT_EQ(t.token, 1) << "seed " << seed << " position " << pos;
      EXPECT_EQ(t.logprob, 0.0);
    }
  }
}

TEST(Temperature, GreedyArgmaxIsTakenAfterPenalties) {
  // Token 1 leads the raw row but the repetition penalty (3 / 2 = 1.5 < 2) hands it to token 2.
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  EXPECT_EQ(MustProcess(p, {1.0f, 3.0f, 2.0f}, {1}).greedy_token, 2);
}

TEST(TopK, TiesOnTheBoundaryKeepLowerIdsFirst) {
  // Ranking by (logit desc, id asc): 1 (3), 3 (3), 2 (2), 4 (2), 0 (1), 5 (0).
  const std::vector<double> logits = {1, 3, 2, 3, 2, 0};
  const std::vector<std::pair<int, std::vector<int>>> cases = {{1, {1}},
                                                               {2, {1, 3}},
                                                               {3, {1, 2, 3}},
                                                               {4, {1, 2, 3, 4}},
                                                               {5, {0, 1, 2, 3, 4}},
                                                               {6, {0, 1, 2, 3, 4, 5}},
                                                               {100, {0, 1, 2, 3, 4, 5}},
                                                               {0, {0, 1, 2, 3, 4, 5}}};
  for (const auto& [k, want] : cases) {
    Mask kept = AllKept(logits.size());
    ApplyTopK(k, logits, kept);
    EXPECT_EQ(KeptIdsOf(kept), want) << "k = " << k;
  }
}

TEST(TopK, CountsOnlyTokensStillKept) {
  // Token 0 is banned (-inf); k = 2 keeps the two best of the rest.
  const std::vector<double> logits = {-kInf, 1, 1, 0};
  Mask kept = AllKept(4);
  KeepFinite(logits, kept);
  ApplyTopK(2, logits, kept);
  EXPECT_EQ(KeptIdsOf(kept), (std::vector<int>{1, 2}));
}

TEST(TopP, ExactBoundaryIsInclusiveAndTiesKeepLowerIds) {
  // Two equal logits: probabilities exactly 0.5 each. Cumulative after the first = 0.5 >= 0.5.
  Mask kept = AllKept(2);
  ApplyTopP(0.5f, std::vector<double>{7, 7}, kept);
  EXPECT_EQ(KeptIdsOf(kept), (std::vector<int>{0}));
  // Four equal logits: 0.25 each, exact. 0.75 is reached at the third (ids 0, 1, 2).
  kept = AllKept(4);
  ApplyTopP(0.75f, std::vector<double>{2, 2, 2, 2}, kept);
  EXPECT_EQ(KeptIdsOf(kept), (std::vector<int>{0, 1, 2}));
  // Just above 0.75 needs the fourth.
  kept = AllKept(4);
  ApplyTopP(0.7500001f, std::vector<double>{2, 2, 2, 2}, kept);
  EXPECT_EQ(KeptIdsOf(kept), (std::vector<int>{0, 1, 2, 3}));
  // Three tied leaders (p ~ 0.30 each) and a tail: 0.5 needs two of them, the lower ids.
  kept = AllKept(4);
  ApplyTopP(0.5f, std::vector<double>{1, 1, 1, 0}, kept);
  EXPECT_EQ(KeptIdsOf(kept), (std::vector<int>{0, 1}));
}

TEST(TopP, UnequalProbabilitiesKeepTheShortestPrefix) {
  // softmax(2, 1, 0, -1) = 0.6439, 0.2369, 0.0871, 0.0321; cumulative 0.6439, 0.8808, 0.9679, 1.
  // Tokens are listed out of rank order to check the ranking.
  const std::vector<double> logits = {0, 2, -1, 1};
  const std::vector<std::pair<float, std::vector<int>>> cases = {
      {0.6f, {1}}, {0.7f, {1, 3}}, {0.9f, {0, 1, 3}}, {0.99f, {0, 1, 2, 3}}, {1.0f, {0, 1, 2, 3}}};
  for (const auto& [top_p, want] : cases) {
    Mask kept = AllKept(4);
    ApplyTopP(top_p, logits, kept);
    EXPECT_EQ(KeptIdsOf(kept), want) << "top_p = " << top_p;
  }
}

TEST(TopP, UsesProbabilitiesRenormalizedOverTheTopKSet) {
  // Four equal logits. top_k = 2 leaves {0, 1} at 0.5 each, so top_p = 0.5 keeps {0} alone;
  // without top_k the tokens are 0.25 each and top_p = 0.5 keeps {0, 1}.
  SamplingParams p;
  p.top_p = 0.5f;
  EXPECT_EQ(KeptIdsOf(MustProcess(p, {3, 3, 3, 3}).kept), (std::vector<int>{0, 1}));
  p.top_k = 2;
  EXPECT_EQ(KeptIdsOf(MustProcess(p, {3, 3, 3, 3}).kept), (std::vector<int>{0}));
}

TEST(MinP, RatioToTheMostLikelyTokenWithInclusiveBoundary) {
  // Ratios exp(l - 0): 1, e^-1 = 0.367879, e^-2 = 0.135335, 1.
  const std::vector<double> logits = {0, -1, -2, 0};
  const std::vector<std::pair<float, std::vector<int>>> cases = {
      {0.0f, {0, 1, 2, 3}}, {0.1353f, {0, 1, 2, 3}}, {0.1354f, {0, 1, 3}}, {0.3678f, {0, 1, 3}},
      {0.3679f, {0, 3}},    {1.0f, {0, 3}}};  // ratio exactly 1 >= 1: every token tied with the
                                              // maximum stays
  for (const auto& [min_p, want] : cases) {
    Mask kept = AllKept(4);
    ApplyMinP(min_p, logits, kept);
    EXPECT_EQ(KeptIdsOf(kept), want) << "min_p = " << min_p;
  }
}

TEST(MinP, AppliesAfterTemperature) {
  // T = 0.5 doubles the gaps: ratios 1, e^-2 = 0.135, e^-4 = 0.018, 1. min_p 0.1 drops token 2
  // (at T = 1 its ratio e^-2 would have passed).
  SamplingParams p;
  p.temperature = 0.5f;
  p.min_p = 0.1f;
  EXPECT_EQ(KeptIdsOf(MustProcess(p, {0, -1, -2, 0}).kept), (std::vector<int>{0, 1, 3}));
}

TEST(ProcessLogits, RefusesNaNAndPlusInfinityNamingTheIndex) {
  SamplingParams p;
  absl::StatusOr<ProcessedLogits> r =
      ProcessLogits(p, std::vector<float>{0, 1, std::nanf(""), 2}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("logits[2] is NaN"), std::string::npos) << r.status();
  r = ProcessLogits(p, std::vector<float>{kInfF, 1}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("logits[0] is +inf"), std::string::npos) << r.status();
  // -inf in the model's row is a masked token, not an error.
  EXPECT_TRUE(ProcessLogits(p, std::vector<float>{-kInfF, 1}, {}).ok());
}

TEST(ProcessLogits, PreviousTokenOutsideVocabularyNamesTheIndex) {
  SamplingParams p;
  const absl::StatusOr<ProcessedLogits> r =
      ProcessLogits(p, std::vector<float>{0, 1}, std::vector<int32_t>{1, 5});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("previous_tokens[1] = 5"), std::string::npos) << r.status();
}

TEST(Logprobs, ProcessedModeIsTheLawSampledFromWithIdTiebreak) {
  // T = 1, top_k = 2 over {1, 3, 3, 2}: kept {1, 2}, each logprob exactly log(1/2) computed as
  // (0 - log 2). The third-best token is not in the law, so only two entries come back.
  SamplingParams p;
  p.top_k = 2;
  p.top_logprobs = 3;
  Sampler s = *Sampler::Create(p);
  const SampledToken t = *s.Sample(std::vector<float>{1, 3, 3, 2}, 5, 0, {});
  ASSERT_EQ(t.top_logprobs.size(), 2u);
  EXPECT_EQ(t.top_logprobs[0].token, 1);
  EXPECT_EQ(t.top_logprobs[1].token, 2);
  EXPECT_EQ(t.top_logprobs[0].logprob, -std::log(2.0));
  EXPECT_EQ(t.top_logprobs[1].logprob, -std::log(2.0));
  EXPECT_EQ(t.logprob, -std::log(2.0));
}

TEST(Logprobs, RawModeIsTheLogSoftmaxOfTheModelRow) {
  // Raw logprobs ignore temperature and truncation. Reference: log(e^l / sum e^l) computed
  // directly; the two formulas agree to a few ulps (tolerance 1e-15 on values of order 1).
  SamplingParams p;
  p.top_k = 1;
  p.temperature = 0.3f;
  p.top_logprobs = 3;
  p.logprobs_mode = LogprobsMode::kRaw;
  const std::vector<float> logits = {1, 3, 3, 2};
  Sampler s = *Sampler::Create(p);
  const SampledToken t = *s.Sample(logits, 5, 0, {});
  EXPECT_EQ(t.token, 1);  // top_k = 1 with a tie keeps id 1
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  const std::vector<int> want_ids = {1, 2, 3};
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(t.top_logprobs[j].token, want_ids[j]);
    EXPECT_NEAR(t.top_logprobs[j].logprob,
                std::log(std::exp(static_cast<double>(logits[want_ids[j]])) / sum), 1e-15);
  }
  EXPECT_EQ(t.logprob, t.top_logprobs[0].logprob);
}

TEST(Logprobs, SkippingThemDrawsTheSameTokens) {
  // with_logprobs = false (the engine's call when nobody reports logprobs) must not change the
  // draw: same token for every seed and position, greedy and sampled, and nothing reported.
  for (float temperature : {0.0f, 0.8f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = 0.9f;
    p.top_logprobs = 2;
    Sampler s = *Sampler::Create(p);
    const std::vector<float> logits = {0.5f, 2.0f, 1.5f, -1.0f, 2.0f, 0.25f};
    for (uint64_t seed : {1u, 7u}) {
      for (int64_t pos = 0; pos < 64; ++pos) {
        const SampledToken with = *s.Sample(logits, seed, pos, {});
        const SampledToken without = *s.Sample(logits, seed, pos, {}, /*with_logprobs=*/false);
        ASSERT_EQ(with.token, without.token) << "T " << temperature << " seed " << seed << " pos " << pos;
        EXPECT_EQ(without.logprob, 0.0);
        EXPECT_TRUE(without.top_logprobs.empty());
        EXPECT_FALSE(with.top_logprobs.empty());  // one entry when greedy (a one-hot law), two sampled
      }
    }
  }
}

TEST(PlainGreedy, OnePassTokenAndErrorsEqualProcessLogits) {
  // PlainGreedyToken (the sampler's path without logprobs) against the full processing on rows
  // with ties, -inf entries and signed zeros; the same errors for NaN, +inf, an all -inf row and
  // a previous token outside the vocabulary; params that process the row are not plain.
  SamplingParams p;
  p.temperature = 0.0f;
  ASSERT_TRUE(PlainGreedy(p));
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (int row = 0; row < 500; ++row) {
    std::vector<float> logits(1 + next() % 40);
    for (float& v : logits) {
      const uint32_t r = next() % 10;
      v = r == 0 ? -kInfF : r == 1 ? -0.0f : r == 2 ? 0.0f : (float)((int)(next() % 7) - 3) * 0.5f;
    }
    const absl::StatusOr<ProcessedLogits> full = ProcessLogits(p, logits, {});
    const absl::StatusOr<int32_t> fast = PlainGreedyToken(p, logits, {});
    ASSERT_EQ(full.ok(), fast.ok()) << "row " << row;
    if (full.ok()) {
      ASSERT_EQ(full->greedy_token, *fast) << "row " << row;
    } else {
      ASSERT_EQ(full.status(), fast.status()) << "row " << row;
    }
  }
  const std::vector<std::vector<float>> bad = {{1.0f, std::nanf(""), 2.0f}, {0.5f, kInfF}, {-kInfF, -kInfF}};
  for (const auto& logits : bad) {
    const absl::Status a = ProcessLogits(p, logits, {}).status(), b = PlainGreedyToken(p, logits, {}).status();
    EXPECT_FALSE(b.ok());
    EXPECT_EQ(a, b);
  }
  const std::vector<float> two = {1.0f, 2.0f};
  const std::vector<int32_t> outside = {5};
  EXPECT_FALSE(PlainGreedyToken(p, two, outside).ok());
  EXPECT_EQ(ProcessLogits(p, two, outside).status(), PlainGreedyToken(p, two, outside).status());
  SamplingParams q = p;
  q.logit_bias = {{0, 1.0f}};
  EXPECT_FALSE(PlainGreedy(q));
  q = p, q.repetition_penalty = 1.1f;
  EXPECT_FALSE(PlainGreedy(q));
  q = p, q.presence_penalty = 0.5f;
  EXPECT_FALSE(PlainGreedy(q));
  q = p, q.frequency_penalty = 0.5f;
  EXPECT_FALSE(PlainGreedy(q));
  q = p, q.temperature = 0.7f;
  EXPECT_FALSE(PlainGreedy(q));
  EXPECT_FALSE(PlainGreedyToken(q, two, {}).ok());
}

TEST(Logprobs, TopLogprobsRanksByValueThenId) {
  const std::vector<double> lp = {-1.0, -0.5, -kInf, -0.5, -2.0};
  const std::vector<TokenLogprob> top = TopLogprobs(lp, 10);
  ASSERT_EQ(top.size(), 4u);  // -inf entries are not reported
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 0);
  EXPECT_EQ(top[3].token, 4);
  EXPECT_EQ(TopLogprobs(lp, 0).size(), 0u);
}

}  // namespace
}  // namespace lockstep::sampling
