#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/sampling/philox.h"

namespace lockstep::sampling {

int32_t GumbelArgmax(std::span<const double> logits, std::span<const uint8_t> kept, uint64_t seed,
                     uint64_t position) {
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!kept[i]) continue;
    const double score = logits[i] + GumbelNoise(seed, position, static_cast<uint32_t>(i));
    if (best < 0 || score > best_score) {
      best = static_cast<int32_t>(i);
      best_score = score;
    }
  }
  return best;
}

int32_t SampleProcessed(const ProcessedLogits& processed, uint64_t seed, uint64_t position) {
  if (processed.greedy) return processed.greedy_token;
  return GumbelArgmax(processed.logits, processed.kept, seed, position);
}

std::vector<TokenLogprob> TopLogprobs(std::span<const double> logprobs, int32_t n) {
  std::vector<TokenLogprob> all;
  for (size_t i = 0; i < logprobs.size(); ++i) {
    if (std::isfinite(logprobs[i])) all.push_back({static_cast<int32_t>(i), logprobs[i]});
  }
  const size_t take = std::min(all.size(), static_cast<size_t>(std::max(n, 0)));
  std::partial_sort(all.begin(), all.begin() + take, all.end(),
                    [](const TokenLogprob& a, const TokenLogprob& b) {
                      if (a.logprob != b.logprob) return a.logprob > b.logprob;
                      return a.token < b.token;
                    });
  all.resize(take);
  return all;
}

absl::StatusOr<Sampler> Sampler::Create(SamplingParams params) {
  RETURN_IF_ERROR(params.Validate());
  return Sampler(std::move(params));
}

absl::StatusOr<SampledToken> Sampler::Sample(std::span<const float> logits, uint64_t seed,
                                             int64_t position,
                                             std::span<const int32_t> previous_tokens,
                                             bool with_logprobs) const {
  if (position < 0) {
    return absl::InvalidArgumentError(absl::StrCat("position must be >= 0, got ", position));
  }
  SampledToken out;
  if (!with_logprobs && PlainGreedy(params_)) {  // the common serving case, one pass (processors.h)
    ASSIGN_OR_RETURN(out.token, PlainGreedyToken(params_, logits, previous_tokens));
    return out;
  }
  ASSIGN_OR_RETURN(ProcessedLogits processed, ProcessLogits(params_, logits, previous_tokens));
  out.token = SampleProcessed(processed, seed, static_cast<uint64_t>(position));
  if (!with_logprobs) return out;

  std::vector<double> logprobs;
  if (params_.logprobs_mode == LogprobsMode::kRaw) {
    std::vector<double> raw(logits.begin(), logits.end());
    std::vector<uint8_t> finite(raw.size(), 0);
    KeepFinite(raw, finite);
    logprobs = KeptLogSoftmax(raw, finite);
  } else {
    logprobs = KeptLogSoftmax(processed.logits, processed.kept);
  }
  out.logprob = logprobs[out.token];
  if (params_.top_logprobs > 0) out.top_logprobs = TopLogprobs(logprobs, params_.top_logprobs);
  return out;
}

absl::StatusOr<std::vector<double>> Sampler::ProcessedDistribution(
    std::span<const float> logits, std::span<const int32_t> previous_tokens) const {
  ASSIGN_OR_RETURN(ProcessedLogits processed, ProcessLogits(params_, logits, previous_tokens));
  return KeptSoftmax(processed.logits, processed.kept);
}

}  // namespace lockstep::sampling
