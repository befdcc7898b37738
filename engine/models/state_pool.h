// Recurrent-state memory accounting (docs/models.md, "Hybrid Gated DeltaNet"): the per-sequence
// memory of a Gated DeltaNet layer is a fixed-size state (conv window + delta-rule matrix), not a
// list of KV blocks, so a hybrid model's sequence holds KV blocks (KvPool) for its attention
// layers and one state lane here for its recurrent layers. A lane is 1 + k_checkpoints slots of
// the runner's state pool (RunnerOptions::n_state_slots = n_lanes * (1 + k_checkpoints)): the
// sequence's live state, and the states after each draft position of a speculative verify step,
// from which a rejection restores the accepted one (Runner::CopyState) instead of recomputing.
// The bytes live in the backend (models::Runner owns them); this is only the bookkeeping.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::models {

class StatePool {
 public:
  StatePool(int64_t n_lanes, int64_t k_checkpoints);

  int64_t n_lanes() const { return n_lanes_; }
  int64_t n_slots() const { return n_lanes_ * (1 + k_checkpoints_); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t k_checkpoints() const { return k_checkpoints_; }

  // A free lane; ResourceExhausted (naming the pool size) when every lane is held.
  absl::StatusOr<int32_t> Allocate();
  void Free(int32_t lane);

  // The live-state slot of a lane, and its checkpoint slot for draft position i < k_checkpoints.
  int32_t StateSlot(int32_t lane) const { return lane; }
  int32_t CheckpointSlot(int32_t lane, int64_t i) const {
    return static_cast<int32_t>(n_lanes_ + lane * k_checkpoints_ + i);
  }

 private:
  int64_t n_lanes_, k_checkpoints_;
  std::vector<int32_t> free_;  // a stack; the lowest lanes are handed out first
};

}  // namespace lockstep::models
