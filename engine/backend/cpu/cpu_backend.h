// The cpu backend: float arithmetic, vectorizable loops, a small thread pool, host memory
// (HostBackend).
//
// Bitwise invariance (docs/design.md §1: batch, chunk, threads) comes from one rule: every output
// element is computed by the same instruction sequence whatever T, the thread count, the
// element's row in the batch or the other sequences of the step. Threads only decide which rows
// (or (token, head) pairs) a worker computes; reductions are the fixed-lane dot of cpu_kernels.h
// or sequential loops over a range fixed by the op's shape (docs/backends.md).
//
// MatMul choice: float activations times the weights' exact decoded float values (the shared
// quant decoder's), decoded block by block inside the fused dot kernels (cpu_dot_kernels.h).
// llama.cpp instead quantizes activations to Q8 blocks and runs integer dots, which is faster
// but adds an activation-rounding error the ref does not have; float activations keep cpu within
// a few ulps of ref (tolerances.h: MatMulRtol) and make the cost of decoding amortise over T.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/backend/backend.h"
#include "engine/backend/host_backend.h"
#include "engine/core/threads.h"

namespace lockstep::backend {

// One caller at a time: the ops share one pool, whose ParallelFor is not re-entrant.
class CpuBackend final : public HostBackend {
 public:
  // threads: workers including the calling thread; 0 = hardware concurrency.
  explicit CpuBackend(int threads = 0) : pool_(threads) {}

  std::string_view name() const override { return "cpu"; }
  // "cpu: avx512, 2 threads": the dot kernels' ISA path chosen at run time (base, avx2, avx512;
  // LOCKSTEP_CPU_ISA forces one, cpu_dot_kernels.h).
  std::string Describe() const override;
  int threads() const { return pool_.size(); }

  absl::Status Embed(const Weight& table, Tensor out) override;
  absl::Status MatMul(const Weight& w, Tensor x, Tensor y) override;
  absl::Status RmsNorm(Tensor x, const Weight* w, float eps, Tensor y) override;
  absl::Status Rope(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot, float freq_base,
                    RopeMode mode) override;
  absl::Status RopeFreqFactors(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                               float freq_base, RopeMode mode, const Weight& factors) override;
  absl::Status KvWrite(const KvLayout& layout, Tensor k, Tensor v, KvLayer layer) override;
  absl::Status PagedAttention(Tensor q, const KvLayout& layout, KvLayer layer, int64_t n_head,
                              int64_t n_kv_head, int64_t head_dim, const AttentionParams& p,
                              Tensor out) override;
  absl::Status GatherRows(Tensor x, Tensor out) override;
  absl::Status Glu(Tensor gate, Tensor up, Activation act, Tensor out) override;
  absl::Status Add(Tensor a, Tensor b, Tensor out) override;
  absl::Status Scale(Tensor x, float s, Tensor out) override;
  absl::Status Softcap(Tensor x, float cap) override;
  // Gated DeltaNet (cpu_gdn.cc).
  absl::Status CausalConvSilu(Tensor x, const Weight& w,
                              const GdnLayout& l, GdnLayer state,
                              Tensor y) override;
  absl::Status GdnGates(Tensor a, Tensor b, const Weight& dt_bias,
                        const Weight& ssm_a, Tensor g,
                        Tensor beta) override;
  absl::Status GatedDeltaRule(Tensor qkv, Tensor g, Tensor beta,
                              const GdnLayout& l, GdnLayer state, float eps,
                              Tensor out) override;
  absl::Status GatedRmsNorm(Tensor x, const Weight& w, Tensor z,
                            float eps, Tensor y) override;
  absl::Status SplitHalves(Tensor x, int64_t m, Tensor a,
                           Tensor b) override;
  // Mixture of experts (cpu_moe.cc).
  absl::Status MoeRoute(Tensor logits, int64_t k, bool normalize, Tensor weights,
                        IntTensor ids) override;
  absl::Status MatMulExperts(const Weight& w, int64_t n_expert, Tensor x, IntTensor ids,
                             Tensor y) override;
  absl::Status MoeCombine(Tensor y, Tensor weights, Tensor out) override;
  absl::Status SigmoidMul(Tensor x, Tensor g, Tensor out) override;

 private:
  // Rope's body; factors (F32 [n_rot / 2]) divide the frequencies when given.
  absl::Status RopeImpl(std::string_view op, Tensor x, int64_t n_heads, int64_t head_dim,
                        int64_t n_rot, float freq_base, RopeMode mode, const float* factors);
  core::ThreadPool pool_;
};

}  // namespace lockstep::backend
