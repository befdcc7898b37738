// The row-wise and element-wise ops of the cpu backend (MatMul/Embed: cpu_matmul.cc,
// KvWrite/PagedAttention: cpu_attention.cc).
#include "engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cpu/cpu_dot_kernels.h"
#include "engine/backend/cpu/cpu_kernels.h"

namespace lockstep::backend {
namespace {

// Smallest amount of element work worth waking a worker for.
constexpr int64_t kMinElementsPerChunk = 1 << 15;

int64_t RowGrain(int64_t row_elements) {
  return std::max<int64_t>(1, kMinElementsPerChunk / std::max<int64_t>(row_elements, 1));
}

}  // namespace

// y[t, i] = x[t, i] * (1 / sqrtf(ss / d + eps)) * w[i], ss = DotFixed(x[t], x[t], d).
// x, y: [n, d]; w: F32 [d] or null.
absl::Status CpuBackend::RmsNorm(Tensor x, const Weight* weight, float eps, Tensor y) {
  if (absl::Status s = CheckSameShape("cpu RmsNorm", "x", x, "y", y); !s.ok()) return s;
  const int64_t d = x.cols;
  if (absl::Status s = CheckNormWeight("cpu RmsNorm", weight, d); !s.ok()) return s;
  const float* w = weight ? static_cast<const float*>(weight->data) : nullptr;
  pool_.ParallelFor(x.rows, RowGrain(d), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* xt = x.data + t * d;
      float* yt = y.data + t * d;
      const float sum_sq = cpu::DotFixed(xt, xt, d);
      const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps);
      if (w) {
        for (int64_t i = 0; i < d; ++i) yt[i] = xt[i] * inv_rms * w[i];
      } else {
        for (int64_t i = 0; i < d; ++i) yt[i] = xt[i] * inv_rms;
      }
    }
  });
  return absl::OkStatus();
}

// Pair i of every head rotates by theta_i = pos * base^(-2i / n_rot). The angle, its cosine and
// sine are computed in double once per token (n_rot / 2 values shared by all heads) and rounded
// to float: a float angle would be off by ulp(pos * freq), ~1e-3 rad at pos 8192.
// x: [T, n_heads * head_dim], rotated in place at the step's positions; pairs as in RopeMode.
absl::Status CpuBackend::Rope(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                              float freq_base, RopeMode mode) {
  return RopeImpl("cpu Rope", x, n_heads, head_dim, n_rot, freq_base, mode, nullptr);
}

// Rope with pair i's frequency divided by factors[i] (in double, before the angle).
absl::Status CpuBackend::RopeFreqFactors(Tensor x, int64_t n_heads, int64_t head_dim,
                                         int64_t n_rot, float freq_base, RopeMode mode,
                                         const Weight& factors) {
  if (absl::Status s = CheckNormWeight("cpu RopeFreqFactors", &factors, n_rot / 2); !s.ok()) {
    return s;
  }
  return RopeImpl("cpu RopeFreqFactors", x, n_heads, head_dim, n_rot, freq_base, mode,
                  static_cast<const float*>(factors.data));
}

