// Logits processors: each one a plain function on a double row, applied by ProcessLogits in the
// fixed order of docs/sampling.md. All arithmetic is in double; the float logits are widened once.
//
// Shapes: every `logits` is [n_vocab] (natural-log units; -inf = the token cannot be drawn);
// every `kept` is [n_vocab], 1 = the token is in the kept set. Tokens with a -inf logit are never
// in the kept set.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling/sampling_params.h"

namespace lockstep::sampling {

// A logits row after every processor: the sampler draws argmax_{i kept} (logits[i] + Gumbel_i).
struct ProcessedLogits {
  std::vector<double> logits;  // [n_vocab] after bias, penalties and temperature
  std::vector<uint8_t> kept;   // [n_vocab] the kept set after top-k, top-p and min-p
  bool greedy = false;         // temperature == 0: `kept` is exactly the argmax token
  int32_t greedy_token = -1;   // that token when greedy, else -1
};

// The last `window` entries of `previous` (all of them when window == -1).
std::span<const int32_t> PenaltyWindow(std::span<const int32_t> previous, int32_t window);

// logits[b.token] += b.bias for each entry; a -inf bias bans the token. Ids must be in range.
absl::Status ApplyLogitBias(std::span<const LogitBias> bias, std::span<double> logits);

// For each distinct token t in `window`: logits[t] = logits[t] > 0 ? logits[t] / penalty
// : logits[t] * penalty (llama.cpp / HF; penalty > 1 discourages repeats). Ids must be in range.
absl::Status ApplyRepetitionPenalty(float penalty, std::span<const int32_t> window,
                                    std::span<double> logits);

// For each token t with count c_t > 0 in `window`:
// logits[t] -= presence * 1 + frequency * c_t (OpenAI). Ids must be in range.
absl::Status ApplyPresenceFrequencyPenalties(float presence, float frequency,
                                             std::span<const int32_t> window,
                                             std::span<double> logits);

// logits[i] /= temperature; temperature > 0 (0 means greedy and never reaches here).
void ApplyTemperature(float temperature, std::span<double> logits);

// kept[i] = logits[i] is finite (> -inf). Returns how many are kept.
int64_t KeepFinite(std::span<const double> logits, std::span<uint8_t> kept);

// The kept token with the largest logit; ties go to the lowest id. -1 when nothing is kept.
int32_t ArgmaxLowestId(std::span<const double> logits, std::span<const uint8_t> kept);

// Keeps the k kept tokens ranked first by (logit descending, id ascending): at a tie on the
// boundary the lower ids stay. k == 0 or k >= |kept| changes nothing.
void ApplyTopK(int32_t k, std::span<const double> logits, std::span<uint8_t> kept);

// Ranks the kept tokens by (probability descending, id ascending), probabilities being the
// softmax over the kept set in double, and keeps the shortest prefix whose cumulative probability
// (summed in rank order, double) is >= top_p. top_p == 1 changes nothing.
void ApplyTopP(float top_p, std::span<const double> logits, std::span<uint8_t> kept);

// Keeps the kept tokens with exp(logit - max kept logit) >= min_p (ratio to the most likely
// token, double; the boundary is kept). min_p == 0 changes nothing.
void ApplyMinP(float min_p, std::span<const double> logits, std::span<uint8_t> kept);

// Softmax over the kept set: exp(l_i - max) / sum, summed in ascending id order, in double;
// 0 outside the kept set. [n_vocab]
std::vector<double> KeptSoftmax(std::span<const double> logits, std::span<const uint8_t> kept);

// Log-softmax over the kept set, computed as (l_i - max) - log(sum) so that small probabilities
// keep their precision; -inf outside the kept set. [n_vocab]
std::vector<double> KeptLogSoftmax(std::span<const double> logits, std::span<const uint8_t> kept);

// Runs every processor in order on one row. Errors name the offending input: a NaN or +inf in
// `logits`, an id outside the vocabulary in `previous_tokens`, `logit_bias`, or a row in which
// every token is banned.
absl::StatusOr<ProcessedLogits> ProcessLogits(const SamplingParams& params,
                                              std::span<const float> logits,
                                              std::span<const int32_t> previous_tokens);

// True when ProcessLogits would change nothing but drop -inf before a greedy pick: temperature
// 0, no logit_bias, repetition_penalty 1, presence and frequency penalties 0.
bool PlainGreedy(const SamplingParams& params);

// ProcessLogits(params, logits, previous_tokens)->greedy_token for PlainGreedy(params), in one
// pass over the float row without the double copy and the mask (the same token, the same errors).
absl::StatusOr<int32_t> PlainGreedyToken(const SamplingParams& params, std::span<const float> logits,
                                         std::span<const int32_t> previous_tokens);

}  // namespace lockstep::sampling
