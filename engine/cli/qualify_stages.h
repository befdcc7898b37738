// The measuring stages of `lockstep qualify` (docs/qualify.md). Each stage measures and returns
// a JSON section of the qualification record; none of them decides anything (the policy is in
// qualify_policy.h). Errors that stop a stage (an op failed) are returned as statuses.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/quant/kv_format.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace lockstep::cli::qualify {

// Progress of a long stage: `what` done of `total` (stderr, engine/cli/cmd_qualify.cc).
using ProgressFn = std::function<void(const std::string& what, int64_t done, int64_t total)>;

struct Cell {
  const models::Model* model = nullptr;
  const tokenizer::Tokenizer* tok = nullptr;
  backend::Backend* be = nullptr;
  quant::KvFormat k = quant::KvFormat::kF32, v = quant::KvFormat::kF32;
  spec::Drafter* drafter = nullptr;            // null: a plain cell
  spec::Drafter* untrimmed_drafter = nullptr;  // a trimmed draft's source (FR-Spec A/B)
  int threads = 1;
  uint64_t seed = 1;
  ProgressFn progress;
};

// Teacher-forced scoring of `tokens` by the cell (its KV formats) and by `reference` (f32 KV),
// in chunks of `chunk` positions: per position KL(reference || cell) in nats, top-1 agreement,
// and the perplexity of both. Fills kl_mean, kl_p99, kl_max, top1, positions, ppl,
// ppl_reference, nonfinite, kl_histogram {edges, counts}.
absl::StatusOr<nlohmann::json> MeasureQuality(const Cell& cell, const models::Model& reference,
                                              const std::vector<int32_t>& tokens, int64_t chunk);

// The invariance battery lines that need no drafter: engine/cli/model_check.h's bitwise lines on
// the cell's KV formats, then a request batched with others == alone and a prefix-cache hit ==
// cold, both through the Engine (greedy and sampled). Each line: name, kind, rows, differing,
// detail, status. (The pipeline split line runs MPI ranks: engine/cli/cmd_qualify.cc.)
// `long_prompts` (two KV blocks or more each) serve the prefix-cache line.
absl::StatusOr<nlohmann::json> RunInvariance(const Cell& cell,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             const std::vector<std::vector<int32_t>>& long_prompts,
                                             const std::vector<int64_t>& batches,
                                             int64_t max_prompt, int64_t gen_tokens);

struct SpecSettings {
  int k = 4;
  int64_t tokens = 32;  // generated per prompt
  int reps = 3;         // interleaved; medians reported
  float temperature = 0.8f;  // the coupled check's sampled runs
};

// Plain vs speculative decoding on `prompts`: greedy tok/s over interleaved reps (medians,
// speedup), acceptance per draft position, and, for a trimmed draft, the FR-Spec A/B against
// its untrimmed source (docs/frspec.md's GOOD / WASH / BAD). Appends the "spec greedy == plain"
// and "spec coupled == plain sampled" lines to *invariance.
absl::StatusOr<nlohmann::json> MeasureSpec(const Cell& cell,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const SpecSettings& s, nlohmann::json* invariance);

// The reject-mode law on this cell: `samples` runs of 3 tokens in reject mode (top-k 3, K = 2,
// so two tokens go through one verify round) against the exact joint law of the 3 tokens
// computed from the target's own rows; a G-test over the paths (those with expected count < 5
// pooled). A line of kind "law" with p_value.
absl::StatusOr<nlohmann::json> CheckRejectLaw(const Cell& cell, const std::vector<int32_t>& prompt,
                                              int64_t samples);

struct ThroughputSettings {
  std::vector<int> concurrency = {1, 2, 4};
  int64_t prompt_tokens = 32, gen_tokens = 16;
  int reps = 3;
};

// Aggregate decode tok/s through the Engine at each concurrency (medians of interleaved reps),
// the host's read bandwidth measured in the same run, and the fraction of the weight wall
// (bandwidth / weight bytes read per decoded token), as `lockstep bench` reports it.
absl::StatusOr<nlohmann::json> MeasureThroughput(const Cell& cell, const ThroughputSettings& s);

}  // namespace lockstep::cli::qualify
