// Test support: lockstep's decode path for one sequence, as the model tests drive it
// (docs/testing.md): models::Runner over a paged KV pool whose blocks are handed out in a
// scrambled order (block b of the sequence is pool block 7b mod n, so the block table is
// exercised, not an identity map), the prompt in one step (its last row's logits kept), then
// one token per step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"

namespace lockstep::testing_support {

struct Decoded {
  std::vector<int32_t> tokens;  // prompt + fed tokens
  std::vector<float> logits;    // [steps + 1, V]: positions P-1 .. P+steps-1
};

// `steps` decode steps after the prompt: step s feeds forced[s] when s < forced.size(), else the
// argmax of the previous step's logits.
inline absl::StatusOr<Decoded> EngineDecode(const models::Model& model, backend::Backend& be,
                                            const std::vector<int32_t>& prompt,
                                            const std::vector<int32_t>& forced, int64_t steps) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  models::RunnerOptions o;
  o.max_step_tokens = P;
  o.max_logit_rows = 1;
  o.block_size = 16;
  o.n_blocks = (P + steps + 15) / 16 + 3;
  if (o.n_blocks % 7 == 0) ++o.n_blocks;
  auto runner = models::Runner::Create(model, be, o);
  if (!runner.ok()) return runner.status();
  std::vector<int32_t> blocks(o.n_blocks);
  for (int64_t b = 0; b < o.n_blocks; ++b) blocks[b] = static_cast<int32_t>(b * 7 % o.n_blocks);
  Decoded d;
  d.tokens = prompt;
  std::vector<float> row;
  for (int64_t s = 0; s <= steps; ++s) {
    const int64_t start = s == 0 ? 0 : P + s - 1;
    const int64_t n = s == 0 ? P : 1;
    const int64_t need = (start + n + 15) / 16;
    models::StepEntry e{std::span<const int32_t>(d.tokens).subspan(start, n), start,
                        std::span<const int32_t>(blocks).first(need), 1};
    if (absl::Status st = (*runner)->Forward(std::span(&e, 1), &row); !st.ok()) return st;
    d.logits.insert(d.logits.end(), row.begin(), row.end());
    if (s == steps) break;
    const int32_t next = s < static_cast<int64_t>(forced.size())
                             ? forced[s]
                             : static_cast<int32_t>(std::max_element(row.begin(), row.end()) -
                                                    row.begin());
    d.tokens.push_back(next);
  }
  return d;
}

}  // namespace lockstep::testing_support
