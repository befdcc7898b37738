// Starting the pipeline stages of a command (docs/pipeline.md): `mpirun -np N lockstep <cmd>
// --pp-stages N ...` starts N copies of one command line; rank 0 runs the command, every other
// rank becomes a stage (models::RunStage) and returns when rank 0 is done.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/models/stage_link.h"

namespace lockstep::pipeline {

struct Pipeline {
  std::unique_ptr<models::StageLink> link;  // null: unsplit
  std::vector<int64_t> split;               // {0, l1, ..., n_layer}
  bool served = false;  // this process was a stage (rank > 0) and its work is done: exit 0
  std::string transport;
};

// stages == 1: no pipeline (and an error if a launcher started several processes: nothing
// silently runs unsplit N times). Otherwise the launcher must have started exactly `stages`
// processes. `split_text` ("L1,L2,...") fixes the boundaries; empty balances them by weight
// bytes. Errors name the flag.
absl::StatusOr<Pipeline> Start(const models::Model& model, backend::Backend& be, int64_t stages,
                               const std::string& split_text);

// The process's rank under the launcher (0 without one), e.g. to keep ranks > 0 quiet.
int LaunchRank();

}  // namespace lockstep::pipeline
