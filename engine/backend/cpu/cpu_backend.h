// The cpu backend: float arithmetic, vectorizable loops, a small thread pool.
//
// Bitwise invariance (DESIGN.md §1: batch, chunk, threads) comes from one rule: every output
// element is computed by the same instruction sequence whatever T, the thread count or the
// element's row in the batch. Threads only decide which rows (or (token, head) pairs) a worker
// computes; reductions are the fixed-lane dot of cpu_kernels.h or sequential loops over a range
// fixed by the op's shape (docs/backends.md).
//
// MatMul choice: float activations times the weights' exact decoded float values (the shared
// quant decoder's), decoded block by block inside the fused dot kernels (cpu_dot_kernels.h).
// llama.cpp instead
// quantizes activations to Q8 blocks and runs integer dots, which is faster but adds an
// activation-rounding error the ref does not have; float activations keep cpu within a few ulps
// of ref (tolerances.h: MatMulRtol) and make the cost of decoding amortise over T.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/backend/backend.h"
#include "engine/core/threads.h"

namespace lockstep::backend {

// One caller at a time: the ops share one pool, whose ParallelFor is not re-entrant.
class CpuBackend final : public Backend {
 public:
  // threads: workers including the calling thread; 0 = hardware concurrency.
  explicit CpuBackend(int threads = 0) : pool_(threads) {}

  std::string_view name() const override { return "cpu"; }
  int threads() const { return pool_.size(); }

  void MatMul(const Weight& w, const float* x, int64_t T, float* y) override;
  void GetRows(const Weight& table, const int32_t* ids, int64_t T, float* out) override;
  void RmsNorm(const float* x, const float* w, int64_t T, int64_t d, float eps, float* y) override;
  void Rope(float* x, const int32_t* pos, int64_t T, int64_t n_heads, int64_t head_dim,
            int64_t n_rot, float freq_base, RopeMode mode) override;
  void Attention(const float* q, const int32_t* pos, int64_t T, const float* k, const float* v,
                 int64_t n_kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                 const AttentionParams& p, float* out) override;
  void Glu(const float* gate, const float* up, int64_t n, Activation act, float* out) override;
  void Add(const float* a, const float* b, int64_t n, float* out) override;
  void Scale(const float* x, float s, int64_t n, float* out) override;
  void Softcap(float* x, int64_t n, float cap) override;

 private:
  core::ThreadPool pool_;
};

}  // namespace lockstep::backend
