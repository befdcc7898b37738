// Agreement between two logits arrays [n_positions, n_vocab]: `a` under test, `b` the reference
// (golden). Used by `lockstep compare`, the golden tests and the gates.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace lockstep::compare {

struct Stats {
  int64_t positions = 0, vocab = 0;
  int64_t nan_a = 0, nan_b = 0;  // non-finite values in each (any one fails every gate)
  double max_abs = 0;            // max |a - b|
  double nmse = 0;               // sum (a - b)^2 / sum b^2
  double max_kl = 0, mean_kl = 0;  // KL(softmax(b) || softmax(a)) per position, in nats
  int64_t top1_agree = 0;        // positions where argmax a == argmax b
  int64_t decisive = 0;          // positions whose reference top-2 margin exceeds `margin`
  int64_t decisive_agree = 0;    // ... of which argmax a == argmax b
};

// `margin`: reference logit gap (top1 - top2) above which a position counts as decisive.
absl::StatusOr<Stats> Logits(const float* a, const float* b, int64_t positions, int64_t vocab,
                             double margin);

std::string Describe(const Stats& s);

}  // namespace lockstep::compare
