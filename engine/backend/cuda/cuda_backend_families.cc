// The cuda backend's Gated DeltaNet and mixture-of-experts ops (backend.h states the contracts;
// kernels/gdn.h and kernels/moe.h the kernels and their reduction orders, docs/kernels.md).
//
// The argument checks are the shared ones (step_backend.h) where they read only host values.
// Two of those read tensor contents — MoeRoute's scan for non-finite logits and MatMulExperts'
// range check of the ids — which live on the device here; the kernels cover them instead: a NaN
// logit makes that row's weights NaN (ids stay in range), and an id outside [0, n_expert) gives a
// NaN row, so neither is hidden and neither reads outside its buffers.
//
// The recurrent state is the state pool's memory as for every backend (GdnLayer: conv and ssm
// per slot, allocated by models::Runner through Allocate, so on the device); the slots and
// checkpoints of the step are read from the metadata BeginStep copied to the device.
#include <string>

#include "absl/strings/str_format.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_op_hash.h"
#include "engine/core/status.h"
#include "kernels/elementwise.h"
#include "kernels/gdn.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"

namespace lockstep::backend {
namespace {

using cuda_internal::OpHash;

absl::Status CheckIds(std::string_view op, const IntTensor& ids, int64_t T, int64_t k) {
  if ((T >= 0 && ids.rows != T) || ids.rows < 0 || ids.cols != k || k < 1 ||
      (ids.size() > 0 && ids.data == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: ids is [%d, %d]%s, want [%d, %d]", op, ids.rows, ids.cols,
        ids.data ? "" : " without data", T >= 0 ? T : ids.rows, k));
  }
  return absl::OkStatus();
}

// The kernels' T, n_seq and grid sizes are int32 where CUDA's are.
absl::Status CheckInt32(std::string_view op, std::string_view what, int64_t v) {
  if (v > 0x7fffffff) {
    return absl::UnimplementedError(
        absl::StrFormat("%s: %s = %d exceeds the kernel's 2^31 - 1", op, what, v));
  }
  return absl::OkStatus();
}

}  // namespace

kernels::GdnStepParams CudaBackend::GdnStep() const {
  kernels::GdnStepParams p;
  p.query_start = d_query_start_;
  p.positions = d_positions_;
  p.state_slots = d_state_slots_;
  p.checkpoints = d_checkpoints_;
  p.T = step().n_tokens();
  p.n_seq = static_cast<int>(step().n_seq());
  return p;
}

// ---- Gated DeltaNet ----

absl::Status CudaBackend::CausalConvSilu(Tensor x, const Weight& w, const GdnLayout& l,
                                         GdnLayer state, Tensor y) {
  constexpr std::string_view kOp = "cuda CausalConvSilu";
  RETURN_IF_ERROR(Guard(CheckGdnState(kOp, l, state)));
  const int64_t C = l.channels(), K = l.conv_kernel, T = step().n_tokens();
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "x", x, T, C)));
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "y", y, T, C)));
  RETURN_IF_ERROR(Guard(CheckF32Vector(kOp, "w", w, C, K)));
  if (K > kernels::kGdnMaxConvKernel) {
    return Guard(absl::InvalidArgumentError(absl::StrFormat(
        "%s: conv kernel %d > %d", kOp, K, kernels::kGdnMaxConvKernel)));
  }
  RETURN_IF_ERROR(Guard(CheckInt32(kOp, "n_seq", step().n_seq())));
  if (T == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(20).Mix(x).Mix(w.data).Mix(C).Mix(K)
                                                  .Mix(state.conv).Mix(l.n_slots).Mix(y).value()));
  if (!launch) return absl::OkStatus();
  return Timed("CausalConvSilu", [] { return std::string("CausalConvSilu"); }, [&] {
    return kernels::LaunchCausalConvSilu(GdnStep(), x.data, static_cast<const float*>(w.data), C,
                                         static_cast<int>(K), state.conv, y.data, stream_);
  });
}

