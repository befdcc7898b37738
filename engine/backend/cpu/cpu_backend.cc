// The row-wise and element-wise ops of the cpu backend (MatMul/GetRows: cpu_matmul.cc,
// Attention: cpu_attention.cc).
#include "engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

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
// x, y: [T, d]; w: [d] or null.
void CpuBackend::RmsNorm(const float* x, const float* w, int64_t T, int64_t d, float eps,
                         float* y) {
  pool_.ParallelFor(T, RowGrain(d), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* xt = x + t * d;
      float* yt = y + t * d;
      const float sum_sq = cpu::DotFixed(xt, xt, d);
      const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps);
      if (w) {
        for (int64_t i = 0; i < d; ++i) yt[i] = xt[i] * inv_rms * w[i];
      } else {
        for (int64_t i = 0; i < d; ++i) yt[i] = xt[i] * inv_rms;
      }
    }
  });
}

// Pair i of every head rotates by theta_i = pos * base^(-2i / n_rot). The angle, its cosine and
// sine are computed in double once per token (n_rot / 2 values shared by all heads) and rounded
// to float: a float angle would be off by ulp(pos * freq), ~1e-3 rad at pos 8192.
// x: [T, n_heads, head_dim], rotated in place; pairs as in RopeMode.
void CpuBackend::Rope(float* x, const int32_t* pos, int64_t T, int64_t n_heads, int64_t head_dim,
                      int64_t n_rot, float freq_base, RopeMode mode) {
  const int64_t half = n_rot / 2;
  // Pair i is (xh[i * step_a], xh[i * step_a + offset_b]) inside a head.
  const int64_t step_a = mode == RopeMode::kNormal ? 2 : 1;
  const int64_t offset_b = mode == RopeMode::kNormal ? 1 : half;
  std::vector<double> inv_freq(half);  // base^(-2i / n_rot)
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(double{freq_base}, -2.0 * static_cast<double>(i) /
                                                   static_cast<double>(n_rot));
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
        float* xh = x + (t * n_heads + h) * head_dim;
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
}

// out[i] = act(gate[i]) * up[i].   [n]
void CpuBackend::Glu(const float* gate, const float* up, int64_t n, Activation act, float* out) {
  constexpr float kSqrt2OverPi = static_cast<float>(0.7978845608028654);  // sqrt(2 / pi)
  pool_.ParallelFor(n, kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    if (act == Activation::kSilu) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const float g = gate[i];
        const float inner = kSqrt2OverPi * (g + 0.044715f * g * g * g);
        out[i] = 0.5f * g * (1.0f + std::tanh(inner)) * up[i];
      }
    }
  });
}

// out[i] = a[i] + b[i].   [n]
void CpuBackend::Add(const float* a, const float* b, int64_t n, float* out) {
  pool_.ParallelFor(n, kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

// out[i] = x[i] * s.   [n]
void CpuBackend::Scale(const float* x, float s, int64_t n, float* out) {
  pool_.ParallelFor(n, kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = x[i] * s;
  });
}

// x[i] = cap * tanhf(x[i] / cap).   [n]
void CpuBackend::Softcap(float* x, int64_t n, float cap) {
  pool_.ParallelFor(n, kMinElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = cap * std::tanh(x[i] / cap);
  });
}

}  // namespace lockstep::backend
