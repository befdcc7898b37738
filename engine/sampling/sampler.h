// The sampler: one logits row + (params, seed, position, previous tokens) -> one token.
//
// A sampled token is argmax over the kept set of (processed logit + Gumbel noise), the noise drawn
// from Philox4x32-10 keyed by (seed, position, token id) (engine/sampling/philox.h). Because
// argmax_i(l_i + g_i) with i.i.d. standard Gumbel g_i is distributed as softmax(l) over the kept
// set, the law of the token is exactly ProcessedDistribution(); and because the noise of a
// position depends on nothing else, speculative decoding can reproduce the draw bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling/processors.h"
#include "engine/sampling/sampling_params.h"

namespace lockstep::sampling {

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0.0;  // natural log
};

struct SampledToken {
  int32_t token = 0;
  double logprob = 0.0;                    // of `token`, in params.logprobs_mode
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs entries at most
};

// The Gumbel-max draw on a processed row: argmax_{i kept} (logits[i] + GumbelNoise(seed,
// position, i)), ties to the lowest id; the greedy token when processed.greedy.
int32_t SampleProcessed(const ProcessedLogits& processed, uint64_t seed, uint64_t position);

// Same draw on a bare row and mask, for callers (and tests) that build their own processing.
// logits, kept: [n_vocab]. Returns -1 when nothing is kept.
int32_t GumbelArgmax(std::span<const double> logits, std::span<const uint8_t> kept, uint64_t seed,
                     uint64_t position);

// The n entries with the largest finite logprob, ranked by (logprob descending, id ascending).
// Fewer than n when fewer tokens have a finite logprob. logprobs: [n_vocab].
std::vector<TokenLogprob> TopLogprobs(std::span<const double> logprobs, int32_t n);

class Sampler {
 public:
  // Validates `params` (the error names the field).
  static absl::StatusOr<Sampler> Create(SamplingParams params);

  const SamplingParams& params() const { return params_; }

  // Processes `logits` [n_vocab] with `previous_tokens` (what the penalties count; the caller
  // decides whether that includes the prompt) and draws the token of `position` (>= 0, the
  // absolute position of the token being generated) under `seed`. with_logprobs = false skips
  // the log-softmax over the vocabulary (logprob 0, no top_logprobs) for a caller that reports
  // neither; the token is the same either way.
  absl::StatusOr<SampledToken> Sample(std::span<const float> logits, uint64_t seed,
                                      int64_t position, std::span<const int32_t> previous_tokens,
                                      bool with_logprobs = true) const;

  // The law Sample() draws from: [n_vocab] probabilities, softmax of the processed logits over
  // the kept set (double), 0 elsewhere; one-hot on the greedy token when temperature == 0.
  // The speculative verifier computes p and q through this so both are processed identically.
  absl::StatusOr<std::vector<double>> ProcessedDistribution(
      std::span<const float> logits, std::span<const int32_t> previous_tokens) const;

 private:
  explicit Sampler(SamplingParams params) : params_(std::move(params)) {}
  SamplingParams params_;
};

}  // namespace lockstep::sampling