absl::Status CudaBackend::GdnGates(Tensor a, Tensor b, const Weight& dt_bias, const Weight& ssm_a,
                                   Tensor g, Tensor beta) {
  constexpr std::string_view kOp = "cuda GdnGates";
  const int64_t H = a.cols;
  RETURN_IF_ERROR(Guard(CheckSameShape(kOp, "a", a, "b", b)));
  RETURN_IF_ERROR(Guard(CheckSameShape(kOp, "a", a, "g", g)));
  RETURN_IF_ERROR(Guard(CheckSameShape(kOp, "a", a, "beta", beta)));
  RETURN_IF_ERROR(Guard(CheckF32Vector(kOp, "dt_bias", dt_bias, 1, H)));
  RETURN_IF_ERROR(Guard(CheckF32Vector(kOp, "ssm_a", ssm_a, 1, H)));
  if (a.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(a.data, OpHash(21).Mix(a).Mix(b).Mix(dt_bias.data)
                                                  .Mix(ssm_a.data).Mix(g).Mix(beta).value()));
  if (!launch) return absl::OkStatus();
  return Timed("GdnGates", [] { return std::string("GdnGates"); }, [&] {
    return kernels::LaunchGdnGates(a.data, b.data, static_cast<const float*>(dt_bias.data),
                                   static_cast<const float*>(ssm_a.data), a.rows, H, g.data,
                                   beta.data, stream_);
  });
}

absl::Status CudaBackend::GatedDeltaRule(Tensor qkv, Tensor g, Tensor beta, const GdnLayout& l,
                                         GdnLayer state, float eps, Tensor out) {
  constexpr std::string_view kOp = "cuda GatedDeltaRule";
  RETURN_IF_ERROR(Guard(CheckGdnState(kOp, l, state)));
  const int64_t T = step().n_tokens(), C = l.channels(), Hv = l.n_v_head;
  const int64_t dk = l.head_k_dim, dv = l.head_v_dim;
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "qkv", qkv, T, C)));
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "g", g, T, Hv)));
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "beta", beta, T, Hv)));
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "out", out, T, Hv * dv)));
  // One CTA per (sequence, value head) holds the head's state [dk, dv] in shared memory.
  if (dv > 1024 || (dk * dv + 2 * dk + 2) * 4 > 227 * 1024) {
    return Guard(absl::UnimplementedError(absl::StrFormat(
        "%s: a value head's state of %d x %d floats (head_k_dim x head_v_dim) exceeds the "
        "kernel's shared memory (227 KiB) or head_v_dim exceeds 1024", kOp, dk, dv)));
  }
  RETURN_IF_ERROR(Guard(CheckInt32(kOp, "n_seq * n_v_head", step().n_seq() * Hv)));
  if (T == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch,
                   Enter(qkv.data, OpHash(22).Mix(qkv).Mix(g).Mix(beta).Mix(state.ssm)
                                       .Mix(l.n_slots).Mix(l.n_k_head).Mix(Hv).Mix(dk).Mix(dv)
                                       .Mix(l.tiled_k).Mix(eps).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  kernels::GatedDeltaRuleParams p;
  p.qkv = qkv.data;
  p.g = g.data;
  p.beta = beta.data;
  p.ssm = state.ssm;
  p.out = out.data;
  p.n_k_head = static_cast<int>(l.n_k_head);
  p.n_v_head = static_cast<int>(Hv);
  p.dk = static_cast<int>(dk);
  p.dv = static_cast<int>(dv);
  p.tiled_k = l.tiled_k;
  p.eps = eps;
  return Timed("GatedDeltaRule", [] { return std::string("GatedDeltaRule"); },
               [&] { return kernels::LaunchGatedDeltaRule(GdnStep(), p, stream_); });
}

absl::Status CudaBackend::GatedRmsNorm(Tensor x, const Weight& w, Tensor z, float eps, Tensor y) {
  constexpr std::string_view kOp = "cuda GatedRmsNorm";
  RETURN_IF_ERROR(Guard(CheckSameShape(kOp, "x", x, "z", z)));
  RETURN_IF_ERROR(Guard(CheckSameShape(kOp, "x", x, "y", y)));
  RETURN_IF_ERROR(Guard(CheckNormWeight(kOp, &w, x.cols)));
  RETURN_IF_ERROR(Guard(CheckInt32(kOp, "rows", x.rows)));
  if (x.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch,
                   Enter(x.data, OpHash(23).Mix(x).Mix(w.data).Mix(z).Mix(eps).Mix(y).value()));
  if (!launch) return absl::OkStatus();
  return Timed("GatedRmsNorm", [] { return std::string("GatedRmsNorm"); }, [&] {
    return kernels::LaunchGatedRmsNorm(x.data, static_cast<const float*>(w.data), z.data, x.rows,
                                       x.cols, eps, y.data, stream_);
  });
}

// Gemma 4's proportional RoPE: LaunchRope with the factors (theta_i / factors[i], computed in
// double as without them; docs/kernels.md "RoPE").
absl::Status CudaBackend::RopeFreqFactors(Tensor x, int64_t n_heads, int64_t head_dim,
                                          int64_t n_rot, float freq_base, RopeMode mode,
                                          const Weight& factors) {
  constexpr std::string_view kOp = "cuda RopeFreqFactors";
  RETURN_IF_ERROR(Guard(CheckRope(kOp, x, n_heads, head_dim, n_rot)));
  RETURN_IF_ERROR(Guard(CheckNormWeight(kOp, &factors, n_rot / 2)));
  if (x.rows == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(29).Mix(x).Mix(n_heads).Mix(head_dim).Mix(n_rot)
                                                  .Mix(freq_base).Mix(mode).Mix(factors.data).value()));
  if (!launch) return absl::OkStatus();
  const auto kmode = mode == RopeMode::kNormal ? kernels::RopeMode::kNormal : kernels::RopeMode::kNeox;
  return Timed("RopeFreqFactors", [] { return std::string("RopeFreqFactors"); }, [&] {
    return kernels::LaunchRope(x.data, d_positions_, x.rows, static_cast<int>(n_heads),
                               static_cast<int>(head_dim), static_cast<int>(n_rot),
                               static_cast<double>(freq_base), static_cast<const float*>(factors.data),
                               kmode, x.data, stream_);
  });
}

