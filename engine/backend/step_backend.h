// The step half of the Backend interface, shared by every backend: BeginStep validates the
// step's metadata (every error names the field) and keeps a host copy, and the argument checks
// below let every backend (ref, cpu, cuda) reject the same bad calls with the same sentences
// before anything is launched (docs/backends.md).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/backend.h"

namespace lockstep::backend {

class StepBackend : public Backend {
 public:
  // Validates the metadata and keeps a copy for the step's ops. A device backend calls this
  // first, then copies what its kernels read.
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
  // Embed's arguments against the step: out [T, table.cols], every token a row of the table.
  absl::Status CheckEmbed(const Weight& table, const Tensor& out) const;
  // GatherRows' arguments against the step: x [T, d], out [R, d].
  absl::Status CheckGatherRows(const Tensor& x, const Tensor& out) const;

  // GreedyTokens' arguments: logits [R, V >= 1] with data, out [R, 2] with data (R may be 0).
  static absl::Status CheckGreedyTokens(std::string_view op, const Tensor& logits,
                                        const IntTensor& out);

  // RmsNorm's weight: null, or F32 with d columns and data.
  static absl::Status CheckNormWeight(std::string_view op, const Weight* w, int64_t d);
  // A Gated DeltaNet parameter (conv kernel, dt_bias, ssm_a): F32 [rows, cols] with data; `field`
  // names it in the error.
  static absl::Status CheckF32Vector(std::string_view op, std::string_view field, const Weight& w,
                                     int64_t rows, int64_t cols);
  // Rope's arguments against the step: n_rot even and <= head_dim, x [T, n_heads * head_dim].
  absl::Status CheckRope(std::string_view op, const Tensor& x, int64_t n_heads, int64_t head_dim,
                         int64_t n_rot) const;

  // A Gated DeltaNet op's layout and state against the step: a positive layout, memory, a state
  // slot per sequence inside the pool and checkpoint slots inside it (-1 = none).
  absl::Status CheckGdnState(std::string_view op, const GdnLayout& l, const GdnLayer& state) const;

  // ---- mixture of experts (backend.h); `op` names the caller ----
  // logits [T, E] finite, 1 <= k <= E, weights [T, k], ids [T, k].
  static absl::Status CheckMoeRoute(std::string_view op, const Tensor& logits, int64_t k,
                                    const Tensor& weights, const IntTensor& ids);
  // w's rows a whole number per expert, ids [T, k] inside [0, n_expert), x [T or T * k, w.cols],
  // y [T * k, w.rows / n_expert].
  static absl::Status CheckMatMulExperts(std::string_view op, const Weight& w, int64_t n_expert,
                                         const Tensor& x, const IntTensor& ids, const Tensor& y);
  // weights [T, k], y [T * k, d], out [T, d].
  static absl::Status CheckMoeCombine(std::string_view op, const Tensor& y, const Tensor& weights,
                                      const Tensor& out);
  // out the shape of x; g [x.rows, x.cols] or [x.rows, 1].
  static absl::Status CheckSigmoidMul(std::string_view op, const Tensor& x, const Tensor& g,
                                      const Tensor& out);

  // The slot that holds key j of sequence s (through the step's block table).
  int64_t KeySlot(int64_t s, int64_t j, int64_t block_size) const {
    const int64_t block = step_.block_table[s * step_.max_blocks + j / block_size];
    return block * block_size + j % block_size;
  }

 private:
  StepMeta step_;
  std::vector<int32_t> row_seq_;
  bool has_step_ = false;
};

// Bytes from the start of a KV row to the slice of kv head g (head_dim elements, whole blocks).
inline int64_t KvHeadOffset(quant::KvFormat f, int64_t g, int64_t head_dim) {
  return quant::KvRowBytes(f, g * head_dim);
}

}  // namespace lockstep::backend
