// Pipeline stages as processes of one `mpirun` (docs/pipeline.md): the MPI implementation of
// models::StageLink. One rank per stage; rank 0 runs the command's engine loop, the others run
// models::RunStage. Works across hosts the way Open MPI does (mpirun --host / --hostfile).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/models/stage_link.h"

namespace lockstep::pipeline {

// The world size and rank that the launcher (mpirun) gave this process, from its environment,
// without initialising MPI: {1, 0} when the process was not started by a launcher.
struct Launch {
  int size = 1, rank = 0;
};
Launch LaunchedAs();

// Initialises MPI (once per process) and returns the link over MPI_COMM_WORLD. Finalised when
// the last link is destroyed. Errors name what failed.
absl::StatusOr<std::unique_ptr<models::StageLink>> ConnectMpi();

}  // namespace lockstep::pipeline