absl::Status CudaBackend::SplitHalves(Tensor x, int64_t m, Tensor a, Tensor b) {
  constexpr std::string_view kOp = "cuda SplitHalves";
  if (m < 1 || x.cols % (2 * m) != 0) {
    return Guard(absl::InvalidArgumentError(absl::StrFormat(
        "%s: x has %d columns, not whole groups of 2 m = %d", kOp, x.cols, 2 * m)));
  }
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "x", x, x.rows, x.cols)));
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "a", a, x.rows, x.cols / 2)));
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "b", b, x.rows, x.cols / 2)));
  if (x.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(24).Mix(x).Mix(m).Mix(a).Mix(b).value()));
  if (!launch) return absl::OkStatus();
  return Timed("SplitHalves", [] { return std::string("SplitHalves"); }, [&] {
    return kernels::LaunchSplitHalves(x.data, x.rows, x.cols / 2, m, a.data, b.data, stream_);
  });
}

// ---- mixture of experts ----

absl::Status CudaBackend::MoeRoute(Tensor logits, int64_t k, bool normalize, Tensor weights,
                                   IntTensor ids) {
  constexpr std::string_view kOp = "cuda MoeRoute";
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "logits", logits, -1, logits.cols)));
  const int64_t T = logits.rows, E = logits.cols;
  if (k < 1 || k > E) {
    return Guard(absl::InvalidArgumentError(absl::StrFormat(
        "%s: k = %d experts per token, want 1..%d (the logits' columns)", kOp, k, E)));
  }
  if (E > 2048 || k > 64) {
    return Guard(absl::UnimplementedError(absl::StrFormat(
        "%s: %d experts, %d per token; the kernel takes at most 2048 experts and 64 per token",
        kOp, E, k)));
  }
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "weights", weights, T, k)));
  RETURN_IF_ERROR(Guard(CheckIds(kOp, ids, T, k)));
  if (T == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(logits.data, OpHash(25).Mix(logits).Mix(k).Mix(normalize)
                                                       .Mix(weights).Mix(ids).value()));
  if (!launch) return absl::OkStatus();
  return Timed("MoeRoute", [] { return std::string("MoeRoute"); }, [&] {
    return kernels::LaunchMoeRoute(logits.data, T, E, k, normalize, weights.data, ids.data,
                                   stream_);
  });
}

