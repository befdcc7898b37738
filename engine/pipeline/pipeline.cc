#include "engine/pipeline/pipeline.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/runner.h"
#include "engine/pipeline/mpi_link.h"

namespace lockstep::pipeline {

int LaunchRank() { return LaunchedAs().rank; }

absl::StatusOr<Pipeline> Start(const models::Model& model, backend::Backend& be, int64_t stages,
                               const std::string& split_text) {
  const Launch launch = LaunchedAs();
  Pipeline p;
  if (stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--pp-stages must be >= 1, got ", stages));
  }
  if (stages == 1) {
    if (!split_text.empty()) {
      return absl::InvalidArgumentError("--pp-split needs --pp-stages of 2 or more");
    }
    if (launch.size > 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the launcher started ", launch.size, " processes but --pp-stages is 1: pass "
          "--pp-stages ", launch.size, " (nothing runs unsplit ", launch.size, " times)"));
    }
    return p;
  }
  if (launch.size != stages) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--pp-stages ", stages, " needs ", stages, " processes; ",
        launch.size == 1 ? std::string("this one was not started by a launcher")
                         : absl::StrCat("the launcher started ", launch.size),
        ": run `mpirun -np ", stages, " lockstep ...` (docs/pipeline.md)"));
  }
  const int64_t n_layer = model.config().n_layer;
  if (split_text.empty()) {
    ASSIGN_OR_RETURN(p.split, models::BalancedSplit(model, stages));
  } else {
    ASSIGN_OR_RETURN(p.split, models::ParseSplit(split_text, n_layer, stages));
  }
  ASSIGN_OR_RETURN(p.link, ConnectMpi());
  if (p.link->size() != stages) {
    return absl::FailedPreconditionError(absl::StrCat("MPI reports ", p.link->size(),
                                                      " ranks; --pp-stages asks for ", stages));
  }
  p.transport = p.link->Describe();
  if (p.link->rank() > 0) {
    RETURN_IF_ERROR(models::RunStage(model, be, *p.link));
    p.served = true;
  }
  return p;
}

}  // namespace lockstep::pipeline
