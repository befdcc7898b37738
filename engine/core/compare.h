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

// Agreement with a compact golden (oracle/gen_real_golden.py, golden/real/): per position a row
// [log-sum-exp of the full reference row, K token ids of its largest logits (descending), their
// K logits]. KL needs the full rows, so it is not measured here.
struct TopKStats {
  int64_t positions = 0, vocab = 0, k = 0;
  int64_t non_finite = 0;          // non-finite values in `ours` (fails every gate)
  double max_lse_abs = 0;          // max |lse(ours row) - golden lse|
  int64_t worst_lse_position = -1;
  double max_abs = 0;              // max |ours[id] - golden logit| over the golden's top-K ids
  int64_t worst_abs_position = -1, worst_abs_token = -1;
  double nmse = 0;                 // over the top-K entries of every position
  int64_t top1_agree = 0;          // argmax ours == golden's first id
  int64_t decisive = 0;            // golden top-1/top-2 gap above `margin`
  int64_t decisive_agree = 0;
  int64_t first_decisive_flip = -1;  // the first decisive position whose argmax differs
};

// ours: [positions, vocab]; golden: [positions, 1 + 2K]. Ids outside the vocabulary and shape
// mismatches are errors that name the position and the shapes.
absl::StatusOr<TopKStats> TopKGolden(const float* ours, int64_t positions, int64_t vocab,
                                     const float* golden, int64_t golden_cols, double margin);

std::string Describe(const TopKStats& s);

}  // namespace lockstep::compare