absl::Status CudaBackend::MatMulExperts(const Weight& w, int64_t n_expert, Tensor x, IntTensor ids,
                                        Tensor y) {
  constexpr std::string_view kOp = "cuda MatMulExperts";
  RETURN_IF_ERROR(Guard(CheckWeight(kOp, w)));
  if (n_expert < 1 || w.rows % n_expert != 0) {
    return Guard(absl::InvalidArgumentError(absl::StrFormat(
        "%s: weight '%s' has %d rows, not a whole number of rows for each of %d experts", kOp,
        w.name, w.rows, n_expert)));
  }
  RETURN_IF_ERROR(Guard(CheckIds(kOp, ids, -1, ids.cols)));
  const int64_t T = ids.rows, k = ids.cols, rpe = w.rows / n_expert;
  if (x.rows != T && x.rows != T * k) {
    return Guard(absl::InvalidArgumentError(absl::StrFormat(
        "%s: x has %d rows, want T = %d or T * k = %d", kOp, x.rows, T, T * k)));
  }
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "x", x, x.rows, w.cols)));
  RETURN_IF_ERROR(Guard(CheckTensor(kOp, "y", y, T * k, rpe)));
  if (!kernels::MatmulSupportsType(static_cast<uint32_t>(w.type)) || w.cols % 32 != 0) {
    return Guard(absl::UnimplementedError(absl::StrFormat(
        "%s: weight '%s' is %s with %d columns; the kernel takes the cuda matmul's types (F32 F16 "
        "BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K IQ4_XS NVFP4) and a multiple of 32 columns",
        kOp, w.name, quant::Traits(w.type).name, w.cols)));
  }
  if (T * k == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(w.data, OpHash(26).Mix(w.data).Mix(n_expert).Mix(x)
                                                  .Mix(ids).Mix(y).value()));
  if (!launch) return absl::OkStatus();
  return Timed(
      "MatMulExperts",
      [&] {
        return absl::StrFormat("MatMulExperts %s %dx%d", quant::Traits(w.type).name, rpe, w.cols);
      },
      [&] {
        return kernels::LaunchMatmulExperts(static_cast<uint32_t>(w.type), w.data, n_expert, rpe,
                                            w.cols, ids.data, T * k, k, x.rows == T && k > 1, x.data,
                                            y.data, stream_);
      });
}

absl::Status CudaBackend::MoeCombine(Tensor y, Tensor weights, Tensor out) {
  constexpr std::string_view kOp = "cuda MoeCombine";
  RETURN_IF_ERROR(Guard(CheckMoeCombine(kOp, y, weights, out)));
  if (out.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch,
                   Enter(y.data, OpHash(27).Mix(y).Mix(weights).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  return Timed("MoeCombine", [] { return std::string("MoeCombine"); }, [&] {
    return kernels::LaunchMoeCombine(y.data, weights.data, weights.rows, weights.cols, out.cols,
                                     out.data, stream_);
  });
}

absl::Status CudaBackend::SigmoidMul(Tensor x, Tensor g, Tensor out) {
  constexpr std::string_view kOp = "cuda SigmoidMul";
  RETURN_IF_ERROR(Guard(CheckSigmoidMul(kOp, x, g, out)));
  if (x.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(28).Mix(x).Mix(g).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  return Timed("SigmoidMul", [] { return std::string("SigmoidMul"); }, [&] {
    return kernels::LaunchSigmoidMul(x.data, g.data, g.cols, x.rows, x.cols, out.data, stream_);
  });
}

}  // namespace lockstep::backend
