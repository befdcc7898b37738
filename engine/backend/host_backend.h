// The memory half of the Backend interface for backends that compute on host memory (`ref`,
// `cpu`): 64-byte aligned allocations, memcpy transfers, weights used where they are mapped.
// The step metadata and the argument checks come from StepBackend, which the cuda backend
// shares, so every backend rejects the same bad calls with the same sentences.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/step_backend.h"

namespace lockstep::backend {

class HostBackend : public StepBackend {
 public:
  HostBackend() = default;
  ~HostBackend() override;  // frees what was allocated and not freed
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  absl::StatusOr<void*> Allocate(int64_t bytes, std::string_view what) override;
  void Free(void* p) override;
  absl::Status Upload(void* dst, const void* src, int64_t bytes) override;
  absl::Status Download(void* dst, const void* src, int64_t bytes) override;
  absl::Status Copy(void* dst, const void* src, int64_t bytes) override;
  absl::StatusOr<Weight> BindWeight(const Weight& host) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  // One scalar pass per row (ref and cpu alike: comparisons only, nothing to reorder).
  absl::Status GreedyTokens(Tensor logits, IntTensor out) override;

 private:
  absl::flat_hash_set<void*> allocations_;
};

}  // namespace lockstep::backend
