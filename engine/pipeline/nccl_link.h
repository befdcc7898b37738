// Pipeline stages on GPUs (docs/pipeline.md): models::StageLink over NCCL, one process per GPU.
// Messages are staged through device buffers and moved with ncclSend/ncclRecv on the link's own
// stream; every wait polls the stream against a deadline and aborts the communicator when it
// passes, so a dead stage ends the run with a sentence instead of a hang.
// Built only with LOCKSTEP_CUDA; the two-GPU run is the nvidia-h200-x2 issue.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/models/stage_link.h"

namespace lockstep::pipeline {

// Rank `rank` of `size` on CUDA device `device`. Rank 0 writes NCCL's unique id to `id_file`
// (atomically); the other ranks wait for it at most `timeout_ms`.
absl::StatusOr<std::unique_ptr<models::StageLink>> ConnectNccl(int rank, int size, int device,
                                                               const std::string& id_file,
                                                               int64_t timeout_ms);

// One rank on one GPU: a communicator of size 1 sends `bytes` to itself and receives them back
// through device buffers; returns a line naming the NCCL version, the device and the result.
absl::StatusOr<std::string> NcclSelfTest(int device, int64_t bytes);

}  // namespace lockstep::pipeline
