#include "engine/sampling/sampling_params.h"

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"

namespace lockstep::sampling {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// %g keeps "1.5" short and still shows nan / inf.
std::string Num(float v) { return absl::StrFormat("%g", v); }

absl::Status CheckRange(const char* field, float v, float lo, float hi, bool lo_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return absl::OkStatus();
  return Invalid(absl::StrCat(field, " must be in ", lo_open ? "(" : "[", Num(lo), ", ", Num(hi),
                              "], got ", Num(v)));
}

}  // namespace

absl::Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return Invalid(absl::StrCat("temperature must be finite and >= 0, got ", Num(temperature)));
  }
  if (top_k < 0) return Invalid(absl::StrCat("top_k must be >= 0 (0 disables), got ", top_k));
  RETURN_IF_ERROR(CheckRange("top_p", top_p, 0.0f, 1.0f, /*lo_open=*/true));
  RETURN_IF_ERROR(CheckRange("min_p", min_p, 0.0f, 1.0f, /*lo_open=*/false));
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return Invalid(
        absl::StrCat("repetition_penalty must be finite and > 0, got ", Num(repetition_penalty)));
  }
  RETURN_IF_ERROR(CheckRange("presence_penalty", presence_penalty, -2.0f, 2.0f, false));
  RETURN_IF_ERROR(CheckRange("frequency_penalty", frequency_penalty, -2.0f, 2.0f, false));
  if (penalty_window < -1) {
    return Invalid(absl::StrCat("penalty_window must be >= 0, or -1 for all previous tokens, got ",
                                penalty_window));
  }
  absl::flat_hash_set<int32_t> biased;
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const LogitBias& b = logit_bias[i];
    if (b.token < 0) {
      return Invalid(absl::StrCat("logit_bias[", i, "].token must be >= 0, got ", b.token));
    }
    const bool ban = std::isinf(b.bias) && b.bias < 0.0f;
    if (!ban && !(b.bias >= -100.0f && b.bias <= 100.0f)) {
      return Invalid(absl::StrCat("logit_bias[", i, "].bias (token ", b.token,
                                  ") must be in [-100, 100] or -inf, got ", Num(b.bias)));
    }
    if (!biased.insert(b.token).second) {
      return Invalid(absl::StrCat("logit_bias[", i, "].token ", b.token,
                                  " appears more than once in logit_bias"));
    }
  }
  if (top_logprobs < 0 || top_logprobs > 20) {
    return Invalid(absl::StrCat("top_logprobs must be in [0, 20], got ", top_logprobs));
  }
  if (logprobs_mode != LogprobsMode::kProcessed && logprobs_mode != LogprobsMode::kRaw) {
    return Invalid(absl::StrCat("logprobs_mode must be processed or raw, got ",
                                static_cast<int>(logprobs_mode)));
  }
  if (max_tokens < 1) return Invalid(absl::StrCat("max_tokens must be >= 1, got ", max_tokens));
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0) {
      return Invalid(absl::StrCat("stop_token_ids[", i, "] must be >= 0, got ", stop_token_ids[i]));
    }
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return Invalid(absl::StrCat("stop[", i, "] must not be empty"));
  }
  return absl::OkStatus();
}

absl::Status SamplingParams::ValidateForVocab(int32_t n_vocab) const {
  RETURN_IF_ERROR(Validate());
  if (n_vocab < 1) return Invalid(absl::StrCat("n_vocab must be >= 1, got ", n_vocab));
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    if (logit_bias[i].token >= n_vocab) {
      return Invalid(absl::StrCat("logit_bias[", i, "].token ", logit_bias[i].token,
                                  " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] >= n_vocab) {
      return Invalid(absl::StrCat("stop_token_ids[", i, "] ", stop_token_ids[i],
                                  " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::sampling
