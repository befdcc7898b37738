// The memory half of the Backend interface for backends that compute on host memory (`ref`,
// `cpu`): 64-byte aligned allocations, memcpy transfers, weights used where they are mapped, and
// the step metadata kept on the host after BeginStep validated it. Derived classes implement
// the ops and use the checks below, so both host backends reject the same bad calls with the
// same sentences.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace lockstep::backend {

class HostBackend : public Backend {
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

  // Validates the metadata (every error names the field) and keeps a copy for the step's ops.
  absl::Status BeginStep(const StepMeta& meta) override;

 protected:
  // The metadata of the last successful BeginStep (empty before the first).
  const StepMeta& step() const { return step_; }
  // row_seq()[t] = the sequence that owns row t of the step.   [T]
  std::span<const int32_t> row_seq() const { return row_seq_; }
  // Error unless a step has begun; `op` names the caller.
  absl::Status RequireStep(std::string_view op) const;

  // ---- shared argument checks; `op` names the caller in the error ----
  // t is [rows, cols] (rows < 0: any) with data for its elements; `field` names the argument.
  static absl::Status CheckTensor(std::string_view op, std::string_view field, const Tensor& t,
                                  int64_t rows, int64_t cols);
  // a and b have the same shape.
  static absl::Status CheckSameShape(std::string_view op, std::string_view field_a,
                                     const Tensor& a, std::string_view field_b, const Tensor& b);
  // The weight's type has a lockstep codec, its data is bound and cols is whole blocks.
  static absl::Status CheckWeight(std::string_view op, const Weight& w);
  // Formats known, kv_dim whole blocks of both formats, block_size and n_blocks positive.
  static absl::Status CheckKvLayout(std::string_view op, const KvLayout& layout);
  // KvWrite's arguments against the step: k, v [T, kv_dim], slots inside the pool.
  absl::Status CheckKvWrite(const KvLayout& layout, const Tensor& k, const Tensor& v,
                            const KvLayer& layer) const;
  // PagedAttention's arguments against the step: head shapes (head_dim whole blocks of both
  // formats, n_kv_head * head_dim == kv_dim), q/out [T, n_head * head_dim], every sequence's
  // keys inside its block table and every block id they use inside the pool.
  absl::Status CheckPagedAttention(const Tensor& q, const KvLayout& layout, const KvLayer& layer,
                                   int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                                   const Tensor& out) const;

  // The slot that holds key j of sequence s (through the step's block table).
  int64_t KeySlot(int64_t s, int64_t j, int64_t block_size) const {
    const int64_t block = step_.block_table[s * step_.max_blocks + j / block_size];
    return block * block_size + j % block_size;
  }

 private:
  absl::flat_hash_set<void*> allocations_;
  StepMeta step_;
  std::vector<int32_t> row_seq_;
  bool has_step_ = false;
};

// Bytes from the start of a KV row to the slice of kv head g (head_dim elements, whole blocks).
inline int64_t KvHeadOffset(quant::KvFormat f, int64_t g, int64_t head_dim) {
  return quant::KvRowBytes(f, g * head_dim);
}

}  // namespace lockstep::backend
