#include "engine/models/state_pool.h"

#include "absl/strings/str_cat.h"

namespace lockstep::models {

StatePool::StatePool(int64_t n_lanes, int64_t k_checkpoints)
    : n_lanes_(n_lanes), k_checkpoints_(k_checkpoints) {
  free_.reserve(n_lanes);
  for (int64_t l = n_lanes - 1; l >= 0; --l) free_.push_back(static_cast<int32_t>(l));
}

absl::StatusOr<int32_t> StatePool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the recurrent-state pool has no free lane (", n_lanes_, " lanes, all in use)"));
  }
  const int32_t l = free_.back();
  free_.pop_back();
  return l;
}

void StatePool::Free(int32_t lane) {
  if (lane >= 0) free_.push_back(lane);
}

}  // namespace lockstep::models
