#include "oracle/ref_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <string>
#include <vector>

#include "engine/quant/quant.h"

namespace lockstep::oracle {
namespace {

// Row r of w as floats, by the shared dequantizer.   dst: [w.cols]
// The backend interface has no error channel: a weight type without a codec is a broken
// precondition of the caller (the model loader rejects such files), so it stops the program.
void DequantizeRow(const backend::Weight& w, int64_t r, float* dst) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
  const absl::Status s = quant::Dequantize(w.type, row, w.cols, dst);
  if (!s.ok()) {
    std::fprintf(stderr, "ref backend: cannot dequantize weight '%.*s' row %lld: %s\n",
                 static_cast<int>(w.name.size()), w.name.data(), static_cast<long long>(r),
                 std::string(s.message()).c_str());
    std::abort();
  }
}

}  // namespace

// y[t, r] = sum_c W[r, c] * x[t, c].   W: [rows, cols], x: [T, cols], y: [T, rows]
void RefBackend::MatMul(const backend::Weight& w, const float* x, int64_t T, float* y) {
  std::vector<float> w_row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w, r, w_row.data());
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) acc += double{w_row[c]} * double{x[t * w.cols + c]};
      y[t * w.rows + r] = static_cast<float>(acc);
    }
  }
}

// out[t, :] = table[ids[t], :].   out: [T, cols]
void RefBackend::GetRows(const backend::Weight& table, const int32_t* ids, int64_t T,
                         float* out) {
  for (int64_t t = 0; t < T; ++t) DequantizeRow(table, ids[t], out + t * table.cols);
}

// y[t, i] = x[t, i] / sqrt(sum_i x[t, i]^2 / d + eps) * w[i].   x, y: [T, d]; w: [d] or null
void RefBackend::RmsNorm(const float* x, const float* w, int64_t T, int64_t d, float eps,
                         float* y) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * d;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < d; ++i) sum_sq += double{xt[i]} * double{xt[i]};
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(d) + double{eps});
    for (int64_t i = 0; i < d; ++i) {
      const double wi = w ? double{w[i]} : 1.0;
      y[t * d + i] = static_cast<float>(double{xt[i]} * inv_rms * wi);
    }
  }
}

// For pair i in [0, n_rot / 2) of every head: theta = pos * base^(-2i / n_rot),
//   (a, b) <- (a cos theta - b sin theta, a sin theta + b cos theta),
// where (a, b) = (x[2i], x[2i + 1]) in normal mode and (x[i], x[i + n_rot / 2]) in neox mode.
// x: [T, n_heads, head_dim]; dims n_rot..head_dim-1 are left as they are.
void RefBackend::Rope(float* x, const int32_t* pos, int64_t T, int64_t n_heads, int64_t head_dim,
                      int64_t n_rot, float freq_base, backend::RopeMode mode) {
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(pos[t]) *
                             std::pow(double{freq_base}, -2.0 * static_cast<double>(i) /
                                                             static_cast<double>(n_rot));
        const int64_t ia = mode == backend::RopeMode::kNormal ? 2 * i : i;
        const int64_t ib = mode == backend::RopeMode::kNormal ? 2 * i + 1 : i + half;
        const double a = xh[ia], b = xh[ib];
        xh[ia] = static_cast<float>(a * std::cos(theta) - b * std::sin(theta));
        xh[ib] = static_cast<float>(a * std::sin(theta) + b * std::cos(theta));
      }
    }
  }
}

// For query t, head h (kv head g = h / (n_head / n_kv_head)), over the visible keys
// j in [0, n_kv) with j <= pos[t] and (window == 0 or pos[t] - j < window):
//   s_j = scale * q[t, h, :] . k[j, g, :];  s_j = softcap * tanh(s_j / softcap) if softcap
//   out[t, h, :] = sum_j exp(s_j - max s) v[j, g, :] / sum_j exp(s_j - max s)
// A query with no visible key (only possible when pos[t] >= n_kv) gets zeros.
// q, out: [T, n_head, head_dim]; k, v: [n_kv, n_kv_head, head_dim]
void RefBackend::Attention(const float* q, const int32_t* pos, int64_t T, const float* k,
                           const float* v, int64_t n_kv, int64_t n_head, int64_t n_kv_head,
                           int64_t head_dim, const backend::AttentionParams& p, float* out) {
  const int64_t group = n_head / n_kv_head;
  std::vector<double> score(n_kv);
  std::vector<double> acc(head_dim);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t g = h / group;
      const float* qth = q + (t * n_head + h) * head_dim;
      auto visible = [&](int64_t j) {
        return j <= pos[t] && (p.window == 0 || pos[t] - j < p.window);
      };
      double max_score = -INFINITY;
      for (int64_t j = 0; j < n_kv; ++j) {
        if (!visible(j)) continue;
        const float* kj = k + (j * n_kv_head + g) * head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) dot += double{qth[d]} * double{kj[d]};
        double s = double{p.scale} * dot;
        if (p.softcap != 0.0f) s = double{p.softcap} * std::tanh(s / double{p.softcap});
        score[j] = s;
        max_score = std::max(max_score, s);
      }
      double denom = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0;
      for (int64_t j = 0; j < n_kv; ++j) {
        if (!visible(j)) continue;
        const double e = std::exp(score[j] - max_score);
        denom += e;
        const float* vj = v + (j * n_kv_head + g) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += e * double{vj[d]};
      }
      float* oth = out + (t * n_head + h) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) {
        oth[d] = denom > 0.0 ? static_cast<float>(acc[d] / denom) : 0.0f;
      }
    }
  }
}

// out[i] = act(gate[i]) * up[i].   [n]
void RefBackend::Glu(const float* gate, const float* up, int64_t n, backend::Activation act,
                     float* out) {
  const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    double a;
    if (act == backend::Activation::kSilu) {
      a = g / (1.0 + std::exp(-g));
    } else {
      a = 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)));
    }
    out[i] = static_cast<float>(a * double{up[i]});
  }
}

// out[i] = a[i] + b[i].   [n]
void RefBackend::Add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(double{a[i]} + double{b[i]});
}

// out[i] = x[i] * s.   [n]
void RefBackend::Scale(const float* x, float s, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(double{x[i]} * double{s});
}

// x[i] = cap * tanh(x[i] / cap).   [n]
void RefBackend::Softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(double{cap} * std::tanh(double{x[i]} / double{cap}));
  }
}

}  // namespace lockstep::oracle
