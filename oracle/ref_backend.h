// The ref backend: the op oracle (DESIGN.md §2.1). Every op is the textbook formula as one
// scalar, single-threaded loop nest, accumulated in double and rounded to float once, at the
// output. Weights are dequantized by the shared quant code (engine/quant/quant.h), so the ref
// and every other backend multiply the very same float weights; what they may differ in is
// only arithmetic, which engine/core/tolerances.h bounds.
//
// It is written to be read, not to be fast: a forward of a 135M model on it takes seconds.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/backend/backend.h"

namespace lockstep::oracle {

class RefBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return "ref"; }

  void MatMul(const backend::Weight& w, const float* x, int64_t T, float* y) override;
  void GetRows(const backend::Weight& table, const int32_t* ids, int64_t T, float* out) override;
  void RmsNorm(const float* x, const float* w, int64_t T, int64_t d, float eps, float* y) override;
  void Rope(float* x, const int32_t* pos, int64_t T, int64_t n_heads, int64_t head_dim,
            int64_t n_rot, float freq_base, backend::RopeMode mode) override;
  void Attention(const float* q, const int32_t* pos, int64_t T, const float* k, const float* v,
                 int64_t n_kv, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                 const backend::AttentionParams& p, float* out) override;
  void Glu(const float* gate, const float* up, int64_t n, backend::Activation act,
           float* out) override;
  void Add(const float* a, const float* b, int64_t n, float* out) override;
  void Scale(const float* x, float s, int64_t n, float* out) override;
  void Softcap(float* x, int64_t n, float cap) override;
};

}  // namespace lockstep::oracle
