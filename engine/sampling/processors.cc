#include "engine/sampling/processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status.h"

namespace lockstep::sampling {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

absl::Status CheckTokenIds(const char* what, std::span<const int32_t> ids, size_t n_vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  return absl::OkStatus();
}

// The ids of the kept tokens, ascending.
std::vector<int32_t> KeptIds(std::span<const uint8_t> kept) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i]) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

// (logit descending, id ascending): a strict total order, so which tokens survive does not
// depend on the selection algorithm.
bool RanksBefore(std::span<const double> logits, int32_t a, int32_t b) {
  if (logits[a] != logits[b]) return logits[a] > logits[b];
  return a < b;
}

}  // namespace

std::span<const int32_t> PenaltyWindow(std::span<const int32_t> previous, int32_t window) {
  if (window < 0 || static_cast<size_t>(window) >= previous.size()) return previous;
  return previous.subspan(previous.size() - static_cast<size_t>(window));
}

absl::Status ApplyLogitBias(std::span<const LogitBias> bias, std::span<double> logits) {
  for (size_t i = 0; i < bias.size(); ++i) {
    const int32_t t = bias[i].token;
    if (t < 0 || static_cast<size_t>(t) >= logits.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias[", i, "].token ", t, " is outside the vocabulary [0, ", logits.size(), ")"));
    }
    logits[t] += static_cast<double>(bias[i].bias);
  }
  return absl::OkStatus();
}

absl::Status ApplyRepetitionPenalty(float penalty, std::span<const int32_t> window,
                                    std::span<double> logits) {
  RETURN_IF_ERROR(CheckTokenIds("previous_tokens", window, logits.size()));
  if (penalty == 1.0f) return absl::OkStatus();
  const double r = penalty;
  std::vector<uint8_t> seen(logits.size(), 0);  // each distinct token is penalized once
  for (int32_t t : window) {
    if (seen[t]) continue;
    seen[t] = 1;
    logits[t] = logits[t] > 0.0 ? logits[t] / r : logits[t] * r;
  }
  return absl::OkStatus();
}

absl::Status ApplyPresenceFrequencyPenalties(float presence, float frequency,
                                             std::span<const int32_t> window,
                                             std::span<double> logits) {
  RETURN_IF_ERROR(CheckTokenIds("previous_tokens", window, logits.size()));
  if (presence == 0.0f && frequency == 0.0f) return absl::OkStatus();
  absl::flat_hash_map<int32_t, int64_t> counts;
  for (int32_t t : window) ++counts[t];
  for (const auto& [t, c] : counts) {
    logits[t] -= static_cast<double>(presence) + static_cast<double>(frequency) * c;
  }
  return absl::OkStatus();
}

void ApplyTemperature(float temperature, std::span<double> logits) {
  const double t = temperature;
  for (double& l : logits) l /= t;
}

int64_t KeepFinite(std::span<const double> logits, std::span<uint8_t> kept) {
  int64_t n = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    kept[i] = logits[i] > kNegInf ? 1 : 0;
    n += kept[i];
  }
  return n;
}

int32_t ArgmaxLowestId(std::span<const double> logits, std::span<const uint8_t> kept) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!kept[i]) continue;
    if (best < 0 || logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

void ApplyTopK(int32_t k, std::span<const double> logits, std::span<uint8_t> kept) {
  if (k <= 0) return;
  std::vector<int32_t> ids = KeptIds(kept);
  if (ids.size() <= static_cast<size_t>(k)) return;
  auto before = [&](int32_t a, int32_t b) { return RanksBefore(logits, a, b); };
  std::nth_element(ids.begin(), ids.begin() + k, ids.end(), before);
  for (size_t j = static_cast<size_t>(k); j < ids.size(); ++j) kept[ids[j]] = 0;
}

void ApplyTopP(float top_p, std::span<const double> logits, std::span<uint8_t> kept) {
  if (top_p >= 1.0f) return;
  const std::vector<double> probs = KeptSoftmax(logits, kept);
  std::vector<int32_t> ids = KeptIds(kept);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    if (probs[a] != probs[b]) return probs[a] > probs[b];
    return a < b;
  });
  const double p = top_p;
  double cumulative = 0.0;
  size_t j = 0;
  while (j < ids.size()) {
    cumulative += probs[ids[j]];
    ++j;
    if (cumulative >= p) break;
  }
  for (; j < ids.size(); ++j) kept[ids[j]] = 0;
}

void ApplyMinP(float min_p, std::span<const double> logits, std::span<uint8_t> kept) {
  if (min_p <= 0.0f) return;
  const int32_t top = ArgmaxLowestId(logits, kept);
  if (top < 0) return;
  const double max_logit = logits[top];
  const double threshold = min_p;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (kept[i] && !(std::exp(logits[i] - max_logit) >= threshold)) kept[i] = 0;
  }
}

