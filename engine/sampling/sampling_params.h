// Per-request sampling parameters (OpenAI-style fields) and their validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lockstep::sampling {

// An additive bias on one token's logit; bias = -inf bans the token.
struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;
};

// Which distribution the reported logprobs describe.
enum class LogprobsMode {
  kProcessed,  // the law the token was drawn from: after every processor (OpenAI's meaning)
  kRaw,        // log-softmax of the model's logits row, before any processor
};

// Processors run in this order (docs/sampling.md): logit_bias -> repetition_penalty ->
// presence/frequency penalties -> temperature -> top_k -> top_p -> min_p.
struct SamplingParams {
  float temperature = 1.0f;           // >= 0; 0 means greedy (argmax, ties -> lowest id)
  int32_t top_k = 0;                  // >= 0; 0 disables; k >= n_vocab keeps everything
  float top_p = 1.0f;                 // (0, 1]; 1 disables
  float min_p = 0.0f;                 // [0, 1]; 0 disables; relative to the most likely token
  float repetition_penalty = 1.0f;    // > 0; 1 disables (llama.cpp / HF semantics)
  float presence_penalty = 0.0f;      // [-2, 2] (OpenAI)
  float frequency_penalty = 0.0f;     // [-2, 2] (OpenAI)
  int32_t penalty_window = -1;        // penalties see the last n previous tokens; -1: all of them
  std::vector<LogitBias> logit_bias;  // bias in [-100, 100] or -inf; each token at most once

  int32_t top_logprobs = 0;  // [0, 20]: how many alternatives to report per position
  LogprobsMode logprobs_mode = LogprobsMode::kProcessed;

  int32_t max_tokens = 256;             // >= 1: generated tokens before finish "length"
  std::vector<int32_t> stop_token_ids;  // >= 0; the stop token itself is not emitted
  std::vector<std::string> stop;        // non-empty strings; text from the match on is not emitted

  // Checks every field on its own; the error names the field and the value.
  absl::Status Validate() const;
  // Validate() plus the token ids (logit_bias, stop_token_ids) against [0, n_vocab).
  absl::Status ValidateForVocab(int32_t n_vocab) const;

  bool greedy() const { return temperature == 0.0f; }
};

}  // namespace lockstep::sampling
