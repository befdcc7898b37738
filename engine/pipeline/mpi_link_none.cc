// The pipeline transport of a build without MPI (LOCKSTEP_MPI=OFF, e.g. the cuda preset, whose
// binary travels to machines without Open MPI): asking for stages is an error that says so.
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "engine/pipeline/mpi_link.h"

namespace lockstep::pipeline {

Launch LaunchedAs() {
  Launch l;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && absl::SimpleAtoi(v, &l.size)) break;
  }
  return l;
}

absl::StatusOr<std::unique_ptr<models::StageLink>> ConnectMpi() {
  return absl::UnimplementedError(
      "this lockstep was built without MPI (LOCKSTEP_MPI=OFF): pipeline stages need a build "
      "with it (the cpu preset)");
}

}  // namespace lockstep::pipeline
