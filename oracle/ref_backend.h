// The ref backend: the op oracle (docs/design.md §2.1). Every op is the textbook formula as one
// scalar, single-threaded loop nest, accumulated in double and rounded to float once, at the
// output. Weights are dequantized and KV rows decoded by the shared quant code
// (engine/quant/quant.h), so the ref and every other backend use the very same float values;
// what they may differ in is only arithmetic, which engine/core/tolerances.h bounds.
//
// It registers itself as "ref" (backend::MakeBackend) from ref_backend.cc; lockstep_oracle is
// linked whole-archive so that registration is kept.
//
// It is written to be read, not to be fast: a forward of a 135M model on it takes seconds.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/backend/backend.h"
#include "engine/backend/host_backend.h"

namespace lockstep::oracle {

class RefBackend final : public backend::HostBackend {
 public:
  std::string_view name() const override { return "ref"; }

  absl::Status Embed(const backend::Weight& table, backend::Tensor out) override;
  absl::Status MatMul(const backend::Weight& w, backend::Tensor x, backend::Tensor y) override;
  absl::Status RmsNorm(backend::Tensor x, const backend::Weight* w, float eps,
                       backend::Tensor y) override;
  absl::Status Rope(backend::Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    float freq_base, backend::RopeMode mode) override;
  absl::Status RopeFreqFactors(backend::Tensor x, int64_t n_heads, int64_t head_dim,
                               int64_t n_rot, float freq_base, backend::RopeMode mode,
                               const backend::Weight& factors) override;
  absl::Status KvWrite(const backend::KvLayout& layout, backend::Tensor k, backend::Tensor v,
                       backend::KvLayer layer) override;
  absl::Status PagedAttention(backend::Tensor q, const backend::KvLayout& layout,
                              backend::KvLayer layer, int64_t n_head, int64_t n_kv_head,
                              int64_t head_dim, const backend::AttentionParams& p,
                              backend::Tensor out) override;
  absl::Status GatherRows(backend::Tensor x, backend::Tensor out) override;
  absl::Status Glu(backend::Tensor gate, backend::Tensor up, backend::Activation act,
                   backend::Tensor out) override;
  absl::Status Add(backend::Tensor a, backend::Tensor b, backend::Tensor out) override;
  absl::Status Scale(backend::Tensor x, float s, backend::Tensor out) override;
  absl::Status Softcap(backend::Tensor x, float cap) override;
  // Gated DeltaNet (ref_gdn.cc).
  absl::Status CausalConvSilu(backend::Tensor x, const backend::Weight& w,
                              const backend::GdnLayout& l, backend::GdnLayer state,
                              backend::Tensor y) override;
  absl::Status GdnGates(backend::Tensor a, backend::Tensor b, const backend::Weight& dt_bias,
                        const backend::Weight& ssm_a, backend::Tensor g,
                        backend::Tensor beta) override;
  absl::Status GatedDeltaRule(backend::Tensor qkv, backend::Tensor g, backend::Tensor beta,
                              const backend::GdnLayout& l, backend::GdnLayer state, float eps,
                              backend::Tensor out) override;
  absl::Status GatedRmsNorm(backend::Tensor x, const backend::Weight& w, backend::Tensor z,
                            float eps, backend::Tensor y) override;
  absl::Status SplitHalves(backend::Tensor x, int64_t m, backend::Tensor a,
                           backend::Tensor b) override;
  // Mixture of experts (ref_moe.cc).
  absl::Status MoeRoute(backend::Tensor logits, int64_t k, bool normalize,
                        backend::Tensor weights, backend::IntTensor ids) override;
  absl::Status MatMulExperts(const backend::Weight& w, int64_t n_expert, backend::Tensor x,
                             backend::IntTensor ids, backend::Tensor y) override;
  absl::Status MoeCombine(backend::Tensor y, backend::Tensor weights,
                          backend::Tensor out) override;
  absl::Status SigmoidMul(backend::Tensor x, backend::Tensor g, backend::Tensor out) override;
};

}  // namespace lockstep::oracle
