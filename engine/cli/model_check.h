// `lockstep check --backend NAME --model M`: the model-level gate of a backend (docs/testing.md).
//
// Bitwise on the backend itself: every logits row of a sequence computed alone in one prefill
// step is the reference, and must be reproduced bit for bit when the sequence is
//   - batched with others in one prefill step (ragged, random neighbours),
//   - prefilled in chunks of 1, 7, 16 and 33 tokens,
//   - decoded one row per step in batches of B sequences at random depths (B from --batches),
//     several steps in a row, so that CUDA graphs are captured and replayed,
//   - verified as k + 1 rows (speculative verify) in a step shared with decode rows,
//   - resumed on a prefix held in another sequence's blocks (a prefix-cache hit);
// and decoded with the greedy token picked on the backend (StepEntry::greedy), B = 1, 8, 64:
// each pick must be the argmax of the reference row.
// Rows are compared through a 64-bit hash of their bytes (and their argmax), so a 128k vocabulary
// costs no memory. Against a second backend (--versus cpu): teacher-forced greedy over the
// prompts, top-1 agreement and the logit margin at every flip.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/quant/kv_format.h"

namespace lockstep::cli {

struct ModelCheckOptions {
  uint64_t seed = 1;
  std::vector<int64_t> batches = {1, 2, 3, 8, 17, 64, 256};
  int64_t max_prompt = 96;   // prompt lengths are drawn in [1, max_prompt]
  int64_t greedy_tokens = 128;
  // KV formats of the pool the lines run on (`lockstep qualify` runs them on the cell's formats;
  // each line compares the formats against themselves, docs/runtime.md).
  quant::KvFormat k_format = quant::KvFormat::kF32;
  quant::KvFormat v_format = quant::KvFormat::kF32;
};

struct ModelCheckLine {
  std::string name;
  int64_t rows = 0;      // logits rows compared
  int64_t differing = 0; // rows whose bytes differ
  std::string detail;
  bool ok() const { return rows > 0 && differing == 0; }
};

// Bitwise lines on one backend. Errors (an op failed) are returned, not lines.
absl::StatusOr<std::vector<ModelCheckLine>> CheckModelInvariance(const models::Model& model,
                                                                  backend::Backend& be,
                                                                  const ModelCheckOptions& o);

// Teacher-forced greedy: `be` generates greedily from each prompt; `versus` scores the same
// token sequence. One line per prompt: positions, top-1 agreement, the margin at each flip.
absl::StatusOr<std::vector<ModelCheckLine>> CompareGreedy(
    const models::Model& model, backend::Backend& be, backend::Backend& versus,
    const std::vector<std::vector<int32_t>>& prompts, const ModelCheckOptions& o);

}  // namespace lockstep::cli