absl::Status CpuBackend::RopeImpl(std::string_view op, Tensor x, int64_t n_heads,
                                  int64_t head_dim, int64_t n_rot, float freq_base, RopeMode mode,
                                  const float* factors) {
  if (absl::Status s = CheckRope(op, x, n_heads, head_dim, n_rot); !s.ok()) return s;
  const int64_t T = step().n_tokens();
  const int32_t* pos = step().positions.data();
  const int64_t half = n_rot / 2;
  // Pair i is (xh[i * step_a], xh[i * step_a + offset_b]) inside a head.
  const int64_t step_a = mode == RopeMode::kNormal ? 2 : 1;
  const int64_t offset_b = mode == RopeMode::kNormal ? 1 : half;
  std::vector<double> inv_freq(half);  // base^(-2i / n_rot)
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(double{freq_base}, -2.0 * static_cast<double>(i) /
                                                   static_cast<double>(n_rot));
    if (factors != nullptr) inv_freq[i] /= double{factors[i]};
  }
  pool_.ParallelFor(T, RowGrain(n_heads * n_rot), [&](int64_t begin, int64_t end) {
    std::vector<float> cos_t(half), sin_t(half);  // [n_rot / 2]
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(pos[t]) * inv_freq[i];
        cos_t[i] = static_cast<float>(std::cos(theta));
        sin_t[i] = static_cast<float>(std::sin(theta));
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* xh = x.data + (t * n_heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          float* pa = xh + i * step_a;
          float* pb = pa + offset_b;
          const float a = *pa, b = *pb;
          *pa = a * cos_t[i] - b * sin_t[i];
          *pb = a * sin_t[i] + b * cos_t[i];
        }
      }
    }
  });
  return absl::OkStatus();
}

// out[i, :] = x[output_rows[i], :].   x: [T, d], out: [R, d]
absl::Status CpuBackend::GatherRows(Tensor x, Tensor out) {
  if (absl::Status s = CheckGatherRows(x, out); !s.ok()) return s;
  const std::vector<int32_t>& rows = step().output_rows;
  const int64_t R = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < R; ++i) {
    std::copy(x.data + rows[i] * x.cols, x.data + (rows[i] + 1) * x.cols, out.data + i * x.cols);
  }
  return absl::OkStatus();
}

// out[i] = act(gate[i]) * up[i].   [n, d]
// Element-wise in double with a polynomial exp, rounded once (cpu_act_impl.h): libm's scalar
// expm1f/tanhf were a third of the matmul time of a Gemma 3 prefill (docs/performance.md).
absl::Status CpuBackend::Glu(Tensor gate, Tensor up, Activation act, Tensor out) {
  if (absl::Status s = CheckSameShape("cpu Glu", "gate", gate, "up", up); !s.ok()) return s;
  if (absl::Status s = CheckSameShape("cpu Glu", "gate", gate, "out", out); !s.ok()) return s;
  const bool gelu = act == Activation::kGeluTanh;
  const cpu::DotIsa isa = cpu::BestDotIsa();
  pool_.ParallelFor(gate.size(), kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    cpu::GluRows(isa, gelu, gate.data + begin, up.data + begin, out.data + begin, end - begin);
  });
  return absl::OkStatus();
}

// out[i] = a[i] + b[i].   [n, d]
absl::Status CpuBackend::Add(Tensor a, Tensor b, Tensor out) {
  if (absl::Status s = CheckSameShape("cpu Add", "a", a, "b", b); !s.ok()) return s;
  if (absl::Status s = CheckSameShape("cpu Add", "a", a, "out", out); !s.ok()) return s;
  pool_.ParallelFor(a.size(), kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out.data[i] = a.data[i] + b.data[i];
  });
  return absl::OkStatus();
}

// out[i] = x[i] * s.   [n, d]
absl::Status CpuBackend::Scale(Tensor x, float s, Tensor out) {
  if (absl::Status st = CheckSameShape("cpu Scale", "x", x, "out", out); !st.ok()) return st;
  pool_.ParallelFor(x.size(), kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out.data[i] = x.data[i] * s;
  });
  return absl::OkStatus();
}

// x[i] = cap * tanhf(x[i] / cap).   [n, d]
absl::Status CpuBackend::Softcap(Tensor x, float cap) {
  if (absl::Status s = CheckTensor("cpu Softcap", "x", x, -1, x.cols); !s.ok()) return s;
  if (cap == 0.0f || !std::isfinite(cap)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cpu Softcap: cap = %g, want finite and nonzero", cap));
  }
  pool_.ParallelFor(x.size(), kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x.data[i] = cap * std::tanh(x.data[i] / cap);
  });
  return absl::OkStatus();
}

}  // namespace lockstep::backend