std::vector<double> KeptSoftmax(std::span<const double> logits, std::span<const uint8_t> kept) {
  std::vector<double> p(logits.size(), 0.0);
  const int32_t top = ArgmaxLowestId(logits, kept);
  if (top < 0) return p;
  const double m = logits[top];
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!kept[i]) continue;
    p[i] = std::exp(logits[i] - m);
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  return p;
}

std::vector<double> KeptLogSoftmax(std::span<const double> logits, std::span<const uint8_t> kept) {
  std::vector<double> lp(logits.size(), kNegInf);
  const int32_t top = ArgmaxLowestId(logits, kept);
  if (top < 0) return lp;
  const double m = logits[top];
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (kept[i]) sum += std::exp(logits[i] - m);
  }
  const double log_sum = std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (kept[i]) lp[i] = (logits[i] - m) - log_sum;
  }
  return lp;
}

absl::StatusOr<ProcessedLogits> ProcessLogits(const SamplingParams& params,
                                              std::span<const float> logits,
                                              std::span<const int32_t> previous_tokens) {
  if (logits.empty()) return absl::InvalidArgumentError("logits must not be empty (n_vocab = 0)");
  RETURN_IF_ERROR(params.ValidateForVocab(static_cast<int32_t>(logits.size())));
  RETURN_IF_ERROR(CheckTokenIds("previous_tokens", previous_tokens, logits.size()));

  ProcessedLogits out;
  out.logits.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    // NaN and +inf come from a broken forward: refuse them instead of sampling around them.
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(absl::StrCat("logits[", i, "] is ",
                                                     std::isnan(logits[i]) ? "NaN" : "+inf",
                                                     "; a logits row must be finite or -inf"));
    }
    out.logits[i] = logits[i];
  }

  RETURN_IF_ERROR(ApplyLogitBias(params.logit_bias, out.logits));
  const std::span<const int32_t> window = PenaltyWindow(previous_tokens, params.penalty_window);
  RETURN_IF_ERROR(ApplyRepetitionPenalty(params.repetition_penalty, window, out.logits));
  RETURN_IF_ERROR(ApplyPresenceFrequencyPenalties(params.presence_penalty, params.frequency_penalty,
                                                  window, out.logits));

  out.kept.assign(logits.size(), 0);
  if (KeepFinite(out.logits, out.kept) == 0) {
    return absl::InvalidArgumentError(
        "no token can be drawn: every logit is -inf after logit_bias (check logit_bias bans)");
  }
  if (params.greedy()) {
    // top-k, top-p and min-p all keep the lowest-id argmax, so greedy ignores them.
    out.greedy = true;
    out.greedy_token = ArgmaxLowestId(out.logits, out.kept);
    std::fill(out.kept.begin(), out.kept.end(), 0);
    out.kept[out.greedy_token] = 1;
    return out;
  }
  ApplyTemperature(params.temperature, out.logits);
  ApplyTopK(params.top_k, out.logits, out.kept);
  ApplyTopP(params.top_p, out.logits, out.kept);
  ApplyMinP(params.min_p, out.logits, out.kept);
  return out;
}

bool PlainGreedy(const SamplingParams& params) {
  return params.greedy() && params.logit_bias.empty() && params.repetition_penalty == 1.0f &&
         params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f;
}

absl::StatusOr<int32_t> PlainGreedyToken(const SamplingParams& params, std::span<const float> logits,
                                         std::span<const int32_t> previous_tokens) {
  if (!PlainGreedy(params)) return absl::InvalidArgumentError("PlainGreedyToken: the params process the row");
  if (logits.empty()) return absl::InvalidArgumentError("logits must not be empty (n_vocab = 0)");
  RETURN_IF_ERROR(params.ValidateForVocab(static_cast<int32_t>(logits.size())));
  RETURN_IF_ERROR(CheckTokenIds("previous_tokens", previous_tokens, logits.size()));
  // ProcessLogits' checks and ArgmaxLowestId over the kept (> -inf) entries; float -> double is
  // exact, so comparing the floats orders them as the doubles.
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(absl::StrCat("logits[", i, "] is ", std::isnan(v) ? "NaN" : "+inf",
                                                     "; a logits row must be finite or -inf"));
    }
    if (v > -std::numeric_limits<float>::infinity() && (best < 0 || v > logits[best])) {
      best = static_cast<int32_t>(i);
    }
  }
  if (best < 0) {
    return absl::InvalidArgumentError(
        "no token can be drawn: every logit is -inf after logit_bias (check logit_bias bans)");
  }
  return best;
}

}  // namespace lockstep::sampling
