// SamplingParams validation: every bad field is refused with a message naming it and its value.
#include "engine/sampling/sampling_params.h"

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace lockstep::sampling {
namespace {

constexpr float kInfF = std::numeric_limits<float>::infinity();

struct BadCase {
  std::function<void(SamplingParams&)> mutate;
  std::string expected_message;  // a substring of the error
};

TEST(SamplingParams, DefaultsAreValid) { EXPECT_TRUE(SamplingParams{}.Validate().ok()); }

TEST(SamplingParams, EachInvalidFieldIsNamedWithItsValue) {
  const std::vector<BadCase> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5f; },
       "temperature must be finite and >= 0, got -0.5"},
      {[](SamplingParams& p) { p.temperature = kInfF; },
       "temperature must be finite and >= 0, got inf"},
      {[](SamplingParams& p) { p.temperature = std::nanf(""); },
       "temperature must be finite and >= 0, got nan"},
      {[](SamplingParams& p) { p.top_k = -1; }, "top_k must be >= 0 (0 disables), got -1"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0"},
      {[](SamplingParams& p) { p.min_p = -0.1f; }, "min_p must be in [0, 1], got -0.1"},
      {[](SamplingParams& p) { p.min_p = 1.25f; }, "min_p must be in [0, 1], got 1.25"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; },
       "repetition_penalty must be finite and > 0, got 0"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; },
       "presence_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; },
       "frequency_penalty must be in [-2, 2], got -3"},
      {[](SamplingParams& p) { p.penalty_window = -2; },
       "penalty_window must be >= 0, or -1 for all previous tokens, got -2"},
      {[](SamplingParams& p) {
         p.logit_bias = {{-3, 1.0f}};
       },
       "logit_bias[0].token must be >= 0, got -3"},
      {[](SamplingParams& p) {
         p.logit_bias = {{1, 0.0f}, {7, 101.0f}};
       },
       "logit_bias[1].bias (token 7) must be in [-100, 100] or -inf, got 101"},
      {[](SamplingParams& p) {
         p.logit_bias = {{7, kInfF}};
       },
       "logit_bias[0].bias (token 7) must be in [-100, 100] or -inf, got inf"},
      {[](SamplingParams& p) {
         p.logit_bias = {{7, 1.0f}, {7, 2.0f}};
       },
       "logit_bias[1].token 7 appears more than once"},
      {[](SamplingParams& p) { p.top_logprobs = 21; }, "top_logprobs must be in [0, 20], got 21"},
      {[](SamplingParams& p) { p.logprobs_mode = static_cast<LogprobsMode>(9); },
       "logprobs_mode must be processed or raw, got 9"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens must be >= 1, got 0"},
      {[](SamplingParams& p) {
         p.stop_token_ids = {2, -1};
       },
       "stop_token_ids[1] must be >= 0, got -1"},
      {[](SamplingParams& p) {
         p.stop = {"###", ""};
       },
       "stop[1] must not be empty"},
  };
  for (const BadCase& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const absl::Status s = p.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.expected_message;
    EXPECT_NE(s.message().find(c.expected_message), std::string::npos)
        << "got: " << s.message() << "\nwant: " << c.expected_message;
    // Sampler::Create refuses the same parameters with the same message.
    const absl::StatusOr<Sampler> sampler = Sampler::Create(p);
    ASSERT_FALSE(sampler.ok());
    EXPECT_EQ(sampler.status().message(), s.message());
  }
}

TEST(SamplingParams, BoundaryValuesAreAccepted) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.penalty_window = 0;
  p.logit_bias = {{0, -100.0f}, {1, 100.0f}, {2, -kInfF}};
  p.top_logprobs = 20;
  p.max_tokens = 1;
  EXPECT_TRUE(p.Validate().ok()) << p.Validate();
}

TEST(SamplingParams, TokenIdsAreCheckedAgainstTheVocabulary) {
  SamplingParams p;
  p.logit_bias = {{3, 1.0f}, {10, 1.0f}};
  absl::Status s = p.ValidateForVocab(10);
  EXPECT_NE(s.message().find("logit_bias[1].token 10 is outside the vocabulary [0, 10)"),
            std::string::npos)
      << s;
  p.logit_bias.clear();
  p.stop_token_ids = {9, 12};
  s = p.ValidateForVocab(10);
  EXPECT_NE(s.message().find("stop_token_ids[1] 12 is outside the vocabulary [0, 10)"),
            std::string::npos)
      << s;
  EXPECT_TRUE(p.ValidateForVocab(13).ok());
}

TEST(Sampler, NegativePositionIsRefusedByName) {
  Sampler s = *Sampler::Create(SamplingParams{});
  const absl::StatusOr<SampledToken> t = s.Sample(std::vector<float>{0, 1}, 1, -1, {});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("position must be >= 0, got -1"), std::string::npos)
      << t.status();
}

}  // namespace
}  // namespace lockstep::sampling
