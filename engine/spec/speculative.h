// Speculative generation: a drafter proposes K tokens, one batched target forward over the K+1
// positions verifies them, rejected positions are rolled back in the KV cache (a block-table
// operation here: n_past moves back; nothing is copied).
//
// Guarantees (DESIGN.md §1): kGreedy output == plain greedy (Generate with temperature 0) and
// kCoupled output == plain sampled decode with the same seed, token for token, for every
// drafter and K; kReject emits each token with exactly the target's law.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/generate.h"
#include "engine/spec/drafter.h"

namespace lockstep::spec {

struct SpecOptions {
  SpecMode mode = SpecMode::kGreedy;
  int k = 4;              // draft length (fixed), or the maximum when adaptive
  bool adaptive = false;  // K per round: +1 after a fully accepted round, -1 after an early miss
};

struct SpecStats {
  int64_t rounds = 0, drafted = 0, accepted = 0, target_forwards = 0;
  std::vector<int64_t> proposed_at, accepted_at;  // per draft position i (0-based)
  double mean_accepted_length() const {  // tokens emitted per target forward
    return target_forwards > 0 ? static_cast<double>(accepted + rounds) / target_forwards : 0;
  }
};

struct SpecResult {
  runtime::GenerateResult gen;
  SpecStats stats;
};

absl::StatusOr<SpecResult> GenerateSpeculative(
    const models::Model& target, backend::Backend& be, const tokenizer::Tokenizer& tok,
    Drafter& drafter, const std::vector<int32_t>& prompt, const sampling::SamplingParams& params,
    uint64_t seed, const SpecOptions& options,
    const std::function<void(std::string_view)>& on_text);

}  // namespace lockstep::spec
